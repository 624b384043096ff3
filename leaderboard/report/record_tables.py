"""The record tables of docs/results.md: per env, our rows and their learning curves, and the
paper's Table 1 layout with our rows beside the paper's (``leaderboard results-tables``,
:mod:`.results_tables`, names them ``env:<env id>``, ``curves:<env id>`` and ``table1``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from agentbench_poad.leaderboard.from_run import CURVE_X_GRID
from agentbench_poad.leaderboard.records import mean_stderr
from agentbench_poad.leaderboard.report.common import (
    Inputs,
    agent_label,
    below_random_tag,
    budget_text,
    is_anchor,
    is_exploratory,
    md_table,
    n_seeds,
    pm,
    published,
    seed_discounted_returns,
    seed_scores,
    seeds_text,
    thousands,
)
from agentbench_poad.leaderboard.report.paper import layout_tasks

#: Most step columns a learning-curve table shows (evenly spaced, the last always in).
CURVE_COLUMNS = 7


def _protocol(record: dict[str, Any]) -> str:
    p = record["protocol"]
    how = {True: "greedy, ", False: "sampled, "}.get(p.get("greedy"), "")
    return f"{how}{seeds_text(p['seeds'])} × {p['episodes_per_seed']} episodes"


def row_name(record: dict[str, Any]) -> str:
    """The agent's board label and, for a trained agent, its training budget."""
    budget = budget_text(record)
    return agent_label(record) + (f", {budget}" if budget else "")


