"""The evaluation protocol and `agentbench-poad evaluate --agent`."""

from __future__ import annotations

import json
import textwrap

import gymnasium as gym
import pytest

from agentbench_poad.agents import load_factory
from agentbench_poad.baselines.random import RandomAgent
from agentbench_poad.cli import main
from agentbench_poad.evaluation import RESET_SEED_STRIDE, deadline_cuts
from agentbench_poad.leaderboard import evaluate, load_records, read_record
from agentbench_poad.leaderboard.protocol import Provenance
from tests.test_leaderboard_toys import (
    CODE_ID,
    CORRIDOR_ID,
    CodeAgent,
    HangingAgent,
    NonStringAgent,
    RaisingAgent,
    WaitingAgent,
    make_corridor_oracle,
)


def _returns(record):
    return [e["return"] for s in record["scores"]["per_seed"] for e in s["episodes"]]


def test_oracle_beats_random_and_success_follows_return():
    oracle = evaluate(make_corridor_oracle, CORRIDOR_ID, seeds=[0, 1], episodes=4)[0]
    random = evaluate(RandomAgent, CORRIDOR_ID, seeds=[0, 1], episodes=4)[0]
    assert oracle["scores"]["success_rate"] == 1.0
    assert oracle["scores"]["mean"] > random["scores"]["mean"]
    for s in random["scores"]["per_seed"]:
        for e in s["episodes"]:
            assert e["success"] == (e["return"] > 0)
    waiting = evaluate(WaitingAgent, CORRIDOR_ID, seeds=[0], episodes=2)[0]
    assert waiting["scores"]["success_rate"] == 0.0
    assert waiting["scores"]["mean"] == pytest.approx(-0.05 * 30)  # the time limit


def test_episodes_are_reproducible_from_their_reset_seed():
    a = evaluate(RandomAgent, CORRIDOR_ID, seeds=[3], episodes=5)[0]
    b = evaluate(RandomAgent, CORRIDOR_ID, seeds=[3], episodes=5)[0]
    assert _returns(a) == _returns(b)
    seeds = [e["reset_seed"] for e in a["scores"]["per_seed"][0]["episodes"]]
    assert seeds == [3 * RESET_SEED_STRIDE + i for i in range(5)]
    c = evaluate(RandomAgent, CORRIDOR_ID, seeds=[4], episodes=5)[0]
    assert _returns(a) != _returns(c)


@pytest.mark.parametrize(
    "agent, reason",
    [
        (RaisingAgent, "agent raised RuntimeError at step 0: boom"),
        (NonStringAgent, "agent returned int at step 0, expected str"),
    ],
)
def test_bad_agents_become_failed_episodes_and_the_evaluation_goes_on(agent, reason):
    record = evaluate(agent, [CORRIDOR_ID, CODE_ID], seeds=[0, 1], episodes=2)
    assert len(record) == 2
    for r in record:
        for s in r["scores"]["per_seed"]:
            assert s["failed_episodes"] == 2
            assert all(e["failed"] and e["reason"] == reason for e in s["episodes"])
            assert not any(e["success"] for e in s["episodes"])


def test_a_hanging_agent_times_out_and_the_next_episode_still_runs():
    record = evaluate(HangingAgent, CORRIDOR_ID, seeds=[0], episodes=2, action_timeout=0.2)[0]
    episodes = record["scores"]["per_seed"][0]["episodes"]
    assert [e["failed"] for e in episodes] == [True, True]
    assert all("timed out at step 1" in e["reason"] for e in episodes)
    assert all(e["length"] == 1 for e in episodes)  # the first action was played
    # the deadline's episodes are counted apart from the agent's own faults
    assert deadline_cuts(record) == 2
    raising = evaluate(RaisingAgent, CORRIDOR_ID, seeds=[0], episodes=2)[0]
    assert raising["scores"]["per_seed"][0]["failed_episodes"] == 2 and deadline_cuts(raising) == 0


