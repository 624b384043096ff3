"""Markdown renderer of the report model: markup only, every sentence comes from the model."""

from __future__ import annotations

from collections.abc import Mapping

from agentbench_poad.leaderboard.report.blocks import (
    CHART_TYPES,
    Paragraph,
    Report,
    Section,
    Table,
)
from agentbench_poad.leaderboard.report.common import md_text


def _esc(text: str) -> str:
    """One table cell or caption: HTML and links made inert (:func:`.common.md_text`), ``|``
    escaped, on one line."""
    return md_text(text).replace("|", "\\|").replace("\n", " ")


def _text(text: str) -> str:
    """A heading or paragraph: HTML and links made inert (its text may quote a record)."""
    return md_text(text)


def _italic(text: str) -> str:
    return f"_{text}_" if text else text


def render_table(table: Table) -> str:
    """A captioned GitHub-flavoured Markdown table; paper rows and columns in italics."""
    kinds = table.column_kinds or ("",) * len(table.header)
    lines = [
        f"*{_esc(table.caption)}*",
        "",
        "| " + " | ".join(_esc(h) for h in table.header) + " |",
        "|" + "|".join("---" for _ in table.header) + "|",
    ]
    for row in table.rows:
        cells = [  # escaped, then italic: the "_" marks are markup, not text
            _italic(_esc(c)) if row.kind == "paper" or kind == "paper" else _esc(c)
            for c, kind in zip(row.cells, kinds)
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _blocks(section: Section, level: int, chart_paths: Mapping[str, str]) -> list[str]:
    out = [f"{'#' * level} {_text(section.heading).replace(chr(10), ' ')}", ""]
    for block in section.blocks:
        if isinstance(block, Section):
            out += _blocks(block, level + 1, chart_paths)
        elif isinstance(block, Paragraph):
            out += [_paragraph(block), ""]
        elif isinstance(block, Table):
            out += [render_table(block), ""]
        elif isinstance(block, CHART_TYPES):
            title = md_text(block.title, brackets=True).replace("\n", " ")
            out += [f"![{title}]({chart_paths[block.name]})", ""]
    return out


def _paragraph(block: Paragraph) -> str:
    text = _text(block.text)
    return f"> {text}" if block.callout else text


def render_markdown(report: Report, chart_paths: Mapping[str, str]) -> str:
    """The report as Markdown; ``chart_paths`` maps each chart's name to its SVG file's link."""
    out = [f"# {_text(report.title)}", ""]
    for p in report.intro:
        out += [_paragraph(p), ""]
    for section in report.sections:
        out += _blocks(section, 2, chart_paths)
    return "\n".join(out)
