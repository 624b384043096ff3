"""A compact scene-graph engine with VirtualHome's macro-action semantics.

The reference environments run VirtualHome's symbolic *evolving-graph* executor on a 358-node
graph (docs/reference.md#virtualhome-simulator). Only a handful of nodes matter to the tasks, so this
engine keeps just those: the rooms, and the objects a task touches with their properties
(grabbable, openable, container, surface, switchable, sittable) and states (open, on, where each
object is, what the agent holds, sits on, faces and is close to).

Every macro-action is a pure function ``State -> State | None``: it checks its preconditions
against the old state and either builds a complete new state or returns ``None`` (the action
failed and nothing changed). States are frozen, so a state is never half-updated, and they are
hashable, so planners and tests can search the state space.

Rules (checked against section 2.7 of the spec by exhaustive search in the tests):

* **Visibility** (partial observation): the agent sees what it holds, and the objects of its
  current room except those inside a closed container. An action naming an object it does not
  see fails.
* **Walk** to a room or a visible object. Fails while sitting. The close set restarts from the
  held objects plus the target, the target's container or surface, and what lies *inside* the
  target (not what lies *on* it); facing is cleared. Each held object's recorded room becomes
  the room the agent was in *before* the walk: the graph moves held objects one walk late, so
  "walk to" a held object goes to its stale recorded room.
* **Grab** a visible grabbable object that is close (or whose container/surface is close) with a
  free hand: it is held, recorded in the current room, and it and its support become close.
* **Put in / put on**: the held object goes into an (open) container / onto a surface that is
  close; the close set is unchanged.
* **Open / close / switch on / switch off**: a close object, a free hand, and the opposite state.
* **Sit** on a close sittable object when not sitting: sitting, the "sat on" relation (never
  cleared, as in the reference) and facing what the seat faces. **Stand up** ends sitting only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

# Object properties.
GRABBABLE = "grabbable"
OPENABLE = "openable"
CONTAINER = "container"
SURFACE = "surface"
SWITCHABLE = "switchable"
SITTABLE = "sittable"

# Placement kinds of movable objects: (kind, where).
IN_ROOM = "room"
INSIDE = "inside"
ON = "on"
HELD = "held"

Placement = tuple[str, str]


@dataclass(frozen=True)
class SceneObject:
    """A node of the scene graph.

    Attributes:
        name: the node's id in states and actions (also its label unless ``label`` is set).
        properties: subset of the property constants of this module.
        room: the room of a fixed object (appliances, furniture); ``None`` for movable ones.
        start: the initial placement of a movable object, e.g. ``(IN_ROOM, "kitchen")``.
        label: the noun used in text (``"apple pie"``); defaults to ``name``.
        plural: the label takes plural verbs.
        faces: for seats, the object one faces when sitting on it.
    """

    name: str
    properties: frozenset[str] = frozenset()
    room: str | None = None
    start: Placement | None = None
    label: str = ""
    plural: bool = False
    faces: str | None = None

    def __post_init__(self) -> None:
        if (self.room is None) == (self.start is None):
            raise ValueError(
                f"object {self.name!r}: give exactly one of room= (fixed) or start= (movable)"
            )
        if not self.label:
            object.__setattr__(self, "label", self.name)

    @property
    def movable(self) -> bool:
        return self.start is not None


@dataclass(frozen=True)
class State:
    """The full, hashable state of a scene (everything an action can change).

    Attributes:
        room: the agent's room.
        placements: ``(object, placement)`` of every movable object, sorted by object.
        recorded_rooms: ``(object, room)`` for each held object: the room the graph still files
            it under (one walk late).
        close: objects the agent is close to.
        opened: openable objects that are open.
        switched_on: switchable objects that are on.
        sitting: whether the agent sits.
        sat_on: seats the agent has sat on (the graph never removes this relation).
        facing: objects the agent faces.
    """

    room: str
    placements: tuple[tuple[str, Placement], ...]
    recorded_rooms: tuple[tuple[str, str], ...] = ()
    close: frozenset[str] = frozenset()
    opened: frozenset[str] = frozenset()
    switched_on: frozenset[str] = frozenset()
    sitting: bool = False
    sat_on: frozenset[str] = frozenset()
    facing: frozenset[str] = frozenset()

    def __hash__(self) -> int:
        # States are dictionary keys in planners and the env's memo; hash once.
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(
                (self.room, self.placements, self.recorded_rooms, self.close, self.opened,
                 self.switched_on, self.sitting, self.sat_on, self.facing)
            )  # fmt: skip
            object.__setattr__(self, "_hash", cached)
        return cached

    def placement(self, obj: str) -> Placement | None:
        """Where a movable object is (``None`` for fixed objects)."""
        for name, where in self.placements:
            if name == obj:
                return where
        return None

    @property
    def held(self) -> tuple[str, ...]:
        return tuple(name for name, (kind, _) in self.placements if kind == HELD)

    def with_placement(self, obj: str, where: Placement) -> State:
        placements = tuple((n, where if n == obj else p) for n, p in self.placements)
        return replace(self, placements=placements)


@dataclass(frozen=True)
class Action:
    """A macro-action: a verb and its objects (``Action("put_in", ("pancake", "microwave"))``).

    ``walk`` takes one room or object; ``stand_up`` takes none.
    """

    verb: str
    args: tuple[str, ...] = ()


@dataclass
class Scene:
    """Rooms and objects, and the macro-action semantics over :class:`State`.

    Args:
        rooms: room ids; ``room_labels`` gives their text (``"livingroom" -> "living room"``).
        objects: the scene's objects.
        start_room: the agent's initial room.
        hands: how many objects the agent can hold.
    """

    rooms: Sequence[str]
    objects: Sequence[SceneObject]
    start_room: str
    room_labels: Mapping[str, str] = field(default_factory=dict)
    hands: int = 2

    def __post_init__(self) -> None:
        self.by_name: dict[str, SceneObject] = {o.name: o for o in self.objects}
        if len(self.by_name) != len(self.objects) or set(self.by_name) & set(self.rooms):
            raise ValueError("object and room names must be unique")
        for obj in self.objects:
            for ref in (obj.room, obj.start[1] if obj.start else None, obj.faces):
                if ref is not None and ref not in self.by_name and ref not in self.rooms:
                    raise ValueError(f"object {obj.name!r} refers to unknown {ref!r}")
        if self.start_room not in self.rooms:
            raise ValueError(f"start_room {self.start_room!r} is not one of {list(self.rooms)}")

    # -- queries ------------------------------------------------------------------------------
    def initial_state(self) -> State:
        placements = tuple(sorted((o.name, o.start) for o in self.objects if o.start is not None))
        return State(room=self.start_room, placements=placements)

    def label(self, name: str) -> str:
        """The text of a room or object."""
        if name in self.by_name:
            return self.by_name[name].label
        return self.room_labels.get(name, name)

    def room_of(self, state: State, obj: str) -> str:
        """The room the graph files ``obj`` under (a held object: its recorded room)."""
        where = state.placement(obj)
        if where is None:
            return self.by_name[obj].room  # type: ignore[return-value]
        kind, ref = where
        if kind == IN_ROOM:
            return ref
        if kind == HELD:
            return dict(state.recorded_rooms)[obj]
        return self.room_of(state, ref)

    def support(self, state: State, obj: str) -> str | None:
        """The container or surface ``obj`` is in or on, if any."""
        where = state.placement(obj)
        if where is not None and where[0] in (INSIDE, ON):
            return where[1]
        return None

    def enclosed(self, state: State, obj: str) -> bool:
        """Whether ``obj`` is inside a closed container."""
        where = state.placement(obj)
        if where is None or where[0] != INSIDE:
            return False
        container = self.by_name[where[1]]
        return (OPENABLE in container.properties and where[1] not in state.opened) or self.enclosed(
            state, where[1]
        )

    def visible(self, state: State, obj: str) -> bool:
        """Partial observation: held, or in the agent's room and not shut in a container."""
        if obj in state.held:
            return True
        return self.room_of(state, obj) == state.room and not self.enclosed(state, obj)

    def visible_objects(self, state: State) -> list[str]:
        return [o.name for o in self.objects if self.visible(state, o.name)]

    def has(self, obj: str, prop: str) -> bool:
        return prop in self.by_name[obj].properties

    # -- dynamics -------------------------------------------------------------------------------
    def apply(self, state: State, action: Action) -> State | None:
        """The state after ``action``, or ``None`` when a precondition fails (nothing changes)."""
        handler = _VERBS.get(action.verb)
        if handler is None:
            raise ValueError(f"unknown verb {action.verb!r}; known: {sorted(_VERBS)}")
        arity = 0 if action.verb == "stand_up" else 2 if action.verb in ("put_in", "put_on") else 1
        if len(action.args) != arity:
            raise ValueError(f"{action.verb} takes {arity} argument(s), got {action.args!r}")
        for name in action.args:
            if name in self.rooms and action.verb == "walk":
                continue
            if name not in self.by_name:
                raise ValueError(f"unknown object {name!r} in {action!r}")
            if not self.visible(state, name):
                return None
        return handler(self, state, *action.args)

    def _free_hand(self, state: State) -> bool:
        return len(state.held) < self.hands

    def _inside(self, state: State, container: str) -> Iterable[str]:
        return (n for n, (kind, ref) in state.placements if kind == INSIDE and ref == container)


