"""The tuning protocol of a study (issue 27 item 4): spec errors before any run, the selection
rule, tuning then --select then tuned evaluation groups, and `leaderboard add`'s check."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from agentbench_poad.study import StudyError, load_study, run_study, select_configs
from agentbench_poad.study.plan import StudyProgress, study_progress
from agentbench_poad.study.tuning import last3_sampled_return, read_tuning

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
ENV = "CaseStudy-Microwave-v0"
SMALL = dict(
    num_envs=2,
    rollout_length=3,
    epochs=1,
    num_minibatches=2,
    critic_lr=1e-3,
    critic_hidden_sizes=[16, 16],
    eval_every=1,
    eval_episodes=2,
    eval_greedy=False,
    keep_checkpoints=1,
)
GRID = {"lr": [1e-3, 5e-2], "target_kl": [0.02, 1.0]}


def spec_dict(model, **tuning):
    return {
        "study": {
            "name": "tuned",
            "model": str(model),
            "total_steps": {ENV: 6},
            "overrides": SMALL,
        },
        "eval": {"episodes": 2},
        "tuning": {
            "task": ENV,
            "agents": ["poad"],
            "seeds": [1000, 1001],
            "total_steps": 18,
            "selection": "last3-sampled-return",
            "grid": GRID,
            **tuning,
        },
        "group": [{"name": "eval", "tuned": True, "agents": ["poad"], "envs": [ENV], "seeds": [7]}],
    }


def write(path: Path, spec: dict) -> Path:
    path.write_text(json.dumps(spec))
    return path


# -- bad input: one error listing every problem, before any run ------------------------------------
def test_overlapping_seeds_and_unequal_budgets_are_errors_before_any_run(tmp_path):
    spec = spec_dict(
        "tiny",
        agents=["poad", "ntpo", "twosome"],
        per_agent={
            "ntpo": {
                "configs": [{"lr": 1e-3}, {"lr": 2e-3}, {"lr": 3e-3}, {"lr": 4e-3}, {"lr": 5e-3}]
            },
            "twosome": {"seeds": [1000, 1002]},
        },
    )
    spec["group"][0]["seeds"] = [7, 1001]
    spec["group"].append(
        {
            "name": "clash",
            "tuned": True,
            "agents": ["ntpo"],
            "envs": [ENV],
            "seeds": [8],
            "overrides": {"lr": 0.1},
        }
    )
    with pytest.raises(StudyError) as info:
        load_study(write(tmp_path / "s.json", spec), out=tmp_path / "out")
    message = str(info.value)
    assert "nothing was run" in message
    assert "evaluation seeds [1001] are tuning seeds" in message
    assert "unequal tuning budgets" in message
    assert (
        "ntpo: 5 configurations" in message
        and "twosome: 4 configurations x seeds [1000, 1002]" in message
    )
    assert "overrides set ['lr'], which the tuning chooses" in message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"selection": "best-ever"}, "selection must name the selection rule"),
        ({"seeds": [1000]}, "at least 4 configurations and 2 seeds"),
        ({"grid": {"lr": [1e-3, 2e-3]}}, "at least 4 configurations and 2 seeds"),
        ({"agents": ["poad", "nope"]}, "are not trained agents"),
        ({"configs": [{"lr": 1e-3}]}, "not both"),
        ({"chosen": {"poad": {"lr": 9.0, "target_kl": 0.02}}}, "is not one of its configurations"),
    ],
)
def test_bad_tuning_tables_are_errors(change, expected, tmp_path):
    with pytest.raises(StudyError, match="nothing was run") as info:
        load_study(write(tmp_path / "s.json", spec_dict("tiny", **change)), out=tmp_path / "o")
    assert expected in str(info.value)


def test_tuned_group_without_tuning_is_an_error(tmp_path):
    spec = spec_dict("tiny")
    del spec["tuning"]
    with pytest.raises(StudyError, match=r"tuned = true needs a \[tuning\] table"):
        load_study(write(tmp_path / "s.json", spec), out=tmp_path / "o")


def test_grid_order_and_equal_budgets():
    problems: list[str] = []
    from agentbench_poad.baselines import ALGORITHMS, get_algorithm

    trainable = {n: get_algorithm(n) for n in ALGORITHMS}
    tuning = read_tuning(spec_dict("tiny")["tuning"], trainable=trainable, problems=problems)
    assert problems == []
    assert tuning.searches["poad"].configurations == (
        {"lr": 1e-3, "target_kl": 0.02},
        {"lr": 1e-3, "target_kl": 1.0},
        {"lr": 5e-2, "target_kl": 0.02},
        {"lr": 5e-2, "target_kl": 1.0},
    )


# -- the selection rule ---------------------------------------------------------------------------
def test_last3_sampled_return_reads_the_last_three_points():
    sampled = {"algorithm": {"eval_greedy": False}}
    curve = [{"eval_return": v} for v in (9.0, 1.0, 2.0, 6.0)]
    assert last3_sampled_return(curve, sampled) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="greedy"):
        last3_sampled_return(curve, {"algorithm": {"eval_greedy": True}})
    with pytest.raises(ValueError, match="needs 3"):
        last3_sampled_return(curve[:2], sampled)


def _fake_tuning_runs(study, returns):
    """Write finished-looking tuning runs: ``returns[(index, seed)]`` is the curve."""
    for cell in study.cells:
        if cell.group != "tuning":
            continue
        run_dir = Path(cell.run_dir)
        run_dir.mkdir(parents=True)
        index = int(cell.label.removeprefix("config"))
        curve = [
            {"env_steps": 6 * (k + 1), "eval_return": r}
            for k, r in enumerate(returns[(index, cell.seed)])
        ]
        (run_dir / "learning_curve.json").write_text(json.dumps(curve))
        (run_dir / "config.json").write_text(
            json.dumps({"algorithm": {"eval_greedy": False, "num_envs": 2, "rollout_length": 3}})
        )
        checkpoint = run_dir / "checkpoints" / "update_000003"
        checkpoint.mkdir(parents=True)
        (checkpoint / "state.json").write_text(json.dumps({"update": 3}))
        (run_dir / "checkpoints" / "latest").write_text("update_000003")


def test_select_picks_the_best_mean_over_seeds_ties_to_the_earlier(tmp_path, tiny_model):
    path = write(tmp_path / "s.json", spec_dict(tiny_model))
    study = load_study(path, out=tmp_path / "out")
    assert [c.group for c in study.cells] == ["tuning"] * 8  # the tuned group waits
    assert study.pending == ["eval: poad"]
    returns = {
        (0, 1000): [5, 0, 0, 0],
        (0, 1001): [5, 0, 0, 0],  # early peak: the rule ignores it
        (1, 1000): [0, 1, 2, 3],
        (1, 1001): [0, 3, 2, 1],  # mean 2
        (2, 1000): [0, 2, 2, 2],
        (2, 1001): [0, 2, 2, 2],  # mean 2: a tie, goes to config1
        (3, 1000): [0, 4, 4, 4],
        (3, 1001): [0, 0, 0, 0],  # mean 2: a tie too
    }
    with pytest.raises(StudyError, match="cannot select yet"):
        select_configs(study)
    _fake_tuning_runs(study, returns)
    (selection,) = select_configs(study)
    loop = []
    for index in range(4):
        per_seed = [sum(returns[(index, s)][-3:]) / 3 for s in (1000, 1001)]
        loop.append(sum(per_seed) / 2)
    assert selection.scores == pytest.approx(loop)
    assert selection.index == 1 and selection.chosen == {"lr": 1e-3, "target_kl": 1.0}
    chosen = json.loads(path.read_text())["tuning"]["chosen"]
    assert chosen == {"poad": {"lr": 1e-3, "target_kl": 1.0}}
    select_configs(load_study(path, out=tmp_path / "out"))  # same result: no change, no error
    again = load_study(path, out=tmp_path / "out")
    (evaluation,) = [c for c in again.cells if c.group == "eval"]
    assert evaluation.overrides["lr"] == 1e-3 and evaluation.overrides["target_kl"] == 1.0
    assert json.loads(evaluation.config_source_json)["chosen"] == chosen["poad"]


def test_select_writes_a_marked_block_into_a_toml_spec(tmp_path, tiny_model):
    text = f"""# my comments stay; `--select` writes [tuning.chosen] at the end
