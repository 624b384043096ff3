"""Learning curves of training runs: each run's points, and their mean over runs.

:func:`read_learning_curve` reads one run's ``(env steps, evaluation return)`` points (its
``learning_curve.json``, else the ``eval_return`` entries of ``metrics.jsonl``);
:func:`combine_curves` averages several runs' curves into a record's ``learning_curve`` (mean with
a standard-error band). :mod:`~agentbench_poad.leaderboard.from_run` builds records with them and
:mod:`~agentbench_poad.leaderboard.recompute` recomputes a stored curve from the runs with the
same code.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentbench_poad.leaderboard.records import mean_stderr

__all__ = [
    "CURVE_X_GRID",
    "CURVE_X_MEAN_STEP",
    "combine_curves",
    "read_learning_curve",
]


def _pairs_from(data: Any) -> list[tuple[float, float]]:
    """(step, value) pairs from the shapes a learning curve file may take."""
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list)]
        if len(lists) >= 2:
            steps = data.get("env_steps", data.get("steps", lists[0]))
            values = data.get("eval_return", data.get("returns", data.get("values", lists[1])))
            return [(float(s), float(v)) for s, v in zip(steps, values) if v is not None]
        for key in ("points", "curve"):
            if isinstance(data.get(key), list):
                return _pairs_from(data[key])
        try:
            return sorted((float(k), float(v)) for k, v in data.items() if v is not None)
        except (TypeError, ValueError):
            return []
    if isinstance(data, list):
        pairs = []
        for item in data:
            if isinstance(item, (list, tuple)) and len(item) >= 2:
                pairs.append((float(item[0]), float(item[1])))
            elif isinstance(item, dict):
                step = item.get("env_steps", item.get("step"))
                value = item.get("eval_return", item.get("return", item.get("value")))
                if step is not None and value is not None:
                    pairs.append((float(step), float(value)))
        return pairs
    return []


def read_learning_curve(run_dir: Path) -> list[tuple[float, float]]:
    """The run's (env_steps, greedy eval return) points; falls back to metrics.jsonl."""
    run_dir = Path(run_dir)
    path = run_dir / "learning_curve.json"
    if path.exists():
        try:
            pairs = _pairs_from(json.loads(path.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, TypeError, ValueError):
            pairs = []
        if pairs:
            return sorted(pairs)
    metrics = run_dir / "metrics.jsonl"
    pairs = []
    if metrics.exists():
        for line in metrics.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            value = row.get("eval_return", row.get("episode_return_mean"))
            if value is not None and row.get("env_steps") is not None:
                pairs.append((float(row["env_steps"]), float(value)))
    return sorted(pairs)


#: A combined curve's ``x``: its runs' shared step grid, or each evaluation's mean env step.
CURVE_X_GRID = "env steps"
CURVE_X_MEAN_STEP = "env steps (mean over runs of the k-th evaluation's)"


def combine_curves(
    curves: Sequence[Sequence[tuple[float, float]]], y: str = "greedy evaluation return"
) -> dict[str, Any] | None:
    """Mean curve with a standard-error band over runs; ``n`` says how many runs a point averages.

    Runs that share one step grid (every run's steps are the start of the longest run's: the
    fixed-batch agents, and runs of different length) combine step by step. Runs whose steps
    differ (group agents end each round at whole episodes, so their k-th evaluation falls a few
    env steps apart from run to run) combine by evaluation index instead: the k-th point of the
    curve averages every run's k-th evaluation, at the mean of their env steps. A union of such
    steps would average nothing (one run per point). ``y`` names what the points are.
    """
    curves = [list(c) for c in curves if c]
    if not curves:
        return None
    longest = max(curves, key=len)
    grid = [step for step, _ in longest]
    shared = all([step for step, _ in c] == grid[: len(c)] for c in curves)
    groups: list[tuple[list[float], list[float]]] = []
    if shared:
        by_step: dict[float, list[float]] = {}
        for curve in curves:
            for step, value in curve:
                by_step.setdefault(step, []).append(value)
        groups = [([step], by_step[step]) for step in sorted(by_step)]
    else:
        for k in range(len(longest)):
            points = [c[k] for c in curves if k < len(c)]
            groups.append(([step for step, _ in points], [value for _, value in points]))
    out = []
    for steps, values in groups:
        mean, se = mean_stderr(values)
        step = steps[0] if len(steps) == 1 else round(sum(steps) / len(steps), 1)
        out.append(
            {"step": step, "mean": mean, "low": mean - se, "high": mean + se, "n": len(values)}
        )
    return {
        "x": CURVE_X_GRID if shared else CURVE_X_MEAN_STEP,
        "y": y,
        "spread": "mean +- standard error over training seeds",
        "points": out,
    }
