"""`verify`: re-running a sample of a record's episodes reproduces (or exposes) its score."""

from __future__ import annotations

import copy

import gymnasium as gym
import pytest

from agentbench_poad.baselines.random import RandomAgent
from agentbench_poad.cli import main
from agentbench_poad.leaderboard import add_record, evaluate, verify_record
from agentbench_poad.leaderboard.records import DEFAULT_STORE, iter_record_files, read_record
from agentbench_poad.leaderboard.schema import RecordError
from agentbench_poad.leaderboard.verify import sample_indices
from tests.test_leaderboard_toys import CORRIDOR_ID

RANDOM_SPEC = "agentbench_poad.baselines.random:RandomAgent"


@pytest.fixture(scope="module")
def random_record():
    return evaluate(RANDOM_SPEC, CORRIDOR_ID, seeds=[0, 1, 2], episodes=6)[0]


def test_sample_indices_cover_the_range():
    assert sample_indices(100, 3) == [0, 50, 99]
    assert sample_indices(4, 10) == [0, 1, 2, 3]
    assert sample_indices(5, 1) == [0]


def test_a_seeded_stochastic_record_reproduces_exactly(random_record):
    result = verify_record(random_record, episodes_per_seed=3)
    assert result.sampled == 9
    assert result.exact_matches == 9
    assert result.reproduced and result.difference == 0.0
    assert "REPRODUCED" in result.summary()


def test_a_tampered_record_is_caught_before_any_replay(random_record):
    from agentbench_poad.leaderboard.recompute import DerivedMismatch

    tampered = copy.deepcopy(random_record)
    for seed in tampered["scores"]["per_seed"]:
        for episode in seed["episodes"]:
            episode["score"] += 1.0  # claims one more point per episode than the agent earns
    with pytest.raises(DerivedMismatch, match=r"scores.per_seed\[0\].episodes\[0\].score"):
        verify_record(tampered, episodes_per_seed=2)


def test_a_consistently_tampered_record_does_not_reproduce(random_record):
    from agentbench_poad.leaderboard.records import summarize_seeds

    tampered = copy.deepcopy(random_record)
    for seed in tampered["scores"]["per_seed"]:
        for episode in seed["episodes"]:
            episode["score"] += 1.0
            episode["return"] += 1.0
        seed["score"] += 1.0
        seed["mean_return"] += 1.0
    tampered["scores"].update(summarize_seeds(tampered["scores"]["per_seed"]))
    result = verify_record(tampered, episodes_per_seed=2)
    assert not result.reproduced
    assert result.difference == pytest.approx(-1.0)
    assert result.exact_matches == 0


def test_records_without_an_agent_factory_cannot_be_verified():
    record = evaluate(RandomAgent(seed=0), CORRIDOR_ID, seeds=[0], episodes=1)[0]
    with pytest.raises(RecordError, match="cannot be rebuilt"):
        verify_record(record)


def test_verify_cli_exit_code_follows_the_verdict(tmp_path, random_record, capsys):
    good = copy.deepcopy(random_record)
    add_record(good, tmp_path)
    assert (
        main(
            [
                "leaderboard",
                "--store",
                str(tmp_path),
                "verify",
                good["record_id"],
                "--episodes-per-seed",
                "2",
            ]
        )
        == 0
    )
    assert "REPRODUCED" in capsys.readouterr().out
    bad = copy.deepcopy(random_record)
    bad["record_id"] += "-tampered"
    for seed in bad["scores"]["per_seed"]:
        for episode in seed["episodes"]:
            episode["score"] -= 5.0
            episode["return"] -= 5.0
        seed["score"] -= 5.0
        seed["mean_return"] -= 5.0
    bad["scores"]["mean"] -= 5.0
    add_record(bad, tmp_path)
    assert main(["leaderboard", "--store", str(tmp_path), "verify", bad["record_id"]]) == 1
    assert "NOT REPRODUCED" in capsys.readouterr().out
    edited = copy.deepcopy(random_record)
    edited["record_id"] += "-edited"
    edited["scores"]["mean"] += 0.5  # a headline number edited by hand
    add_record(edited, tmp_path)
    assert main(["leaderboard", "--store", str(tmp_path), "verify", edited["record_id"]]) == 2
    assert "scores.mean is" in capsys.readouterr().err
    assert main(["leaderboard", "--store", str(tmp_path), "show", good["record_id"]]) == 0
    shown = capsys.readouterr().out
    assert "seed    2" in shown and RANDOM_SPEC in shown


