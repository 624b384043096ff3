"""The Overcooked kitchen engine: one grid, any number of chefs, macro-actions on top.

One engine serves every task (tasks are rows of :mod:`.tasks`) and both APIs: the PettingZoo
``ParallelEnv`` drives it with one macro-action per chef, the gymnasium env is the same call with
one chef. It reproduces the TWOSOME macro-action kitchen used by the paper (docs/reference.md#overcooked):

* primitive ticks (docs/reference.md#overcooked-step-rules): move, pick up, put down, chop, scoop, deliver; -0.001 per tick, +0.2
  when a recipe food becomes chopped, +1 for the right dish (terminal), -0.1 for a wrong one
  (the items go back to their initial squares);
* partial observability (docs/reference.md#overcooked): each chef sees the 5x5 square around itself and keeps a belief
  (last seen position of every object, reset to the initial square once the chef sees the object
  is not where it remembers it);
* macro-actions (docs/reference.md#overcooked-macro-actions) run tick by tick by a controller that navigates with A* on the believed
  map, with the reference's exact tie-breaking (it changes what becomes visible);
* the belief's chop fractions (double-normalised in the reference) are not kept: nothing reads
  them;
* the macro-step reward is the 0.99-per-tick discounted sum of the tick rewards; the 200-tick
  limit is only noticed when a macro-action ends (docs/reference.md#overcooked-rewards).
* the episode succeeds when the right dish is served (:attr:`KitchenEngine.success`, which the
  envs report as ``info["success"]``); a positive return alone (a chopped food) is no success.

Several chefs (docs/reference.md#overcooked leaves this to us; the reference's multi-agent loop is broken). The primitive
tick resolves chef/chef moves as the reference does: chefs act in index order, a chef walking into
another chef that has not acted yet waits for it, two chefs walking into each other swap, and a
chef walking into a chef that stays put does not move. A joint macro step gives every chef a
macro-action and runs ticks until EVERY chef's macro-action has finished; a chef whose
macro-action finished stays put meanwhile, and a chef whose move is blocked by another chef ends
its macro-action (the reference's unused "collision" hook), so a joint step always ends. The
reward of a tick is shared by the team (one step penalty per tick, not per chef).

The engine state is a handful of small lists (:class:`KitchenState`), so copying it for a search
is cheap; A* results and prompts are cached per engine.

Why one file of over 600 lines: one engine per environment family (tasks are data in
:mod:`.tasks`); the tick rules, the belief and the macro-action controller share the same state and
are tested through the same engine.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from agentbench_poad.environments.overcooked.tasks import (
    DISH_NAME_ORDER,
    LAYOUTS,
    Layout,
    OvercookedTask,
)

# Cell codes of the reference's map (kept because the map's quirks are part of the behaviour).
FLOOR, COUNTER, CHEF, TOMATO, LETTUCE, PLATE, BOARD, DELIVERY, ONION = range(9)
FOOD_CODES = {"tomato": TOMATO, "lettuce": LETTUCE, "onion": ONION}
_LAYOUT_CHARS = {
    "C": COUNTER,
    "K": BOARD,
    "D": DELIVERY,
    "T": TOMATO,
    "L": LETTUCE,
    "O": ONION,
    "P": PLATE,
    ".": FLOOR,
}
_FOOD_CHARS = {"T": "tomato", "L": "lettuce", "O": "onion"}

#: Primitive moves: 0 right (y+1), 1 down (x+1), 2 left (y-1), 3 up (x-1), 4 stay.
MOVES = ((0, 1), (1, 0), (0, -1), (-1, 0))
STAY = 4
#: A*'s neighbour order (right, left, down, up) and the primitive each one is.
_ASTAR_MOVES = (((0, 1), 0), ((0, -1), 2), ((1, 0), 1), ((-1, 0), 3))

CHOPS_NEEDED = 3
OBS_RADIUS = 2
TICK_LIMIT = 200
MACRO_DISCOUNT = 0.99


@dataclass(frozen=True)
class Rewards:
    """Reward terms of a primitive tick (the reference's values)."""

    subtask: float = 0.2
    correct_delivery: float = 1.0
    wrong_delivery: float = -0.1
    step_penalty: float = -0.001


@dataclass(frozen=True)
class Macro:
    """A macro-action: ``kind`` is get/board/deliver/chop; ``arg`` an item or board index."""

    kind: str
    arg: int = -1


class KitchenState:
    """Everything that changes during an episode. Items are foods ``0..F-1`` then the plate ``F``.

    Positions are ``(x, y)`` tuples; -1 means "nothing" in ``hand``/``board``.
    """

    __slots__ = (
        "pos",
        "chops",
        "contents",
        "board",
        "delivered",
        "chef",
        "hand",
        "cells",
        "belief",
        "chop_ticks",
        "ticks",
    )

    def copy(self) -> KitchenState:
        """An independent copy (lists copied, immutable entries shared)."""
        s = KitchenState.__new__(KitchenState)
        s.pos = list(self.pos)
        s.chops = list(self.chops)
        s.contents = self.contents
        s.board = list(self.board)
        s.delivered = self.delivered
        s.chef = list(self.chef)
        s.hand = list(self.hand)
        s.cells = list(self.cells)
        s.belief = [list(b) for b in self.belief]
        s.chop_ticks = list(self.chop_ticks)
        s.ticks = self.ticks
        return s

    def key(self) -> tuple:
        """A hashable snapshot of the state without the tick counter (for searches)."""
        return (
            tuple(self.pos),
            tuple(self.chops),
            self.contents,
            tuple(self.board),
            self.delivered,
            tuple(self.chef),
            tuple(self.hand),
            tuple(self.cells),
            tuple(tuple(b) for b in self.belief),
            tuple(self.chop_ticks),
        )


class _Node:
    """An A* node ordered like the reference's (ties compare as "less" both ways)."""

    __slots__ = ("x", "y", "g", "f", "first", "through_chef")

    def __init__(self, x: int, y: int, g: int, f: int, first: int, through_chef: int) -> None:
        self.x, self.y, self.g, self.f = x, y, g, f
        self.first, self.through_chef = first, through_chef

    def __lt__(self, other: _Node) -> bool:
        if self.f != other.f:
            return self.f < other.f
        return self.through_chef <= other.through_chef


@dataclass
class MacroResult:
    """What a joint macro step returns."""

    reward: float
    ticks: int
    terminated: bool
    truncated: bool
    chef_rewards: tuple[float, ...]


class KitchenEngine:
    """The rules of one task's kitchen for ``n_agents`` chefs.

    Args:
        task: the task row (dish and layout).
        n_agents: number of chefs (1 up to the layout's chef starts).
        rewards: reward terms.
        tick_limit: the episode's primitive-tick limit (checked when a macro step ends).
    """

    def __init__(
        self,
        task: OvercookedTask,
        n_agents: int = 1,
        rewards: Rewards | None = None,
        tick_limit: int = TICK_LIMIT,
    ) -> None:
        layout = LAYOUTS[task.layout]
        if isinstance(n_agents, bool) or not isinstance(n_agents, int):
            raise ValueError(f"n_agents must be an int, got {n_agents!r}")
        if not 1 <= n_agents <= layout.max_agents:
            raise ValueError(
                f"task {task.name!r} supports n_agents in 1..{layout.max_agents}, got {n_agents}"
            )
        self.task = task
        self.layout: Layout = layout
        self.n_agents = n_agents
        self.rewards = rewards or Rewards()
        self.tick_limit = tick_limit
        self._parse_layout(layout)
        self._astar_cache: dict[tuple, int] = {}
        self.state = self.initial_state()
        # Chefs' visible-object snapshots at the end of the last macro step (the reference's
        # "macro observation"): per chef, a tuple of (position or None, chop count) per item.
        self.macro_obs: list[tuple] = [self._macro_observation(i) for i in range(n_agents)]

    # -- layout ---------------------------------------------------------------------------
    def _parse_layout(self, layout: Layout) -> None:
        rows = layout.rows
        self.height, self.width = len(rows), len(rows[0])
        foods: list[tuple[str, tuple[int, int]]] = []
        plates: list[tuple[int, int]] = []
        boards: list[tuple[int, int]] = []
        deliveries: list[tuple[int, int]] = []
        starts: dict[str, tuple[int, int]] = {}
        cells: list[int] = []
        for x, row in enumerate(rows):
            for y, ch in enumerate(row):
                if ch in "12":
                    starts[ch] = (x, y)
                    cells.append(FLOOR)
                    continue
                cells.append(_LAYOUT_CHARS[ch])
                if ch in _FOOD_CHARS:
                    foods.append((_FOOD_CHARS[ch], (x, y)))
                elif ch == "P":
                    plates.append((x, y))
                elif ch == "K":
                    boards.append((x, y))
                elif ch == "D":
                    deliveries.append((x, y))
        if len(plates) != 1 or len(deliveries) != 1:
            raise ValueError(f"layout {layout.name!r} needs exactly one plate and one delivery")
        # Foods in the reference's scan order: tomato, lettuce, onion.
        order = {"tomato": 0, "lettuce": 1, "onion": 2}
        foods.sort(key=lambda f: order[f[0]])
        self.food_names: tuple[str, ...] = tuple(name for name, _ in foods)
        self.n_foods = len(foods)
        self.plate = self.n_foods  # item index of the plate
        self.n_items = self.n_foods + 1
        self.item_codes: tuple[int, ...] = (*(FOOD_CODES[n] for n in self.food_names), PLATE)
        self.item_start: tuple[tuple[int, int], ...] = (*(p for _, p in foods), plates[0])
        self.boards: tuple[tuple[int, int], ...] = tuple(boards)
        self.board_at = {p: k for k, p in enumerate(boards)}
        self.delivery = deliveries[0]
        self.chef_start: tuple[tuple[int, int], ...] = tuple(
            starts[str(i + 1)] for i in range(self.n_agents)
        )
        self.initial_cells = tuple(cells)
        # The cell in front of each board (its floor neighbour): where "chop" can work on it.
        self.board_front: tuple[tuple[int, int], ...] = tuple(
            next(
                (bx + dx, by + dy)
                for dx, dy in MOVES
                if 0 < bx + dx < self.height - 1 and 0 < by + dy < self.width - 1
            )
            for bx, by in boards
        )
        self.in_recipe = tuple(name in self.task.dish for name in self.food_names)
        # Macro-actions in the reference's slot order: get each food, get plate, go to each
        # board, deliver, chop.
        self.macros: tuple[Macro, ...] = (
            *(Macro("get", i) for i in range(self.n_items)),
            *(Macro("board", k) for k in range(len(boards))),
            Macro("deliver"),
            Macro("chop"),
        )
        self._max_macro_ticks = 2 * self.height * self.width
        self._interior = frozenset(
            (x, y) for x in range(1, self.height - 1) for y in range(1, self.width - 1)
        )

    def initial_state(self) -> KitchenState:
        """The state at reset: the layout's items, chefs at their starts, true beliefs."""
        s = KitchenState.__new__(KitchenState)
        s.pos = list(self.item_start)
        s.chops = [0] * self.n_foods
        s.contents = ()
        s.board = [-1] * len(self.boards)
        s.delivered = False
        s.chef = list(self.chef_start)
        s.hand = [-1] * self.n_agents
        s.cells = list(self.initial_cells)
        for p in s.chef:
            s.cells[p[0] * self.width + p[1]] = CHEF
        # The belief covers every item and every chef; it starts as the true layout.
        s.belief = [[*s.pos, *s.chef] for _ in range(self.n_agents)]
        s.chop_ticks = [0] * self.n_agents
        s.ticks = 0
        return s

    def reset(self) -> None:
        """Back to the initial state (the kitchen has no randomness)."""
        self.state = self.initial_state()
        self._update_beliefs()
        self.macro_obs = [self._macro_observation(i) for i in range(self.n_agents)]

    @property
    def success(self) -> bool:
        """Whether the right dish has been served this episode (the episode's success).

        True from the tick of the correct delivery on (that delivery also ends the episode); a
        wrong delivery, chopping, or running into the tick limit never sets it.
        """
        return self.state.delivered

    # -- primitive tick -------------------------------------------------------------------
    def _move_item(self, s: KitchenState, item: int, p: tuple[int, int]) -> None:
        s.pos[item] = p
        if item == self.plate:
            for f in s.contents:
                s.pos[f] = p

    def _refresh(self, s: KitchenState, item: int) -> None:
        start = self.item_start[item]
        s.pos[item] = start
        if item < self.n_foods:
            s.chops[item] = 0
        s.cells[start[0] * self.width + start[1]] = self.item_codes[item]

    def _item_at(self, s: KitchenState, p: tuple[int, int], code: int) -> int:
        for i, c in enumerate(self.item_codes):
            if c == code and s.pos[i] == p:
                return i
        return -1

    def _dish_name(self, s: KitchenState) -> str:
        names = {self.food_names[f] for f in s.contents}
        return "-".join(n for n in DISH_NAME_ORDER if n in names) + " salad"

    def tick(self, actions: list[int]) -> tuple[float, bool, list[bool]]:
        """One primitive tick with one primitive action per chef.

        Returns:
            (reward, correct_delivery, blocked) where ``blocked[i]`` says chef ``i`` tried to
            walk into another chef and did not move.
        """
        s = self.state
        w = self.width
        cells = s.cells
        rewards = self.rewards
        reward = rewards.step_penalty
        delivered = False
        n = self.n_agents
        acted = [False] * n
        blocked = [False] * n
        while not all(acted):
            acted_before = sum(acted)
            for i in range(n):
                if acted[i]:
                    continue
                acted[i] = True
                a = actions[i]
                if a >= 4:
                    continue
                cx, cy = s.chef[i]
                tx, ty = cx + MOVES[a][0], cy + MOVES[a][1]
                t = (tx, ty)
                code = cells[tx * w + ty]
                hand = s.hand[i]
                if code == CHEF:
                    j = s.chef.index(t)
                    if acted[j]:
                        blocked[i] = True
                        continue
                    acted[i] = False  # wait for chef j to act first
                    b = actions[j]
                    if b < 4 and (s.chef[j][0] + MOVES[b][0], s.chef[j][1] + MOVES[b][1]) == (
                        cx,
                        cy,
                    ):
                        s.chef[i], s.chef[j] = t, (cx, cy)
                        if hand >= 0:
                            self._move_item(s, hand, t)
                        if s.hand[j] >= 0:
                            self._move_item(s, s.hand[j], (cx, cy))
                        acted[i] = acted[j] = True
                elif code == FLOOR:
                    cells[cx * w + cy] = FLOOR
                    s.chef[i] = t
                    cells[tx * w + ty] = CHEF
                    if hand >= 0:
                        self._move_item(s, hand, t)
                elif hand < 0:
                    if code in (TOMATO, LETTUCE, ONION, PLATE):
                        item = self._item_at(s, t, code)
                        if item >= 0:
                            s.hand[i] = item
                            self._move_item(s, item, (cx, cy))
                            cells[tx * w + ty] = COUNTER
                    elif code == BOARD:
                        k = self.board_at[t]
                        held = s.board[k]
                        if held == self.plate or (held >= 0 and s.chops[held] >= CHOPS_NEEDED):
                            s.board[k] = -1
                            s.hand[i] = held
                            self._move_item(s, held, (cx, cy))
                        elif held >= 0:
                            s.chops[held] += 1
                            if s.chops[held] == CHOPS_NEEDED and self.in_recipe[held]:
                                reward += rewards.subtask
                else:
                    r, delivered_now = self._interact_holding(s, i, hand, t, code)
                    reward += r
                    delivered = delivered or delivered_now
            if sum(acted) == acted_before:
                # Chefs waiting on each other in a cycle: they all stay (cannot happen with 2).
                for i in range(n):
                    if not acted[i]:
                        acted[i] = True
                        blocked[i] = True
        s.ticks += 1
        self._update_beliefs()
        return reward, delivered, blocked

    def _interact_holding(
        self, s: KitchenState, i: int, hand: int, t: tuple[int, int], code: int
    ) -> tuple[float, bool]:
        w = self.width
        cells = s.cells
        plate = self.plate
        chef_pos = s.chef[i]
        if code == COUNTER:
            cells[t[0] * w + t[1]] = self.item_codes[hand]
            self._move_item(s, hand, t)
            s.hand[i] = -1
        elif code == PLATE:
            if hand != plate and s.chops[hand] >= CHOPS_NEEDED:
                target = self._item_at(s, t, PLATE)
                if target >= 0:
                    s.hand[i] = -1
                    s.contents = (*s.contents, hand)
                    s.pos[hand] = s.pos[target]
        elif code == BOARD:
            k = self.board_at[t]
            held = s.board[k]
            if held < 0:
                s.board[k] = hand
                self._move_item(s, hand, t)
                s.hand[i] = -1
            elif held != plate and hand == plate:
                if s.chops[held] >= CHOPS_NEEDED:
                    s.board[k] = -1
                    s.contents = (*s.contents, held)
                    s.pos[held] = s.pos[plate]
            elif held == plate and hand != plate:
                if s.chops[hand] >= CHOPS_NEEDED:
                    s.board[k] = -1
                    s.hand[i] = plate
                    self._move_item(s, plate, chef_pos)
                    s.contents = (*s.contents, hand)
                    s.pos[hand] = chef_pos
        elif code == DELIVERY:
            rewards = self.rewards
            s.hand[i] = -1
            if hand == plate and s.contents:
                if self._dish_name(s) == self.task.dish:
                    self._move_item(s, plate, t)
                    s.delivered = True
                    return rewards.correct_delivery, True
                foods = s.contents
                s.contents = ()
                self._refresh(s, plate)
                for f in foods:
                    self._refresh(s, f)
                return rewards.wrong_delivery, False
            self._refresh(s, hand)
            return rewards.wrong_delivery, False
        elif code in (TOMATO, LETTUCE, ONION):
            food = self._item_at(s, t, code)
            if food >= 0 and s.chops[food] >= CHOPS_NEEDED and hand == plate:
                s.contents = (*s.contents, food)
                s.pos[food] = s.pos[plate]
                cells[t[0] * w + t[1]] = COUNTER
        return 0.0, False

    # -- belief ---------------------------------------------------------------------------
    def _update_beliefs(self) -> None:
        s = self.state
        truth = [*s.pos, *s.chef]
        starts = (*self.item_start, *self.chef_start)
        for i in range(self.n_agents):
            cx, cy = s.chef[i]
            belief = s.belief[i]
            for e, (px, py) in enumerate(truth):
                if -OBS_RADIUS <= px - cx <= OBS_RADIUS and -OBS_RADIUS <= py - cy <= OBS_RADIUS:
                    belief[e] = (px, py)
                else:
                    bx, by = belief[e]
                    if (
                        -OBS_RADIUS <= bx - cx <= OBS_RADIUS
                        and -OBS_RADIUS <= by - cy <= OBS_RADIUS
                    ):
                        belief[e] = starts[e]

    @staticmethod
    def _visible(chef: tuple[int, int], p: tuple[int, int]) -> bool:
        return abs(p[0] - chef[0]) <= OBS_RADIUS and abs(p[1] - chef[1]) <= OBS_RADIUS

    # -- navigation -----------------------------------------------------------------------
    def _navigate(self, i: int, target: tuple[int, int]) -> int:
        """First primitive of the reference's A* from chef ``i`` to ``target`` (its belief map)."""
        s = self.state
        start = s.chef[i]
        belief = s.belief[i]
        if self.n_agents == 1:
            # One chef: every believed object lies on the border or in the chef's hand, so the
            # believed map is the layout's (border blocked, interior free).
            key: tuple = (start, target)
        else:
            chefs = frozenset(belief[self.n_items + j] for j in range(self.n_agents) if j != i)
            items = (
                frozenset(p for p in belief[: self.n_items] if p in self._interior and p != start)
                - chefs
            )
            key = (start, target, items, chefs)
        move = self._astar_cache.get(key)
        if move is None:
            move = self._astar(key, start, target)
            self._astar_cache[key] = move
        return move

    def _astar(self, key: tuple, start: tuple[int, int], target: tuple[int, int]) -> int:
        blocked = key[2] if len(key) > 2 else frozenset()
        chefs = key[3] if len(key) > 2 else frozenset()
        interior = self._interior
        tx, ty = target
        heap = [_Node(start[0], start[1], 0, abs(tx - start[0]) + abs(ty - start[1]), -1, 0)]
        visited = {start}
        while heap:
            node = heapq.heappop(heap)
            for (dx, dy), move in _ASTAR_MOVES:
                c = (node.x + dx, node.y + dy)
                if c in visited:
                    continue
                first = node.first if node.first >= 0 else move
                through = c in chefs
                if (c in interior and c not in blocked) or through:
                    g = node.g + 1
                    f = g + abs(tx - c[0]) + abs(ty - c[1])
                    heapq.heappush(heap, _Node(c[0], c[1], g, f, first, int(through)))
                    visited.add(c)
                if c == target:
                    return first
        return STAY

    # -- macro controller -----------------------------------------------------------------
    def _target(self, i: int, macro: Macro) -> tuple[int, int]:
        if macro.kind == "get":
            return self.state.belief[i][macro.arg]
        if macro.kind == "board":
            return self.boards[macro.arg]
        return self.delivery

    def _controller(self, i: int, macro: Macro) -> tuple[int, bool]:
        """The primitive for chef ``i`` this tick, and whether its macro-action ends with it."""
        s = self.state
        cx, cy = s.chef[i]
        if macro.kind == "chop":
            for d, (dx, dy) in enumerate(MOVES):
                k = self.board_at.get((cx + dx, cy + dy))
                if k is not None:
                    held = s.board[k]
                    if 0 <= held < self.n_foods and s.chops[held] < CHOPS_NEEDED:
                        s.chop_ticks[i] += 1
                        if s.chop_ticks[i] >= CHOPS_NEEDED:
                            s.chop_ticks[i] = 0
                            return d, True
                        return d, False
            # No unchopped food on an adjacent board; the chop count is NOT reset (reference).
            return STAY, True
        target = self._target(i, macro)
        is_food = macro.kind == "get" and macro.arg < self.n_foods
        if is_food and self._visible((cx, cy), target) and s.pos[self.plate] == target:
            # The food is believed to be in the plate: nothing to fetch.
            return STAY, True
        if target == (cx, cy) or (
            self.n_agents > 1
            and self._visible((cx, cy), target)
            and target in (s.belief[i][self.n_items + j] for j in range(self.n_agents) if j != i)
        ):
            # The object is believed to be in a chef's hand.
            return STAY, True
        move = self._navigate(i, target)
        done = move == STAY
        if abs(target[0] - cx) + abs(target[1] - cy) == 1:
            done = True
            hand = s.hand[i]
            if macro.kind == "get" and macro.arg == self.plate and hand >= 0:
                if hand < self.n_foods:
                    if s.chops[hand] >= CHOPS_NEEDED:
                        done = False  # drop the food into the plate now, pick the plate up next
                    else:
                        move = STAY
            if macro.kind == "board" and hand < 0:
                move = STAY
            if is_food:
                k = self.board_at.get(target)
                if k is not None:
                    held = s.board[k]
                    if 0 <= held < self.n_foods and s.chops[held] < CHOPS_NEEDED:
                        move = STAY  # never chop by accident
            if macro.kind == "get" and target != s.pos[macro.arg]:
                move = STAY
        return move, done

    def _done_after_tick(self, i: int, macro: Macro) -> bool:
        """The reference's completion checks that run after the tick."""
        s = self.state
        cx, cy = s.chef[i]
        target = self._target(i, macro)
        near = abs(target[0] - cx) + abs(target[1] - cy) == 1
        hand = s.hand[i]
        done = False
        if macro.kind == "board" and hand < 0:
            done = near
        elif macro.kind == "get" and macro.arg < self.n_foods:
            if near and target in self.board_at:
                food = macro.arg
                if s.pos[food] == target and s.chops[food] < CHOPS_NEEDED:
                    done = True
        elif macro.kind == "deliver" and hand < 0:
            done = near
        if macro.kind == "get" and target != s.pos[macro.arg]:
            done = True
        return done

    def run_macros(self, macro_indices: list[int | None]) -> MacroResult:
        """Run one joint macro step: chef ``i`` runs ``macros[macro_indices[i]]``.

        ``None`` for a chef means it does nothing in this step. The step ticks until every
        chef's macro-action has finished; no tick runs if every entry is ``None``.
        """
        macros = [None if m is None else self.macros[m] for m in macro_indices]
        running = [m is not None for m in macros]
        total = 0.0
        discount = 1.0
        ticks = 0
        delivered = False
        while any(running):
            actions = [STAY] * self.n_agents
            finishing = [False] * self.n_agents
            for i, m in enumerate(macros):
                if running[i]:
                    actions[i], finishing[i] = self._controller(i, m)  # type: ignore[arg-type]
            reward, delivered_now, blocked = self.tick(actions)
            delivered = delivered or delivered_now
            ticks += 1
            total += discount * reward
            discount *= MACRO_DISCOUNT
            for i, m in enumerate(macros):
                if not running[i]:
                    continue
                if finishing[i] or blocked[i] or self._done_after_tick(i, m):  # type: ignore[arg-type]
                    running[i] = False
            if ticks >= self._max_macro_ticks:
                # Safety net for chefs that keep dodging each other; a single chef's macro-action
                # never comes close (its longest walk is about a dozen ticks).
                break
            if delivered:
                # The dish is served: chefs still busy stop here (one chef always stops anyway,
                # since a delivery is the last tick of its macro-action).
                break
        # The reference reports the `done` of the last tick: a correct delivery happens on the
        # last tick of a macro-action, and the tick limit is only looked at here.
        terminated = delivered or self.state.delivered
        truncated = (not terminated) and self.state.ticks >= self.tick_limit
        self.macro_obs = [self._macro_observation(i) for i in range(self.n_agents)]
        return MacroResult(
            reward=total,
            ticks=ticks,
            terminated=terminated,
            truncated=truncated,
            chef_rewards=(total,) * self.n_agents,
        )

    # -- observation ----------------------------------------------------------------------
    def _macro_observation(self, i: int) -> tuple:
        """Chef ``i``'s snapshot: own position, then (position or None, chops) per item."""
        s = self.state
        me = s.chef[i]
        items = tuple(
            (p, s.chops[k] if k < self.n_foods else 0) if self._visible(me, p) else (None, 0)
            for k, p in enumerate(s.pos)
        )
        others = tuple(p if self._visible(me, p) else None for j, p in enumerate(s.chef) if j != i)
        return (me, items, others)
