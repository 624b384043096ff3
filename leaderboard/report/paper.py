"""The paper's published numbers (``leaderboard/paper_results.json``): schema, checks, loading.

The file holds the numbers of Wen et al. (NeurIPS 2024, arXiv 2405.15821) that the report shows
as labelled reference rows, never mixed into our means:

* ``results`` -- one entry per published cell (Table 1 / Appendix H generalisation: discounted
  return and success rate per unseen VirtualHome task; Table 4 / Appendix F: ROC AUC per dataset),
  each citing its table (``source.where``) and how it is read (``source.reading``);
* ``layouts`` -- how each of the paper's tables is laid out: tasks as columns (Table 1) or rows
  (Table 4), the paper's methods in its order, and ``env_facts_table``, the name under which the
  env facts list the table's tasks. Which env ids those tasks are, in the paper's order, and
  their names in the paper are env facts (:func:`agentbench_poad.paper_layout`,
  ``env_facts(id).paper_name``), recorded at registration from the task tables: one source;
* ``datasets`` (Appendix E.1 sizes), ``wall_time`` (Table 5 / Appendix G) and
  ``language_ability`` (Table 2 / Appendix I).

Version history of the file's ``schema_version``:

* ``1`` -- ``results`` only (with ``stderr``); shipped empty.
* ``2`` -- ``layouts`` (tasks from the env facts), ``spread`` instead of ``stderr``, ``source.reading``, ``label``,
  ``trained_on``, ``printed``; the E.1 / Table 5 / Table 2 tables; metrics ``discounted_return`` and
  ``best_code_auc``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Where the paper's published numbers live (see docs/leaderboard.md before editing).
PAPER_RESULTS = Path(__file__).resolve().parent.parent / "paper_results.json"
PAPER_SCHEMA_VERSION = 2

#: Metrics a published number may have. ``discounted_return`` and ``best_code_auc`` are kept
#: apart from our records' ``return`` (undiscounted) and ``final_auc`` on purpose.
PAPER_METRICS = ("return", "discounted_return", "success_rate", "final_auc", "best_code_auc")

_STR = {"type": "string", "minLength": 1}
_STR_OR_NULL = {"type": ["string", "null"]}
_NUM_OR_NULL = {"type": ["number", "null"]}
_SOURCE = {
    "type": "object",
    "required": ["url", "where"],
    "properties": {"url": _STR, "where": _STR, "reading": _STR},
}
_METHOD = {
    "type": "object",
    "required": ["agent", "label"],
    "properties": {"agent": _STR, "label": _STR},
}

#: JSON Schema of ``paper_results.json`` (version 2).
PAPER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["schema_version", "results"],
    "properties": {
        "schema_version": {"const": PAPER_SCHEMA_VERSION},
        "layouts": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["table", "title", "env_facts_table", "tasks_as", "methods"],
                "properties": {
                    "table": _STR,
                    "title": _STR,
                    "description": {"type": "string"},
                    "trained_on": _STR_OR_NULL,
                    "tasks_as": {"enum": ["columns", "rows"]},
                    "env_facts_table": _STR,
                    "methods": {"type": "array", "items": _METHOD},
                    "metrics": {"type": "array", "items": {"enum": list(PAPER_METRICS)}},
                },
            },
        },
        "results": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["env_id", "agent", "metric", "value", "source"],
                "properties": {
                    "table": {"type": "string"},
                    "layout": _STR_OR_NULL,
                    "env_id": _STR,
                    "agent": _STR,
                    "label": _STR,
                    "metric": {"enum": list(PAPER_METRICS)},
                    "value": {"type": "number"},
                    "printed": _STR,
                    "spread": _NUM_OR_NULL,
                    "spread_kind": _STR_OR_NULL,
                    "base_model": _STR_OR_NULL,
                    "trained_on": _STR_OR_NULL,
                    "source": _SOURCE,
                },
            },
        },
        "datasets": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["env_id", "label", "features", "samples", "classes", "source"],
                "properties": {
                    "env_id": _STR,
                    "label": _STR,
                    "table": _STR,
                    "source": _SOURCE,
                    "features": {"type": "integer", "minimum": 1},
                    "samples": {"type": "integer", "minimum": 1},
                    "classes": {"type": "integer", "minimum": 2},
                },
            },
        },
        "wall_time": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["env_id", "agent", "wall_time_s", "source"],
                "properties": {
                    "env_id": _STR,
                    "agent": _STR,
                    "table": _STR,
                    "source": _SOURCE,
                    "wall_time_s": {"type": "number", "exclusiveMinimum": 0},
                    "env_steps": {"type": ["integer", "null"]},
                    "hardware": _STR_OR_NULL,
                    "base_model": _STR_OR_NULL,
                },
            },
        },
        "language_ability": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["model", "benchmark", "value", "source"],
                "properties": {
                    "model": _STR,
                    "agent": _STR,
                    "benchmark": _STR,
                    "table": _STR,
                    "value": {"type": "number", "minimum": 0, "maximum": 1},
                    "source": _SOURCE,
                },
            },
        },
    },
}


@dataclass(frozen=True)
class PaperResults:
    """The published numbers and the paper's task layouts (plain JSON dicts inside).

    Attributes:
        results: one dict per published cell (see ``entry_schema`` in the file).
        layouts: layout name (``"table1"``, ``"table4"``) -> its tasks, methods and title.
        datasets: Appendix E.1 rows.
        wall_time: Table 5 rows.
        language_ability: Table 2 cells.
    """

    results: tuple[dict[str, Any], ...] = ()
    layouts: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    datasets: tuple[dict[str, Any], ...] = ()
    wall_time: tuple[dict[str, Any], ...] = ()
    language_ability: tuple[dict[str, Any], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.results or self.datasets or self.wall_time or self.language_ability)

    def in_layout(self, layout: str) -> list[dict[str, Any]]:
        """The results placed in ``layout``."""
        return [r for r in self.results if r.get("layout") == layout]


def layout_tasks(layout: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(env id, name in the paper)`` of a layout's tasks, in the paper's order (env facts)."""
    from agentbench_poad.registration import env_facts, paper_layout

    return [
        (env_id, env_facts(env_id).paper_name or env_facts(env_id).task)
        for env_id in paper_layout(layout["env_facts_table"])
    ]


