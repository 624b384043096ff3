"""The tuning protocol of a study: the same search for every agent, apart from evaluation.

A study spec may hold one ``[tuning]`` table (docs/study.md, "Tuning")::

    [tuning]
    task = "Overcooked-TomatoSalad-v0"   # the tuning task
    seeds = [1000, 1001]                 # tuning seeds, never evaluation seeds
    total_steps = 3072                   # env steps of every tuning run
    agents = ["poad", "ntpo", "twosome"]
    selection = "last3-sampled-return"   # the selection rule, fixed before any run
    env_kwargs = { max_episode_steps = 30 }
    grid = { lr = [2.5e-4, 1e-3], target_kl = [0.02, 0.1] }   # or configs = [{...}, ...]

    [tuning.chosen]                      # written by `agentbench-poad study SPEC --select`
    poad = { lr = 0.001, target_kl = 0.1 }

Every agent gets the same search: the same configurations (at least
:data:`MIN_CONFIGURATIONS`), the same seeds (at least :data:`MIN_SEEDS`), the same steps. A
per-agent table ``[tuning.per_agent.<name>]`` may replace ``configs``/``grid``/``seeds``/
``total_steps`` for one agent, and is an error when it makes that agent's budget differ. A group
with ``tuned = true`` trains each agent with its chosen configuration; its seeds (evaluation
seeds) must not overlap the tuning seeds.

Order of work: the tuning cells run first (``agentbench-poad study SPEC``; the tuned groups wait),
then ``agentbench-poad study SPEC --select`` applies the selection rule to the finished tuning
runs and writes ``[tuning.chosen]`` into the spec, then ``agentbench-poad study SPEC`` trains and
evaluates the tuned groups. Each of their records says where its configuration came from
(``training.config_source``: the spec, the tuning protocol and the chosen configuration);
``leaderboard add`` refuses a record whose training configuration its spec did not choose
(:mod:`agentbench_poad.leaderboard.config_source`).

Several protocols: instead of the one ``[tuning]`` table, a spec may hold ``[[tuning]]`` entries,
each with a unique ``name`` and optionally its own ``model`` and ``preset`` (default: the
study's); a tuned group names its protocol with ``tuning = "<name>"`` (it may leave it out when
there is only one). An entry's runs live in ``<out>/tuning/<name>/<task>/<agent>/config<K>/
seed<N>`` (group ``tuning/<name>``) and ``--select`` writes its choice into
``[tuning_chosen.<name>]`` (:func:`read_tunings`, :func:`write_chosen_all`).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentbench_poad.study import tomlcompat

__all__ = [
    "MIN_CONFIGURATIONS",
    "MIN_SEEDS",
    "SELECTION_RULES",
    "TUNING_GROUP",
    "Tuning",
    "last3_sampled_return",
    "read_tuning",
    "read_tunings",
    "select",
    "write_chosen",
    "write_chosen_all",
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
    if (run_config.get("algorithm") or {}).get("eval_greedy", True):
        raise ValueError(
            "its learning curve is greedy (eval_greedy = true); the rule reads sampled returns: "
            "tune with the 'mini' preset or overrides eval_greedy = false"
        )
    values = [p.get("eval_return") for p in curve]
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
        return base / _slug(self.task) / agent / f"config{index}" / f"seed{seed}"

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


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-._" else "-" for c in text)


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
) -> Tuning | None:
    """Check a spec's ``[tuning]`` table or one ``[[tuning]]`` entry; appends what is wrong to
    ``problems``.

    Args:
        table: the table as read from the spec.
        trainable: the trained agents by name (their classes).
        problems: where the problems go (the caller reports them all at once).
        name: the entry's name, for a ``[[tuning]]`` entry (None: the single ``[tuning]``).
        chosen: an entry's ``[tuning_chosen.<name>]`` (the single table has its own ``chosen``).

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
    if isinstance(agents_value, list) and agents_value:
        # A user's algorithm (a class spec) is tuned under its class's ``name``, like a built-in.
        names = [
            getattr(trainable.get(a) if isinstance(a, str) else None, "name", None)
            or str(a).lower()
            for a in agents_value
        ]
    else:
        problems.append(f'{where} needs agents = ["poad", ...] (the agents to tune)')
        names = []
    per_agent = table.get("per_agent", {})
    if not isinstance(per_agent, dict):
        problems.append(f"{where}: per_agent must be a table of per-agent tables")
        per_agent = {}
    stray = sorted(set(per_agent) - set(names))
    if stray:
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
    )


