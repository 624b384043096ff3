"""The Overcooked family: one kitchen engine, tasks as data, PettingZoo + gymnasium APIs.

* :func:`parallel_env` (PettingZoo ``ParallelEnv``, the native multi-chef form);
* :class:`OvercookedEnv` (gymnasium, one chef; a view of the parallel env);
* :data:`TASKS` (the task table the registration reads).

Names are loaded on first use so that the gymnasium registration, which imports
``.registration`` (and therefore this package), never imports the engine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY = {
    "parallel_env": "agentbench_poad.environments.overcooked.parallel",
    "OvercookedParallelEnv": "agentbench_poad.environments.overcooked.parallel",
    "OvercookedEnv": "agentbench_poad.environments.overcooked.env",
    "KitchenEngine": "agentbench_poad.environments.overcooked.engine",
    "TASKS": "agentbench_poad.environments.overcooked.tasks",
    "get_task": "agentbench_poad.environments.overcooked.tasks",
}

__all__ = list(_LAZY)

if TYPE_CHECKING:  # pragma: no cover
    # ruff: noqa: F401 - names re-exported lazily through __getattr__
    from agentbench_poad.environments.overcooked.engine import KitchenEngine
    from agentbench_poad.environments.overcooked.env import OvercookedEnv
    from agentbench_poad.environments.overcooked.parallel import (
        OvercookedParallelEnv,
        parallel_env,
    )
    from agentbench_poad.environments.overcooked.tasks import TASKS, get_task


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
