"""Learning curves of a study's runs by what an open-action env measures besides the return.

A record's learning curve is its runs' evaluation return. On DataSciCoding the return mixes two
things: whether a program ran at all (the failure penalty) and how good it was (the ROC AUC of
the one that ran). Every learning-curve point of a run (``learning_curve.json``) keeps both, as
``eval_success_rate`` (the share of the point's evaluation episodes that ended with a program
that ran) and ``eval_score`` (the board's score: the final AUC of an episode, 0 where nothing
ran). :func:`run_curves_table` gives their mean ± standard error over a study's finished runs,
agent by agent, for the region ``run-curves:SPEC:OUT:ENV`` of docs/results.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbench_poad.leaderboard.records import mean_stderr
from agentbench_poad.leaderboard.report.common import md_table, thousands

#: The measures of a curve point, in table order: (``learning_curve.json`` key, row label).
MEASURES = (
    ("eval_success_rate", "runnable rate"),
    ("eval_score", "final AUC (0 if none ran)"),
)


@dataclass(frozen=True)
class _Run:
    agent: str
    seed: int
    points: list[dict[str, Any]]


def _finished_runs(spec: Path, out: Path, env_id: str) -> tuple[list[str], list[_Run], list[str]]:
    """The agents of the study's evaluation runs on ``env_id`` (in the study's order), its runs
    that are done, and the names of those that are not (tuning runs are not part of a curve)."""
    from agentbench_poad.study import load_study
    from agentbench_poad.study.equivalence import is_tuning
    from agentbench_poad.study.plan import run_state

    study = load_study(spec, out=out)
    cells = [c for c in study.cells if c.env_id == env_id and not is_tuning(c)]
    if not cells:
        raise ValueError(f"docs: {spec} trains no run on {env_id!r} (a run-curves region)")
    agents: dict[str, None] = {}
    done, unfinished = [], []
    for cell in cells:
        agent = cell.agent + (f" ({cell.label})" if cell.label else "")
        agents[agent] = None
        path = Path(cell.run_dir) / "learning_curve.json"
        if run_state(cell) != "done" or not path.exists():
            unfinished.append(f"{agent} seed {cell.seed}")
            continue
        points = json.loads(path.read_text(encoding="utf-8"))
        done.append(_Run(agent, cell.seed, sorted(points, key=lambda p: p["env_steps"])))
    return list(agents), done, unfinished


def _cell(values: list[float], steps: list[float], column_step: float) -> str:
    mean, se = mean_stderr(values)
    step = sum(steps) / len(steps)
    return f"{'' if step == column_step else '≈'}{mean:.2f} ± {se:.2f}"


def run_curves_table(spec: Path, out: Path, env_id: str) -> str:
    """Runnable rate and final AUC at each learning-curve point, mean ± s.e. over the finished
    runs of each agent (one run per seed), from the runs' ``learning_curve.json``.

    Points combine by evaluation index, as the records' curves do for runs whose steps differ:
    a group agent ends each round at whole episodes, so its k-th evaluation falls a few env steps
    apart from seed to seed. The columns are the steps of the most common grid; a cell whose
    runs' mean step differs from its column's is marked "≈". Runs that are not finished are left
    out and named under the table.
    """
    order, runs, unfinished = _finished_runs(Path(spec), Path(out), env_id)
    if not runs:
        return f"(no finished run on {env_id} yet; unfinished: {', '.join(unfinished)})"
    agents: dict[str, list[_Run]] = {agent: [] for agent in order}
    for run in runs:
        agents[run.agent].append(run)
    grids: dict[tuple[float, ...], int] = {}
    for run in runs:
        grid = tuple(p["env_steps"] for p in run.points)
        grids[grid] = grids.get(grid, 0) + 1
    columns = list(max(grids, key=lambda g: (grids[g], len(g))))
    rows = []
    for agent, group in agents.items():
        if not group:
            continue
        for key, label in MEASURES:
            cells = []
            for k, column_step in enumerate(columns):
                at_k = [
                    r.points[k]
                    for r in group
                    if k < len(r.points) and r.points[k].get(key) is not None
                ]
                if not at_k:
                    cells.append("--")
                    continue
                values = [float(p[key]) for p in at_k]
                cells.append(_cell(values, [p["env_steps"] for p in at_k], column_step))
            rows.append((agent, label, str(len(group)), *cells))
    table = md_table(("agent", "measure", "runs", *(thousands(s) for s in columns)), rows)
    if unfinished:
        table += f"\n\n(not finished, left out: {', '.join(unfinished)})"
    return table


__all__ = ["MEASURES", "run_curves_table"]
