"""The Overcooked oracle: the best return the env admits, by dynamic programming on its engine.

Objective. The oracle maximises the **undiscounted episode return**, the sum of the env's step
rewards: the leaderboard's ``return`` metric (``protocol.metric``) and each episode's
``return``. Each step reward is already the env's own 0.99-per-tick discounted sum over the
macro-action's ticks (docs/envs/overcooked.md, "Reward"); nothing is discounted across steps.
The records' ``discounted_return`` (γ = 0.99 per step) is reported, not maximised.

Method. The kitchen has no randomness (``reset(seed=...)`` changes nothing), so the optimum is
the same for every episode seed. From the state at reset, every macro-action of every reachable
state is run on a copy of the engine state (the engine's own rules, :mod:`..engine`), which gives
a finite graph: 24 states for Tomato Salad, 1 301 in the two-board kitchen. A macro step's
reward and tick count depend only on the state, not on the tick counter, which only decides
truncation (at the end of a macro step with 200 or more ticks). Backward induction over
``(tick, state)`` (and, under a ``TimeLimit`` wrapper, over the steps left) gives the optimal
value and a macro-action that attains it. Labels that are not offered are never better: they
cost ``invalid_action_penalty`` and leave the state as it is.

The optimum is not the fewest-ticks plan: a recipe food earns +0.2 each time it becomes chopped,
and serving it alone (a wrong delivery, -0.1) sends it back unchopped, so chopping and
"serving" it again gains about +0.08 per cycle. The oracle does that while the tick limit
leaves room and serves the dish at the end (Tomato Salad: 1.860 against 1.146 for the fastest
serve). This is the upper bound of the env's rules as they stand (the reference's); an agent
that scores more than its oracle on any episode contradicts the engine
(``tests/test_oracle_bound.py``).

Graphs and policies are memoised per (task, rewards, tick limit, start state, step limit), so
an evaluation pays for the search once per process (about 20 s for a two-board task).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from agentbench_poad.environments.overcooked.engine import KitchenEngine, KitchenState

#: Two returns closer than this are treated as equal (the earlier macro slot is then taken).
TIE_TOLERANCE = 1e-12


@dataclass(frozen=True)
class MacroGraph:
    """Every state reachable by macro-actions from ``root``, with each macro step's outcome.

    Attributes:
        keys: state keys (:meth:`KitchenState.key`), ``keys[0]`` the root.
        index: key -> row.
        succ: ``(S, M)`` next-state row, -1 when the macro step serves the dish (terminal).
        reward: ``(S, M)`` the env's reward of the macro step.
        ticks: ``(S, M)`` primitive ticks of the macro step (always >= 1).
    """

    keys: tuple[tuple, ...]
    index: dict[tuple, int]
    succ: np.ndarray
    reward: np.ndarray
    ticks: np.ndarray

    @property
    def n_states(self) -> int:
        return len(self.keys)


def _engine_id(engine: KitchenEngine) -> tuple:
    return (engine.task, engine.n_agents, engine.rewards, engine.tick_limit)


_GRAPHS: dict[tuple, MacroGraph] = {}


def macro_graph(engine: KitchenEngine, root: KitchenState | None = None) -> MacroGraph:
    """The macro-action graph of ``engine``'s kitchen from ``root`` (default: its state).

    A cached graph of the same kitchen that already holds ``root`` is returned as is. The
    engine's state is left untouched.
    """
    if engine.n_agents != 1:
        raise ValueError("the Overcooked oracle drives a single chef (n_agents=1)")
    root = root or engine.state
    root_key = root.key()
    for (eid, _), graph in _GRAPHS.items():
        if eid == _engine_id(engine) and root_key in graph.index:
            return graph
    saved, saved_obs = engine.state, engine.macro_obs
    n_macros = len(engine.macros)
    index: dict[tuple, int] = {root_key: 0}
    states: list[KitchenState] = [root.copy()]
    succ: list[list[int]] = []
    reward: list[list[float]] = []
    ticks: list[list[int]] = []
    try:
        queue = deque([0])
        while queue:
            row = queue.popleft()
            s_row, r_row, t_row = [], [], []
            for m in range(n_macros):
                engine.state = states[row].copy()
                engine.state.ticks = 0
                result = engine.run_macros([m])
                r_row.append(result.reward)
                t_row.append(result.ticks)
                if result.terminated:
                    s_row.append(-1)
                    continue
                key = engine.state.key()
                nxt = index.get(key)
                if nxt is None:
                    nxt = index[key] = len(states)
                    states.append(engine.state.copy())
                    queue.append(nxt)
                s_row.append(nxt)
            succ.append(s_row)
            reward.append(r_row)
            ticks.append(t_row)
    finally:
        engine.state, engine.macro_obs = saved, saved_obs
    graph = MacroGraph(
        keys=tuple(index),
        index=index,
        succ=np.asarray(succ, dtype=np.int64),
        reward=np.asarray(reward, dtype=np.float64),
        ticks=np.asarray(ticks, dtype=np.int64),
    )
    if int(graph.ticks.min()) < 1:  # pragma: no cover - every macro step runs a tick
        raise AssertionError("a macro step without ticks breaks the backward induction")
    _GRAPHS[(_engine_id(engine), root_key)] = graph
    return graph


class OptimalPolicy:
    """Optimal values and macro-actions of one graph under the tick limit (and a step limit).

    ``value(s, tick, steps_left)`` is the best return from state row ``s`` at ``tick`` with
    ``steps_left`` env steps before a ``TimeLimit`` truncates (``None``: no step limit).

    Args:
        graph: the kitchen's macro graph.
        tick_limit: the engine's tick limit (truncation when a macro step ends at or past it).
        max_steps: the ``TimeLimit`` of the env, or None.
    """

    def __init__(self, graph: MacroGraph, tick_limit: int, max_steps: int | None = None) -> None:
        self.graph = graph
        self.tick_limit = tick_limit
        self.max_steps = max_steps
        limit = tick_limit
        s_count = graph.n_states
        served = graph.succ < 0
        succ = np.where(served, 0, graph.succ)
        # after[t, s, m]: tick after the macro step; it ends the episode at or past the limit.
        after = np.arange(limit)[:, None, None] + graph.ticks[None, :, :]
        ends = served[None, :, :] | (after >= limit)
        after = np.minimum(after, limit - 1)
        if max_steps is None:
            values = np.zeros((limit, s_count))
            policy = np.zeros((limit, s_count), dtype=np.int8)
            for t in range(limit - 1, -1, -1):
                cont = np.where(ends[t], 0.0, values[after[t], succ])
                q = graph.reward + cont
                values[t], policy[t] = _best(q)
            self._values = values[None]
            self._policy = policy[None]
        else:
            if max_steps < 1:
                raise ValueError(f"max_steps must be >= 1, got {max_steps}")
            values = np.zeros((max_steps + 1, limit, s_count))
            policy = np.zeros((max_steps + 1, limit, s_count), dtype=np.int8)
            for d in range(1, max_steps + 1):
                cont = np.where(ends, 0.0, values[d - 1][after, succ[None, :, :]])
                q = graph.reward[None, :, :] + cont
                values[d], policy[d] = _best(q)
            self._values = values
            self._policy = policy

    def _at(self, steps_left: int | None) -> int:
        if self.max_steps is None:
            return 0
        if steps_left is None or not 1 <= steps_left <= self.max_steps:
            raise ValueError(f"steps_left must be in 1..{self.max_steps}, got {steps_left!r}")
        return steps_left

    def value(self, s: int, tick: int, steps_left: int | None = None) -> float:
        """The best return from state row ``s`` at ``tick``."""
        return float(self._values[self._at(steps_left), tick, s])

    def macro(self, s: int, tick: int, steps_left: int | None = None) -> int:
        """A macro slot that attains :meth:`value` (the earliest slot among equals)."""
        return int(self._policy[self._at(steps_left), tick, s])


def _best(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Max over the last axis, and the first index within :data:`TIE_TOLERANCE` of it."""
    best = q.max(axis=-1)
    choice = np.argmax(q >= best[..., None] - TIE_TOLERANCE, axis=-1)
    return best, choice.astype(np.int8)


