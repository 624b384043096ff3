"""The report's charts, drawn with matplotlib (and rliable's plotting helpers where they fit).

Pure functions from the model's chart objects (:mod:`.blocks`) to SVG text: a file next to the
Markdown, and the same SVG inline in the HTML page (:func:`inline_svg`), so the page stays one
self-contained file.

* Layout is matplotlib's constrained layout: long agent names are wrapped and the margins grow to
  fit every label (no fixed margins).
* One colour per agent across every chart of a report (:class:`AgentColors`), from a
  colour-blind-safe palette whose colours all have at least 3:1 contrast on white; a legend
  wherever colour is what tells the agents apart (learning curves, profiles).
* Output is reproducible: the Agg backend, a fixed ``svg.hashsalt`` (ids do not change between
  runs), no date in the metadata, glyphs as paths (the page looks the same with any fonts).

rliable's ``plot_sample_efficiency_curve`` draws the learning curves and
``plot_performance_profiles`` the profiles, each on an axis made here. Its
``plot_interval_estimates`` and ``plot_probability_of_improvement`` make their own figure with
fixed margins (``subplots_adjust(left=0.0)``, the x label placed below the canvas), which cuts
long labels, so the interval charts are drawn here in the same form: a bar from the CI's low to
high end and a black tick at the point estimate.
"""

from __future__ import annotations

import io
import re
import textwrap
from collections.abc import Iterable

import matplotlib

matplotlib.use("Agg")  # no display, the same output everywhere

from matplotlib.figure import Figure  # noqa: E402  (after the backend is set)

from agentbench_poad.leaderboard.report.blocks import (  # noqa: E402
    Chart,
    CurveChart,
    IntervalChart,
    ProfileChart,
)

#: rcParams of every chart: deterministic SVG, glyphs as paths, readable sizes.
STYLE = {
    "svg.hashsalt": "agentbench-poad-report",
    "svg.fonttype": "path",
    "font.size": 10.0,
    "axes.titlesize": 11.0,
    "axes.labelsize": 10.0,
    "legend.fontsize": 9.0,
    "xtick.labelsize": 9.0,
    "ytick.labelsize": 9.0,
    "axes.spines.top": False,
    "axes.spines.right": False,
}

#: Fixed colours of the reference agents and anchors (Okabe-Ito hues, darkened where needed
#: for 3:1 contrast on white); other agents take the palette in order of first appearance.
FIXED_COLORS = {
    "poad": "#0072B2",
    "ntpo": "#D55E00",
    "twosome": "#007A5A",
    "grpo": "#AA3377",
    "gigpo": "#8A6100",
    "oracle": "#000000",
    "scripted": "#000000",  # the top anchor where no oracle exists: the oracle's role and colour
    "random": "#6E6E6E",
    "base": "#882255",
}
PALETTE = (
    "#332288",
    "#B15928",
    "#C51B7D",
    "#5F6B00",
    "#00727A",
    "#8B0000",
    "#4D4D4D",
    "#6A3D9A",
    "#A65E00",
    "#08306B",
)
WIDTH_IN = 8.0
LABEL_WIDTH = 40  # characters per line of an agent label before it wraps
#: characters per line of a chart title before it wraps (a browser may draw it wider than
#: matplotlib measured it; 80 ran past a 576 pt chart)
TITLE_WIDTH = 60


class AgentColors:
    """Agent name -> colour, the same in every chart of a report."""

    def __init__(self, agents: Iterable[str] = ()) -> None:
        self.assigned: dict[str, str] = {}
        for agent in agents:
            self(agent)

    def __call__(self, agent: str) -> str:
        key = agent.lower()
        if key in FIXED_COLORS:
            return FIXED_COLORS[key]
        if key not in self.assigned:
            used = set(self.assigned.values())
            free = [c for c in PALETTE if c not in used]
            self.assigned[key] = free[0] if free else PALETTE[len(self.assigned) % len(PALETTE)]
        return self.assigned[key]


def wrap(label: str, width: int = LABEL_WIDTH) -> str:
    """A long label over several lines (breaking at spaces; a long word stays whole)."""
    return "\n".join(textwrap.wrap(label, width, break_long_words=False)) or label


def _figure(height: float) -> Figure:
    with matplotlib.rc_context(STYLE):
        return Figure(figsize=(WIDTH_IN, height), layout="constrained")