[study]
name = "tuned"
model = "{tiny_model}"
overrides = {{ num_envs = 2, rollout_length = 3, epochs = 1, num_minibatches = 2, eval_every = 1, eval_greedy = false }}

[study.total_steps]
"{ENV}" = 6

[tuning]
task = "{ENV}"
agents = ["poad"]
seeds = [1000, 1001]
total_steps = 18
selection = "last3-sampled-return"
grid = {{ lr = [1e-3, 5e-2], target_kl = [0.02, 1.0] }}

[[group]]
name = "eval"
tuned = true
agents = ["poad"]
envs = ["{ENV}"]
seeds = [7]
"""
    path = tmp_path / "s.toml"
    path.write_text(text)
    study = load_study(path, out=tmp_path / "out")
    _fake_tuning_runs(study, {(i, s): [0, 0, i, i] for i in range(4) for s in (1000, 1001)})
    (selection,) = select_configs(study)
    assert selection.index == 3
    written = path.read_text()
    assert written.startswith(text.rstrip("\n"))
    assert "poad = { lr = 0.05, target_kl = 1.0 }" in written
    assert load_study(path, out=tmp_path / "out").tuning.chosen == {
        "poad": {"lr": 0.05, "target_kl": 1.0}
    }
    # Other tuning results later: the spec's choice stands, --select refuses to change it.
    for cell in study.cells:
        (Path(cell.run_dir) / "learning_curve.json").write_text(
            json.dumps([{"eval_return": 0.0}] * 3)
        )
    with pytest.raises(StudyError, match="already chose other configurations"):
        select_configs(load_study(path, out=tmp_path / "out"))
    # A [tuning.chosen] table written by hand (not a comment naming it) is not overwritten.
    path.write_text(text + "\n[tuning.chosen]\n")
    with pytest.raises(StudyError, match="hand-written \\[tuning.chosen\\]"):
        select_configs(load_study(path, out=tmp_path / "out"))


# -- end to end: tuning runs, --select, the tuned group, leaderboard add ---------------------------
def test_tuning_then_select_then_tuned_records(tiny_model, tmp_path):
    from agentbench_poad.leaderboard.records import RecordError, add_record

    path = write(tmp_path / "s.json", spec_dict(tiny_model))
    out = tmp_path / "out"
    lines: list[str] = []
    first = run_study(path, out=out, log=lines.append)
    assert first.failed == [] and len(first.trained) == 8 and first.records == []
    assert any(line.startswith("wait   eval: poad") for line in lines)
    (selection,) = select_configs(load_study(path, out=out))
    second = run_study(path, out=out, log=lambda line: None)
    assert second.failed == [] and len(second.trained) == 1 and len(second.records) == 1
    record = json.loads(Path(second.records[0]).read_text())
    source = record["training"]["config_source"]
    assert source["chosen"] == selection.chosen and source["spec"] == str(path)
    assert (
        source["tuning"]["seeds"] == [1000, 1001] and len(source["tuning"]["configurations"]) == 4
    )
    algorithm = record["config"]["training_config"]["algorithm"]
    assert {k: algorithm[k] for k in selection.chosen} == selection.chosen
    for key in ("policy_steps_taken", "policy_steps_skipped"):
        assert isinstance(record["training"][key], int)
    assert record["training"]["policy_steps_taken"] + record["training"]["policy_steps_skipped"] > 0

    store = tmp_path / "store"
    store.mkdir()
    add_record(record, store)  # the chosen config: accepted
    other = next(c for c in source["tuning"]["configurations"] if c != selection.chosen)
    claimed = copy.deepcopy(record)
    claimed["training"]["config_source"]["chosen"] = other
    with pytest.raises(RecordError, match="but its spec .* chose"):
        add_record(claimed, store, replace=True)
    trained_otherwise = copy.deepcopy(record)
    trained_otherwise["config"]["training_config"]["algorithm"]["lr"] = 123.0
    with pytest.raises(RecordError, match="its runs trained with lr = 123.0"):
        add_record(trained_otherwise, store, replace=True)
    lost = copy.deepcopy(record)
    lost["training"]["config_source"]["spec"] = str(tmp_path / "gone.toml")
    with pytest.raises(RecordError, match="cannot be read"):
        add_record(lost, store, replace=True)


# -- the committed fair study ------------------------------------------------------------------------
def test_committed_fair_study_follows_the_plan(tmp_path):
    from agentbench_poad.baselines import ALGORITHMS

    spec_path = ROOT / "studies" / "fair-cpu.toml"
    missing = sorted({"grpo", "gigpo"} - set(ALGORITHMS))
    if missing:  # the GRPO/GiGPO agents land from another branch: only they may be unknown
        with pytest.raises(StudyError) as info:
            load_study(spec_path, out=tmp_path / "out")
        problems = [p for p in str(info.value).splitlines()[1:]]
        assert problems and all(any(m in p for m in missing) for p in problems), problems
        return
    study = load_study(spec_path, out=tmp_path / "out")
    tuning = study.tuning
    assert tuning.task == "Overcooked-TomatoSalad-v0" and tuning.selection == "last3-sampled-return"
    assert sorted(tuning.searches) == ["gigpo", "grpo", "ntpo", "poad", "twosome"]
    for search in tuning.searches.values():
        assert search.seeds == (1000, 1001) and search.total_steps == 3072
        assert len(search.configurations) == 4
    tuning_cells = [c for c in study.cells if c.group == "tuning"]
    assert len(tuning_cells) == 40
    assert {c.env_kwargs["max_episode_steps"] for c in tuning_cells} == {30}


def test_tuning_table_of_docs_results_reads_the_runs_and_the_choice(tmp_path, tiny_model):
    """`<!-- results-tables: tuning:SPEC:OUT -->`: each run's score under the rule, the mean
    over seeds, the guard's skipped steps of the finished runs, and the spec's choice."""
    from agentbench_poad.leaderboard.report.results_tables import fill

    path = write(tmp_path / "s.json", spec_dict(tiny_model))
    study = load_study(path, out=tmp_path / "out")
    returns = {
        (i, s): [0.0, 0.1 * i, 0.2 * i + s / 1000, 0.3] for i in range(4) for s in (1000, 1001)
    }
    _fake_tuning_runs(study, returns)
    skipped = {(i, s): (i * 3 + s - 1000) for i in range(4) for s in (1000, 1001)}
    for cell in study.cells:
        index = int(cell.label.removeprefix("config"))
        lines = [{"update": u, "policy_steps_taken": 4, "policy_steps_skipped": 0} for u in (1, 2)]
        lines[1]["policy_steps_skipped"] = skipped[(index, cell.seed)]
        (Path(cell.run_dir) / "metrics.jsonl").write_text(
            "\n".join(json.dumps(line) for line in lines) + "\n"
        )
    # config3 seed 1001 not finished yet
    (Path(study.cells[-1].run_dir) / "checkpoints" / "latest").unlink()
    region = (
        "<!-- results-tables: tuning:s.json:out -->\n<!-- /results-tables: tuning:s.json:out -->"
    )

    def table_rows():
        text = fill(region, [], root=tmp_path)
        return [
            [c.strip() for c in line.strip("|").split(" | ")]
            for line in text.splitlines()
            if line.startswith("| poad |")
        ]

    rows = table_rows()
    assert [r[1].split(":")[0] for r in rows] == ["config0", "config1", "config2", "config3"]
    for index, row in enumerate(rows):
        per_seed = [sum(returns[(index, s)][-3:]) / 3 for s in (1000, 1001)]
        assert row[2] == f"{per_seed[0]:.3f}"
        if index < 3:
            assert row[3] == f"{per_seed[1]:.3f}" and row[4] == f"{sum(per_seed) / 2:.3f}"
            total = skipped[(index, 1000)] + skipped[(index, 1001)]
            assert row[5] == f"{total} of {16 + total}"
        else:  # the unfinished run: no score, no mean, only the finished run's steps
            assert row[3] == row[4] == "--"
            assert row[5] == f"{skipped[(3, 1000)]} of {8 + skipped[(3, 1000)]}"
        assert row[6] == ""
    (Path(study.cells[-1].run_dir) / "checkpoints" / "latest").write_text("update_000003")
    (selection,) = select_configs(study)
    assert [r[6] for r in table_rows()] == [
        "**chosen**" if i == selection.index else "" for i in range(4)
    ]


def test_dry_run_counts_the_training_the_waiting_pairs_will_add(tmp_path):
    spec = spec_dict("tiny", agents=["poad", "ntpo"])
    spec["group"][0].update(agents=["poad", "ntpo"], seeds=[7, 8, 9])
    study = load_study(write(tmp_path / "s.json", spec), out=tmp_path / "out")
    assert study.pending == ["eval: poad", "eval: ntpo"]
    assert study.pending_steps == [("eval", ENV, 6 * 3), ("eval", ENV, 6 * 3)]
    progress = study_progress(study)
    assert progress.waiting_steps == {ENV: 36} and progress.waiting_hours is None  # no pace yet
    lines = progress.lines()
    assert f"after --select: 36 env steps more ({ENV} 36 (no run trained yet))" in lines
    assert study.select(["tuning"]).pending_steps == []  # only the tuning group: nothing waits
    paced = StudyProgress({}, {}, 2, {ENV: 100}, {ENV: 0.5}, frozenset(), {ENV: 36})
    assert paced.waiting_hours == pytest.approx(36 * 0.5 / 3600)
    assert paced.lines()[-1].startswith(
        "their run time at that pace, one run at a time: about 0.0 h"
    )


def test_a_study_resumed_by_another_spec_path_stops_before_any_run(
    tiny_model, tmp_path, monkeypatch, capsys
):
    """A record combines runs of one config_source, which names the spec as given: resuming by
    another spelling of the path must stop at once, not hours later when the record is made."""
    chosen = {"poad": {"lr": 1e-3, "target_kl": 1.0}}

    def spec(chosen):  # two updates of 6 env steps: one now, one after the resume
        return {**spec_dict(tiny_model, chosen=chosen)} | {
            "study": {**spec_dict(tiny_model)["study"], "total_steps": {ENV: 12}}
        }

    path = write(tmp_path / "s.json", spec(chosen))
    out = tmp_path / "out"
    started = load_study(path, out=out).select(["eval"])
    first = run_study(started, max_updates=1, evaluate=False, log=lambda line: None)
    assert first.failed == [] and len(first.trained) == 1
    (cell,) = started.cells
    config = Path(cell.run_dir) / "config.json"
    before = config.read_text()
    assert json.loads(before)["config_source"]["spec"] == str(path)

    monkeypatch.chdir(tmp_path)  # the same file, named relative to the current directory
    relative = load_study("s.json", out=out).select(["eval"])
    lines: list[str] = []
    with pytest.raises(StudyError) as raised:
        run_study(relative, evaluate=False, log=lines.append)
    message = str(raised.value)
    assert f"the spec path {str(path)!r}" in message and str(cell.run_dir) in message
    assert lines == [] and config.read_text() == before  # nothing ran, nothing rewritten
    from agentbench_poad.cli import main

    assert main(["study", "s.json", "--out", str(out), "--group", "eval", "--dry-run"]) == 2
    assert "would stop before any run" in capsys.readouterr().err
    assert config.read_text() == before

    write(
        path, spec({"poad": {"lr": 5e-2, "target_kl": 1.0}})
    )  # the same path, another chosen configuration: named as such
    with pytest.raises(StudyError, match="another configuration"):
        run_study(load_study(path, out=out).select(["eval"]), evaluate=False, log=lines.append)
    write(path, spec(chosen))
    again = run_study(load_study(path, out=out).select(["eval"]), evaluate=False, log=lines.append)
    assert again.failed == [] and len(again.trained) == 1  # the path it started with: resumes


def test_a_committed_tuned_record_checks_against_this_clones_spec(tmp_path, monkeypatch):
    """A record names its spec as its study was given it, often an absolute path of the machine
    that trained it; a clone anywhere else checks it against its own copy of that spec."""
    from agentbench_poad.leaderboard.config_source import check_config_source
    from agentbench_poad.leaderboard.schema import RecordError

    tuned = []
    for path in sorted((ROOT / "leaderboard" / "results").glob("*.json")):
        record = json.loads(path.read_text())
        spec = ((record.get("training") or {}).get("config_source") or {}).get("spec", "")
        if spec.endswith(".toml") and Path(spec).is_absolute():
            tuned.append(record)
    assert tuned, "the board holds tuned records of an absolute spec path"
    monkeypatch.chdir(tmp_path)  # not the checkout: only the fallback can find the spec
    monkeypatch.delenv("AGENTBENCH_POAD_ROOT", raising=False)
    for record in tuned[:3]:
        name = Path(record["training"]["config_source"]["spec"]).name
        moved = copy.deepcopy(record)
        moved["training"]["config_source"]["spec"] = f"/elsewhere/a-clone/studies/{name}"
        check_config_source(moved, root=ROOT)  # found as studies/<name> of this checkout
        lost = copy.deepcopy(record)
        lost["training"]["config_source"]["spec"] = f"/elsewhere/a-clone/gone/{name}"
        with pytest.raises(RecordError, match="cannot be read"):
            check_config_source(lost, root=ROOT)
        bare = copy.deepcopy(record)  # a file name alone is not enough to find another's spec
        bare["training"]["config_source"]["spec"] = f"/{name}"
        with pytest.raises(RecordError, match="cannot be read"):
            check_config_source(bare, root=tmp_path)
