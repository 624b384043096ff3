"""`agentbench-poad quickstart` end to end (``--tiny``), and `leaderboard add --run` on its runs."""

from __future__ import annotations

import json

import pytest

from agentbench_poad.cli import main
from agentbench_poad.leaderboard import load_records, read_record, verify_record

pytest.importorskip("torch")
pytest.importorskip("agentbench_poad.rl.trainer")

ENV = "Overcooked-TomatoSalad-v0"


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    out = tmp_path_factory.mktemp("quickstart")
    assert main(["quickstart", "--tiny", "--out", str(out), "--no-progress"]) == 0
    return out


def test_quickstart_writes_a_record_per_row_and_the_report(quickstart, capsys):
    records = {r["record_id"]: r for r in load_records(quickstart / "records")}
    agents = {(r["env"]["id"], r["agent"]["name"]) for r in records.values()}
    for name in ("poad", "ntpo", "twosome", "oracle", "random", "base-greedy"):  # --tiny: greedy
        assert (ENV, name) in agents, name
    base = next(r for r in records.values() if r["agent"]["name"] == "base-greedy")
    trained = next(r for r in records.values() if r["agent"]["name"] == "poad")
    # the base-model row is scored under the trained rows' protocol, on the same model
    assert base["model"]["base"] == trained["model"]["base"]
    assert base["model"]["adapter"] is None and base["protocol"]["greedy"] is True
    for key in ("seeds", "episodes_per_seed", "reset_seed_rule"):
        assert base["protocol"][key] == trained["protocol"][key], key
    assert base["config"]["env_kwargs"] == trained["config"]["env_kwargs"]
    assert ("DataSciCoding-iris-v0", "scripted") in agents
    assert ("DataSciCoding-iris-v0", "random") in agents
    for r in records.values():
        if r["agent"]["name"] in ("poad", "ntpo", "twosome"):
            assert r["training"]["runs"] and r["learning_curve"]["points"]
            assert r["model"]["base"].endswith("model")
            assert r["config"]["agent_spec"] == (
                "agentbench_poad.leaderboard.from_run:load_run_agent"
            )
    dsc_oracle = next(
        r
        for r in records.values()
        if r["env"]["id"] == "DataSciCoding-iris-v0" and r["agent"]["name"] == "scripted"
    )
    assert dsc_oracle["scores"]["metric"] == "final_auc"
    assert 0.5 < dsc_oracle["scores"]["mean"] <= 1.0
    html = (quickstart / "report" / "report.html").read_text()
    md = (quickstart / "report" / "report.md").read_text()
    for name in ("poad", "ntpo", "twosome"):
        assert f"| {name} (model) |" in md
    assert f"curve-{ENV}.svg" in md and f'data-chart="curve-{ENV}"' in html
    assert "| iris |" in md


def test_quickstart_rerun_reuses_its_work(quickstart, capsys):
    before = {p.name: p.stat().st_mtime_ns for p in (quickstart / "records").glob("*.json")}
    assert main(["quickstart", "--tiny", "--out", str(quickstart), "--no-progress"]) == 0
    after = {p.name: p.stat().st_mtime_ns for p in (quickstart / "records").glob("*.json")}
    assert before == after
    assert str(quickstart / "report" / "report.html") in capsys.readouterr().out


def test_leaderboard_add_run_makes_a_record_that_verifies(quickstart, tmp_path):
    run = quickstart / "runs" / "poad"
    store = tmp_path / "store"
    assert (
        main(
            [
                "leaderboard",
                "--store",
                str(store),
                "add",
                "--run",
                str(run),
                "--episodes",
                "1",
                "--env",
                "VirtualHome-Cheese-v0",
            ]
        )
        == 0
    )
    (record,) = load_records(store)
    assert record["agent"]["name"] == "poad"
    assert record["env"]["id"] == "VirtualHome-Cheese-v0"
    assert record["training"]["env_id"] == ENV  # a generalisation row
    assert record["record_id"].endswith("trainedon-TomatoSalad")
    assert record["command"] == (
        f"agentbench-poad leaderboard add --run {run} --episodes 1 --env VirtualHome-Cheese-v0"
    )
    config = json.loads((run / "config.json").read_text())
    assert record["config"]["training_config"]["seed"] == config["seed"]
    result = verify_record(read_record(store / f"{record['record_id']}.json"), episodes_per_seed=1)
    assert result.reproduced, result.summary()


@pytest.mark.slow
def test_full_quickstart(tmp_path):
    """The default: SmolLM2 (fetched or cached), POAD with the CPU preset; the trained row must
    beat the base-model row (the 15-minute budget on 2 cores: benchmarks/quickstart_budget.py)."""
    assert main(["quickstart", "--out", str(tmp_path), "--no-progress"]) == 0
    assert (tmp_path / "report" / "report.html").exists()
    rows = {
        r["agent"]["name"]: r for r in load_records(tmp_path / "records") if r["env"]["id"] == ENV
    }
    assert rows["poad"]["scores"]["mean"] > rows["base"]["scores"]["mean"]


def test_runs_of_two_training_seeds_make_one_record_with_a_spread(quickstart, tmp_path):
    import shutil

    first = quickstart / "runs" / "twosome"
    second = tmp_path / "twosome-seed1"
    shutil.copytree(first, second)  # stands in for a second training seed of the same setup
    config = json.loads((second / "config.json").read_text())
    config["seed"] = 1
    (second / "config.json").write_text(json.dumps(config))
    store = tmp_path / "store"
    assert (
        main(
            [
                "leaderboard",
                "--store",
                str(store),
                "add",
                "--run",
                str(first),
                "--run",
                str(second),
                "--episodes",
                "1",
            ]
        )
        == 0
    )
    (record,) = load_records(store)
    assert [s["seed"] for s in record["scores"]["per_seed"]] == [0, 1]
    assert record["learning_curve"]["points"][-1]["n"] == 2
    assert len(record["training"]["runs"]) == 2
    assert record["config"]["env_kwargs"] == config["env_kwargs"]  # evaluated as trained


def test_more_steps_continue_training_and_refresh_the_trained_rows(tmp_path):
    out = tmp_path / "qs"
    common = [
        "quickstart",
        "--tiny",
        "--out",
        str(out),
        "--no-progress",
        "--agents",
        "poad",
        "--dataset-env",
        "none",
    ]
    assert main(common) == 0
    assert main([*common, "--steps", "4"]) == 0
    poad = next(r for r in load_records(out / "records") if r["agent"]["name"] == "poad")
    assert poad["training"]["total_steps"] == 4
    assert [p["step"] for p in poad["learning_curve"]["points"]] == [2, 4]  # resumed, not redone
