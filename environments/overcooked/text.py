"""Prompt and action labels of the Overcooked kitchen (docs/reference.md#overcooked-text).

The text reads only a chef's macro observation (what it saw when its last macro-action ended),
as the reference's builder does, so it keeps the reference's blind spots on purpose: an object
is mentioned only when it is visible AND at its initial square, on a cutting board, or in hand
(an object lying elsewhere, e.g. on the delivery square, is not mentioned). The wording is ours;
the facts, and which action label each macro slot shows in which state, are the reference's:

* the "get food" slots read "put the X in the bowl" while the chef holds the bowl;
* the "get plate" slot reads "take the bowl" (one-food kitchen: always; two-board kitchen: only
  when a bowl holding food is in hand or on a board, else "take the empty bowl");
* a board slot reads "put the X on ..." while holding an unchopped X, "put the bowl on ..." while
  holding the bowl, else "walk to ..." (even with a chopped food in hand, which the macro still
  puts on an empty board);
* "serve the dish" while holding anything, else "serve nothing";
* "chop the X" when exactly one object, the food X (chopped or not), is on a board and the chef
  stands in front of that board, else "chop nothing".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from agentbench_poad.environments.overcooked.engine import KitchenEngine

_ARTICLE = {"tomato": "a tomato", "lettuce": "a lettuce", "onion": "an onion", "bowl": "a bowl"}


def _join(words: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


class PromptBuilder:
    """Builds ``(prompt, action labels)`` from a macro observation of one engine's kitchen.

    Results are cached by observation: a kitchen has only a few hundred distinct ones.
    """

    def __init__(self, engine: KitchenEngine) -> None:
        self.engine = engine
        e = engine
        self.names: tuple[str, ...] = (*e.food_names, "bowl")
        self.n_foods = e.n_foods
        self.plate = e.plate
        two = len(e.boards) > 1
        ordinals = ("first", "second", "third")
        self.board_names = tuple(
            f"the {ordinals[k]} cutting board" if two else "the cutting board"
            for k in range(len(e.boards))
        )
        self.opening = (
            f"There are {len(e.boards) if len(e.boards) > 2 else 'two'} fixed cutting boards "
            "in the room."
            if two
            else "There is a fixed cutting board in the room."
        )
        recipe = [n for n in e.food_names if n in e.task.recipe]
        self.goal = (
            f"To serve the dish, a bowl containing only chopped {_join(recipe)}, you should first"
        )
        self.tracks_bowl = e.layout.bowl_label_tracks_contents
        # Slot indices of the macro list (get foods, get plate, boards, deliver, chop).
        self.slot_plate = e.plate
        self.slot_board0 = e.n_items
        self.slot_deliver = e.n_items + len(e.boards)
        self.slot_chop = self.slot_deliver + 1
        self.default_labels: tuple[str, ...] = (
            *(f"pick up the {n}" for n in e.food_names),
            "take the empty bowl" if self.tracks_bowl else "take the bowl",
            *(f"walk to {b}" for b in self.board_names),
            "serve nothing",
            "chop nothing",
        )
        self.other_names = ("The other chef",) if e.n_agents == 2 else ()
        self._cache: dict[tuple, tuple[str, tuple[str, ...]]] = {}

    def build(self, macro_obs: tuple) -> tuple[str, tuple[str, ...]]:
        """The prompt (ending in an open cue) and the action labels for ``macro_obs``."""
        cached = self._cache.get(macro_obs)
        if cached is None:
            cached = self._build(macro_obs)
            self._cache[macro_obs] = cached
        return cached

    def _build(self, macro_obs: tuple) -> tuple[str, tuple[str, ...]]:
        e = self.engine
        me, items, _others = macro_obs
        names = self.names
        labels = list(self.default_labels)
        sentences = [self.opening]

        chopped = [items[k][1] >= 3 for k in range(self.n_foods)]
        at_origin = [names[k] for k, (p, _) in enumerate(items) if p == e.item_start[k]]
        in_hand = [k for k, (p, _) in enumerate(items) if p == me]
        on_board = [[k for k, (p, _) in enumerate(items) if p == b] for b in e.boards]
        if self.tracks_bowl and (len(in_hand) > 1 or any(len(o) > 1 for o in on_board)):
            labels[self.slot_plate] = "take the bowl"

        if len(at_origin) == 1:
            sentences.append(f"You notice {_ARTICLE[at_origin[0]]} on the table.")
        elif at_origin:
            listed = _join([_ARTICLE[n] for n in at_origin])
            sentences.append(f"You notice {listed} on different tables.")

        for b, objects in enumerate(on_board):
            where = self.board_names[b]
            if len(objects) == 1:
                k = objects[0]
                thing = self._describe(k, chopped)
                sentences.append(f"{thing[0].upper()}{thing[1:]} is on {where}.")
                if k != self.plate and me == e.board_front[b]:
                    labels[self.slot_chop] = f"chop the {names[k]}"
            elif objects:
                foods = _join([names[k] for k in objects[:-1]])
                sentences.append(f"A bowl containing chopped {foods} is on {where}.")

        front = next((b for b, p in enumerate(e.board_front) if p == me), -1)
        standing = f"You are standing in front of {self.board_names[front]}" if front >= 0 else ""
        if not in_hand:
            sentences.append(
                f"{standing} with nothing in hand." if standing else "You have nothing in hand."
            )
        else:
            labels[self.slot_deliver] = "serve the dish"
            if len(in_hand) == 1:
                k = in_hand[0]
                carrying = self._describe(k, chopped)
                if k == self.plate:
                    self._hold_bowl_labels(labels)
                elif not chopped[k]:
                    for b, where in enumerate(self.board_names):
                        labels[self.slot_board0 + b] = f"put the {names[k]} on {where}"
            else:
                foods = _join([names[k] for k in in_hand[:-1]])
                carrying = f"a bowl containing chopped {foods}"
                self._hold_bowl_labels(labels)
            sentences.append(
                f"{standing}, carrying {carrying}." if standing else f"You are carrying {carrying}."
            )
        for j, p in enumerate(_others):
            # Only with several chefs (the reference has no such sentence): what a visible
            # teammate carries. Items in its hand are otherwise never mentioned.
            if p is None:
                continue
            carried = [k for k, (q, _) in enumerate(items) if q == p]
            name = self.other_names[j] if j < len(self.other_names) else "Another chef"
            if not carried:
                sentences.append(f"{name} is nearby with nothing in hand.")
            elif len(carried) == 1:
                sentences.append(
                    f"{name} is nearby, carrying {self._describe(carried[0], chopped)}."
                )
            else:
                foods = _join([names[k] for k in carried[:-1]])
                sentences.append(f"{name} is nearby, carrying a bowl containing chopped {foods}.")
        sentences.append(self.goal)
        return " ".join(sentences), tuple(labels)

    def _describe(self, k: int, chopped: list[bool]) -> str:
        if k == self.plate:
            return "a bowl"
        return f"{'a chopped' if chopped[k] else 'an unchopped'} {self.names[k]}"

    def _hold_bowl_labels(self, labels: list[str]) -> None:
        for f in range(self.n_foods):
            labels[f] = f"put the {self.names[f]} in the bowl"
        for b, where in enumerate(self.board_names):
            labels[self.slot_board0 + b] = f"put the bowl on {where}"
