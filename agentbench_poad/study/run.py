"""Running a study: train every cell (resuming), evaluate what is trained, write records.

:func:`run_study` checks the spec first (:func:`~agentbench_poad.study.spec.load_study`), then
trains the cells on an executor and evaluates each (group, agent, env) as soon as all its seeds
are trained; finished runs and evaluations are skipped, interrupted runs resume.
:func:`run_state`, :func:`eval_done`, :func:`cells_table` and :func:`study_files` say what is done
and what to ship.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentbench_poad.study.equivalence import NOTE as EQUIVALENCE_NOTE
from agentbench_poad.study.equivalence import anchors_for, copy_equivalent, find_equivalent
from agentbench_poad.study.spec import EvalTask, Study, StudyError, TrainCell, load_study
from agentbench_poad.study.tuning import Selection, select, write_chosen, write_chosen_all
from agentbench_poad.study.wall_time import WallTimeLog, run_update_time, run_wall_time


@dataclass
class StudyResult:
    """What :func:`run_study` did."""

    trained: list[str] = field(default_factory=list)
    skipped_runs: list[str] = field(default_factory=list)
    records: list[str] = field(default_factory=list)
    skipped_evals: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


# -- running ------------------------------------------------------------------------------------
def _checkpointed(cell: TrainCell) -> tuple[int, int] | None:
    """``(updates, env steps per update)`` of the cell's newest checkpoint; None without one."""
    from agentbench_poad.rl.run_dir import latest_update, load_run_config

    run_dir = Path(cell.run_dir)
    updates = latest_update(run_dir) if (run_dir / "config.json").exists() else None
    if updates is None:
        return None
    config = load_run_config(run_dir)
    return updates, config["algorithm"]["num_envs"] * config["algorithm"]["rollout_length"]


def _state_and_steps(cell: TrainCell) -> tuple[str, int]:
    """The run's state and the env steps its newest checkpoint holds (one read of each file)."""
    if not (Path(cell.run_dir) / "config.json").exists():
        return "new", 0
    found = _checkpointed(cell)
    if found is None:
        return "partial", 0
    updates, batch = found
    state = "done" if updates >= cell.total_steps // batch else "partial"
    return state, min(cell.total_steps, updates * batch)


def run_state(cell: TrainCell) -> str:
    """``"done"``, ``"partial"`` (resumable) or ``"new"``."""
    return _state_and_steps(cell)[0]


def planned_copy(cell: TrainCell, cells: list[TrainCell]) -> tuple[str | None, bool]:
    """For a run not yet started: ``(source, False)`` when the study will copy it from a finished
    tighter-guard twin whose guard never fired (equivalence.py), ``(None, True)`` when no finished
    twin settles it but one has yet to finish (it may still be a copy), else ``(None, False)``
    (no twin, or every twin finished with its guard firing: the run will be trained)."""
    anchors = anchors_for(cell, cells)
    done = {anchor.run_dir: run_state(anchor) == "done" for anchor in anchors}
    found = find_equivalent(anchors, lambda anchor: done[anchor.run_dir])
    if found is not None:
        return found.source, False
    return None, not all(done.values())


def _planned_state(cell: TrainCell, cells: list[TrainCell]) -> tuple[str, int, str | None, bool]:
    """:func:`run_state` with ``"copy"`` for a new run the study will copy: ``(state, env steps
    checkpointed, the copy's source, whether a new run may still be a copy)``."""
    state, done = _state_and_steps(cell)
    if state != "new":
        return state, done, None, False
    source, maybe = planned_copy(cell, cells)
    return ("copy" if source is not None else "new"), done, source, maybe


