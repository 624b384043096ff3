"""A resumable study: a grid of (agent, env, seed) training runs and their evaluations.

A study is a small spec file (TOML or JSON, see ``studies/smollm2-cpu.toml`` and
``docs/study.md``)::

    [study]
    name = "smollm2-cpu"
    model = "smollm2-135m"          # a named model, a local directory or a hub id
    preset = "mini"                 # a key of every trained agent's Config.PRESETS
    seeds = [0, 1, 2]

    [study.total_steps]             # the env-step budget per task
    "Overcooked-TomatoSalad-v0" = 4096

    [eval]                          # the default evaluation protocol
    episodes = 10
    greedy = true

    [[group]]                       # one block of the grid
    agents = ["poad", "ntpo", "twosome"]
    envs = ["Overcooked-TomatoSalad-v0"]

    [[group]]
    label = "gw0.90"                # NTPO's gamma_w ablation: same cells, other overrides
    agents = ["ntpo"]
    envs = ["Overcooked-TomatoSalad-v0"]
    overrides = { gamma = 0.9 }

    [[group]]                       # evaluation only: an agent spec, no training
    agents = ["lm:smollm2-135m"]
    envs = ["Overcooked-TomatoSalad-v0"]

:func:`run_study` first checks the whole spec (unknown agent, env or preset, a duplicate cell,
a bad override: one error listing every problem, before any run starts), then

1. trains every cell (``<out>/runs/<env>/<agent>[__label]/seed<N>``): a finished run is skipped,
   an interrupted one resumes from its newest checkpoint (the trainer's exact resume: no logged
   step is lost or repeated), a new one starts;
2. evaluates each (group, agent, env) as soon as all its seeds are trained (evaluation-only
   agents after the training), on the training env or on
   the group's ``eval_envs`` (generalisation), and writes one leaderboard record per evaluation
   env into ``<records>`` (default ``<out>/records``) with each run's training wall time in
   ``training.run_wall_time_s``. A finished evaluation is skipped.

Cells run on an executor (``local`` or ``ray``, :mod:`agentbench_poad.executors`); a failed cell
is reported, retried, and does not stop the others. ``device="cuda"`` runs the same spec on a GPU.
``load_study(spec).select(["base-model"])`` keeps only the named groups (``study --group``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentbench_poad.rl.config import preset_for
from agentbench_poad.study_tuning import (
    TUNING_GROUP,
    Tuning,
    check_evaluation_seeds,
    read_tuning,
    select,
    write_chosen,
)

__all__ = [
    "EvalTask",
    "Study",
    "StudyError",
    "StudyResult",
    "TrainCell",
    "load_study",
    "run_study",
    "select_configs",
]

#: Keys allowed in each table of a spec (anything else is a typo and an error).
_STUDY_KEYS = {
    "name",
    "model",
    "preset",
    "seeds",
    "total_steps",
    "device",
    "env_executor",
    "overrides",
    "env_kwargs",
}
_EVAL_KEYS = {"episodes", "greedy", "seeds", "action_timeout"}
_GROUP_KEYS = {
    "name",
    "label",
    "agents",
    "envs",
    "seeds",
    "total_steps",
    "overrides",
    "eval_envs",
    "eval",
    "preset",
    "model",
    "agent_kwargs",
    "env_kwargs",
    "tuned",
}
#: Run-config fields a study must not override (the study sets them itself).
_RESERVED = {"device", "env_executor"}


class StudyError(ValueError):
    """The spec is wrong; the message lists every problem found."""


@dataclass(frozen=True)
class TrainCell:
    """One training run of the grid (picklable: it travels to Ray workers)."""

    agent: str
    env_id: str
    seed: int
    total_steps: int
    model: str
    preset: str | None
    overrides_json: str
    label: str
    run_dir: str
    env_kwargs_json: str = "{}"
    #: the spec group the cell comes from (its ``name``, or ``#N`` for the N-th unnamed group)
    group: str = ""
    #: a tuned group's ``training.config_source`` (JSON; "" for untuned cells)
    config_source_json: str = ""

    @property
    def overrides(self) -> dict[str, Any]:
        return json.loads(self.overrides_json)

    @property
    def env_kwargs(self) -> dict[str, Any]:
        return json.loads(self.env_kwargs_json)


@dataclass(frozen=True)
class EvalTask:
    """One evaluation: trained runs (``run_dirs``) or an untrained agent spec, on one env."""

    key: str
    env_id: str
    episodes: int
    greedy: bool
    eval_dir: str
    records_dir: str
    run_dirs: tuple[str, ...] = ()
    agent: str | None = None
    agent_name: str | None = None
    seeds: tuple[int, ...] = ()
    action_timeout: float | None = 60.0
    study: str = ""
    agent_kwargs_json: str = "{}"
    #: gym.make arguments of an evaluation-only agent (trained runs use their own, as trained)
    env_kwargs_json: str = "{}"
    #: the spec group the evaluation comes from (see :attr:`TrainCell.group`)
    group: str = ""
    #: the spec file the task was read from (for the record's command)
    spec: str = ""

    @property
    def command(self) -> str:
        """The command that (re)makes this task's record."""
        out = Path(self.eval_dir).parent.parent
        return (
            f"agentbench-poad study {self.spec or 'SPEC'} --out {out} --records "
            f"{self.records_dir} --group {self.group or '#1'}  # evaluation {self.key}"
        )


