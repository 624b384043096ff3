"""Evaluation sweeps: the leaderboard protocol over a grid of (agent, env, seed) cells.

:func:`evaluate_grid` splits an evaluation into one :class:`EvalCell` per (env id, seed), runs
the cells on an :mod:`~agentbench_poad.executors` executor (``local`` or ``ray``) and assembles
one record per env id from its cells. The assembled record equals the one
:func:`agentbench_poad.leaderboard.protocol.evaluate` writes for the same seeds (only wall time,
creation time and hardware differ), whichever executor ran the cells.

Durability: each finished cell is written at once to ``<out>/.cells/<cell key>.json`` (atomic
write), and a re-run skips the cells found there; a record is written (atomically) only once
every one of its cells has finished, so a partial record is never written as complete. A cell
that keeps failing is reported in the returned :class:`SweepResult` and its record is not
written; the other records are.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentbench_poad.executors import CellOutcome, Executor, LocalExecutor

__all__ = ["EvalCell", "SweepResult", "assemble_record", "evaluate_cell", "evaluate_grid"]


@dataclass(frozen=True)
class EvalCell:
    """One (agent, env, seed) evaluation under the leaderboard protocol (picklable).

    Attributes mirror :func:`~agentbench_poad.leaderboard.protocol.evaluate`'s arguments; the
    dict fields are stored as sorted JSON text so the cell stays hashable.
    """

    agent: str
    env_id: str
    seed: int
    episodes: int
    agent_kwargs_json: str = "{}"
    env_kwargs_json: str = "{}"
    agent_name: str | None = None
    action_timeout: float | None = 60.0
    base_model: str | None = None
    adapter: str | None = None
    greedy: bool | None = None
    command: str | None = None

    @property
    def agent_kwargs(self) -> dict[str, Any]:
        return json.loads(self.agent_kwargs_json)

    @property
    def env_kwargs(self) -> dict[str, Any]:
        return json.loads(self.env_kwargs_json)

    def key(self) -> str:
        """A stable file name for this cell's result."""
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()
        return f"{self.env_id}__seed{self.seed}__{digest[:16]}"


def evaluate_cell(cell: EvalCell) -> dict[str, Any]:
    """Evaluate one cell; returns a (validated) one-seed record.

    This is the one adapter between the sweep and the evaluation code.
    """
    # TODO(runner): call the core's per-cell evaluation entry point here once it lands.
    from agentbench_poad.leaderboard.protocol import evaluate

    (record,) = evaluate(
        cell.agent, [cell.env_id], seeds=[cell.seed], episodes=cell.episodes,
        agent_kwargs=cell.agent_kwargs, agent_name=cell.agent_name,
        action_timeout=cell.action_timeout, env_kwargs=cell.env_kwargs,
        base_model=cell.base_model, adapter=cell.adapter, greedy=cell.greedy,
        command=cell.command,
    )
    return record