@dataclass
class StudyProgress:
    """Where a study stands (``study SPEC --dry-run`` prints it last)."""

    #: training runs by state ("done", "partial", "new")
    runs: dict[str, int]
    #: evaluations by state ("done", "todo")
    evals: dict[str, int]
    #: tuned (group, agent) pairs with no chosen configuration yet (no cells until --select)
    waiting: int
    #: env id -> env steps still to train (a partial run counts from its newest checkpoint)
    steps_left: dict[str, int]
    #: env id -> seconds of training wall time per env step of the finished runs on it; for an
    #: env with no finished run, of its unfinished runs up to their newest checkpoint (an
    #: overestimate by at most the work after that checkpoint)
    seconds_per_step: dict[str, float]
    #: the envs whose pace comes from unfinished runs
    unfinished_pace: frozenset[str] = frozenset()
    #: env id -> env steps the tuned pairs waiting for --select will add (their seeds x budget)
    waiting_steps: dict[str, int] = field(default_factory=dict)
    #: new runs that may still be copies (their tighter-guard twins have not settled it); they
    #: are counted in :attr:`steps_left` as training
    may_copy: int = 0

    def _hours(self, steps: dict[str, int]) -> float | None:
        if any(env not in self.seconds_per_step for env in steps):
            return None
        return sum(n * self.seconds_per_step[env] for env, n in steps.items()) / 3600

    @property
    def hours_left(self) -> float | None:
        """Run time still to train at :attr:`seconds_per_step`, one run at a time (cells that
        run side by side divide it); None where an env with steps left has no pace yet."""
        return self._hours(self.steps_left)

    @property
    def waiting_hours(self) -> float | None:
        """Run time the pairs waiting for ``--select`` will add at the same pace (None where
        one of their envs has no pace yet)."""
        return self._hours(self.waiting_steps)

    def _steps_text(self, steps: dict[str, int]) -> str:
        return "; ".join(
            f"{env} {n:,}"
            + (
                f" ({1000 * self.seconds_per_step[env]:.0f} s per 1,000 steps so far"
                + (", from unfinished runs)" if env in self.unfinished_pace else ")")
                if env in self.seconds_per_step
                else " (no run trained yet)"
            )
            for env, n in sorted(steps.items())
        )

    @staticmethod
    def _hours_text(hours: float | None) -> str:
        return (
            f"about {hours:.1f} h"
            if hours is not None
            else "unknown for an env with no run trained yet"
        ) + " (cells that run side by side divide it)"

    def lines(self) -> list[str]:
        runs = ", ".join(f"{self.runs.get(k, 0)} {k}" for k in ("done", "partial", "new"))
        if self.runs.get("copy"):
            runs += f", {self.runs['copy']} to copy (no training)"
        evals = ", ".join(f"{self.evals.get(k, 0)} {k}" for k in ("done", "todo"))
        out = [
            f"runs: {runs}; evaluations: {evals}; tuned pairs waiting for --select: {self.waiting}"
        ]
        if self.steps_left:
            total = sum(self.steps_left.values())
            out.append(f"env steps left: {total:,} ({self._steps_text(self.steps_left)})")
            out.append(
                "run time left at that pace, one run at a time: "
                + self._hours_text(self.hours_left)
            )
        if self.may_copy:
            out.append(
                f"{self.may_copy} new run(s) counted above may be copies instead: their "
                "tighter-guard twins have not finished (docs/study.md)"
            )
        if self.waiting_steps:
            total = sum(self.waiting_steps.values())
            out.append(
                f"after --select: {total:,} env steps more ({self._steps_text(self.waiting_steps)})"
            )
            out.append(
                "their run time at that pace, one run at a time: "
                + self._hours_text(self.waiting_hours)
            )
        return out


def study_progress(study: Study) -> StudyProgress:
    """Counts, env steps left and the pace per env (wall time per env step, from each run's
    ``study_wall_time.json``): of its finished runs, or, while none has finished, of its
    unfinished runs up to their newest checkpoint."""
    runs: dict[str, int] = {}
    steps_left: dict[str, int] = {}
    may_copy = 0
    # env id -> [seconds, steps] of the finished runs (index 0) and of the unfinished ones (1)
    paced: dict[str, list[list[float]]] = {}
    for cell in study.cells:
        state, done, _, maybe = _planned_state(cell, study.cells)
        may_copy += maybe
        runs[state] = runs.get(state, 0) + 1
        if state not in ("done", "copy"):
            steps_left[cell.env_id] = steps_left.get(cell.env_id, 0) + cell.total_steps - done
        wall = run_wall_time(cell.run_dir) if done else None
        if wall is not None:
            pace = paced.setdefault(cell.env_id, [[0.0, 0], [0.0, 0]])[state != "done"]
            pace[0] += wall
            pace[1] += done
    evals: dict[str, int] = {}
    for task in study.evals:
        state = "done" if eval_done(task) else "todo"
        evals[state] = evals.get(state, 0) + 1
    seconds_per_step: dict[str, float] = {}
    unfinished: set[str] = set()
    for env, (finished, partial) in paced.items():
        if finished[1]:
            seconds_per_step[env] = finished[0] / finished[1]
        elif partial[1]:
            seconds_per_step[env] = partial[0] / partial[1]
            unfinished.add(env)
    waiting: dict[str, int] = {}
    for _, env, steps in study.pending_steps:
        waiting[env] = waiting.get(env, 0) + steps
    return StudyProgress(
        runs,
        evals,
        len(study.pending),
        steps_left,
        seconds_per_step,
        frozenset(unfinished),
        waiting,
        may_copy,
    )


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


