"""Scenarios: the scene, the action catalogue, the offered-action rules and the prompt facts.

A task row of :mod:`.tasks` names a scenario and binds its roles to nouns; everything here is
written against the roles, so every row of a scenario shares one set of rules. Object ids in
states are the role names (``"item"``, ``"appliance"``, ``"snack"``, ...), the nouns are labels.

The offered-action rules are the reference's hand-written tables (docs/reference.md sections
2.2 and 2.3), quirks included: "offered" does not mean "effective" (e.g. "put the pancake in the
microwave" is offered while the microwave is shut and then fails), and Entertainment has a dead
end and a sitting trap. Offered actions are listed in the reference's index order.
"""

from __future__ import annotations

from collections.abc import Callable

from .engine import (
    CONTAINER,
    GRABBABLE,
    IN_ROOM,
    ON,
    OPENABLE,
    SITTABLE,
    SURFACE,
    SWITCHABLE,
    Action,
    Scene,
    SceneObject,
    State,
)
from .goals import Goal, PutInsideClosed, SnackWhileWatching
from .tasks import VirtualHomeTask

KITCHEN, LIVING_ROOM, BATHROOM, BEDROOM = "kitchen", "livingroom", "bathroom", "bedroom"
#: Rooms in the order of the reference's four walk actions (indices 0-3).
WALK_ORDER = (LIVING_ROOM, KITCHEN, BATHROOM, BEDROOM)
#: Rooms in the order the prompt lists them.
PROMPT_ORDER = (KITCHEN, BATHROOM, BEDROOM, LIVING_ROOM)
ROOM_LABELS = {
    KITCHEN: "kitchen",
    LIVING_ROOM: "living room",
    BATHROOM: "bathroom",
    BEDROOM: "bedroom",
}


def _cap(text: str) -> str:
    """Upper-case the first letter only (``str.capitalize`` would write "the tv")."""
    return text[:1].upper() + text[1:]


class Scenario:
    """Base of the scenarios: one scene, its catalogue of labelled actions and a goal.

    Subclasses build ``scene``, ``goal`` and ``catalogue`` in ``__init__`` and implement
    :meth:`offered_indices` and :meth:`describe`.
    """

    scene: Scene
    goal: Goal
    #: ``(label, action)`` in the reference's index order.
    catalogue: tuple[tuple[str, Action], ...]

    def __init__(self, task: VirtualHomeTask) -> None:
        self.task = task

    # -- to implement -----------------------------------------------------------------------
    def offered_indices(self, state: State) -> list[int]:
        """Catalogue indices of the actions offered in ``state`` (ascending)."""
        raise NotImplementedError

    def describe(self, state: State) -> str:
        """The facts of the prompt before the goal clause."""
        raise NotImplementedError

    # -- shared -------------------------------------------------------------------------------
    def offered(self, state: State) -> list[str]:
        """Labels of the actions offered in ``state``."""
        return [self.catalogue[i][0] for i in self.offered_indices(state)]

    def prompt(self, state: State) -> str:
        """The full observation text: facts, goal clause and the open next-step cue."""
        goal = self.goal.instruction(self.scene)
        return f"{self.describe(state)} Your goal is to {goal}. Your next step is to"

    def other_room_walks(self, state: State) -> list[int]:
        return [i for i, room in enumerate(WALK_ORDER) if room != state.room]

    def rooms_sentence(self, state: State) -> str:
        names = [f"the {ROOM_LABELS[r]}" for r in PROMPT_ORDER]
        return (
            f"There are four rooms: {', '.join(names[:-1])} and {names[-1]}. "
            f"You are in the {ROOM_LABELS[state.room]}."
        )

    def the(self, obj: str) -> str:
        return f"the {self.scene.label(obj)}"

    def be(self, obj: str) -> str:
        return "are" if self.scene.by_name[obj].plural else "is"

    def holding_sentence(self, state: State) -> str:
        held = [self.the(o.name) for o in self.scene.objects if o.name in state.held]
        return f"You are holding {' and '.join(held)}." if held else "Your hands are empty."

    @staticmethod
    def walks(scene: Scene, *targets: str) -> list[tuple[str, Action]]:
        return [(f"walk to the {scene.label(t)}", Action("walk", (t,))) for t in targets]


def _scene_objects(task: VirtualHomeTask, specs: dict[str, dict]) -> list[SceneObject]:
    plural = set(task.plural)
    return [
        SceneObject(name=role, label=task.roles[role], plural=task.roles[role] in plural, **spec)
        for role, spec in specs.items()
    ]