def _walk(scene: Scene, state: State, target: str) -> State | None:
    if state.sitting:
        return None
    held = state.held
    if target in scene.rooms:
        destination, close = target, set()
    else:
        destination = scene.room_of(state, target)  # a held target: its stale recorded room
        close = {target, *scene._inside(state, target)}
        support = scene.support(state, target)
        if support is not None:
            close.add(support)
    return replace(
        state,
        room=destination,
        close=frozenset(close | set(held)),
        facing=frozenset(),
        recorded_rooms=tuple((obj, state.room) for obj in held),
    )


def _grab(scene: Scene, state: State, obj: str) -> State | None:
    support = scene.support(state, obj)
    reachable = obj in state.close or (support is not None and support in state.close)
    if (
        not scene.has(obj, GRABBABLE)
        or obj in state.held
        or not scene._free_hand(state)
        or not reachable
    ):
        return None
    new = state.with_placement(obj, (HELD, ""))
    close = state.close | {obj} | ({support} if support else set())
    recorded = tuple(sorted((*state.recorded_rooms, (obj, state.room))))
    return replace(new, close=frozenset(close), recorded_rooms=recorded)


def _put(kind: str, prop: str):  # noqa: ANN202 - a small factory of two handlers
    def put(scene: Scene, state: State, obj: str, target: str) -> State | None:
        if obj not in state.held or not scene.has(target, prop) or target not in state.close:
            return None
        if kind == INSIDE and scene.has(target, OPENABLE) and target not in state.opened:
            return None
        new = state.with_placement(obj, (kind, target))
        recorded = tuple(r for r in state.recorded_rooms if r[0] != obj)
        return replace(new, recorded_rooms=recorded)

    return put