def _interval_chart(chart: IntervalChart, colors: AgentColors) -> Figure:
    labels = [
        wrap(row.label) + ("" if row.low is not None else f"\n(n = {row.runs}, no CI)")
        for row in chart.rows
    ]
    lines = sum(label.count("\n") + 1 for label in labels)
    fig = _figure(1.3 + 0.22 * lines + 0.12 * len(labels))
    ax = fig.add_subplot()
    for i, row in enumerate(chart.rows):
        color = colors(row.agent)
        if row.low is not None and row.high is not None:
            ax.barh(i, row.high - row.low, left=row.low, height=0.6, color=color, alpha=0.6)
            ax.vlines(row.point, i - 0.3, i + 0.3, color="black", linewidth=1.5)
        # the point itself, also where the CI has no width or there is none (one seed)
        ax.plot(
            [row.point],
            [i],
            marker="o" if row.low is not None else "D",
            markerfacecolor=color,
            markeredgecolor="black",
            markersize=6,
            linestyle="none",
        )
    if chart.reference is not None:
        ax.axvline(chart.reference, color="#555555", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_ylim(len(labels) - 0.5, -0.5)  # first row on top
    # room around every point and interval (bars are "sticky", so margins() would not pad them)
    ends = [v for row in chart.rows for v in (row.point, row.low, row.high) if v is not None]
    if chart.reference is not None:
        ends.append(chart.reference)
    lo, hi = min(ends), max(ends)
    pad = 0.05 * (hi - lo) if hi > lo else max(0.05 * abs(hi), 0.05)
    ax.set_xlim(lo - pad, hi + pad)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_xlabel(chart.x_label)
    ax.set_title(wrap(chart.title, TITLE_WIDTH))
    return fig


def _legend(fig: Figure, ax, n: int) -> None:
    handles, labels = ax.get_legend_handles_labels()
    seen: dict[str, object] = {}
    for handle, label in zip(handles, labels):
        seen.setdefault(label, handle)
    if seen:
        fig.legend(
            list(seen.values()),
            [wrap(label, 60) for label in seen],
            loc="outside lower center",
            ncols=1 if n > 4 or any(len(x) > 45 for x in seen) else 2,
            frameon=False,
        )


def _curve_chart(chart: CurveChart, colors: AgentColors) -> Figure:
    from rliable import plot_utils

    n = len(chart.curves) + len(chart.markers)
    fig = _figure(4.2 + 0.3 * n)
    ax = fig.add_subplot()
    for curve in chart.curves:
        label = wrap(curve.label, 60)
        plot_utils.plot_sample_efficiency_curve(
            [p.step for p in curve.points],
            {label: [p.mean for p in curve.points]},
            {label: ([p.lower for p in curve.points], [p.upper for p in curve.points])},
            algorithms=[label],
            colors={label: colors(curve.agent)},
            ax=ax,
            xlabel=chart.x_label,
            ylabel=chart.y_label,
            labelsize="medium",
            ticklabelsize="small",
            marker=".",
            linewidth=1.5,
        )
    for marker in chart.markers:
        ax.axhline(
            marker.value,
            color=colors(marker.agent),
            linestyle=":",
            linewidth=1.5,
            label=f"{marker.label}: {marker.value:g}",
        )
    ax.set_title(wrap(chart.title, TITLE_WIDTH))
    _legend(fig, ax, n)
    return fig


def _profile_chart(chart: ProfileChart, colors: AgentColors) -> Figure:
    import numpy as np
    from rliable import plot_utils

    fig = _figure(4.2 + 0.3 * len(chart.curves))
    ax = fig.add_subplot()
    labels = {c.label: wrap(c.label, 60) for c in chart.curves}
    plot_utils.plot_performance_profiles(
        {labels[c.label]: np.array([p.mean for p in c.points]) for c in chart.curves},
        np.array(chart.thresholds),
        performance_profile_cis={
            labels[c.label]: (
                np.array([p.lower for p in c.points]),
                np.array([p.upper for p in c.points]),
            )
            for c in chart.curves
        },
        ax=ax,
        colors={labels[c.label]: colors(c.agent) for c in chart.curves},
        linestyles={
            labels[c.label]: ("solid", "dashed", "dashdot", "dotted")[i % 4]
            for i, c in enumerate(chart.curves)
        },
        xlabel=chart.x_label,
        ylabel=chart.y_label,
        labelsize="medium",
        ticklabelsize="small",
    )
    ax.set_title(wrap(chart.title, TITLE_WIDTH))
    _legend(fig, ax, len(chart.curves))
    return fig


def figure(chart: Chart, colors: AgentColors) -> Figure:
    """The matplotlib figure of one chart of the model."""
    with matplotlib.rc_context(STYLE):
        if isinstance(chart, IntervalChart):
            return _interval_chart(chart, colors)
        if isinstance(chart, CurveChart):
            return _curve_chart(chart, colors)
        if isinstance(chart, ProfileChart):
            return _profile_chart(chart, colors)
    raise TypeError(f"no renderer for {type(chart).__name__}")


def render_chart(chart: Chart, colors: AgentColors) -> str:
    """The SVG document of one chart: deterministic (fixed hash salt, no date)."""
    fig = figure(chart, colors)
    buffer = io.StringIO()
    with matplotlib.rc_context(STYLE):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


_ID = re.compile(r'\bid="([^"]+)"')
_REF = re.compile(r'((?:xlink:)?href="#|url\(#)([^")]+)')


def chart_file_name(name: str) -> str:
    """The file (and id prefix) a chart is saved under: its name with anything but letters,
    digits, ``.``, ``_`` and ``-`` replaced (a name carries an env id; no ``/``, no quote, no
    newline reaches a path or an attribute), never hidden (no leading dot)."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", name).lstrip(".") or "chart"


def inline_svg(svg: str, name: str, title: str) -> str:
    """``svg`` for embedding in an HTML page: no XML prolog, every id prefixed with ``name``
    (ids of several charts cannot clash), a class, a role and a title for screen readers.
    Every text from the model is escaped (attribute and title); matplotlib escapes the
    chart's own text."""
    from html import escape

    start = svg.index("<svg")
    body = svg[start:]
    prefix = re.sub(r"[^A-Za-z0-9_-]", "-", name) + "--"
    body = _ID.sub(lambda m: f'id="{prefix}{m.group(1)}"', body)
    body = _REF.sub(lambda m: f"{m.group(1)}{prefix}{m.group(2)}", body)
    head_end = body.index(">") + 1
    head = body[:head_end].replace(
        "<svg ", f'<svg class="chart" data-chart="{escape(name, quote=True)}" role="img" ', 1
    )
    return f"{head}\n<title>{escape(title)}</title>{body[head_end:]}"
