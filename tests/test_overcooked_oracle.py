"""The Overcooked oracle takes the best return the env admits (checked against plain searches)."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentbench_poad.baselines.oracle import make_oracle
from agentbench_poad.baselines.oracle_overcooked import (
    macro_graph,
    optimal_policy,
    optimal_return,
    shortest_plan,
)
from agentbench_poad.environments.overcooked.engine import KitchenEngine
from agentbench_poad.environments.overcooked.tasks import TASKS


def plain_best(engine: KitchenEngine, state, steps_left: int | None = None) -> float:
    """The best return from ``state`` by exhaustive recursion over macro-actions.

    Independent of the oracle's graph and backward induction: it runs the engine from every
    (state, tick, steps left) it meets and reads the engine's own ``terminated``/``truncated``.
    """
    memo: dict[tuple, float] = {}
    n_macros = len(engine.macros)

    def best(s, d):
        key = (s.key(), s.ticks, d)
        if key in memo:
            return memo[key]
        value = -math.inf
        for m in range(n_macros):
            engine.state = s.copy()
            result = engine.run_macros([m])
            total = result.reward
            if not (result.terminated or result.truncated) and (d is None or d > 1):
                total += best(engine.state.copy(), None if d is None else d - 1)
            value = max(value, total)
        memo[key] = value
        return value

    saved = engine.state
    try:
        return best(state.copy(), steps_left)
    finally:
        engine.state = saved


def play(env: gym.Env, agent, seed: int = 0, limit: int = 1000) -> tuple[float, dict, bool]:
    """One episode of ``agent``: (return, last info, terminated)."""
    obs, info = env.reset(seed=seed)
    agent.reset(seed=seed)
    total = 0.0
    for _ in range(limit):
        obs, reward, terminated, truncated, info = env.step(
            agent.act(obs, info["available_actions"])
        )
        assert info["action_valid"]
        total += reward
        if terminated or truncated:
            return total, info, terminated
    raise AssertionError("the episode did not end")


@pytest.mark.parametrize(
    ("task", "macros", "ticks"), [("TomatoSalad", 6, 28), ("TomatoLettuceSalad", 10, 46)]
)
def test_shortest_plan_lengths(task, macros, ticks):
    engine = KitchenEngine(TASKS[task])
    engine.reset()
    plan, total = shortest_plan(engine)
    assert (len(plan), total) == (macros, ticks)


@pytest.mark.parametrize(
    ("tick_limit", "steps"), [(28, None), (40, None), (60, None), (80, None), (80, 9), (80, 12)]
)
def test_optimum_equals_exhaustive_search_tomato_salad(tick_limit, steps):
    engine = KitchenEngine(TASKS["TomatoSalad"], tick_limit=tick_limit)
    engine.reset()
    expected = plain_best(engine, engine.state, steps)
    assert optimal_policy(engine, steps).value(0, 0, steps) == pytest.approx(expected, abs=1e-12)


def test_optimum_equals_exhaustive_search_two_boards():
    engine = KitchenEngine(TASKS["TomatoLettuceSalad"], tick_limit=50)
    engine.reset()
    expected = plain_best(engine, engine.state)
    assert optimal_policy(engine).value(0, 0) == pytest.approx(expected, abs=1e-12)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prefix=st.lists(st.integers(0, 4), max_size=8),
    tick_limit=st.integers(20, 70),
    steps=st.one_of(st.none(), st.integers(1, 8)),
)
def test_optimum_from_any_reachable_state(prefix, tick_limit, steps):
    """From the state after any macro prefix, the oracle's value is the exhaustive optimum."""
    engine = KitchenEngine(TASKS["TomatoSalad"], tick_limit=tick_limit)
    engine.reset()
    root = engine.state.copy()
    for m in prefix:
        result = engine.run_macros([m])
        if result.terminated or result.truncated:
            return
    policy = optimal_policy(engine, steps, root=root)
    row = policy.graph.index[engine.state.key()]
    value = policy.value(row, engine.state.ticks, steps)
    assert value == pytest.approx(plain_best(engine, engine.state, steps), abs=1e-12)


