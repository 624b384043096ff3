"""The long-action tables of docs/results.md (issue 46, item 6): one agent's margin over another
env by env, the gap between margins where actions are generated and where they are chosen, and
the best code against a fixed baseline. Statistics against plain loops; tables on records built
from committed ones."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbench_poad.leaderboard.records import load_records
from agentbench_poad.leaderboard.report.long_actions import gap_reading
from agentbench_poad.leaderboard.report.results_tables import MARKER, fill, tables
from agentbench_poad.leaderboard.report.stats import Estimate, improvement_gap

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "leaderboard" / "results"
TS_POAD = "Overcooked-TomatoSalad-v0__poad__smollm2-135m"
DSC_TEMPLATE = "DataSciCoding-iris-v0__base-chat__dsc-smollm2-135m-paper-chat-v2"
FOREST = "DataSciCoding-iris-v0__scripted-forest"
VERDICT_WORDS = re.compile(r"\b(better|worse)\b")


def _p_plain(x: list[float], y: list[float]) -> float:
    """P(X > Y) by a double loop: ties count one half."""
    wins = 0.0
    for a in x:
        for b in y:
            wins += 1.0 if a > b else 0.5 if a == b else 0.0
    return wins / (len(x) * len(y))


SAMPLE = st.lists(
    st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(-3, 3, allow_nan=False, width=32)),
    min_size=1,
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(x1=SAMPLE, y1=SAMPLE, x2=SAMPLE, y2=SAMPLE)
def test_improvement_gap_is_the_difference_of_two_plain_counts(x1, y1, x2, y2):
    gap = improvement_gap(x1, y1, x2, y2, resamples=200)
    assert gap.point == pytest.approx(_p_plain(x1, y1) - _p_plain(x2, y2), abs=1e-12)
    assert gap.runs == min(map(len, (x1, y1, x2, y2)))
    mirror = improvement_gap(x2, y2, x1, y1, resamples=200)
    assert mirror.point == pytest.approx(-gap.point, abs=1e-12)
    if gap.runs < 2:
        assert gap.low is None and gap.high is None
    else:
        assert -1.0 <= gap.low <= gap.high <= 1.0


def test_a_gap_that_every_resample_keeps_has_a_point_interval():
    """X1 beats Y1 on every pair and X2 loses to Y2 on every pair: every bootstrap resample
    gives 1 − 0 = 1."""
    gap = improvement_gap([5, 6, 7], [0, 1, 2], [0, 1, 2], [5, 6, 7], resamples=200)
    assert (gap.point, gap.low, gap.high) == (1.0, 1.0, 1.0)


@pytest.mark.parametrize(
    ("estimate", "expected"),
    [
        (Estimate(0.3, 0.1, 0.5, 5), "exploratory: direction only (margin larger on A)"),
        (Estimate(-0.3, -0.5, -0.1, 9), "exploratory: direction only (margin larger on B)"),
        (Estimate(0.3, 0.1, 0.5, 10), "margin larger on A; the CI excludes 0 (no exact test"),
        (Estimate(0.3, -0.1, 0.5, 10), "margin larger on A; the CI includes 0"),
        (Estimate(0.0, -0.1, 0.1, 10), "equal margins; the CI includes 0"),
    ],
)
def test_a_gap_between_margins_gives_a_direction_never_a_verdict(estimate, expected):
    words = gap_reading(estimate, "A", "B")
    assert words.startswith(expected)
    assert not VERDICT_WORDS.search(words)


# -- the tables on constructed records -----------------------------------------------------------
def _records() -> dict[str, dict]:
    return {r["record_id"]: r for r in load_records(RESULTS)}


def _trained_dsc(template: dict, poad_ts: dict, agent: str, scores: list[float]) -> dict:
    """A trained DataSciCoding record of ``agent`` with these per-seed scores (the base row's
    protocol, a training section like a study's)."""
    r = copy.deepcopy(template)
    r["agent"]["name"] = agent
    r["record_id"] = f"DataSciCoding-iris-v0__{agent}__warm"
    r["training"] = copy.deepcopy(poad_ts["training"]) | {
        "env_id": "DataSciCoding-iris-v0",
        "total_steps": 256,
        "best_code": {"label": "best code", "reward": max(scores) + 0.01, "code": "", "seed": 7},
    }
    seeds = r["scores"]["per_seed"]
    assert len(seeds) >= len(scores)
    r["scores"]["per_seed"] = [dict(s, score=v) for s, v in zip(seeds, scores, strict=False)]
    r["protocol"]["seeds"] = [s["seed"] for s in r["scores"]["per_seed"]]
    return r


def _rows(body: str) -> list[list[str]]:
    lines = [line for line in body.splitlines() if line.startswith("| ")]
    return [
        [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        for line in lines
        if not line.startswith(("| env |", "| open-action env"))
    ]


def test_margins_set_the_long_action_margin_beside_tomato_salads():
    by_id = _records()
    ts_poad = by_id[TS_POAD]
    ts_ntpo = by_id[TS_POAD.replace("poad", "ntpo")]
    template = by_id[DSC_TEMPLATE]
    poad_scores = [0.9, 0.8, 0.85, 0.7, 0.95]
    ntpo_scores = [0.5, 0.6, 0.55, 0.9, 0.4]
    poad = _trained_dsc(template, ts_poad, "poad", poad_scores)
    ntpo = _trained_dsc(template, ts_poad, "ntpo", ntpo_scores)
    records = [ts_poad, ts_ntpo, poad, ntpo, by_id[FOREST]]
    body = tables(records)["margins:poad-ntpo"]()
    rows = _rows(body)
    dsc = next(r for r in rows if r[0] == "DataSciCoding-iris-v0")
    ts = next(r for r in rows if r[0] == "Overcooked-TomatoSalad-v0")
    assert dsc[2] == "open (generated)" and ts[2] == "restricted (candidates)"
    assert dsc[3] == "5 / 5" and ts[3] == "10 / 10"
    assert float(dsc[5].split()[0]) == pytest.approx(
        _p_plain(poad_scores, ntpo_scores), abs=0.006
    )  # printed with 2 decimals
    assert dsc[-1].startswith("exploratory: direction only (POAD higher)")  # 5 seeds
    gap = next(r for r in rows if r[1] == "Overcooked-TomatoSalad-v0")
    ts_scores = [[s["score"] for s in r["scores"]["per_seed"]] for r in (ts_poad, ts_ntpo)]
    expected = _p_plain(poad_scores, ntpo_scores) - _p_plain(*ts_scores)
    assert gap[0] == "DataSciCoding-iris-v0"
    assert float(gap[2].split()[0]) == pytest.approx(expected, abs=0.006)  # printed with 2 decimals
    assert gap[3].startswith("exploratory: direction only (margin larger on DataSciCoding")
    # a budget that differs is named, not compared, and leaves no gap row
    ntpo["training"]["total_steps"] = 512
    rows = _rows(tables(records)["margins:poad-ntpo"]())
    dsc = next(r for r in rows if r[0] == "DataSciCoding-iris-v0")
    assert dsc[-1].startswith("not compared: 256 steps against 512 steps")
    assert not any(r[1] == "Overcooked-TomatoSalad-v0" for r in rows)


def test_a_margins_region_limits_its_envs_and_a_bad_pair_is_refused():
    by_id = _records()
    records = [by_id[TS_POAD], by_id[TS_POAD.replace("poad", "ntpo")]]
    records += [by_id[TS_POAD.replace("TomatoSalad", "TomatoLettuceSalad")]]
    records += [by_id[TS_POAD.replace("TomatoSalad", "TomatoLettuceSalad").replace("poad", "ntpo")]]
    name = "margins:poad-ntpo:Overcooked-TomatoSalad-v0"
    filled = fill(f"<!-- results-tables: {name} -->\n<!-- /results-tables: {name} -->", records)
    body = next(MARKER.finditer(filled)).group("body")
    assert [r[0] for r in _rows(body)] == ["Overcooked-TomatoSalad-v0"]
    assert "no pair of an open-action env" in body
    bad = "margins:poad:Overcooked-TomatoSalad-v0"
    with pytest.raises(ValueError, match="margins:A-B"):
        fill(f"<!-- results-tables: {bad} -->\n<!-- /results-tables: {bad} -->", records)
    typo = "margins:poad-ntpo:Overcooked-TomatoSalat-v0"
    with pytest.raises(ValueError, match="TomatoSalat"):
        fill(f"<!-- results-tables: {typo} -->\n<!-- /results-tables: {typo} -->", records)


def test_best_code_stands_beside_the_fixed_baseline_on_the_same_splits():
    by_id = _records()
    forest = by_id[FOREST]
    poad = _trained_dsc(by_id[DSC_TEMPLATE], by_id[TS_POAD], "poad", [0.97, 0.98, 0.99])
    rows = _rows(tables([forest, poad])["best-code:scripted-forest"]())
    assert len(rows) == 1
    env, agent, base, best, diff, reading = rows[0]
    forest_scores = [s["score"] for s in forest["scores"]["per_seed"]]
    mean = sum(forest_scores) / len(forest_scores)
    assert env == "DataSciCoding-iris-v0" and agent.startswith("poad")
    assert base.startswith(f"{mean:.3f}")
    assert best == "1.000, seed 7"  # max(scores) + 0.01
    assert float(diff) == pytest.approx(1.0 - mean, abs=1e-3)
    assert reading == ("above the baseline" if 1.0 > mean else "not above the baseline")
    empty = _rows(tables([forest])["best-code:scripted-forest"]())
    assert empty[0][-1] == "no trained record yet"