ORACLE_SPEC = "agentbench_poad.baselines.oracle:make_oracle"


@pytest.fixture(scope="module")
def discounted_record():
    """A new record on a Table 1 task: its episodes log discounted returns (γ < 1, reward late)."""
    return evaluate(ORACLE_SPEC, "VirtualHome-Cheese-v0", seeds=[0, 1], episodes=3)[0]


def _without_discounted_returns(record):
    """``record`` as a record made before episodes logged a discounted return."""
    old = copy.deepcopy(record)
    del old["protocol"]["discount"]
    del old["scores"]["mean_discounted_return"], old["scores"]["discounted_return_stderr"]
    for seed in old["scores"]["per_seed"]:
        del seed["mean_discounted_return"]
        for episode in seed["episodes"]:
            del episode["discounted_return"]
    return old


def test_a_new_record_compares_discounted_returns_too(discounted_record):
    from agentbench_poad.registration import env_facts

    assert discounted_record["protocol"]["discount"] == env_facts("VirtualHome-Cheese-v0").discount
    result = verify_record(discounted_record, episodes_per_seed=2)
    assert result.reproduced and result.exact_matches == result.sampled == 4
    assert result.discounted_sampled == 4
    assert result.rerun_discounted_mean == result.recorded_discounted_mean
    assert result.recorded_discounted_mean < result.recorded_mean  # discounted, not the return
    assert "discounted return: recorded mean" in result.summary()
    tampered = copy.deepcopy(discounted_record)
    for seed in tampered["scores"]["per_seed"]:
        for episode in seed["episodes"]:
            episode["discounted_return"] += 0.5  # the score is left as played
        seed["mean_discounted_return"] += 0.5
    tampered["scores"]["mean_discounted_return"] += 0.5
    result = verify_record(tampered, episodes_per_seed=2)
    assert not result.reproduced and result.exact_matches == 0
    assert result.rerun_mean == result.recorded_mean  # only the discounted return differs
    assert result.rerun_discounted_mean == pytest.approx(result.recorded_discounted_mean - 0.5)


def test_an_old_record_without_discounted_returns_loads_and_verifies(tmp_path, discounted_record):
    from agentbench_poad.evaluation import EpisodeResult

    old = _without_discounted_returns(discounted_record)
    path = add_record(old, tmp_path)  # validated on write ...
    loaded = read_record(path)  # ... and on read
    assert "discounted_return" not in loaded["scores"]["per_seed"][0]["episodes"][0]
    episodes = [EpisodeResult.from_entry(e) for e in loaded["scores"]["per_seed"][0]["episodes"]]
    assert all(e.discounted_return is None for e in episodes)
    result = verify_record(loaded, episodes_per_seed=2)
    assert result.reproduced and result.exact_matches == result.sampled == 4
    assert result.discounted_sampled == 0 and result.recorded_discounted_mean is None
    assert "discounted" not in result.summary()
    assert main(["leaderboard", "--store", str(tmp_path), "verify", old["record_id"]]) == 0


COMMITTED = iter_record_files(DEFAULT_STORE)


def test_the_board_ships_oracle_and_random_records_for_the_paper_tasks():
    ids = {read_record(p)["record_id"] for p in COMMITTED}
    for env_id in (
        "Overcooked-TomatoSalad-v0",
        "Overcooked-TomatoLettuceSalad-v0",
        "VirtualHome-FoodPreparation-v0",
        "VirtualHome-Entertainment-v0",
    ):
        assert f"{env_id}__oracle" in ids and f"{env_id}__random" in ids, env_id


def _committed_params():
    # DataSciCoding episodes run code in the sandbox (seconds each) and language-model rows load
    # (and, on a fresh machine, fetch) a real model: those replays are opt-in
    def slow(path):
        return path.stem.startswith("DataSciCoding-") or bool(read_record(path)["model"]["base"])

    return [
        pytest.param(p, id=p.stem, marks=[pytest.mark.slow] if slow(p) else []) for p in COMMITTED
    ]


@pytest.mark.parametrize("path", _committed_params())
def test_committed_records_reproduce(path):
    record = read_record(path)
    if record["env"]["id"] not in gym.registry:
        pytest.skip(f"{record['env']['id']} is not registered in this checkout")
    result = verify_record(record, episodes_per_seed=1, max_seeds=2)
    assert result.reproduced, result.summary()
    assert result.exact_matches == result.sampled  # every agent is seeded: replays are exact
