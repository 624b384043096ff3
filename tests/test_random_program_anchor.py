"""The DataSciCoding random row (baselines/random.py, make_random_program_agent): a program
that runs on every evaluation table, NaN included, and scores chance, ROC AUC 0.5."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agentbench_poad  # noqa: F401  (registers the ids)
from agentbench_poad.baselines.random import CHANCE_PROGRAM, make_random_program_agent


@pytest.mark.parametrize("dataset", ["gen-xor", "gen-loans", "iris"])
def test_the_chance_program_runs_and_scores_exactly_one_half(dataset):
    env = gym.make(f"DataSciCoding-{dataset}-v0", sandbox="process")
    agent = make_random_program_agent(seed=0)
    prompt, info = env.reset(seed=3)
    action = agent.act(prompt, info["available_actions"])
    assert action == CHANCE_PROGRAM
    _, reward, terminated, _, _ = env.step(action)
    assert terminated and reward == pytest.approx(0.5, abs=1e-12)


def test_with_offered_actions_it_is_the_uniform_random_agent():
    agent = make_random_program_agent(seed=1)
    picks = {agent.act("obs", ["a", "b", "c"]) for _ in range(50)}
    assert picks == {"a", "b", "c"}