def _toggle(prop: str, attribute: str, value: bool):  # noqa: ANN202
    def toggle(scene: Scene, state: State, obj: str) -> State | None:
        current: frozenset[str] = getattr(state, attribute)
        if (
            not scene.has(obj, prop)
            or obj not in state.close
            or not scene._free_hand(state)
            or (obj in current) == value
        ):
            return None
        return replace(state, **{attribute: current | {obj} if value else current - {obj}})

    return toggle


def _sit(scene: Scene, state: State, seat: str) -> State | None:
    if not scene.has(seat, SITTABLE) or seat not in state.close or state.sitting:
        return None
    faces = scene.by_name[seat].faces
    return replace(
        state,
        sitting=True,
        sat_on=state.sat_on | {seat},
        facing=state.facing | ({faces} if faces else set()),
    )


def _stand_up(scene: Scene, state: State) -> State | None:
    # The sat-on relation and facing stay (the graph clears facing only on the next walk).
    return replace(state, sitting=False) if state.sitting else None


_VERBS = {
    "walk": _walk,
    "grab": _grab,
    "put_in": _put(INSIDE, CONTAINER),
    "put_on": _put(ON, SURFACE),
    "open": _toggle(OPENABLE, "opened", True),
    "close": _toggle(OPENABLE, "opened", False),
    "switch_on": _toggle(SWITCHABLE, "switched_on", True),
    "switch_off": _toggle(SWITCHABLE, "switched_on", False),
    "sit": _sit,
    "stand_up": _stand_up,
}

#: The verbs :meth:`Scene.apply` knows.
VERBS: tuple[str, ...] = tuple(_VERBS)
