"""The report as data: sections of paragraphs, tables and charts, built from records only.

:func:`build_model` turns validated run records and the paper's published numbers into a
:class:`Report`: plain frozen dataclasses holding every sentence and every table cell once, as
text. The Markdown and HTML renderers (:mod:`.markdown`, :mod:`.html_page`) only add markup; the
SVG module (:mod:`.svg`) draws the chart objects. Nothing here writes files or re-runs anything.

Sections, in order (``Section.anchor`` in brackets):

* results by environment [``by-env``]: one subsection per env with records -- a table of our
  rows (mean ± s.e. over seeds, success rate, score normalised between the random and oracle
  rows, ...) and a bar chart;
* learning curves [``learning-curves``]: mean with its shaded spread, per env;
* generalisation in the layout of the paper's Table 1 [``generalization``]: discounted return
  (our records' ``mean_discounted_return`` per seed; the undiscounted return, marked
  "(undiscounted)", for a record that logs none) and success rate per task, tasks as columns,
  our rows beside the paper's labelled rows;
* DataSciCoding in the layout of the paper's Table 4 [``datascicoding``]: ROC AUC, datasets as
  rows, our columns beside the paper's labelled columns;
* the paper's other tables [``paper-tables``]: dataset sizes (E.1), wall time (Table 5),
  language ability (Table 2) and any published number no layout places;
* a pairwise comparison with POAD [``pairwise``] (seeded bootstrap CI of the difference);
* the provenance of every row [``provenance``].

Paper numbers are only ever in rows or columns of kind ``"paper"``, labelled "(paper, Table N)";
they never enter a mean of ours. The paper's task layout comes from the env facts
(:func:`agentbench_poad.paper_layout`) and ``paper_results.json`` (``layouts``: orientation,
methods), never from literals here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbench_poad.leaderboard.records import mean_stderr, now_iso
from agentbench_poad.leaderboard.report.paper import PaperResults, layout_tasks
from agentbench_poad.leaderboard.report.stats import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    bootstrap_difference,
    normalised,
)
from agentbench_poad.registration import UnknownEnvError, env_facts
from agentbench_poad.version import __version__

#: The agent every other agent is compared with.
REFERENCE_AGENT = "poad"
#: Row and column kinds (the renderers style them; ``paper`` is always labelled and italic).
KINDS = ("", "anchor", "best", "paper")

NO_PAPER_NOTE = (
    "No published numbers are listed in paper_results.json, so there are no paper reference rows."
)


# -- the model ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Paragraph:
    """One sentence or more of text. ``anchor``: an id for links; ``callout``: set apart."""

    text: str
    anchor: str | None = None
    callout: bool = False


@dataclass(frozen=True)
class Row:
    """A table row: its cells as text and its kind (one of :data:`KINDS`)."""

    cells: tuple[str, ...]
    kind: str = ""


@dataclass(frozen=True)
class Table:
    """A captioned table. ``column_kinds`` marks whole columns (e.g. the paper's) by kind."""

    caption: str
    header: tuple[str, ...]
    rows: tuple[Row, ...]
    css: str = ""
    column_kinds: tuple[str, ...] = ()

    def column(self, name: str) -> list[str]:
        """The cells of the column headed ``name``."""
        j = self.header.index(name)
        return [row.cells[j] for row in self.rows]

    def row(self, first_cell: str) -> Row:
        """The first row whose first cell is ``first_cell``."""
        for row in self.rows:
            if row.cells and row.cells[0] == first_cell:
                return row
        raise KeyError(f"no row {first_cell!r} in table {self.caption!r}")


@dataclass(frozen=True)
class Bar:
    """One bar of a bar chart: a mean with its standard error."""

    agent: str
    label: str
    mean: float
    se: float | None = None
    paper: bool = False


@dataclass(frozen=True)
class BarChart:
    name: str
    title: str
    bars: tuple[Bar, ...]
    x_label: str


@dataclass(frozen=True)
class CurvePoint:
    """A learning-curve point: the mean and its band (``low``/``high``, e.g. mean ± s.e.)."""

    step: float
    mean: float
    low: float | None = None
    high: float | None = None

    @property
    def lower(self) -> float:
        return self.mean if self.low is None else self.low

    @property
    def upper(self) -> float:
        return self.mean if self.high is None else self.high


@dataclass(frozen=True)
class Curve:
    agent: str
    label: str
    points: tuple[CurvePoint, ...]


@dataclass(frozen=True)
class CurveChart:
    name: str
    title: str
    curves: tuple[Curve, ...]
    x_label: str
    y_label: str


Chart = BarChart | CurveChart


@dataclass(frozen=True)
class Section:
    """A headed part of the report; ``blocks`` may hold sub-sections."""

    heading: str
    anchor: str
    blocks: tuple[Paragraph | Table | BarChart | CurveChart | Section, ...]

    def walk(self) -> Iterator[Any]:
        for block in self.blocks:
            yield block
            if isinstance(block, Section):
                yield from block.walk()

    def tables(self) -> list[Table]:
        return [b for b in self.walk() if isinstance(b, Table)]

    def paragraphs(self) -> list[Paragraph]:
        return [b for b in self.walk() if isinstance(b, Paragraph)]


@dataclass(frozen=True)
class Report:
    """The whole report: title, opening paragraphs, sections and an index of its inputs."""

    title: str
    intro: tuple[Paragraph, ...]
    sections: tuple[Section, ...]
    index: dict[str, Any]

    def section(self, anchor: str) -> Section:
        for section in self.sections:
            for s in (section, *(b for b in section.walk() if isinstance(b, Section))):
                if s.anchor == anchor:
                    return s
        raise KeyError(f"no section {anchor!r}; have {[s.anchor for s in self.sections]}")

    def charts(self) -> list[Chart]:
        return [b for s in self.sections for b in s.walk() if isinstance(b, BarChart | CurveChart)]

    def tables(self) -> list[Table]:
        return [t for s in self.sections for t in s.tables()]


# -- env facts ---------------------------------------------------------------------------------
def _facts(env_id: str, records: Sequence[dict[str, Any]] = ()) -> tuple[str, str]:
    """``(family, task)`` of ``env_id`` from the env facts; for an id this interpreter has not
    registered (a record of another package's env), the family its records carry and the id."""
    try:
        facts = env_facts(env_id)
    except UnknownEnvError:
        family = next((r["env"]["family"] for r in records if r["env"]["id"] == env_id), "")
        return family, env_id
    return facts.family, facts.task


# -- formatting --------------------------------------------------------------------------------
def _fmt(value: float | None, digits: int = 3) -> str:
    return "--" if value is None else f"{value:.{digits}f}"


def _pm(mean: float, se: float | None, digits: int = 3) -> str:
    return f"{mean:.{digits}f} ± {se:.{digits}f}" if se is not None else f"{mean:.{digits}f}"


def _published(item: dict[str, Any]) -> str:
    """A published number as printed (no rounding), with its spread when it has one."""
    if item.get("printed"):
        return item["printed"]
    text = str(item["value"])
    return f"{text} ± {item['spread']}" if item.get("spread") is not None else text


def _hours(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60} m"


def _agent_label(record: dict[str, Any]) -> str:
    """Agent, base model and training env: the same label on every env the agent is scored on."""
    label = record["agent"]["name"]
    base = record["model"].get("base")
    if base:
        label += f" ({Path(base.rstrip('/')).name})"
    trained_on = (record.get("training") or {}).get("env_id")
    if trained_on and trained_on != record["env"]["id"]:
        label += f" [trained on {trained_on}]"
    outside = (record.get("training") or {}).get("trainer_version")  # docs/integrations.md
    if outside:
        label += f" [trainer: {outside}]"
    return label


def _paper_label(item: dict[str, Any], table: str | None = None) -> str:
    return (
        f"{item.get('label') or item['agent']} (paper, {table or item.get('table', 'published')})"
    )


def _anchor_score(records: Sequence[dict[str, Any]], name: str) -> float | None:
    for r in records:
        if r["agent"]["name"].lower() == name and not (r.get("training") or {}).get("env_id"):
            return r["scores"]["mean"]
    for r in records:
        if r["agent"]["name"].lower() == name:
            return r["scores"]["mean"]
    return None


def _episode_scores(record: dict[str, Any]) -> list[float]:
    return [
        e.get("score", e["return"]) for s in record["scores"]["per_seed"] for e in s["episodes"]
    ]


def _seed_discounted(seed: dict[str, Any]) -> float | None:
    """A seed's mean discounted return: its ``mean_discounted_return``, else the mean of its
    episodes' ``discounted_return`` when every episode logs one, else None."""
    if seed.get("mean_discounted_return") is not None:
        return float(seed["mean_discounted_return"])
    values = [e.get("discounted_return") for e in seed["episodes"]]
    if not values or any(v is None for v in values):
        return None
    return sum(values) / len(values)


def _discounted(record: dict[str, Any]) -> tuple[float, float] | None:
    """Mean ± s.e. over seeds of the discounted return, when every seed has one (None else)."""
    per_seed = [_seed_discounted(s) for s in record["scores"]["per_seed"]]
    if not per_seed or any(v is None for v in per_seed):
        return None
    return mean_stderr(per_seed)


# -- the sections ------------------------------------------------------------------------------
class _Inputs:
    """Records grouped by env and paper results placed in their layouts."""

    def __init__(self, records: Sequence[dict[str, Any]], paper: PaperResults) -> None:
        self.records = list(records)
        self.paper = paper
        self.by_env: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in self.records:
            self.by_env[r["env"]["id"]].append(r)
        self.placed: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.unplaced: list[dict[str, Any]] = []
        for item in paper.results:
            name = item.get("layout") or self._layout_of(item["env_id"])
            (self.placed[name] if name else self.unplaced).append(item)

    def _layout_of(self, env_id: str) -> str | None:
        for name, layout in self.paper.layouts.items():
            if env_id in {e for e, _ in layout_tasks(layout)}:
                return name
        return None

    def published(self, layout: str, env_id: str, agent: str, metric: str) -> dict | None:
        for item in self.placed.get(layout, []):
            if (item["env_id"], item["agent"], item["metric"]) == (env_id, agent, metric):
                return item
        return None

    def methods(self, layout: str) -> list[dict[str, str]]:
        """The paper's methods of ``layout`` in its order, then any other agent placed there."""
        listed = list(self.paper.layouts[layout].get("methods", []))
        known = {m["agent"] for m in listed}
        for item in self.placed.get(layout, []):
            if item["agent"] not in known:
                known.add(item["agent"])
                listed.append({"agent": item["agent"], "label": item.get("label") or item["agent"]})
        return listed


def _env_section(env_id: str, inputs: _Inputs) -> Section:
    recs = sorted(inputs.by_env[env_id], key=lambda r: -r["scores"]["mean"])
    random_score, oracle_score = _anchor_score(recs, "random"), _anchor_score(recs, "oracle")
    metric = recs[0]["scores"]["metric"]
    score_name = "final-code ROC AUC" if metric == "final_auc" else "episodic return"
    rows: list[Row] = []
    bars: list[Bar] = []
    for r in recs:
        sc = r["scores"]
        failed = sum(s.get("failed_episodes", 0) for s in sc["per_seed"])
        kind = "anchor" if r["agent"]["name"].lower() in ("random", "oracle") else ""
        label = _agent_label(r)
        rows.append(
            Row(
                (
                    label,
                    _pm(sc["mean"], sc["stderr"]),
                    _pm(sc["success_rate"], sc["success_rate_stderr"]),
                    _fmt(normalised(sc["mean"], random_score, oracle_score)),
                    f"{len(sc['per_seed'])} × {r['protocol']['episodes_per_seed']}",
                    str(failed),
                    f"record {r['record_id']}",
                ),
                kind,
            )
        )
        bars.append(Bar(r["agent"]["name"], label, sc["mean"], sc["stderr"]))
        best = (r.get("training") or {}).get("best_code")
        if best:
            rows.append(
                Row(
                    (
                        f"{label} — {best['label']}",
                        _fmt(best["reward"]),
                        "--",
                        "--",
                        "1 code",
                        "--",
                        f"record {r['record_id']} (training.best_code)",
                    ),
                    "best",
                )
            )
    table = Table(
        f"{env_id}: {score_name} and success rate (ours; the paper's numbers are in "
        "the layouts of its tables below)",
        (
            "agent",
            "score",
            "success rate",
            "normalised",
            "seeds × episodes",
            "failed episodes",
            "row source",
        ),
        tuple(rows),
        css="env-table",
    )
    chart = BarChart(f"bars-{env_id}", f"{env_id}: mean ± s.e. over seeds", tuple(bars), score_name)
    return Section(env_id, f"env-{env_id}", (table, chart))


def _curves_section(env_ids: Sequence[str], inputs: _Inputs) -> Section:
    blocks: list[Any] = []
    for env_id in env_ids:
        with_curve = [
            r
            for r in inputs.by_env.get(env_id, [])
            if r.get("learning_curve") and r["learning_curve"]["points"]
        ]
        if not with_curve:
            continue
        first = with_curve[0]["learning_curve"]
        curves = tuple(
            Curve(
                r["agent"]["name"],
                _agent_label(r),
                tuple(
                    CurvePoint(p["step"], p["mean"], p.get("low"), p.get("high"))
                    for p in r["learning_curve"]["points"]
                ),
            )
            for r in with_curve
        )
        blocks.append(Paragraph(f"{env_id}: shaded band = {first.get('spread', 'spread')}."))
        blocks.append(
            CurveChart(
                f"curve-{env_id}",
                f"{env_id}: learning curves",
                curves,
                first.get("x", "env steps"),
                first.get("y", "return"),
            )
        )
    if not blocks:
        blocks.append(
            Paragraph("No record has a learning curve yet (records of trained agents carry one).")
        )
    return Section("Learning curves", "learning-curves", tuple(blocks))


def _missing_layout(name: str, what: str, anchor: str) -> Section:
    return Section(
        what,
        anchor,
        (
            Paragraph(
                f"paper_results.json has no {name!r} layout, so this table cannot be laid out; add the "
                "layout (its tasks and methods) to that file."
            ),
        ),
    )


def _generalisation_section(inputs: _Inputs) -> Section:
    name, heading, anchor = (
        "table1",
        "Generalisation (layout of the paper's Table 1)",
        "generalization",
    )
    layout = inputs.paper.layouts.get(name)
    if layout is None:
        return _missing_layout(name, heading, anchor)
    columns = [
        (env_id, f"{label} (training task)" if env_id == layout.get("trained_on") else label)
        for env_id, label in layout_tasks(layout)
    ]
    header = ("agent", *(label for _, label in columns))

    ours_return: dict[str, dict[str, str]] = defaultdict(dict)
    ours_success: dict[str, dict[str, str]] = defaultdict(dict)
    undiscounted = False
    gammas: set[float | None] = set()
    source = layout.get("trained_on")
    for env_id, _ in columns:
        for r in inputs.by_env.get(env_id, []):
            label, sc = _agent_label(r), r["scores"]
            if env_id == source and (r.get("training") or {}).get("env_id") == source:
                # a model trained on the source task, scored there: the same row as its scores
                # on the unseen tasks (which carry the "[trained on ...]" label)
                label += f" [trained on {source}]"
            # the discounted return when the record logs it for every seed; else, marked, the
            # undiscounted return (records made before episodes logged a discounted return)
            discounted = _discounted(r)
            if discounted is not None:
                gammas.add(r["protocol"].get("discount"))
                ours_return[label][env_id] = _pm(*discounted)
            else:
                undiscounted = True
                ours_return[label][env_id] = f"{_pm(sc['mean'], sc['stderr'])} (undiscounted)"
            ours_success[label][env_id] = _pm(sc["success_rate"], sc["success_rate_stderr"])

    def table(metric: str, ours: dict[str, dict[str, str]], caption: str, css: str) -> Table:
        rows = [
            Row((label, *(cells.get(env_id, "--") for env_id, _ in columns)))
            for label, cells in sorted(ours.items())
        ]
        if not rows:
            rows.append(Row(("(no records of ours on these tasks yet)", *("--" for _ in columns))))
        for method in inputs.methods(name):
            cells = []
            for env_id, _ in columns:
                item = inputs.published(name, env_id, method["agent"], metric)
                cells.append(_published(item) if item else "--")
            if any(c != "--" for c in cells):
                rows.append(Row((f"{method['label']} (paper, {layout['table']})", *cells), "paper"))
        return Table(caption, header, tuple(rows), css=css)

    note = (
        " Cells marked (undiscounted) hold our records' undiscounted episodic return, which "
        "is not the paper's discounted return: compare their success rates, not these "
        "numbers."
        if undiscounted
        else ""
    )
    stated = sorted(f"{g:g}" for g in gammas if g is not None)
    ours = (
        "Ours: mean ± s.e. over seeds of the discounted return Σ_t γ^t r_t over decisions"
        + (f" (γ = {', '.join(stated)}, the records' protocol.discount)" if stated else "")
        + "."
        if gammas
        else "Ours: mean ± s.e. over seeds."
    )
    return_table = table(
        "discounted_return",
        ours_return,
        f"Discounted episodic return per task. {ours} Paper rows: "
        f"{layout['table']}, as published.{note}",
        "generalization-table generalization-return",
    )
    success_table = table(
        "success_rate",
        ours_success,
        f"Success rate per task (success = return > 0, REFERENCE_SPEC §2.5). Ours: mean ± s.e. "
        f"over seeds. Paper rows: {layout['table']}, as published.",
        "generalization-table generalization-success",
    )
    intro = Paragraph(
        f"{layout['title']}. {layout.get('description', '')} Columns are the "
        f"tasks of the paper's {layout['env_facts_table']} (from the env facts) "
        "in its order; paper rows are labelled "
        "'(paper, ...)' and set in italics."
    )
    return Section(heading, anchor, (intro, return_table, success_table))


def _datascicoding_section(env_ids: Sequence[str], inputs: _Inputs) -> Section:
    name, heading, anchor = (
        "table4",
        "DataSciCoding (layout of the paper's Table 4)",
        "datascicoding",
    )
    layout = inputs.paper.layouts.get(name)
    if layout is None:
        return _missing_layout(name, heading, anchor)
    tasks = layout_tasks(layout)
    listed = {env_id for env_id, _ in tasks}
    family = {_facts(e, inputs.records)[0] for e in listed}
    tasks += [
        (e, _facts(e, inputs.records)[1])
        for e in env_ids
        if e not in listed and _facts(e, inputs.records)[0] in family
    ]

    columns: list[str] = []
    cells: dict[str, dict[str, str]] = defaultdict(dict)
    for env_id, _ in tasks:
        for r in inputs.by_env.get(env_id, []):
            col = _agent_label(r)
            columns.append(col)
            cells[env_id][col] = _pm(r["scores"]["mean"], r["scores"]["stderr"])
            best = (r.get("training") or {}).get("best_code")
            if best:
                bcol = f"{col}: best code during training"
                columns.append(bcol)
                cells[env_id][bcol] = _fmt(best["reward"])
    columns = list(dict.fromkeys(columns))
    paper_columns: list[str] = []
    for method in inputs.methods(name):
        col = f"{method['label']} (paper, {layout['table']})"
        for env_id, _ in tasks:
            for metric in layout.get("metrics") or ("final_auc", "best_code_auc"):
                item = inputs.published(name, env_id, method["agent"], metric)
                if item:
                    cells[env_id][col] = _published(item)
        if any(col in cells[e] for e, _ in tasks):
            paper_columns.append(col)
    header = ("dataset", *columns, *paper_columns)
    rows = tuple(
        Row((label, *(cells[env_id].get(c, "--") for c in header[1:])))
        for env_id, label in tasks
        if cells.get(env_id) or env_id in listed
    )
    table = Table(
        "ROC AUC per dataset. Ours: final-code AUC, mean ± s.e. over seeds (a run whose "
        "attempts all failed scores 0); a 'best code during training' column is the best reward "
        "seen while training, labelled as such, not the final policy. Paper columns: "
        f"{layout['table']}, as published.",
        header,
        rows,
        css="dsc-table",
        column_kinds=("", *("" for _ in columns), *("paper" for _ in paper_columns)),
    )
    intro = Paragraph(
        f"{layout['title']}. {layout.get('description', '')} Rows are the "
        f"datasets of the paper's {layout['env_facts_table']} (from the env facts), "
        "then any other dataset of the family we scored; paper "
        "columns are labelled '(paper, ...)' and set in italics."
    )
    return Section(heading, anchor, (intro, table))


def _paper_tables_section(inputs: _Inputs) -> Section:
    paper = inputs.paper
    blocks: list[Any] = []
    if paper.datasets:
        blocks.append(
            Table(
                "Dataset sizes after CAAFE's pruning (paper, Appendix E.1)",
                ("dataset", "env id", "features", "samples", "classes", "source"),
                tuple(
                    Row(
                        (
                            d["label"],
                            d["env_id"],
                            str(d["features"]),
                            str(d["samples"]),
                            str(d["classes"]),
                            d["source"]["where"],
                        ),
                        "paper",
                    )
                    for d in paper.datasets
                ),
                css="paper-datasets",
            )
        )
    if paper.wall_time:
        blocks.append(
            Table(
                "Wall time of POAD training on DataSciCoding (paper, Table 5 / Appendix G)",
                ("env id", "agent", "wall time", "env steps", "hardware", "base model", "source"),
                tuple(
                    Row(
                        (
                            w["env_id"],
                            w["agent"],
                            _hours(w["wall_time_s"]),
                            str(w.get("env_steps") or "--"),
                            w.get("hardware") or "--",
                            w.get("base_model") or "--",
                            w["source"]["where"],
                        ),
                        "paper",
                    )
                    for w in paper.wall_time
                ),
                css="paper-wall-time",
            )
        )
    if paper.language_ability:
        benches = list(dict.fromkeys(x["benchmark"] for x in paper.language_ability))
        models = list(dict.fromkeys(x["model"] for x in paper.language_ability))
        value = {(x["model"], x["benchmark"]): str(x["value"]) for x in paper.language_ability}
        table = paper.language_ability[0].get("table", "Table 2")
        blocks.append(
            Table(
                f"Zero-shot language ability after RL fine-tuning on Food Preparation (paper, "
                f"{table})",
                ("model", *benches),
                tuple(
                    Row((f"{m} (paper)", *(value.get((m, b), "--") for b in benches)), "paper")
                    for m in models
                ),
                css="paper-language",
            )
        )
    if inputs.unplaced:
        blocks.append(
            Table(
                "Published numbers that no layout of paper_results.json places",
                ("env id", "agent", "metric", "value", "source"),
                tuple(
                    Row(
                        (
                            p["env_id"],
                            _paper_label(p),
                            p["metric"],
                            _published(p),
                            p["source"]["where"],
                        ),
                        "paper",
                    )
                    for p in inputs.unplaced
                ),
                css="paper-other",
            )
        )
    if not blocks:
        blocks.append(Paragraph("paper_results.json lists none of the paper's other tables."))
    return Section("Other tables of the paper", "paper-tables", tuple(blocks))


def _pairwise_section(env_ids: Sequence[str], inputs: _Inputs) -> Section:
    rows: list[Row] = []
    for env_id in env_ids:
        recs = inputs.by_env.get(env_id, [])
        refs = [r for r in recs if r["agent"]["name"].lower() == REFERENCE_AGENT]
        if not refs:
            continue
        ref = refs[0]
        for r in recs:
            if r is ref:
                continue
            if len(r["scores"]["per_seed"]) >= 2 and len(ref["scores"]["per_seed"]) >= 2:
                a = [s["score"] for s in r["scores"]["per_seed"]]
                b = [s["score"] for s in ref["scores"]["per_seed"]]
                unit = "seeds"
            else:
                a, b, unit = _episode_scores(r), _episode_scores(ref), "episodes"
            diff, lo, hi = bootstrap_difference(a, b)
            verdict = "better" if lo > 0 else "worse" if hi < 0 else "no clear difference"
            rows.append(
                Row(
                    (
                        env_id,
                        _agent_label(r),
                        f"{diff:+.3f}",
                        f"[{lo:+.3f}, {hi:+.3f}]",
                        unit,
                        verdict,
                    )
                )
            )
    if not rows:
        rows.append(
            Row(("--", f"(no {REFERENCE_AGENT.upper()} record yet)", "--", "--", "--", "--"))
        )
    table = Table(
        f"Difference in score, agent − {REFERENCE_AGENT.upper()}, with a "
        f"{BOOTSTRAP_RESAMPLES}-resample percentile bootstrap 95% CI (seed "
        f"{BOOTSTRAP_SEED}); unit = seeds when both rows have ≥ 2, else episodes",
        ("env", "agent", "difference", "95% CI", "unit", "verdict"),
        tuple(rows),
        css="pairwise",
    )
    return Section(f"Pairwise comparison with {REFERENCE_AGENT.upper()}", "pairwise", (table,))


def _provenance_section(inputs: _Inputs) -> Section:
    rows: list[Row] = []
    for r in sorted(inputs.records, key=lambda r: r["record_id"]):
        sw, hw = r["software"], r["hardware"]
        commit = (sw.get("git_commit") or "unknown")[:10] + (
            " (dirty)" if sw.get("git_dirty") else ""
        )
        rows.append(
            Row(
                (
                    r["record_id"],
                    r["agent"]["version"],
                    f"{r['model'].get('base') or '--'} / {r['model'].get('adapter') or '--'}",
                    r["created_at"],
                    commit,
                    sw["package_version"],
                    f"{hw.get('platform', '?')}, {hw.get('cpu_count', '?')} CPU"
                    + (f", {hw['accelerator']}" if hw.get("accelerator") else ""),
                    f"{r['wall_time_s']:.1f}",
                    r["command"],
                )
            )
        )
    for p in inputs.paper.results:
        how = f" ({p['source']['reading']})" if p["source"].get("reading") else ""
        rows.append(
            Row(
                (
                    f"paper: {p.get('label') or p['agent']} on {p['env_id']}, {p['metric']}",
                    "--",
                    p.get("base_model") or "--",
                    "--",
                    "--",
                    "--",
                    "--",
                    "--",
                    f"{p['source']['where']}: {p['source']['url']}{how}",
                ),
                "paper",
            )
        )
    table = Table(
        "Where each row comes from",
        (
            "record",
            "agent version",
            "model / adapter",
            "created",
            "git commit",
            "package",
            "hardware",
            "wall time (s)",
            "command",
        ),
        tuple(rows),
        css="provenance",
    )
    return Section("Provenance of every row", "provenance", (table,))


def build_model(
    records: Sequence[dict[str, Any]],
    paper: PaperResults,
    *,
    title: str = "agentbench-poad leaderboard",
    built: str | None = None,
) -> Report:
    """The report of ``records`` beside the published numbers ``paper``.

    Args:
        records: validated run records (e.g. :func:`~agentbench_poad.leaderboard.load_records`).
        paper: the published numbers and layouts (:func:`.paper.load_paper`).
        title: the page title.
        built: the build time shown (default: now, UTC); pass one for a reproducible model.

    Returns:
        The :class:`Report`; render it with :func:`.markdown.render_markdown` and
        :func:`.html_page.render_html`.
    """
    inputs = _Inputs(records, paper)
    built = built or now_iso()
    env_ids = sorted(inputs.by_env)
    intro = [
        Paragraph(
            f"Built {built} by agentbench-poad {__version__} from {len(inputs.records)} record(s). "
            "Scores are mean ± standard error over seeds; 'normalised' maps the random row to 0 and "
            "the oracle row to 1. Rows and columns marked '(paper, ...)' are the published numbers "
            "of Wen et al. (NeurIPS 2024), set in italics beside ours and never mixed into our "
            "means."
        )
    ]
    if not paper.results:
        intro.append(Paragraph(NO_PAPER_NOTE, anchor="no-paper-numbers", callout=True))
    sections = (
        Section(
            "Results by environment",
            "by-env",
            tuple(_env_section(e, inputs) for e in env_ids) or (Paragraph("No records yet."),),
        ),
        _curves_section(env_ids, inputs),
        _generalisation_section(inputs),
        _datascicoding_section(env_ids, inputs),
        _paper_tables_section(inputs),
        _pairwise_section(env_ids, inputs),
        _provenance_section(inputs),
    )
    index = {
        "records": [r["record_id"] for r in inputs.records],
        "paper_results": len(paper.results),
        "env_ids": sorted(set(env_ids) | {p["env_id"] for p in paper.results}),
        "built": built,
    }
    return Report(title, tuple(intro), sections, index)