class ApplianceChore(Scenario):
    """Food Preparation and its variants: put the item into the appliance and close it.

    Roles: ``item`` (grabbable, starts on the kitchen table) and ``appliance`` (openable
    container in the kitchen, closed). Catalogue (reference indices): 0-3 walk to the living
    room / kitchen / bathroom / bedroom, 4 walk to the item, 5 walk to the appliance, 6 grab the
    item, 7 put the item in the appliance, 8 open the appliance, 9 close the appliance.
    """

    def __init__(self, task: VirtualHomeTask) -> None:
        super().__init__(task)
        objects = _scene_objects(
            task,
            {
                "item": {"properties": frozenset({GRABBABLE}), "start": (IN_ROOM, KITCHEN)},
                "appliance": {"properties": frozenset({OPENABLE, CONTAINER}), "room": KITCHEN},
            },
        )
        self.scene = Scene(WALK_ORDER, objects, KITCHEN, ROOM_LABELS)
        self.goal = PutInsideClosed("item", "appliance", verb=task.goal_verb)
        item, appliance = self.the("item"), self.the("appliance")
        self.catalogue = tuple(
            self.walks(self.scene, *WALK_ORDER, "item", "appliance")
            + [
                (f"grab {item}", Action("grab", ("item",))),
                (f"put {item} in {appliance}", Action("put_in", ("item", "appliance"))),
                (f"open {appliance}", Action("open", ("appliance",))),
                (f"close {appliance}", Action("close", ("appliance",))),
            ]
        )

    def _bits(self, state: State) -> tuple[bool, bool, bool, bool, bool]:
        """(sees item, holds item, close to item, close to appliance, appliance open)."""
        sees = self.scene.visible(state, "item")
        in_kitchen = state.room == KITCHEN
        return (
            sees,
            "item" in state.held,
            sees and "item" in state.close,
            in_kitchen and "appliance" in state.close,
            in_kitchen and "appliance" in state.opened,
        )

    def offered_indices(self, state: State) -> list[int]:
        walks = self.other_room_walks(state)
        if state.room != KITCHEN:
            return walks
        sees, holds, near_item, near_appliance, is_open = self._bits(state)
        if not sees:
            extra: list[int] = []
        elif holds:
            extra = [4, 7, 8, 9] if near_appliance else [4, 5]
        elif near_item and near_appliance:
            extra = [8, 9] if is_open else [9]
        elif near_item:
            extra = [5, 6]
        elif near_appliance:
            extra = [4, 8, 9]
        else:
            extra = [4, 5]
        return walks + extra

    def describe(self, state: State) -> str:
        # The facts (and omissions) of the reference's prompt, case by case (section 2.2).
        item, appliance = self.the("item"), self.the("appliance")
        sentences = [self.rooms_sentence(state)]
        if state.room != KITCHEN:
            sentences += ["You notice nothing useful here.", self.holding_sentence(state)]
            return " ".join(sentences)
        sees, holds, near_item, near_appliance, is_open = self._bits(state)
        if sees:
            sentences.append(f"You notice {item} and {appliance}.")
        else:
            sentences.append(f"{_cap(item)} {self.be('item')} inside {appliance}.")
        if holds:
            sentences.append(
                f"You are holding {item}, and {appliance} is close to you."
                if near_appliance
                else f"You are holding {item}, but {appliance} is not close to you."
            )
        elif near_item and not near_appliance:
            sentences.append(f"Your hands are empty. {_cap(item)} {self.be('item')} close to you.")
        elif near_appliance and not near_item:
            sentences.append(f"Your hands are empty. {_cap(appliance)} is close to you.")
        elif not near_item and not near_appliance:
            sentences.append(
                f"Your hands are empty, and neither {item} nor {appliance} is close to you."
            )
        # Close to both with empty hands (the item was just put in): the reference states no
        # hand or closeness sentence here, and neither do we.
        if not sees:
            sentences.append(f"{_cap(appliance)} is closed.")
        else:
            sentences.append(f"{_cap(appliance)} is {'open' if is_open else 'not open'}.")
        return " ".join(sentences)