@dataclass
class Study:
    """A checked spec: its training cells and evaluation tasks."""

    name: str
    out: Path
    records: Path
    cells: list[TrainCell]
    evals: list[EvalTask]
    needs: dict[str, list[str]] = field(default_factory=dict)
    """Eval key -> run dirs that must be trained first."""
    groups: list[str] = field(default_factory=list)
    """The spec's group names, in order (``#N`` for the N-th unnamed group)."""
    tuning: Any = None
    """The spec's tuning protocol (:class:`~agentbench_poad.study_tuning.Tuning`) or None."""
    pending: list[str] = field(default_factory=list)
    """Tuned (group, agent) pairs waiting for ``--select`` (no cells yet)."""
    spec_path: str = ""

    def select(self, groups: Sequence[str]) -> Study:
        """The study restricted to the named groups' cells and evaluations.

        Raises:
            StudyError: a name that is not one of :attr:`groups`.
        """
        unknown = [g for g in groups if g not in self.groups]
        if unknown:
            raise StudyError(
                f"study {self.name} has no group(s) {unknown}; its groups are {self.groups}"
            )
        chosen = set(groups)
        evals = [t for t in self.evals if t.group in chosen]
        return Study(
            self.name,
            self.out,
            self.records,
            [c for c in self.cells if c.group in chosen],
            evals,
            {t.key: self.needs[t.key] for t in evals if t.key in self.needs},
            [g for g in self.groups if g in chosen],
            self.tuning,
            [p for p in self.pending if p.split(":")[0] in chosen],
            self.spec_path,
        )


@dataclass
class StudyResult:
    """What :func:`run_study` did."""

    trained: list[str] = field(default_factory=list)
    skipped_runs: list[str] = field(default_factory=list)
    records: list[str] = field(default_factory=list)
    skipped_evals: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


