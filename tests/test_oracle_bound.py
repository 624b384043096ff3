"""No committed record beats its env's oracle on any episode seed (issue 27, item 3).

Overcooked: the oracle's value is the exact optimum of the undiscounted return (the records'
``return`` metric) under the record's own ``TimeLimit`` (``config.env_kwargs``), computed by
:mod:`agentbench_poad.baselines.oracle_overcooked`. The kitchen has no randomness, so the bound
is the same for every reset seed (checked below); each stored episode is compared with it.

VirtualHome: +1 on completion only, so no episode returns more than 1 and none has a discounted
return above ``γ**(shortest plan - 1)``; the oracle's episodes attain both.

DataSciCoding has no computable best (the best ROC AUC of any program is unknown): its "oracle"
is a scripted baseline and is not checked as a bound.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

from agentbench_poad.baselines.oracle_overcooked import optimal_return
from agentbench_poad.environments.virtualhome.tasks import TASKS_BY_NAME
from agentbench_poad.evaluation import env_discount
from agentbench_poad.leaderboard.records import load_records

TOLERANCE = 1e-9
RECORDS = load_records()


def _records(family: str) -> list[dict]:
    return [r for r in RECORDS if r["env"]["family"] == family]


def _episodes(record: dict) -> list[dict]:
    return [e for seed in record["scores"]["per_seed"] for e in seed["episodes"]]


def _task(record: dict) -> str:
    return gym.spec(record["env"]["id"]).kwargs["task"]


def _cap(record: dict) -> int | None:
    return ((record.get("config") or {}).get("env_kwargs") or {}).get("max_episode_steps")


def test_the_board_has_records_to_check():
    assert len(_records("overcooked")) >= 14 and len(_records("virtualhome")) >= 18


@pytest.mark.parametrize("task", ["TomatoSalad", "TomatoLettuceSalad"])
def test_the_kitchen_is_the_same_for_every_reset_seed(task):
    env = gym.make(f"Overcooked-{task}-v0")
    keys = set()
    for seed in (0, 1, 100_001, 2**31 - 1):
        obs, info = env.reset(seed=seed)
        keys.add((env.unwrapped.engine.state.key(), obs, tuple(info["available_actions"])))
    assert len(keys) == 1


@pytest.mark.parametrize("record", _records("overcooked"), ids=lambda r: r["record_id"])
def test_no_overcooked_record_beats_the_oracle(record):
    bound = optimal_return(_task(record), _cap(record))
    episodes = _episodes(record)
    assert episodes, "the record stores no episodes"
    over = [(e["reset_seed"], e["return"]) for e in episodes if e["return"] > bound + TOLERANCE]
    assert not over, f"episodes above the oracle's {bound:.6f}: {over[:5]}"
    if record["agent"]["name"] == "oracle":
        assert all(e["return"] == pytest.approx(bound, abs=TOLERANCE) for e in episodes)
        assert record["scores"]["mean"] == pytest.approx(bound, abs=TOLERANCE)


@pytest.mark.parametrize("record", _records("virtualhome"), ids=lambda r: r["record_id"])
def test_no_virtualhome_record_beats_the_oracle(record):
    task = TASKS_BY_NAME[_task(record)]
    gamma = record["protocol"].get("discount") or env_discount(record["env"]["id"])
    best_discounted = gamma ** (task.shortest_plan - 1)
    episodes = _episodes(record)
    assert episodes, "the record stores no episodes"
    for e in episodes:
        assert e["return"] <= 1.0 + TOLERANCE, e["reset_seed"]
        if e.get("discounted_return") is not None:
            assert e["discounted_return"] <= best_discounted + TOLERANCE, e["reset_seed"]
    if record["agent"]["name"] == "oracle":
        assert all(e["return"] == 1.0 and e["length"] == task.shortest_plan for e in episodes)
