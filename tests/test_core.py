"""The text-env contract, the checker (it must catch broken envs), the agent protocol helpers."""

from __future__ import annotations

import random
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.error import ResetNeeded

from agentbench_poad import TextEnvCheckError, check_text_env
from agentbench_poad.agents import act_batch, reset_agent
from agentbench_poad.baselines.oracle import make_oracle
from agentbench_poad.baselines.random import RandomAgent
from agentbench_poad.core import CHARSET, TextEnv, invalid_action_note, text_space, to_text


class CountingEnv(TextEnv):
    """A tiny restricted-action env: say "up" three times. Subclasses break one rule each."""

    invalid_action_penalty = -0.5

    def __init__(self) -> None:
        self.observation_space = text_space(1000)
        self.action_space = text_space(100)
        self.count = 0

    def _actions(self) -> list[str]:
        return ["up", "stay"]

    def _obs(self, note: str = "") -> str:
        return (
            note + " " if note else ""
        ) + f"The counter shows {self.count}. Your next step is to"

    def _reset(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.count = 0
        return self._obs(), {"available_actions": self._actions(), "action_valid": True}

    def _step(self, action: str):
        if action not in self._actions():
            info = {"available_actions": self._actions(), "action_valid": False}
            return (
                self._obs(invalid_action_note(action)),
                self.invalid_action_penalty,
                False,
                False,
                info,
            )
        self.count += action == "up"
        done = self.count >= 3
        info = {"available_actions": self._actions(), "action_valid": True}
        return self._obs(), float(done), done, False, info


class NondeterministicEnv(CountingEnv):
    def _step(self, action: str):
        observation, reward, terminated, truncated, info = super()._step(action)
        return observation, reward + random.random(), terminated, truncated, info


class InvalidActionChangesState(CountingEnv):
    def _step(self, action: str):
        if action not in self._actions():
            self.count += 1  # not a no-op
        return super()._step(action)


class UnicodeObservationEnv(CountingEnv):
    def _obs(self, note: str = "") -> str:
        return super()._obs(note) + " \u2581"


class SilentInvalidActionEnv(CountingEnv):
    def _step(self, action: str):
        observation, reward, terminated, truncated, info = super()._step(action)
        return self._obs(), reward, terminated, truncated, info


def test_a_conforming_env_passes():
    check_text_env(CountingEnv())


@pytest.mark.parametrize(
    ("env_class", "needle"),
    [
        (NondeterministicEnv, "not deterministic"),
        (InvalidActionChangesState, "no-op"),
        (UnicodeObservationEnv, "not in observation_space"),
        (SilentInvalidActionEnv, "say why"),
    ],
)
def test_the_checker_catches_broken_envs(env_class, needle):
    with pytest.raises(TextEnvCheckError, match=needle):
        check_text_env(env_class(), skip_gymnasium_check=True)


def test_step_before_reset_after_end_and_wrong_type():
    env = CountingEnv()
    with pytest.raises(ResetNeeded, match="before reset"):
        env.step("up")
    env.reset(seed=0)
    with pytest.raises(TypeError, match="str"):
        env.step(1)  # type: ignore[arg-type]
    for _ in range(3):
        *_, terminated, _, _ = env.step("up")
    assert terminated
    with pytest.raises(ResetNeeded, match="after the episode ended"):
        env.step("up")


def test_to_text_escapes_and_truncates_into_the_space():
    space = text_space(200)
    escaped = to_text("caf\u00e9 \u2581<MID>", max_length=200)
    assert space.contains(escaped) and "\\xe9" in escaped and "\\u2581" in escaped
    long = to_text("a" * 1000 + "END", max_length=200)
    assert len(long) == 200 and space.contains(long) and long.endswith("END")
    assert all(c in CHARSET for c in long)


class BatchedAgent:
    def __init__(self) -> None:
        self.calls = 0

    def act(self, observation, available_actions):
        raise AssertionError("act_batch must be preferred")

    def act_batch(self, observations, available_actions):
        self.calls += 1
        return [a[0] for a in available_actions]


def test_act_batch_prefers_the_agents_own_batched_form():
    agent = BatchedAgent()
    assert act_batch(agent, ["o1", "o2"], [["x", "y"], ["z"]]) == ["x", "z"]
    assert agent.calls == 1
    with pytest.raises(ValueError, match="2 observations but 1"):
        act_batch(agent, ["o1", "o2"], [["x"]])


def test_random_agent_is_seeded_and_stays_in_the_action_set():
    actions = [f"action {i}" for i in range(7)]
    first = RandomAgent(seed=3)
    second = RandomAgent(seed=0)
    reset_agent(second, seed=3)
    picks = [first.act("obs", actions) for _ in range(50)]
    assert picks == [second.act("obs", actions) for _ in range(50)]
    assert set(picks) <= set(actions) and len(set(picks)) > 1
    assert RandomAgent(fallback_action="pass").act("obs", None) == "pass"


def test_make_oracle_refuses_foreign_envs():
    with pytest.raises(ValueError, match="not an agentbench-poad environment"):
        make_oracle(gym.make("FrozenLake-v1"))
