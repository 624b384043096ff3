"""The selection rule that reads the board's score (DataSciCoding: final AUC, 0 where no program
ran) instead of the return (failures -1), so tuning selects by what the records evaluate."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentbench_poad.study.tuning import SELECTION_RULES, last3_sampled_score

SAMPLED = {"algorithm": {"eval_greedy": False}}
point = st.fixed_dictionaries(
    {"eval_return": st.floats(-1.0, 1.0), "eval_score": st.floats(0.0, 1.0)}
)


@given(st.lists(point, min_size=3, max_size=12))
def test_last3_sampled_score_is_the_mean_score_of_the_last_three_points(curve):
    expected = (curve[-1]["eval_score"] + curve[-2]["eval_score"] + curve[-3]["eval_score"]) / 3
    assert last3_sampled_score(curve, SAMPLED) == pytest.approx(expected)
    assert SELECTION_RULES["last3-sampled-score"] is last3_sampled_score


def test_score_and_return_rules_differ_where_programs_fail():
    """A run whose last programs failed: return counts -1, the score 0; the rules disagree."""
    curve = [{"eval_return": -1.0, "eval_score": 0.0}] * 3
    assert last3_sampled_score(curve, SAMPLED) == 0.0
    assert SELECTION_RULES["last3-sampled-return"](curve, SAMPLED) == -1.0
    with pytest.raises(ValueError, match="greedy"):
        last3_sampled_score(curve, {"algorithm": {"eval_greedy": True}})
    with pytest.raises(ValueError, match="needs 3"):
        last3_sampled_score(curve[:2], SAMPLED)