class SnackAndTv(Scenario):
    """Entertainment: bring the snack and the drink to the living room, TV on, sit on the sofa.

    Roles: ``snack`` (chips, on the kitchen counter), ``drink`` (milk, on the kitchen table),
    ``table`` (coffee table), ``screen`` (TV, off) and ``seat`` (sofa, facing the TV), the last
    three in the living room. Catalogue (reference indices): 0-3 room walks, 4 walk to the snack,
    5 the drink, 6 the table, 7 the screen, 8 the seat, 9 grab the snack, 10 grab the drink,
    11 put the snack on the table, 12 put the drink on the table, 13 turn on the screen, 14 turn
    it off, 15 sit on the seat, 16 stand up from the seat.
    """

    def __init__(self, task: VirtualHomeTask) -> None:
        super().__init__(task)
        objects = _scene_objects(
            task,
            {
                "snack": {"properties": frozenset({GRABBABLE}), "start": (IN_ROOM, KITCHEN)},
                "drink": {"properties": frozenset({GRABBABLE}), "start": (IN_ROOM, KITCHEN)},
                "table": {"properties": frozenset({SURFACE}), "room": LIVING_ROOM},
                "screen": {"properties": frozenset({SWITCHABLE}), "room": LIVING_ROOM},
                "seat": {
                    "properties": frozenset({SITTABLE}),
                    "room": LIVING_ROOM,
                    "faces": "screen",
                },
            },
        )
        self.scene = Scene(WALK_ORDER, objects, KITCHEN, ROOM_LABELS)
        self.goal = SnackWhileWatching(("snack", "drink"), "table", "screen", "seat")
        the = self.the
        self.catalogue = tuple(
            self.walks(self.scene, *WALK_ORDER, "snack", "drink", "table", "screen", "seat")
            + [
                (f"grab {the('snack')}", Action("grab", ("snack",))),
                (f"grab {the('drink')}", Action("grab", ("drink",))),
                (f"put {the('snack')} on {the('table')}", Action("put_on", ("snack", "table"))),
                (f"put {the('drink')} on {the('table')}", Action("put_on", ("drink", "table"))),
                (f"turn on {the('screen')}", Action("switch_on", ("screen",))),
                (f"turn off {the('screen')}", Action("switch_off", ("screen",))),
                (f"sit on {the('seat')}", Action("sit", ("seat",))),
                (f"stand up from {the('seat')}", Action("stand_up", ())),
            ]
        )

    def _near(self, state: State, obj: str) -> bool:
        return self.scene.visible(state, obj) and obj in state.close

    def _on_table(self, state: State, obj: str) -> bool:
        return state.placement(obj) == (ON, "table")

    def offered_indices(self, state: State) -> list[int]:
        walks = self.other_room_walks(state)
        if state.room == KITCHEN:
            return walks + self._kitchen_extra(state)
        if state.room != LIVING_ROOM:
            return walks
        held = state.held
        tv_on = "screen" in state.switched_on
        if "table" in state.close:
            if len(held) == 2:
                return walks + [7, 8, 11, 12]
            if held == ("drink",):
                return walks + [7, 8] + ([] if self._on_table(state, "snack") else [12])
            if held == ("snack",):
                return walks + [7, 8] + ([] if self._on_table(state, "drink") else [11])
            return walks
        if "screen" in state.close:
            return walks + ([6, 8] if tv_on else [6, 8, 13, 14])
        if "seat" in state.close:
            if "seat" in state.sat_on:  # the sitting trap: only walks, which fail while seated
                return walks
            return walks + ([6, 7, 15, 16] if tv_on else [6, 7])
        return walks + [6, 7, 8]

    def _kitchen_extra(self, state: State) -> list[int]:
        sees_snack = self.scene.visible(state, "snack")
        sees_drink = self.scene.visible(state, "drink")
        holds_snack, holds_drink = "snack" in state.held, "drink" in state.held
        near_snack, near_drink = self._near(state, "snack"), self._near(state, "drink")
        if sees_snack and sees_drink:
            if holds_snack and holds_drink:
                return []
            if holds_snack:
                return [10] if near_drink else [5]
            if holds_drink:
                return [9] if near_snack else [4]
            return [
                i
                for i, ok in (
                    (4, not near_snack),
                    (5, not near_drink),
                    (9, near_snack),
                    (10, near_drink),
                )
                if ok
            ]
        # One item is on the coffee table. The reference then offers "walk to" the *other*,
        # invisible item (a no-op): the dead end of docs/reference.md#virtualhome-entertainment.
        if sees_snack:
            return [] if holds_snack else [9] if near_snack else [5]
        if sees_drink:
            return [] if holds_drink else [10] if near_drink else [4]
        return []

    def _list_be(self, objs: list[str]) -> str:
        """``"the chips and the milk are"``, ``"the milk is"``."""
        verb = "are" if len(objs) > 1 else self.be(objs[0])
        return f"{' and '.join(self.the(o) for o in objs)} {verb}"

    def _hands(self, state: State, *, table: bool, say_empty: bool) -> list[str]:
        """What is held; with ``table``, also the other item when it lies on the table.

        The reference says nothing about empty hands near the TV or the sofa, nor that the TV
        is on then (``say_empty=False``); we keep its facts, omissions included.
        """
        held = [o for o in ("snack", "drink") if o in state.held]
        if not held:
            return ["Your hands are empty."] if say_empty else []
        sentence = f"You are holding {' and '.join(self.the(o) for o in held)}."
        if table and len(held) == 1:
            other = "drink" if held == ["snack"] else "snack"
            if self._on_table(state, other):
                sentence = (
                    f"{_cap(self._list_be([other]))} on {self.the('table')}, and you are "
                    f"holding {self.the(held[0])}."
                )
        return [sentence]

    def describe(self, state: State) -> str:
        # The facts (and omissions) of the reference's prompt, case by case (section 2.3).
        the = self.the
        sentences = [self.rooms_sentence(state)]
        if state.room == KITCHEN:
            return " ".join(sentences + self._kitchen_facts(state))
        if state.room != LIVING_ROOM:
            sentences.append("You notice nothing useful here.")
            return " ".join(sentences + self._hands(state, table=False, say_empty=True))
        table, screen, seat = the("table"), the("screen"), the("seat")
        sentences.append(f"You notice {table}, {screen} and {seat}.")
        tv_on = "screen" in state.switched_on
        if "table" in state.close:
            one_placed = len(state.held) == 1 and any(
                self._on_table(state, o) for o in ("snack", "drink")
            )
            # With one item placed and the other in hand the reference says that the TV is
            # not close (true) instead of that the table is: kept.
            sentences.append(
                f"{_cap(screen)} is not close to you."
                if one_placed
                else f"{_cap(table)} is close to you."
            )
            return " ".join(sentences + self._hands(state, table=True, say_empty=True))
        if "screen" in state.close or "seat" in state.close:
            if "screen" in state.close:
                # With the TV on the reference says that the sofa is not close (true) instead
                # of that the TV is: kept.
                sentences.append(
                    f"{_cap(seat if tv_on else screen)} is {'not ' if tv_on else ''}close to you."
                )
            elif "seat" in state.sat_on:
                sentences.append(f"You are sitting on {seat}.")
            else:
                sentences.append(f"{_cap(seat)} is close to you.")
            hands = self._hands(state, table=True, say_empty=False)
            if hands and tv_on:
                hands.insert(0, f"{_cap(screen)} is on.")
            return " ".join(sentences + hands)
        sentences.append(f"None of {table}, {screen} and {seat} is close to you.")
        return " ".join(sentences + self._hands(state, table=False, say_empty=True))

    def _kitchen_facts(self, state: State) -> list[str]:
        seen = [o for o in ("snack", "drink") if self.scene.visible(state, o)]
        if not seen:
            return ["You notice nothing useful here."]
        only = "" if len(seen) == 2 else "only "
        sentences = [f"You notice {only}{' and '.join(self.the(o) for o in seen)}."]
        free = [o for o in seen if o not in state.held]
        near = [o for o in free if o in state.close]
        if len(seen) == 2 and not state.held:
            if len(near) == 2 or not near:
                sentences.append(
                    f"{_cap(self._list_be(free))} {'' if near else 'not '}close to you."
                )
            else:  # the reference names only the close one
                sentences.append(f"{_cap(self._list_be(near))} close to you.")
            return sentences + ["Your hands are empty."]
        for o in free:
            sentences.append(
                f"{_cap(self._list_be([o]))} {'' if o in near else 'not '}close to you."
            )
        # With one item out of sight (on the coffee table) the reference omits empty hands.
        return sentences + self._hands(state, table=False, say_empty=len(seen) == 2)


#: Scenario classes by the ``scenario`` key of a task row.
SCENARIOS: dict[str, Callable[[VirtualHomeTask], Scenario]] = {
    "appliance": ApplianceChore,
    "snack_tv": SnackAndTv,
}


def build_scenario(task: VirtualHomeTask) -> Scenario:
    """The scenario of a task row."""
    try:
        factory = SCENARIOS[task.scenario]
    except KeyError:
        raise ValueError(
            f"task {task.name!r} names unknown scenario {task.scenario!r}; known: {sorted(SCENARIOS)}"
        ) from None
    return factory(task)
