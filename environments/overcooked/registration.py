"""Registration of the Overcooked ids: one id per row of the task table.

Imports only :mod:`.tasks` (data), never the engine.
"""

from __future__ import annotations

import gymnasium as gym

from agentbench_poad.environments.overcooked.tasks import TASKS

ENTRY_POINT = "agentbench_poad.environments.overcooked.env:OvercookedEnv"
VERSION = 0

#: One line per registered id, shown by `agentbench-poad envs`.
DESCRIPTIONS: dict[str, str] = {
    f"Overcooked-{name}-v{VERSION}": task.description for name, task in TASKS.items()
}


def register_envs() -> None:
    """Register this family's ids with gymnasium (idempotent)."""
    for name in TASKS:
        env_id = f"Overcooked-{name}-v{VERSION}"
        if env_id in gym.registry:
            continue
        # No max_episode_steps: the env's own 200-tick rule ends (truncates) episodes.
        gym.register(id=env_id, entry_point=ENTRY_POINT, kwargs={"task": name})