def _number(text: str | None) -> float | None:
    try:
        return None if text is None else float(text)
    except ValueError:
        return float("nan")  # never equal: reported as a mismatch


def check_paper_data(data: Any, where: str = "paper results") -> PaperResults:
    """Validate a parsed ``paper_results.json`` and return it as :class:`PaperResults`.

    Besides the JSON schema: every result names a known layout, every env id it names is a task
    of that layout's table in the env facts, its ``printed`` text agrees with its numbers, and no
    cell is given twice.

    Raises:
        ValueError: the data does not match; the message says what to fix.
    """
    import jsonschema

    try:
        jsonschema.validate(data, PAPER_SCHEMA)
    except jsonschema.ValidationError as exc:
        path = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
        raise ValueError(
            f"{where}: does not match the paper-results schema at {path}: "
            f"{exc.message}; see the entry_schema in paper_results.json"
        ) from exc
    layouts = dict(data.get("layouts") or {})
    seen: set[tuple[Any, ...]] = set()
    for i, item in enumerate(data["results"]):
        name = item.get("layout")
        if name is not None:
            if name not in layouts:
                raise ValueError(
                    f"{where}: results[{i}] names layout {name!r}, which is not in "
                    f"`layouts` ({', '.join(layouts) or 'none'}); add it there"
                )
            tasks = {env_id for env_id, _ in layout_tasks(layouts[name])}
            if item["env_id"] not in tasks:
                raise ValueError(
                    f"{where}: results[{i}] is on {item['env_id']}, which the env "
                    f"facts do not list in {layouts[name]['env_facts_table']!r} "
                    f"(layout {name!r}); fix the env id, or the task table's "
                    "paper_tables"
                )
        if "printed" in item:
            number, _, spread = item["printed"].partition(" ± ")
            if _number(number) != item["value"] or _number(spread or None) != item.get("spread"):
                raise ValueError(
                    f"{where}: results[{i}] prints {item['printed']!r} but holds "
                    f"value {item['value']!r}, spread {item.get('spread')!r}; make "
                    "them agree"
                )
        key = (name, item["env_id"], item["agent"], item["metric"])
        if key in seen:
            raise ValueError(f"{where}: results[{i}] repeats the cell {key}; keep one entry")
        seen.add(key)
    return PaperResults(
        results=tuple(data["results"]),
        layouts=layouts,
        datasets=tuple(data.get("datasets") or ()),
        wall_time=tuple(data.get("wall_time") or ()),
        language_ability=tuple(data.get("language_ability") or ()),
    )


def load_paper(path: Path | str | None = None) -> PaperResults:
    """The published numbers with their layouts (validated); default: the shipped file."""
    path = Path(path) if path is not None else PAPER_RESULTS
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(
            f"{path}: not valid JSON ({exc}); fix the file or pass another --paper FILE"
        ) from exc
    return check_paper_data(data, str(path))


def load_paper_results(path: Path | str | None = None) -> list[dict[str, Any]]:
    """The published numbers of ``path`` (default: the shipped file) as a list of entries."""
    return list(load_paper(path).results)


def as_paper(paper: PaperResults | Sequence[dict[str, Any]] | None) -> PaperResults:
    """``paper`` as :class:`PaperResults`: ``None`` loads the shipped file; a bare list of
    entries is taken as the only published numbers, placed with the shipped layouts (the
    layout is a fact of the paper, not of the numbers)."""
    if isinstance(paper, PaperResults):
        return paper
    shipped = load_paper()
    if paper is None:
        return shipped
    return PaperResults(results=tuple(paper), layouts=shipped.layouts)
