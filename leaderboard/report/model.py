"""The report as data: sections of paragraphs, tables and charts, built from records only.

:func:`build_model` turns validated run records and the paper's published numbers into a
:class:`Report` (the blocks are in :mod:`.blocks`). The Markdown and HTML renderers
(:mod:`.markdown`, :mod:`.html_page`) only add markup; :mod:`.charts` draws the chart objects
with matplotlib. Nothing here writes files or re-runs anything.

Sections, in order (``Section.anchor`` in brackets):

* results by environment [``by-env``]: one subsection per env with records -- a table of our
  rows (mean ± s.e. over seeds, or "n = 1"; IQM with its 95 % CI; success rate; score
  normalised between the random and oracle rows of the row's env kwargs; the discounted return beside the undiscounted
  one on the tasks of the paper's Table 1, whose metric it is) and a chart of the IQMs with CIs;
* learning curves [``learning-curves``]: every agent's mean with its shaded band, per env, on
  the same axes (env steps), the paper's published numbers on that env drawn across;
* the layouts of the paper's tables (:mod:`.paper_sections`): Table 1 [``generalization``],
  Table 4 [``datascicoding``] and its other tables [``paper-tables``];
* the comparison with POAD [``pairwise``] (:mod:`.comparison`, rliable's statistics);
* the provenance of every row [``provenance``].
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentbench_poad.leaderboard.records import now_iso
from agentbench_poad.leaderboard.report.blocks import (
    KINDS,
    Chart,
    Curve,
    CurveChart,
    CurvePoint,
    Interval,
    IntervalChart,
    Marker,
    Paragraph,
    ProfileChart,
    Report,
    Row,
    Section,
    Table,
)
from agentbench_poad.leaderboard.report.common import (
    BELOW_RANDOM,
    REFERENCE_AGENT,
    TOP_ANCHORS,
    Inputs,
    agent_label,
    anchor_records,
    anchors,
    below_random_tag,
    discounted,
    env_kwargs_of,
    fmt,
    interval,
    is_anchor,
    kwargs_text,
    n_seeds,
    paper_label,
    pm,
    seed_scores,
)
from agentbench_poad.leaderboard.report.comparison import comparison_section
from agentbench_poad.leaderboard.report.paper import PaperResults
from agentbench_poad.leaderboard.report.paper_sections import (
    datascicoding_section,
    generalisation_section,
    paper_tables_section,
)
from agentbench_poad.leaderboard.report.stats import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    iqm_estimate,
)
from agentbench_poad.version import __version__

NO_PAPER_NOTE = (
    "No published numbers are listed in paper_results.json, so there are no paper reference rows."
)


def _unanchored_note(env_id: str, unanchored: Sequence[dict[str, Any]], inputs: Inputs) -> str:
    """For rows without anchors of their env kwargs: which rows, and which anchors exist."""
    if not unanchored:
        return ""
    kinds = sorted({kwargs_text(env_kwargs_of(r)) for r in unanchored})
    have = [
        f"{r['agent']['name']} ({kwargs_text(env_kwargs_of(r))})"
        for r in anchor_records(env_id, inputs.records)
    ]
    return (
        f"; no normalised score ('--') for rows with {' / '.join(kinds)}: no random and "
        f"{' or '.join(TOP_ANCHORS)} records with those env kwargs; anchors on this env: "
        + (", ".join(have) or "none")
    )


def _env_section(env_id: str, inputs: Inputs) -> Section:
    recs = sorted(inputs.by_env[env_id], key=lambda r: -r["scores"]["mean"])
    row_anchors = {r["record_id"]: anchors(r, inputs.records) for r in recs}
    top_names = sorted({a.top_name for a in row_anchors.values() if a.top is not None})
    top_name = " / ".join(top_names) or TOP_ANCHORS[0]
    unanchored = [
        r for r in recs if row_anchors[r["record_id"]].normalise(r["scores"]["mean"]) is None
    ]
    metric = recs[0]["scores"]["metric"]
    score_name = "final-code ROC AUC" if metric == "final_auc" else "episodic return"
    # the paper's Table 1 reports the discounted return: show it beside ours on its tasks
    with_discounted = env_id in inputs.layout_envs("table1")
    rows: list[Row] = []
    intervals: list[Interval] = []
    gammas: set[float] = set()
    for r in recs:
        sc, n = r["scores"], n_seeds(r)
        failed = sum(s.get("failed_episodes", 0) for s in sc["per_seed"])
        kind = "anchor" if is_anchor(r) else ""
        label = agent_label(r)
        est = iqm_estimate(seed_scores(r))
        cells = [
            label + below_random_tag(r, inputs.records),
            pm(sc["mean"], sc["stderr"], n),
            f"{est.point:.3f} {interval(est.low, est.high, est.runs)}",
        ]
        if with_discounted:
            disc = discounted(r)
            cells.append("--" if disc is None else pm(*disc, n))
            if disc is not None and r["protocol"].get("discount") is not None:
                gammas.add(r["protocol"]["discount"])
        cells += [
            pm(sc["success_rate"], sc["success_rate_stderr"], n),
            fmt(row_anchors[r["record_id"]].normalise(sc["mean"])),
            f"{n} × {r['protocol']['episodes_per_seed']}",
            str(failed),
            f"record {r['record_id']}",
        ]
        rows.append(Row(tuple(cells), kind))
        intervals.append(Interval(r["agent"]["name"], label, *est))
        best = (r.get("training") or {}).get("best_code")
        if best:
            extra = ["--"] if with_discounted else []
            rows.append(
                Row(
                    (
                        f"{label} — {best['label']}",
                        fmt(best["reward"]),
                        "--",
                        *extra,
                        "--",
                        "--",
                        "1 code",
                        "--",
                        f"record {r['record_id']} (training.best_code)",
                    ),
                    "best",
                )
            )
    gamma = f" (γ = {', '.join(f'{g:g}' for g in sorted(gammas))})" if gammas else ""
    header = (
        "agent",
        "score (mean ± s.e.)",
        "IQM [95% CI]",
        *((f"discounted return{gamma}",) if with_discounted else ()),
        "success rate",
        "normalised",
        "seeds × episodes",
        "failed episodes",
        "row source",
    )
    table = Table(
        f"{env_id}: {score_name} and success rate (ours; the paper's numbers are in the layouts "
        "of its tables below). Mean ± s.e. over seeds ('n = 1': one seed, no spread); IQM over "
        f"seeds with a stratified-bootstrap 95% CI (rliable, {BOOTSTRAP_RESAMPLES} resamples, "
        f"seed {BOOTSTRAP_SEED}); normalised: the random row 0, the {top_name} row 1"
        + (
            " (a scripted solution, not an upper bound: no best return is computed here)"
            if "scripted" in top_names
            else ""
        )
        + ", each played under the row's own env kwargs (a capped row by the capped anchors)"
        + _unanchored_note(env_id, unanchored, inputs)
        + f"; '[{BELOW_RANDOM}: MEAN]': a trained row whose IQM CI lies at or below the "
        "random row's mean (MEAN) on the same task and cap"
        + (
            "; the discounted return is the paper's Table 1 metric, the score the undiscounted "
            "return"
            if with_discounted
            else ""
        ),
        header,
        tuple(rows),
        css="env-table",
    )
    chart = IntervalChart(
        f"iqm-{env_id}",
        f"{env_id}: IQM over seeds with 95% CI",
        tuple(intervals),
        f"{score_name} (IQM over seeds)",
    )
    return Section(env_id, f"env-{env_id}", (table, chart))


def _markers(env_id: str, inputs: Inputs) -> tuple[Marker, ...]:
    """The paper's published returns on ``env_id``, to draw across its learning curves."""
    return tuple(
        Marker(
            p["agent"],
            f"{paper_label(p)}" + (", discounted" if p["metric"] == "discounted_return" else ""),
            float(p["value"]),
        )
        for p in inputs.published_on(env_id, ("return", "discounted_return"))
    )


