"""The budget pilot's decision (studies/budget-pilot/README.md): one budget per task.

Reads the pilot's records (final success rate per seed, 20 sampled episodes) and, for Food
Preparation's 1x budget, the reward-free ablation's runs under the rule it chose, then applies
the written rule: the smallest of 1x, 2x, 4x today's budget at which some agent's two tuning
runs both reach :data:`SUCCESS`::

    python studies/budget_pilot.py runs/budget-pilot --ablation runs/reward-free-ablation

Per task it prints the chosen budget, that none passed up to 4x, or the group to run next.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

#: The written criterion: a budget passes when some agent's runs all reach this success rate.
SUCCESS = 0.5
#: Today's (1x) budgets and the multipliers tried, smallest first.
BASE_STEPS = {
    "VirtualHome-FoodPreparation-v0": 12288,
    "Overcooked-TomatoLettuceSalad-v0": 6144,
}
MULTIPLIERS = (1, 2, 4)
AGENTS = ("poad", "ntpo", "grpo")
SEEDS = (1000, 1001)
#: The spec's group prefix of each task (``--group <prefix>-<N>x``).
GROUP_PREFIX = {
    "VirtualHome-FoodPreparation-v0": "foodprep",
    "Overcooked-TomatoLettuceSalad-v0": "tomato-lettuce",
}
FOOD_PREPARATION = "VirtualHome-FoodPreparation-v0"


def passing_agents(rows: Iterable[Mapping]) -> list[str]:
    """The agents whose every planned seed has a run at >= :data:`SUCCESS` (rows of one budget)."""
    success = {(r["agent"], r["seed"]): r["success_rate"] for r in rows}
    return [
        agent
        for agent in AGENTS
        if all(success.get((agent, seed), -1.0) >= SUCCESS for seed in SEEDS)
    ]


def complete(rows: Iterable[Mapping]) -> bool:
    """Whether every planned (agent, seed) run of one budget is in."""
    have = {(r["agent"], r["seed"]) for r in rows}
    return all((agent, seed) in have for agent in AGENTS for seed in SEEDS)


def decide(by_multiplier: Mapping[int, list[Mapping]]) -> tuple[str, int | None]:
    """``("chosen", m)``, ``("pending", m)`` (run budget m next) or ``("none", None)``.

    Budgets are read smallest first: the first one that passes is chosen; one that neither
    passes nor has all its runs in is where the pilot waits; when every budget has all its runs
    in and none passed, no budget up to the largest is in the learnable band.
    """
    for multiplier in MULTIPLIERS:
        rows = by_multiplier.get(multiplier, [])
        if passing_agents(rows):
            return "chosen", multiplier
        if not complete(rows):
            return "pending", multiplier
    return "none", None


def _sibling(name: str):
    """A script of this folder, loaded from its file (this one may be loaded the same way)."""
    path = Path(__file__).resolve().with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def collect(out: Path, ablation: Path | None) -> tuple[dict, str | None]:
    """Rows per task and multiplier; Food Preparation's 1x from the ablation's chosen rule.

    Returns the rows and the ablation's decision (None until it is settled: its runs then stand
    for no budget).
    """
    reward_free = _sibling("reward_free_ablation")
    rows: dict[str, dict[int, list[dict]]] = {task: {} for task in BASE_STEPS}
    if (out / "records").is_dir():
        for row in reward_free.collect(out):
            label = row["rule"]  # the pilot's group label, "<N>x"
            if row["task"] in rows and label.endswith("x") and label[:-1].isdigit():
                rows[row["task"]].setdefault(int(label[:-1]), []).append(row)
    rule = None
    if ablation is not None and (ablation / "records").is_dir():
        ablation_rows = reward_free.collect(ablation)
        # None until no run left can change it
        rule = reward_free.settled(*reward_free.tally(ablation_rows))
        if rule is not None:
            rows[FOOD_PREPARATION][1] = [
                row
                for row in ablation_rows
                if row["task"] == FOOD_PREPARATION and row["rule"] == rule
            ]
    return rows, rule


def report(rows: Mapping[str, Mapping[int, list[Mapping]]], rule: str | None) -> list[dict]:
    """One verdict per task, printed and returned."""
    print(f"update rule (the reward-free ablation's decision): {rule or 'not yet decided'}")
    verdicts = []
    for task, by_multiplier in rows.items():
        for multiplier in MULTIPLIERS:
            for row in sorted(
                by_multiplier.get(multiplier, []), key=lambda r: (r["agent"], r["seed"])
            ):
                print(
                    f"  {task} {multiplier}x {row['agent']} seed {row['seed']}: "
                    f"{row['success_rate']:.2f}"
                )
        status, multiplier = decide(by_multiplier)
        if task == FOOD_PREPARATION and rule is None and status == "pending" and multiplier == 1:
            line = "waits for the reward-free ablation (its runs are the 1x pilot)"
        elif status == "chosen":
            line = f"budget {BASE_STEPS[task] * multiplier:,} steps ({multiplier}x)"
        elif status == "pending":
            line = f"run --group {GROUP_PREFIX[task]}-{multiplier}x next"
        else:
            line = f"no budget up to {MULTIPLIERS[-1]}x passes"
        print(f"{task}: {line}")
        verdicts.append({"task": task, "status": status, "multiplier": multiplier, "line": line})
    return verdicts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the pilot study's --out folder")
    parser.add_argument(
        "--ablation",
        type=Path,
        help="the reward-free ablation's --out folder (Food Preparation 1x)",
    )
    parser.add_argument("--out-json", type=Path, help="also write the verdicts here")
    args = parser.parse_args(argv)
    rows, rule = collect(args.out, args.ablation)
    verdicts = report(rows, rule)
    if args.out_json:
        args.out_json.write_text(json.dumps({"rule": rule, "verdicts": verdicts}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
