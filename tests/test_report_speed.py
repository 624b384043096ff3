"""Learning speed (leaderboard/report/speed.py): the normalised area and steps to threshold
against plain loops, and the tables on the committed fair-cpu-v2 records."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbench_poad.leaderboard.report.speed import (
    THRESHOLD,
    normalised_area,
    run_curve,
    steps_to_threshold,
)

returns = st.floats(-2.0, 3.0, allow_nan=False)


def _plain_area(steps, values, random_score, oracle_score):
    """Each point holds its value over the steps since the previous point (0 before the
    first): integrate that step function one env step at a time, then normalise."""
    total, previous = 0.0, 0
    for step, value in zip(steps, values):
        for _ in range(previous, step):
            total += value
        previous = step
    mean = total / steps[-1]
    return (mean - random_score) / (oracle_score - random_score)


@settings(max_examples=200, deadline=None)
@given(
    gaps=st.lists(st.integers(1, 300), min_size=1, max_size=12),
    data=st.data(),
    random_score=st.floats(-1.0, 0.5),
    span=st.floats(0.1, 3.0),
)
def test_normalised_area_equals_a_step_by_step_sum(gaps, data, random_score, span):
    steps = [sum(gaps[: i + 1]) for i in range(len(gaps))]
    values = data.draw(st.lists(returns, min_size=len(steps), max_size=len(steps)))
    oracle_score = random_score + span
    points = list(zip(map(float, steps), values))
    expected = _plain_area(steps, values, random_score, oracle_score)
    assert normalised_area(points, random_score, oracle_score) == pytest.approx(
        expected, rel=1e-9, abs=1e-9
    )


@settings(max_examples=200, deadline=None)
@given(values=st.lists(returns, min_size=1, max_size=10), random_score=st.floats(-1.0, 0.0))
def test_steps_to_threshold_is_the_first_point_at_the_threshold(values, random_score):
    oracle_score = random_score + 1.5
    points = [(100.0 * (i + 1), v) for i, v in enumerate(values)]
    expected = None
    for step, v in points:
        if (v - random_score) / (oracle_score - random_score) >= THRESHOLD:
            expected = step
            break
    assert steps_to_threshold(points, random_score, oracle_score) == expected


def test_an_agent_at_the_oracle_from_the_first_point_has_area_one_and_random_zero():
    points = [(512.0, 1.4), (1024.0, 1.4)]
    assert normalised_area(points, -0.1, 1.4) == pytest.approx(1.0)
    assert normalised_area([(512.0, -0.1)], -0.1, 1.4) == pytest.approx(0.0)


@pytest.mark.parametrize(
    "points, anchors",
    [
        ([], (0.0, 1.0)),
        ([(0.0, 1.0)], (0.0, 1.0)),
        ([(5.0, 1.0), (5.0, 1.0)], (0.0, 1.0)),
        ([(5.0, 1.0)], (1.0, 1.0)),
    ],
)
def test_bad_curves_and_anchors_are_errors(points, anchors):
    with pytest.raises(ValueError):
        normalised_area(points, *anchors)


def test_run_curve_reads_points_in_order_within_the_budget(tmp_path):
    (tmp_path / "learning_curve.json").write_text(
        json.dumps(
            [
                {"env_steps": 1024, "eval_return": -1.0, "eval_score": 0.5},
                {"env_steps": 512, "eval_return": 0.25},  # a run from before eval_score
                {"env_steps": 4096, "eval_return": 1.0, "eval_score": 1.0},
            ]
        )
    )
    assert run_curve(tmp_path, 3072) == [(512.0, 0.25), (1024.0, 0.5)]
    (tmp_path / "learning_curve.json").write_text(
        json.dumps([{"env_steps": 512, "eval_score": float("nan")}])
    )
    with pytest.raises(ValueError, match="not finite"):
        run_curve(tmp_path)


def test_speed_tables_on_the_committed_tomato_salad_records():
    """The v2 Tomato Salad records' runs are committed: every trained agent gets a row, and
    every pair a verdict cell that follows the board's rule (10 seeds each)."""
    from agentbench_poad.leaderboard.records import load_records
    from agentbench_poad.leaderboard.report.results_tables import tables

    found = tables(load_records())
    speed = found["speed:Overcooked-TomatoSalad-v0"]()
    pairs = found["speed-pairs:Overcooked-TomatoSalad-v0"]()
    for agent in ("poad", "ntpo", "twosome", "grpo", "gigpo"):
        assert f"| {agent} (smollm2-135m) | 10 |" in speed
    agents = [line for line in speed.splitlines()[2:] if line.startswith("|")]
    rows = [line for line in pairs.splitlines()[2:] if line.startswith("|")]
    assert len(rows) == len(agents) * (len(agents) - 1) // 2  # every pair once
    words = ("better", "worse", "no significant difference", "exploratory", "not compared")
    assert all(any(w in row for w in words) for row in rows)
    # the ten-seed v2 pairs get a verdict by the rule, never "exploratory"
    v2 = [r for r in rows if "exploratory" not in r and "not compared" not in r]
    assert len(v2) == 10
