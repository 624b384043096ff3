"""The study runner: spec checks before any run, train + evaluate + records, skip what is done,
exact resume after a kill, the Ray executor, and the committed SmolLM2 grid spec."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentbench_poad.study import StudyError, WallTimeLog, load_study, run_state, run_study

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
ENV = "CaseStudy-Microwave-v0"
SMALL = dict(
    num_envs=2,
    rollout_length=3,
    epochs=2,
    num_minibatches=2,
    lr=5e-2,
    critic_lr=1e-3,
    critic_hidden_sizes=[16, 16],
    eval_every=2,
    eval_episodes=2,
    keep_checkpoints=2,
    target_kl=None,
)
RANDOM = "agentbench_poad.baselines.random:make_random_agent"
TIMING = ("steps_per_second",)


def write_spec(
    path: Path,
    model: Path,
    *,
    agents=("poad",),
    seeds=(0,),
    total_steps=24,
    extra_groups=(),
    **study,
) -> Path:
    spec = {
        "study": {
            "name": "t",
            "model": str(model),
            "seeds": list(seeds),
            "total_steps": {ENV: total_steps},
            **study,
        },
        "eval": {"episodes": 2},
        "group": [{"agents": list(agents), "envs": [ENV], "overrides": SMALL}, *extra_groups],
    }
    path.write_text(json.dumps(spec))
    return path


def metric_lines(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


# -- bad input: every problem, before any run ---------------------------------------------------
def test_bad_spec_is_an_error_before_any_run(tmp_path):
    spec = {
        "study": {
            "model": "tiny",
            "seeds": [0, 1],
            "preset": "overcooked",
            "total_steps": {"Overcooked-TomatoSalad-v0": 100},
        },
        "group": [
            {"agents": ["poad", "poadx"], "envs": ["Overcooked-TomatoSalad-v0", "Nope-v0"]},
            {"agents": ["twosome"], "envs": ["Overcooked-TomatoSalad-v0"], "preset": "fast"},
            {"name": "again", "agents": ["poad"], "envs": ["Overcooked-TomatoSalad-v0"]},
            {
                "agents": ["ntpo"],
                "envs": ["Overcooked-TomatoSalad-v0"],
                "overrides": {"gamma": 1.5},
            },
            {
                "agents": ["ntpo"],
                "envs": ["Overcooked-TomatoSalad-v0"],
                "label": "x",
                "overrides": {"device": "cuda"},
                "epochs": 3,
            },
        ],
    }
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(spec))
    with pytest.raises(StudyError) as info:
        run_study(path, out=tmp_path / "out")
    message = str(info.value)
    assert "nothing was run" in message
    for needle in [
        "unknown agent 'poadx'",
        "unknown env 'Nope-v0'",
        "unknown preset 'fast' for TWOSOMEConfig",
        "duplicate cell poad on Overcooked-TomatoSalad-v0 seed 0",
        "gamma must be in [0, 1]",
        "overrides may not set ['device']",
        "unknown key(s) ['epochs']",
    ]:
        assert needle in message, needle
    assert not (tmp_path / "out").exists()


def test_records_bound_for_a_board_need_runs_under_its_runs_root_before_any_run(
    tmp_path, monkeypatch
):
    from agentbench_poad.leaderboard.runs import RUNS_ENV_VAR

    checkout = tmp_path / "clone"  # a checkout: pyproject.toml and agentbench_poad/ at its top
    (checkout / "agentbench_poad").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("")
    board = checkout / "leaderboard" / "results"
    spec = write_spec(tmp_path / "s.json", tmp_path / "no-model-needed")
    monkeypatch.setenv(RUNS_ENV_VAR, str(tmp_path / "worktree" / "runs"))  # another checkout's
    out = checkout / "runs" / "t"
    with pytest.raises(StudyError, match=f"runs root in effect.*{RUNS_ENV_VAR}={checkout}"):
        run_study(spec, out=out, records=board, log=lambda line: None)
    monkeypatch.setenv(RUNS_ENV_VAR, str(checkout / "runs"))
    with pytest.raises(StudyError, match="lie outside"):
        run_study(spec, out=tmp_path / "elsewhere", records=board, log=lambda line: None)
    assert not out.exists() and not (tmp_path / "elsewhere").exists()  # nothing ran
    assert not board.exists()


def test_twosome_on_datascicoding_is_refused_with_the_reason(tmp_path):
    spec = {
        "study": {"model": "m", "total_steps": {"DataSciCoding-iris-v0": 64}},
        "group": [{"agents": ["twosome"], "envs": ["DataSciCoding-iris-v0"]}],
    }
    path = tmp_path / "s.json"
    path.write_text(json.dumps(spec))
    with pytest.raises(
        StudyError, match="twosome on DataSciCoding-iris-v0.*train POAD or NTPO there"
    ):
        load_study(path)


def test_toml_and_missing_budget(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(f'[study]\nmodel = "m"\n[[group]]\nagents = ["poad"]\nenvs = ["{ENV}"]\n')
    with pytest.raises(StudyError, match=f"no env-step budget for {ENV}"):
        load_study(path)
    path.write_text("[study\n")
    with pytest.raises(StudyError, match="not valid TOML"):
        load_study(path)


def test_group_selection_runs_only_the_named_groups(tiny_model, tmp_path):
    """``--group NAME``: only that group's cells and evaluations; the record names the study,
    the group and the command that remakes it."""
    spec = write_spec(
        tmp_path / "s.json",
        tiny_model,
        extra_groups=[{"name": "baseline", "agents": [RANDOM], "envs": [ENV]}],
    )
    study = load_study(spec, out=tmp_path / "out")
    assert study.groups == ["#1", "baseline"]
    assert {c.group for c in study.cells} == {"#1"}
    only = study.select(["baseline"])
    assert only.cells == [] and [t.group for t in only.evals] == ["baseline"]
    assert only.needs == {} and only.groups == ["baseline"]
    result = run_study(only, log=lambda line: None)
    assert result.trained == [] and result.failed == [] and len(result.records) == 1
    record = json.loads(Path(result.records[0]).read_text())
    assert record["config"]["study"]["study"] == "t"
    assert record["config"]["study"]["group"] == "baseline"
    assert f"study {spec} " in record["command"] and "--group baseline" in record["command"]
    assert not (tmp_path / "out" / "runs").exists()
    # the unselected training group is untouched and still to do
    assert [run_state(c) for c in study.cells] == ["new"]
    with pytest.raises(StudyError, match=r"no group\(s\) \['nope'\]; its groups are"):
        study.select(["nope"])


def test_cli_group_option_lists_only_that_group(tiny_model, tmp_path, capsys):
    from agentbench_poad.cli import main

    spec = write_spec(
        tmp_path / "s.json",
        tiny_model,
        extra_groups=[{"name": "baseline", "agents": [RANDOM], "envs": [ENV]}],
    )
    out = str(tmp_path / "out")
    assert main(["study", str(spec), "--out", out, "--dry-run", "--group", "baseline"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("todo") and lines[0].endswith("[baseline]")
    assert lines[1:] == [  # the summary: no run in this group
        "runs: 0 done, 0 partial, 0 new; evaluations: 0 done, 1 todo; "
        "tuned pairs waiting for --select: 0"
    ]
    assert main(["study", str(spec), "--out", out, "--dry-run"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 + 3  # a run, its eval, baseline; the summary's three lines
    assert lines[3].startswith("runs: 0 done, 0 partial, 1 new; evaluations: 0 done, 2 todo")
    assert main(["study", str(spec), "--out", out, "--dry-run", "--group", "nope"]) == 2
    assert "its groups are ['#1', 'baseline']" in capsys.readouterr().err


def test_action_timeout_zero_means_no_deadline_and_bad_values_are_errors(tmp_path):
    def spec(timeout):
        return {
            "study": {"model": "m"},
            "eval": {"action_timeout": timeout},
            "group": [{"agents": [RANDOM], "envs": [ENV]}],
        }

    path = tmp_path / "s.json"
    for timeout, expected in ((0, None), (12.5, 12.5), (60, 60.0)):
        path.write_text(json.dumps(spec(timeout)))
        assert [t.action_timeout for t in load_study(path).evals] == [expected]
    for bad in (-1, "soon", True):
        path.write_text(json.dumps(spec(bad)))
        with pytest.raises(StudyError, match="action_timeout must be seconds >= 0"):
            load_study(path)


SLOW_AGENT = """
import time

