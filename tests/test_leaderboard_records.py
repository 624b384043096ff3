"""Run records: schema validation on write and read, atomic writes, the store."""

from __future__ import annotations

import copy
import json
import os

import pytest

from agentbench_poad.leaderboard import evaluate
from agentbench_poad.leaderboard.records import (
    RecordWarning,
    add_record,
    env_kwargs_suffix,
    find_record,
    load_records,
    mean_stderr,
    read_record,
    record_id_suffix,
    record_study,
    write_json_atomic,
    write_record,
)
from agentbench_poad.leaderboard.schema import SCHEMA_VERSION, RecordError, validate_record
from tests.test_leaderboard_toys import CORRIDOR_ID, make_corridor_oracle


@pytest.fixture(scope="module")
def record():
    return evaluate(make_corridor_oracle, CORRIDOR_ID, seeds=[0, 1], episodes=3)[0]


def test_record_holds_everything_the_issue_asks_for(record):
    assert record["schema_version"] == SCHEMA_VERSION
    # The corridor is registered with plain gym.register (as another package would): no family.
    assert record["env"] == {
        "id": CORRIDOR_ID,
        "version": 0,
        "family": "external",
        "open_action": False,
    }
    assert record["agent"]["name"] == "oracle" and record["agent"]["version"]
    assert record["model"] == {
        "base": None,
        "adapter": None,
        "base_weights": None,
        "adapters": None,
    }
    assert set(record["scores"]) >= {"mean_discounted_return", "discounted_return_stderr"}
    assert record["protocol"]["seeds"] == [0, 1]
    assert [s["seed"] for s in record["scores"]["per_seed"]] == [0, 1]
    assert all(len(s["episodes"]) == 3 for s in record["scores"]["per_seed"])
    assert record["wall_time_s"] >= 0
    assert record["hardware"]["cpu_count"] >= 1
    assert record["software"]["package_version"]
    assert "git_commit" in record["software"]
    assert record["config"]["seeds"] == [0, 1] and record["config"]["episodes"] == 3
    assert record["command"]
    assert record["learning_curve"] is None and record["training"] is None


def test_mean_and_standard_error_over_seeds(record):
    per_seed = [s["score"] for s in record["scores"]["per_seed"]]
    mean, se = mean_stderr(per_seed)
    assert record["scores"]["mean"] == pytest.approx(mean)
    assert record["scores"]["stderr"] == pytest.approx(se)
    assert mean_stderr([1.0, 3.0]) == (2.0, 1.0)
    assert mean_stderr([5.0]) == (5.0, 0.0)


def test_write_then_read_round_trips(tmp_path, record):
    path = write_record(tmp_path / "r.json", record)
    assert read_record(path) == record
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert path.stat().st_mode & 0o777 == 0o644  # readable by all, like a committed file


def test_write_refuses_an_invalid_record_and_leaves_no_file(tmp_path, record):
    bad = copy.deepcopy(record)
    bad["scores"]["mean"] = "high"
    with pytest.raises(RecordError, match="scores/mean"):
        write_record(tmp_path / "bad.json", bad)
    assert not (tmp_path / "bad.json").exists()


def test_atomic_write_keeps_the_old_file_when_serialising_fails(tmp_path):
    path = write_json_atomic(tmp_path / "x.json", {"a": 1})
    with pytest.raises(ValueError):
        write_json_atomic(path, {"a": float("nan")})  # allow_nan=False
    assert json.loads(path.read_text()) == {"a": 1}
    assert os.listdir(tmp_path) == ["x.json"]


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda r: r.update(kind="something-else"), "not an agentbench-poad run record"),
        (lambda r: r.update(schema_version=SCHEMA_VERSION + 1), "upgrade agentbench-poad"),
        (lambda r: r.pop("env"), "'env' is a required property"),
        (lambda r: r["scores"]["per_seed"][0].pop("episodes"), "episodes"),
        (lambda r: r.update(record_id="has spaces/and slashes"), "record_id"),
    ],
)
def test_foreign_or_mismatched_records_are_refused_with_the_reason(record, mutate, message):
    bad = copy.deepcopy(record)
    mutate(bad)
    with pytest.raises(RecordError, match=message):
        validate_record(bad, source="x.json")


def test_store_skips_corrupt_and_foreign_files_with_a_named_warning(tmp_path, record):
    add_record(record, tmp_path)
    (tmp_path / "corrupt.json").write_text('{"schema_version": 1, "kind": ')
    (tmp_path / "foreign.json").write_text(json.dumps({"name": "not ours"}))
    with pytest.warns(RecordWarning) as caught:
        records = load_records(tmp_path)
    assert [r["record_id"] for r in records] == [record["record_id"]]
    messages = " ".join(str(w.message) for w in caught)
    assert "corrupt.json" in messages and "not valid JSON" in messages
    assert "foreign.json" in messages and "not an agentbench-poad run record" in messages


def test_add_refuses_duplicates_unless_replace(tmp_path, record):
    path = add_record(record, tmp_path)
    assert path.name == f"{record['record_id']}.json"
    with pytest.raises(RecordError, match="already exists"):
        add_record(record, tmp_path)
    changed = copy.deepcopy(record)
    changed["notes"] = "second"
    add_record(changed, tmp_path, replace=True)
    assert read_record(path)["notes"] == "second"


