"""Reading and checking a study spec: :func:`load_study`.

The format is in the docstring of :mod:`agentbench_poad.study` and in docs/study.md. The spec is
read by a chain of small readers that share one :class:`_Reading` (the spec's head, what they
have built so far, and one ``problems`` list): :func:`_read_head`, then the tuning cells, then for
each group :func:`_read_group` and its agents' :func:`_trained_cells` or :func:`_eval_only`.
Every problem is reported at once in one :class:`~agentbench_poad.study.specfile.StudyError`.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentbench_poad.rl.config import preset_for
from agentbench_poad.study.agents import cell_agent, check_agent_spec, spec_agents
from agentbench_poad.study.grid import EvalTask, Study, TrainCell
from agentbench_poad.study.seeds import EarlierSeeds, check_group_seeds, earlier_evaluation_seeds
from agentbench_poad.study.specfile import StudyError, read_spec, slug
from agentbench_poad.study.tuning import CHOSEN_TABLE, Tuning, read_tunings

__all__ = ["load_study"]

#: Keys allowed in each table of a spec (anything else is a typo and an error).
_TOP_KEYS = {"study", "eval", "group", "tuning", CHOSEN_TABLE}
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


def load_study(
    path: str | os.PathLike,
    *,
    out: str | os.PathLike | None = None,
    records: str | os.PathLike | None = None,
    import_agents: bool = True,
) -> Study:
    """Read and check a spec; raises :class:`StudyError` listing every problem.

    Args:
        path: the spec (``.toml`` or ``.json``).
        out: where runs go (default: ``study-runs/<name>`` under the current directory).
        records: where records go (default: ``<out>/records``).
        import_agents: import the code the spec's agents name (a file or a module other than
            the package's own agents) to check it and learn what it trains. False (``study
            --dry-run``, ``--files``) runs none of it: those agents are left out, each named in
            :attr:`Study.unchecked`.
    """
    import agentbench_poad  # noqa: F401  (registers the env ids)
    import agentbench_poad.rl.toy  # noqa: F401  (and the case-study ids)

    path = Path(path)
    if not path.is_file():
        raise StudyError(f"study spec {path} does not exist")
    reading = _read_head(path, read_spec(path), out, records, import_agents)
    for tuning in reading.tunings:
        reading.group_names.append(tuning.group)
        reading.cells += _tuning_cells(
            tuning, reading.head, reading.model, reading.out, reading.trainable, reading.problems
        )
    for index, table in enumerate(reading.groups):
        group = _read_group(reading, index, table)
        start = len(reading.cells)
        for agent in group.agents:
            _agent_cells(reading, group, str(agent))
        # Seed by seed across the group's agents and envs (as the tuning runs): a study stopped
        # part-way has trained every agent of the group on the same seeds.
        order = {seed: i for i, seed in enumerate(group.seeds)}
        reading.cells[start:] = sorted(reading.cells[start:], key=lambda c: order[c.seed])
    problems = list(dict.fromkeys(reading.problems))  # one line per problem, not per seed
    if problems:
        raise StudyError(
            f"study spec {path} has {len(problems)} problem(s); nothing was run:\n"
            + "\n".join(f"  - {p}" for p in problems)
        )
    return reading.study()


@dataclass
class _Reading:
    """One spec being read: its head (what every group inherits), what the readers have built so
    far, and the problems they found."""

    path: Path
    head: dict[str, Any]
    default_eval: dict[str, Any]
    groups: list[Any]
    name: str
    model: Any
    out: Path
    records: Path
    #: spec or name -> algorithm class; spec -> why it is unusable; specs not imported
    #: (:class:`~agentbench_poad.study.agents.SpecAgents`)
    trainable: dict[str, Any]
    broken: dict[str, str]
    not_imported: frozenset[str]
    runs_per_gpu: Any
    budgets: dict[str, Any]
    problems: list[str]
    tunings: list[Tuning] = field(default_factory=list)
    cells: list[TrainCell] = field(default_factory=list)
    evals: list[EvalTask] = field(default_factory=list)
    needs: dict[str, list[str]] = field(default_factory=dict)
    group_names: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    pending_steps: list[tuple[str, str, int]] = field(default_factory=list)
    #: (group, agent spec) of the agents left out because their code was not imported
    unchecked: list[tuple[str, str]] = field(default_factory=list)
    #: where each training cell (by identity) and run dir, and each evaluation-only key, was read
    seen_cells: dict[tuple, str] = field(default_factory=dict)
    seen_dirs: dict[str, str] = field(default_factory=dict)
    seen_evals: dict[str, str] = field(default_factory=dict)
    #: the evaluation seeds of the studies beside the spec (read once, when a tuned spec needs it)
    earlier: EarlierSeeds | None = None

    def study(self) -> Study:
        return Study(
            name=self.name,
            out=self.out,
            records=self.records,
            cells=self.cells,
            evals=self.evals,
            needs=self.needs,
            groups=self.group_names,
            tuning=self.tunings[0] if len(self.tunings) == 1 else None,
            pending=self.pending,
            spec_path=str(self.path),
            runs_per_gpu=self.runs_per_gpu,
            tunings=self.tunings,
            pending_steps=self.pending_steps,
            unchecked=self.unchecked,
        )


def _check_record_env_kwargs(env_kwargs: dict[str, Any], where: str, problems: list[str]) -> None:
    """The env kwargs a record may carry (leaderboard/loadable.py): refused here, before any
    run, rather than when the records are written after training."""
    from agentbench_poad.leaderboard.loadable import NotLoadable, check_env_kwargs

    try:
        check_env_kwargs(env_kwargs, f"{where} env_kwargs")
    except NotLoadable as exc:
        problems.append(str(exc))


def _unknown_keys(table: dict, allowed: set[str], where: str, problems: list[str]) -> None:
    extra = sorted(set(table) - allowed)
    if extra:
        problems.append(f"{where}: unknown key(s) {extra}; allowed: {sorted(allowed)}")


def _read_head(
    path: Path,
    spec: dict[str, Any],
    out: str | os.PathLike | None,
    records: str | os.PathLike | None,
    import_agents: bool,
) -> _Reading:
    """The spec's ``[study]`` and ``[eval]`` tables, its agents and its tuning protocols."""
    problems: list[str] = []
    _unknown_keys(spec, _TOP_KEYS, "top level", problems)
    head = spec.get("study", {})
    _unknown_keys(head, _STUDY_KEYS, "[study]", problems)
    name = str(head.get("name") or path.stem)
    model = head.get("model")
    if not model:
        problems.append('[study] needs model = "<name, directory or hub id>"')
    default_eval = spec.get("eval", {})
    _unknown_keys(default_eval, _EVAL_KEYS, "[eval]", problems)
    groups = spec.get("group", [])
    if not isinstance(groups, list) or not groups:
        problems.append("the spec has no [[group]] block; add one with agents and envs")
        groups = []
    out_dir = Path(out) if out is not None else Path("study-runs") / slug(name)
    agent_specs = [a for g in groups if isinstance(g, dict) for a in g.get("agents", []) or []]
    tuning_value = spec.get("tuning")
    tuning_tables = tuning_value if isinstance(tuning_value, list) else [tuning_value]
    tuned_agents = []
    for table in tuning_tables:
        listed = table.get("agents", []) if isinstance(table, dict) else []
        tuned_agents += listed if isinstance(listed, list) else []
    agents = spec_agents([*tuned_agents, *agent_specs], path.parent, import_code=import_agents)
    for agent in tuned_agents:
        if isinstance(agent, str) and agent in agents.broken:
            problems.append(f"[tuning]: agent {agent!r}: {agents.broken[agent]}")
    runs_per_gpu = head.get("runs_per_gpu", 1)
    if not isinstance(runs_per_gpu, int) or isinstance(runs_per_gpu, bool) or runs_per_gpu < 1:
        problems.append(f"[study] runs_per_gpu must be an int >= 1, got {runs_per_gpu!r}")
    budgets = head.get("total_steps", {})
    if not isinstance(budgets, dict):
        problems.append("[study] total_steps must be a table: env id -> env steps")
        budgets = {}
    reading = _Reading(
        path=path,
        head=head,
        default_eval=default_eval,
        groups=groups,
        name=name,
        model=model,
        out=out_dir,
        records=Path(records) if records is not None else out_dir / "records",
        trainable=agents.trainable,
        broken=agents.broken,
        not_imported=agents.unchecked,
        runs_per_gpu=runs_per_gpu,
        budgets=budgets,
        problems=problems,
    )
    reading.tunings = read_tunings(
        tuning_value,
        spec.get(CHOSEN_TABLE),
        trainable=agents.trainable,
        problems=problems,
        unchecked=agents.unchecked,
    )
    reading.unchecked += [(t.group, a) for t in reading.tunings for a in t.unchecked]
    return reading