from agentbench_poad.baselines.random import make_random_agent


class Slow:
    def __init__(self, seed):
        self.inner = make_random_agent(seed=seed)

    def act(self, observation, available_actions):
        time.sleep(0.5)
        return self.inner.act(observation, available_actions)


def make(env=None, seed=0):
    return Slow(seed)
"""


def test_an_evaluation_cut_by_the_deadline_is_not_done(tmp_path):
    """A record whose episodes the per-call deadline ended measures the machine's load: it is
    written (with a warning) but the evaluation stays to do, and the next run evaluates again."""
    from agentbench_poad.evaluation import deadline_cuts
    from agentbench_poad.study.plan import eval_done

    (tmp_path / "slow_agent.py").write_text(SLOW_AGENT)
    path = tmp_path / "s.json"
    path.write_text(
        json.dumps(
            {
                "study": {"name": "cut", "model": "m"},
                "eval": {"episodes": 1, "action_timeout": 0.05, "seeds": [0]},
                "group": [{"agents": [f"{tmp_path / 'slow_agent.py'}:make"], "envs": [ENV]}],
            }
        )
    )
    study = load_study(path, out=tmp_path / "out", records=tmp_path / "records")
    (task,) = study.evals
    result = run_study(study)
    (record_path,) = result.records
    record = json.loads(Path(record_path).read_text())
    assert deadline_cuts(record) >= 1
    assert not eval_done(task)
    assert not (Path(task.eval_dir) / "done.json").exists()
    first = record["created_at"]
    time.sleep(1.1)
    (again,) = run_study(
        load_study(path, out=tmp_path / "out", records=tmp_path / "records")
    ).records
    assert json.loads(Path(again).read_text())["created_at"] != first  # evaluated again
    # the same agent within its deadline is done after one run
    spec = json.loads(path.read_text())
    spec["eval"]["action_timeout"] = 0
    path.write_text(json.dumps(spec))
    (done_record,) = run_study(
        load_study(path, out=tmp_path / "out", records=tmp_path / "records")
    ).records
    assert deadline_cuts(json.loads(Path(done_record).read_text())) == 0
    assert eval_done(load_study(path, out=tmp_path / "out", records=tmp_path / "records").evals[0])


def _ship(files: list[Path], to: Path) -> None:
    """Copy the listed (cwd-relative) files to another root, as a git clone would hold them."""
    for path in files:
        assert not path.is_absolute(), path
        (to / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, to / path)


def test_study_files_let_a_clone_skip_finished_work_and_resume_the_rest(
    tiny_model, tmp_path, monkeypatch
):
    """``study --files``: a clone holding only those files has every finished run and record
    done, and continues an unfinished run to the same log as an uninterrupted one."""
    from agentbench_poad.study import study_files

    spec = write_spec(
        tmp_path / "s.json",
        tiny_model,
        seeds=(0, 1),
        extra_groups=[{"name": "baseline", "agents": [RANDOM], "envs": [ENV]}],
    )
    full, part, clone = tmp_path / "full", tmp_path / "part", tmp_path / "clone"
    for root in (full, part, clone):
        root.mkdir()
    monkeypatch.chdir(full)
    assert run_study(spec, out="out", log=lambda line: None).failed == []
    finished = study_files(load_study(spec, out="out"))
    names = {p.name for p in finished}
    assert "agent.pt" not in names and "rng.pt" not in names  # finished: no resume state
    assert {"config.json", "state.json", "latest", "done.json"} <= names
    assert not any("tb" in p.parts for p in finished)
    expected = {c.run_dir: metric_lines(Path(c.run_dir)) for c in load_study(spec, out="out").cells}

    monkeypatch.chdir(part)
    run_study(spec, out="out", max_updates=2, evaluate=False, log=lambda line: None)
    unfinished = study_files(load_study(spec, out="out"))
    assert sum(p.name == "agent.pt" for p in unfinished) == 2  # both runs, resume state
    _ship(unfinished, clone)

    monkeypatch.chdir(clone)
    study = load_study(spec, out="out")
    assert [run_state(c) for c in study.cells] == ["partial", "partial"]
    result = run_study(study, log=lambda line: None)
    assert result.failed == [] and len(result.trained) == 2 and len(result.records) == 2
    for cell in study.cells:
        assert metric_lines(Path(cell.run_dir)) == expected[cell.run_dir]

    # a second clone of the finished study has nothing left to do
    monkeypatch.chdir(full)
    done_clone = tmp_path / "done-clone"
    _ship(finished, done_clone)
    monkeypatch.chdir(done_clone)
    again = run_study(spec, out="out", log=lambda line: None)
    assert again.trained == [] and again.records == [] and len(again.skipped_evals) == 2


def test_cli_files_prints_the_study_files(tiny_model, tmp_path, monkeypatch, capsys):
    from agentbench_poad.cli import main

    spec = write_spec(tmp_path / "s.json", tiny_model)
    monkeypatch.chdir(tmp_path)
    assert main(["study", str(spec), "--out", "out", "--files"]) == 0
    assert capsys.readouterr().out == ""  # nothing trained yet
    run_study(spec, out="out", log=lambda line: None)
    assert main(["study", str(spec), "--out", "out", "--files"]) == 0
    printed = capsys.readouterr().out.split()
    assert printed and all(Path(p).is_file() for p in printed)
    assert any(p.endswith("adapter_model.safetensors") for p in printed)


def test_duplicate_group_names_are_an_error(tmp_path):
    spec = {
        "study": {"model": "m", "total_steps": {ENV: 8}},
        "group": [
            {"name": "g", "agents": [RANDOM], "envs": [ENV]},
            {"name": "g", "agents": ["poad"], "envs": [ENV]},
        ],
    }
    path = tmp_path / "s.json"
    path.write_text(json.dumps(spec))
    with pytest.raises(StudyError, match="duplicate group name 'g'"):
        load_study(path)


# -- running --------------------------------------------------------------------------------------
def test_study_trains_evaluates_and_skips_what_is_done(tiny_model, tmp_path):
    spec = write_spec(
        tmp_path / "s.json",
        tiny_model,
        seeds=(0, 1),
        extra_groups=[{"agents": [RANDOM], "envs": [ENV]}],
    )
    out = tmp_path / "out"
    first = run_study(spec, out=out, log=lambda line: None)
    assert first.failed == [] and len(first.trained) == 2 and len(first.records) == 2
    records = {
        json.loads(Path(p).read_text())["agent"]["name"]: json.loads(Path(p).read_text())
        for p in first.records
    }
    trained = records["poad"]
    assert [s["seed"] for s in trained["scores"]["per_seed"]] == [0, 1]
    code = trained["training"]["code_sessions"]  # each seed's training code, session by session
    assert sorted(code) == ["0", "1"] and all(c[0]["from_update"] == 0 for c in code.values())
    walls = trained["training"]["run_wall_time_s"]
    assert sorted(walls) == ["0", "1"] and all(w > 0 for w in walls.values())
    assert trained["training"]["wall_time_s"] == pytest.approx(sum(walls.values()))
    updates = trained["training"]["run_update_time_s"]
    assert sorted(updates) == ["0", "1"]
    for seed, seconds in updates.items():  # the updates' own time, read back from the metrics
        metrics = out / "runs" / ENV / "poad" / f"seed{seed}" / "metrics.jsonl"
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
        steps = [0] + [row["env_steps"] for row in rows]
        expected = sum(
            (b - a) / row["steps_per_second"] for a, b, row in zip(steps, steps[1:], rows)
        )
        assert seconds == pytest.approx(expected) and 0 < seconds <= walls[seed]
    assert trained["learning_curve"] is not None
    assert records["random"]["protocol"]["seeds"] == [0, 1]
    lines = metric_lines(out / "runs" / ENV / "poad" / "seed0")
    assert [row["update"] for row in lines] == [1, 2, 3, 4]

    again = run_study(spec, out=out, log=lambda line: None)
    assert again.trained == [] and again.records == [] and again.failed == []
    assert len(again.skipped_runs) == 2 and len(again.skipped_evals) == 2
    assert metric_lines(out / "runs" / ENV / "poad" / "seed0") == lines


def test_a_new_studys_record_moves_the_earlier_studys_record_to_the_history(tiny_model, tmp_path):
    """Record ids name env, agent and model, not the study: a new study's record takes an
    earlier study's place on the board, and the earlier one is kept, unchanged, as history."""

    def spec(name: str) -> Path:
        path = tmp_path / f"{name}.json"
        path.write_text(
            json.dumps(
                {
                    "study": {
                        "name": name,
                        "model": str(tiny_model),
                        "seeds": [0],
                        "total_steps": {ENV: 6},
                    },
                    "eval": {"episodes": 2},
                    "group": [{"agents": [RANDOM], "envs": [ENV]}],
                }
            )
        )
        return path

    records = tmp_path / "records"
    (old_path,) = run_study(
        spec("old"), out=tmp_path / "a", records=records, log=lambda line: None
    ).records
    old = Path(old_path).read_text()
    same_study = run_study(spec("old"), out=tmp_path / "b", records=records, log=lambda _: None)
    assert same_study.records == [old_path]  # a re-evaluation replaces its own study's record
    assert not (tmp_path / "history").exists()
    old = Path(old_path).read_text()
    (new_path,) = run_study(
        spec("new"), out=tmp_path / "c", records=records, log=lambda line: None
    ).records
    assert new_path == old_path
    assert json.loads(Path(new_path).read_text())["config"]["study"]["study"] == "new"
    kept = tmp_path / "history" / "old" / Path(old_path).name
    assert kept.read_text() == old
    # re-running the earlier study finds its evaluation done (its record is history now): it
    # neither makes the record again nor pushes the newer study's record off the board
    rerun = run_study(spec("old"), out=tmp_path / "a", records=records, log=lambda _: None)
    assert rerun.records == [] and len(rerun.skipped_evals) == 1 and rerun.failed == []
    assert json.loads(Path(new_path).read_text())["config"]["study"]["study"] == "new"
    assert kept.read_text() == old
    (tmp_path / "d").mkdir()
    (tmp_path / "history" / "new").mkdir()
    (tmp_path / "history" / "new" / kept.name).write_text("{}")  # the history slot is taken
    lines: list[str] = []
    result = run_study(spec("newer"), out=tmp_path / "d", records=records, log=lines.append)
    assert result.records == [] and len(result.failed) == 1
    assert any("already holds a record" in line and "history" in line for line in lines), lines
    assert json.loads(Path(new_path).read_text())["config"]["study"]["study"] == "new"


