"""The budget pilot's decision (studies/budget_pilot.py) against its written rule
(studies/budget-pilot/README.md), restated here as a plain loop."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

_PATH = Path(__file__).resolve().parents[1] / "studies" / "budget_pilot.py"
_spec = importlib.util.spec_from_file_location("budget_pilot", _PATH)
pilot = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pilot)

AGENTS = ("poad", "ntpo", "grpo")
SEEDS = (1000, 1001)
# one budget's runs: each (agent, seed) either missing or with a success rate
budget_rows = st.dictionaries(
    st.tuples(st.sampled_from(AGENTS), st.sampled_from(SEEDS)),
    st.sampled_from([0.0, 0.05, 0.45, 0.5, 0.55, 1.0]),
)


def _rows(runs):
    return [{"agent": a, "seed": s, "success_rate": v} for (a, s), v in runs.items()]


def _plain(by_multiplier):
    for multiplier in (1, 2, 4):
        runs = by_multiplier.get(multiplier, {})
        for agent in AGENTS:
            if all((agent, seed) in runs and runs[(agent, seed)] >= 0.5 for seed in SEEDS):
                return "chosen", multiplier
        if len(runs) < len(AGENTS) * len(SEEDS):
            return "pending", multiplier
    return "none", None


@given(st.dictionaries(st.sampled_from([1, 2, 4]), budget_rows))
def test_the_smallest_passing_budget_is_chosen_and_a_gap_waits(by_multiplier):
    rows = {m: _rows(runs) for m, runs in by_multiplier.items()}
    assert pilot.decide(rows) == _plain(by_multiplier)


def test_an_agent_passes_only_with_both_seeds_at_half():
    rows = [
        {"agent": "poad", "seed": 1000, "success_rate": 1.0},
        {"agent": "poad", "seed": 1001, "success_rate": 0.45},
        {"agent": "ntpo", "seed": 1000, "success_rate": 0.5},
        {"agent": "ntpo", "seed": 1001, "success_rate": 0.5},
    ]
    # POAD has the higher mean (0.725 against 0.5) but a seed below half: only NTPO passes
    assert pilot.passing_agents(rows) == ["ntpo"]
    assert pilot.decide({1: rows}) == ("chosen", 1)
    assert pilot.decide({1: rows[:2]}) == ("pending", 1)


def test_the_script_reports_every_task_on_an_empty_folder(tmp_path, capsys):
    assert pilot.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "update rule (the reward-free ablation's decision): not yet decided" in out
    assert "VirtualHome-FoodPreparation-v0: waits for the reward-free ablation" in out
    assert "Overcooked-TomatoLettuceSalad-v0: run --group tomato-lettuce-1x next" in out
