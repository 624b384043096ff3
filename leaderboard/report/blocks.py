"""The building blocks of the report model: paragraphs, tables, charts and sections.

Plain frozen dataclasses holding every sentence and every table cell once, as text, and every
chart as numbers. The renderers (:mod:`.markdown`, :mod:`.html_page`) add markup and
:mod:`.charts` draws the chart objects; nothing here computes or writes anything.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

#: Row and column kinds (the renderers style them; ``paper`` is always labelled and italic).
KINDS = ("", "anchor", "best", "paper")


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
class Interval:
    """One row of an interval chart: a point estimate over ``runs`` seeds and its 95 % CI
    (``low``/``high`` are ``None`` with one seed: the chart then shows the point, "n = 1")."""

    agent: str
    label: str
    point: float
    low: float | None
    high: float | None
    runs: int


@dataclass(frozen=True)
class IntervalChart:
    """Point estimates with CIs, one row per agent (rliable's interval-estimate plot)."""

    name: str
    title: str
    rows: tuple[Interval, ...]
    x_label: str
    reference: float | None = None  # a vertical line (e.g. 0.5 for P(X > Y))


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
class Marker:
    """A published number drawn across a chart (a horizontal line), labelled as the paper's."""

    agent: str
    label: str
    value: float


@dataclass(frozen=True)
class CurveChart:
    name: str
    title: str
    curves: tuple[Curve, ...]
    x_label: str
    y_label: str
    markers: tuple[Marker, ...] = ()


@dataclass(frozen=True)
class ProfileChart:
    """Performance profiles: per agent, the fraction of runs scoring above each threshold."""

    name: str
    title: str
    thresholds: tuple[float, ...]
    curves: tuple[Curve, ...]  # points: (threshold, fraction, CI low, CI high)
    x_label: str
    y_label: str


Chart = IntervalChart | CurveChart | ProfileChart
CHART_TYPES = (IntervalChart, CurveChart, ProfileChart)


@dataclass(frozen=True)
class Section:
    """A headed part of the report; ``blocks`` may hold sub-sections."""

    heading: str
    anchor: str
    blocks: tuple[Paragraph | Table | IntervalChart | CurveChart | ProfileChart | Section, ...]

    def walk(self) -> Iterator[Any]:
        for block in self.blocks:
            yield block
            if isinstance(block, Section):
                yield from block.walk()

    def tables(self) -> list[Table]:
        return [b for b in self.walk() if isinstance(b, Table)]

    def paragraphs(self) -> list[Paragraph]:
        return [b for b in self.walk() if isinstance(b, Paragraph)]

    def charts(self) -> list[Chart]:
        return [b for b in self.walk() if isinstance(b, CHART_TYPES)]


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
        return [c for s in self.sections for c in s.charts()]

    def tables(self) -> list[Table]:
        return [t for s in self.sections for t in s.tables()]
