"""Do PPO updates whose batch held no reward move the policy as much as rewarding ones?

On a sparse-reward task (VirtualHome: +1 on completion, nothing else) most training batches of a
small model hold no reward at all. With advantages normalised per minibatch (the reference's rule,
docs/reference.md#deviation-advantage-normalisation) such a batch's advantages are the critic's noise rescaled to unit variance,
so PPO still takes a full step. This script reads training runs' ``metrics.jsonl`` and compares,
per run, the updates whose batch reward is exactly zero with the others: how many there are, their
mean approximate KL between the sampling and the updated policy, their median policy gradient
norm (before clipping; the token-level agents' norm spikes to 1e4-1e7 on a few updates, which
would decide a mean), how many policy steps PPO took and how many minibatches the ``target_kl``
guard skipped (the guard bounds the KL of every update, so the steps taken matter as much as the
KL), and the entropy at the first and the last update. Per run it also counts the runaway
updates, those whose pre-clip policy gradient norm exceeds ``RUNAWAY_GRAD_NORM``, and gives the
largest policy loss: with advantages normalised per minibatch, a loss in the thousands can only
be ``-ρÂ`` with a negative advantage and a ratio ``ρ`` far above ``1 + ε``, the one term the
clipped objective leaves unbounded. It measures; it does not establish cause (that needs an
ablation). Example::

    python studies/update_stats.py \\
        runs/smollm2-cpu/runs/VirtualHome-FoodPreparation-v0/{poad,ntpo,twosome}/seed{0,1,2} \\
        --out studies/probes/update-stats-foodprep.json

A batch "holds reward" when its ``reward_mean`` is not zero, so the split is only meaningful on
tasks without a per-step reward (Overcooked charges -0.001 every step).
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

#: The statistics per group of updates, and how each is summarised over the group's updates.
STATISTICS = {
    "approx_kl": "mean",
    "policy_grad_norm": "median",
    "policy_steps": "mean",
    "skipped_kl": "mean",
}
#: A pre-clip policy gradient norm above this (200 times the preset's clip of 0.5) marks an update
#: as runaway: its step is still bounded by the clip, but its direction is set by a few tokens.
RUNAWAY_GRAD_NORM = 100.0
#: The names newer runs log these under (issue 27: ``policy_steps_taken``/``_skipped``).
_RENAMED = {"policy_steps": "policy_steps_taken", "skipped_kl": "policy_steps_skipped"}


def read_metrics(run_dir: Path) -> list[dict]:
    """The update lines of ``run_dir/metrics.jsonl`` (see :meth:`RunDirectory.read_metrics`)."""
    from agentbench_poad.rl.run_dir import RunDirectory

    return RunDirectory(run_dir).read_metrics()


def _summary(values: list[float], how: str) -> float | None:
    """The mean or median of the finite ``values``; None without any."""
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return None
    return statistics.median(values) if how == "median" else sum(values) / len(values)


def summarise(lines: list[dict]) -> dict:
    """Per-group statistics of one run's update lines (see the module docstring)."""
    groups = {"zero_reward": [], "reward": []}
    for row in lines:
        groups["reward" if row.get("reward_mean") else "zero_reward"].append(row)
    summary = {"updates": len(lines)}
    for name, rows in groups.items():
        summary[name] = {"updates": len(rows)}
        for key, how in STATISTICS.items():
            summary[name][key] = _summary(
                [row[key] if key in row else row.get(_RENAMED.get(key, key)) for row in rows], how
            )
    entropies = [row["entropy"] for row in lines if row.get("entropy") is not None]
    summary["runaway_updates"] = sum(
        1 for row in lines if (row.get("policy_grad_norm") or 0.0) > RUNAWAY_GRAD_NORM
    )
    losses = [row["policy_loss"] for row in lines if row.get("policy_loss") is not None]
    summary["max_policy_loss"] = max(losses) if losses else None
    summary["max_abs_policy_loss"] = max(abs(x) for x in losses) if losses else None
    summary["entropy_first"] = entropies[0] if entropies else None
    summary["entropy_last"] = entropies[-1] if entropies else None
    summary["large_updates"] = sum(1 for row in lines if is_large_update(row))
    summary["reward_free_entropy_drift"] = reward_free_entropy_drift(lines)
    returns = [r["episode_return_mean"] for r in lines if r.get("episode_return_mean") is not None]
    summary["return_last4"] = sum(returns[-4:]) / len(returns[-4:]) if returns else None
    return summary


