"""The published board: Markdown plus one self-contained HTML page, built from records only.

``build_report(records, out_dir)`` never re-runs anything. It writes

* ``report.md`` -- the tables, with the charts as SVG files under ``charts/``;
* ``report.html`` -- one page with inline CSS and inline SVG charts (no external assets, no
  JavaScript), which renders in any browser or offline;
* ``charts/*.svg`` -- the charts, drawn by matplotlib (reproducible: same records, same bytes);
* ``report-index.json`` -- which records and how many published numbers went in.

The parts: :mod:`.model` builds the report as data (sections, tables, charts; every sentence
once; its blocks in :mod:`.blocks`, the paper's table layouts in :mod:`.paper_sections`, the
comparison with POAD in :mod:`.comparison`), :mod:`.markdown` and :mod:`.html_page` render it,
:mod:`.charts` draws the charts with matplotlib, :mod:`.stats` holds the statistics (rliable)
and :mod:`.paper` the paper's published numbers (``paper_results.json``: schema, checks,
loading). :mod:`.results_tables` writes the generated tables of docs/results.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentbench_poad.leaderboard.records import write_json_atomic
from agentbench_poad.leaderboard.report.model import REFERENCE_AGENT, Report, build_model
from agentbench_poad.leaderboard.report.paper import (
    PAPER_RESULTS,
    PaperResults,
    as_paper,
    load_paper,
    load_paper_results,
)
from agentbench_poad.leaderboard.report.stats import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    iqm_difference,
    iqm_estimate,
    normalised,
    probability_of_improvement,
)


def build_report(
    records: Sequence[dict[str, Any]],
    out_dir: Path | str,
    paper_results: PaperResults | Sequence[dict[str, Any]] | None = None,
    title: str = "agentbench-poad leaderboard",
    built: str | None = None,
) -> tuple[Path, Path]:
    """Write ``report.md``, ``report.html``, ``charts/*.svg`` and ``report-index.json``.

    Args:
        records: validated run records (e.g. :func:`~..records.load_records`).
        out_dir: output folder (created).
        paper_results: the published numbers: a :class:`PaperResults` (:func:`load_paper`), a
            list of entries (placed with the shipped layouts), or ``None`` for the shipped file.
        title: the page title.
        built: the build time printed on the page (default: now, UTC); pass one to make the
            output byte-for-byte reproducible.

    Returns:
        (path of report.md, path of report.html)
    """
    from agentbench_poad.core import display_safe
    from agentbench_poad.leaderboard.report.charts import (
        AgentColors,
        chart_file_name,
        inline_svg,
        render_chart,
    )
    from agentbench_poad.leaderboard.report.html_page import render_html
    from agentbench_poad.leaderboard.report.markdown import render_markdown

    out_dir = Path(out_dir)
    charts_dir = out_dir / "charts"
    charts_dir.mkdir(parents=True, exist_ok=True)
    records = display_safe(list(records))
    report = build_model(records, as_paper(paper_results), title=title, built=built)
    # one colour per agent in every chart: assigned in a fixed order (sorted agent names)
    colors = AgentColors(sorted({r["agent"]["name"] for r in records}))
    charts = {chart.name: (chart, render_chart(chart, colors)) for chart in report.charts()}
    files: dict[str, str] = {}  # chart -> file: no "/" or newline from an env id, no clash
    for name in charts:
        stem = chart_file_name(name)
        file = f"{stem}.svg"
        while file in files.values():
            file = f"{stem}-{len(files)}.svg"
        files[name] = file
    for name, (_, svg) in charts.items():
        (charts_dir / files[name]).write_text(svg, encoding="utf-8")
    md_path = out_dir / "report.md"
    md_path.write_text(
        render_markdown(report, {n: f"charts/{files[n]}" for n in charts}), encoding="utf-8"
    )
    html_path = out_dir / "report.html"
    inline = {n: inline_svg(svg, n, chart.title) for n, (chart, svg) in charts.items()}
    html_path.write_text(render_html(report, inline), encoding="utf-8")
    write_json_atomic(out_dir / "report-index.json", report.index)
    return md_path, html_path


__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "PAPER_RESULTS",
    "REFERENCE_AGENT",
    "PaperResults",
    "Report",
    "build_model",
    "build_report",
    "load_paper",
    "iqm_difference",
    "iqm_estimate",
    "load_paper_results",
    "normalised",
    "probability_of_improvement",
]
