"""The environment families of agentbench-poad (import name ``agentbench_poad.environments``).

Each family has one engine and one gymnasium entry point; its tasks are rows of a data table and
its ``registration.register_envs`` hands them to
:func:`agentbench_poad.registration.register_family`, which registers one id
``<Family>-<Task>-v<N>`` per row. Registration imports only the task tables, never an engine, so
``import agentbench_poad`` (which registers every id) stays fast.
"""

from __future__ import annotations

from agentbench_poad.registration import BENCHMARK_FAMILIES as FAMILIES
from agentbench_poad.registration import env_facts, register_envs, registered_ids

__all__ = ["FAMILIES", "describe", "register_envs", "registered_ids"]


def describe(env_id: str) -> str:
    """The one-line description of a registered id (``agentbench-poad envs`` prints it)."""
    return env_facts(env_id).description
