"""Registration of the VirtualHome ids, one per row of the task table.

Imports only :mod:`.tasks` (data), never the engine, so registering stays cheap.
"""

from __future__ import annotations

import gymnasium as gym

from .tasks import TASKS

ENTRY_POINT = "agentbench_poad.environments.virtualhome.env:VirtualHomeEnv"

#: One line per registered id, shown by `agentbench-poad envs`.
DESCRIPTIONS: dict[str, str] = {task.env_id: task.description for task in TASKS}


def register_envs() -> None:
    """Register this family's ids with gymnasium (idempotent)."""
    for task in TASKS:
        if task.env_id in gym.registry:
            continue
        gym.register(
            id=task.env_id,
            entry_point=ENTRY_POINT,
            kwargs={"task": task.name},
            max_episode_steps=task.max_episode_steps,
        )
