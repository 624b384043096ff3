"""Registration of the VirtualHome ids, one ``VirtualHome-<Task>-v0`` per row of the task table.

Imports only :mod:`.tasks` (data), never the engine, so registering stays cheap.
"""

from __future__ import annotations

from agentbench_poad.environments.virtualhome.tasks import TASKS
from agentbench_poad.registration import EnvFamily, TaskRow, register_family

FAMILY = EnvFamily(
    name="virtualhome",
    id_prefix="VirtualHome",
    entry_point="agentbench_poad.environments.virtualhome.env:VirtualHomeEnv",
    version=0,
    actions="restricted",
    metric="return",
    discount=0.95,  # the evaluation protocol's γ: the paper preset's (Appendix J, tables 13-15)
)

#: The task table as registration rows.
ROWS: tuple[TaskRow, ...] = tuple(
    TaskRow(
        name=task.name,
        kwargs={"task": task.name},
        description=task.description,
        max_episode_steps=task.max_episode_steps,
        paper_name=task.paper_name,
        paper_tables=task.paper_tables,
    )
    for task in TASKS
)

#: One line per registered id, shown by `agentbench-poad envs`.
DESCRIPTIONS: dict[str, str] = {
    f"{FAMILY.id_prefix}-{row.name}-v{FAMILY.version}": row.description for row in ROWS
}


def register_envs() -> tuple[str, ...]:
    """Register this family's ids with gymnasium (idempotent); returns them."""
    return register_family(FAMILY, ROWS)