def assemble_record(cell_records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One record from the one-seed records of the same evaluation (seeds in the given order).

    The per-seed entries are concatenated and summarised as the protocol does; the wall time
    is the sum over cells; creation time, hardware and software are this process's.
    """
    from agentbench_poad.leaderboard.records import new_record, summarize_seeds

    if not cell_records:
        raise ValueError("assemble_record needs at least one cell record")
    first = cell_records[0]
    ids = {r["record_id"] for r in cell_records}
    if len(ids) != 1:
        raise ValueError(f"cells of one record disagree on its id: {sorted(ids)}")
    per_seed = [s for r in cell_records for s in r["scores"]["per_seed"]]
    seeds = [s["seed"] for s in per_seed]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"duplicate seeds among the cells: {seeds}")
    open_action = any(r["env"]["open_action"] for r in cell_records)
    metric = "final_auc" if open_action else "return"
    fields = {k: v for k, v in first.items()
              if k not in ("schema_version", "kind", "created_at", "hardware", "software")}
    fields["env"] = {**first["env"], "open_action": open_action}
    fields["protocol"] = {**first["protocol"], "seeds": seeds, "metric": metric}
    fields["scores"] = {"metric": metric, **summarize_seeds(per_seed), "per_seed": per_seed}
    fields["config"] = {**first["config"], "seeds": seeds}
    fields["wall_time_s"] = float(sum(r["wall_time_s"] for r in cell_records))
    return new_record(**fields)


@dataclass
class SweepResult:
    """What :func:`evaluate_grid` produced.

    Attributes:
        records: one assembled record per env id whose cells all finished.
        failed: outcomes of cells that failed on every attempt.
        reused: how many cells were read back from an earlier run instead of evaluated.
        paths: where the records were written (with ``out_dir``).
    """

    records: list[dict[str, Any]] = field(default_factory=list)
    failed: list[CellOutcome] = field(default_factory=list)
    reused: int = 0
    paths: list[Path] = field(default_factory=list)


def _write_atomic(path: Path, data: Any) -> None:
    from agentbench_poad.leaderboard.records import write_json_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, data)


def evaluate_grid(
    agent: str,
    env_ids: str | Sequence[str],
    seeds: Sequence[int] = (0, 1, 2),
    episodes: int = 100,
    *,
    executor: Executor | None = None,
    out_dir: Path | str | None = None,
    agent_kwargs: dict[str, Any] | None = None,
    env_kwargs: dict[str, Any] | None = None,
    agent_name: str | None = None,
    action_timeout: float | None = 60.0,
    base_model: str | None = None,
    adapter: str | None = None,
    greedy: bool | None = None,
    command: str | None = None,
    on_failure: Callable[[EvalCell, int, str], None] | None = None,
) -> SweepResult:
    """Evaluate ``agent`` (a ``"module:Factory"`` spec) on every env id and seed, one cell each.

    Args:
        agent: the agent spec (a string: cells must be picklable and rebuild the agent).
        env_ids: registered ids; one record each.
        seeds, episodes, agent_kwargs, env_kwargs, agent_name, action_timeout, base_model,
            adapter, greedy, command: as in :func:`~agentbench_poad.leaderboard.protocol.evaluate`.
        executor: where the cells run (default: a :class:`~agentbench_poad.executors.LocalExecutor`).
        out_dir: a folder for ``<record_id>.json`` (or one ``.json`` file for a single env id),
            with finished cells kept under ``.cells/`` next to it for resuming.
        on_failure: called after every failed attempt of a cell (``cell, attempt, error``).
    """
    from agentbench_poad.leaderboard.protocol import output_path
    from agentbench_poad.leaderboard.records import write_record

    if not isinstance(agent, str):
        raise TypeError("evaluate_grid needs the agent as a 'module:Factory' spec string "
                        "(cells are sent to workers that rebuild the agent)")
    if isinstance(env_ids, str):
        env_ids = [env_ids]
    seeds = [int(s) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be non-empty and distinct, got {seeds}")
    if episodes < 1:
        raise ValueError("episodes must be >= 1")
    if out_dir is not None and Path(out_dir).suffix == ".json" and len(env_ids) > 1:
        raise ValueError(f"out_dir {out_dir} names one file but {len(env_ids)} env ids were "
                         "given; pass a folder")
    dumps = lambda d: json.dumps(d or {}, sort_keys=True)  # noqa: E731
    cells = [EvalCell(agent, env_id, seed, episodes, dumps(agent_kwargs), dumps(env_kwargs),
                      agent_name, action_timeout, base_model, adapter, greedy, command)
             for env_id in env_ids for seed in seeds]
    cell_dir = None
    if out_dir is not None:
        base = Path(out_dir)
        cell_dir = (base.parent if base.suffix == ".json" else base) / ".cells"

    result = SweepResult()
    done: dict[EvalCell, dict[str, Any]] = {}
    todo = []
    for cell in cells:
        path = cell_dir / f"{cell.key()}.json" if cell_dir else None
        if path is not None and path.exists():
            try:
                done[cell] = json.loads(path.read_text(encoding="utf-8"))
                result.reused += 1
                continue
            except json.JSONDecodeError:
                path.unlink()  # torn write: evaluate again
        todo.append(cell)

    def keep(outcome: CellOutcome) -> None:
        if not outcome.ok:
            result.failed.append(outcome)
            return
        done[outcome.cell] = outcome.value
        if cell_dir is not None:
            _write_atomic(cell_dir / f"{outcome.cell.key()}.json", outcome.value)

    (executor or LocalExecutor()).map(evaluate_cell, todo, on_result=keep,
                                      on_failure=on_failure)

    for env_id in env_ids:
        env_cells = [c for c in cells if c.env_id == env_id]
        if not all(c in done for c in env_cells):
            continue  # a failed cell: never write this record as complete
        record = assemble_record([done[c] for c in env_cells])
        from agentbench_poad.leaderboard.schema import validate_record

        validate_record(record, source=f"record {record['record_id']}")
        result.records.append(record)
        path = output_path(out_dir, record["record_id"])
        if path is not None:
            write_record(path, record)
            result.paths.append(path)
            for c in env_cells:
                (cell_dir / f"{c.key()}.json").unlink(missing_ok=True)
    return result