def test_open_action_envs_score_the_final_code():
    record = evaluate(CodeAgent, CODE_ID, seeds=[0, 1], episodes=2)[0]
    assert record["scores"]["metric"] == "final_auc"
    assert record["env"]["open_action"] is True
    assert record["env"]["family"] == "leaderboardtoy"  # from its register_family facts
    episode = record["scores"]["per_seed"][0]["episodes"][0]
    assert episode["return"] == pytest.approx(-1.0 + 0.75)  # a failed attempt, then the code
    assert episode["score"] == pytest.approx(0.75)
    assert episode["final_code"] == "0.75" and episode["success"]
    assert record["scores"]["mean"] == pytest.approx(0.75)
    failing = evaluate(RandomAgent, CODE_ID, seeds=[0], episodes=1)[0]  # answers "" 3 times
    assert failing["scores"]["mean"] == 0.0 and failing["scores"]["success_rate"] == 0.0


class Interrupting:
    """Plays right; raises KeyboardInterrupt once, at act call `at`, while `flag` is absent."""

    def __init__(self, flag: str, counter: str, at: int = 7) -> None:
        self.flag, self.counter, self.at = flag, counter, at

    def act(self, observation, available_actions):
        import pathlib

        counter = pathlib.Path(self.counter)
        calls = int(counter.read_text()) + 1 if counter.exists() else 1
        counter.write_text(str(calls))
        if calls == self.at and not pathlib.Path(self.flag).exists():
            pathlib.Path(self.flag).write_text("interrupted once")
            raise KeyboardInterrupt
        return "right"


def test_an_interrupted_evaluation_resumes_from_its_partial_file(tmp_path):
    kwargs = {"flag": str(tmp_path / "flag"), "counter": str(tmp_path / "calls")}
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        evaluate(
            Interrupting,
            CORRIDOR_ID,
            seeds=[0, 1],
            episodes=3,
            agent_kwargs=kwargs,
            out_dir=out,
            provenance=Provenance(agent_name="walker"),
        )
    partial = out / f"{CORRIDOR_ID}__walker.partial.jsonl"
    finished = len(partial.read_text().splitlines()) - 1  # minus the header line
    assert finished >= 1
    calls_first = int((tmp_path / "calls").read_text())
    record = evaluate(
        Interrupting,
        CORRIDOR_ID,
        seeds=[0, 1],
        episodes=3,
        agent_kwargs=kwargs,
        out_dir=out,
        provenance=Provenance(agent_name="walker"),
    )[0]
    assert not partial.exists()
    assert read_record(out / f"{CORRIDOR_ID}__walker.json") == record
    assert record["scores"]["success_rate"] == 1.0
    total_calls = int((tmp_path / "calls").read_text())
    full = evaluate(make_corridor_oracle, CORRIDOR_ID, seeds=[0, 1], episodes=3)[0]
    steps_needed = sum(e["length"] for s in full["scores"]["per_seed"] for e in s["episodes"])
    # the resumed run did not replay the finished episodes
    assert total_calls - calls_first < steps_needed
    assert _returns(record) == _returns(full)


def test_a_partial_file_of_another_evaluation_is_not_reused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    partial = out / f"{CORRIDOR_ID}__oracle.partial.jsonl"
    partial.write_text(
        json.dumps({"fingerprint": "someone-else"})
        + "\n"
        + json.dumps({"seed": 0, "episode": {"index": 0}})
        + "\n"
    )
    with pytest.warns(UserWarning, match="different evaluation"):
        record = evaluate(make_corridor_oracle, CORRIDOR_ID, seeds=[0], episodes=2, out_dir=out)[0]
    assert record["scores"]["per_seed"][0]["episodes"][0]["return"] > 0


def test_load_factory_reads_modules_and_files(tmp_path):
    assert load_factory("agentbench_poad.baselines.random:RandomAgent") is RandomAgent
    agent_file = tmp_path / "my_agent.py"
    agent_file.write_text("class Mine:\n    def act(self, o, a):\n        return a[0]\n")
    assert load_factory(f"{agent_file}:Mine").__name__ == "Mine"
    with pytest.raises(ValueError, match="must look like"):
        load_factory("no_colon")
    with pytest.raises(ValueError, match="cannot import"):
        load_factory("no_such_module_xyz:Agent")
    with pytest.raises(ValueError, match="has no attribute"):
        load_factory("agentbench_poad.baselines.random:Nope")


