"""Scripted Overcooked oracle: a breadth-first search over macro-actions on the env's own engine.

The oracle reads the kitchen state through ``env.unwrapped.engine``, searches the shortest
sequence of macro-actions (fewest macro steps, then fewest ticks) that serves the task's dish, and
answers the label of the plan's next macro slot. It re-plans whenever the state is not the one it
expected (for example when someone else stepped the env in between).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import gymnasium as gym

from agentbench_poad.environments.overcooked.engine import KitchenEngine, KitchenState


def shortest_plan(
    engine: KitchenEngine, state: KitchenState | None = None, max_depth: int = 30
) -> tuple[list[int], int]:
    """The shortest macro plan from ``state`` (default: the engine's) to a served dish.

    Returns:
        (macro indices, total primitive ticks). Among plans with the fewest macro steps the one
        with the fewest ticks is returned.

    Raises:
        RuntimeError: if no plan of at most ``max_depth`` macro steps exists.
    """
    saved, saved_obs = engine.state, engine.macro_obs
    start = (state or engine.state).copy()
    n_macros = len(engine.macros)
    try:
        frontier = deque([(start, [], 0)])
        seen = {start.key()}
        best: tuple[list[int], int] | None = None
        depth = 0
        while frontier and best is None and depth < max_depth:
            depth += 1
            next_frontier: deque = deque()
            for st, plan, ticks in frontier:
                for m in range(n_macros):
                    engine.state = st.copy()
                    result = engine.run_macros([m])
                    if result.terminated:
                        total = ticks + result.ticks
                        if best is None or total < best[1]:
                            best = ([*plan, m], total)
                        continue
                    if result.truncated:
                        continue
                    key = engine.state.key()
                    if key not in seen:
                        seen.add(key)
                        next_frontier.append((engine.state, [*plan, m], ticks + result.ticks))
            frontier = next_frontier
    finally:
        engine.state, engine.macro_obs = saved, saved_obs
    if best is None:
        raise RuntimeError(f"no plan serves {engine.task.dish!r} within {max_depth} macro steps")
    return best


class OvercookedOracle:
    """Follows :func:`shortest_plan` on the engine of one env (single chef).

    The oracle remembers, for every state along the plans it computed, the macro-action to take
    there; the kitchen is deterministic, so after a reset the same plan is reused without a new
    search, and a state off the plan (someone else stepped the env) triggers a new search.
    """

    name = "oracle"

    def __init__(self, env: gym.Env) -> None:
        self.env = env
        self._next_macro: dict[tuple, int] = {}

    def reset(self, seed: int | None = None) -> None:
        """Nothing to reset: the remembered plans stay valid (the kitchen is deterministic)."""

    def act(self, observation: str, available_actions: Sequence[str] | None) -> str:
        engine: KitchenEngine = self.env.unwrapped.engine
        if engine.n_agents != 1:
            raise ValueError("the Overcooked oracle drives a single chef (n_agents=1)")
        key = engine.state.key()
        if key not in self._next_macro:
            self._remember(engine, shortest_plan(engine)[0])
        macro = self._next_macro[key]
        label = self.env.unwrapped.parallel._labels[0][macro]
        if available_actions and label not in available_actions:  # pragma: no cover
            raise RuntimeError(f"oracle label {label!r} is not available: {available_actions}")
        return label

    def _remember(self, engine: KitchenEngine, plan: list[int]) -> None:
        """Replay ``plan`` on a copy of the state and note the macro-action of each state."""
        saved, saved_obs = engine.state, engine.macro_obs
        engine.state = saved.copy()
        try:
            for macro in plan:
                self._next_macro[engine.state.key()] = macro
                engine.run_macros([macro])
        finally:
            engine.state, engine.macro_obs = saved, saved_obs


def make_overcooked_oracle(env: gym.Env) -> OvercookedOracle:
    """An oracle agent for an Overcooked env (any wrapper around :class:`OvercookedEnv`)."""
    return OvercookedOracle(env)