def eval_done(task: EvalTask) -> bool:
    """The task's record was written and is still its study's.

    Done means the evaluation's ``done.json`` names a record file, and ``task.records_dir``
    holds that file with a record of ``task.study``, or the history beside it holds it: the
    record was superseded by another study's record of the same id (:func:`supersede`) or
    taken off the board with ``agentbench-poad leaderboard retire``. So re-running an earlier
    study neither brings its retired rows back to the board nor pushes a newer study's rows
    off it; delete the evaluation's ``done.json`` to evaluate again. The record is looked up by
    file name in ``task.records_dir``, so a checkout moved or cloned elsewhere keeps its
    finished evaluations.
    """
    from agentbench_poad.leaderboard.records import history_path, record_study

    done = Path(task.eval_dir) / "done.json"
    if not done.exists():
        return False
    try:
        path = Path(task.records_dir) / Path(json.loads(done.read_text())["record"]).name
    except (json.JSONDecodeError, KeyError, TypeError):
        return False
    if history_path(path, task.study).exists():
        return True
    try:
        return record_study(json.loads(path.read_text())) == task.study
    except (OSError, ValueError, AttributeError):
        return False


def check_portable(study: Study) -> None:
    """Before any run: records the study writes into a checkout's board will name their runs
    relative to that checkout's ``runs/`` folder
    (:func:`~agentbench_poad.leaderboard.runs.check_board_runs`).

    Raises:
        StudyError: the runs root in effect or ``--out`` would make them name absolute paths.
    """
    from agentbench_poad.leaderboard.runs import RunsNotFound, check_board_runs

    if not study.evals:
        return
    try:
        check_board_runs(study.records, [c.run_dir for c in study.cells])
    except RunsNotFound as exc:
        raise StudyError(str(exc)) from exc


