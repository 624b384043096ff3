"""Reading training run dirs: learning curves, best code, run-set checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbench_poad.leaderboard.from_run import (
    BEST_CODE_LABEL,
    combine_curves,
    read_best_code,
    read_learning_curve,
    record_from_runs,
)
from agentbench_poad.leaderboard.schema import RecordError


def _run(
    tmp_path,
    name,
    *,
    seed=0,
    agent="poad",
    env_id="Overcooked-TomatoSalad-v0",
    curve=None,
    metrics=None,
    best=None,
):
    run = tmp_path / name
    run.mkdir()
    (run / "config.json").write_text(
        json.dumps(
            {
                "agent": agent,
                "env_id": env_id,
                "model": "/models/tiny",
                "seed": seed,
                "total_steps": 64,
            }
        )
    )
    if curve is not None:
        (run / "learning_curve.json").write_text(json.dumps(curve))
    if metrics is not None:
        (run / "metrics.jsonl").write_text("\n".join(json.dumps(m) for m in metrics) + "\n")
    if best is not None:
        (run / "best_code.json").write_text(json.dumps(best))
    return run


@pytest.mark.parametrize(
    "curve",
    [
        [
            {"env_steps": 16, "eval_return": 0.5, "eval_success_rate": None},
            {"env_steps": 32, "eval_return": 1.0},
        ],
        {"env_steps": [16, 32], "eval_return": [0.5, 1.0]},
        [[16, 0.5], [32, 1.0]],
        {"16": 0.5, "32": 1.0},
    ],
)
def test_learning_curve_file_shapes(tmp_path, curve):
    run = _run(tmp_path, "r", curve=curve)
    assert read_learning_curve(run) == [(16.0, 0.5), (32.0, 1.0)]


def test_learning_curve_falls_back_to_metrics(tmp_path):
    run = _run(
        tmp_path,
        "r",
        metrics=[
            {"env_steps": 8, "episode_return_mean": None},
            {"env_steps": 16, "eval_return": 0.25},
            {"env_steps": 24, "episode_return_mean": 0.5},
        ],
    )
    assert read_learning_curve(run) == [(16.0, 0.25), (24.0, 0.5)]


def test_curves_of_several_seeds_combine_with_a_standard_error_band():
    curve = combine_curves([[(0, 0.0), (10, 1.0)], [(0, 2.0), (10, 3.0)], [(0, 1.0)]])
    first, second = curve["points"]
    assert first["mean"] == pytest.approx(1.0) and first["n"] == 3
    assert first["high"] - first["mean"] == pytest.approx(1 / 3**0.5)  # s.e. of 0, 1, 2
    assert second["mean"] == pytest.approx(2.0) and second["n"] == 2
    assert "standard error" in curve["spread"]
    assert combine_curves([[], []]) is None
    assert combine_curves([[(0, 1.0)]], y="sampled evaluation return")["y"].startswith("sampled")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(st.integers(0, 40), st.floats(-2, 2, allow_nan=False)),
            min_size=1,
            max_size=6,
        ),
        min_size=1,
        max_size=5,
    )
)
def test_runs_whose_steps_differ_combine_by_evaluation_index(raw):
    """Group agents' k-th evaluations fall a few env steps apart from run to run: the k-th point
    averages the runs' k-th values at their mean step (a plain loop here), never one run per
    point; runs on one step grid combine step by step, as before."""
    curves = []
    for run in raw:  # increasing steps per run, as a trainer logs them
        step, curve = 0, []
        for gap, value in run:
            step += 100 + gap
            curve.append((float(step), value))
        curves.append(curve)
    out = combine_curves(curves)["points"]
    longest = max(len(c) for c in curves)
    grid = [s for s, _ in max(curves, key=len)]
    if all([s for s, _ in c] == grid[: len(c)] for c in curves):
        assert [p["step"] for p in out] == grid
    assert len(out) == longest
    for k, point in enumerate(out):
        values = [c[k][1] for c in curves if k < len(c)]
        steps = [c[k][0] for c in curves if k < len(c)]
        mean = sum(values) / len(values)
        assert point["n"] == len(values)
        assert point["mean"] == pytest.approx(mean, abs=1e-9)
        assert point["step"] == pytest.approx(sum(steps) / len(steps), abs=0.051)
        if len(values) > 1:
            se = (sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values)) ** 0.5
            assert point["high"] - point["mean"] == pytest.approx(se, abs=1e-9)


def test_best_code_is_labelled_as_found_during_training(tmp_path):
    run = _run(tmp_path, "r", best={"code": "model = X()", "reward": 0.91, "step": 40})
    assert read_best_code(run) == {"label": BEST_CODE_LABEL, "reward": 0.91, "code": "model = X()"}
    assert "during training" in BEST_CODE_LABEL
    assert read_best_code(_run(tmp_path, "none")) is None


def test_runs_of_different_agents_or_envs_are_refused(tmp_path):
    a = _run(tmp_path, "a", agent="poad")
    b = _run(tmp_path, "b", agent="ntpo", seed=1)
    with pytest.raises(RecordError, match="differ in 'agent'"):
        record_from_runs([a, b])
    c = _run(tmp_path, "c", seed=0)
    with pytest.raises(RecordError, match="share training seed 0"):
        record_from_runs([a, c])
    with pytest.raises(RecordError, match="no config.json"):
        record_from_runs([tmp_path / "missing"])


def test_curve_label_says_whether_the_runs_evaluated_greedily(tmp_path):
    from agentbench_poad.leaderboard.from_run import _curve_label

    def run(name: str, algorithm: dict) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"algorithm": algorithm}))
        return folder

    sampled, greedy = run("s", {"eval_greedy": False}), run("g", {"eval_greedy": True})
    legacy = run("old", {})  # written before eval_greedy existed: greedy
    assert _curve_label([sampled]) == "sampled evaluation return"
    assert _curve_label([greedy, legacy]) == "greedy evaluation return"
    assert "greedy and sampled" in _curve_label([sampled, greedy])


def test_runs_naming_their_spec_by_different_paths_are_refused_with_the_fix(tmp_path, tiny_model):
    source = {"spec": "/work/a/studies/s.toml", "tuning": {"seeds": [9]}, "chosen": {"lr": 0.1}}
    runs = []
    for seed, spec, chosen in (
        (0, source["spec"], 0.1),
        (1, "studies/s.toml", 0.1),
        (2, None, 0.2),
    ):
        run = _run(tmp_path, f"r{seed}", seed=seed)
        config = json.loads((run / "config.json").read_text())
        config["model"] = str(tiny_model)
        config["config_source"] = {
            **source,
            "spec": spec or source["spec"],
            "chosen": {"lr": chosen},
        }
        (run / "config.json").write_text(json.dumps(config))
        runs.append(run)
    with pytest.raises(
        RecordError, match=r"different paths \(\['/work/a/studies/s.toml', 'studies"
    ):
        record_from_runs(runs[:2])
    with pytest.raises(RecordError, match="configs from different sources"):
        record_from_runs([runs[0], runs[2]])


@settings(max_examples=30, deadline=None)
@given(rewards=st.lists(st.one_of(st.none(), st.floats(-1.0, 1.0)), min_size=1, max_size=5))
def test_best_code_of_runs_is_the_highest_reward_read_from_the_dirs_as_given(
    tmp_path_factory, rewards
):
    """The best code over a record's runs, read from the run dirs as given (a study's worker
    runs elsewhere than the runs root), is the highest reward, with its seed."""
    import os

    from agentbench_poad.leaderboard.from_run import best_code_of_runs

    root = tmp_path_factory.mktemp("runs")
    dirs = {}
    for seed, reward in enumerate(rewards):
        best = None if reward is None else {"code": f"model = M{seed}()", "reward": reward}
        dirs[str(seed)] = _run(root, f"seed{seed}", seed=seed, best=best)
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    before = os.getcwd()
    os.chdir(elsewhere)
    try:
        got = best_code_of_runs(dirs)
    finally:
        os.chdir(before)
    expected = None
    for seed, reward in enumerate(rewards):
        if reward is not None and (expected is None or reward > expected["reward"]):
            expected = {"reward": reward, "seed": seed, "code": f"model = M{seed}()"}
    if expected is None:
        assert got is None
    else:
        assert got == {"label": BEST_CODE_LABEL, **expected}