@settings(max_examples=20, deadline=None)
@given(choices=st.lists(st.integers(0, 7), min_size=1, max_size=60), seed=st.integers(0, 10**6))
def test_no_label_sequence_beats_the_oracle(choices, seed):
    """Any sequence of labels (offered or not) returns at most the oracle's optimum."""
    env = gym.make("Overcooked-TomatoSalad-v0", max_episode_steps=len(choices))
    _, info = env.reset(seed=seed)
    total = 0.0
    for c in choices:
        labels = info["available_actions"]
        action = labels[c] if c < len(labels) else "not a label"
        _, reward, terminated, truncated, info = env.step(action)
        total += reward
        if terminated or truncated:
            break
    assert total <= optimal_return("TomatoSalad", len(choices)) + 1e-9
    assert total <= optimal_return("TomatoSalad") + 1e-9


@pytest.mark.parametrize("task", list(TASKS))
def test_oracle_attains_the_optimum_on_every_task(task):
    env = gym.make(f"Overcooked-{task}-v0")
    oracle = make_oracle(env)
    best = optimal_return(task)
    fastest = shortest_plan(env.unwrapped.engine)[1]
    assert best > 1.0
    for seed in (0, 7):
        total, info, terminated = play(env, oracle, seed)
        assert terminated and info["success"] and env.unwrapped.engine.state.delivered
        assert total == pytest.approx(best, abs=1e-9)
        # The optimum uses the tick budget (chop and re-serve cycles), not the fastest serve.
        assert info["ticks"] > fastest


@pytest.mark.parametrize("cap", [6, 10, 30])
def test_oracle_follows_the_time_limit(cap):
    env = gym.make("Overcooked-TomatoSalad-v0", max_episode_steps=cap)
    total, info, terminated = play(env, make_oracle(env))
    assert terminated and info["success"]
    assert total == pytest.approx(optimal_return("TomatoSalad", cap), abs=1e-9)
    engine = KitchenEngine(TASKS["TomatoSalad"])
    engine.reset()
    assert total == pytest.approx(plain_best(engine, engine.state, cap), abs=1e-9)


def test_a_step_limit_past_the_tick_limit_does_not_bind():
    assert optimal_return("TomatoSalad", 200) == optimal_return("TomatoSalad")
    env = gym.make("Overcooked-TomatoSalad-v0", max_episode_steps=500)
    total, info, terminated = play(env, make_oracle(env))
    assert terminated and total == pytest.approx(optimal_return("TomatoSalad"), abs=1e-9)


def test_six_steps_give_the_fastest_serve():
    """With six decisions the optimum is the reference's plan (the 1.146 of the board)."""
    assert optimal_return("TomatoSalad", 6) == pytest.approx(1.145992, abs=1e-6)
    assert optimal_return("TomatoSalad") == pytest.approx(1.860370, abs=1e-6)


def test_planning_leaves_the_engine_untouched():
    engine = KitchenEngine(TASKS["TomatoLettuceSalad"])
    engine.reset()
    engine.run_macros([0])
    before = engine.state.key(), engine.state.ticks, engine.macro_obs
    shortest_plan(engine)
    macro_graph(engine)
    optimal_policy(engine)
    assert (engine.state.key(), engine.state.ticks, engine.macro_obs) == before


def test_oracle_is_optimal_after_outside_interference():
    env = gym.make("Overcooked-TomatoSalad-v0")
    oracle = make_oracle(env)
    obs, info = env.reset(seed=0)
    oracle.act(obs, info["available_actions"])
    # Someone else takes the bowl first; the oracle then takes the best return from there.
    obs, first, _, _, info = env.step("take the bowl")
    engine = env.unwrapped.engine
    policy = optimal_policy(engine)
    expected = policy.value(policy.graph.index[engine.state.key()], engine.state.ticks)
    total = 0.0
    for _ in range(300):
        obs, reward, terminated, truncated, info = env.step(
            oracle.act(obs, info["available_actions"])
        )
        total += reward
        if terminated or truncated:
            break
    assert terminated and info["success"]
    assert total == pytest.approx(expected, abs=1e-9)
    assert first + total < optimal_return("TomatoSalad")