def test_add_refuses_a_corrupt_record(tmp_path, record):
    bad = copy.deepcopy(record)
    del bad["scores"]
    with pytest.raises(RecordError):
        add_record(bad, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_find_record_names_close_matches(tmp_path, record):
    add_record(record, tmp_path)
    assert find_record(record["record_id"], tmp_path)["record_id"] == record["record_id"]
    with pytest.raises(RecordError, match="did you mean"):
        find_record("Corridor", tmp_path)


@pytest.mark.parametrize(
    "kwargs, suffix",
    [
        ({}, None),
        (None, None),
        ({"max_episode_steps": 30}, "steps30"),
        ({"sandbox": "docker"}, None),  # how the env runs, not what it scores
        ({"sandbox": "auto", "max_episode_steps": 30}, "steps30"),
        ({"max_episode_steps": 30, "layout": "open"}, "layout-open-steps30"),
    ],
)
def test_env_kwargs_suffix_is_stable_and_readable(kwargs, suffix):
    assert env_kwargs_suffix(kwargs) == suffix


def test_only_anchor_ids_carry_their_env_kwargs():
    capped = {"max_episode_steps": 30}
    assert record_id_suffix("oracle", capped) == "steps30"
    assert record_id_suffix("Random", capped, "trainedon-X") == "trainedon-X__steps30"
    assert record_id_suffix("oracle", {}) is None
    # other agents keep the id they had before the rule (one record per env, model, training)
    assert record_id_suffix("poad", capped) is None
    assert record_id_suffix("poad", capped, "trainedon-X") == "trainedon-X"


def test_a_capped_anchor_record_gets_its_own_id():
    capped = evaluate(
        make_corridor_oracle,
        CORRIDOR_ID,
        seeds=[0],
        episodes=1,
        env_kwargs={"max_episode_steps": 30},
    )[0]
    assert capped["record_id"] == f"{CORRIDOR_ID}__oracle__steps30"
    assert capped["config"]["env_kwargs"] == {"max_episode_steps": 30}
    plain = evaluate(make_corridor_oracle, CORRIDOR_ID, seeds=[0], episodes=1)[0]
    assert plain["record_id"] == f"{CORRIDOR_ID}__oracle"


def test_git_dirty_ignores_the_runs_data_folder(tmp_path):
    """A study rewriting tracked checkpoints under runs/ leaves the code clean; a code edit does not."""
    import subprocess

    from agentbench_poad.leaderboard.records import git_commit

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "metrics.jsonl").write_text("{}\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    assert git_commit(tmp_path)[1] is False
    (tmp_path / "runs" / "metrics.jsonl").write_text("{}\n{}\n")
    assert git_commit(tmp_path)[1] is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_commit(tmp_path)[1] is True


# -- history: records taken off the board, kept -------------------------------------------------
def test_retire_moves_a_studys_trained_records_to_the_history_and_keeps_the_rest(tmp_path, capsys):
    import shutil
    from pathlib import Path

    from agentbench_poad.cli import main
    from agentbench_poad.leaderboard.records import DEFAULT_STORE, load_records

    store = tmp_path / "results"
    store.mkdir()
    names = {
        "trained": "Overcooked-TomatoSalad-v0__poad__smollm2-135m.json",  # smollm2-cpu, runs
        "evaluated": "Overcooked-TomatoSalad-v0__base-greedy__smollm2-135m.json",  # no runs
        "unstudied": "DataSciCoding-iris-v0__random.json",
    }
    # the trained one from the package's history (the fair study replaced it on the board)
    sources = {names["trained"]: DEFAULT_STORE.parent / "history" / "smollm2-cpu"}
    for name in names.values():
        shutil.copy(sources.get(name, DEFAULT_STORE) / name, store / name)
    studies = {n: record_study(json.loads((store / n).read_text())) for n in names.values()}
    assert studies[names["trained"]] == studies[names["evaluated"]] == "smollm2-cpu"
    assert studies[names["unstudied"]] is None
    original = (store / names["trained"]).read_text()
    base = ["leaderboard", "--store", str(store), "retire"]

    assert main([*base, "--study", "smollm2-cpu", "--trained", "--dry-run"]) == 0
    assert "would retire 1 record(s)" in capsys.readouterr().out
    assert sorted(p.name for p in store.iterdir()) == sorted(names.values())

    assert main([*base, "--study", "smollm2-cpu", "--trained"]) == 0
    kept = tmp_path / "history" / "smollm2-cpu" / names["trained"]
    assert kept.read_text() == original  # unchanged, off the board
    assert sorted(r["record_id"] + ".json" for r in load_records(store)) == sorted(
        [names["evaluated"], names["unstudied"]]
    )

    assert main([*base, "--study", "nope"]) != 0
    assert "its studies: smollm2-cpu" in capsys.readouterr().err
    assert main(base) != 0  # nothing named
    shutil.copy(kept, store / names["trained"])  # the same record back on the board ...
    assert main([*base, names["trained"].removesuffix(".json")]) != 0  # ... the slot is taken
    assert "already holds" in capsys.readouterr().err
    assert (store / names["trained"]).exists()
    assert main([*base, str(kept)]) != 0  # a file outside the store does not retire
    assert "not in the store" in capsys.readouterr().err
    assert main([*base, str(store / names["unstudied"])]) == 0
    assert (tmp_path / "history" / "unstudied" / names["unstudied"]).exists()
    assert Path(kept).exists()
