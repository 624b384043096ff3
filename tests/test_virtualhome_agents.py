"""VirtualHome with scripted agents: the oracle solves every task in the fewest steps the
reference allows; a random agent's success rate lies between nothing and the oracle's, and the
environment card reports exactly the rate computed here."""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym
import pytest

from agentbench_poad.agents import reset_agent
from agentbench_poad.baselines.oracle import make_oracle
from agentbench_poad.baselines.oracle_virtualhome import VirtualHomeOracle
from agentbench_poad.baselines.random import RandomAgent
from agentbench_poad.environments.virtualhome.tasks import TASKS, VirtualHomeTask

CARD = Path(__file__).resolve().parents[1] / "docs" / "envs" / "virtualhome.md"
#: Episodes of the random-agent measurement (the card states the same number).
RANDOM_EPISODES = 500
#: Shortest plans of docs/reference.md sections 2.2-2.4.
SPEC_SHORTEST = {"Entertainment": 11}  # every other task is Food Preparation's 6


def play(env: gym.Env, agent, seed: int) -> tuple[float, int, bool]:
    """One episode: (return, steps, success)."""
    reset_agent(agent, seed=seed)
    obs, info = env.reset(seed=seed)
    total, steps = 0.0, 0
    while True:
        action = agent.act(obs, info["available_actions"])
        assert action in info["available_actions"]
        obs, reward, terminated, truncated, info = env.step(action)
        total += reward
        steps += 1
        if terminated or truncated:
            return total, steps, bool(info["success"])


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_oracle_solves_every_task_with_the_shortest_plan(task: VirtualHomeTask) -> None:
    env = gym.make(task.env_id)
    oracle = make_oracle(env)
    assert isinstance(oracle, VirtualHomeOracle)
    assert task.shortest_plan == SPEC_SHORTEST.get(task.name, 6)
    for seed in range(10):
        total, steps, success = play(env, oracle, seed)
        assert success and total == 1.0
        assert steps == task.shortest_plan


@pytest.mark.parametrize("name", ["FoodPreparation", "Entertainment"])
def test_no_shorter_offered_plan_exists(name: str) -> None:
    """Every offered-action sequence one step shorter than the oracle's misses the goal."""
    env = gym.make(f"VirtualHome-{name}-v0").unwrapped
    scenario = env.scenario
    frontier = {scenario.scene.initial_state()}
    for _ in range(env.task.shortest_plan - 1):
        frontier = {
            scenario.scene.apply(s, scenario.catalogue[i][1]) or s
            for s in frontier
            for i in scenario.offered_indices(s)
        }
        assert not any(scenario.goal.achieved(scenario.scene, s) for s in frontier)


def test_oracle_replans_and_keeps_acting_in_a_dead_end() -> None:
    env = gym.make("VirtualHome-Entertainment-v0")
    oracle = make_oracle(env)
    obs, info = env.reset(seed=0)
    for action in ["walk to the living room", "walk to the sofa"]:  # a detour of one step
        obs, _, _, _, info = env.step(action)
    assert len(oracle.plan()) == 11 - 1
    # The dead end: the milk on the coffee table first, then the chips are out of reach.
    env.reset(seed=0)
    for action in ["walk to the milk", "grab the milk", "walk to the living room",
                   "walk to the coffee table", "put the milk on the coffee table",
                   "walk to the kitchen"]:  # fmt: skip
        obs, _, _, _, info = env.step(action)
    assert oracle.plan() is None
    steps, truncated = 6, False
    while not truncated:
        action = oracle.act(obs, info["available_actions"])
        assert action in info["available_actions"]
        obs, reward, terminated, truncated, info = env.step(action)
        assert reward == 0.0 and not terminated
        steps += 1
    assert steps == 50
    with pytest.raises(TypeError, match="VirtualHomeEnv"):
        VirtualHomeOracle(gym.make("CartPole-v1"))


def random_success_rate(env_id: str, episodes: int = RANDOM_EPISODES) -> float:
    """Success rate of :class:`RandomAgent` over ``episodes`` (episode ``i``: seed ``i``)."""
    env = gym.make(env_id)
    agent = RandomAgent(seed=0)
    return sum(play(env, agent, seed)[2] for seed in range(episodes)) / episodes


def card_rates() -> dict[str, float]:
    text = CARD.read_text()
    block = text.split("<!-- random-success -->")[1].split("<!-- /random-success -->")[0]
    return {
        m.group(1): float(m.group(2))
        for m in re.finditer(
            r"^\|\s*`?(VirtualHome-\w+-v0)`?\s*\|[^|]*\|\s*([0-9.]+)\s*\|", block, re.M
        )
    }


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_random_agent_rate_is_between_nothing_and_the_oracle(task: VirtualHomeTask) -> None:
    rate = random_success_rate(task.env_id)
    assert 0.0 < rate < 1.0  # the oracle's rate is 1.0 (test above)
    # Rare enough that the task needs planning: well under one in ten episodes.
    assert rate < 0.1
    reported = card_rates().get(task.env_id)
    assert reported == pytest.approx(rate, abs=5e-4), (
        f"docs/envs/virtualhome.md must report the random agent's success rate of "
        f"{task.env_id} over {RANDOM_EPISODES} episodes as {rate:.3f} (it says {reported})"
    )
