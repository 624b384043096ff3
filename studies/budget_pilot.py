"""The budget pilot's decision (studies/budget-pilot/README.md): one budget per task.

Reads the pilot's records (final success rate per seed, 20 sampled episodes) and, for Food
Preparation's 1x budget, the reward-free ablation's runs under the rule it chose, then applies
the written rule: the smallest of 1x, 2x, 4x today's budget at which some agent's two tuning
runs both reach :data:`SUCCESS`::

    python studies/budget_pilot.py runs/budget-pilot --ablation runs/reward-free-ablation

Per task it prints the chosen budget, that none passed up to 4x, or the group to run next.
The plan (tasks, today's budgets, multipliers, agents and seeds) is read from the pilot's spec,
``studies/budget-pilot/pilot.toml`` (:func:`load_plan`), so the decision cannot drift from the
runs the spec asks for.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

import tomllib

#: The written criterion: a budget passes when some agent's runs all reach this success rate.
SUCCESS = 0.5
#: The pilot's spec: the runs the decision reads.
SPEC = Path(__file__).resolve().parent / "budget-pilot" / "pilot.toml"
#: Food Preparation's 1x budget is run by the reward-free ablation, not by the pilot's spec.
FOOD_PREPARATION = "VirtualHome-FoodPreparation-v0"


class Plan(NamedTuple):
    """What the pilot's spec asks for: every task's budgets and the runs of each."""

    base_steps: dict[str, int]  # today's (1x) budget per task
    multipliers: tuple[int, ...]  # budgets tried, smallest first (1x always)
    agents: tuple[str, ...]
    seeds: tuple[int, ...]
    group_prefix: dict[str, str]  # ``--group <prefix>-<N>x`` per task


def load_plan(spec: Path = SPEC) -> Plan:
    """Read the plan from the pilot's spec; raise ``ValueError`` where it breaks the protocol.

    Each group is ``<prefix>-<N>x/<part>`` labelled ``"<N>x"`` with ``total_steps`` = N times
    the task's 1x budget, and every budget of every task runs the same agents and seeds (the
    rule compares one agent's seeds across budgets).
    """
    data = tomllib.loads(spec.read_text())
    base = {task: int(steps) for task, steps in data["study"]["total_steps"].items()}
    multipliers, agents, seeds, prefix = {1}, {}, set(), {}  # agents: in the spec's order
    runs: dict[tuple[str, int], set] = {}
    for group in data.get("group", []):
        name = group["name"]
        for task in group["envs"]:
            if task not in base:
                raise ValueError(f"{spec}: group {name!r} trains {task}, which has no 1x budget")
            steps = int(group.get("total_steps", base[task]))
            multiplier, rest = divmod(steps, base[task])
            if rest or group.get("label") != f"{multiplier}x":
                raise ValueError(
                    f"{spec}: group {name!r}: {steps} steps is not the {group.get('label')} "
                    f"of {task}'s {base[task]} (label groups '<N>x' with N x the 1x budget)"
                )
            head = name.split("/")[0]
            if head != f"{head.rsplit('-', 1)[0]}-{multiplier}x":
                raise ValueError(f"{spec}: group {name!r} is not named '<task>-{multiplier}x/...'")
            prefix[task] = head.rsplit("-", 1)[0]
            multipliers.add(multiplier)
            agents.update(dict.fromkeys(group["agents"]))
            seeds.update(group["seeds"])
            runs.setdefault((task, multiplier), set()).update(
                (agent, seed) for agent in group["agents"] for seed in group["seeds"]
            )
    full = {(agent, seed) for agent in agents for seed in seeds}
    for (task, multiplier), have in sorted(runs.items()):
        if have != full:
            raise ValueError(
                f"{spec}: {task} at {multiplier}x runs {sorted(have)}, not every agent x seed"
            )
    missing = set(base) - set(prefix)
    if missing:
        raise ValueError(f"{spec}: no group trains {sorted(missing)}")
    return Plan(
        base_steps=base,
        multipliers=tuple(sorted(multipliers)),
        agents=tuple(agents),
        seeds=tuple(sorted(seeds)),
        group_prefix=prefix,
    )


PLAN = load_plan()
#: Today's (1x) budgets and the multipliers tried, smallest first (from the spec).
BASE_STEPS = PLAN.base_steps
MULTIPLIERS = PLAN.multipliers
AGENTS = PLAN.agents
SEEDS = PLAN.seeds
#: The spec's group prefix of each task (``--group <prefix>-<N>x``).
GROUP_PREFIX = PLAN.group_prefix


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
