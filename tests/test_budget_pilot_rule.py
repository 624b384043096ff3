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


def test_the_plan_is_the_pilot_specs(tmp_path):
    # the decision's agents, seeds and budgets are the spec's, read from pilot.toml
    plan = pilot.load_plan()
    assert plan.agents == AGENTS and plan.seeds == SEEDS
    assert plan.multipliers == (1, 2, 4)
    assert plan.base_steps == {
        "VirtualHome-FoodPreparation-v0": 12288,
        "Overcooked-TomatoLettuceSalad-v0": 6144,
    }
    assert plan.group_prefix["Overcooked-TomatoLettuceSalad-v0"] == "tomato-lettuce"
    # an edit of the spec moves the plan with it: a third seed in every group
    text = pilot.SPEC.read_text().replace("seeds = [1000, 1001]", "seeds = [1000, 1001, 1002]")
    (tmp_path / "pilot.toml").write_text(text)
    assert pilot.load_plan(tmp_path / "pilot.toml").seeds == (1000, 1001, 1002)


def test_a_spec_that_breaks_the_protocol_is_refused(tmp_path):
    spec = pilot.SPEC.read_text()
    cases = {
        # a budget that is no multiple of the 1x budget its label claims
        "steps": spec.replace("total_steps = 24576", "total_steps = 20000", 1),
        # one budget's groups without a seed the others run
        "seeds": spec.replace("seeds = [1000, 1001]", "seeds = [1000]", 1),
    }
    for why, text in cases.items():
        path = tmp_path / f"{why}.toml"
        path.write_text(text)
        try:
            pilot.load_plan(path)
        except ValueError as err:
            assert str(path) in str(err), why
        else:
            raise AssertionError(f"a spec with broken {why} was accepted")
