"""The reward-free ablation's decision (studies/reward_free_ablation.py) against its written
rule (studies/reward-free-ablation/README.md), restated here case by case."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

_PATH = Path(__file__).resolve().parents[1] / "studies" / "reward_free_ablation.py"
_spec = importlib.util.spec_from_file_location("reward_free_ablation", _PATH)
ablation = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ablation)

maybe = st.one_of(st.none(), st.just(math.nan), st.floats(0.0, 1e5, allow_nan=False))
row = st.fixed_dictionaries({"policy_loss_max": maybe, "policy_grad_norm_max": maybe})


@given(success=st.floats(0.0, 1.0), lines=st.lists(row, max_size=6))
def test_a_run_counts_by_the_written_criterion(success, lines):
    bad = any(
        (r["policy_loss_max"] is not None and r["policy_loss_max"] > 10)
        or (r["policy_grad_norm_max"] is not None and r["policy_grad_norm_max"] > 1000)
        for r in lines
    )  # NaN compares False: an update without a policy pass is not large
    assert ablation.counts(success, lines) == (success >= 0.5 and not bad)


@given(st.tuples(*(st.integers(0, 12) for _ in range(3))))
def test_the_most_counting_runs_win_and_ties_go_to_keep_then_skip(numbers):
    counting = dict(zip(("skip", "keep", "keep-noent"), numbers))
    best = max(numbers)
    if counting["keep"] == best:
        expected = "keep"
    elif counting["skip"] == best:
        expected = "skip"
    else:
        expected = "keep-noent"
    assert ablation.decide(counting) == expected


@given(
    st.tuples(*(st.integers(0, 12) for _ in range(3))),
    st.tuples(*(st.integers(0, 12) for _ in range(3))),
)
def test_a_settled_decision_is_the_one_every_completion_of_the_runs_gives(finished_, counting_):
    import itertools

    rules = ("skip", "keep", "keep-noent")
    finished = dict(zip(rules, finished_))
    counting = {r: min(c, finished[r]) for r, c in zip(rules, counting_)}
    left = {r: ablation.RUNS_PER_RULE - finished[r] for r in rules}
    # every way the runs left could end: each rule gains 0..left of counting runs
    outcomes = {
        ablation.decide({r: counting[r] + extra for r, extra in zip(rules, gains)})
        for gains in itertools.product(*(range(left[r] + 1) for r in rules))
    }
    settled = ablation.settled(counting, finished)
    if settled is None:
        assert len(outcomes) > 1  # some completion would choose another rule
    else:
        assert outcomes == {settled}
