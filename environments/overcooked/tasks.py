"""The Overcooked task table: kitchens (layouts) and recipes, as data only.

This module imports nothing from the engine, so the gymnasium registration can read it cheaply.
Every task is one row of :data:`TASKS`; the registration turns each row into an id
``Overcooked-<Task>-v0`` and the engine reads the row's layout and dish.

Coordinates follow the reference: ``(x, y)`` with ``x`` the row (0 = top) and ``y`` the column
(0 = left).

Layout characters: ``C`` counter, ``K`` cutting board, ``D`` delivery square, ``T`` tomato,
``L`` lettuce, ``O`` onion, ``P`` plate (the "bowl" of the text), ``.`` floor, ``1``/``2`` the
start of chef 1/2 (floor when the chef is not in play). Every border cell is a counter unless it
holds an object; items only ever sit on border cells or in a chef's hand.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The reference's 7-entry recipe list, in order (index = the reference's task index).
DISH_LIST: tuple[str, ...] = (
    "tomato salad",
    "lettuce salad",
    "onion salad",
    "lettuce-tomato salad",
    "onion-tomato salad",
    "lettuce-onion salad",
    "lettuce-onion-tomato salad",
)

#: Order in which a delivered plate's foods are named (the reference builds the dish name so).
DISH_NAME_ORDER: tuple[str, ...] = ("lettuce", "onion", "tomato")


@dataclass(frozen=True)
class Layout:
    """A kitchen: the grid and the facts of the text that depend on it.

    Attributes:
        name: layout key in :data:`LAYOUTS`.
        rows: the grid, one string per row (see the module docstring for the characters).
        bowl_label_tracks_contents: the "get plate" label reads "take the empty bowl" until a
            bowl holding food is in hand or on a board ("take the bowl"); when False it is always
            "take the bowl" (the reference's one-food kitchen).
    """

    name: str
    rows: tuple[str, ...]
    bowl_label_tracks_contents: bool

    @property
    def max_agents(self) -> int:
        """How many chef starts the layout defines."""
        return sum(row.count(c) for row in self.rows for c in "12")


@dataclass(frozen=True)
class OvercookedTask:
    """One registered Overcooked task.

    Attributes:
        name: the task name of the id (``Overcooked-<name>-v0``).
        dish: the reference task string; a delivered plate must have exactly these foods.
        layout: key of the kitchen in :data:`LAYOUTS`.
        description: one line for ``agentbench-poad envs``.
        paper_name: the task's name in the POAD paper (its two Overcooked tasks), else None.
    """

    name: str
    dish: str
    layout: str
    description: str
    paper_name: str | None = None

    @property
    def paper(self) -> bool:
        """True for the two tasks of the paper."""
        return self.paper_name is not None

    @property
    def recipe(self) -> tuple[str, ...]:
        """The foods of the dish, in the dish string's order."""
        return tuple(self.dish[: -len(" salad")].split("-"))

    @property
    def dish_index(self) -> int:
        """Index of the dish in the reference's 7-entry list."""
        return DISH_LIST.index(self.dish)


#: Kitchens. "tomato" is the paper's Tomato Salad kitchen (reference map A, 7x7); "garden" adds
#: lettuce, onion and a second board (the paper's Tomato-Lettuce kitchen). Chef 2 starts where
#: the reference's 2-agent map A puts its other chef.
LAYOUTS: dict[str, Layout] = {
    "tomato": Layout(
        name="tomato",
        rows=(
            "CCCCCTC",
            "K.2.1.C",
            "C.....C",
            "D.....C",
            "C.....C",
            "C.....C",
            "CCCCCPC",
        ),
        bowl_label_tracks_contents=False,
    ),
    "garden": Layout(
        name="garden",
        rows=(
            "CCCCCTC",
            "K.2.1.L",
            "K.....O",
            "D.....C",
            "C.....C",
            "C.....C",
            "CCCCCPC",
        ),
        bowl_label_tracks_contents=True,
    ),
}

_TASK_ROWS: tuple[OvercookedTask, ...] = (
    OvercookedTask(
        "TomatoSalad",
        "tomato salad",
        "tomato",
        "Overcooked: chop a tomato and serve it in a bowl (paper task, 5 macro-actions).",
        paper_name="Tomato Salad",
    ),
    OvercookedTask(
        "TomatoLettuceSalad",
        "lettuce-tomato salad",
        "garden",
        "Overcooked: serve chopped tomato and lettuce in one bowl; the onion is a distractor "
        "(paper task, 8 macro-actions).",
        paper_name="Tomato-Lettuce Salad",
    ),
    OvercookedTask(
        "LettuceSalad",
        "lettuce salad",
        "garden",
        "Overcooked: serve chopped lettuce in a bowl (two-board kitchen, 8 macro-actions).",
    ),
    OvercookedTask(
        "OnionSalad",
        "onion salad",
        "garden",
        "Overcooked: serve chopped onion in a bowl (two-board kitchen, 8 macro-actions).",
    ),
    OvercookedTask(
        "TomatoOnionSalad",
        "onion-tomato salad",
        "garden",
        "Overcooked: serve chopped tomato and onion in one bowl (two-board kitchen).",
    ),
    OvercookedTask(
        "LettuceOnionSalad",
        "lettuce-onion salad",
        "garden",
        "Overcooked: serve chopped lettuce and onion in one bowl (two-board kitchen).",
    ),
    OvercookedTask(
        "TomatoLettuceOnionSalad",
        "lettuce-onion-tomato salad",
        "garden",
        "Overcooked: serve chopped tomato, lettuce and onion in one bowl (two-board kitchen).",
    ),
)

#: Every registered task, by name.
TASKS: dict[str, OvercookedTask] = {t.name: t for t in _TASK_ROWS}


def get_task(name: str) -> OvercookedTask:
    """The task called ``name``; a ValueError names the valid choices."""
    try:
        return TASKS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown Overcooked task {name!r}; choose one of: {', '.join(TASKS)}"
        ) from None
