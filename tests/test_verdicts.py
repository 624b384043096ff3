"""Verdict words an exact test would sign (issue 45): the exact permutation p over seeds, the
verdict rule (ten seeds per agent, a CI excluding zero and p < 0.05), and the "below random"
flag of trained rows, on constructed and on the committed records."""

from __future__ import annotations

import copy
import itertools
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbench_poad.leaderboard.records import load_records
from agentbench_poad.leaderboard.report import build_report, stats
from agentbench_poad.leaderboard.report.common import below_random
from agentbench_poad.leaderboard.report.results_tables import MARKER, pages, tables
from agentbench_poad.leaderboard.report.stats import Estimate, permutation_p, verdict

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "leaderboard" / "results"
FIRST_FAIR_STUDY = ROOT / "leaderboard" / "history" / "fair-cpu"
HAMBURGER_POAD = "VirtualHome-Hamburger-v0__poad__smollm2-135m__trainedon-FoodPreparation"


# -- the exact permutation p -------------------------------------------------------------------
def _brute_p(x: list[float], y: list[float]) -> float:
    """Every split of the pooled seeds, one by one: the share whose |mean difference| reaches
    the observed one."""
    pooled = x + y
    observed = abs(sum(x) / len(x) - sum(y) / len(y))
    hits = total = 0
    for chosen in itertools.combinations(range(len(pooled)), len(x)):
        a = [pooled[i] for i in chosen]
        b = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        total += 1
        hits += abs(sum(a) / len(a) - sum(b) / len(b)) >= observed - 1e-9
    return hits / total


def _brute_rank_p(x: list[float], y: list[float]) -> float:
    """The rank-sum test by brute force: mid-ranks, every split, |sum − its mean| as extreme."""
    pooled = x + y
    ranks = [sum(v < w for v in pooled) + (sum(v == w for v in pooled) + 1) / 2 for w in pooled]
    centre = len(x) * (len(pooled) + 1) / 2
    observed = abs(sum(ranks[: len(x)]) - centre)
    splits = list(itertools.combinations(range(len(pooled)), len(x)))
    hits = sum(abs(sum(ranks[i] for i in c) - centre) >= observed - 1e-9 for c in splits)
    return hits / len(splits)


SCORES = st.lists(
    st.sampled_from([-0.5, 0.0, 0.144, 0.159, 0.5, 1.0, 1.146]), min_size=1, max_size=6
)
FLOATS = st.lists(st.floats(-2, 2, allow_nan=False, width=32), min_size=1, max_size=6)


@settings(max_examples=150, deadline=None)
@given(x=st.one_of(SCORES, FLOATS), y=st.one_of(SCORES, FLOATS))
def test_permutation_p_is_the_brute_force_count(x, y):
    assert permutation_p(x, y) == pytest.approx(_brute_p(x, y), abs=1e-12)
    assert permutation_p(x, y) == pytest.approx(permutation_p(y, x), abs=1e-12)  # two-sided


@settings(max_examples=150, deadline=None)
@given(x=st.one_of(SCORES, FLOATS), y=st.one_of(SCORES, FLOATS))
def test_rank_sum_fallback_is_the_brute_force_count(x, y):
    """Beyond the enumeration limit the exact Mann-Whitney test stands in: its counted null
    distribution (mid-ranks for ties) equals a plain loop over every split."""
    got = stats._rank_sum_p(np.asarray(x + y, dtype=float), len(x))
    assert got == pytest.approx(_brute_rank_p(x, y), abs=1e-9)


def test_known_values():
    # 3 seeds against 3: 20 splits, the observed one and its mirror the most extreme
    assert permutation_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)
    assert permutation_p([0.1, 0.1, 0.1], [0.1, 0.1, 0.1]) == 1.0
    # 10 against 10, fully separated: 2 of C(20, 10) = 184,756 splits
    assert permutation_p(range(10), range(10, 20)) == pytest.approx(2 / 184_756)
    # 11 against 11 is past the enumeration: the rank-sum test, 2 / C(22, 11)
    assert permutation_p(range(11), range(11, 22)) == pytest.approx(2 / 705_432)
    with pytest.raises(ValueError, match="at least one seed"):
        permutation_p([], [1.0])