def test_two_commands_evaluate_a_users_agent_and_put_it_on_the_board(tmp_path, capsys):
    """The issue's 'done when': a user's agent class, evaluated and added with two commands."""
    agent_file = tmp_path / "user_agent.py"
    agent_file.write_text(
        textwrap.dedent("""
        class AlwaysRight:
            name = "always-right"
            version = "1.2"

            def act(self, observation, available_actions):
                return "right"
    """)
    )
    record_file, store = tmp_path / "my_record.json", tmp_path / "store"
    assert (
        main(
            [
                "evaluate",
                "--agent",
                f"{agent_file}:AlwaysRight",
                "--env",
                CORRIDOR_ID,
                "--seeds",
                "0",
                "1",
                "--episodes",
                "3",
                "--out",
                str(record_file),
                "--no-progress",
            ]
        )
        == 0
    )
    assert f"record: {record_file}" in capsys.readouterr().out
    assert not record_file.with_suffix(".partial.jsonl").exists()
    # A developer's tree (or a study writing into runs/) may have uncommitted changes.
    add = ["leaderboard", "--store", str(store), "add", str(record_file), "--allow-dirty"]
    assert main(add) == 0
    (record,) = load_records(store)
    assert record["agent"]["name"] == "always-right" and record["agent"]["version"] == "1.2"
    assert record["scores"]["success_rate"] == 1.0
    assert record["command"] == (
        f"agentbench-poad evaluate --agent {agent_file}:AlwaysRight "
        f"--env {CORRIDOR_ID} --seeds 0 1 --episodes 3"
    )
    assert main(["leaderboard", "--store", str(store), "list"]) == 0
    assert "always-right" in capsys.readouterr().out
    assert main(add) == 2
    assert "already exists" in capsys.readouterr().err


def test_evaluate_cli_errors_name_the_fix(tmp_path, capsys):
    assert (
        main(["evaluate", "--agent", "nope_module:X", "--env", CORRIDOR_ID, "--out", str(tmp_path)])
        == 2
    )
    assert "cannot import" in capsys.readouterr().err
    assert (
        main(
            [
                "evaluate",
                "--agent",
                "agentbench_poad.baselines.random:RandomAgent",
                "--env",
                "Nope-v0",
                "--out",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert "agentbench-poad envs" in capsys.readouterr().err
    assert (
        main(
            [
                "evaluate",
                "--agent",
                "agentbench_poad.baselines.random:RandomAgent",
                "--env",
                CORRIDOR_ID,
                "--agent-kwargs",
                "[1]",
                "--out",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert "JSON object" in capsys.readouterr().err


def test_evaluate_add_writes_into_the_store(tmp_path):
    store = tmp_path / "store"
    for env_id in (CORRIDOR_ID, CODE_ID):
        assert (
            main(
                [
                    "evaluate",
                    "--agent",
                    "agentbench_poad.baselines.random:RandomAgent",
                    "--env",
                    env_id,
                    "--seeds",
                    "0",
                    "--episodes",
                    "2",
                    "--out",
                    str(tmp_path / "o"),
                    "--add",
                    "--store",
                    str(store),
                    "--no-progress",
                ]
            )
            == 0
        )
    assert sorted(r["env"]["id"] for r in load_records(store)) == sorted([CODE_ID, CORRIDOR_ID])
    # without --seeds the run mode's --seed is the one evaluation seed
    assert (
        main(
            [
                "evaluate",
                "--agent",
                "agentbench_poad.baselines.random:RandomAgent",
                "--env",
                CORRIDOR_ID,
                "--seed",
                "7",
                "--episodes",
                "1",
                "--name",
                "r7",
                "--out",
                str(tmp_path / "o"),
                "--no-progress",
            ]
        )
        == 0
    )
    record = read_record(tmp_path / "o" / f"{CORRIDOR_ID}__r7.json")
    assert record["protocol"]["seeds"] == [7]


@pytest.mark.skipif(
    "Overcooked-TomatoSalad-v0" not in gym.registry,
    reason="the Overcooked family has not landed in this checkout",
)
def test_real_overcooked_oracle_and_random_rows():
    from agentbench_poad.baselines.oracle import make_oracle

    oracle = evaluate(make_oracle, "Overcooked-TomatoSalad-v0", seeds=[0], episodes=2)[0]
    random = evaluate(RandomAgent, "Overcooked-TomatoSalad-v0", seeds=[0], episodes=2)[0]
    assert oracle["agent"]["name"] == "oracle"
    assert oracle["scores"]["success_rate"] == 1.0
    assert oracle["scores"]["mean"] > random["scores"]["mean"]
