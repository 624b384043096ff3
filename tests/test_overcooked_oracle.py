"""The scripted Overcooked oracle serves every task's dish (REFERENCE_SPEC §1.7 plan lengths)."""

from __future__ import annotations

import gymnasium as gym
import pytest

from agentbench_poad.baselines.oracle import make_oracle
from agentbench_poad.baselines.oracle_overcooked import shortest_plan
from agentbench_poad.environments.overcooked.engine import KitchenEngine
from agentbench_poad.environments.overcooked.tasks import TASKS


@pytest.mark.parametrize(
    ("task", "macros", "ticks"), [("TomatoSalad", 6, 28), ("TomatoLettuceSalad", 10, 46)]
)
def test_shortest_plan_lengths(task, macros, ticks):
    engine = KitchenEngine(TASKS[task])
    engine.reset()
    plan, total = shortest_plan(engine)
    assert (len(plan), total) == (macros, ticks)


@pytest.mark.parametrize("task", list(TASKS))
def test_oracle_serves_the_dish(task):
    env = gym.make(f"Overcooked-{task}-v0")
    oracle = make_oracle(env)
    for seed in range(10):
        obs, info = env.reset(seed=seed)
        oracle.reset(seed=seed)
        served = False
        for _ in range(40):
            action = oracle.act(obs, info["available_actions"])
            obs, reward, terminated, truncated, info = env.step(action)
            assert info["action_valid"]
            assert not truncated
            if terminated:
                # The last macro-action: n ticks of -0.001 and the +1 on its last tick.
                n = info["macro_action_steps"]
                served_reward = sum(-0.001 * 0.99**k for k in range(n)) + 0.99 ** (n - 1)
                served = reward == pytest.approx(served_reward, abs=1e-12)
                assert env.unwrapped.engine.state.delivered
                break
        assert served, f"{task}: no dish served with seed {seed}"


def test_planning_leaves_the_engine_untouched():
    engine = KitchenEngine(TASKS["TomatoLettuceSalad"])
    engine.reset()
    engine.run_macros([0])
    before = engine.state.key(), engine.state.ticks, engine.macro_obs
    shortest_plan(engine)
    assert (engine.state.key(), engine.state.ticks, engine.macro_obs) == before


def test_oracle_replans_after_outside_interference():
    env = gym.make("Overcooked-TomatoSalad-v0")
    oracle = make_oracle(env)
    obs, info = env.reset(seed=0)
    oracle.act(obs, info["available_actions"])
    # Someone else takes the bowl first; the oracle must still serve the dish.
    obs, _, _, _, info = env.step("take the bowl")
    for _ in range(20):
        obs, reward, terminated, _, info = env.step(oracle.act(obs, info["available_actions"]))
        if terminated:
            break
    assert terminated and reward > 0.5