# -- the verdict rule --------------------------------------------------------------------------
def test_verdict_needs_ten_seeds_a_ci_excluding_zero_and_p_below_005():
    excluding = Estimate(0.5, 0.1, 0.9, 10)
    assert verdict(excluding, 0.01) == "better"
    assert verdict(Estimate(-0.5, -0.9, -0.1, 10), 0.01, lower="B higher") == "worse"
    # the case: the bootstrap CI excludes zero, the exact test does not (p = 0.057)
    assert verdict(excluding, 0.057, higher="A higher") == (
        "no significant difference (A higher; the CI excludes 0, the exact test not)"
    )
    assert verdict(Estimate(0.5, -0.1, 0.9, 10), 0.001) == "no significant difference (higher)"
    # fewer than ten seeds on either side: the direction only, however strong the evidence
    for runs in (1, 3, 9):
        assert verdict(excluding._replace(runs=runs), 1e-6) == (
            "exploratory: direction only (higher)"
        )
    assert verdict(Estimate(0.0, 0.0, 0.0, 3), 1.0) == "exploratory: direction only (equal)"


def test_tomato_salad_gigpo_over_grpo_is_not_signed_by_the_exact_test():
    """The issue's example: +0.660 [+0.161, +1.053] over 10 seeds each, exact p 0.057 (the first
    fair study's records, kept in the history since the second study's replaced them)."""
    by_id = {r["record_id"]: r for r in load_records(FIRST_FAIR_STUDY)}
    scores = [
        [
            s["score"]
            for s in by_id[f"Overcooked-TomatoSalad-v0__{a}__smollm2-135m"]["scores"]["per_seed"]
        ]
        for a in ("gigpo", "grpo")
    ]
    assert permutation_p(*scores) == pytest.approx(0.0573, abs=5e-4)
    diff = stats.iqm_difference(*scores)
    assert diff.low > 0 and verdict(diff, permutation_p(*scores)).startswith(
        "no significant difference"
    )


def _table_rows(body: str) -> list[list[str]]:
    lines = [line for line in body.splitlines() if line.startswith("| ")][1:]  # no header
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]


def _pages_text() -> str:
    """Every results page (docs/results.md and docs/results/*.md), one after the other."""
    return "\n".join(p.read_text(encoding="utf-8") for p in pages(ROOT))


def _seeds(record: dict) -> int:
    return len(record["scores"]["per_seed"])


def test_generated_verdicts_follow_the_rule_on_the_committed_page():
    """Every verdict of the committed comparison and credit tables (on whichever results page
    they stand) obeys the rule: rows with fewer than ten seeds on a side say "exploratory:
    direction only"; "better"/"worse" only with a CI excluding zero and p < 0.05."""
    text = _pages_text()
    bodies = {m.group("name"): m.group("body") for m in MARKER.finditer(text)}
    checked = exploratory = 0
    for name in ("comparison", "credit"):
        for row in _table_rows(bodies[name]):
            words, p = row[-1], row[-2]
            if words.startswith("not compared"):
                continue
            checked += 1
            low, high = (float(v) for v in re.findall(r"[-+]\d\.\d{3}", row[4])[1:3])
            if words in ("better", "worse"):
                assert (low > 0 or high < 0) and float(p) < 0.05, row
            if "[exploratory]" in row[1] or "base" in row[1]:  # 3-seed rows
                exploratory += 1
                assert words.startswith("exploratory: direction only"), row
    # both kinds of row are on the page, so neither branch above is vacuous
    assert checked > 50 and exploratory >= 10 and checked - exploratory >= 10


