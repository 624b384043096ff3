"""An agent whose name the board cannot store is refused before any episode is played, not
after the evaluation's compute (the store would refuse its record at `leaderboard add`)."""

from __future__ import annotations

import pytest

from agentbench_poad.agents import SAFE_NAME, check_agent_name
from agentbench_poad.evaluation import EvaluationRequest, evaluate_cell


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name
        self.acted = 0

    def act(self, observation, available_actions):
        self.acted += 1
        return available_actions[0]


@pytest.mark.parametrize("name", ["My Agent", "a/b", "x\nrow", "", "-lead", "é"])
def test_a_name_the_board_cannot_store_stops_before_any_episode(name):
    made = []

    def factory(env, seed):
        made.append(_Named(name))
        return made[-1]

    with pytest.raises(ValueError, match="cannot name a board row"):
        evaluate_cell(EvaluationRequest(agent=factory, env_id="Overcooked-TomatoSalad-v0"))
    assert all(agent.acted == 0 for agent in made)


@pytest.mark.parametrize("name", ["poad", "my-agent_2.1", "A" * 200])
def test_safe_names_pass_and_match_the_store(name):
    assert check_agent_name(name) == name and SAFE_NAME.fullmatch(name)
