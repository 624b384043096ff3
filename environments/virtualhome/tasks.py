"""The VirtualHome task table: every registered chore is one row of :data:`TASKS`.

This module is pure data (no engine import) so that registration stays cheap. A row names a
*scenario* (the scene, its action catalogue and its offered-action rules, see
:mod:`.scenarios`) and binds the scenario's roles to nouns. A new chore on an existing scenario
is a few lines here, e.g. a banana heated in the microwave::

    VirtualHomeTask(
        name="Banana",
        scenario="appliance",
        roles={"item": "banana", "appliance": "microwave"},
        description="...",
        shortest_plan=6,
    )

The two scenarios reproduce the reference tasks of docs/reference.md#virtualhome:

* ``appliance``: Food Preparation (put the pancake into the microwave and close it) and the
  ADRL generalisation variants, which keep its dynamics and offered-action rules and only swap
  the nouns (section 2.4);
* ``snack_tv``: Entertainment (chips and milk to the living room, TV on, sit on the sofa).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: The reference's episode limit (``max_episode_length`` of the ADRL wrapper).
MAX_EPISODE_STEPS = 50


@dataclass(frozen=True)
class VirtualHomeTask:
    """One registered chore.

    Attributes:
        name: the task part of the id, ``VirtualHome-<name>-v0``.
        scenario: key of :data:`agentbench_poad.environments.virtualhome.scenarios.SCENARIOS`.
        roles: the scenario's roles bound to nouns (``{"item": "pancake", ...}``); a noun is
            also the object's label in prompts and action labels.
        plural: nouns that take plural verbs (``"the dishes are"``).
        goal_verb: the verb of the goal clause (``appliance`` scenario only). The reference keeps
            "heat up" even for dishes and clothes (docs/reference.md#quirks); so do we.
        description: one line for ``agentbench-poad envs``.
        shortest_plan: length of the shortest successful plan under the offered actions
            (docs/reference.md sections 2.2-2.4); the oracle tests check it.
        max_episode_steps: the ``TimeLimit`` of the registration (the reference's 50).
        paper_name: the task's name in the POAD paper, or None.
        paper_tables: the paper's tables that list the task; Table 1 (generalisation from Food
            Preparation) has the tasks in the order of this table's rows.
    """

    name: str
    scenario: str
    roles: Mapping[str, str]
    description: str
    shortest_plan: int
    plural: tuple[str, ...] = ()
    goal_verb: str = "heat up"
    max_episode_steps: int = MAX_EPISODE_STEPS
    paper_name: str | None = None
    paper_tables: tuple[str, ...] = ()

    @property
    def env_id(self) -> str:
        return f"VirtualHome-{self.name}-v0"


def _appliance(
    name: str, item: str, appliance: str, what: str, paper_name: str, plural: bool = False
) -> VirtualHomeTask:
    # Food Preparation and every variant are columns of the paper's Table 1.
    return VirtualHomeTask(
        name=name,
        scenario="appliance",
        roles={"item": item, "appliance": appliance},
        plural=(item,) if plural else (),
        shortest_plan=6,
        description=f"{what}: put the {item} into the {appliance} and close it "
        f"(4 rooms, 10 macro-actions, sparse +1).",
        paper_name=paper_name,
        paper_tables=("Table 1",),
    )


TASKS: tuple[VirtualHomeTask, ...] = (
    _appliance(
        "FoodPreparation", "pancake", "microwave", "Food Preparation (TWOSOME)", "Food Preparation"
    ),
    VirtualHomeTask(
        name="Entertainment",
        scenario="snack_tv",
        roles={
            "snack": "chips",
            "drink": "milk",
            "table": "coffee table",
            "screen": "TV",
            "seat": "sofa",
        },
        plural=("chips",),
        shortest_plan=11,
        description="Entertainment (TWOSOME): chips and milk to the living room, TV on, sit on "
        "the sofa (4 rooms, 17 macro-actions, sparse +1; has a dead end and a sitting trap).",
        paper_name="Entertainment",
    ),
    # ADRL's generalisation variants (docs/reference.md#virtualhome-variants): Food Preparation's
    # dynamics and offered-action rules, only the nouns change.
    _appliance("Cheese", "cheese", "microwave", "Food Preparation variant", "Cheese"),
    _appliance("Hamburger", "hamburger", "microwave", "Food Preparation variant", "Hamburger"),
    _appliance("ApplePie", "apple pie", "microwave", "Food Preparation variant", "Apple Pie"),
    _appliance("Pizza", "pizza", "microwave", "Food Preparation variant", "Pizza"),
    _appliance(
        "WashingPlate",
        "dishes",
        "dishwasher",
        "Food Preparation variant",
        "Washing Plate",
        plural=True,
    ),
    _appliance(
        "Laundry", "clothes", "washing machine", "Food Preparation variant", "Laundry", plural=True
    ),
)

#: Rows by task name.
TASKS_BY_NAME: dict[str, VirtualHomeTask] = {task.name: task for task in TASKS}
