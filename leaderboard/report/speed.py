"""Learning speed: the normalised area under each run's learning curve, judged like final return.

The paper's Figure 3 claim is about speed ("converges faster ... with smaller spread"), which a
final return at its ceiling cannot show. The measure (docs/leaderboard.md, "Learning speed"):

* **the curve** is a run's own sampled evaluation score at every learning-curve point
  (``learning_curve.json``, ``eval_score``: the board's metric, the return on Overcooked and
  VirtualHome, the final program's AUC on DataSciCoding; ``eval_return`` for runs that predate
  it), so group agents, whose training episodes repeat reset seeds, are measured like the
  others, and the anchors (records' scores) are on the same scale;
* **normalised area** ``AUC = Σ_k (s_k − s_{k−1}) · y_k / s_K`` with ``s_0 = 0`` (each point
  stands for the steps before it, a right Riemann sum over the whole budget), then
  ``(AUC − random) / (oracle − random)`` with the env's anchor records (:func:`.common.anchors`);
  1 is an agent that was at the oracle's return from its first point, 0 one that stayed random;
* **steps to threshold**: the first curve point whose normalised return is at least
  :data:`THRESHOLD`; a run that never reaches it is censored (shown as "not reached").

Per-seed areas are compared as per-seed final scores are: IQM with its bootstrap CI, the exact
permutation p over seeds, and the same verdict rule (:func:`.stats.verdict`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from itertools import combinations
from pathlib import Path
from typing import Any, NamedTuple

from agentbench_poad.leaderboard.report.common import (
    Inputs,
    agent_label,
    anchors,
    is_anchor,
    md_table,
    thousands,
)
from agentbench_poad.leaderboard.report.comparison import budget_difference
from agentbench_poad.leaderboard.report.stats import (
    iqm_difference,
    iqm_estimate,
    p_text,
    permutation_p,
    verdict,
)

#: The normalised return a run must reach for "steps to threshold" (half way from random to
#: the oracle).
THRESHOLD = 0.5

#: The curve's key in a run's ``learning_curve.json`` (the board's metric), and the key runs
#: written before it existed hold the same number under.
CURVE_KEY = "eval_score"
_OLD_CURVE_KEY = "eval_return"


class SeedSpeed(NamedTuple):
    """One run's speed: its normalised area and the first step at the threshold (None: never)."""

    seed: int
    area: float
    steps_to_threshold: float | None


def normalised_area(
    points: Sequence[tuple[float, float]], random_score: float, oracle_score: float
) -> float:
    """The normalised area under a curve of ``(env_steps, return)`` points (module docstring).

    Raises:
        ValueError: no point, steps not increasing from above 0, or anchors that coincide.
    """
    if not points:
        raise ValueError("a learning curve needs at least one point")
    span = oracle_score - random_score
    if abs(span) < 1e-12:
        raise ValueError("the random and oracle anchors coincide: nothing to normalise by")
    previous, area = 0.0, 0.0
    for step, value in points:
        if not step > previous:
            raise ValueError(f"curve steps must increase from above 0, got {step} after {previous}")
        area += (step - previous) * value
        previous = step
    return (area / previous - random_score) / span


def steps_to_threshold(
    points: Sequence[tuple[float, float]],
    random_score: float,
    oracle_score: float,
    threshold: float = THRESHOLD,
) -> float | None:
    """The first step whose normalised return is at least ``threshold`` (None: never)."""
    span = oracle_score - random_score
    for step, value in points:
        if (value - random_score) / span >= threshold:
            return float(step)
    return None


def run_curve(run_dir: Path, budget: int | None = None) -> list[tuple[float, float]]:
    """A run's ``(env_steps, eval_score)`` points in step order (within ``budget``)."""
    path = Path(run_dir) / "learning_curve.json"
    points = json.loads(path.read_text(encoding="utf-8"))
    curve = sorted(
        (float(p["env_steps"]), float(p[CURVE_KEY] if CURVE_KEY in p else p[_OLD_CURVE_KEY]))
        for p in points
    )
    if budget is not None:
        curve = [(s, v) for s, v in curve if s <= budget]
    if not all(math.isfinite(v) for _, v in curve):
        raise ValueError(f"{path}: a learning-curve return is not finite")
    return curve


