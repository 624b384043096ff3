"""``NAME@STUDY`` regions of the results pages: a study's page keeps its own records after a
later study replaced them on the board (leaderboard/report/results_tables.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentbench_poad.leaderboard.records import load_records
from agentbench_poad.leaderboard.report.results_tables import as_study_left_it, fill

ROOT = Path(__file__).resolve().parents[1]
STUDIES = ("a", "b", "c")


def _record(record_id: str, study: str | None, tag: int) -> dict:
    config = {"study": {"study": study}} if study else {}
    return {"record_id": record_id, "config": config, "tag": tag}


records_st = st.lists(
    st.tuples(st.sampled_from("pqrs"), st.sampled_from((*STUDIES, None))),
    unique_by=lambda t: t[0],
)
history_st = st.lists(st.tuples(st.sampled_from("pqrs"), st.sampled_from(STUDIES)))


@given(records_st, history_st, st.sampled_from(STUDIES))
def test_a_history_record_of_the_study_takes_back_its_place(board, history, study):
    records = [_record(i, s, n) for n, (i, s) in enumerate(board)]
    past = [_record(i, s, 100 + n) for n, (i, s) in enumerate(history)]
    if not any(s == study for _, s in board) and not any(s == study for _, s in history):
        with pytest.raises(ValueError, match=study):
            as_study_left_it(records, past, study)
        return
    # plain restatement: for each board record, the last history record of that id by study
    expected = []
    for record in records:
        swap = record
        for old in past:
            if old["record_id"] == record["record_id"] and old["config"]["study"]["study"] == study:
                swap = old
        expected.append(swap)
    assert as_study_left_it(records, past, study) == expected


def _forest(name: str) -> dict:
    (record,) = [
        r for r in load_records(ROOT / "leaderboard" / "results") if r["record_id"] == name
    ]
    return record


def test_a_pinned_table_shows_the_studys_record_after_a_later_one_replaced_it():
    older = _forest("DataSciCoding-iris-v0__scripted-forest")
    older = copy.deepcopy(older)
    older["config"] = {**older.get("config", {}), "study": {"study": "old-study"}}
    newer = copy.deepcopy(older)
    newer["config"]["study"] = {"study": "new-study"}
    newer["protocol"] = {**newer["protocol"], "seeds": [7, 8]}
    env = older["env"]["id"]
    page = f"<!-- results-tables: env:{env}@old-study -->\nstale\n<!-- /results-tables: env:{env}@old-study -->\n"
    plain = f"<!-- results-tables: env:{env} -->\nstale\n<!-- /results-tables: env:{env} -->\n"
    pinned = fill(page, [newer], history=[older])
    # the pinned region is the old board's table; the unpinned one follows the new record
    assert pinned.split("-->\n", 1)[1] == fill(plain, [older]).split("-->\n", 1)[1].replace(
        f"env:{env} -->", f"env:{env}@old-study -->"
    )
    assert fill(plain, [newer], history=[older]) != fill(plain, [older])
    with pytest.raises(ValueError, match="no-such-study"):
        fill(page.replace("old-study", "no-such-study"), [newer], history=[older])
