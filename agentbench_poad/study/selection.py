"""Choosing each agent's configuration after the tuning runs (``study SPEC --select``).

The tuning cells run first (``agentbench-poad study SPEC``; the tuned groups wait), then
:func:`select_configs` / :func:`select_all` apply the protocol's selection rule to the finished
tuning runs and write the choice into the spec (``[tuning.chosen]``, or
``[tuning_chosen.<name>]`` for ``[[tuning]]`` entries), then ``agentbench-poad study SPEC`` trains
and evaluates the tuned groups. The protocol itself is read by :mod:`agentbench_poad.study.tuning`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbench_poad.study import tomlcompat
from agentbench_poad.study.grid import Study
from agentbench_poad.study.plan import run_state
from agentbench_poad.study.specfile import StudyError
from agentbench_poad.study.tuning import CHOSEN_TABLE, SELECTION_RULES, TUNING_GROUP, Tuning

__all__ = [
    "SelectAll",
    "Selection",
    "run_scores",
    "select",
    "select_all",
    "select_configs",
    "tuning_run_done",
    "write_chosen",
    "write_chosen_all",
]


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


# -- writing the choice into the spec ------------------------------------------------------------
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


def _score_lines(selections: Sequence[Selection]) -> list[str]:
    """One comment line per agent: its score per configuration and the one chosen."""
    lines = []
    for s in selections:
        scores = ", ".join(f"config{i} {v:.4f}" for i, v in enumerate(s.scores))
        lines.append(f"#   {s.agent}: {scores} -> config{s.index}")
    return lines


def _toml_table(name: str, chosen: dict[str, dict[str, Any]]) -> list[str]:
    """The TOML lines of the table ``[name]``: one ``agent = { field = value, ... }`` each."""
    return [f"[{name}]", *(f"{_toml_key(a)} = {_toml_value(c)}" for a, c in chosen.items())]


def _write_into_spec(spec_path: Path, table: str, value: dict[str, Any], lines: list[str]) -> None:
    """Write ``value`` into the spec as its table ``table`` (dotted: ``tuning.chosen``).

    A JSON spec is rewritten with ``value`` in that place. A TOML spec keeps its text and
    comments: ``lines`` (the table as TOML, with comments) go into one marked block at its end,
    which replaces the block when it exists.

    Raises:
        ValueError: a TOML spec holds ``table`` outside the block (written by hand).
    """
    text = spec_path.read_text(encoding="utf-8")
    keys = table.split(".")
    if spec_path.suffix == ".json":
        spec = json.loads(text)
        parent = spec
        for key in keys[:-1]:
            parent = parent.setdefault(key, {})
        parent[keys[-1]] = value
        spec_path.write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
        return
    begin = f"# -- [{table}]: written by `agentbench-poad study SPEC --select`; do not edit --"
    end = f"# -- end of [{table}] --"
    if begin in text:
        head, _, rest = text.partition(begin)
        _, _, tail = rest.partition(end)
        text = head.rstrip("\n") + "\n" + tail.lstrip("\n")
    else:
        found: Any = tomlcompat.loads(text)
        for key in keys:
            found = found.get(key) if isinstance(found, dict) else None
        if found is not None:
            raise ValueError(
                f"{spec_path} has a hand-written [{table}]; remove it and run --select again"
            )
    block = "\n".join([begin, *lines, end])
    spec_path.write_text(text.rstrip("\n") + "\n\n" + block + "\n", encoding="utf-8")


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
    lines = [
        f"# rule: {tuning.selection}; score per configuration (mean over seeds):",
        *_score_lines(selections),
        *_toml_table("tuning.chosen", chosen),
    ]
    _write_into_spec(spec_path, "tuning.chosen", chosen, lines)
    return True


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
    lines = []
    for name, chosen in new.items():
        if selections.get(name):
            lines.append(
                f"# {name}: rule {by_name[name].selection}; score per configuration (mean over "
                "seeds):"
            )
            lines += _score_lines(selections[name])
        lines += _toml_table(f"{CHOSEN_TABLE}.{_toml_key(name)}", chosen)
    _write_into_spec(spec_path, CHOSEN_TABLE, new, lines)
    return True


# -- a study's --select ---------------------------------------------------------------------------
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
        One :class:`Selection` per tuned agent.

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