#: Issue 44's definition of a runaway update: |policy loss| above this ...
LARGE_POLICY_LOSS = 1.0
#: ... or a pre-clip policy gradient norm above this.
LARGE_GRAD_NORM = 1e3


def is_large_update(row: dict) -> bool:
    """|policy loss| > LARGE_POLICY_LOSS or pre-clip policy gradient norm > LARGE_GRAD_NORM."""
    loss, norm = row.get("policy_loss"), row.get("policy_grad_norm")
    return (loss is not None and abs(loss) > LARGE_POLICY_LOSS) or (
        norm is not None and norm > LARGE_GRAD_NORM
    )


def _reward_free(row: dict) -> bool:
    """The update's batch held no reward signal: the logged ``signal_free`` flag (runs from the
    stable-updates code on), else a batch reward of exactly zero (older runs)."""
    if row.get("signal_free") is not None:
        return bool(row["signal_free"])
    return not row.get("reward_mean")


def reward_free_entropy_drift(lines: list[dict]) -> float:
    """Sum over reward-free updates ``u`` of ``H(u+1) − H(u)``: how far updates without a reward
    signal moved the policy's entropy. An update that took no policy step (``policy_steps_taken``
    0, e.g. skipped for lack of signal) left the policy exactly as it was: it adds 0. Pairs
    without both entropies logged add nothing."""
    drift = 0.0
    for row, after in zip(lines, lines[1:]):
        if not _reward_free(row) or row.get("policy_steps_taken") == 0:
            continue
        before_h, after_h = row.get("entropy"), after.get("entropy")
        if before_h is not None and after_h is not None:
            drift += after_h - before_h
    return drift


def ablation_table(root: Path) -> list[dict]:
    """One row per run under ``root/<rule>/``: rule, env, agent, seed and its summary."""
    rows = []
    for metrics in sorted(root.glob("*/runs/*/*/seed*/metrics.jsonl")):
        run = metrics.parent
        rule = metrics.relative_to(root).parts[0]
        lines = read_metrics(run)
        summary = summarise(lines)
        rows.append(
            {
                "rule": rule,
                "env": run.parent.parent.name,
                "agent": run.parent.name,
                "seed": run.name,
                "updates": summary["updates"],
                "reward_free_updates": sum(1 for r in lines if _reward_free(r)),
                "large_updates": summary["large_updates"],
                "max_abs_policy_loss": summary["max_abs_policy_loss"],
                "reward_free_entropy_drift": summary["reward_free_entropy_drift"],
                "entropy_first": summary["entropy_first"],
                "entropy_last": summary["entropy_last"],
                "return_last4": summary["return_last4"],
            }
        )
    return rows


def _fmt(value: float | None) -> str:
    return "   n/a" if value is None else f"{value:6.3f}"


#: The ablation's decision rule (studies/stable-updates-ablation/README.md, written before any
#: run): fewest large updates over agents and tasks, then the smallest summed absolute entropy
#: drift over reward-free updates; a rule whose Tomato Salad training return falls below the
#: "before" rule's by more than this for any agent is not chosen.
RETURN_MARGIN = 0.2