_POLICIES: dict[tuple, OptimalPolicy] = {}


def optimal_policy(
    engine: KitchenEngine, max_steps: int | None = None, root: KitchenState | None = None
) -> OptimalPolicy:
    """The (memoised) optimal policy of ``engine``'s kitchen from ``root`` (default: its state)."""
    graph = macro_graph(engine, root)
    if max_steps is not None and max_steps >= engine.tick_limit:
        # Every macro step takes a tick, so such a step limit never binds before the tick limit.
        max_steps = None
    key = (_engine_id(engine), graph.keys[0], max_steps)
    policy = _POLICIES.get(key)
    if policy is None:
        policy = _POLICIES[key] = OptimalPolicy(graph, engine.tick_limit, max_steps)
    return policy


def optimal_return(task: str, max_steps: int | None = None) -> float:
    """The best return of an ``Overcooked-<task>-v0`` episode (every reset seed alike).

    Args:
        task: the task name (``"TomatoSalad"``, ...).
        max_steps: the env's ``TimeLimit`` (``gym.make(..., max_episode_steps=N)``), or None.
    """
    from agentbench_poad.environments.overcooked.tasks import get_task

    engine = KitchenEngine(get_task(task))
    engine.reset()
    return optimal_policy(engine, max_steps).value(0, 0, max_steps)


