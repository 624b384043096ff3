"""The reward-free-update ablation's table and decision (studies/reward-free-ablation/README.md).

Reads the study's records (final success rate per seed) and each run's ``metrics.jsonl``
(per-update maxima of |policy loss| and of the pre-clip policy gradient norm), counts the runs
that pass the written criterion, and applies the written decision rule::

    python studies/reward_free_ablation.py runs/reward-free-ablation [--out FILE.json]

A run **counts** when its final success rate is at least :data:`SUCCESS` and no minibatch of any
update had |policy loss| > :data:`MAX_LOSS` or a pre-clip gradient norm > :data:`MAX_NORM`. The
rule with the most counting runs wins; ties go to the simplest (:data:`SIMPLICITY`). The
decision is printed once every run of the spec is in, or earlier once it is settled: no result
of the runs left could change it (:func:`settled`).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

#: The written criterion.
SUCCESS = 0.5
MAX_LOSS = 10.0
MAX_NORM = 1e3
#: Ties go to the simplest rule: (b) one rule for every update, then (a), then (c).
SIMPLICITY = ("keep", "skip", "keep-noent")
#: Runs per rule in the spec: 2 tasks x 3 agents x 2 seeds.
RUNS_PER_RULE = 12


def large_minibatch(lines: Iterable[Mapping]) -> bool:
    """Whether any update had a minibatch past the criterion's loss or gradient-norm bound."""
    for row in lines:
        loss, norm = row.get("policy_loss_max"), row.get("policy_grad_norm_max")
        if loss is not None and math.isfinite(loss) and loss > MAX_LOSS:
            return True
        if norm is not None and math.isfinite(norm) and norm > MAX_NORM:
            return True
    return False


def counts(success_rate: float, lines: Iterable[Mapping]) -> bool:
    """The written criterion for one run."""
    return success_rate >= SUCCESS and not large_minibatch(lines)


def decide(counting: Mapping[str, int]) -> str:
    """The rule with the most counting runs; ties to the earliest of :data:`SIMPLICITY`."""
    best = max(counting.values())
    return next(rule for rule in SIMPLICITY if counting.get(rule) == best)


def tally(rows: Iterable[Mapping]) -> tuple[dict[str, int], dict[str, int]]:
    """Per rule: the counting runs and the finished runs among ``rows`` (:func:`collect`'s)."""
    rows = list(rows)
    counting = {rule: sum(r["counts"] for r in rows if r["rule"] == rule) for rule in SIMPLICITY}
    finished = {rule: sum(r["rule"] == rule for r in rows) for rule in SIMPLICITY}
    return counting, finished


def settled(counting: Mapping[str, int], finished: Mapping[str, int]) -> str | None:
    """The rule :func:`decide` will choose whatever the runs not finished yet give, or None.

    A rule is settled when its counting runs so far beat every other rule's best case (all of
    that rule's unfinished runs counting), a tie going to the earlier of :data:`SIMPLICITY`.
    With every run finished this is :func:`decide`.
    """
    best_case = {r: counting.get(r, 0) + RUNS_PER_RULE - finished.get(r, 0) for r in SIMPLICITY}
    for rule in SIMPLICITY:
        mine = counting.get(rule, 0)
        if all(
            mine > best_case[other]
            or (mine == best_case[other] and SIMPLICITY.index(rule) < SIMPLICITY.index(other))
            for other in SIMPLICITY
            if other != rule
        ):
            return rule
    return None


def _rule(run_dir: Path) -> str:
    return run_dir.parent.name.partition("__")[2]


def collect(out: Path) -> list[dict]:
    """One row per finished run: task, agent, rule, seed, success, large minibatch, counts."""
    from agentbench_poad.leaderboard.records import read_record
    from agentbench_poad.rl.run_dir import RunDirectory

    rows = []
    for path in sorted((out / "records").glob("*.json")):
        record = read_record(path)
        success = {s["seed"]: s["success_rate"] for s in record["scores"]["per_seed"]}
        for run in record["training"]["runs"]:
            run_dir = out.parent / run  # records name runs relative to the runs root
            lines = RunDirectory(run_dir).read_metrics()
            seed = int(json.loads((run_dir / "config.json").read_text())["seed"])
            large = large_minibatch(lines)
            rows.append(
                {
                    "task": record["env"]["id"],
                    "agent": run_dir.parent.name.partition("__")[0],
                    "rule": _rule(run_dir),
                    "seed": seed,
                    "success_rate": success[seed],
                    "large_minibatch": large,
                    "max_policy_loss": max(
                        (r["policy_loss_max"] for r in lines if _finite(r.get("policy_loss_max"))),
                        default=None,
                    ),
                    "max_grad_norm": max(
                        (
                            r["policy_grad_norm_max"]
                            for r in lines
                            if _finite(r.get("policy_grad_norm_max"))
                        ),
                        default=None,
                    ),
                    "counts": counts(success[seed], lines),
                }
            )
    return rows


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def table(rows: list[dict]) -> str:
    """The Markdown table of docs/agents.md, "Reward-free updates"."""
    out = [
        "| task | agent | rule | seed | success | max \\|policy loss\\| | max grad norm | counts |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(
        rows, key=lambda r: (r["task"], r["agent"], SIMPLICITY.index(r["rule"]), r["seed"])
    ):
        loss = "--" if r["max_policy_loss"] is None else f"{r['max_policy_loss']:.3g}"
        norm = "--" if r["max_grad_norm"] is None else f"{r['max_grad_norm']:.3g}"
        out.append(
            f"| {r['task'].split('-')[1]} | {r['agent']} | {r['rule']} | {r['seed']} | "
            f"{r['success_rate']:.2f} | {loss} | {norm} | {'yes' if r['counts'] else 'no'} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the study's --out folder")
    parser.add_argument("--out-json", type=Path, help="also write the rows and decision here")
    args = parser.parse_args(argv)
    rows = collect(args.out)
    print(table(rows))
    counting, finished = tally(rows)
    print()
    for rule in SIMPLICITY:
        print(
            f"{rule}: {counting[rule]} counting of {finished[rule]} finished ({RUNS_PER_RULE} planned)"
        )
    complete = all(finished[rule] == RUNS_PER_RULE for rule in SIMPLICITY)
    decision = settled(counting, finished)  # decide(counting) once every run is in
    if decision is None:
        print("decision: not yet (runs missing)")
    elif complete:
        print(f"decision: {decision}")
    else:
        left = sum(RUNS_PER_RULE - finished[rule] for rule in SIMPLICITY)
        print(f"decision: {decision} (settled: no result of the {left} runs left can change it)")
    if args.out_json:
        args.out_json.write_text(
            json.dumps(
                {"rows": rows, "counting": counting, "decision": decision, "complete": complete},
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