# -- reading and checking a spec -------------------------------------------------------------------
def _read(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise StudyError(f"{path}: not valid JSON ({exc})") from None
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise StudyError(f"{path}: not valid TOML ({exc})") from None


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-._" else "-" for c in text)


def _trainable() -> dict[str, Any]:
    from agentbench_poad.baselines import ALGORITHMS, get_algorithm

    return {name: get_algorithm(name) for name in ALGORITHMS}


def _check_agent_spec(spec: str) -> str | None:
    """None when ``spec`` names an agent the evaluation can build, else why not."""
    from agentbench_poad.agents import load_factory

    try:
        load_factory(spec)
    except (ValueError, ImportError) as exc:
        return str(exc)
    return None


def load_study(
    path: str | os.PathLike,
    *,
    out: str | os.PathLike | None = None,
    records: str | os.PathLike | None = None,
) -> Study:
    """Read and check a spec; raises :class:`StudyError` listing every problem.

    Args:
        path: the spec (``.toml`` or ``.json``).
        out: where runs go (default: ``study-runs/<name>`` under the current directory).
        records: where records go (default: ``<out>/records``).
    """
    import gymnasium as gym

    import agentbench_poad  # noqa: F401  (registers the env ids)
    import agentbench_poad.rl.toy  # noqa: F401  (and the case-study ids)

    path = Path(path)
    if not path.is_file():
        raise StudyError(f"study spec {path} does not exist")
    spec = _read(path)
    problems: list[str] = []

    def unknown_keys(table: dict, allowed: set[str], where: str) -> None:
        extra = sorted(set(table) - allowed)
        if extra:
            problems.append(f"{where}: unknown key(s) {extra}; allowed: {sorted(allowed)}")

    unknown_keys(spec, {"study", "eval", "group", "tuning"}, "top level")
    head = spec.get("study", {})
    unknown_keys(head, _STUDY_KEYS, "[study]")
    name = str(head.get("name") or path.stem)
    model = head.get("model")
    if not model:
        problems.append('[study] needs model = "<name, directory or hub id>"')
    default_eval = spec.get("eval", {})
    unknown_keys(default_eval, _EVAL_KEYS, "[eval]")
    groups = spec.get("group", [])
    if not isinstance(groups, list) or not groups:
        problems.append("the spec has no [[group]] block; add one with agents and envs")
        groups = []
    out_dir = Path(out) if out is not None else Path("study-runs") / _slug(name)
    records_dir = Path(records) if records is not None else out_dir / "records"
    trainable = _trainable()
    budgets = head.get("total_steps", {})
    if not isinstance(budgets, dict):
        problems.append("[study] total_steps must be a table: env id -> env steps")
        budgets = {}

    cells: list[TrainCell] = []
    evals: list[EvalTask] = []
    needs: dict[str, list[str]] = {}
    seen_cells: dict[tuple, str] = {}
    seen_dirs: dict[str, str] = {}
    seen_evals: dict[str, str] = {}
    group_names: list[str] = []
    pending: list[str] = []
    tuning = read_tuning(spec.get("tuning"), trainable=trainable, problems=problems)
    if tuning is not None:
        group_names.append(TUNING_GROUP)
        cells += _tuning_cells(tuning, head, model, out_dir, trainable, problems)
    for g, group in enumerate(groups):
        where = f"[[group]] #{g + 1}" + (f" ({group.get('name')})" if group.get("name") else "")
        group_name = str(group.get("name") or f"#{g + 1}")
        if group_name in group_names:
            problems.append(f"{where}: duplicate group name {group_name!r}")
        group_names.append(group_name)
        unknown_keys(group, _GROUP_KEYS, where)
        label = str(group.get("label", ""))
        agents = list(group.get("agents", []))
        envs = list(group.get("envs", []))
        if not agents or not envs:
            problems.append(f"{where}: needs agents = [...] and envs = [...]")
        seeds = [int(s) for s in group.get("seeds", head.get("seeds", [0]))]
        if len(set(seeds)) != len(seeds):
            problems.append(f"{where}: duplicate seeds {seeds}")
        tuned = group.get("tuned", False)
        if not isinstance(tuned, bool):
            problems.append(f"{where}: tuned must be true or false")
            tuned = False
        if tuned and tuning is None:
            problems.append(f"{where}: tuned = true needs a [tuning] table in the spec")
            tuned = False
        if tuning is not None:
            eval_seeds = {*seeds, *(group.get("eval", {}).get("seeds", []) or [])}
            check_evaluation_seeds(tuning, where, eval_seeds, problems)
        preset = group.get("preset", head.get("preset", "auto"))
        g_model = str(group.get("model", model or ""))
        overrides = {**head.get("overrides", {}), **group.get("overrides", {})}
        reserved = sorted(set(overrides) & _RESERVED)
        if reserved:
            problems.append(
                f"{where}: overrides may not set {reserved}; use --device / [study] env_executor"
            )
        tables = {"[study]": head.get("env_kwargs", {}), where: group.get("env_kwargs", {})}
        for table_name, table in tables.items():
            if not isinstance(table, dict):
                problems.append(f"{table_name}: env_kwargs must be a table of gym.make arguments")
        env_kwargs = {k: v for t in tables.values() if isinstance(t, dict) for k, v in t.items()}
        env_kwargs_json = json.dumps(env_kwargs, sort_keys=True)
        protocol = {**default_eval, **group.get("eval", {})}
        unknown_keys(group.get("eval", {}), _EVAL_KEYS, f"{where} eval")
        timeout = protocol.get("action_timeout", 60.0)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
            problems.append(
                f"{where}: action_timeout must be seconds >= 0 (0: no deadline), got {timeout!r}"
            )
            timeout = 60.0
        timeout = float(timeout) or None  # 0: no deadline (TOML has no null)
        eval_envs = list(group.get("eval_envs", []))
        for env_id in [*envs, *eval_envs]:
            if env_id not in gym.registry:
                problems.append(f"{where}: unknown env {env_id!r}; see `agentbench-poad envs`")
        for agent in agents:
            algorithm = trainable.get(str(agent).lower())
            if algorithm is None:
                why = (
                    _check_agent_spec(agent)
                    if ":" in agent
                    else (
                        f"not one of the trained agents {sorted(trainable)} and not an agent spec "
                        "('module:Factory', 'lm:<model>')"
                    )
                )
                if why is not None:
                    problems.append(f"{where}: unknown agent {agent!r}: {why}")
                    continue
            for env_id in envs:
                if env_id not in gym.registry:
                    continue
                if algorithm is None:  # evaluation only
                    key = f"{_slug(env_id)}__{_slug(agent)}"
                    if key in seen_evals:
                        problems.append(
                            f"{where}: duplicate cell {agent} on {env_id} (also in "
                            f"{seen_evals[key]})"
                        )
                        continue
                    seen_evals[key] = where
                    evals.append(
                        EvalTask(
                            key=key,
                            env_id=env_id,
                            episodes=int(protocol.get("episodes", 10)),
                            greedy=bool(protocol.get("greedy", True)),
                            eval_dir=str(out_dir / "evals" / key),
                            records_dir=str(records_dir),
                            agent=agent,
                            seeds=tuple(int(s) for s in protocol.get("seeds", seeds)),
                            action_timeout=timeout,
                            study=name,
                            spec=str(path),
                            agent_kwargs_json=json.dumps(
                                group.get("agent_kwargs", {}), sort_keys=True
                            ),
                            env_kwargs_json=env_kwargs_json,
                            group=group_name,
                        )
                    )
                    continue
                agent_overrides, config_source = overrides, ""
                if tuned:
                    ready, agent_overrides, config_source = _tuned_overrides(
                        tuning, algorithm.name, overrides, str(path), where, problems
                    )
                    if not ready:
                        pending.append(f"{group_name}: {algorithm.name}")
                        continue
                try:
                    family = preset_for(algorithm.config_class, env_id, preset)
                    algorithm.config_class.preset(family, **agent_overrides)
                except (TypeError, ValueError) as exc:
                    problems.append(
                        f"{where}: {agent} on {env_id} (preset {preset!r}, overrides "
                        f"{agent_overrides}): {exc}"
                    )
                    continue
                budget = group.get("total_steps", budgets.get(env_id))
                if not isinstance(budget, int) or budget < 1:
                    problems.append(
                        f"{where}: no env-step budget for {env_id}; add it to "
                        "[study.total_steps] or the group's total_steps"
                    )
                    continue
                run_name = str(algorithm.name) + (f"__{_slug(label)}" if label else "")
                group_dirs = []
                for seed in seeds:
                    identity = (
                        algorithm.name,
                        env_id,
                        seed,
                        json.dumps(agent_overrides, sort_keys=True),
                        budget,
                        g_model,
                        family,
                        env_kwargs_json,
                    )
                    run_dir = out_dir / "runs" / _slug(env_id) / run_name / f"seed{seed}"
                    if identity in seen_cells or str(run_dir) in seen_dirs:
                        problems.append(
                            f"{where}: duplicate cell {agent} on {env_id} seed "
                            f"{seed} (also in "
                            f"{seen_cells.get(identity) or seen_dirs[str(run_dir)]})"
                        )
                        continue
                    seen_cells[identity] = seen_dirs[str(run_dir)] = where
                    cells.append(
                        TrainCell(
                            algorithm.name,
                            env_id,
                            seed,
                            budget,
                            g_model,
                            family,
                            json.dumps(agent_overrides, sort_keys=True),
                            label,
                            str(run_dir),
                            env_kwargs_json,
                            group_name,
                            config_source,
                        )
                    )
                    group_dirs.append(str(run_dir))
                for target in eval_envs or [env_id]:
                    key = f"{_slug(target)}__{run_name}__trainedon-{_slug(env_id)}"
                    needs[key] = group_dirs
                    evals.append(
                        EvalTask(
                            key=key,
                            env_id=target,
                            episodes=int(protocol.get("episodes", 10)),
                            greedy=bool(protocol.get("greedy", True)),
                            eval_dir=str(out_dir / "evals" / key),
                            records_dir=str(records_dir),
                            run_dirs=tuple(group_dirs),
                            agent_name=run_name.replace("__", "-"),
                            action_timeout=timeout,
                            study=name,
                            spec=str(path),
                            group=group_name,
                        )
                    )
    problems = list(dict.fromkeys(problems))  # one line per problem, not per seed
    if problems:
        raise StudyError(
            f"study spec {path} has {len(problems)} problem(s); nothing was run:\n"
            + "\n".join(f"  - {p}" for p in problems)
        )
    return Study(
        name, out_dir, records_dir, cells, evals, needs, group_names, tuning, pending, str(path)
    )


def _tuning_cells(
    tuning: Tuning,
    head: dict[str, Any],
    model: Any,
    out_dir: Path,
    trainable: dict[str, Any],
    problems: list[str],
) -> list[TrainCell]:
    """The tuning runs (group ``tuning``): every agent x configuration x tuning seed."""
    import gymnasium as gym

    if tuning.task not in gym.registry:
        problems.append(f"[tuning]: unknown task {tuning.task!r}; see `agentbench-poad envs`")
        return []
    preset = head.get("preset", "auto")
    env_kwargs = {**head.get("env_kwargs", {}), **tuning.env_kwargs}
    cells = []
    for agent, index, configuration, seed, run_dir in tuning.runs(out_dir):
        algorithm = trainable[agent]
        overrides = {**head.get("overrides", {}), **configuration}
        reserved = sorted(set(overrides) & _RESERVED)
        try:
            if reserved:
                raise ValueError(f"may not set {reserved}")
            family = preset_for(algorithm.config_class, tuning.task, preset)
            algorithm.config_class.preset(family, **overrides)
        except (TypeError, ValueError) as exc:
            problems.append(f"[tuning]: {agent} configuration {configuration}: {exc}")
            continue
        cells.append(
            TrainCell(
                agent,
                tuning.task,
                seed,
                tuning.searches[agent].total_steps,
                str(model or ""),
                family,
                json.dumps(overrides, sort_keys=True),
                f"config{index}",
                str(run_dir),
                json.dumps(env_kwargs, sort_keys=True),
                TUNING_GROUP,
            )
        )
    return cells


def _tuned_overrides(
    tuning: Tuning,
    agent: str,
    overrides: dict[str, Any],
    spec: str,
    where: str,
    problems: list[str],
) -> tuple[bool, dict[str, Any], str]:
    """A tuned group's overrides for ``agent``: ``(chosen yet, overrides, config_source JSON)``."""
    if agent not in tuning.searches:
        problems.append(f"{where}: tuned = true, but {agent} is not in [tuning] agents")
        return False, overrides, ""
    clash = sorted(set(overrides) & tuning.tuned_keys(agent))
    if clash:
        problems.append(
            f"{where}: overrides set {clash}, which the tuning chooses; drop them from the group"
        )
        return False, overrides, ""
    if agent not in tuning.chosen:
        return False, overrides, ""
    source = json.dumps(tuning.config_source(spec, agent), sort_keys=True)
    return True, {**overrides, **tuning.chosen[agent]}, source


def select_configs(study: Study) -> list[Any]:
    """Apply the tuning's selection rule to the finished tuning runs and write the chosen
    configurations into the spec's ``[tuning.chosen]`` (``study SPEC --select``).

    Returns:
        One :class:`~agentbench_poad.study_tuning.Selection` per tuned agent.

    Raises:
        StudyError: no tuning in the spec, unfinished tuning runs, or a spec that already chose
            other configurations.
    """
    if study.tuning is None:
        raise StudyError(f"study {study.name} has no [tuning] table: nothing to select")
    tuning_cells = {c.run_dir: c for c in study.cells if c.group == TUNING_GROUP}
    try:
        selections = select(
            study.tuning,
            study.out,
            is_done=lambda run_dir: (
                str(run_dir) in tuning_cells and run_state(tuning_cells[str(run_dir)]) == "done"
            ),
        )
        write_chosen(Path(study.spec_path), study.tuning, selections)
    except ValueError as exc:
        raise StudyError(str(exc)) from None
    return selections


# -- running ------------------------------------------------------------------------------------
def run_state(cell: TrainCell) -> str:
    """``"done"``, ``"partial"`` (resumable) or ``"new"``."""
    from agentbench_poad.rl.trainer import latest_checkpoint

    run_dir = Path(cell.run_dir)
    if not (run_dir / "config.json").exists():
        return "new"
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        return "partial"
    state = json.loads((checkpoint / "state.json").read_text())
    config = json.loads((run_dir / "config.json").read_text())
    batch = config["algorithm"]["num_envs"] * config["algorithm"]["rollout_length"]
    return "done" if state["update"] >= cell.total_steps // batch else "partial"


@dataclass(frozen=True)
class _TrainJob:
    cell: TrainCell
    device: str | None
    env_executor: str | None
    max_updates: int | None


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


class WallTimeLog:
    """Adds one session's wall time to ``<run_dir>/study_wall_time.json``, as it runs.

    The file holds ``{"seconds": total, "sessions": n}`` summed over the run's sessions. While
    the ``with`` block runs, a daemon thread rewrites it (atomically) every ``interval`` seconds,
    and once more on exit, also on an exception or Ctrl-C; so a session ended by SIGKILL or a
    machine restart loses at most ``interval`` seconds, not its whole time. Nothing is written
    before ``run_dir`` exists (the trainer creates it).
    """

    def __init__(self, run_dir: str | os.PathLike, interval: float = 30.0) -> None:
        import threading

        self.path = Path(run_dir) / "study_wall_time.json"
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._flush_every, daemon=True)
        self._before = (0.0, 0)
        self._started = 0.0

    def __enter__(self) -> WallTimeLog:
        self._before = _read_wall_time(self.path) or (0.0, 0)
        self._started = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()  # the last flush is ours alone
        self.flush()

    def flush(self) -> None:
        from agentbench_poad.leaderboard.records import write_json_atomic

        seconds, sessions = self._before
        data = {"seconds": seconds + time.perf_counter() - self._started, "sessions": sessions + 1}
        if self.path.parent.exists():
            write_json_atomic(self.path, data)

    def _flush_every(self) -> None:
        while not self._stop.wait(self.interval):
            self.flush()