def test_each_record_is_written_as_soon_as_its_runs_are_trained(tiny_model, tmp_path):
    """POAD's record exists before NTPO's run starts; evaluation-only agents come last."""
    spec = write_spec(
        tmp_path / "s.json",
        tiny_model,
        extra_groups=[
            {"agents": ["ntpo"], "envs": [ENV], "overrides": SMALL},
            {"agents": [RANDOM], "envs": [ENV]},
        ],
    )
    out = tmp_path / "out"
    result = run_study(spec, out=out, log=lambda line: None)
    assert result.failed == [] and len(result.records) == 3
    written = {
        json.loads(Path(p).read_text())["agent"]["name"]: Path(p).stat().st_mtime_ns
        for p in result.records
    }
    runs = out / "runs" / ENV
    ntpo_started = (runs / "ntpo" / "seed0" / "config.json").stat().st_mtime_ns
    ntpo_trained = (runs / "ntpo" / "seed0" / "learning_curve.json").stat().st_mtime_ns
    assert written["poad"] < ntpo_started
    assert written["ntpo"] < written["random"] and ntpo_trained < written["random"]


def test_env_kwargs_reach_training_and_evaluation(tiny_model, tmp_path):
    """[study] env_kwargs (e.g. an episode cap) for every run and evaluation; a group's win."""
    spec = write_spec(
        tmp_path / "s.json",
        tiny_model,
        env_kwargs={"max_episode_steps": 1},
        extra_groups=[{"agents": [RANDOM], "envs": [ENV], "env_kwargs": {"max_episode_steps": 2}}],
    )
    result = run_study(spec, out=tmp_path / "out", log=lambda line: None)
    assert result.failed == [] and len(result.records) == 2
    run_dir = tmp_path / "out" / "runs" / ENV / "poad" / "seed0"
    assert json.loads((run_dir / "config.json").read_text())["env_kwargs"] == {
        "max_episode_steps": 1
    }
    for path in result.records:
        record = json.loads(Path(path).read_text())
        cap = 1 if record["agent"]["name"] == "poad" else 2
        lengths = [e["length"] for s in record["scores"]["per_seed"] for e in s["episodes"]]
        assert lengths and max(lengths) <= cap
        assert record["config"]["env_kwargs"] == {"max_episode_steps": cap}


