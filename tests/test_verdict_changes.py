"""What one study's verdicts became in a later study (issue 45's closing question): the
``changes:BEFORE:AFTER`` table of docs/results.md, on records built from committed ones, against a
plain recomputation with the statistics; and the command reading the board's history."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbench_poad.cli import main
from agentbench_poad.leaderboard.records import history_store, load_records
from agentbench_poad.leaderboard.report.fair_tables import verdict_changes_table
from agentbench_poad.leaderboard.report.results_tables import fill
from agentbench_poad.leaderboard.report.stats import iqm_difference, permutation_p, verdict

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "leaderboard" / "results"
TS = "Overcooked-TomatoSalad-v0__{}__smollm2-135m"
REGION = "<!-- results-tables: changes:one:two -->\n<!-- /results-tables: changes:one:two -->\n"


def _committed(agent: str) -> dict:
    return json.loads((RESULTS / f"{TS.format(agent)}.json").read_text())


def _record(agent: str, study: str, scores: list[float], first_seed: int) -> dict:
    """A committed Tomato Salad record of ``agent`` made ``study``'s, with these per-seed
    scores on seeds ``first_seed``..."""
    r = copy.deepcopy(_committed(agent))
    seeds = list(range(first_seed, first_seed + len(scores)))
    r["config"]["study"]["study"] = study
    r["protocol"]["seeds"] = seeds
    template = r["scores"]["per_seed"][0]
    r["scores"]["per_seed"] = [
        {**template, "seed": s, "score": v} for s, v in zip(seeds, scores, strict=True)
    ]
    return r


def _rows(table: str) -> list[list[str]]:
    lines = [line for line in table.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]


def _plain(a: list[float], b: list[float]) -> str:
    """The verdict the rule gives, from the statistics directly."""
    return verdict(
        iqm_difference(a, b), permutation_p(a, b), higher="POAD higher", lower="NTPO higher"
    )


def _kind(words: str) -> str:
    return words.split(" (")[0]


SEEDS = st.sampled_from([3, 10])
SCORE = st.sampled_from([0.0, 0.144, 0.159, 0.5, 1.0, 1.146])


@settings(max_examples=12, deadline=None)
@given(
    n=SEEDS,
    m=SEEDS,
    data=st.data(),
)
def test_each_row_is_the_verdict_rule_on_each_study_and_names_the_change(n, m, data):
    """POAD − NTPO in two studies: both verdicts are the rule's on each study's seeds, and the
    change column says whether the verdict, else the sign of the IQM difference, moved."""
    one_a, one_b = (data.draw(st.lists(SCORE, min_size=n, max_size=n)) for _ in range(2))
    two_a, two_b = (data.draw(st.lists(SCORE, min_size=m, max_size=m)) for _ in range(2))
    records = [
        _record("poad", "one", one_a, 100),
        _record("ntpo", "one", one_b, 100),
        _record("poad", "two", two_a, 200),
        _record("ntpo", "two", two_b, 200),
        _record("twosome", "two", two_b, 200),  # no pair of study one: no row
    ]
    rows = _rows(verdict_changes_table(records, "one", "two"))
    assert len(rows) == 1
    env, pair, seeds1, diff1, p1, words1, seeds2, diff2, p2, words2, change = rows[0]
    assert (env, pair) == ("Overcooked-TomatoSalad-v0", "POAD − NTPO (smollm2-135m)")
    assert (seeds1, seeds2) == (str(n), str(m))
    assert words1 == _plain(one_a, one_b) and words2 == _plain(two_a, two_b)
    assert float(p1) == pytest.approx(permutation_p(one_a, one_b), abs=1e-3)
    assert float(p2) == pytest.approx(permutation_p(two_a, two_b), abs=1e-3)
    d1, d2 = iqm_difference(one_a, one_b).point, iqm_difference(two_a, two_b).point
    assert float(diff1.split()[0]) == pytest.approx(d1, abs=1e-3)
    if _kind(words1) != _kind(words2):
        assert change == "verdict changed"
    elif (d1 > 0) - (d1 < 0) != (d2 > 0) - (d2 < 0):  # the sign, as the verdict's direction
        assert change == "direction changed"
    else:
        assert change == "same"


def test_a_pair_the_later_study_lacks_says_so_and_mixed_studies_are_not_paired():
    """A later study's POAD beside an earlier study's NTPO is no pair of either study."""
    ten = [1.146] * 8 + [0.159, 0.144]
    records = [
        _record("poad", "one", ten, 100),
        _record("ntpo", "one", ten, 100),
        _record("poad", "two", ten, 200),
    ]
    (row,) = _rows(verdict_changes_table(records, "one", "two"))
    assert row[5] == "no significant difference (equal)"
    assert row[6:] == ["--", "--", "--", "no record pair of two yet", "--"]
    assert verdict_changes_table(records, "three", "two").startswith("(no pair of agents")


def test_unequal_budgets_inside_a_study_are_named_not_compared():
    ten = [1.146] * 10
    poad, ntpo = _record("poad", "one", ten, 100), _record("ntpo", "one", ten, 110)
    (row,) = _rows(verdict_changes_table([poad, ntpo], "one", "two"))
    assert row[3:5] == ["--", "--"] and row[5].startswith("not compared: seeds")


def test_the_command_reads_the_history_beside_the_store(tmp_path, capsys):
    """`leaderboard results-tables` fills a changes region from the records folder and the
    history folder beside it, as a superseded study's records lie after `study` moved them."""
    store = tmp_path / "board" / "results"
    moved = history_store(store) / "one"
    for folder in (store, moved):
        folder.mkdir(parents=True)
    seeds10 = [1.146] * 9 + [0.159]
    for agent, study, folder, first in (
        ("poad", "one", moved, 100),
        ("ntpo", "one", moved, 100),
        ("poad", "two", store, 200),
        ("ntpo", "two", store, 200),
    ):
        record = _record(agent, study, seeds10, first)
        (folder / f"{record['record_id']}.json").write_text(json.dumps(record))
    assert {r["config"]["study"]["study"] for r in load_records(store)} == {"two"}
    page = tmp_path / "results.md"
    page.write_text(REGION)
    assert main(["leaderboard", "--store", str(store), "results-tables", str(page), "--write"]) == 0
    (row,) = _rows(page.read_text())
    assert row[2] == row[6] == "10" and row[-1] == "same"
    # without the history the earlier study has no pair
    assert fill(REGION, load_records(store)).count("no pair of agents has records of study")