def _read_wall_time(path: Path) -> tuple[float, int] | None:
    """``study_wall_time.json`` as (seconds, sessions); None when missing or corrupt."""
    try:
        data = json.loads(path.read_text())
        return float(data["seconds"]), int(data["sessions"])
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def run_wall_time(run_dir: str | os.PathLike) -> float | None:
    """Training wall time of a run made by a study (all its sessions), or None."""
    counted = _read_wall_time(Path(run_dir) / "study_wall_time.json")
    return None if counted is None else counted[0]


def run_update_time(run_dir: str | os.PathLike) -> float | None:
    """Seconds the logged updates took (rollout and PPO update; not evaluation or checkpointing).

    Read back from ``metrics.jsonl``, so it survives a SIGKILL that loses a session's
    ``study_wall_time.json`` entry: a lower bound on the training wall time. None without metrics.
    """
    from agentbench_poad.rl.run_dir import RunDirectory

    try:
        rows = RunDirectory(run_dir).read_metrics()
    except FileNotFoundError:
        return None
    seconds, steps = 0.0, 0
    for row in rows:
        rate, now = row.get("steps_per_second"), row.get("env_steps")
        if isinstance(rate, (int, float)) and rate > 0 and isinstance(now, int):
            seconds += (now - steps) / rate
            steps = now
    return seconds if rows else None


