"""agentbench-poad: text environments, reference agents and a leaderboard for RL-trained LLM agents.

Importing this package is cheap: public names are loaded on first use (PEP 562), so the
gymnasium registration hook can import it while gymnasium itself is still importing, and torch,
docker and the environment families are only imported by the code that needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agentbench_poad.version import __version__

_LAZY = {
    "Agent": "agentbench_poad.agents",
    "act_batch": "agentbench_poad.agents",
    "check_text_env": "agentbench_poad.checker",
    "TextEnvCheckError": "agentbench_poad.checker",
    "TextEnv": "agentbench_poad.core",
    "text_space": "agentbench_poad.core",
    "AgentBenchError": "agentbench_poad.errors",
    "DependencyNotInstalled": "agentbench_poad.errors",
}

__all__ = [*_LAZY, "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    # ruff: noqa: F401 - re-exported lazily through __getattr__
    from agentbench_poad.agents import Agent, act_batch
    from agentbench_poad.checker import TextEnvCheckError, check_text_env
    from agentbench_poad.core import TextEnv, text_space
    from agentbench_poad.errors import AgentBenchError, DependencyNotInstalled


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agentbench_poad' has no attribute {name!r}")
