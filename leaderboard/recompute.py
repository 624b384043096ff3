"""Every number of a record that is derived from something else, recomputed and compared.

A record stores its episodes; everything the board shows is derived from them (or, for the
learning curve and training wall time, from the training runs the record names):

* each seed's ``score``, ``mean_return``, ``mean_discounted_return``, ``success_rate`` and
  ``failed_episodes`` from its episodes (and, for the ``return`` metric, each episode's
  ``score`` equals its ``return``);
* ``scores.mean`` / ``stderr`` / ``success_rate`` / ``success_rate_stderr`` over the seeds
  (:func:`agentbench_poad.leaderboard.records.mean_stderr`: sample standard deviation / sqrt(n),
  0 for one seed), and ``scores.mean_discounted_return`` / ``discounted_return_stderr`` (the
  discounted return of the paper's Table 1, beside the undiscounted score; null when an episode
  logs none);
* the protocol's seeds and episode counts, and each episode's reset seed by the protocol's rule;
* ``training.wall_time_s`` = the sum of ``training.run_wall_time_s`` (seeds whose time is known);
* the learning curve: each point from the runs' ``learning_curve.json`` files when the runs are
  at hand (:func:`agentbench_poad.leaderboard.curves.combine_curves`), else its band
  (``low <= mean <= high``, symmetric).

:func:`check_derived` raises :class:`DerivedMismatch` naming the first field that differs, with
the stored and the recomputed value. What records store as their discounted summary,
:func:`~agentbench_poad.leaderboard.records.discounted_summary`, lives beside ``mean_stderr`` in
the records module (and is importable from here too).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentbench_poad.leaderboard.curves import combine_curves, read_learning_curve
from agentbench_poad.leaderboard.records import (
    discounted_summary,
    mean_stderr,
    seed_discounted_mean,
)
from agentbench_poad.leaderboard.schema import RecordError

#: Relative / absolute tolerance of a recomputed float (the same sums in another order).
REL_TOL = 1e-9
ABS_TOL = 1e-12


class DerivedMismatch(RecordError):
    """A stored number differs from its value recomputed from the episodes (or runs)."""


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    return math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=ABS_TOL)


def _fail(rid: str, field: str, stored: Any, recomputed: Any, source: str) -> DerivedMismatch:
    return DerivedMismatch(
        f"{rid}: {field} is {stored!r} but {source} give {recomputed!r}; the record was edited "
        "after it was made (or is corrupt) -- re-create it, do not edit its numbers"
    )


def check_derived(record: Mapping[str, Any], *, run_dirs: Mapping[str, Path] | None = None) -> int:
    """Recompute every derived number of ``record`` and compare (see the module doc).

    Args:
        record: a validated record.
        run_dirs: ``{seed: run folder}`` of a trained agent's runs (resolved), to recompute the
            learning curve from; without them the curve's bands are checked for consistency.

    Returns:
        How many numbers were compared.

    Raises:
        DerivedMismatch: naming the first field that differs.
    """
    from agentbench_poad.evaluation import reset_seed

    rid = record.get("record_id", "record")
    scores, protocol = record["scores"], record["protocol"]
    per_seed = scores["per_seed"]
    checked = 0

    def compare(field: str, stored: Any, recomputed: Any, source: str = "the episodes") -> None:
        nonlocal checked
        checked += 1
        if not _same(stored, recomputed):
            raise _fail(rid, field, stored, recomputed, source)

    seeds = [int(s["seed"]) for s in per_seed]
    if list(protocol["seeds"]) != seeds:
        raise _fail(rid, "protocol.seeds", protocol["seeds"], seeds, "scores.per_seed")
    if scores["metric"] != protocol["metric"]:
        raise _fail(rid, "scores.metric", scores["metric"], protocol["metric"], "protocol.metric")
    n_episodes = int(protocol["episodes_per_seed"])
    for i, seed in enumerate(per_seed):
        where = f"scores.per_seed[{i}]"
        episodes = seed["episodes"]
        if len(episodes) != n_episodes:
            raise _fail(
                rid,
                f"{where}.episodes (count)",
                len(episodes),
                n_episodes,
                "protocol.episodes_per_seed",
            )
        for j, episode in enumerate(episodes):
            if episode["index"] != j:
                raise _fail(
                    rid, f"{where}.episodes[{j}].index", episode["index"], j, "the episode order"
                )
            expected = reset_seed(int(seed["seed"]), j)
            if episode["reset_seed"] != expected:
                raise _fail(
                    rid,
                    f"{where}.episodes[{j}].reset_seed",
                    episode["reset_seed"],
                    expected,
                    "the protocol's reset-seed rule",
                )
            if scores["metric"] == "return" and "score" in episode:
                compare(
                    f"{where}.episodes[{j}].score",
                    episode["score"],
                    episode["return"],
                    "the episode's return (metric 'return')",
                )
        compare(
            f"{where}.score", seed["score"], _mean([e.get("score", e["return"]) for e in episodes])
        )
        compare(f"{where}.mean_return", seed["mean_return"], _mean([e["return"] for e in episodes]))
        compare(
            f"{where}.success_rate",
            seed["success_rate"],
            _mean([float(e["success"]) for e in episodes]),
        )
        if "failed_episodes" in seed:
            compare(
                f"{where}.failed_episodes",
                seed["failed_episodes"],
                sum(bool(e["failed"]) for e in episodes),
            )
        if "mean_discounted_return" in seed:
            compare(
                f"{where}.mean_discounted_return",
                seed["mean_discounted_return"],
                seed_discounted_mean(episodes),
            )
    mean, se = mean_stderr([s["score"] for s in per_seed])
    sr, sr_se = mean_stderr([s["success_rate"] for s in per_seed])
    compare("scores.mean", scores["mean"], mean, "the seeds' scores")
    compare("scores.stderr", scores["stderr"], se, "the seeds' scores")
    compare("scores.success_rate", scores["success_rate"], sr, "the seeds' success rates")
    compare(
        "scores.success_rate_stderr",
        scores["success_rate_stderr"],
        sr_se,
        "the seeds' success rates",
    )
    discounted = discounted_summary(per_seed)
    for key, value in discounted.items():
        if key in scores:
            compare(f"scores.{key}", scores[key], value, "the episodes' discounted returns")
    checked += _check_training(record, compare)
    checked += _check_curve(record, run_dirs, compare)
    return checked


def _check_training(record: Mapping[str, Any], compare: Any) -> int:
    training = record.get("training") or {}
    walls = training.get("run_wall_time_s")
    if not isinstance(walls, dict) or "wall_time_s" not in training:
        return 0
    known = [float(w) for w in walls.values() if w is not None]
    compare(
        "training.wall_time_s",
        training["wall_time_s"],
        float(sum(known)) if known else None,
        "the runs' wall times (training.run_wall_time_s)",
    )
    return 1


def _check_curve(
    record: Mapping[str, Any], run_dirs: Mapping[str, Path] | None, compare: Any
) -> int:
    curve = record.get("learning_curve")
    if not curve:
        return 0
    points = curve["points"]
    if run_dirs:
        ordered = [run_dirs[str(s)] for s in sorted(run_dirs, key=int)]
        recomputed = combine_curves([read_learning_curve(r) for r in ordered], y=curve["y"])
        expected = (recomputed or {}).get("points", [])
        source = "the runs' learning_curve.json files"
        if len(expected) != len(points):
            compare("learning_curve.points (count)", len(points), len(expected), source)
        for k, (point, want) in enumerate(zip(points, expected)):
            for key in ("step", "mean", "low", "high", "n"):
                if key in point:
                    compare(f"learning_curve.points[{k}].{key}", point[key], want[key], source)
        return 0  # counted by compare
    for k, point in enumerate(points):
        if "low" in point and "high" in point:
            compare(
                f"learning_curve.points[{k}].high - mean",
                point["high"] - point["mean"],
                point["mean"] - point["low"],
                "the point's band (mean +- standard error)",
            )
    return 0