def test_fewer_than_ten_seeds_give_the_direction_only(tmp_path):
    """The generator enforces the seed rule: the same scores, cut to 9 seeds a side, lose
    their verdict."""
    by_id = {r["record_id"]: r for r in load_records(RESULTS)}
    poad = by_id["Overcooked-TomatoSalad-v0__poad__smollm2-135m"]
    base = copy.deepcopy(poad)
    base["agent"]["name"] = "ntpo"
    base["record_id"] = base["record_id"].replace("poad", "ntpo")
    for s in base["scores"]["per_seed"]:
        s["score"] += 5.0  # every seed far above POAD's
    row = _table_rows(tables([poad, base])["comparison"]())[0]
    assert row[-1] == "better" and float(row[-2]) < 0.001
    for r in (poad, base):
        r["scores"]["per_seed"] = r["scores"]["per_seed"][:9]
        r["protocol"]["seeds"] = r["protocol"]["seeds"][:9]
    row = _table_rows(tables([poad, base])["comparison"]())[0]
    assert row[-1] == "exploratory: direction only (agent higher)"


# -- below random ------------------------------------------------------------------------------
def _first_study_foodprep_board() -> list[dict]:
    """The board as it was with the first fair study's Food Preparation records (now in its
    history): today's records, their Food Preparation-trained ones swapped for the first
    study's."""
    first = [r for r in load_records(FIRST_FAIR_STUDY) if _trained_on_foodprep(r)]
    assert len(first) == 35  # 5 agents x 7 tasks
    return [r for r in load_records(RESULTS) if not _trained_on_foodprep(r)] + first


def _trained_on_foodprep(record: dict) -> bool:
    """A record whose agent was trained on Food Preparation (its ``training.env_id``)."""
    return (record.get("training") or {}).get("env_id") == "VirtualHome-FoodPreparation-v0"


def test_poad_on_hamburger_is_flagged_below_random_in_tables_and_report(tmp_path):
    """The first fair study's POAD on VirtualHome-Hamburger: 0 of 300 episodes against
    random's 7 of 300."""
    records = _first_study_foodprep_board()
    by_id = {r["record_id"]: r for r in records}
    poad = by_id[HAMBURGER_POAD]
    random = by_id["VirtualHome-Hamburger-v0__random"]
    assert sum(round(s["success_rate"] * 100) for s in poad["scores"]["per_seed"]) == 0
    assert sum(round(s["success_rate"] * 100) for s in random["scores"]["per_seed"]) == 7
    assert below_random(poad, records) == pytest.approx(random["scores"]["mean"])
    assert below_random(random, records) is None  # the anchor itself is not a trained row
    flag = f"[below random: {random['scores']['mean']:.3f}]"
    generated = tables(records)
    table1 = next(
        line
        for line in generated["table1"]().splitlines()
        if line.startswith("| poad (smollm2-135m), trained on Food Prep. [exploratory] (ours)")
    )
    assert table1.split(" | ")[3] == f"0.0000 (0.000) {flag}"  # the Hamburger cell
    assert table1.count("below random") == 1  # the other tasks are above it
    hamburger = [
        line
        for line in generated["comparison"]().splitlines()
        if line.startswith("| VirtualHome-Hamburger-v0 | ")
    ]
    assert hamburger and all(f"0.000 [0.000, 0.000] {flag}" in line for line in hamburger)
    md, html = build_report(records, tmp_path, paper_results=[])
    section = md.read_text().split("### VirtualHome-Hamburger-v0")[1].split("\n### ")[0]
    assert (
        f"poad (smollm2-135m) [trained on VirtualHome-FoodPreparation-v0] [exploratory] {flag}"
        in (section)
    )
    assert flag in html.read_text()
    # the committed pages carry the flag (today on the second study's Food Preparation rows)
    assert flag in _pages_text()