def read_tunings(
    value: Any,
    chosen_tables: Any,
    *,
    trainable: dict[str, Any],
    problems: list[str],
) -> list[Tuning]:
    """Every tuning protocol of a spec: its ``[tuning]`` table (one protocol named ``tuning``)
    or its ``[[tuning]]`` entries (each named), in spec order.

    Args:
        value: the spec's ``tuning`` (a table, a list of tables, or None).
        chosen_tables: the spec's ``[tuning_chosen]`` (entry name -> agent -> config), or None.
        trainable: the trained agents by name (their classes).
        problems: where the problems go (the caller reports them all at once).
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
        tuning = read_tuning(value, trainable=trainable, problems=problems)
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


def check_evaluation_seeds(
    tuning: Tuning, where: str, seeds: Iterable[int], problems: list[str]
) -> None:
    """An evaluation group's seeds must be disjoint from the tuning seeds."""
    overlap = sorted(set(seeds) & tuning.seeds)
    if overlap:
        whose = f" of {tuning.where} on {tuning.task}" if tuning.entry else ""
        problems.append(
            f"{where}: evaluation seeds {overlap} are tuning seeds{whose}; evaluate on seeds the "
            f"tuning never saw (tuning seeds: {sorted(tuning.seeds)})"
        )


# -- selection ----------------------------------------------------------------------------------
@dataclass
class Selection:
    """What ``--select`` found for one agent."""

    agent: str
    chosen: dict[str, Any]
    index: int
    scores: list[float]
    """Per configuration, the mean over tuning seeds of the rule's score."""
    tuning: str = TUNING_GROUP
    """The name of the protocol that chose it."""


def run_scores(
    tuning: Tuning,
    out: Path,
    *,
    is_done: Callable[[Path], bool],
) -> tuple[dict[tuple[str, int, int], float], list[str]]:
    """The selection rule's score of every finished tuning run in ``out``.

    Returns:
        ``{(agent, configuration index, seed): score}`` and the problems met (runs not trained
        yet, curves the rule cannot read), one line each.
    """
    rule = SELECTION_RULES[tuning.selection]
    problems: list[str] = []
    scores: dict[tuple[str, int, int], float] = {}
    for agent, index, _, seed, run_dir in tuning.runs(out):
        if not is_done(run_dir):
            problems.append(f"{agent} config{index} seed {seed}: not trained ({run_dir})")
            continue
        try:
            curve = json.loads((run_dir / "learning_curve.json").read_text())
            config = json.loads((run_dir / "config.json").read_text())
            scores[(agent, index, seed)] = rule(curve, config)
        except (OSError, json.JSONDecodeError, ValueError) as exc:
            problems.append(f"{agent} config{index} seed {seed} ({run_dir}): {exc}")
    return scores, problems


def select(
    tuning: Tuning,
    out: Path,
    *,
    is_done: Callable[[Path], bool],
) -> list[Selection]:
    """Apply the selection rule to the finished tuning runs in ``out``.

    Raises:
        ValueError: runs that are missing or unfinished, or curves the rule cannot read (all of
            them listed).
    """
    scores, problems = run_scores(tuning, out, is_done=is_done)
    if problems:
        raise ValueError(
            f"cannot select yet ({len(problems)} problem(s)); run the tuning cells first "
            f"(`agentbench-poad study SPEC --group {tuning.group}`):\n"
            + "\n".join(f"  - {p}" for p in problems)
        )
    selections = []
    for agent, search in tuning.searches.items():
        means = [
            math.fsum(scores[(agent, i, seed)] for seed in search.seeds) / len(search.seeds)
            for i in range(len(search.configurations))
        ]
        best = 0
        for i, value in enumerate(means):
            if value > means[best]:  # strict: ties go to the earlier configuration
                best = i
        selections.append(
            Selection(agent, dict(search.configurations[best]), best, means, tuning.name)
        )
    return selections