def ablation_decision(rows: list[dict], task: str = "Overcooked-TomatoSalad-v0") -> dict:
    """Per rule: large updates, summed |drift|, whether it keeps Tomato Salad's return; and the
    chosen rule (None when no rule other than "before" qualifies)."""
    rules: dict[str, dict] = {}
    for r in rows:
        entry = rules.setdefault(r["rule"], {"large_updates": 0, "abs_drift": 0.0, "returns": {}})
        entry["large_updates"] += r["large_updates"]
        entry["abs_drift"] += abs(r["reward_free_entropy_drift"])
        if r["env"] == task:
            entry["returns"][r["agent"]] = r["return_last4"]
    before = rules.get("before", {}).get("returns", {})
    for entry in rules.values():
        entry["keeps_return"] = all(
            agent in entry["returns"]
            and entry["returns"][agent] is not None
            and value is not None
            and entry["returns"][agent] >= value - RETURN_MARGIN
            for agent, value in before.items()
        )
    candidates = [name for name, e in rules.items() if name != "before" and e["keeps_return"]]
    chosen = min(
        candidates,
        key=lambda n: (rules[n]["large_updates"], rules[n]["abs_drift"]),
        default=None,
    )
    return {"rules": rules, "chosen": chosen}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, help="training run directories")
    parser.add_argument("--out", type=Path, help="write the statistics as JSON")
    parser.add_argument(
        "--ablation",
        type=Path,
        help="a folder of study outputs, one per rule (runs/stable-updates-ablation): print the "
        "ablation table (large updates, entropy drift over reward-free updates, return)",
    )
    args = parser.parse_args(argv)
    if args.ablation is not None:
        rows = ablation_table(args.ablation)
        print("rule | env | agent | updates (reward-free) | large | max |loss| | drift | return")
        for r in rows:
            print(
                f"{r['rule']} | {r['env']} | {r['agent']} | {r['updates']} "
                f"({r['reward_free_updates']}) | {r['large_updates']} | "
                f"{_fmt(r['max_abs_policy_loss'])} | {r['reward_free_entropy_drift']:+.3f} | "
                f"{_fmt(r['return_last4'])}"
            )
        decision = ablation_decision(rows)
        for name, e in sorted(decision["rules"].items()):
            print(
                f"rule {name}: {e['large_updates']} large updates, summed |drift| "
                f"{e['abs_drift']:.3f}, Tomato Salad return kept: {e['keeps_return']}"
            )
        print(f"chosen by the decision rule: {decision['chosen']}")
        if args.out:
            from agentbench_poad.rl.run_dir import write_json

            write_json(
                args.out,
                {
                    "large_policy_loss": LARGE_POLICY_LOSS,
                    "large_grad_norm": LARGE_GRAD_NORM,
                    "runs": rows,
                    "decision": decision,
                },
            )
        return 0
    if not args.runs:
        parser.error("give run directories, or --ablation FOLDER")

    result = {"statistics": STATISTICS, "runaway_grad_norm": RUNAWAY_GRAD_NORM, "runs": []}
    print(
        "run | updates zero/reward | approx_kl zero/reward | median grad norm zero/reward | "
        "steps taken zero/reward | skipped zero/reward | runaway | max loss | entropy"
    )
    for run_dir in args.runs:
        try:
            summary = summarise(read_metrics(run_dir))
        except FileNotFoundError as error:
            parser.error(str(error))
        result["runs"].append({"run": str(run_dir), **summary})
        zero, reward = summary["zero_reward"], summary["reward"]
        print(
            f"{run_dir} | {zero['updates']}/{reward['updates']} | "
            f"{_fmt(zero['approx_kl'])}/{_fmt(reward['approx_kl'])} | "
            f"{_fmt(zero['policy_grad_norm'])}/{_fmt(reward['policy_grad_norm'])} | "
            f"{_fmt(zero['policy_steps'])}/{_fmt(reward['policy_steps'])} | "
            f"{_fmt(zero['skipped_kl'])}/{_fmt(reward['skipped_kl'])} | "
            f"{summary['runaway_updates']} | {_fmt(summary['max_policy_loss'])} | "
            f"{_fmt(summary['entropy_first'])} -> {_fmt(summary['entropy_last'])}",
            flush=True,
        )
    if args.out:
        from agentbench_poad.rl.run_dir import write_json

        write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
