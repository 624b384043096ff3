"""Running a study: train every cell (resuming), evaluate what is trained, write records.

:func:`run_study` checks the spec first (:func:`~agentbench_poad.study.spec.load_study`), then
trains the cells on an executor and evaluates each (group, agent, env) as soon as all its seeds
are trained; finished runs and evaluations are skipped, interrupted runs resume. What is done
and what a run would do is read by :mod:`agentbench_poad.study.plan`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentbench_poad.study.equivalence import anchors_for, copy_equivalent, find_equivalent
from agentbench_poad.study.grid import EvalTask, Study, TrainCell
from agentbench_poad.study.plan import check_config_sources, check_portable, eval_done, run_state
from agentbench_poad.study.spec import load_study
from agentbench_poad.study.specfile import StudyError
from agentbench_poad.study.wall_time import WallTimeLog, run_update_time, run_wall_time

__all__ = ["StudyResult", "run_study", "supersede"]


@dataclass
class StudyResult:
    """What :func:`run_study` did."""

    trained: list[str] = field(default_factory=list)
    skipped_runs: list[str] = field(default_factory=list)
    records: list[str] = field(default_factory=list)
    skipped_evals: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


# -- one cell of the executor ---------------------------------------------------------------------
@dataclass(frozen=True)
class _TrainJob:
    cell: TrainCell
    device: str | None
    env_executor: str | None
    max_updates: int | None
    #: finished-or-not runs this one repeats exactly if their KL guard never fired (equivalence.py)
    anchors: tuple[TrainCell, ...] = ()


def _train_job(job: _TrainJob) -> dict[str, Any]:
    """Train (or resume) one cell; its wall time is added to ``study_wall_time.json``."""
    from agentbench_poad.baselines import get_algorithm
    from agentbench_poad.rl.trainer import train

    cell = job.cell
    run_dir = Path(cell.run_dir)
    overrides = dict(cell.overrides)
    if job.device:
        overrides["device"] = job.device
    if job.env_executor:
        overrides["env_executor"] = job.env_executor
    resume = (run_dir / "config.json").exists()
    if not resume and job.anchors:
        found = find_equivalent(job.anchors, lambda anchor: run_state(anchor) == "done")
        if found is not None:
            copy_equivalent(found, cell)
            return {"run_dir": str(run_dir), "resumed": False, "equivalent_to": found.source}
    with WallTimeLog(run_dir):
        train(
            get_algorithm(cell.agent),
            cell.env_id,
            cell.model,
            total_steps=cell.total_steps,
            seed=cell.seed,
            out=run_dir,
            resume=resume,
            overrides=overrides,
            preset=cell.preset,
            env_kwargs=cell.env_kwargs,
            progress=False,
            max_updates=job.max_updates,
            config_source=json.loads(cell.config_source_json) if cell.config_source_json else None,
        )
    return {"run_dir": str(run_dir), "resumed": resume}


def _study_job(job: _TrainJob | EvalTask) -> Any:
    """One cell of a study's executor: a run to train or a record to make."""
    return _train_job(job) if isinstance(job, _TrainJob) else _eval_job(job)


def _eval_job(task: EvalTask) -> str:
    """Evaluate one task, write its record; returns the record path.

    A record with episodes that the evaluation's per-call deadline ended measures the machine's
    load as much as the agent (the tables set it apart): it is written, with a warning, but the
    evaluation is not marked done, so the study's next run evaluates it again."""
    from agentbench_poad.evaluation import deadline_cuts
    from agentbench_poad.leaderboard.from_run import record_from_runs
    from agentbench_poad.leaderboard.records import write_record
    from agentbench_poad.rl.run_dir import load_run_config

    eval_dir = Path(task.eval_dir)
    eval_dir.mkdir(parents=True, exist_ok=True)
    study = {"study": task.study, "group": task.group, "eval_key": task.key}
    if task.exploratory:
        study["exploratory"] = True
    if task.run_dirs:
        configs = [load_run_config(r) for r in task.run_dirs]
        wall = {str(c["seed"]): run_wall_time(r) for c, r in zip(configs, task.run_dirs)}
        record = record_from_runs(
            list(task.run_dirs),
            episodes=task.episodes,
            env_id=task.env_id if task.env_id != configs[0]["env_id"] else None,
            greedy=task.greedy,
            action_timeout=task.action_timeout,
            agent_name=task.agent_name,
            out_dir=eval_dir,
            config={"study": study},
            command=task.command,
        )
        record["training"]["run_wall_time_s"] = wall
        record["training"]["run_update_time_s"] = {
            str(c["seed"]): run_update_time(r) for c, r in zip(configs, task.run_dirs)
        }
        known = [w for w in wall.values() if w is not None]
        record["training"]["wall_time_s"] = float(sum(known)) if known else None
    else:
        from agentbench_poad.leaderboard.protocol import Provenance, evaluate

        (record,) = evaluate(
            task.agent,
            [task.env_id],
            seeds=list(task.seeds),
            episodes=task.episodes,
            agent_kwargs=json.loads(task.agent_kwargs_json),
            env_kwargs=json.loads(task.env_kwargs_json),
            action_timeout=task.action_timeout,
            out_dir=eval_dir,
            provenance=Provenance(
                config={"study": study},
                command=task.command,
            ),
        )
    path = Path(task.records_dir) / f"{record['record_id']}.json"
    cut = deadline_cuts(record)
    if cut:
        print(
            f"warning: {record['record_id']}: {cut} episode(s) ended by the evaluation deadline "
            f"({task.action_timeout} s per call); the tables will not compare this record and "
            "the evaluation is not marked done: run the study again on a machine with free "
            "cores to evaluate it again, or set action_timeout = 0 in the group's eval table "
            "(docs/study.md)",
            file=sys.stderr,
            flush=True,
        )
    supersede(path, task.study)
    write_record(path, record)
    done = eval_dir / "done.json"
    if cut:
        done.unlink(missing_ok=True)
    else:
        done.write_text(json.dumps({"record": str(path)}) + "\n")
    return str(path)


