"""Where a study stands and what it will do, without running anything: each run's state
(:func:`run_state`, ``"copy"`` for a run it will copy), each evaluation's (:func:`eval_done`),
the ``--dry-run`` table and progress, the files to ship (``--files``), and the checks a run
makes before its first cell."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentbench_poad.study.equivalence import NOTE as EQUIVALENCE_NOTE
from agentbench_poad.study.equivalence import anchors_for, find_equivalent
from agentbench_poad.study.grid import EvalTask, Study, TrainCell
from agentbench_poad.study.specfile import StudyError
from agentbench_poad.study.wall_time import run_wall_time

__all__ = [
    "StudyProgress",
    "cells_table",
    "check_config_sources",
    "check_portable",
    "eval_done",
    "planned_copy",
    "run_state",
    "study_files",
    "study_progress",
]


# -- the state of runs and evaluations ------------------------------------------------------------
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


def eval_done(task: EvalTask) -> bool:
    """The task's record was written and is still its study's.

    Done means the evaluation's ``done.json`` names a record file, and ``task.records_dir``
    holds that file with a record of ``task.study``, or the history beside it holds it: the
    record was superseded by another study's record of the same id
    (:func:`~agentbench_poad.study.run.supersede`) or taken off the board with
    ``agentbench-poad leaderboard retire``. So re-running an earlier study neither brings its
    retired rows back to the board nor pushes a newer study's rows off it; delete the
    evaluation's ``done.json`` to evaluate again. The record is looked up by file name in
    ``task.records_dir``, so a checkout moved or cloned elsewhere keeps its finished
    evaluations.
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


# -- checks before any run ------------------------------------------------------------------------
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


# -- what --dry-run and --files print -------------------------------------------------------------
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