def check_config_sources(study: Study) -> None:
    """Before any run: every started run of a tuned group names the spec as this call does.

    A record combines runs of one ``training.config_source`` (the spec path, as given, the
    tuning protocol and the chosen configuration), and resuming a run rewrites its
    ``config.json``. Giving the spec by another path than the study was started with (relative
    instead of absolute, another checkout) would leave the finished runs naming one path and the
    new ones another, and the record would be refused only when the last run ends, hours later.

    Raises:
        StudyError: a started run names another spec path or configuration; the message says
            which path to give.
    """
    from agentbench_poad.leaderboard.config_source import without_spec_path
    from agentbench_poad.rl.run_dir import load_run_config

    problems: dict[str, list[str]] = {}
    for cell in study.cells:
        if not cell.config_source_json or not (Path(cell.run_dir) / "config.json").exists():
            continue
        wanted = json.loads(cell.config_source_json)
        try:
            stored = load_run_config(Path(cell.run_dir)).get("config_source")
        except (OSError, ValueError):
            continue  # an unreadable config.json fails in the run itself, with its own error
        if stored is None or stored == wanted:
            continue
        key = (
            f"the spec path {stored.get('spec')!r}"
            if without_spec_path(stored) == without_spec_path(wanted)
            else f"another configuration ({json.dumps(stored, sort_keys=True)})"
        )
        problems.setdefault(key, []).append(str(cell.run_dir))
    if problems:
        lines = [
            f"{len(runs)} started run(s) name {what}, e.g. {runs[0]}"
            for what, runs in problems.items()
        ]
        raise StudyError(
            "this study's runs were started with another spec path or configuration than this "
            f"call's (spec {study.spec_path!r}):\n  "
            + "\n  ".join(lines)
            + "\na record combines runs of one config_source: give the spec by the path the runs "
            "name (or start the study in a new --out)"
        )


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
        spec: a spec path or a :class:`Study` from :func:`load_study`.
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
    result = StudyResult()
    for waiting_pair in study.pending:
        log(
            f"wait   {waiting_pair}: tuned, no configuration chosen yet (after the tuning "
            f"runs: agentbench-poad study {study.spec_path or 'SPEC'} --select)"
        )
    todo = []
    for cell in study.cells:
        state = run_state(cell)
        if state == "done":
            result.skipped_runs.append(cell.run_dir)
        else:
            anchors = anchors_for(cell, study.cells) if state == "new" else ()
            todo.append(_TrainJob(cell, device, env_executor, max_updates, anchors))
            log(
                f"{'resume' if state == 'partial' else 'train '} {cell.agent} "
                f"{cell.env_id} seed {cell.seed} -> {cell.run_dir}"
                + (
                    f" (or a copy of {anchors[0].run_dir} if its KL guard never fires)"
                    if anchors
                    else ""
                )
            )
    # A run that may be a copy of another waits until its anchors have finished (or failed):
    # it is released by `finished`, ahead of the queue (a copy takes no time).
    unfinished = {job.cell.run_dir for job in todo}
    held = [job for job in todo if job.anchors]
    todo = [job for job in todo if not job.anchors]

    def release() -> list[_TrainJob]:
        ready = [j for j in held if not any(a.run_dir in unfinished for a in j.anchors)]
        for job in ready:
            held.remove(job)
        return ready

    waiting = []
    for task in study.evals if evaluate else []:
        if eval_done(task):
            result.skipped_evals.append(task.key)
        else:
            waiting.append(task)

    def take_ready(trained_only: bool) -> list[EvalTask]:
        """Pop the waiting evaluations whose runs are all trained (evaluation-only tasks, which
        need no run, only when ``trained_only`` is False: they go after the training)."""
        ready = []
        for task in list(waiting):
            needed = study.needs.get(task.key, [])
            if trained_only and not task.run_dirs:
                continue
            if all(run_state(c) == "done" for c in study.cells if c.run_dir in needed):
                waiting.remove(task)
                ready.append(_on_device(task, device) if device else task)
                log(f"evaluate {task.key}")
        return ready

    def finished(outcome: Any) -> list[EvalTask]:
        job = outcome.cell
        if isinstance(job, _TrainJob) and outcome.ok and (outcome.value or {}).get("equivalent_to"):
            log(
                f"copied {job.cell.run_dir}: the same run as {outcome.value['equivalent_to']} "
                "(its KL guard never fired at a tighter target_kl)"
            )
        if isinstance(job, _TrainJob):
            (result.trained if outcome.ok else result.failed).append(job.cell.run_dir)
            unfinished.discard(job.cell.run_dir)
            # A record is made as soon as its runs are trained, not after the whole grid: its
            # evaluations take the next free slots while the other slots go on training, and
            # a long study stopped midway keeps every record it could already make.
            return [*release(), *(take_ready(trained_only=True) if evaluate else [])]
        if outcome.ok:
            result.records.append(outcome.value)
        else:
            result.failed.append(job.key)
        return []

    def failed(job: Any, attempt: int, error: str) -> None:
        log(f"FAILED (attempt {attempt}) {_describe(job)}: {error.splitlines()[0]}")

    with get_executor(
        executor,
        address=address,
        max_retries=max_retries,
        device=device,
        runs_per_gpu=study.runs_per_gpu,
    ) as runner:
        # Evaluations whose runs were trained by an earlier call go first; evaluation-only
        # tasks (untrained models, no runs) go after the training.
        first: list[Any] = [
            *(take_ready(trained_only=True) if evaluate else []),
            *release(),
            *todo,
        ]
        runner.map(_study_job, first, on_result=finished, on_failure=failed)
        if evaluate:
            runner.map(
                _study_job, take_ready(trained_only=False), on_result=finished, on_failure=failed
            )
    return result


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


def study_files(study: Study) -> list[Path]:
    """What to ship (commit, upload) of a study so far, for another machine to evaluate what is
    trained, continue what is not, and skip what is done: each finished run's evaluation files,
    each unfinished run's files with its exact-resume state, each finished evaluation's marker
    and record (``study --files``)."""
    from agentbench_poad.rl.run_dir import shareable_files

    files: list[Path] = []
    for cell in study.cells:
        state = run_state(cell)
        if state != "new":
            files += shareable_files(
                cell.run_dir,
                resumable=state == "partial",
                extra=("study_wall_time.json", EQUIVALENCE_NOTE),
            )
    for task in study.evals:
        if eval_done(task):
            done = Path(task.eval_dir) / "done.json"
            files += [done, Path(json.loads(done.read_text())["record"])]
    return list(dict.fromkeys(files))