def _eval_job(task: EvalTask) -> str:
    """Evaluate one task, write its record; returns the record path."""
    from agentbench_poad.leaderboard.from_run import record_from_runs
    from agentbench_poad.leaderboard.records import write_record

    eval_dir = Path(task.eval_dir)
    eval_dir.mkdir(parents=True, exist_ok=True)
    study = {"study": task.study, "group": task.group, "eval_key": task.key}
    if task.run_dirs:
        configs = [json.loads((Path(r) / "config.json").read_text()) for r in task.run_dirs]
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
    write_record(path, record)
    (eval_dir / "done.json").write_text(json.dumps({"record": str(path)}) + "\n")
    return str(path)


def eval_done(task: EvalTask) -> bool:
    """The task's record was written (and still exists)."""
    done = Path(task.eval_dir) / "done.json"
    if not done.exists():
        return False
    try:
        return Path(json.loads(done.read_text())["record"]).exists()
    except (json.JSONDecodeError, KeyError):
        return False


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
            todo.append(_TrainJob(cell, device, env_executor, max_updates))
            log(
                f"{'resume' if state == 'partial' else 'train '} {cell.agent} "
                f"{cell.env_id} seed {cell.seed} -> {cell.run_dir}"
            )
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

    with get_executor(executor, address=address, max_retries=max_retries) as runner:

        def failed(job: Any, attempt: int, error: str) -> None:
            log(f"FAILED (attempt {attempt}) {_describe(job)}: {error.splitlines()[0]}")

        def run_evals(tasks: list[EvalTask]) -> None:
            for outcome in runner.map(_eval_job, tasks, on_failure=failed):
                if outcome.ok:
                    result.records.append(outcome.value)
                else:
                    result.failed.append(outcome.cell.key)

        def trained(outcome: Any) -> None:
            if outcome.ok:
                result.trained.append(outcome.cell.cell.run_dir)
            else:
                result.failed.append(outcome.cell.cell.run_dir)
            # A record is written as soon as its runs are trained, not after the whole grid:
            # a long study stopped midway keeps every record it could already make.
            if evaluate:
                run_evals(take_ready(trained_only=True))

        runner.map(_train_job, todo, on_result=trained, on_failure=failed)
        if evaluate:
            run_evals(take_ready(trained_only=False))
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
                cell.run_dir, resumable=state == "partial", extra=("study_wall_time.json",)
            )
    for task in study.evals:
        if eval_done(task):
            done = Path(task.eval_dir) / "done.json"
            files += [done, Path(json.loads(done.read_text())["record"])]
    return list(dict.fromkeys(files))


def cells_table(study: Study) -> list[dict[str, Any]]:
    """The study's cells and their state (for ``study --dry-run``)."""
    rows = [{**asdict(c), "state": run_state(c)} for c in study.cells]
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
