"""The case-study toy environments (agentbench_poad/rl/toy.py)."""

from __future__ import annotations

import gymnasium as gym
import pytest

from agentbench_poad.checker import check_text_env
from agentbench_poad.rl.toy import ACTIONS_BY_STAGE, CLOSE, OPEN, PUT

IDS = ("CaseStudy-Microwave-v0", "CaseStudy-MicrowaveClose-v0", "CaseStudy-OpenText-v0")


@pytest.mark.parametrize("env_id", IDS)
def test_toy_envs_pass_the_checker(env_id):
    env = gym.make(env_id)
    check_text_env(env.unwrapped)
    env.close()


def test_optimal_plan_and_time_limit():
    env = gym.make("CaseStudy-Microwave-v0")
    _, info = env.reset(seed=0)
    assert info["available_actions"] == list(ACTIONS_BY_STAGE[0])
    rewards = []
    for action in (OPEN, PUT, CLOSE):
        _, reward, terminated, truncated, info = env.step(action)
        rewards.append(reward)
    assert rewards == [0.0, 0.0, 1.0] and terminated and info["success"]

    env.reset(seed=0)
    for step in range(5):  # "close" never opens the door: the 5th step fails with -1
        _, reward, terminated, _, info = env.step(CLOSE)
        assert terminated == (step == 4)
    assert reward == -1.0 and not info["success"]


def test_invalid_action_is_a_noop_with_a_note():
    env = gym.make("CaseStudy-Microwave-v0")
    env.reset(seed=0)
    observation, reward, terminated, _, info = env.step(PUT)  # not offered in stage 0
    assert not info["action_valid"] and reward == -1.0 and not terminated
    assert "not available" in observation and info["stage"] == 0


def test_bandit_and_open_text():
    env = gym.make("CaseStudy-MicrowaveClose-v0")
    env.reset(seed=0)
    assert env.step(CLOSE)[1:3] == (1.0, True)
    env.reset(seed=0)
    assert env.step(OPEN)[1:3] == (-1.0, True)
    env = gym.make("CaseStudy-OpenText-v0")
    _, info = env.reset(seed=0)
    assert info["available_actions"] is None
    assert env.step("  open the microwave")[1] == 1.0