@dataclass(frozen=True)
class _Group:
    """One ``[[group]]`` block as checked: what each of its agents' cells share."""

    where: str
    name: str
    label: str
    agents: list[Any]
    envs: list[Any]
    eval_envs: list[Any]
    seeds: list[int]
    #: the protocol that tunes the group (None: an untuned group)
    tuning: Tuning | None
    preset: Any
    model: str
    overrides: dict[str, Any]
    env_kwargs_json: str
    #: the group's evaluation protocol ([eval] with the group's eval table over it)
    protocol: dict[str, Any]
    #: env id -> its env-step budget (the group's total_steps, else [study.total_steps]'s)
    budgets: dict[str, Any]
    #: the keyword arguments of its evaluation-only agents' factories
    agent_kwargs: dict[str, Any]
    #: an :class:`EvalTask` of this group from its key, env and own fields
    eval_task: Callable[..., EvalTask]


def _read_group(reading: _Reading, index: int, group: dict[str, Any]) -> _Group:
    """Check one ``[[group]]`` block's own settings (its agents are read after)."""
    import gymnasium as gym

    problems = reading.problems
    head = reading.head
    where = f"[[group]] #{index + 1}" + (f" ({group.get('name')})" if group.get("name") else "")
    group_name = str(group.get("name") or f"#{index + 1}")
    if group_name in reading.group_names:
        problems.append(f"{where}: duplicate group name {group_name!r}")
    reading.group_names.append(group_name)
    _unknown_keys(group, _GROUP_KEYS, where, problems)
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
    by_name = {t.name: t for t in reading.tunings}
    tuning = _group_tuning(group, tuned, reading.tunings, by_name, where, problems)
    if tuned and not reading.tunings:
        problems.append(f"{where}: tuned = true needs a [tuning] table in the spec")
    if reading.tunings:
        if reading.earlier is None:
            reading.earlier = earlier_evaluation_seeds(reading.path)
        check_group_seeds(
            where,
            group,
            reading.default_eval,
            seeds,
            reading.tunings,
            tuning,
            reading.earlier,
            problems,
        )
    # A tuned group trains the model and preset its protocol tuned (the study's by default).
    preset = group.get("preset", head.get("preset", "auto"))
    model = str(group.get("model", reading.model or ""))
    if tuning is not None:
        preset, model = _tuned_setup(tuning, group, preset, model, where, problems)
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
    _check_record_env_kwargs(env_kwargs, where, problems)
    protocol = {**reading.default_eval, **group.get("eval", {})}
    _unknown_keys(group.get("eval", {}), _EVAL_KEYS, f"{where} eval", problems)
    timeout = protocol.get("action_timeout", 60.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
        problems.append(
            f"{where}: action_timeout must be seconds >= 0 (0: no deadline), got {timeout!r}"
        )
        timeout = 60.0
    eval_envs = list(group.get("eval_envs", []))
    for env_id in [*envs, *eval_envs]:
        if env_id not in gym.registry:
            problems.append(f"{where}: unknown env {env_id!r}; see `agentbench-poad envs`")
    return _Group(
        where=where,
        name=group_name,
        label=str(group.get("label", "")),
        agents=agents,
        envs=envs,
        eval_envs=eval_envs,
        seeds=seeds,
        tuning=tuning,
        preset=preset,
        model=model,
        overrides=overrides,
        env_kwargs_json=json.dumps(env_kwargs, sort_keys=True),
        protocol=protocol,
        budgets={
            env_id: group.get("total_steps", reading.budgets.get(env_id))
            for env_id in envs
            if isinstance(env_id, str)
        },
        agent_kwargs=group.get("agent_kwargs", {}),
        eval_task=functools.partial(  # what every evaluation of this group shares
            _eval_task,
            protocol=protocol,
            out_dir=reading.out,
            records_dir=reading.records,
            action_timeout=float(timeout) or None,  # 0: no deadline (TOML has no null)
            study=reading.name,
            spec=str(reading.path),
            group=group_name,
            exploratory=exploratory,
        ),
    )


def _agent_cells(reading: _Reading, group: _Group, agent: str) -> None:
    """One agent of a group on each of the group's envs: trained cells and their evaluations,
    or, for an agent spec that is not trained, its evaluations."""
    import gymnasium as gym

    if agent in reading.not_imported:
        reading.unchecked.append((group.name, agent))
        return
    if agent in reading.broken:
        reading.problems.append(f"{group.where}: agent {agent!r}: {reading.broken[agent]}")
        return
    algorithm = reading.trainable.get(agent) or reading.trainable.get(agent.lower())
    if algorithm is None:
        why = (
            check_agent_spec(agent)
            if ":" in agent
            else (
                f"not one of the trained agents {sorted(reading.trainable)} and not an agent "
                "spec ('module:Factory', 'lm:<model>')"
            )
        )
        if why is not None:
            reading.problems.append(f"{group.where}: unknown agent {agent!r}: {why}")
            return
    for env_id in group.envs:
        if env_id not in gym.registry:
            continue
        if algorithm is None:
            _eval_only(reading, group, agent, env_id)
        else:
            _trained_cells(reading, group, agent, algorithm, env_id)


def _eval_only(reading: _Reading, group: _Group, agent: str, env_id: str) -> None:
    """The evaluation of an agent that is not trained (an agent spec) on ``env_id``."""
    key = f"{slug(env_id)}__{slug(agent)}"
    also = reading.seen_evals.get(key)
    if also is not None:
        reading.problems.append(
            f"{group.where}: duplicate cell {agent} on {env_id} (also in {also})"
        )
        return
    reading.seen_evals[key] = group.where
    reading.evals.append(
        group.eval_task(
            key,
            env_id,
            agent=agent,
            seeds=tuple(int(s) for s in group.protocol.get("seeds", group.seeds)),
            agent_kwargs_json=json.dumps(group.agent_kwargs, sort_keys=True),
            env_kwargs_json=group.env_kwargs_json,
        )
    )


def _trained_cells(
    reading: _Reading, group: _Group, agent: str, algorithm: Any, env_id: str
) -> None:
    """A trained agent of a group on ``env_id``: one cell per seed (a tuned group's once its
    configuration is chosen) and the evaluation of those runs on each evaluation env."""
    problems = reading.problems
    overrides, config_source = group.overrides, ""
    budget = group.budgets.get(env_id)
    if group.tuning is not None:
        ready, overrides, config_source = _tuned_overrides(
            group.tuning, algorithm.name, overrides, str(reading.path), group.where, problems
        )
        if not ready:
            reading.pending.append(
                f"{group.name}: {algorithm.name}"
                + (f" (tuning protocol {group.tuning.name!r})" if group.tuning.entry else "")
            )
            if isinstance(budget, int) and budget > 0:
                reading.pending_steps.append((group.name, env_id, budget * len(group.seeds)))
            return
    try:
        family = preset_for(algorithm.config_class, env_id, group.preset)
        algorithm.config_class.preset(family, **overrides)
    except (TypeError, ValueError) as exc:
        problems.append(
            f"{group.where}: {agent} on {env_id} (preset {group.preset!r}, overrides "
            f"{overrides}): {exc}"
        )
        return
    if not isinstance(budget, int) or budget < 1:
        problems.append(
            f"{group.where}: no env-step budget for {env_id}; add it to "
            "[study.total_steps] or the group's total_steps"
        )
        return
    # Built-ins by name; a user's algorithm by the spec that loads it anywhere.
    named = cell_agent(algorithm)
    run_name = slug(str(algorithm.name)) + (f"__{slug(group.label)}" if group.label else "")
    overrides_json = json.dumps(overrides, sort_keys=True)
    run_dirs = []
    for seed in group.seeds:
        identity = (
            named,
            env_id,
            seed,
            overrides_json,
            budget,
            group.model,
            family,
            group.env_kwargs_json,
        )
        run_dir = str(reading.out / "runs" / slug(env_id) / run_name / f"seed{seed}")
        if identity in reading.seen_cells or run_dir in reading.seen_dirs:
            also = reading.seen_cells.get(identity) or reading.seen_dirs[run_dir]
            problems.append(
                f"{group.where}: duplicate cell {agent} on {env_id} seed {seed} (also in {also})"
            )
            continue
        reading.seen_cells[identity] = reading.seen_dirs[run_dir] = group.where
        reading.cells.append(
            TrainCell(
                agent=named,
                env_id=env_id,
                seed=seed,
                total_steps=budget,
                model=group.model,
                preset=family,
                overrides_json=overrides_json,
                label=group.label,
                run_dir=run_dir,
                env_kwargs_json=group.env_kwargs_json,
                group=group.name,
                config_source_json=config_source,
            )
        )
        run_dirs.append(run_dir)
    for target in group.eval_envs or [env_id]:
        key = f"{slug(target)}__{run_name}__trainedon-{slug(env_id)}"
        reading.needs[key] = run_dirs
        reading.evals.append(
            group.eval_task(
                key,
                target,
                run_dirs=tuple(run_dirs),
                agent_name=run_name.replace("__", "-"),
            )
        )


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
                cell_agent(algorithm),
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