def _curves_section(env_ids: Sequence[str], inputs: Inputs) -> Section:
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
                agent_label(r),
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
                _markers(env_id, inputs),
            )
        )
    if not blocks:
        blocks.append(
            Paragraph("No record has a learning curve yet (records of trained agents carry one).")
        )
    return Section("Learning curves", "learning-curves", tuple(blocks))


def _provenance_section(inputs: Inputs) -> Section:
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
    inputs = Inputs(records, paper)
    built = built or now_iso()
    env_ids = sorted(inputs.by_env)
    intro = [
        Paragraph(
            f"Built {built} by agentbench-poad {__version__} from {len(inputs.records)} record(s). "
            "Scores are mean ± standard error over seeds ('n = 1' marks a single seed, which has "
            "no spread); IQMs and their 95% CIs come from rliable's stratified bootstrap over "
            "seeds; 'normalised' maps the random row to 0 and "
            "the oracle row (or, where no oracle exists, the scripted row) to 1, both played "
            "under the row's own env kwargs (its step cap): a row without such anchors reads "
            "'--'. Rows and columns "
            "marked '(paper, ...)' are the published numbers "
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
        generalisation_section(inputs),
        datascicoding_section(env_ids, inputs),
        paper_tables_section(inputs),
        comparison_section(env_ids, inputs),
        _provenance_section(inputs),
    )
    index = {
        "records": [r["record_id"] for r in inputs.records],
        "paper_results": len(paper.results),
        "env_ids": sorted(set(env_ids) | {p["env_id"] for p in paper.results}),
        "built": built,
    }
    return Report(title, tuple(intro), sections, index)


__all__ = [
    "KINDS",
    "NO_PAPER_NOTE",
    "REFERENCE_AGENT",
    "Chart",
    "Curve",
    "CurveChart",
    "CurvePoint",
    "Interval",
    "IntervalChart",
    "Marker",
    "Paragraph",
    "ProfileChart",
    "Report",
    "Row",
    "Section",
    "Table",
    "build_model",
]
