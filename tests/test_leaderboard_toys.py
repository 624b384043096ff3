"""Small text envs and agents that the leaderboard tests share (plus tests of the toys).

The leaderboard must work for any registered id, so its tests do not wait for the real families:
``LeaderboardToy-Corridor-v0`` (restricted actions, like Overcooked/VirtualHome; registered with
plain ``gym.register``, as another package would) and ``LeaderboardToy-Code-v0`` (open actions
and attempts, like DataSciCoding; registered with ``register_family``, family "leaderboardtoy")
are registered here.
Other test modules import this one by name (pytest puts ``tests/`` on ``sys.path``).
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym

from agentbench_poad.core import TextEnv, invalid_action_note, text_space, to_text
from agentbench_poad.registration import SUCCESS_OPEN, EnvFamily, TaskRow, register_family

CORRIDOR_ID = "LeaderboardToy-Corridor-v0"
CODE_ID = "LeaderboardToy-Code-v0"


class CorridorEnv(TextEnv):
    """Walk right to the end of a corridor of random length (3-6): +1 at the end, -0.05 a step."""

    invalid_action_penalty = -0.05

    def __init__(self, render_mode: str | None = None) -> None:
        self.observation_space = text_space(512)
        self.action_space = text_space(16)
        self.render_mode = render_mode
        self.length = self.position = 0

    def _obs(self, note: str = "") -> str:
        return (
            f"{note} You are at cell {self.position} of {self.length}. Reach the last cell."
        ).strip()

    def _reset(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.length = int(self.np_random.integers(3, 7))
        self.position = 0
        return self._obs(), {"available_actions": ["left", "right", "wait"], "action_valid": True}

    def _step(self, action: str):
        info: dict[str, Any] = {"available_actions": ["left", "right", "wait"]}
        if action not in info["available_actions"]:
            info["action_valid"] = False
            return (
                self._obs(invalid_action_note(action, info["available_actions"])),
                self.invalid_action_penalty,
                False,
                False,
                info,
            )
        info["action_valid"] = True
        self.position = max(0, self.position + {"left": -1, "right": 1, "wait": 0}[action])
        done = self.position >= self.length
        return self._obs(), (1.0 if done else -0.05), done, False, info


class CodeEnv(TextEnv):
    """Answer a number in [0, 1]: reward = that number (an "AUC"); anything else -1, 3 attempts."""

    def __init__(self, render_mode: str | None = None) -> None:
        self.observation_space = text_space(512)
        self.action_space = text_space(256)
        self.render_mode = render_mode
        self.attempts = 0

    def _reset(self, options):
        self.attempts = 0
        return "Write a number between 0 and 1.", {"available_actions": None, "action_valid": True}

    def _step(self, action: str):
        self.attempts += 1
        try:
            value = float(action)
            ok = 0.0 <= value <= 1.0
        except ValueError:
            ok = False
        info = {"available_actions": None, "action_valid": True}
        if ok:
            return "ran", value, True, False, info
        error = to_text(f"error: {action!r} is not a number in [0, 1]", 512)
        return error, -1.0, False, self.attempts >= 3, info


def register_toys() -> None:
    if CORRIDOR_ID not in gym.registry:
        gym.register(CORRIDOR_ID, entry_point=CorridorEnv, max_episode_steps=30)
    family = EnvFamily(
        "leaderboardtoy",
        "LeaderboardToy",
        entry_point=CodeEnv,
        actions="open",
        metric="final_auc",
        success_rule=SUCCESS_OPEN,
    )
    register_family(family, [TaskRow("Code", description="write a number in [0, 1]")])


register_toys()


# -- agents ------------------------------------------------------------------------------------
class CorridorOracle:
    """Always walks right."""

    name = "oracle"

    def act(self, observation, available_actions):
        return "right"


def make_corridor_oracle(env):
    """Oracle factory with the make_oracle signature (reads nothing but proves env is passed)."""
    assert isinstance(env.unwrapped, CorridorEnv)
    return CorridorOracle()


class WaitingAgent:
    """Never reaches the goal (return = -0.05 * 30)."""

    def act(self, observation, available_actions):
        return "wait"


class RaisingAgent:
    def act(self, observation, available_actions):
        raise RuntimeError("boom")


class NonStringAgent:
    def act(self, observation, available_actions):
        return 3


class HangingAgent:
    """Hangs on its second action of every episode."""

    def __init__(self) -> None:
        self.calls = 0

    def reset(self, seed=None):
        self.calls = 0

    def act(self, observation, available_actions):
        self.calls += 1
        if self.calls == 2:
            time.sleep(30)
        return "right"


class CodeAgent:
    """Fails once, then answers 0.75."""

    def __init__(self) -> None:
        self.tries = 0

    def reset(self, seed=None):
        self.tries = 0

    def act(self, observation, available_actions):
        assert available_actions is None
        self.tries += 1
        return "not code" if self.tries == 1 else "0.75"


# -- tests of the toys themselves ---------------------------------------------------------------
def test_toy_envs_follow_the_text_env_contract():
    from agentbench_poad import check_text_env

    for env_id in (CORRIDOR_ID, CODE_ID):
        env = gym.make(env_id)
        try:
            check_text_env(env)
        finally:
            env.close()


def test_corridor_oracle_reaches_the_end():
    env = gym.make(CORRIDOR_ID)
    obs, info = env.reset(seed=3)
    total, done = 0.0, False
    while not done:
        obs, r, term, trunc, info = env.step(CorridorOracle().act(obs, info["available_actions"]))
        total += r
        done = term or trunc
    assert term and total > 0
