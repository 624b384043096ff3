"""agentbench-poad: text environments, reference agents and a leaderboard for RL-trained LLM agents.

Importing this package registers every environment id with gymnasium (Gymnasium 1.x practice,
as Minigrid does)::

    import gymnasium as gym
    import agentbench_poad  # registers the ids

    gym.register_envs(agentbench_poad)  # optional: tells linters the import is used
    env = gym.make("Overcooked-TomatoSalad-v0")

or, with no import of ours, ``gym.make("agentbench_poad:Overcooked-TomatoSalad-v0")`` (gymnasium
imports the module before the ``:`` first). ``import gymnasium`` alone registers nothing.

Importing this package is cheap: registration reads the task tables only (no engine, no torch,
no docker connection), and public names are loaded on first use (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agentbench_poad.registration import (
    EnvFacts,
    EnvFamily,
    TaskRow,
    env_facts,
    paper_layout,
    register_envs,
    register_family,
    registered_ids,
)
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

__all__ = [
    *_LAZY,
    "EnvFacts",
    "EnvFamily",
    "TaskRow",
    "__version__",
    "env_facts",
    "paper_layout",
    "register_envs",
    "register_family",
    "registered_ids",
]

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


# Gymnasium 1.x practice (as Minigrid does): importing the package registers every id, so
# `import agentbench_poad; gym.make(id)` and `gym.make("agentbench_poad:<id>")` both work.
register_envs()
