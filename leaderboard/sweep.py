"""Evaluation sweeps: the leaderboard protocol with each (env, seed) cell on an executor.

:func:`evaluate_grid` takes the same :class:`~agentbench_poad.leaderboard.protocol.EvaluationPlan`
as :func:`~agentbench_poad.leaderboard.protocol.evaluate_plan`, turns it into one runner request
per (env id, seed) (:meth:`EvaluationPlan.cell`, picklable), plays them with the core runner
(:func:`agentbench_poad.evaluation.evaluate_cell`) on an :mod:`~agentbench_poad.executors`
executor (``local`` or ``ray``), and assembles each env id's record with
:func:`~agentbench_poad.leaderboard.protocol.build_record`. The record equals
``evaluate_plan``'s for the same plan (only wall time, creation time and hardware differ),
whichever executor ran the cells.

Durability: each finished cell is written at once to ``<out>/.cells/<cell key>.json`` (atomic
write; JSON, never a pickle) and a re-run of the same plan reuses it; a record is written
(atomically) only once every one of its cells has finished, so a partial record is never written
as complete. A cell that keeps failing is reported in :attr:`SweepResult.failed` and its record is
not written; the other records are.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from agentbench_poad.evaluation import CellResult, EpisodeResult, EvaluationRequest, evaluate_cell
from agentbench_poad.executors import CellOutcome, Executor, LocalExecutor

__all__ = ["SweepResult", "cell_from_json", "cell_key", "cell_to_json", "evaluate_grid", "run_cell"]


def cell_key(request: EvaluationRequest) -> str:
    """A stable file name for a request's result (what it plays, not who runs it)."""
    data = {
        "agent": request.agent,
        "env": request.env_id,
        "seed": request.seed,
        "episodes": request.episodes,
        "agent_kwargs": dict(request.agent_kwargs),
        "env_kwargs": dict(request.env_kwargs),
        "timeout": request.action_timeout,
        "batch_size": request.batch_size,
    }
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, default=repr).encode()).hexdigest()
    return f"{request.env_id}__seed{request.seed}__{digest[:16]}"


def cell_to_json(cell: CellResult) -> dict[str, Any]:
    """A JSON-ready form of a runner result (episodes as record entries)."""
    data = {f.name: getattr(cell, f.name) for f in fields(cell) if f.name != "episodes"}
    data["episodes"] = [e.to_entry() for e in cell.episodes]
    return data


def cell_from_json(data: dict[str, Any]) -> CellResult:
    """Inverse of :func:`cell_to_json`."""
    values = dict(data)
    values["episodes"] = tuple(EpisodeResult.from_entry(e) for e in values["episodes"])
    return CellResult(**values)


def run_cell(request: EvaluationRequest) -> dict[str, Any]:
    """Play one cell with the core runner; returns :func:`cell_to_json` of its result."""
    return cell_to_json(evaluate_cell(request))


@dataclass
class SweepResult:
    """What :func:`evaluate_grid` produced.

    Attributes:
        records: one record per env id whose cells all finished.
        failed: outcomes of cells that failed on every attempt.
        reused: how many cells were read back from an earlier run instead of played.
        paths: where the records were written (with ``out_dir``).
    """

    records: list[dict[str, Any]] = field(default_factory=list)
    failed: list[CellOutcome] = field(default_factory=list)
    reused: int = 0
    paths: list[Path] = field(default_factory=list)


def evaluate_grid(
    plan: Any,
    provenance: Any = None,
    *,
    executor: Executor | None = None,
    out_dir: Path | str | None = None,
    on_failure: Callable[[EvaluationRequest, int, str], None] | None = None,
) -> SweepResult:
    """Score ``plan`` cell by cell on ``executor``; one record per env id (see module doc).

    Args:
        plan: an :class:`~agentbench_poad.leaderboard.protocol.EvaluationPlan` whose agent is a
            ``"module:Factory"`` spec (workers rebuild the agent from it).
        provenance: a :class:`~agentbench_poad.leaderboard.protocol.Provenance`.
        executor: where the cells run (default: a :class:`~agentbench_poad.executors.LocalExecutor`).
        out_dir: a folder for ``<record_id>.json`` (or one ``.json`` file for a single env id);
            finished cells are kept under ``.cells/`` next to it until their record is written.
        on_failure: called after every failed attempt of a cell (``request, attempt, error``).
    """
    from agentbench_poad.leaderboard.protocol import build_record, output_path
    from agentbench_poad.leaderboard.records import write_json_atomic, write_record
    from agentbench_poad.leaderboard.schema import validate_record

    if not isinstance(plan.agent, str):
        raise TypeError(
            "evaluate_grid needs the plan's agent as a 'module:Factory' spec "
            "(cells go to workers that rebuild the agent from it)"
        )
    if out_dir is not None and Path(out_dir).suffix == ".json" and len(plan.env_ids) > 1:
        raise ValueError(
            f"out_dir {out_dir} names one file but {len(plan.env_ids)} env ids "
            "were given; pass a folder"
        )
    requests = [plan.cell(env_id, seed) for env_id in plan.env_ids for seed in plan.seeds]
    cell_dir = None
    if out_dir is not None:
        base = Path(out_dir)
        cell_dir = (base.parent if base.suffix == ".json" else base) / ".cells"

    result = SweepResult()
    done: dict[str, CellResult] = {}
    todo = []
    for request in requests:
        path = cell_dir / f"{cell_key(request)}.json" if cell_dir else None
        if path is not None and path.exists():
            try:
                done[cell_key(request)] = cell_from_json(json.loads(path.read_text("utf-8")))
                result.reused += 1
                continue
            except (json.JSONDecodeError, KeyError, TypeError):
                path.unlink()  # a torn or foreign file: play the cell again
        todo.append(request)

    def keep(outcome: CellOutcome) -> None:
        if not outcome.ok:
            result.failed.append(outcome)
            return
        key = cell_key(outcome.cell)
        done[key] = cell_from_json(outcome.value)
        if cell_dir is not None:
            cell_dir.mkdir(parents=True, exist_ok=True)
            write_json_atomic(cell_dir / f"{key}.json", outcome.value)

    (executor or LocalExecutor()).map(run_cell, todo, on_result=keep, on_failure=on_failure)

    for env_id in plan.env_ids:
        keys = [cell_key(plan.cell(env_id, seed)) for seed in plan.seeds]
        if not all(k in done for k in keys):
            continue  # a failed cell: this record is never written as complete
        cells = [done[k] for k in keys]
        record = build_record(
            plan, env_id, cells, provenance, wall_time_s=float(sum(c.wall_time_s for c in cells))
        )
        validate_record(record, source=f"record {record['record_id']}")
        result.records.append(record)
        path = output_path(out_dir, record["record_id"])
        if path is not None:
            write_record(path, record)
            result.paths.append(path)
            for k in keys:
                (cell_dir / f"{k}.json").unlink(missing_ok=True)
    return result