def tuning_run_done(study: Study) -> Callable[[Path], bool]:
    """Whether a tuning run dir of ``study`` (of any of its protocols) holds a finished run."""
    groups = {t.group for t in study.tunings}
    tuning_cells = {c.run_dir: c for c in study.cells if c.group in groups}

    def is_done(run_dir: Path) -> bool:
        cell = tuning_cells.get(str(run_dir))
        return cell is not None and run_state(cell) == "done"

    return is_done


def select_configs(study: Study) -> list[Selection]:
    """Apply the tuning's selection rule to the finished tuning runs and write the chosen
    configurations into the spec's ``[tuning.chosen]`` (``study SPEC --select``).

    Returns:
        One :class:`~agentbench_poad.study.tuning.Selection` per tuned agent.

    Raises:
        StudyError: no tuning in the spec, unfinished tuning runs, or a spec that already chose
            other configurations.
    """
    if not study.tunings:
        raise StudyError(f"study {study.name} has no [tuning] table: nothing to select")
    if not study.tunings[0].entry:  # the single [tuning] table
        try:
            selections = select(study.tunings[0], study.out, is_done=tuning_run_done(study))
            write_chosen(Path(study.spec_path), study.tunings[0], selections)
        except ValueError as exc:
            raise StudyError(str(exc)) from None
        return selections
    done = select_all(study)
    if not done.selections:
        raise StudyError(
            "cannot select yet: no tuning protocol has finished its runs\n"
            + "\n".join(done.incomplete.values())
        )
    return [s for found in done.selections.values() for s in found]


@dataclass
class SelectAll:
    """What ``study SPEC --select`` did for each tuning protocol (:func:`select_all`)."""

    #: protocol name -> one selection per tuned agent (the protocols whose runs are complete)
    selections: dict[str, list[Selection]]
    #: protocol name -> why it cannot select yet (its runs not finished, unreadable curves)
    incomplete: dict[str, str]
    #: whether the spec changed
    wrote: bool


def select_all(study: Study) -> SelectAll:
    """Select for every tuning protocol whose runs are complete and write the choices into the
    spec (``[tuning.chosen]`` for a ``[tuning]`` table, ``[tuning_chosen.<name>]`` for
    ``[[tuning]]`` entries); the others are named in :attr:`SelectAll.incomplete`.

    Raises:
        StudyError: no tuning in the spec, or a spec that already chose other configurations.
    """
    if not study.tunings:
        raise StudyError(f"study {study.name} has no [tuning] table: nothing to select")
    is_done = tuning_run_done(study)
    selections: dict[str, list[Selection]] = {}
    incomplete: dict[str, str] = {}
    for tuning in study.tunings:
        try:
            selections[tuning.name] = select(tuning, study.out, is_done=is_done)
        except ValueError as exc:
            incomplete[tuning.name] = f"{tuning.where}: {exc}"
    try:
        if study.tunings[0].entry:
            wrote = write_chosen_all(Path(study.spec_path), study.tunings, selections)
        else:
            found = selections.get(study.tunings[0].name)
            wrote = bool(found) and write_chosen(Path(study.spec_path), study.tunings[0], found)
    except ValueError as exc:
        raise StudyError(str(exc)) from None
    return SelectAll(selections, incomplete, wrote)


def cells_table(study: Study) -> list[dict[str, Any]]:
    """The study's cells and their state (for ``study --dry-run``): a new run the study will
    copy has state ``"copy"`` and its source in ``"copy_of"``."""
    rows = []
    for c in study.cells:
        state, _, source, _ = _planned_state(c, study.cells)
        rows.append({**asdict(c), "state": state, **({"copy_of": source} if source else {})})
    rows += [
        {
            "key": t.key,
            "env_id": t.env_id,
            "group": t.group,
            "state": "done" if eval_done(t) else "todo",
        }
        for t in study.evals
    ]
    return rows


__all__ = [
    "SelectAll",
    "StudyProgress",
    "StudyResult",
    "cells_table",
    "eval_done",
    "planned_copy",
    "run_state",
    "run_study",
    "select_all",
    "select_configs",
    "study_files",
    "study_progress",
    "tuning_run_done",
]