def supersede(path: Path, study: str) -> Path | None:
    """Keep the record at ``path`` as history when a record of ``study`` is about to replace it.

    Record ids name the env, agent and model, not the study, so a new study's record takes the
    place of an earlier study's (the board shows one row per id). The earlier record moves,
    unchanged, to ``history/<its study>/`` beside the records folder
    (:func:`~agentbench_poad.leaderboard.records.move_to_history`): off the board, still
    verifiable by path. A record of the same study is simply replaced (a re-evaluation).
    Returns where the old record went, or None.

    Raises:
        StudyError: the history already holds a record of that id and study.
    """
    from agentbench_poad.leaderboard.records import RecordError, move_to_history, record_study

    if not path.exists():
        return None
    try:
        old_study = record_study(json.loads(path.read_text()))
    except (OSError, ValueError, AttributeError):
        old_study = None  # unreadable: kept as history too, never silently overwritten
    if old_study == study:
        return None
    try:
        return move_to_history(path, old_study)
    except RecordError as exc:
        raise StudyError(str(exc)) from exc


# -- the work queue of one call -------------------------------------------------------------------
class _WorkQueue:
    """The work of one :func:`run_study` call, what waits for what, and what became of it.

    A new run that may be a copy of another (equivalence.py) is held until its anchors have
    finished (or failed); an evaluation waits until all its runs are trained. The executor
    reports each ended cell to :meth:`finished`, which returns the work that end released: it
    goes ahead of the queue (a copy takes no time, and a record is made as soon as it can be).
    """

    def __init__(
        self,
        study: Study,
        *,
        device: str | None,
        env_executor: str | None,
        max_updates: int | None,
        evaluate: bool,
        log: Callable[[str], None],
    ) -> None:
        self.study = study
        self.device = device
        self.evaluate = evaluate
        self.log = log
        self.result = StudyResult()
        #: runs to start now, in cell order
        self.train: list[_TrainJob] = []
        #: runs that may be copies, waiting for their anchors
        self.held: list[_TrainJob] = []
        #: run dirs of the runs queued or held that have not ended
        self.unfinished: set[str] = set()
        #: evaluations waiting for their runs (and evaluation-only ones, for the training)
        self.waiting: list[EvalTask] = []
        for cell in study.cells:
            state = run_state(cell)
            if state == "done":
                self.result.skipped_runs.append(cell.run_dir)
                continue
            anchors = anchors_for(cell, study.cells) if state == "new" else ()
            job = _TrainJob(cell, device, env_executor, max_updates, anchors)
            (self.held if anchors else self.train).append(job)
            self.unfinished.add(cell.run_dir)
            log(
                f"{'resume' if state == 'partial' else 'train '} {cell.agent} "
                f"{cell.env_id} seed {cell.seed} -> {cell.run_dir}"
                + (
                    f" (or a copy of {anchors[0].run_dir} if its KL guard never fires)"
                    if anchors
                    else ""
                )
            )
        for task in study.evals if evaluate else []:
            if eval_done(task):
                self.result.skipped_evals.append(task.key)
            else:
                self.waiting.append(task)

    def first(self) -> list[_TrainJob | EvalTask]:
        """The work to start with: evaluations whose runs an earlier call trained, the held runs
        their anchors no longer hold back, then the runs to train."""
        return [*self.ready_evaluations(trained_only=True), *self.release(), *self.train]

    def release(self) -> list[_TrainJob]:
        """Pop the held runs whose anchors have all ended."""
        ready = [j for j in self.held if not any(a.run_dir in self.unfinished for a in j.anchors)]
        for job in ready:
            self.held.remove(job)
        return ready

    def ready_evaluations(self, trained_only: bool) -> list[EvalTask]:
        """Pop the waiting evaluations whose runs are all trained (evaluation-only tasks, which
        need no run, only when ``trained_only`` is False: they go after the training)."""
        if not self.evaluate:
            return []
        ready = []
        for task in list(self.waiting):
            needed = self.study.needs.get(task.key, [])
            if trained_only and not task.run_dirs:
                continue
            if all(run_state(c) == "done" for c in self.study.cells if c.run_dir in needed):
                self.waiting.remove(task)
                ready.append(_on_device(task, self.device) if self.device else task)
                self.log(f"evaluate {task.key}")
        return ready

    def finished(self, outcome: Any) -> list[_TrainJob | EvalTask]:
        """Book an ended cell (the executor's outcome) and return the work its end released."""
        job = outcome.cell
        if not isinstance(job, _TrainJob):
            if outcome.ok:
                self.result.records.append(outcome.value)
            else:
                self.result.failed.append(job.key)
            return []
        if outcome.ok and (outcome.value or {}).get("equivalent_to"):
            self.log(
                f"copied {job.cell.run_dir}: the same run as {outcome.value['equivalent_to']} "
                "(its KL guard never fired at a tighter target_kl)"
            )
        (self.result.trained if outcome.ok else self.result.failed).append(job.cell.run_dir)
        self.unfinished.discard(job.cell.run_dir)
        # A record is made as soon as its runs are trained, not after the whole grid: its
        # evaluations take the next free slots while the other slots go on training, and a long
        # study stopped midway keeps every record it could already make.
        return [*self.release(), *self.ready_evaluations(trained_only=True)]

    def failed(self, job: Any, attempt: int, error: str) -> None:
        self.log(f"FAILED (attempt {attempt}) {_describe(job)}: {error.splitlines()[0]}")


