"""Tuning runs that only loosen a KL guard that never fired are copies, not new training
(agentbench_poad/study/equivalence.py): the copy equals a real run, and the rule copies nothing
else."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbench_poad.study import load_study, run_study
from agentbench_poad.study.equivalence import NOTE, anchors_for, guard_never_fired
from agentbench_poad.study.grid import TrainCell
from agentbench_poad.study.plan import cells_table, planned_copy, study_progress
from tests.test_study_tuning import ENV
from tests.test_study_tuning import SMALL as TUNING_SMALL

pytest.importorskip("torch")

#: the tuning tests' small runs, with two epochs so the guard has later minibatches to judge
SMALL = {**TUNING_SMALL, "epochs": 2}
#: Numbers a run logs that are clocks, not results.
TIMING = {"steps_per_second"}


def tuning_spec(model, grid: dict, seeds=(1000, 1001)) -> dict:
    return {
        "study": {"name": "eq", "model": str(model), "total_steps": {ENV: 6}, "overrides": SMALL},
        "eval": {"episodes": 2},
        "tuning": {
            "task": ENV,
            "agents": ["poad"],
            "seeds": list(seeds),
            "total_steps": 18,
            "selection": "last3-sampled-return",
            "grid": grid,
        },
        "group": [{"name": "eval", "tuned": True, "agents": ["poad"], "envs": [ENV], "seeds": [7]}],
    }


def run_tuning(tmp_path: Path, name: str, spec: dict) -> tuple[list[str], object]:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(spec))
    lines: list[str] = []
    result = run_study(path, out=tmp_path / name, log=lines.append)
    assert result.failed == []
    return lines, load_study(path, out=tmp_path / name)


def metrics(run_dir: str | Path) -> list[dict]:
    rows = [json.loads(line) for line in Path(run_dir, "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


def adapter_bytes(run_dir: str | Path) -> bytes:
    latest = Path(run_dir, "checkpoints", "latest").read_text().strip()
    return Path(run_dir, "checkpoints", latest, "adapter", "adapter_model.safetensors").read_bytes()


# -- the premise, end to end: the copy is the run a looser guard trains -----------------------------
def run_dirs(study, lr: float, target_kl: float) -> list[str]:
    return [
        c.run_dir
        for c in study.cells
        if c.group == "tuning" and (c.overrides["lr"], c.overrides["target_kl"]) == (lr, target_kl)
    ]


def test_a_looser_guard_that_never_binds_is_copied_and_equals_real_training(tiny_model, tmp_path):
    grid = {"lr": [1e-3, 2e-3], "target_kl": [0.5, 2.0]}
    lines, study = run_tuning(tmp_path, "pair", tuning_spec(tiny_model, grid))
    for lr in grid["lr"]:
        for tight, loose in zip(run_dirs(study, lr, 0.5), run_dirs(study, lr, 2.0)):
            assert guard_never_fired(tight) is not None  # the premise: 0.5 never binds here
            note = json.loads(Path(loose, NOTE).read_text())
            assert (Path(loose) / note["equivalent_to"]).resolve() == Path(tight).resolve()
            assert note["target_kl"] == 2.0 and note["source_target_kl"] == 0.5
            config = json.loads(Path(loose, "config.json").read_text())
            assert config["algorithm"]["target_kl"] == 2.0
            assert any(line.startswith(f"copied {loose}") for line in lines)
            assert not Path(loose, "study_wall_time.json").exists()  # no training time spent

    # a looser run not yet copied: --dry-run and the progress summary say it will be a copy
    loose = Path(run_dirs(study, grid["lr"][0], 2.0)[0])
    shutil.move(loose, tmp_path / "aside")  # put back below
    fresh = load_study(tmp_path / "pair.json", out=tmp_path / "pair")
    rows = {row["run_dir"]: row for row in cells_table(fresh) if "run_dir" in row}
    assert rows[str(loose)]["state"] == "copy"
    assert (
        Path(rows[str(loose)]["copy_of"]).resolve()
        == Path(run_dirs(study, grid["lr"][0], 0.5)[0]).resolve()
    )
    assert [r["state"] for r in rows.values()].count("copy") == 1
    progress = study_progress(fresh)
    assert progress.runs.get("copy") == 1 and progress.may_copy == 0
    tuning_left = {c.env_id for c in fresh.cells if c.group == "tuning"}
    assert not tuning_left & set(progress.steps_left)  # a copy adds no env steps
    assert "1 to copy (no training)" in progress.lines()[0]
    shutil.move(tmp_path / "aside", loose)

    # target_kl 2.0 trained for real: the tightest guard of another study's grid
    grid = {"lr": [1e-3, 2e-3], "target_kl": [2.0, 3.0]}
    (tmp_path / "apart").mkdir()  # its own folder: seed 7 is not "another study's" seed there
    _, alone = run_tuning(tmp_path / "apart", "alone", tuning_spec(tiny_model, grid))
    for lr in grid["lr"]:
        for real, copied in zip(run_dirs(alone, lr, 2.0), run_dirs(study, lr, 2.0)):
            assert not Path(real, NOTE).exists()
            assert metrics(real) == metrics(copied)
            curve = json.loads(Path(real, "learning_curve.json").read_text())
            assert curve == json.loads(Path(copied, "learning_curve.json").read_text())
            assert adapter_bytes(real) == adapter_bytes(copied)
            config = json.loads(Path(real, "config.json").read_text())["algorithm"]
            assert json.loads(Path(copied, "config.json").read_text())["algorithm"] == config


def test_a_guard_that_fired_means_the_looser_run_is_trained(tiny_model, tmp_path):
    grid = {"lr": [5e-2, 1e-1], "target_kl": [1e-12, 2.0]}
    _, study = run_tuning(tmp_path, "fired", tuning_spec(tiny_model, grid))
    for lr in grid["lr"]:
        for tight, loose in zip(run_dirs(study, lr, 1e-12), run_dirs(study, lr, 2.0)):
            assert sum(row["policy_steps_skipped"] for row in metrics(tight)) > 0
            assert guard_never_fired(tight) is None
            assert not Path(loose, NOTE).exists()
            assert Path(loose, "study_wall_time.json").exists()
    # the twins finished and fired: a looser run not yet started will be trained, not copied
    loose = next(c for c in study.cells if c.group == "tuning" and c.overrides["target_kl"] == 2.0)
    assert planned_copy(loose, study.cells) == (None, False)


def test_a_study_not_started_counts_its_looser_runs_as_possible_copies(tiny_model, tmp_path):
    grid = {"lr": [1e-3, 2e-3], "target_kl": [0.02, 0.1, None]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(tuning_spec(tiny_model, grid)))
    study = load_study(path, out=tmp_path / "plan")
    tuning = [c for c in study.cells if c.group == "tuning"]
    looser = [c for c in tuning if c.overrides["target_kl"] != 0.02]
    progress = study_progress(study)
    assert progress.runs == {"new": len(study.cells)} and "copy" not in progress.runs
    assert progress.may_copy == len(looser) == 8
    assert any(
        line.startswith("8 new run(s) counted above may be copies") for line in progress.lines()
    )
    assert all(planned_copy(c, study.cells) == (None, c in looser) for c in tuning)


# -- the evidence read from a run's logs ---------------------------------------------------------
def fake_run(tmp_path: Path, rows: list[dict], updates: int, target_kl=0.02) -> Path:
    run = tmp_path / "run"
    (run / "checkpoints" / f"update_{updates:06d}").mkdir(parents=True)
    (run / "checkpoints" / "latest").write_text(f"update_{updates:06d}")
    (run / "checkpoints" / f"update_{updates:06d}" / "state.json").write_text(
        json.dumps({"update": updates})
    )
    (run / "config.json").write_text(json.dumps({"algorithm": {"target_kl": target_kl}}))
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


@pytest.mark.parametrize(
    "rows,updates,target_kl,expected",
    [
        ([{"update": u, "policy_steps_skipped": 0.0} for u in (1, 2, 3)], 3, 0.02, True),
        ([{"update": u, "policy_steps_skipped": 0.0} for u in (1, 3)], 3, 0.02, False),  # a gap
        (
            [
                {"update": 1, "policy_steps_skipped": 0.0},
                {"update": 2, "policy_steps_skipped": 1.0},
            ],
            2,
            0.02,
            False,
        ),
        ([{"update": 1, "policy_steps_skipped": float("nan")}], 1, 0.02, False),
        ([{"update": 1, "policy_steps_skipped": None}], 1, 0.02, False),
        ([{"update": 1, "policy_steps_skipped": 0.0}], 1, None, False),  # no guard: no evidence
        # a line logged past the checkpoint (a crash before it was saved) is not the run's
        (
            [
                {"update": 1, "policy_steps_skipped": 0.0},
                {"update": 2, "policy_steps_skipped": 3.0},
            ],
            1,
            0.02,
            True,
        ),
    ],
)
def test_guard_evidence_from_the_logs(tmp_path, rows, updates, target_kl, expected):
    found = guard_never_fired(fake_run(tmp_path, rows, updates, target_kl))
    assert (found is not None) == expected
    if expected:
        assert found.updates == updates and found.target_kl == target_kl


def test_no_evidence_without_a_finished_checkpoint_or_readable_logs(tmp_path):
    run = fake_run(tmp_path, [{"update": 1, "policy_steps_skipped": 0.0}], 1)
    (run / "metrics.jsonl").write_text("{not json\n")
    assert guard_never_fired(run) is None
    assert guard_never_fired(tmp_path / "missing") is None


# -- which cells a cell would repeat: a plain loop against the rule --------------------------------
def cell(index: int, agent: str, seed: int, lr: float, target_kl, group="tuning") -> TrainCell:
    overrides = {"lr": lr} if target_kl == "absent" else {"lr": lr, "target_kl": target_kl}
    return TrainCell(
        agent=agent,
        env_id=ENV,
        seed=seed,
        total_steps=18,
        model="m",
        preset=None,
        overrides_json=json.dumps(overrides),
        label="",
        run_dir=f"runs/{index}",
        group=group,
    )


cells_strategy = st.lists(
    st.tuples(
        st.sampled_from(["poad", "ntpo"]),
        st.sampled_from([1000, 1001]),
        st.sampled_from([1e-3, 2e-3]),
        st.sampled_from([None, "absent", 0.01, 0.02, 0.1]),
        st.sampled_from(["tuning", "tuning/dsc", "eval"]),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(cells_strategy)
def test_anchors_are_the_same_run_with_a_tighter_guard(specs):
    cells = [cell(i, *spec) for i, spec in enumerate(specs)]
    for mine in cells:
        expected = []
        kl = mine.overrides.get("target_kl", "absent")
        for other in cells:
            other_kl = other.overrides.get("target_kl", "absent")
            if other is mine or kl == "absent" or other_kl in ("absent", None):
                continue
            if mine.group == "eval" or other.group != mine.group:
                continue
            same = (other.agent, other.seed, other.overrides["lr"]) == (
                mine.agent,
                mine.seed,
                mine.overrides["lr"],
            )
            if same and (kl is None or kl > other_kl):
                expected.append(other)
        expected.sort(key=lambda c: c.overrides["target_kl"])
        assert list(anchors_for(mine, cells)) == expected