def test_env_kwargs_must_be_a_table(tiny_model, tmp_path):
    spec = write_spec(tmp_path / "s.json", tiny_model, env_kwargs=[1])
    with pytest.raises(StudyError, match="env_kwargs must be a table"):
        load_study(spec)


def test_larger_budget_resumes_the_finished_runs(tiny_model, tmp_path):
    out = tmp_path / "out"
    run_study(
        write_spec(tmp_path / "a.json", tiny_model, total_steps=12),
        out=out,
        evaluate=False,
        log=lambda line: None,
    )
    grown = load_study(write_spec(tmp_path / "b.json", tiny_model, total_steps=24), out=out)
    assert [run_state(c) for c in grown.cells] == ["partial"]
    run_study(grown, evaluate=False, log=lambda line: None)
    reference = tmp_path / "ref"
    run_study(
        write_spec(tmp_path / "c.json", tiny_model, total_steps=24),
        out=reference,
        evaluate=False,
        log=lambda line: None,
    )
    assert metric_lines(out / "runs" / ENV / "poad" / "seed0") == metric_lines(
        reference / "runs" / ENV / "poad" / "seed0"
    )


def test_killed_study_resumes_without_lost_or_repeated_steps(tiny_model, tmp_path):
    """SIGKILL the study mid-run, run it again: its log equals an uninterrupted run's."""
    spec = write_spec(tmp_path / "s.json", tiny_model, total_steps=72)  # 12 updates
    killed, full = tmp_path / "killed", tmp_path / "full"
    run_dir = killed / "runs" / ENV / "poad" / "seed0"
    command = [
        sys.executable,
        "-m",
        "agentbench_poad.cli",
        "study",
        str(spec),
        "--out",
        str(killed),
        "--no-eval",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 600
    metrics = run_dir / "metrics.jsonl"
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
            break
        time.sleep(0.02)
    assert proc.poll() is None, f"the study ended before it could be killed: {proc.stderr.read()}"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    logged = len(metrics.read_text().splitlines())
    assert 3 <= logged < 12
    assert run_state(load_study(spec, out=killed).cells[0]) == "partial"

    resumed = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert resumed.returncode == 0, resumed.stderr
    run_study(spec, out=full, evaluate=False, log=lambda line: None)
    lines = metric_lines(run_dir)
    assert [row["update"] for row in lines] == list(range(1, 13))
    assert lines == metric_lines(full / "runs" / ENV / "poad" / "seed0")
    wall = json.loads((run_dir / "study_wall_time.json").read_text())
    assert wall["sessions"] >= 1 and wall["seconds"] > 0


def read_wall(run_dir: Path) -> dict:
    return json.loads((run_dir / "study_wall_time.json").read_text())


def test_wall_time_log_adds_each_session_also_on_error(tmp_path):
    run_dir = tmp_path / "run"
    with WallTimeLog(run_dir, interval=0.01):
        time.sleep(0.05)  # no run dir yet: nothing may be written
    assert not run_dir.exists()
    run_dir.mkdir()
    with WallTimeLog(run_dir):
        time.sleep(0.01)
    first = read_wall(run_dir)
    assert first["sessions"] == 1 and first["seconds"] > 0
    with pytest.raises(KeyboardInterrupt), WallTimeLog(run_dir):
        raise KeyboardInterrupt
    second = read_wall(run_dir)
    assert second["sessions"] == 2 and second["seconds"] > first["seconds"]
    (run_dir / "study_wall_time.json").write_text("{not json")
    with WallTimeLog(run_dir):
        pass
    assert read_wall(run_dir)["sessions"] == 1


def test_wall_time_log_keeps_a_sigkilled_sessions_time(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "study_wall_time.json").write_text('{"seconds": 100.0, "sessions": 2}')
    code = (
        "import time\nfrom agentbench_poad.study import WallTimeLog\n"
        f"with WallTimeLog({str(run_dir)!r}, interval=0.02):\n    time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    seen, deadline = 100.0, time.monotonic() + 120
    try:
        while seen < 100.3 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
            try:
                seen = read_wall(run_dir)["seconds"]
            except json.JSONDecodeError:
                pytest.fail("study_wall_time.json was read half-written")
    finally:
        proc.kill()
        proc.wait()
    after = read_wall(run_dir)
    assert seen >= 100.3, "the session's time was never written while it ran"
    assert after["sessions"] == 3 and after["seconds"] >= seen


def test_study_on_ray_equals_local(ray_cluster, tiny_model, tmp_path):
    spec = write_spec(tmp_path / "s.json", tiny_model, agents=("poad", "ntpo"), seeds=(0, 1))
    local = run_study(spec, out=tmp_path / "local", log=lambda line: None)
    remote = run_study(spec, out=tmp_path / "ray", executor="ray", log=lambda line: None)
    assert remote.failed == [] and len(remote.trained) == 4 and len(remote.records) == 2
    for agent in ("poad", "ntpo"):
        for seed in (0, 1):
            part = Path("runs") / ENV / agent / f"seed{seed}"
            assert metric_lines(tmp_path / "ray" / part) == metric_lines(tmp_path / "local" / part)
    for a, b in zip(sorted(local.records), sorted(remote.records)):
        ra, rb = json.loads(Path(a).read_text()), json.loads(Path(b).read_text())
        assert ra["scores"] == rb["scores"] and ra["learning_curve"] == rb["learning_curve"]


# -- the committed grid -----------------------------------------------------------------------
SPEC = ROOT / "studies" / "smollm2-cpu.toml"


def test_committed_grid_spec_has_issue_12s_cells(tmp_path):
    """The grid's shape, as committed."""
    study = load_study(SPEC, out=tmp_path / "out")
    cells = {(c.agent, c.env_id, c.seed, c.label) for c in study.cells}
    assert len(cells) == len(study.cells) == 3 * 2 * 3 + 2 * 3 + 3 * 3 + 2 * 3
    for agent in ("poad", "ntpo", "twosome"):
        for env in (
            "Overcooked-TomatoSalad-v0",
            "Overcooked-TomatoLettuceSalad-v0",
            "VirtualHome-FoodPreparation-v0",
        ):
            assert {(agent, env, s, "") for s in (0, 1, 2)} <= cells
    for label, gamma in (("gw0.95", 0.95), ("gw0.99", 0.99)):
        ablation = [c for c in study.cells if c.label == label]
        assert [(c.agent, c.env_id) for c in ablation] == [
            ("ntpo", "Overcooked-TomatoSalad-v0")
        ] * 3
        assert all(c.overrides == {"intra_gamma": gamma} for c in ablation)
    # Table 1's layout: the Food Preparation models on the training task and the six unseen ones
    table1 = [t for t in study.evals if "trainedon-VirtualHome-FoodPreparation" in t.key]
    assert len(table1) == 3 * 7
    assert all(t.episodes == 100 and t.greedy is False for t in table1)
    assert sum(t.env_id == "VirtualHome-FoodPreparation-v0" for t in table1) == 3
    code = [c for c in study.cells if c.env_id == "DataSciCoding-iris-v0"]
    assert sorted({c.agent for c in code}) == ["ntpo", "poad"] and len(code) == 6
    assert all(c.overrides == {"chat_template": True} for c in code)
    assert all(c.env_kwargs == {"sandbox": "docker"} for c in code)
    base = [t for t in study.evals if t.agent == "lm:smollm2-135m"]
    assert len(base) == 2 + 1 + 7
    assert [t.env_id for t in base if "VirtualHome" in t.env_id] == [
        t.env_id
        for t in table1
        if t.key.endswith("__poad__trainedon-VirtualHome-FoodPreparation-v0")
    ]
    kwargs = [json.loads(t.agent_kwargs_json) for t in base]
    assert [k["greedy"] for k in kwargs] == [True] * 2 + [False] * 8
    assert [k.get("chat_template", False) for k in kwargs] == [False] * 2 + [True] + [False] * 7


def test_committed_grid_ntpo_row_is_the_gamma_w_0_9_point(tmp_path):
    study = load_study(SPEC, out=tmp_path / "out")
    assert len(study.cells) == 39
    # The gamma_w = 0.9 point of the ablation is the main NTPO row: the CPU preset's Overcooked
    # gamma, which NTPO's gamma_w follows (a separate 0.9 group would re-run it exactly).
    from agentbench_poad.baselines.ntpo import NTPOConfig

    main_ntpo = [
        c
        for c in study.cells
        if c.agent == "ntpo" and c.label == "" and c.env_id.startswith("Overcooked-")
    ]
    assert main_ntpo and all(not c.overrides for c in main_ntpo)
    config = NTPOConfig.preset("overcooked-mini")
    assert config.intra_gamma is None and config.gamma == 0.9


def test_exploratory_group_labels_its_records_and_rows(tiny_model, tmp_path):
    """``exploratory = true``: the group's records say so and the board labels their rows; any
    other value is a spec error before anything runs."""
    from agentbench_poad.leaderboard.report.common import agent_label

    labels = {}
    for exploratory in (True, False):
        spec = write_spec(
            tmp_path / f"{exploratory}.json",
            tiny_model,
            extra_groups=[
                {"name": "few", "agents": [RANDOM], "envs": [ENV], "exploratory": exploratory}
            ],
        )
        study = load_study(spec, out=tmp_path / f"out{exploratory}", records=tmp_path / "r")
        assert {t.group: t.exploratory for t in study.evals} == {"#1": False, "few": exploratory}
        result = run_study(study.select(["few"]), log=lambda line: None)
        record = json.loads(Path(result.records[0]).read_text())
        assert record["config"]["study"].get("exploratory", False) is exploratory
        labels[exploratory] = agent_label(record)
    assert labels[True] == labels[False] + " [exploratory]"

    bad = json.loads(Path(spec).read_text())
    bad["group"][1]["exploratory"] = "yes"
    Path(spec).write_text(json.dumps(bad))
    with pytest.raises(StudyError, match=r"\(few\): exploratory must be true or false"):
        load_study(spec, out=tmp_path / "out2")


def test_a_groups_cells_go_seed_by_seed_across_its_agents(tiny_model, tmp_path):
    """A study stopped part-way has trained every agent of a group on the same seeds."""
    spec = write_spec(tmp_path / "s.json", tiny_model, agents=("poad", "ntpo"), seeds=(3, 1, 2))
    cells = load_study(spec, out=tmp_path / "out").cells
    assert [(c.seed, c.agent) for c in cells] == [
        (seed, agent) for seed in (3, 1, 2) for agent in ("poad", "ntpo")
    ]


def test_progress_counts_states_steps_left_and_the_finished_runs_pace(tiny_model, tmp_path):
    """`study --dry-run`'s summary: runs and evaluations by state, env steps still to train (a
    partial run from its newest checkpoint) and the wall time per env step of finished runs
    (of unfinished runs, to their newest checkpoint, while none has finished)."""
    from agentbench_poad.study.plan import study_progress
    from agentbench_poad.study.wall_time import run_wall_time

    spec = write_spec(tmp_path / "s.json", tiny_model, seeds=(0, 1, 2), total_steps=24)
    study = load_study(spec, out=tmp_path / "out")
    before = study_progress(study)
    assert before.runs == {"new": 3} and before.evals == {"todo": 1}
    assert before.steps_left == {ENV: 3 * 24} and before.hours_left is None

    def train(index: int, max_updates: int | None) -> None:
        only = load_study(spec, out=tmp_path / "out")
        only.cells[:] = [only.cells[index]]
        run_study(only, max_updates=max_updates, evaluate=False, log=lambda line: None)

    # seed 1 stops after one update: while no run has finished, its pace is the estimate
    train(1, 1)
    second = Path(study.cells[1].run_dir)
    config = json.loads((second / "config.json").read_text())
    batch = config["algorithm"]["num_envs"] * config["algorithm"]["rollout_length"]
    early = study_progress(load_study(spec, out=tmp_path / "out"))
    assert early.runs == {"partial": 1, "new": 2} and early.unfinished_pace == {ENV}
    assert early.seconds_per_step == {ENV: pytest.approx(run_wall_time(second) / batch)}
    assert early.hours_left == pytest.approx(
        (3 * 24 - batch) * run_wall_time(second) / batch / 3600
    )
    assert any("from unfinished runs" in line for line in early.lines()), early.lines()
    # seed 0 finishes, seed 2 does not start: the finished run's pace takes over
    train(0, None)
    first = Path(study.cells[0].run_dir)
    progress = study_progress(load_study(spec, out=tmp_path / "out"))
    assert progress.unfinished_pace == frozenset()
    assert not any("unfinished" in line for line in progress.lines())
    assert progress.runs == {"done": 1, "partial": 1, "new": 1}
    assert progress.steps_left == {ENV: (24 - batch) + 24}
    wall = run_wall_time(first)
    assert progress.seconds_per_step == {ENV: pytest.approx(wall / 24)}
    assert progress.hours_left == pytest.approx((24 - batch + 24) * wall / 24 / 3600)
    assert any("env steps left" in line for line in progress.lines())


def test_a_retired_record_is_not_made_again_and_a_moved_checkout_keeps_its_evaluations(
    tiny_model, tmp_path
):
    """``eval_done`` looks the record up by name in the records folder and in its history."""
    from agentbench_poad.leaderboard.records import move_to_history

    first = tmp_path / "first"
    spec = first / "s.json"
    first.mkdir()
    spec.write_text(
        json.dumps(
            {
                "study": {
                    "name": "s",
                    "model": str(tiny_model),
                    "seeds": [0],
                    "total_steps": {ENV: 6},
                },
                "eval": {"episodes": 2},
                "group": [{"agents": [RANDOM], "envs": [ENV]}],
            }
        )
    )
    (record,) = run_study(
        spec, out=first / "out", records=first / "records", log=lambda _: None
    ).records
    moved = tmp_path / "moved"
    first.rename(moved)  # a clone of the checkout elsewhere: done.json names the old path
    again = run_study(
        moved / "s.json", out=moved / "out", records=moved / "records", log=lambda _: None
    )
    assert again.records == [] and len(again.skipped_evals) == 1
    retired = move_to_history(moved / "records" / Path(record).name, "s")
    assert retired == moved / "history" / "s" / Path(record).name
    third = run_study(
        moved / "s.json", out=moved / "out", records=moved / "records", log=lambda _: None
    )
    assert third.records == [] and len(third.skipped_evals) == 1
    assert not (moved / "records" / Path(record).name).exists()  # it stays off the board
    # a re-evaluation is asked for by deleting the evaluation's done.json
    for done in (moved / "out" / "evals").glob("*/done.json"):
        done.unlink()
    fourth = run_study(
        moved / "s.json", out=moved / "out", records=moved / "records", log=lambda _: None
    )
    assert len(fourth.records) == 1 and Path(fourth.records[0]).exists()


# -- fresh evaluation seeds ------------------------------------------------------------------------
def test_a_tuned_spec_evaluating_on_an_earlier_studys_evaluation_seeds_is_refused(tmp_path):
    """Evaluation seeds may not overlap an earlier study's evaluation seeds on the same task
    (another spec beside it); tuning seeds may be shared, and another task's seeds are free."""
    from tests.test_study_tuning import ENV as TUNED_ENV
    from tests.test_study_tuning import spec_dict

    tuned = spec_dict("tiny")
    tuned["group"][0]["seeds"] = [7, 8]
    other_task = "Overcooked-TomatoSalad-v0"
    (tmp_path / "earlier.toml").write_text(
        '[study]\nname = "earlier"\nmodel = "tiny"\nseeds = [8, 9]\n\n'
        f'[[group]]\nagents = ["poad"]\nenvs = ["{TUNED_ENV}"]\n\n'  # evaluated on 8, 9
        f'[[group]]\nagents = ["poad"]\nenvs = ["{other_task}"]\nseeds = [7]\n'
    )
    (tmp_path / "tuned-earlier.json").write_text(json.dumps(spec_dict("tiny")))  # seed 7
    path = tmp_path / "later.json"
    path.write_text(json.dumps(tuned))
    with pytest.raises(StudyError) as info:
        load_study(path, out=tmp_path / "out")
    message = str(info.value)
    assert (
        f"evaluation seeds [8] on {TUNED_ENV} were evaluation seeds of the study earlier.toml"
        in message
    )
    assert (
        f"evaluation seeds [7] on {TUNED_ENV} were evaluation seeds of the study "
        "tuned-earlier.json" in message
    )
    assert other_task not in message  # seed 7 on another task is no overlap
    # fresh seeds pass; both studies' tuning seeds (1000, 1001) may be shared
    tuned["group"][0]["seeds"] = [10, 11]
    path.write_text(json.dumps(tuned))
    assert load_study(path, out=tmp_path / "out").groups == ["tuning", "eval"]
    # a file beside it that is no spec blocks nothing
    (tmp_path / "notes.toml").write_text("this is [not toml")
    assert load_study(path, out=tmp_path / "out").groups == ["tuning", "eval"]


def test_the_committed_tuned_studies_evaluate_on_fresh_seeds(tmp_path):
    """The committed tuned specs load (their evaluation seeds overlap neither their tuning
    seeds nor any other spec's evaluation seeds), and the earlier studies' seeds are read."""
    from agentbench_poad.study.seeds import earlier_evaluation_seeds

    studies = ROOT / "studies"
    seen = dict(earlier_evaluation_seeds(studies / "none.toml"))
    assert seen["fair-cpu.toml"]["Overcooked-TomatoSalad-v0"] == set(range(100, 110))
    assert seen["fair-cpu.toml"]["VirtualHome-FoodPreparation-v0"] == {100, 101, 102}
    assert {0, 1, 2} <= seen["smollm2-cpu.toml"]["Overcooked-TomatoSalad-v0"]
    for spec in sorted(studies.glob("*.toml")):
        if "[tuning]" in spec.read_text(encoding="utf-8"):
            load_study(spec, out=tmp_path / spec.stem)