def run_study(
    spec: str | os.PathLike | Study,
    *,
    executor: str = "local",
    address: str | None = None,
    device: str | None = None,
    env_executor: str | None = None,
    out: str | os.PathLike | None = None,
    records: str | os.PathLike | None = None,
    max_retries: int = 1,
    max_updates: int | None = None,
    evaluate: bool = True,
    log: Callable[[str], None] = print,
) -> StudyResult:
    """Run (or continue) a study; see the module docstring.

    Args:
        spec: a spec path or a :class:`~agentbench_poad.study.grid.Study` from
            :func:`~agentbench_poad.study.spec.load_study`.
        executor: ``"local"`` or ``"ray"``; ``address`` names an existing Ray cluster.
        device: torch device of every run (e.g. ``"cuda"``; default: the config's, CPU).
        env_executor: where each run's envs live (``"local"``/``"ray"``; default: the config's).
        out, records: override the output folders of a spec path.
        max_retries: re-runs of a failed cell before it is reported as failed.
        max_updates: stop each run after this many updates in this call (resumable later).
        evaluate: also run the evaluations whose runs are all trained.
        log: where progress lines go.
    """
    from agentbench_poad.executors import get_executor

    study = spec if isinstance(spec, Study) else load_study(spec, out=out, records=records)
    if evaluate:
        check_portable(study)
    check_config_sources(study)
    for waiting_pair in study.pending:
        log(
            f"wait   {waiting_pair}: tuned, no configuration chosen yet (after the tuning "
            f"runs: agentbench-poad study {study.spec_path or 'SPEC'} --select)"
        )
    work = _WorkQueue(
        study,
        device=device,
        env_executor=env_executor,
        max_updates=max_updates,
        evaluate=evaluate,
        log=log,
    )
    with get_executor(
        executor,
        address=address,
        max_retries=max_retries,
        device=device,
        runs_per_gpu=study.runs_per_gpu,
    ) as runner:
        runner.map(_study_job, work.first(), on_result=work.finished, on_failure=work.failed)
        if evaluate:  # evaluation-only tasks (untrained models, no runs) after the training
            runner.map(
                _study_job,
                work.ready_evaluations(trained_only=False),
                on_result=work.finished,
                on_failure=work.failed,
            )
    return work.result


def _on_device(task: EvalTask, device: str) -> EvalTask:
    from dataclasses import replace

    if not (task.agent or "").startswith("lm:"):
        return task
    kwargs = {**json.loads(task.agent_kwargs_json), "device": device}
    return replace(task, agent_kwargs_json=json.dumps(kwargs, sort_keys=True))


def _describe(job: Any) -> str:
    if isinstance(job, _TrainJob):
        return f"train {job.cell.agent} {job.cell.env_id} seed {job.cell.seed}"
    return f"evaluate {getattr(job, 'key', job)}"
