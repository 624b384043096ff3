"""Reading and checking a study spec: the grid of training cells and evaluation tasks.

:func:`load_study` reads a TOML or JSON spec (the format is in the docstring of
:mod:`agentbench_poad.study` and in ``docs/study.md``), checks all of it (unknown agent, env or
preset, a duplicate cell, a bad override: one :class:`StudyError` listing every problem) and
expands it into a :class:`Study`: its :class:`TrainCell` runs and :class:`EvalTask` evaluations.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentbench_poad.rl.config import preset_for
from agentbench_poad.study.tuning import (
    CHOSEN_TABLE,
    Tuning,
    check_evaluation_seeds,
    read_tunings,
)

__all__ = ["EvalTask", "Study", "StudyError", "TrainCell", "load_study"]

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
    "runs_per_gpu",
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
    "tuning",
    "exploratory",
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
    #: the group is exploratory (too few seeds for verdicts): its records say so
    #: (``config.study.exploratory``) and the board labels their rows "[exploratory]"
    exploratory: bool = False

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
    tuning: Tuning | None = None
    """The spec's tuning protocol (:mod:`agentbench_poad.study.tuning`) when it has exactly
    one (its ``[tuning]`` table or a single ``[[tuning]]`` entry), else None: see
    :attr:`tunings`."""
    pending: list[str] = field(default_factory=list)
    """Tuned ``"group: agent"`` pairs waiting for ``--select`` (they have no cells yet); a pair
    of a ``[[tuning]]`` entry ends in ``" (tuning protocol '<name>')"``."""
    spec_path: str = ""
    runs_per_gpu: int = 1
    """Runs that share one GPU under ``--executor ray --device cuda`` (``[study] runs_per_gpu``;
    each run asks Ray for ``1 / runs_per_gpu`` of a GPU; docs/scale-out.md)."""
    tunings: list[Tuning] = field(default_factory=list)
    """Every tuning protocol of the spec, in spec order (empty without tuning)."""
    pending_steps: list[tuple[str, str, int]] = field(default_factory=list)
    """``(group, env id, env steps)`` of every tuned pair waiting for ``--select``: its seeds
    times its budget, the training it will add (``study --dry-run`` estimates its time)."""

    def select(self, groups: Sequence[str]) -> Study:
        """The study restricted to the named groups' cells and evaluations.

        A name that is not a group but the prefix of some (``tuning`` for the groups
        ``tuning/<name>`` of several ``[[tuning]]`` entries) selects every group under it.

        Raises:
            StudyError: a name that is neither one of :attr:`groups` nor a prefix of one.
        """
        chosen: set[str] = set()
        unknown = []
        for name in groups:
            under = (
                [name]
                if name in self.groups
                else [g for g in self.groups if g.startswith(name.rstrip("/") + "/")]
            )
            if not under:
                unknown.append(name)
            chosen.update(under)
        if unknown:
            raise StudyError(
                f"study {self.name} has no group(s) {unknown}; its groups are {self.groups}"
            )
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
            self.runs_per_gpu,
            self.tunings,
            [w for w in self.pending_steps if w[0] in chosen],
        )


# -- reading and checking a spec -------------------------------------------------------------------
def _read(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise StudyError(f"{path}: not valid JSON ({exc})") from None
    from agentbench_poad.study import tomlcompat

    try:
        return tomlcompat.loads(text)
    except tomlcompat.TOMLDecodeError as exc:
        raise StudyError(f"{path}: not valid TOML ({exc})") from None


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-._" else "-" for c in text)


def _trainable(
    specs: Sequence[str] = (), base: Path | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """The algorithms a spec may train: the built-in ones by name, and each class spec among
    ``specs`` (``"pkg.module:Class"``, ``"path/to/file.py:Class"``) that names a
    :class:`~agentbench_poad.rl.ppo.PPOAgent` subclass, by the spec as written and by its
    ``name``. A spec naming anything else is an evaluation-only agent (a prompted agent's
    factory). A file path is read relative to the current directory, else to ``base`` (the
    study spec's folder).

    Returns:
        ``(trainable, broken)``: spec or name -> algorithm class; spec -> why it is unusable
        (it does not import, or it subclasses PPOAgent but is no complete algorithm).
    """
    from agentbench_poad.baselines import ALGORITHMS, get_algorithm
    from agentbench_poad.rl.algorithm import (
        AlgorithmError,
        NotAnAlgorithm,
        is_algorithm_spec,
        load_algorithm,
        normalize_spec,
    )

    trainable: dict[str, Any] = {name: get_algorithm(name) for name in ALGORITHMS}
    broken: dict[str, str] = {}
    for spec in dict.fromkeys(s for s in specs if isinstance(s, str)):
        if spec.lower() in ALGORITHMS or not is_algorithm_spec(spec):
            continue
        resolved = normalize_spec(spec)
        file = resolved.rpartition(":")[0]
        if resolved != spec and base is not None and not Path(file).exists():
            resolved = normalize_spec(spec, base)
        try:
            algorithm = load_algorithm(resolved, reserved=ALGORITHMS)
        except NotAnAlgorithm:
            continue  # an evaluation-only agent
        except AlgorithmError as exc:
            broken[spec] = str(exc)
            continue
        other = trainable.get(algorithm.name)
        if other is not None and _cell_agent(other) != _cell_agent(algorithm):
            broken[spec] = (
                f"its name {algorithm.name!r} is also the name of {_cell_agent(other)!r}; "
                "algorithms in one study need distinct names (they name runs and board rows)"
            )
            continue
        trainable[spec] = trainable[algorithm.name] = algorithm
    return trainable, broken


def _cell_agent(algorithm: Any) -> str:
    """How a training cell names its algorithm: a built-in by name, a user's algorithm by the
    spec that loads it from any directory (a file path made absolute)."""
    from agentbench_poad.baselines import ALGORITHMS, get_algorithm
    from agentbench_poad.rl.algorithm import loaded_spec

    name = str(algorithm.name)
    if name in ALGORITHMS and get_algorithm(name) is algorithm:
        return name
    return loaded_spec(algorithm) or name


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

    unknown_keys(spec, {"study", "eval", "group", "tuning", CHOSEN_TABLE}, "top level")
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
    agent_specs = [a for g in groups if isinstance(g, dict) for a in g.get("agents", []) or []]
    tuning_value = spec.get("tuning")
    tuning_tables = tuning_value if isinstance(tuning_value, list) else [tuning_value]
    tuned_agents = []
    for table in tuning_tables:
        listed = table.get("agents", []) if isinstance(table, dict) else []
        tuned_agents += listed if isinstance(listed, list) else []
    trainable, broken = _trainable([*tuned_agents, *agent_specs], path.parent)
    for agent in tuned_agents:
        if isinstance(agent, str) and agent in broken:
            problems.append(f"[tuning]: agent {agent!r}: {broken[agent]}")
    runs_per_gpu = head.get("runs_per_gpu", 1)
    if not isinstance(runs_per_gpu, int) or isinstance(runs_per_gpu, bool) or runs_per_gpu < 1:
        problems.append(f"[study] runs_per_gpu must be an int >= 1, got {runs_per_gpu!r}")
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
    pending_steps: list[tuple[str, str, int]] = []
    tunings = read_tunings(
        tuning_value, spec.get(CHOSEN_TABLE), trainable=trainable, problems=problems
    )
    by_name = {t.name: t for t in tunings}
    earlier: list[tuple[str, dict[str, set[int]]]] | None = None  # read once, when needed
    for tuning in tunings:
        group_names.append(tuning.group)
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
        exploratory = group.get("exploratory", False)
        if not isinstance(exploratory, bool):
            problems.append(f"{where}: exploratory must be true or false")
            exploratory = False
        tuning = _group_tuning(group, tuned, tunings, by_name, where, problems)
        if tuned and not tunings:
            problems.append(f"{where}: tuned = true needs a [tuning] table in the spec")
        tuned = tuned and tuning is not None
        if tunings:
            eval_seeds = {*seeds, *(group.get("eval", {}).get("seeds", []) or [])}
            if len(tunings) == 1:  # the single protocol: every group, whatever its task
                check_evaluation_seeds(tunings[0], where, eval_seeds, problems)
            else:  # its own protocol, and every protocol that tunes on a task it evaluates
                tasks = {*(group.get("envs") or []), *(group.get("eval_envs") or [])}
                for other in tunings:
                    if other is tuning or other.task in tasks:
                        check_evaluation_seeds(other, where, eval_seeds, problems)
            if earlier is None:
                earlier = earlier_evaluation_seeds(path)
            _check_fresh_seeds(where, group, default_eval, seeds, earlier, problems)
        # A tuned group trains the model and preset its protocol tuned (the study's by default).
        preset = group.get("preset", head.get("preset", "auto"))
        g_model = str(group.get("model", model or ""))
        if tuned and tuning is not None:
            preset, g_model = _tuned_setup(tuning, group, preset, g_model, where, problems)
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
        eval_task = functools.partial(  # what every evaluation of this group shares
            _eval_task,
            protocol=protocol,
            out_dir=out_dir,
            records_dir=records_dir,
            action_timeout=timeout,
            study=name,
            spec=str(path),
            group=group_name,
            exploratory=exploratory,
        )
        eval_envs = list(group.get("eval_envs", []))
        for env_id in [*envs, *eval_envs]:
            if env_id not in gym.registry:
                problems.append(f"{where}: unknown env {env_id!r}; see `agentbench-poad envs`")
        group_start = len(cells)
        for agent in agents:
            agent = str(agent)
            if agent in broken:
                problems.append(f"{where}: agent {agent!r}: {broken[agent]}")
                continue
            algorithm = trainable.get(agent) or trainable.get(agent.lower())
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
                        eval_task(
                            key,
                            env_id,
                            agent=agent,
                            seeds=tuple(int(s) for s in protocol.get("seeds", seeds)),
                            agent_kwargs_json=json.dumps(
                                group.get("agent_kwargs", {}), sort_keys=True
                            ),
                            env_kwargs_json=env_kwargs_json,
                        )
                    )
                    continue
                agent_overrides, config_source = overrides, ""
                budget = group.get("total_steps", budgets.get(env_id))
                if tuned:
                    ready, agent_overrides, config_source = _tuned_overrides(
                        tuning, algorithm.name, overrides, str(path), where, problems
                    )
                    if not ready:
                        pending.append(
                            f"{group_name}: {algorithm.name}"
                            + (f" (tuning protocol {tuning.name!r})" if tuning.entry else "")
                        )
                        if isinstance(budget, int) and budget > 0:
                            pending_steps.append((group_name, env_id, budget * len(seeds)))
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
                if not isinstance(budget, int) or budget < 1:
                    problems.append(
                        f"{where}: no env-step budget for {env_id}; add it to "
                        "[study.total_steps] or the group's total_steps"
                    )
                    continue
                # Built-ins by name; a user's algorithm by the spec that loads it anywhere.
                cell_agent = _cell_agent(algorithm)
                run_name = _slug(str(algorithm.name)) + (f"__{_slug(label)}" if label else "")
                group_dirs = []
                for seed in seeds:
                    identity = (
                        cell_agent,
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
                            cell_agent,
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
                        eval_task(
                            key,
                            target,
                            run_dirs=tuple(group_dirs),
                            agent_name=run_name.replace("__", "-"),
                        )
                    )
        # Seed by seed across the group's agents and envs (as the tuning runs): a study stopped
        # part-way has trained every agent of the group on the same seeds.
        order = {seed: i for i, seed in enumerate(seeds)}
        cells[group_start:] = sorted(cells[group_start:], key=lambda c: order[c.seed])
    problems = list(dict.fromkeys(problems))  # one line per problem, not per seed
    if problems:
        raise StudyError(
            f"study spec {path} has {len(problems)} problem(s); nothing was run:\n"
            + "\n".join(f"  - {p}" for p in problems)
        )
    study = Study(
        name,
        out_dir,
        records_dir,
        cells,
        evals,
        needs,
        group_names,
        tunings[0] if len(tunings) == 1 else None,
        pending,
        str(path),
        runs_per_gpu,
        tunings,
        pending_steps,
    )
    return study


def _group_tuning(
    group: dict[str, Any],
    tuned: bool,
    tunings: Sequence[Tuning],
    by_name: dict[str, Tuning],
    where: str,
    problems: list[str],
) -> Tuning | None:
    """The protocol that tunes ``group``: the one its ``tuning = "<name>"`` names, or the only
    one; None for an untuned group (and, after a problem, for a tuned one)."""
    named = group.get("tuning")
    if named is not None and not tuned:
        problems.append(
            f"{where}: tuning = {named!r} names a tuning protocol, but the group is not tuned; "
            "add tuned = true (or drop tuning)"
        )
        return None
    if not tuned or not tunings:
        return None
    names = [t.name for t in tunings]
    if named is None:
        if len(tunings) == 1:
            return tunings[0]
        problems.append(
            f"{where}: tuned = true, but the spec has {len(tunings)} tuning protocols {names}; "
            'name one with tuning = "<name>"'
        )
        return None
    if not isinstance(named, str) or named not in by_name:
        problems.append(
            f"{where}: tuning = {named!r} is no tuning protocol of the spec; use one of {names}"
        )
        return None
    return by_name[named]


def _tuned_setup(
    tuning: Tuning,
    group: dict[str, Any],
    preset: Any,
    model: str,
    where: str,
    problems: list[str],
) -> tuple[Any, str]:
    """A tuned group's ``(preset, model)``: its protocol's where the protocol sets them (a
    choice made for one model or preset does not carry over to another)."""
    for key, own in (("preset", tuning.preset), ("model", tuning.model)):
        if own is None:
            continue
        if key in group and group[key] != own:
            problems.append(
                f"{where}: {key} = {group[key]!r}, but its protocol {tuning.where} tuned "
                f"{key} {own!r}; drop the group's {key} (or tune it with that {key})"
            )
    return (
        tuning.preset if tuning.preset is not None else preset,
        tuning.model if tuning.model is not None else model,
    )


# -- fresh evaluation seeds ----------------------------------------------------------------------
def evaluation_seeds(
    group: dict[str, Any], default_eval: dict[str, Any], seeds: Sequence[int]
) -> dict[str, set[int]]:
    """Env id -> the seeds a spec group evaluates on: its seeds (a trained agent is evaluated on
    its training seeds) and its evaluation protocol's, on its envs and its ``eval_envs``."""
    protocol = {**default_eval, **(group.get("eval") or {})}
    found = {int(s) for s in [*seeds, *(protocol.get("seeds") or [])]}
    envs = [*(group.get("envs") or []), *(group.get("eval_envs") or [])]
    return {str(env): set(found) for env in envs}


def earlier_evaluation_seeds(path: Path) -> list[tuple[str, dict[str, set[int]]]]:
    """The evaluation seeds of every other study spec beside ``path`` (``*.toml`` and
    ``*.json`` in its folder, e.g. ``studies/``): ``(spec file name, env id -> seeds)``. A
    file that does not read as a spec with ``[[group]]`` blocks is no study and is skipped."""
    found = []
    for other in sorted([*path.parent.glob("*.toml"), *path.parent.glob("*.json")]):
        if other.resolve() == path.resolve():
            continue
        try:
            spec = _read(other)
        except (StudyError, OSError, UnicodeDecodeError):
            continue
        groups = spec.get("group") if isinstance(spec, dict) else None
        if not isinstance(groups, list):
            continue
        head = spec.get("study") if isinstance(spec.get("study"), dict) else {}
        default_eval = spec.get("eval") if isinstance(spec.get("eval"), dict) else {}
        by_env: dict[str, set[int]] = {}
        for group in groups:
            if not isinstance(group, dict):
                continue
            try:
                seeds = [int(s) for s in group.get("seeds", head.get("seeds", [0]))]
                for env, env_seeds in evaluation_seeds(group, default_eval, seeds).items():
                    by_env.setdefault(env, set()).update(env_seeds)
            except (TypeError, ValueError, AttributeError):
                continue  # a malformed group: that spec's own load names it
        found.append((other.name, by_env))
    return found


def _check_fresh_seeds(
    where: str,
    group: dict[str, Any],
    default_eval: dict[str, Any],
    seeds: Sequence[int],
    earlier: Sequence[tuple[str, dict[str, set[int]]]],
    problems: list[str],
) -> None:
    """A tuned study evaluates on seeds no earlier study evaluated on, per task: each overlap
    with another spec beside it is a problem naming the spec, the task and the seeds. (Tuning
    seeds may be shared across studies; evaluation seeds may not.)"""
    for env, mine in evaluation_seeds(group, default_eval, seeds).items():
        for name, by_env in earlier:
            overlap = sorted(mine & by_env.get(env, set()))
            if overlap:
                problems.append(
                    f"{where}: evaluation seeds {overlap} on {env} were evaluation seeds of "
                    f"the study {name}; evaluate on seeds no earlier study looked at"
                )


def _eval_task(
    key: str,
    env_id: str,
    *,
    protocol: dict[str, Any],
    out_dir: Path,
    records_dir: Path,
    **fields: Any,
) -> EvalTask:
    """An evaluation of a study group under its protocol, in ``out_dir/evals/<key>``."""
    return EvalTask(
        key=key,
        env_id=env_id,
        episodes=int(protocol.get("episodes", 10)),
        greedy=bool(protocol.get("greedy", True)),
        eval_dir=str(out_dir / "evals" / key),
        records_dir=str(records_dir),
        **fields,
    )


def _tuning_cells(
    tuning: Tuning,
    head: dict[str, Any],
    model: Any,
    out_dir: Path,
    trainable: dict[str, Any],
    problems: list[str],
) -> list[TrainCell]:
    """The tuning runs (group :attr:`Tuning.group`): every agent x configuration x tuning seed,
    with the protocol's model and preset (default: the study's)."""
    import gymnasium as gym

    if tuning.task not in gym.registry:
        problems.append(f"{tuning.where}: unknown task {tuning.task!r}; see `agentbench-poad envs`")
        return []
    preset = tuning.preset if tuning.preset is not None else head.get("preset", "auto")
    if tuning.model is not None:
        model = tuning.model
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
            problems.append(f"{tuning.where}: {agent} configuration {configuration}: {exc}")
            continue
        cells.append(
            TrainCell(
                _cell_agent(algorithm),
                tuning.task,
                seed,
                tuning.searches[agent].total_steps,
                str(model or ""),
                family,
                json.dumps(overrides, sort_keys=True),
                f"config{index}",
                str(run_dir),
                json.dumps(env_kwargs, sort_keys=True),
                tuning.group,
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
        problems.append(f"{where}: tuned = true, but {agent} is not in {tuning.where} agents")
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
