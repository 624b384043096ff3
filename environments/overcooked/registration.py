"""Registration of the Overcooked ids: one ``Overcooked-<Task>-v0`` per row of the task table.

Imports only :mod:`.tasks` (data), never the engine.
"""

from __future__ import annotations

from agentbench_poad.environments.overcooked.tasks import TASKS
from agentbench_poad.registration import EnvFamily, TaskRow, register_family

#: The leaderboard's success rule (record text): the env reports ``info["success"]``, True once
#: the right dish is served (docs/reference.md#overcooked-step-rules and #overcooked-rewards: the correct delivery ends the episode). A
#: positive return is not enough: chopping a recipe food alone earns +0.2.
SUCCESS_RULE = "right dish delivered (info['success'])"

FAMILY = EnvFamily(
    name="overcooked",
    id_prefix="Overcooked",
    entry_point="agentbench_poad.environments.overcooked.env:OvercookedEnv",
    version=0,
    actions="restricted",
    metric="return",
    success_rule=SUCCESS_RULE,
    discount=0.99,  # the evaluation protocol's γ: the paper preset's (Appendix J, tables 10-12)
)

#: The task table as registration rows. No max_episode_steps: the env's own 200-tick rule ends
#: (truncates) episodes.
ROWS: tuple[TaskRow, ...] = tuple(
    TaskRow(
        name=name, kwargs={"task": name}, description=task.description, paper_name=task.paper_name
    )
    for name, task in TASKS.items()
)

#: One line per registered id, shown by `agentbench-poad envs`.
DESCRIPTIONS: dict[str, str] = {
    f"{FAMILY.id_prefix}-{row.name}-v{FAMILY.version}": row.description for row in ROWS
}


def register_envs() -> tuple[str, ...]:
    """Register this family's ids with gymnasium (idempotent); returns them."""
    return register_family(FAMILY, ROWS)
