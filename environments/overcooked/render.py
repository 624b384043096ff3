"""Pictures of the kitchen: a text grid (``ansi``) and a small RGB image (``rgb_array``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from agentbench_poad.environments.overcooked.engine import (
    BOARD,
    CHOPS_NEEDED,
    COUNTER,
    DELIVERY,
    FLOOR,
)

if TYPE_CHECKING:  # pragma: no cover
    from agentbench_poad.environments.overcooked.engine import KitchenEngine

_FOOD_LETTER = {"tomato": "t", "lettuce": "l", "onion": "o"}
_TILE = 12
_COLORS = {
    "floor": (235, 230, 215),
    "counter": (150, 110, 70),
    "board": (200, 200, 200),
    "delivery": (60, 160, 60),
    "tomato": (220, 40, 40),
    "lettuce": (90, 200, 60),
    "onion": (170, 90, 170),
    "plate": (250, 250, 250),
    "chef": (40, 80, 220),
}


def render_ansi(engine: KitchenEngine) -> str:
    """The grid with a legend line per chef.

    Fixed cells: ``#`` counter, ``K`` board, ``D`` delivery, ``.`` floor. Items: ``t``/``l``/``o``
    unchopped food (upper case when chopped), ``P`` plate (``B`` when it holds food), digits are
    chefs. A held item is listed under the grid, not drawn.
    """
    s = engine.state
    base = {FLOOR: ".", COUNTER: "#", BOARD: "K", DELIVERY: "D"}
    grid = [
        [base.get(engine.initial_cells[x * engine.width + y], "#") for y in range(engine.width)]
        for x in range(engine.height)
    ]
    held = {h for h in s.hand if h >= 0}
    held_foods = set(s.contents) if engine.plate in held else set()
    for k, (x, y) in enumerate(s.pos):
        if k in held or k in held_foods or (k < engine.n_foods and k in s.contents):
            continue
        if k == engine.plate:
            grid[x][y] = "B" if s.contents else "P"
        else:
            letter = _FOOD_LETTER[engine.food_names[k]]
            grid[x][y] = letter.upper() if s.chops[k] >= CHOPS_NEEDED else letter
    for i, (x, y) in enumerate(s.chef):
        grid[x][y] = str(i + 1)
    lines = ["".join(row) for row in grid]
    for i, h in enumerate(s.hand):
        lines.append(f"chef {i + 1} holds: {_describe(engine, h)}")
    lines.append(f"tick {s.ticks}/{engine.tick_limit}")
    return "\n".join(lines) + "\n"


def _describe(engine: KitchenEngine, item: int) -> str:
    s = engine.state
    if item < 0:
        return "nothing"
    if item == engine.plate:
        foods = [engine.food_names[f] for f in s.contents]
        return "bowl" + (f" with {', '.join(foods)}" if foods else "")
    state = "chopped" if s.chops[item] >= CHOPS_NEEDED else f"{s.chops[item]}/3 chopped"
    return f"{engine.food_names[item]} ({state})"


def render_rgb(engine: KitchenEngine) -> np.ndarray:
    """A ``(H*12, W*12, 3)`` uint8 image: one coloured tile per cell, items as inner squares."""
    s = engine.state
    img = np.empty((engine.height * _TILE, engine.width * _TILE, 3), dtype=np.uint8)
    fixed = {FLOOR: "floor", BOARD: "board", DELIVERY: "delivery"}
    for x in range(engine.height):
        for y in range(engine.width):
            name = fixed.get(engine.initial_cells[x * engine.width + y], "counter")
            img[x * _TILE : (x + 1) * _TILE, y * _TILE : (y + 1) * _TILE] = _COLORS[name]

    def square(x: int, y: int, color: tuple[int, int, int], margin: int) -> None:
        img[
            x * _TILE + margin : (x + 1) * _TILE - margin,
            y * _TILE + margin : (y + 1) * _TILE - margin,
        ] = color

    for x, y in s.chef:
        square(x, y, _COLORS["chef"], 1)
    plate_x, plate_y = s.pos[engine.plate]
    square(plate_x, plate_y, _COLORS["plate"], 2)
    for k in range(engine.n_foods):
        x, y = s.pos[k]
        margin = 4 if s.chops[k] >= CHOPS_NEEDED else 3
        square(x, y, _COLORS[engine.food_names[k]], margin)
    return img
