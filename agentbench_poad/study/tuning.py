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
    "select",
    "write_chosen",
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
}
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
    """A checked ``[tuning]`` table."""

    task: str
    selection: str
    searches: dict[str, AgentSearch]
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    chosen: dict[str, dict[str, Any]] = field(default_factory=dict)

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
        """Where the tuning run of configuration ``index`` and ``seed`` of ``agent`` lives."""
        return out / "tuning" / _slug(self.task) / agent / f"config{index}" / f"seed{seed}"

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
        return {
            "spec": spec,
            "tuning": {
                "task": self.task,
                "seeds": list(search.seeds),
                "total_steps": search.total_steps,
                "configurations": [dict(c) for c in search.configurations],
                "selection": self.selection,
            },
            "chosen": dict(self.chosen[agent]),
        }


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
) -> Tuning | None:
    """Check a spec's ``[tuning]`` table; appends what is wrong to ``problems``.

    Args:
        table: the table as read from the spec.
        trainable: the trained agents by name (their classes).
        problems: where the problems go (the caller reports them all at once).

    Returns:
        The tuning, or None when the table is missing or unusable.
    """
    if table is None:
        return None
    where = "[tuning]"
    if not isinstance(table, dict):
        problems.append(f"{where} must be a table")
        return None
    extra = sorted(set(table) - _TUNING_KEYS)
    if extra:
        problems.append(f"{where}: unknown key(s) {extra}; allowed: {sorted(_TUNING_KEYS)}")
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
        problems.append(f"[tuning.per_agent]: {stray} are not in [tuning] agents {names}")
    unknown = [a for a in names if a not in trainable]
    if unknown:
        problems.append(
            f"{where}: agent(s) {unknown} are not trained agents {sorted(trainable)}; register "
            "them (agentbench_poad.baselines.ALGORITHMS), name your own algorithm class by spec "
            "('package.module:Class', 'path/to/file.py:Class') or drop them from the tuning"
        )
    common = _configurations(table, where, problems)
    searches: dict[str, AgentSearch] = {}
    for name in names:
        if name not in trainable:
            continue  # reported above
        own = per_agent.get(name) or {}
        here = f"[tuning.per_agent.{name}]"
        if not isinstance(own, dict):
            problems.append(f"{here} must be a table")
            own = {}
        extra = sorted(set(own) - _AGENT_KEYS)
        if extra:
            problems.append(f"{here}: unknown key(s) {extra}; allowed: {sorted(_AGENT_KEYS)}")
        configurations = _configurations(own, here, problems) or common
        if not configurations:
            problems.append(
                f"{where}: no search space for {name}; give configs = [{{...}}, ...] or "
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
        searches[name] = AgentSearch(tuple(configurations), tuple(seeds), steps)
    for name, search in searches.items():
        if len(search.configurations) < MIN_CONFIGURATIONS or len(search.seeds) < MIN_SEEDS:
            problems.append(
                f"{where}: {name} gets {len(search.configurations)} configuration(s) x "
                f"{len(search.seeds)} seed(s); the protocol needs at least {MIN_CONFIGURATIONS} "
                f"configurations and {MIN_SEEDS} seeds"
            )
    budgets = {name: s.budget for name, s in searches.items()}
    if len(set(budgets.values())) > 1:
        lines = ", ".join(
            f"{n}: {b[0]} configurations x seeds {list(b[1])} x {b[2]} steps"
            for n, b in budgets.items()
        )
        problems.append(
            f"{where}: the agents get unequal tuning budgets ({lines}); every agent needs the "
            "same number of configurations, the same seeds and the same steps"
        )
    chosen = table.get("chosen", {})
    if not isinstance(chosen, dict) or not all(isinstance(v, dict) for v in chosen.values()):
        problems.append(f"{where}: chosen must map agents to their chosen config (--select)")
        chosen = {}
    for name, config in chosen.items():
        search = searches.get(name)
        if search is None:
            problems.append(f"[tuning.chosen]: {name} is not a tuned agent")
        elif config not in search.configurations:
            problems.append(
                f"[tuning.chosen]: {name}'s {config} is not one of its configurations; "
                "only `agentbench-poad study SPEC --select` writes this table"
            )
    return Tuning(
        task=task,
        selection=str(selection),
        searches=searches,
        env_kwargs=dict(env_kwargs),
        chosen={k: dict(v) for k, v in chosen.items()},
    )


def check_evaluation_seeds(
    tuning: Tuning, where: str, seeds: Iterable[int], problems: list[str]
) -> None:
    """An evaluation group's seeds must be disjoint from the tuning seeds."""
    overlap = sorted(set(seeds) & tuning.seeds)
    if overlap:
        problems.append(
            f"{where}: evaluation seeds {overlap} are tuning seeds; evaluate on seeds the tuning "
            f"never saw (tuning seeds: {sorted(tuning.seeds)})"
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
            "(`agentbench-poad study SPEC --group tuning`):\n"
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
        selections.append(Selection(agent, dict(search.configurations[best]), best, means))
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
