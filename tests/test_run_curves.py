"""`<!-- results-tables: run-curves:SPEC:OUT:ENV -->`: runnable rate and final AUC of a study's
finished runs, point by point, against a plain loop over the runs' learning_curve.json."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentbench_poad.leaderboard.report.results_tables import fill
from agentbench_poad.study import load_study

pytest.importorskip("torch")

ENV = "CaseStudy-Microwave-v0"
SEEDS = [7, 8, 9]
POINTS = 3
REGION = "run-curves:s.json:out:" + ENV


def spec(model) -> dict:
    small = dict(num_envs=4, rollout_length=3, eval_every=1, eval_episodes=2)
    return {
        "study": {
            "name": "curves",
            "model": str(model),
            "total_steps": {ENV: 36},
            "overrides": small,
        },
        "eval": {"episodes": 2},
        "group": [{"name": "g", "agents": ["poad", "grpo"], "envs": [ENV], "seeds": SEEDS}],
    }


def write_run(run_dir: Path, points: list[dict], finished: bool) -> None:
    run_dir.mkdir(parents=True)
    (run_dir / "learning_curve.json").write_text(json.dumps(points))
    (run_dir / "config.json").write_text(
        json.dumps({"algorithm": {"num_envs": 4, "rollout_length": 3}})
    )
    update = 3 if finished else 1
    (run_dir / "checkpoints" / f"update_{update:06d}").mkdir(parents=True)
    (run_dir / "checkpoints" / f"update_{update:06d}" / "state.json").write_text(
        json.dumps({"update": update})
    )
    (run_dir / "checkpoints" / "latest").write_text(f"update_{update:06d}")


def rows(text: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip("|").split(" | ")]
        for line in text.splitlines()
        if line.startswith("| ") and not line.startswith("| agent")
    ]


def plain_mean_se(values: list[float]) -> tuple[float, float]:
    mean = 0.0
    for v in values:
        mean += v
    mean /= len(values)
    if len(values) == 1:
        return mean, 0.0
    square = 0.0
    for v in values:
        square += (v - mean) ** 2
    return mean, math.sqrt(square / (len(values) - 1) / len(values))


unit = st.floats(0.0, 1.0, allow_nan=False)
curve = st.lists(st.tuples(unit, unit), min_size=POINTS, max_size=POINTS)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    curves=st.lists(curve, min_size=2 * len(SEEDS), max_size=2 * len(SEEDS)),
    unfinished=st.sampled_from([None, 0, 1, 2, 3, 4, 5]),
    shift=st.integers(1, 2),
)
def test_run_curves_are_the_mean_and_se_of_the_finished_runs(
    tiny_model, tmp_path, curves, unfinished, shift
):
    root = tmp_path / "case"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    (root / "s.json").write_text(json.dumps(spec(tiny_model)))
    study = load_study(root / "s.json", out=root / "out")
    cells = [c for c in study.cells if c.env_id == ENV]
    assert sorted((c.agent, c.seed) for c in cells) == sorted(
        (a, s) for a in ("poad", "grpo") for s in SEEDS
    )
    for i, (cell, values) in enumerate(zip(cells, curves, strict=True)):
        # the group agent's evaluations fall a few steps off the trainer's grid, seed by seed
        off = shift * (cell.seed - 6) if cell.agent == "grpo" else 0
        points = [
            {
                "env_steps": 12 * (k + 1) + (off if k < POINTS - 1 else 0),
                "eval_return": -1.0,
                "eval_success_rate": ran,
                "eval_score": score,
            }
            for k, (ran, score) in enumerate(values)
        ]
        write_run(Path(cell.run_dir), points, finished=i != unfinished)
    text = fill(
        f"<!-- results-tables: {REGION} -->\n<!-- /results-tables: {REGION} -->", [], root=root
    )
    got = rows(text)
    order = list(dict.fromkeys(c.agent for c in cells))  # the study's order of cells
    assert [r[:2] for r in got] == [
        [agent, measure]
        for agent in order
        for measure in ("runnable rate", "final AUC (0 if none ran)")
    ]
    for r, (agent, column) in zip(got, [(a, m) for a in order for m in (0, 1)], strict=True):
        kept = [
            values
            for i, (cell, values) in enumerate(zip(cells, curves))
            if cell.agent == agent and i != unfinished
        ]
        assert r[2] == str(len(kept))
        for k in range(POINTS):
            mean, se = plain_mean_se([values[k][column] for values in kept])
            off_grid = agent == "grpo" and k < POINTS - 1
            assert r[3 + k] == f"{'≈' if off_grid else ''}{mean:.2f} ± {se:.2f}"
    if unfinished is None:
        assert "not finished" not in text
    else:
        cell = cells[unfinished]
        assert f"not finished, left out: {cell.agent} seed {cell.seed}" in text


def test_a_run_curves_region_of_an_env_the_study_does_not_train_is_an_error(tiny_model, tmp_path):
    (tmp_path / "s.json").write_text(json.dumps(spec(tiny_model)))
    region = "run-curves:s.json:out:Overcooked-TomatoSalad-v0"
    with pytest.raises(ValueError, match="trains no run on 'Overcooked-TomatoSalad-v0'"):
        fill(
            f"<!-- results-tables: {region} -->\n<!-- /results-tables: {region} -->",
            [],
            root=tmp_path,
        )