def record_speeds(record: dict[str, Any], records: Sequence[dict[str, Any]]) -> list[SeedSpeed]:
    """Per seed, the speed of a trained record's runs (empty: no runs, curves or anchors)."""
    from agentbench_poad.leaderboard.runs import RunsNotFound, resolve_run

    training = record.get("training") or {}
    runs = training.get("runs") or []
    found = anchors(record, records)
    if not runs or found.random is None or found.top is None:
        return []
    out = []
    for run in runs:
        try:
            run_dir = resolve_run(run)
        except RunsNotFound:  # an outside trainer's adapter, or runs kept elsewhere
            return []
        if not (run_dir / "learning_curve.json").exists():
            return []
        config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
        curve = run_curve(run_dir, training.get("total_steps"))
        if not curve:
            return []
        out.append(
            SeedSpeed(
                int(config["seed"]),
                normalised_area(curve, found.random, found.top),
                steps_to_threshold(curve, found.random, found.top),
            )
        )
    return sorted(out)


def _trained(inputs: Inputs, env_id: str) -> list[tuple[dict[str, Any], list[SeedSpeed]]]:
    found = []
    for r in sorted(inputs.by_env.get(env_id, []), key=agent_label):
        if is_anchor(r) or not (r.get("training") or {}).get("runs"):
            continue
        speeds = record_speeds(r, inputs.records)
        if speeds:
            found.append((r, speeds))
    return found


def _threshold_cell(speeds: Sequence[SeedSpeed]) -> str:
    reached = sorted(s.steps_to_threshold for s in speeds if s.steps_to_threshold is not None)
    if not reached:
        return f"not reached (0/{len(speeds)})"
    median = (
        reached[len(reached) // 2]
        if len(reached) % 2
        else sum(reached[len(reached) // 2 - 1 : len(reached) // 2 + 1]) / 2
    )
    return f"{thousands(median)} ({len(reached)}/{len(speeds)} reached)"


def _estimate_cell(values: Sequence[float]) -> str:
    e = iqm_estimate(values)
    if e.low is None:
        return f"{e.point:.3f}"
    return f"{e.point:.3f} [{e.low:.3f}, {e.high:.3f}]"


def speed_table(inputs: Inputs, env_id: str) -> str:
    """Each trained agent's normalised area under its runs' curves and steps to threshold."""
    rows = []
    for record, speeds in _trained(inputs, env_id):
        areas = [s.area for s in speeds]
        rows.append(
            (
                agent_label(record),
                str(len(speeds)),
                _estimate_cell(areas),
                _threshold_cell(speeds),
            )
        )
    if not rows:
        return f"(no trained record on {env_id} has runs with learning curves and anchors)"
    return md_table(
        (
            "agent",
            "seeds",
            "normalised area IQM [95% CI]",
            f"steps to {THRESHOLD:g} normalised (median)",
        ),
        rows,
    )


def speed_pairs_table(inputs: Inputs, env_id: str) -> str:
    """Every pair of trained agents on ``env_id``: the IQM difference of their normalised areas
    with its CI, the exact permutation p over seeds and the verdict by the board's rule."""
    trained = _trained(inputs, env_id)
    rows = []
    for (a, sa), (b, sb) in combinations(trained, 2):
        apart = budget_difference(a, b)
        if apart is not None:
            rows.append((agent_label(a), agent_label(b), "--", "--", f"not compared: {apart}"))
            continue
        x, y = [s.area for s in sa], [s.area for s in sb]
        diff = iqm_difference(x, y)
        p = permutation_p(x, y)
        cell = f"{diff.point:+.3f}" + (
            "" if diff.low is None else f" [{diff.low:+.3f}, {diff.high:+.3f}]"
        )
        rows.append(
            (
                agent_label(a),
                agent_label(b),
                cell,
                p_text(p),
                verdict(diff, p, higher="A faster", lower="B faster"),
            )
        )
    if not rows:
        return f"(fewer than two trained records on {env_id} have learning curves)"
    return md_table(("A", "B", "area IQM difference A − B [95% CI]", "exact p", "verdict"), rows)


__all__ = [
    "CURVE_KEY",
    "THRESHOLD",
    "SeedSpeed",
    "normalised_area",
    "record_speeds",
    "run_curve",
    "speed_pairs_table",
    "speed_table",
    "steps_to_threshold",
]