def _time_limit(env: gym.Env) -> tuple[int | None, int]:
    """(max_episode_steps, steps taken) of the outermost ``TimeLimit`` around ``env``."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.TimeLimit):
            return env._max_episode_steps, env._elapsed_steps or 0
        env = env.env
    return None, 0


def shortest_plan(
    engine: KitchenEngine, state: KitchenState | None = None, max_depth: int = 30
) -> tuple[list[int], int]:
    """The plan of fewest macro steps (then fewest ticks) that serves the dish (a reference fact).

    Not the oracle's plan: the oracle maximises the return (see the module docstring).

    Returns:
        (macro indices, total primitive ticks).

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
    """Takes an optimal macro-action of the bound env's current state (single chef).

    Reads the engine's state, its tick counter and the env's ``TimeLimit`` (if any) at every
    call, so it stays optimal from whatever state it is handed (someone else stepping the env
    in between included).
    """

    name = "oracle"

    def __init__(self, env: gym.Env) -> None:
        self.env = env

    def reset(self, seed: int | None = None) -> None:
        """Nothing to reset: the kitchen is deterministic and the policy is memoised."""

    def act(self, observation: str, available_actions: Sequence[str] | None) -> str:
        unwrapped = self.env.unwrapped
        engine: KitchenEngine = unwrapped.engine
        max_steps, taken = _time_limit(self.env)
        steps_left = None if max_steps is None else max_steps - taken
        state = engine.state
        policy = optimal_policy(engine, max_steps, root=state)
        row = policy.graph.index[state.key()]  # the graph holds it (or was built from it)
        tick = min(state.ticks, engine.tick_limit - 1)
        macro = policy.macro(row, tick, steps_left)
        label = unwrapped.parallel._labels[0][macro]
        if available_actions and label not in available_actions:  # pragma: no cover
            raise RuntimeError(f"oracle label {label!r} is not available: {available_actions}")
        return label


def make_overcooked_oracle(env: gym.Env) -> OvercookedOracle:
    """An oracle agent for an Overcooked env (any wrapper around :class:`OvercookedEnv`)."""
    return OvercookedOracle(env)
