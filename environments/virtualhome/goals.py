"""Goals: each one writes the instruction of the prompt and checks success on the state.

Keeping both in one object (as BabyAI's verifiers do) means the prompt and the reward cannot
drift apart: the words the agent reads come from the same roles that :meth:`achieved` tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .engine import INSIDE, ON, Scene, State


class Goal(Protocol):
    """What a task asks for."""

    def instruction(self, scene: Scene) -> str:
        """The goal clause of the prompt (no final full stop)."""
        ...

    def achieved(self, scene: Scene, state: State) -> bool:
        """Whether ``state`` completes the task (reward +1, episode ends)."""
        ...


@dataclass(frozen=True)
class PutInsideClosed:
    """Put ``item`` into ``appliance`` and shut it, while in the appliance's room.

    The reference checks "in the kitchen and the pancake is not visible", which with its rules
    means exactly this (docs/reference.md#virtualhome-food-preparation). The appliance is never switched on.
    """

    item: str
    appliance: str
    verb: str = "heat up"

    def instruction(self, scene: Scene) -> str:
        return f"{self.verb} the {scene.label(self.item)} in the {scene.label(self.appliance)}"

    def achieved(self, scene: Scene, state: State) -> bool:
        return (
            state.placement(self.item) == (INSIDE, self.appliance)
            and self.appliance not in state.opened
            and state.room == scene.room_of(state, self.appliance)
        )


@dataclass(frozen=True)
class SnackWhileWatching:
    """Sit facing the switched-on ``screen`` with every item at hand or on the ``table``.

    An item counts when the agent sees it and is close to it (holding counts) or when it lies on
    the table (docs/reference.md#virtualhome-entertainment).
    """

    items: tuple[str, ...]
    table: str
    screen: str
    seat: str

    def instruction(self, scene: Scene) -> str:
        items = " and the ".join(scene.label(i) for i in self.items)
        return f"enjoy the {items} while watching {scene.label(self.screen)}"

    def achieved(self, scene: Scene, state: State) -> bool:
        if not (
            state.room == scene.room_of(state, self.screen)
            and self.screen in state.facing
            and self.screen in state.switched_on
            and self.seat in state.sat_on
        ):
            return False
        return all(
            (i in state.close and scene.visible(state, i)) or state.placement(i) == (ON, self.table)
            for i in self.items
        )