def _ordered(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our agents by mean score (highest first), then the anchors."""
    return sorted(records, key=lambda r: (is_anchor(r), -r["scores"]["mean"], r["record_id"]))


def _mean_cell(record: dict[str, Any]) -> str:
    sc, n = record["scores"], n_seeds(record)
    text = pm(sc["mean"], sc["stderr"], n)
    if 1 < n <= 5:
        text += " (" + ", ".join(f"{v:.3f}" for v in seed_scores(record)) + ")"
    return text


def _success_cell(record: dict[str, Any]) -> str:
    per_seed = [s["success_rate"] for s in record["scores"]["per_seed"]]
    text = f"{100 * record['scores']['success_rate']:.0f} %"
    if 1 < len(per_seed) <= 5 and len(set(per_seed)) > 1:
        text += " (" + ", ".join(f"{100 * v:.0f}" for v in per_seed) + ")"
    return text


def env_table(env_id: str, inputs: Inputs) -> str:
    """Our records on ``env_id``: name, record, protocol, mean ± s.e. over seeds, success. A
    trained row below the random row of its task and cap is flagged "[below random: MEAN]"
    (:func:`.common.below_random`)."""
    recs = _ordered(inputs.by_env.get(env_id, []))
    metric = recs[0]["scores"]["metric"] if recs else "return"
    score = "final AUC" if metric == "final_auc" else "mean return"
    return md_table(
        ("row", "record", "protocol", f"{score} (s.e. over seeds; per seed)", "success (per seed)"),
        [
            (
                row_name(r) + below_random_tag(r, inputs.records),
                f"`{r['record_id']}`",
                _protocol(r),
                _mean_cell(r),
                _success_cell(r),
            )
            for r in recs
        ],
    )


def _on_grid(record: dict[str, Any]) -> bool:
    """Whether a record's curve points lie on its runs' shared step grid (not at the mean step
    of each evaluation, as group agents' curves do: :func:`..from_run.combine_curves`)."""
    return record["learning_curve"].get("x", CURVE_X_GRID) == CURVE_X_GRID


def _steps(record: dict[str, Any]) -> tuple[float, ...]:
    return tuple(sorted(p["step"] for p in record["learning_curve"]["points"]))


def _nested(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    """One step grid starts the other (runs of one trainer grid, of different lengths)."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def curves_table(env_id: str, inputs: Inputs) -> str:
    """Mean ± s.e. over seeds of each record's learning curve at up to :data:`CURVE_COLUMNS`
    steps (the band is mean ± s.e., so s.e. is half its width).

    The columns are the steps of the records on the most common step grid among those on one
    (the trainer's grid, shared by every seed of a record; with the records whose grid starts
    it or that it starts, as a longer or shorter budget), else all records' steps. A record whose
    points lie elsewhere shows, in a column, its point nearest to that step when it lies within
    half the columns' spacing, marked "≈": a group agent's points sit at each evaluation's mean
    step, and where every episode runs to the same length its seeds share a grid of their own
    (whole-episode rounds: 1,080 where the trainer's grid has 1,024)."""
    recs = [
        r
        for r in _ordered(inputs.by_env.get(env_id, []))
        if r.get("learning_curve") and r["learning_curve"]["points"]
    ]
    grids = Counter(_steps(r) for r in recs if _on_grid(r))  # ties: the first record's grid
    main = grids.most_common(1)[0][0] if grids else None
    on_columns = [r for r in recs if main is not None and _nested(_steps(r), main)]
    steps = sorted({p["step"] for r in on_columns or recs for p in r["learning_curve"]["points"]})
    column_ids = {id(r) for r in on_columns}
    if len(steps) > CURVE_COLUMNS:
        stride = -(-len(steps) // CURVE_COLUMNS)
        steps = sorted(set(steps[::-1][::stride]))
    spacing = min((b - a for a, b in zip(steps, steps[1:])), default=float("inf"))
    rows = []
    for r in recs:
        points = r["learning_curve"]["points"]
        exact = {p["step"]: p for p in points}
        cells = []
        for step in steps:
            p, mark = exact.get(step), ""
            if p is None and id(r) not in column_ids:
                near = min(points, key=lambda q: abs(q["step"] - step))
                if abs(near["step"] - step) < spacing / 2:
                    p, mark = near, "≈"
            if p is None:
                cells.append("--")
            elif p.get("low") is None or p.get("high") is None:
                cells.append(f"{mark}{p['mean']:.2f}")
            else:
                cells.append(f"{mark}{p['mean']:.2f} ± {(p['high'] - p['low']) / 2:.2f}")
        rows.append((row_name(r), *cells))
    return md_table(("agent", *(thousands(s) for s in steps)), rows)


def _cell(discounted: float | None, success: float) -> str:
    return f"{'--' if discounted is None else f'{discounted:.4f}'} ({success:.3f})"


def table1(inputs: Inputs) -> str:
    """The paper's Table 1 layout: discounted return (success rate) per task, our rows (and,
    for trained agents, one row per seed) above the paper's; a trained row's cell below the
    random row of its task is flagged "[below random: MEAN]" (:func:`.common.below_random`)."""
    layout = inputs.paper.layouts.get("table1")
    if layout is None:
        return "(paper_results.json has no table1 layout)"
    tasks = layout_tasks(layout)
    trained_on = layout.get("trained_on")
    groups: dict[str, dict[str, dict[str, Any]]] = {}
    for env_id, _ in tasks:
        for r in inputs.by_env.get(env_id, []):
            name = r["agent"]["name"]
            base = r["model"].get("base")
            source = (r.get("training") or {}).get("env_id")
            label = f"{name}" + (f" ({base})" if base else "")
            label += ", trained on Food Prep." if source == trained_on and source else ""
            label += " [exploratory]" if is_exploratory(r) else ""  # as in every other table
            groups.setdefault(label, {})[env_id] = r
    rows: list[tuple[str, ...]] = []
    order = sorted(groups, key=lambda k: (is_anchor(next(iter(groups[k].values()))), k))
    for label in order:
        by_task = groups[label]
        cells = []
        for env_id, _ in tasks:
            r = by_task.get(env_id)
            if r is None:
                cells.append("--")
                continue
            disc = seed_discounted_returns(r)
            mean = None if disc is None else mean_stderr(disc)[0]
            cells.append(
                _cell(mean, r["scores"]["success_rate"]) + below_random_tag(r, inputs.records)
            )
        rows.append((f"{label} (ours)", *cells))
        any_record = next(iter(by_task.values()))
        if (any_record.get("training") or {}).get("env_id") and n_seeds(any_record) > 1:
            for i, seed in enumerate(any_record["protocol"]["seeds"]):
                seed_cells = []
                for env_id, _ in tasks:
                    r = by_task.get(env_id)
                    if r is None or i >= n_seeds(r):
                        seed_cells.append("--")
                        continue
                    disc = seed_discounted_returns(r)
                    seed_cells.append(
                        _cell(
                            None if disc is None else disc[i],
                            r["scores"]["per_seed"][i]["success_rate"],
                        )
                    )
                rows.append((f"{label}, seed {seed} alone (ours)", *seed_cells))
    for method in inputs.methods("table1"):
        cells = []
        for env_id, _ in tasks:
            d = inputs.published("table1", env_id, method["agent"], "discounted_return")
            s = inputs.published("table1", env_id, method["agent"], "success_rate")
            cells.append(
                f"{published(d) if d else '--'} ({published(s) if s else '--'})"
                if d or s
                else "not in our extraction"
            )
        rows.append((f"{method['label']} (paper)", *cells))
    header = (
        "row",
        *(f"{label} (training task)" if e == trained_on else label for e, label in tasks),
    )
    return md_table(header, rows)


__all__ = ["CURVE_COLUMNS", "curves_table", "env_table", "row_name", "table1"]