# -- writing [tuning.chosen] ------------------------------------------------------------------------
_BEGIN = "# -- [tuning.chosen]: written by `agentbench-poad study SPEC --select`; do not edit --"
_END = "# -- end of [tuning.chosen] --"
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"cannot write {value!r} into a spec")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
        )
    raise ValueError(f"cannot write {value!r} into a spec")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def write_chosen(spec_path: Path, tuning: Tuning, selections: Sequence[Selection]) -> bool:
    """Write the selections into the spec's ``[tuning.chosen]``; returns whether it changed.

    A TOML spec keeps its text and comments: the table goes into a marked block at the end (the
    block is replaced when it exists). A JSON spec is rewritten.

    Raises:
        ValueError: the spec already chose another configuration for an agent (the selection
            rule is deterministic, so the tuning runs changed since).
    """
    chosen = {s.agent: s.chosen for s in selections}
    changed = {
        a: (tuning.chosen[a], c)
        for a, c in chosen.items()
        if a in tuning.chosen and tuning.chosen[a] != c
    }
    if changed:
        raise ValueError(
            "the spec already chose other configurations ("
            + "; ".join(
                f"{a}: spec {old}, tuning runs now {new}" for a, (old, new) in changed.items()
            )
            + "); the tuning runs changed after the selection. Restore them, or remove the "
            "[tuning.chosen] block and every record trained with it"
        )
    if all(tuning.chosen.get(a) == c for a, c in chosen.items()):
        return False
    text = spec_path.read_text(encoding="utf-8")
    if spec_path.suffix == ".json":
        spec = json.loads(text)
        spec.setdefault("tuning", {})["chosen"] = chosen
        spec_path.write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
        return True
    if _BEGIN not in text and tomlcompat.loads(text).get("tuning", {}).get("chosen") is not None:
        raise ValueError(
            f"{spec_path} has a hand-written [tuning.chosen]; remove it and run --select again"
        )
    if _BEGIN in text:
        head, _, rest = text.partition(_BEGIN)
        _, _, tail = rest.partition(_END)
        text = head.rstrip("\n") + "\n" + tail.lstrip("\n")
    lines = [_BEGIN, f"# rule: {tuning.selection}; score per configuration (mean over seeds):"]
    for s in selections:
        scores = ", ".join(f"config{i} {v:.4f}" for i, v in enumerate(s.scores))
        lines.append(f"#   {s.agent}: {scores} -> config{s.index}")
    lines.append("[tuning.chosen]")
    lines += [f"{_toml_key(a)} = {_toml_value(c)}" for a, c in chosen.items()]
    lines.append(_END)
    spec_path.write_text(text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n", encoding="utf-8")
    return True


_BEGIN_ENTRIES = (
    f"# -- [{CHOSEN_TABLE}]: written by `agentbench-poad study SPEC --select`; do not edit --"
)
_END_ENTRIES = f"# -- end of [{CHOSEN_TABLE}] --"


def write_chosen_all(
    spec_path: Path, tunings: Sequence[Tuning], selections: dict[str, Sequence[Selection]]
) -> bool:
    """Write the selections of ``[[tuning]]`` entries into the spec's ``[tuning_chosen.<name>]``
    tables; returns whether the spec changed.

    ``selections`` maps entry names to their selections (the entries whose runs are complete);
    the other entries keep what the spec chose for them. A TOML spec keeps its text and
    comments: the tables go into one marked block at the end (replaced when it exists). A JSON
    spec is rewritten. A single ``[tuning]`` table goes through :func:`write_chosen`.

    Raises:
        ValueError: the spec already chose another configuration for an agent of an entry, or
            a name that is no entry.
    """
    by_name = {t.name: t for t in tunings if t.entry}
    unknown = sorted(set(selections) - set(by_name))
    if unknown:
        raise ValueError(f"{unknown} name no [[tuning]] entry of {spec_path}")
    changed = []
    new: dict[str, dict[str, dict[str, Any]]] = {}
    for name, tuning in by_name.items():
        chosen = dict(tuning.chosen)
        for s in selections.get(name, ()):
            old = tuning.chosen.get(s.agent)
            if old is not None and old != s.chosen:
                changed.append(f"{name} {s.agent}: spec {old}, tuning runs now {s.chosen}")
            chosen[s.agent] = s.chosen
        if chosen:
            new[name] = chosen
    if changed:
        raise ValueError(
            "the spec already chose other configurations ("
            + "; ".join(changed)
            + "); the tuning runs changed after the selection. Restore them, or remove the "
            f"[{CHOSEN_TABLE}] block and every record trained with it"
        )
    if all(new.get(name, {}) == t.chosen for name, t in by_name.items()):
        return False
    text = spec_path.read_text(encoding="utf-8")
    if spec_path.suffix == ".json":
        spec = json.loads(text)
        spec[CHOSEN_TABLE] = new
        spec_path.write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
        return True
    if _BEGIN_ENTRIES not in text and tomlcompat.loads(text).get(CHOSEN_TABLE) is not None:
        raise ValueError(
            f"{spec_path} has a hand-written [{CHOSEN_TABLE}]; remove it and run --select again"
        )
    if _BEGIN_ENTRIES in text:
        head, _, rest = text.partition(_BEGIN_ENTRIES)
        _, _, tail = rest.partition(_END_ENTRIES)
        text = head.rstrip("\n") + "\n" + tail.lstrip("\n")
    lines = [_BEGIN_ENTRIES]
    for name, chosen in new.items():
        tuning = by_name[name]
        if selections.get(name):
            lines.append(
                f"# {name}: rule {tuning.selection}; score per configuration (mean over seeds):"
            )
            for s in selections[name]:
                scores = ", ".join(f"config{i} {v:.4f}" for i, v in enumerate(s.scores))
                lines.append(f"#   {s.agent}: {scores} -> config{s.index}")
        lines.append(f"[{CHOSEN_TABLE}.{_toml_key(name)}]")
        lines += [f"{_toml_key(a)} = {_toml_value(c)}" for a, c in chosen.items()]
    lines.append(_END_ENTRIES)
    spec_path.write_text(text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n", encoding="utf-8")
    return True
