"""HTML renderer of the report model: one self-contained page (inline CSS and SVG, no scripts).

Markup only: every sentence and cell comes from the model, escaped here.
"""

from __future__ import annotations

import html
from collections.abc import Mapping

from agentbench_poad.leaderboard.report.blocks import (
    CHART_TYPES,
    Paragraph,
    Report,
    Section,
    Table,
)

CSS = """
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:2em auto;
max-width:1100px;padding:0 1em;color:#222;line-height:1.4}
h1{border-bottom:2px solid #333}h2{border-bottom:1px solid #ccc;margin-top:2em}
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}
caption{text-align:left;font-style:italic;padding:0.3em 0}
th,td{border:1px solid #ccc;padding:0.3em 0.6em;text-align:left;vertical-align:top}
th{background:#f3f3f3}tr.paper-row td,td.paper-col,th.paper-col{font-style:italic;
background:#fff8e1}tr.anchor-row td{color:#555}td code,pre{font-size:0.85em}
.chart{display:block;margin:0.5em 0;max-width:100%;height:auto}
.note{color:#555;font-size:0.9em}.callout{border-left:3px solid #e0a800;padding-left:0.6em}
.provenance td{font-size:0.8em}
"""


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in text)


def render_table(table: Table) -> str:
    """An HTML table; paper rows get ``class="paper-row"``, paper columns ``paper-col``."""
    kinds = table.column_kinds or ("",) * len(table.header)

    def cls(kind: str) -> str:
        return f' class="{html.escape(kind)}-col"' if kind else ""

    out = [
        f'<table class="{html.escape(table.css)}"><caption>{html.escape(table.caption)}</caption>',
        "<thead><tr>"
        + "".join(f"<th{cls(k)}>{html.escape(h)}</th>" for h, k in zip(table.header, kinds))
        + "</tr></thead><tbody>",
    ]
    for row in table.rows:
        row_cls = f' class="{html.escape(row.kind)}-row"' if row.kind else ""
        out.append(
            f"<tr{row_cls}>"
            + "".join(f"<td{cls(k)}>{html.escape(c)}</td>" for c, k in zip(row.cells, kinds))
            + "</tr>"
        )
    out.append("</tbody></table>")
    return "\n".join(out)


def _paragraph(p: Paragraph) -> str:
    anchor = f' id="{_slug(p.anchor)}"' if p.anchor else ""
    css = "note callout" if p.callout else "note"
    return f'<p class="{css}"{anchor}>{html.escape(p.text)}</p>'


def _section(section: Section, level: int, charts: Mapping[str, str]) -> list[str]:
    out = [f'<h{level} id="{_slug(section.anchor)}">{html.escape(section.heading)}</h{level}>']
    for block in section.blocks:
        if isinstance(block, Section):
            out += _section(block, level + 1, charts)
        elif isinstance(block, Paragraph):
            out.append(_paragraph(block))
        elif isinstance(block, Table):
            out.append(render_table(block))
        elif isinstance(block, CHART_TYPES):
            out.append(charts[block.name])
    return out


def render_html(report: Report, charts: Mapping[str, str]) -> str:
    """The report as one HTML page; ``charts`` maps each chart's name to its SVG text."""
    body = [f"<h1>{html.escape(report.title)}</h1>", *(_paragraph(p) for p in report.intro)]
    for section in report.sections:
        body += _section(section, 2, charts)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(report.title)}</title><style>{CSS}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