def test_a_constructed_trained_row_below_random_is_flagged_and_one_above_is_not():
    records = load_records(RESULTS)
    random = next(
        r for r in records if r["record_id"] == "Overcooked-TomatoSalad-v0__random__steps30"
    )
    trained = copy.deepcopy(
        next(
            r for r in records if r["record_id"] == "Overcooked-TomatoSalad-v0__poad__smollm2-135m"
        )
    )
    trained["agent"]["name"] = "worse-than-chance"
    trained["record_id"] = "Overcooked-TomatoSalad-v0__worse-than-chance"
    low = random["scores"]["mean"] - 0.05
    for i, s in enumerate(trained["scores"]["per_seed"]):
        s["score"] = low - 0.01 * i  # every seed below random's mean of its cap
    assert below_random(trained, [*records, trained]) == pytest.approx(random["scores"]["mean"])
    row = next(
        line
        for line in tables([*records, trained])["env:Overcooked-TomatoSalad-v0"]().splitlines()
        if "worse-than-chance" in line
    )
    assert f"[below random: {random['scores']['mean']:.3f}]" in row
    # at random's mean on every seed: the CI's upper bound is at it, still flagged
    for s in trained["scores"]["per_seed"]:
        s["score"] = random["scores"]["mean"]
    assert below_random(trained, [*records, trained]) is not None
    # three seeds well above random: the CI's upper bound is above it
    for s in trained["scores"]["per_seed"][:3]:
        s["score"] = random["scores"]["mean"] + 1.0
    assert below_random(trained, [*records, trained]) is None
    # without the cap, the uncapped random row is the anchor (another mean)
    uncapped = copy.deepcopy(trained)
    uncapped["config"]["env_kwargs"] = {}
    for s in uncapped["scores"]["per_seed"]:
        s["score"] = -0.10  # above the capped random's −0.112, below the uncapped −0.039
    assert below_random(uncapped, [*records, uncapped]) == pytest.approx(
        next(r for r in records if r["record_id"] == "Overcooked-TomatoSalad-v0__random")["scores"][
            "mean"
        ]
    )
    # a single seed has no CI: not flagged
    single = copy.deepcopy(uncapped)
    single["scores"]["per_seed"] = single["scores"]["per_seed"][:1]
    assert below_random(single, [*records, single]) is None


def test_committed_page_quotes_the_p_values():
    """Every table with a verdict carries the exact p beside the bootstrap CI: the summary, the
    comparison, credit, long-action margins and learning-speed pairs."""
    bodies = {m.group("name"): m.group("body") for m in MARKER.finditer(_pages_text())}
    with_verdicts = [n for n, b in bodies.items() if "| verdict |" in b.splitlines()[0]]
    assert {"summary", "comparison", "credit"} <= set(with_verdicts)
    assert any(n.startswith("margins:") for n in with_verdicts)
    assert any(n.startswith("speed-pairs:") for n in with_verdicts)
    for name in with_verdicts:
        assert "| exact p | verdict |" in bodies[name].splitlines()[0], name


def test_a_record_with_episodes_ended_by_the_deadline_is_named_not_compared():
    """A score that depends on the machine's load decides no verdict: one episode that the
    evaluation deadline ended sets the record apart in the comparison and credit tables."""
    by_id = {r["record_id"]: r for r in load_records(RESULTS)}
    poad = by_id["Overcooked-TomatoSalad-v0__poad__smollm2-135m"]
    ntpo = copy.deepcopy(by_id["Overcooked-TomatoSalad-v0__ntpo__smollm2-135m"])
    row = _table_rows(tables([poad, ntpo])["comparison"]())[0]
    assert not row[-1].startswith("not compared")
    episode = ntpo["scores"]["per_seed"][3]["episodes"][0]
    episode.update(failed=True, reason="agent timed out at step 4: no answer within 60.0 s")
    row = _table_rows(tables([poad, ntpo])["comparison"]())[0]
    assert row[-1] == (
        "not compared: 1 episode(s) of ntpo ended by the evaluation deadline (the machine's "
        "load can cause it: re-evaluate with action_timeout = 0)"
    )
    credit = _table_rows(tables([poad, ntpo])["credit"]())[0]
    assert credit[-1].startswith("not compared: 1 episode(s) of ntpo")
    # the agent's own fault is its score, not the machine's: compared as before
    episode.update(reason="agent raised RuntimeError at step 4: boom")
    assert not _table_rows(tables([poad, ntpo])["comparison"]())[0][-1].startswith("not compared")
