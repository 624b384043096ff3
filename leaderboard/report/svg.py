"""SVG charts of the report: learning curves with a shaded mean ± s.e. band, and bar charts.

Pure functions from the report model's chart objects to SVG text (inline in the HTML page, files
next to the Markdown). No JavaScript, no external assets. Colours are fixed for the reference
agents and assigned in order of appearance for the others (one :class:`Colors` per report, so an
agent has the same colour in every chart).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

from agentbench_poad.leaderboard.report.model import Bar, BarChart, Chart, Curve

_PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
)
_FIXED_COLORS = {
    "poad": "#1f77b4",
    "ntpo": "#d62728",
    "twosome": "#2ca02c",
    "oracle": "#555555",
    "random": "#aaaaaa",
}


class Colors:
    """Agent name -> colour: fixed for the reference agents, then the palette in order."""

    def __init__(self) -> None:
        self.assigned: dict[str, str] = {}

    def __call__(self, name: str) -> str:
        key = name.lower()
        if key in _FIXED_COLORS:
            return _FIXED_COLORS[key]
        if key not in self.assigned:
            free = [
                c
                for c in _PALETTE
                if c not in _FIXED_COLORS.values() and c not in self.assigned.values()
            ]
            self.assigned[key] = free[0] if free else _PALETTE[len(self.assigned) % len(_PALETTE)]
        return self.assigned[key]


def render_chart(chart: Chart, colors: Colors) -> str:
    """The SVG text of one chart of the model."""
    if isinstance(chart, BarChart):
        return bar_chart_svg(chart.title, chart.bars, colors, chart.x_label)
    return curve_chart_svg(chart.title, chart.curves, colors, chart.x_label, chart.y_label)


def _nice_range(lo: float, hi: float) -> tuple[float, float]:
    if not math.isfinite(lo) or not math.isfinite(hi):
        return 0.0, 1.0
    if hi - lo < 1e-9:
        pad = abs(hi) * 0.1 or 1.0
        return lo - pad, hi + pad
    pad = (hi - lo) * 0.05
    return lo - pad, hi + pad


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


def _tick_label(value: float, lo: float, hi: float) -> str:
    """Enough decimals that neighbouring ticks of the range ``lo..hi`` read differently."""
    step = (hi - lo) / 4 or 1.0
    digits = min(6, max(0, 1 - math.floor(math.log10(abs(step)))))
    return f"{value:.{digits}f}"


def bar_chart_svg(title: str, rows: Sequence[Bar], colors: Colors, x_label: str) -> str:
    """Horizontal bars (mean) with standard-error whiskers; paper rows are hatched outlines."""
    height = 40 + 26 * len(rows) + 40
    width, left, right = 640, 230, 20
    lo = min([0.0] + [r.mean - (r.se or 0) for r in rows])
    hi = max([0.0] + [r.mean + (r.se or 0) for r in rows])
    lo, hi = _nice_range(lo, hi)

    def x(v: float) -> float:
        return left + (v - lo) / (hi - lo) * (width - left - right)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart bar-chart" role="img" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        f"<title>{html.escape(title)}</title>",
        f'<text x="{width / 2}" y="18" text-anchor="middle" class="chart-title">'
        f"{html.escape(title)}</text>",
    ]
    axis_y = 30 + 26 * len(rows)
    for t in _ticks(lo, hi):
        out.append(
            f'<line x1="{x(t):.1f}" y1="28" x2="{x(t):.1f}" y2="{axis_y}" stroke="#e5e5e5"/>'
        )
        out.append(
            f'<text x="{x(t):.1f}" y="{axis_y + 14}" text-anchor="middle" '
            f'class="tick">{_tick_label(t, lo, hi)}</text>'
        )
    out.append(f'<line x1="{x(0):.1f}" y1="28" x2="{x(0):.1f}" y2="{axis_y}" stroke="#333"/>')
    for i, row in enumerate(rows):
        y = 32 + 26 * i
        color = colors(row.agent)
        x0, x1 = sorted((x(0), x(row.mean)))
        paper = row.paper
        style = (
            f'fill="none" stroke="{color}" stroke-dasharray="4 2"'
            if paper
            else f'fill="{color}" fill-opacity="0.85"'
        )
        out.append(
            f'<text x="{left - 6}" y="{y + 14}" text-anchor="end" class="label">'
            f"{html.escape(row.label)}</text>"
        )
        out.append(
            f'<rect x="{x0:.1f}" y="{y}" width="{max(x1 - x0, 1):.1f}" height="18" {style}/>'
        )
        se = row.se
        if se:
            xa, xb = x(row.mean - se), x(row.mean + se)
            out.append(
                f'<line x1="{xa:.1f}" y1="{y + 9}" x2="{xb:.1f}" y2="{y + 9}" '
                'stroke="#000" stroke-width="1.5"/>'
            )
            for xe in (xa, xb):
                out.append(
                    f'<line x1="{xe:.1f}" y1="{y + 4}" x2="{xe:.1f}" y2="{y + 14}" '
                    'stroke="#000" stroke-width="1.5"/>'
                )
    out.append(
        f'<text x="{(left + width - right) / 2}" y="{height - 6}" text-anchor="middle" '
        f'class="axis-label">{html.escape(x_label)}</text>'
    )
    out.append("</svg>")
    return "\n".join(out)


def curve_chart_svg(
    title: str, curves: Sequence[Curve], colors: Colors, x_label: str, y_label: str
) -> str:
    """Learning curves: one line per record, its spread as a shaded band."""
    width, height, left, right, top, bottom = 640, 320, 60, 150, 30, 45
    xs = [p.step for c in curves for p in c.points]
    ys = [v for c in curves for p in c.points for v in (p.mean, p.lower, p.upper)]
    x_lo, x_hi = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if x_hi - x_lo < 1e-9:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    y_lo, y_hi = _nice_range(min(ys), max(ys)) if ys else (0.0, 1.0)

    def px(v: float) -> float:
        return left + (v - x_lo) / (x_hi - x_lo) * (width - left - right)

    def py(v: float) -> float:
        return top + (1 - (v - y_lo) / (y_hi - y_lo)) * (height - top - bottom)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart curve-chart" role="img" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        f"<title>{html.escape(title)}</title>",
        f'<text x="{(left + width - right) / 2}" y="18" text-anchor="middle" '
        f'class="chart-title">{html.escape(title)}</text>',
    ]
    for t in _ticks(y_lo, y_hi):
        out.append(
            f'<line x1="{left}" y1="{py(t):.1f}" x2="{width - right}" y2="{py(t):.1f}" '
            'stroke="#e5e5e5"/>'
        )
        out.append(
            f'<text x="{left - 6}" y="{py(t) + 4:.1f}" text-anchor="end" class="tick">'
            f"{_tick_label(t, y_lo, y_hi)}</text>"
        )
    for t in _ticks(x_lo, x_hi):
        out.append(
            f'<text x="{px(t):.1f}" y="{height - bottom + 16}" text-anchor="middle" '
            f'class="tick">{_tick_label(t, x_lo, x_hi)}</text>'
        )
    out.append(
        f'<rect x="{left}" y="{top}" width="{width - left - right}" '
        f'height="{height - top - bottom}" fill="none" stroke="#333"/>'
    )
    for i, curve in enumerate(curves):
        color = colors(curve.agent)
        pts = sorted(curve.points, key=lambda p: p.step)
        if any(p.low is not None or p.high is not None for p in pts):
            upper = [f"{px(p.step):.1f},{py(p.upper):.1f}" for p in pts]
            lower = [f"{px(p.step):.1f},{py(p.lower):.1f}" for p in reversed(pts)]
            out.append(
                f'<polygon class="spread" points="{" ".join(upper + lower)}" '
                f'fill="{color}" fill-opacity="0.2" stroke="none"/>'
            )
        line = " ".join(f"{px(p.step):.1f},{py(p.mean):.1f}" for p in pts)
        out.append(
            f'<polyline class="curve" points="{line}" fill="none" stroke="{color}" '
            'stroke-width="2"/>'
        )
        if len(pts) == 1:
            out.append(
                f'<circle cx="{px(pts[0].step):.1f}" cy="{py(pts[0].mean):.1f}" '
                f'r="3" fill="{color}"/>'
            )
        ly = top + 14 + 18 * i
        out.append(
            f'<rect x="{width - right + 10}" y="{ly - 9}" width="12" height="10" fill="{color}"/>'
        )
        out.append(
            f'<text x="{width - right + 26}" y="{ly}" class="label">'
            f"{html.escape(curve.label)}</text>"
        )
    out.append(
        f'<text x="{(left + width - right) / 2}" y="{height - 8}" text-anchor="middle" '
        f'class="axis-label">{html.escape(x_label)}</text>'
    )
    out.append(
        f'<text x="14" y="{(top + height - bottom) / 2}" text-anchor="middle" '
        f'class="axis-label" transform="rotate(-90 14 {(top + height - bottom) / 2})">'
        f"{html.escape(y_label)}</text>"
    )
    out.append("</svg>")
    return "\n".join(out)
