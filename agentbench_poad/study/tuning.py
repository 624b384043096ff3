"""The tuning protocol of a study: the same search for every agent, apart from evaluation.

A spec's ``[tuning]`` table (or its named ``[[tuning]]`` entries, each with its own model and
preset) gives every agent the same configurations (at least :data:`MIN_CONFIGURATIONS`), the same
seeds (at least :data:`MIN_SEEDS`) and the same steps, and names its selection rule before any
run; groups with ``tuned = true`` train the chosen configuration on other seeds. The format and
the order of work are in docs/study.md, "Tuning"; :func:`read_tunings` reads and checks the
protocols, :mod:`agentbench_poad.study.selection` chooses (``study SPEC --select``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentbench_poad.study.specfile import slug

__all__ = [
    "MIN_CONFIGURATIONS",
    "MIN_SEEDS",
    "SELECTION_RULES",
    "TUNING_GROUP",
    "AgentSearch",
    "CHOSEN_TABLE",
    "Tuning",
    "last3_sampled_return",
    "last3_sampled_score",
    "read_tuning",
    "read_tunings",
]

#: The least search an agent gets (issue 27: at least 4 configurations and 2 seeds).
MIN_CONFIGURATIONS = 4
MIN_SEEDS = 2
#: The group name of the tuning cells (``study --group tuning``).
TUNING_GROUP = "tuning"

_TUNING_KEYS = {
    "task",
    "seeds",
    "total_steps",
    "agents",
    "selection",
    "env_kwargs",
    "configs",
    "grid",
    "chosen",
    "per_agent",
    "model",
    "preset",
}
#: Keys of a ``[[tuning]]`` entry: its choice lives in ``[tuning_chosen.<name>]`` instead.
_ENTRY_KEYS = (_TUNING_KEYS - {"chosen"}) | {"name"}
#: The top-level table of the choices of ``[[tuning]]`` entries, by entry name.
CHOSEN_TABLE = "tuning_chosen"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_AGENT_KEYS = {"configs", "grid", "seeds", "total_steps"}


# -- the selection rules ------------------------------------------------------------------------
def last3_sampled_return(curve: Sequence[dict[str, Any]], run_config: dict[str, Any]) -> float:
    """Mean sampled return over the run's last three learning-curve points.

    The curve must be of the sampled policy (``eval_greedy = false``, as the CPU preset "mini"
    evaluates) and hold at least three points.

    Raises:
        ValueError: a greedy curve, or fewer than three points.
    """
    return _last3_sampled(curve, run_config, "eval_return")


def last3_sampled_score(curve: Sequence[dict[str, Any]], run_config: dict[str, Any]) -> float:
    """Mean sampled **score** over the run's last three learning-curve points: the board's
    metric (``eval_score``; on DataSciCoding the final program's ROC AUC, 0 where none ran),
    so that tuning selects by what the records evaluate. Same conditions as
    :func:`last3_sampled_return`."""
    return _last3_sampled(curve, run_config, "eval_score")


def _last3_sampled(curve: Sequence[dict[str, Any]], run_config: dict[str, Any], key: str) -> float:
    if (run_config.get("algorithm") or {}).get("eval_greedy", True):
        raise ValueError(
            "its learning curve is greedy (eval_greedy = true); the rule reads sampled returns: "
            "tune with the 'mini' preset or overrides eval_greedy = false"
        )
    values = [p.get(key) for p in curve]
    if len(values) < 3 or any(not isinstance(v, (int, float)) for v in values[-3:]):
        raise ValueError(
            f"its learning curve has {len(values)} point(s); the rule needs 3 (lower eval_every "
            "or raise total_steps)"
        )
    return float(sum(values[-3:])) / 3.0


#: Selection rules by name: ``rule(learning_curve, run_config) -> score`` of one run; a
#: configuration's score is the mean over the tuning seeds, the highest wins, ties go to the
#: configuration that comes first in the spec.
SELECTION_RULES: dict[str, Callable[[Sequence[dict[str, Any]], dict[str, Any]], float]] = {
    "last3-sampled-return": last3_sampled_return,
    "last3-sampled-score": last3_sampled_score,
}


# -- reading the table --------------------------------------------------------------------------
@dataclass(frozen=True)
class AgentSearch:
    """One agent's search: configurations (overrides, in spec order), seeds and steps."""

    configurations: tuple[dict[str, Any], ...]
    seeds: tuple[int, ...]
    total_steps: int

    @property
    def budget(self) -> tuple[int, tuple[int, ...], int]:
        return (len(self.configurations), self.seeds, self.total_steps)


@dataclass(frozen=True)
class Tuning:
    """A checked ``[tuning]`` table or ``[[tuning]]`` entry."""

    task: str
    selection: str
    searches: dict[str, AgentSearch]
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    chosen: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the protocol's name (``"tuning"`` for the single ``[tuning]`` table)
    name: str = TUNING_GROUP
    #: the model of its runs and of the groups it tunes (None: the study's ``model``)
    model: str | None = None
    #: the preset of its runs and of the groups it tunes (None: the study's ``preset``)
    preset: str | None = None
    #: an entry of ``[[tuning]]`` (named run dirs, ``[tuning_chosen.<name>]``), not ``[tuning]``
    entry: bool = False
    #: agent specs of the protocol whose code was not imported (``study --dry-run``): their
    #: names are unknown, so they have no search here
    unchecked: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        """How errors name the protocol in the spec."""
        return f"[[tuning]] {self.name!r}" if self.entry else "[tuning]"

    @property
    def group(self) -> str:
        """The group name of its tuning cells (``study --group``)."""
        return f"{TUNING_GROUP}/{self.name}" if self.entry else TUNING_GROUP

    @property
    def agents(self) -> list[str]:
        return list(self.searches)

    @property
    def seeds(self) -> set[int]:
        return {s for search in self.searches.values() for s in search.seeds}

    def tuned_keys(self, agent: str) -> set[str]:
        """The config fields the agent's search varies."""
        return {k for c in self.searches[agent].configurations for k in c}

    def run_dir(self, out: Path, agent: str, index: int, seed: int) -> Path:
        """Where the tuning run of configuration ``index`` and ``seed`` of ``agent`` lives
        (an entry's runs under its name, so two protocols on one task never share a dir)."""
        base = out / "tuning" / self.name if self.entry else out / "tuning"
        return base / slug(self.task) / agent / f"config{index}" / f"seed{seed}"

    def runs(self, out: Path) -> Iterable[tuple[str, int, dict[str, Any], int, Path]]:
        """Every tuning run: ``(agent, index, configuration, seed, run_dir)``.

        Interleaved (seed, then configuration, then agent), so that a study stopped part-way has
        given every agent the same share of its search: the search is equal at every stopping
        point, not only at the end.
        """
        searches = list(self.searches.items())
        n_seeds = max((len(s.seeds) for _, s in searches), default=0)
        n_configs = max((len(s.configurations) for _, s in searches), default=0)
        for seed_index in range(n_seeds):
            for index in range(n_configs):
                for agent, search in searches:
                    if seed_index < len(search.seeds) and index < len(search.configurations):
                        seed = search.seeds[seed_index]
                        configuration = search.configurations[index]
                        yield (
                            agent,
                            index,
                            configuration,
                            seed,
                            self.run_dir(out, agent, index, seed),
                        )

    def config_source(self, spec: str, agent: str) -> dict[str, Any]:
        """The record field ``training.config_source`` of a tuned run of ``agent``."""
        search = self.searches[agent]
        tuning: dict[str, Any] = {
            "task": self.task,
            "seeds": list(search.seeds),
            "total_steps": search.total_steps,
            "configurations": [dict(c) for c in search.configurations],
            "selection": self.selection,
        }
        if self.entry:  # `leaderboard add` finds the choice by name ([tuning_chosen.<name>])
            tuning["name"] = self.name
        # Only when set: the single table's records stay exactly as they were.
        tuning.update({k: v for k, v in (("model", self.model), ("preset", self.preset)) if v})
        return {"spec": spec, "tuning": tuning, "chosen": dict(self.chosen[agent])}


def _configurations(table: dict[str, Any], where: str, problems: list[str]) -> list[dict] | None:
    has_configs, has_grid = "configs" in table, "grid" in table
    if has_configs and has_grid:
        problems.append(f"{where}: give configs = [...] or grid = {{...}}, not both")
        return None
    if has_configs:
        configs = table["configs"]
        if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
            problems.append(f"{where}: configs must be a list of tables of config fields")
            return None
        return [dict(c) for c in configs]
    if has_grid:
        grid = table["grid"]
        if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
            problems.append(f"{where}: grid must map config fields to non-empty lists of values")
            return None
        keys = list(grid)
        return [dict(zip(keys, values)) for values in itertools.product(*grid.values())]
    return None


def read_tuning(
    table: Any,
    *,
    trainable: dict[str, Any],
    problems: list[str],
    name: str | None = None,
    chosen: Any = None,
    unchecked: Collection[str] = (),
) -> Tuning | None:
    """Check a spec's ``[tuning]`` table or one ``[[tuning]]`` entry; appends what is wrong to
    ``problems``.

    Args:
        table: the table as read from the spec.
        trainable: the trained agents by name (their classes).
        problems: where the problems go (the caller reports them all at once).
        name: the entry's name, for a ``[[tuning]]`` entry (None: the single ``[tuning]``).
        chosen: an entry's ``[tuning_chosen.<name>]`` (the single table has its own ``chosen``).
        unchecked: agent specs whose code is not imported: left out of the searches (their
            ``name`` is unknown), so the checks that need every agent's name are skipped.

    Returns:
        The tuning, or None when the table is missing or unusable.
    """
    if table is None:
        return None
    entry = name is not None
    where = f"[[tuning]] {name!r}" if entry else "[tuning]"
    chosen_where = f"[{CHOSEN_TABLE}.{name}]" if entry else "[tuning.chosen]"
    if not isinstance(table, dict):
        problems.append(f"{where} must be a table")
        return None
    allowed = _ENTRY_KEYS if entry else _TUNING_KEYS
    extra = sorted(set(table) - allowed)
    if entry and "chosen" in extra:
        problems.append(
            f"{where}: the choice of a [[tuning]] entry lives in {chosen_where}, which "
            "`agentbench-poad study SPEC --select` writes; drop its chosen key"
        )
        extra.remove("chosen")
    if not entry and "name" in extra:
        problems.append(
            "[tuning]: the single [tuning] table is named 'tuning'; to name protocols, write "
            "[[tuning]] entries (each with a name)"
        )
        extra.remove("name")
    if extra:
        problems.append(f"{where}: unknown key(s) {extra}; allowed: {sorted(allowed)}")
    own_setup = {}
    for key in ("model", "preset"):
        value = table.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            problems.append(f'{where}: {key} must be a name, e.g. {key} = "..." (or leave it out)')
            value = None
        own_setup[key] = value
    task = table.get("task")
    if not isinstance(task, str) or not task:
        problems.append(f'{where} needs task = "<env id>" (the tuning task)')
        task = ""
    selection = table.get("selection")
    if selection not in SELECTION_RULES:
        problems.append(
            f"{where}: selection must name the selection rule, one of {sorted(SELECTION_RULES)}, "
            f"got {selection!r} (write the rule into the spec before any run)"
        )
    env_kwargs = table.get("env_kwargs", {})
    if not isinstance(env_kwargs, dict):
        problems.append(f"{where}: env_kwargs must be a table of gym.make arguments")
        env_kwargs = {}
    agents_value = table.get("agents")
    skipped: tuple[str, ...] = ()
    if isinstance(agents_value, list) and agents_value:
        skipped = tuple(a for a in agents_value if isinstance(a, str) and a in unchecked)
        # A user's algorithm (a class spec) is tuned under its class's ``name``, like a built-in.
        names = [
            getattr(trainable.get(a) if isinstance(a, str) else None, "name", None)
            or str(a).lower()
            for a in agents_value
            if a not in skipped
        ]
    else:
        problems.append(f'{where} needs agents = ["poad", ...] (the agents to tune)')
        names = []
    per_agent = table.get("per_agent", {})
    if not isinstance(per_agent, dict):
        problems.append(f"{where}: per_agent must be a table of per-agent tables")
        per_agent = {}
    stray = sorted(set(per_agent) - set(names))
    if stray and not skipped:  # a table may be an unchecked agent's, under its unknown name
        problems.append(
            f"{where} per_agent: {stray} are not in its agents {names}"
            if entry
            else f"[tuning.per_agent]: {stray} are not in [tuning] agents {names}"
        )
    unknown = [a for a in names if a not in trainable]
    if unknown:
        problems.append(
            f"{where}: agent(s) {unknown} are not trained agents {sorted(trainable)}; register "
            "them (agentbench_poad.baselines.ALGORITHMS), name your own algorithm class by spec "
            "('package.module:Class', 'path/to/file.py:Class') or drop them from the tuning"
        )
    common = _configurations(table, where, problems)
    searches: dict[str, AgentSearch] = {}
    for agent_name in names:
        if agent_name not in trainable:
            continue  # reported above
        own = per_agent.get(agent_name) or {}
        here = f"{where} per_agent.{agent_name}" if entry else f"[tuning.per_agent.{agent_name}]"
        if not isinstance(own, dict):
            problems.append(f"{here} must be a table")
            own = {}
        extra = sorted(set(own) - _AGENT_KEYS)
        if extra:
            problems.append(f"{here}: unknown key(s) {extra}; allowed: {sorted(_AGENT_KEYS)}")
        configurations = _configurations(own, here, problems) or common
        if not configurations:
            problems.append(
                f"{where}: no search space for {agent_name}; give configs = [{{...}}, ...] or "
                "grid = {field = [values]}"
            )
            continue
        seeds = own.get("seeds", table.get("seeds"))
        if not isinstance(seeds, list) or not all(isinstance(s, int) for s in seeds):
            problems.append(f"{where}: seeds must be a list of ints (the tuning seeds)")
            continue
        if len(set(seeds)) != len(seeds):
            problems.append(f"{where}: duplicate tuning seeds {seeds}")
        steps = own.get("total_steps", table.get("total_steps"))
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            problems.append(f"{where}: total_steps must be the env steps of every tuning run")
            continue
        searches[agent_name] = AgentSearch(tuple(configurations), tuple(seeds), steps)
    for agent_name, search in searches.items():
        if len(search.configurations) < MIN_CONFIGURATIONS or len(search.seeds) < MIN_SEEDS:
            problems.append(
                f"{where}: {agent_name} gets {len(search.configurations)} configuration(s) x "
                f"{len(search.seeds)} seed(s); the protocol needs at least {MIN_CONFIGURATIONS} "
                f"configurations and {MIN_SEEDS} seeds"
            )
    budgets = {a: s.budget for a, s in searches.items()}
    if len(set(budgets.values())) > 1:
        lines = ", ".join(
            f"{n}: {b[0]} configurations x seeds {list(b[1])} x {b[2]} steps"
            for n, b in budgets.items()
        )
        problems.append(
            f"{where}: the agents get unequal tuning budgets ({lines}); every agent needs the "
            "same number of configurations, the same seeds and the same steps"
        )
    chosen = (chosen if chosen is not None else {}) if entry else table.get("chosen", {})
    if not isinstance(chosen, dict) or not all(isinstance(v, dict) for v in chosen.values()):
        problems.append(f"{where}: chosen must map agents to their chosen config (--select)")
        chosen = {}
    for agent_name, config in chosen.items():
        search = searches.get(agent_name)
        if search is None and skipped:
            continue  # perhaps an unchecked agent's choice, under its unknown name
        if search is None:
            problems.append(f"{chosen_where}: {agent_name} is not a tuned agent")
        elif config not in search.configurations:
            problems.append(
                f"{chosen_where}: {agent_name}'s {config} is not one of its configurations; "
                "only `agentbench-poad study SPEC --select` writes this table"
            )
    return Tuning(
        task=task,
        selection=str(selection),
        searches=searches,
        env_kwargs=dict(env_kwargs),
        chosen={k: dict(v) for k, v in chosen.items()},
        name=name if entry else TUNING_GROUP,
        model=own_setup["model"],
        preset=own_setup["preset"],
        entry=entry,
        unchecked=skipped,
    )


def read_tunings(
    value: Any,
    chosen_tables: Any,
    *,
    trainable: dict[str, Any],
    problems: list[str],
    unchecked: Collection[str] = (),
) -> list[Tuning]:
    """Every tuning protocol of a spec: its ``[tuning]`` table (one protocol named ``tuning``)
    or its ``[[tuning]]`` entries (each named), in spec order.

    Args:
        value: the spec's ``tuning`` (a table, a list of tables, or None).
        chosen_tables: the spec's ``[tuning_chosen]`` (entry name -> agent -> config), or None.
        trainable: the trained agents by name (their classes).
        problems: where the problems go (the caller reports them all at once).
        unchecked: agent specs whose code is not imported (see :func:`read_tuning`).
    """
    if value is None:
        if chosen_tables is not None:
            problems.append(f"[{CHOSEN_TABLE}] without [[tuning]] entries; remove it")
        return []
    if isinstance(value, dict):
        if chosen_tables is not None:
            problems.append(
                f"[{CHOSEN_TABLE}] belongs to [[tuning]] entries; a single [tuning] table keeps "
                "its choice in [tuning.chosen]: remove it"
            )
        tuning = read_tuning(value, trainable=trainable, problems=problems, unchecked=unchecked)
        return [tuning] if tuning is not None else []
    if not isinstance(value, list) or not value:
        problems.append("tuning must be a [tuning] table or [[tuning]] entries")
        return []
    if chosen_tables is None:
        chosen_tables = {}
    if not isinstance(chosen_tables, dict):
        problems.append(f"[{CHOSEN_TABLE}] must map [[tuning]] names to tables (--select)")
        chosen_tables = {}
    tunings: list[Tuning] = []
    names: list[str] = []
    for i, table in enumerate(value):
        name = table.get("name") if isinstance(table, dict) else None
        if not isinstance(name, str) or not _NAME.match(name):
            problems.append(
                f'[[tuning]] #{i + 1}: needs name = "<name>" (letters, digits, "_", "-", "."; '
                f"it names the protocol's run dirs and its group), got {name!r}"
            )
            continue
        if name in names:
            problems.append(
                f"[[tuning]] #{i + 1}: duplicate name {name!r}; give each [[tuning]] entry its "
                "own name"
            )
            continue
        names.append(name)
        tuning = read_tuning(
            table,
            trainable=trainable,
            problems=problems,
            name=name,
            chosen=chosen_tables.get(name),
            unchecked=unchecked,
        )
        if tuning is not None:
            tunings.append(tuning)
    stray = sorted(set(chosen_tables) - set(names))
    if stray:
        problems.append(
            f"[{CHOSEN_TABLE}]: {stray} name no [[tuning]] entry (its entries: {names}); remove "
            "them"
        )
    return tunings
