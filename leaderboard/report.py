"""The published board: Markdown plus one self-contained HTML page, built from records only.

``build_report(records, out_dir)`` never re-runs anything. It writes

* ``report.md`` -- the tables, with the charts as SVG files under ``charts/``;
* ``report.html`` -- one page with inline CSS and inline SVG charts (no external assets, no
  JavaScript), which renders in any browser or offline.

Contents: per-env tables (mean +- standard error over seeds; score normalised so that the random
row is 0 and the oracle row is 1), bar charts, learning curves with a shaded spread, the
generalisation table in the layout of the paper's Table 1 (VirtualHome variants as columns), the
DataSciCoding table in the layout of its Table 4 (datasets as rows), the paper's published numbers
as labelled reference rows (from ``paper_results.json``), a pairwise comparison of every agent
with POAD (seeded bootstrap confidence interval of the difference) and the provenance of every
row.
"""

from __future__ import annotations

import html
import json
import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentbench_poad.leaderboard.records import now_iso, write_json_atomic
from agentbench_poad.version import __version__

#: Where the paper's published numbers live (see docs/leaderboard.md before editing).
PAPER_RESULTS = Path(__file__).resolve().parent / "paper_results.json"

#: Columns of the paper's Table 1 (agents trained on Food Preparation, evaluated on variants).
GENERALIZATION_TASKS = ("FoodPreparation", "Cheese", "Hamburger", "ApplePie", "Pizza",
                        "WashingPlate", "Laundry")
#: The agent every other agent is compared with.
REFERENCE_AGENT = "poad"
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20240523

_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
            "#17becf", "#bcbd22", "#7f7f7f")
_FIXED_COLORS = {"poad": "#1f77b4", "ntpo": "#d62728", "twosome": "#2ca02c",
                 "oracle": "#555555", "random": "#aaaaaa"}

_PAPER_SCHEMA = {
    "type": "object",
    "required": ["schema_version", "results"],
    "properties": {
        "schema_version": {"const": 1},
        "results": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["env_id", "agent", "metric", "value", "source"],
                "properties": {
                    "table": {"type": "string"},
                    "env_id": {"type": "string"},
                    "agent": {"type": "string"},
                    "metric": {"enum": ["return", "success_rate", "final_auc"]},
                    "value": {"type": "number"},
                    "stderr": {"type": ["number", "null"]},
                    "spread_kind": {"type": ["string", "null"]},
                    "base_model": {"type": ["string", "null"]},
                    "source": {
                        "type": "object",
                        "required": ["url", "where"],
                        "properties": {"url": {"type": "string"}, "where": {"type": "string"}},
                    },
                },
            },
        },
    },
}


# -- inputs ------------------------------------------------------------------------------------
def load_paper_results(path: Path | str | None = None) -> list[dict[str, Any]]:
    """The paper's published numbers (validated); ``[]`` when the file lists none."""
    import jsonschema

    path = Path(path) if path is not None else PAPER_RESULTS
    data = json.loads(path.read_text(encoding="utf-8"))
    try:
        jsonschema.validate(data, _PAPER_SCHEMA)
    except jsonschema.ValidationError as exc:
        raise ValueError(f"{path}: does not match the paper-results schema: {exc.message}; "
                         "see the entry_schema in that file") from exc
    return list(data["results"])


# -- statistics --------------------------------------------------------------------------------
def bootstrap_difference(a: Sequence[float], b: Sequence[float], *,
                         resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                         level: float = 0.95) -> tuple[float, float, float]:
    """mean(a) - mean(b) and its percentile bootstrap CI (independent resampling, seeded)."""
    a_arr, b_arr = np.asarray(a, float), np.asarray(b, float)
    if a_arr.size == 0 or b_arr.size == 0:
        raise ValueError("bootstrap_difference needs two non-empty samples")
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, a_arr.size, size=(resamples, a_arr.size))
    ib = rng.integers(0, b_arr.size, size=(resamples, b_arr.size))
    diffs = a_arr[ia].mean(axis=1) - b_arr[ib].mean(axis=1)
    alpha = (1 - level) / 2
    low, high = np.quantile(diffs, [alpha, 1 - alpha])
    return float(a_arr.mean() - b_arr.mean()), float(low), float(high)


def normalised(score: float, random_score: float | None, oracle_score: float | None
               ) -> float | None:
    """(score - random) / (oracle - random); None without both anchors or when they coincide."""
    if random_score is None or oracle_score is None:
        return None
    span = oracle_score - random_score
    if abs(span) < 1e-12:
        return None
    return (score - random_score) / span


# -- helpers -----------------------------------------------------------------------------------
def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "--"
    return f"{value:.{digits}f}"


def _pm(mean: float, se: float | None, digits: int = 3) -> str:
    return f"{mean:.{digits}f} ± {se:.{digits}f}" if se is not None else f"{mean:.{digits}f}"


def _row_label(record: dict[str, Any]) -> str:
    label = record["agent"]["name"]
    base = record["model"].get("base")
    if base:
        label += f" ({Path(base.rstrip('/')).name})"
    training = record.get("training") or {}
    if training.get("env_id") and training["env_id"] != record["env"]["id"]:
        label += f" [trained on {training['env_id']}]"
    return label


def _task_of(env_id: str) -> str:
    parts = env_id.split("-")
    return "-".join(parts[1:-1]) if len(parts) >= 3 else env_id


class _Colors:
    def __init__(self) -> None:
        self.assigned: dict[str, str] = {}

    def __call__(self, name: str) -> str:
        key = name.lower()
        if key in _FIXED_COLORS:
            return _FIXED_COLORS[key]
        if key not in self.assigned:
            free = [c for c in _PALETTE if c not in _FIXED_COLORS.values()
                    and c not in self.assigned.values()]
            self.assigned[key] = free[0] if free else _PALETTE[len(self.assigned) % len(_PALETTE)]
        return self.assigned[key]


# -- SVG charts --------------------------------------------------------------------------------
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


def bar_chart_svg(title: str, rows: Sequence[dict[str, Any]], colors: _Colors,
                  x_label: str) -> str:
    """Horizontal bars (mean) with standard-error whiskers; paper rows are hatched outlines."""
    height = 40 + 26 * len(rows) + 40
    width, left, right = 640, 230, 20
    lo = min([0.0] + [r["mean"] - (r.get("se") or 0) for r in rows])
    hi = max([0.0] + [r["mean"] + (r.get("se") or 0) for r in rows])
    lo, hi = _nice_range(lo, hi)

    def x(v: float) -> float:
        return left + (v - lo) / (hi - lo) * (width - left - right)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart bar-chart" role="img" '
           f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
           f"<title>{html.escape(title)}</title>",
           f'<text x="{width / 2}" y="18" text-anchor="middle" class="chart-title">'
           f"{html.escape(title)}</text>"]
    axis_y = 30 + 26 * len(rows)
    for t in _ticks(lo, hi):
        out.append(f'<line x1="{x(t):.1f}" y1="28" x2="{x(t):.1f}" y2="{axis_y}" '
                   'stroke="#e5e5e5"/>')
        out.append(f'<text x="{x(t):.1f}" y="{axis_y + 14}" text-anchor="middle" '
                   f'class="tick">{_tick_label(t, lo, hi)}</text>')
    out.append(f'<line x1="{x(0):.1f}" y1="28" x2="{x(0):.1f}" y2="{axis_y}" stroke="#333"/>')
    for i, row in enumerate(rows):
        y = 32 + 26 * i
        color = colors(row["agent"])
        x0, x1 = sorted((x(0), x(row["mean"])))
        paper = row.get("paper", False)
        style = (f'fill="none" stroke="{color}" stroke-dasharray="4 2"' if paper
                 else f'fill="{color}" fill-opacity="0.85"')
        out.append(f'<text x="{left - 6}" y="{y + 14}" text-anchor="end" class="label">'
                   f"{html.escape(row['label'])}</text>")
        out.append(f'<rect x="{x0:.1f}" y="{y}" width="{max(x1 - x0, 1):.1f}" height="18" '
                   f"{style}/>")
        se = row.get("se")
        if se:
            xa, xb = x(row["mean"] - se), x(row["mean"] + se)
            out.append(f'<line x1="{xa:.1f}" y1="{y + 9}" x2="{xb:.1f}" y2="{y + 9}" '
                       'stroke="#000" stroke-width="1.5"/>')
            for xe in (xa, xb):
                out.append(f'<line x1="{xe:.1f}" y1="{y + 4}" x2="{xe:.1f}" y2="{y + 14}" '
                           'stroke="#000" stroke-width="1.5"/>')
    out.append(f'<text x="{(left + width - right) / 2}" y="{height - 6}" text-anchor="middle" '
               f'class="axis-label">{html.escape(x_label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def curve_chart_svg(title: str, curves: Sequence[dict[str, Any]], colors: _Colors,
                    x_label: str, y_label: str) -> str:
    """Learning curves: one line per record, its spread as a shaded band."""
    width, height, left, right, top, bottom = 640, 320, 60, 150, 30, 45
    xs = [p["step"] for c in curves for p in c["points"]]
    ys = [v for c in curves for p in c["points"]
          for v in (p["mean"], p.get("low", p["mean"]), p.get("high", p["mean"]))]
    x_lo, x_hi = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if x_hi - x_lo < 1e-9:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    y_lo, y_hi = _nice_range(min(ys), max(ys)) if ys else (0.0, 1.0)

    def px(v: float) -> float:
        return left + (v - x_lo) / (x_hi - x_lo) * (width - left - right)

    def py(v: float) -> float:
        return top + (1 - (v - y_lo) / (y_hi - y_lo)) * (height - top - bottom)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart curve-chart" role="img" '
           f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
           f"<title>{html.escape(title)}</title>",
           f'<text x="{(left + width - right) / 2}" y="18" text-anchor="middle" '
           f'class="chart-title">{html.escape(title)}</text>']
    for t in _ticks(y_lo, y_hi):
        out.append(f'<line x1="{left}" y1="{py(t):.1f}" x2="{width - right}" y2="{py(t):.1f}" '
                   'stroke="#e5e5e5"/>')
        out.append(f'<text x="{left - 6}" y="{py(t) + 4:.1f}" text-anchor="end" class="tick">'
                   f"{_tick_label(t, y_lo, y_hi)}</text>")
    for t in _ticks(x_lo, x_hi):
        out.append(f'<text x="{px(t):.1f}" y="{height - bottom + 16}" text-anchor="middle" '
                   f'class="tick">{_tick_label(t, x_lo, x_hi)}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{width - left - right}" '
               f'height="{height - top - bottom}" fill="none" stroke="#333"/>')
    for i, curve in enumerate(curves):
        color = colors(curve["agent"])
        pts = sorted(curve["points"], key=lambda p: p["step"])
        if any("low" in p for p in pts):
            upper = [f"{px(p['step']):.1f},{py(p.get('high', p['mean'])):.1f}" for p in pts]
            lower = [f"{px(p['step']):.1f},{py(p.get('low', p['mean'])):.1f}"
                     for p in reversed(pts)]
            out.append(f'<polygon class="spread" points="{" ".join(upper + lower)}" '
                       f'fill="{color}" fill-opacity="0.2" stroke="none"/>')
        line = " ".join(f"{px(p['step']):.1f},{py(p['mean']):.1f}" for p in pts)
        out.append(f'<polyline class="curve" points="{line}" fill="none" stroke="{color}" '
                   'stroke-width="2"/>')
        if len(pts) == 1:
            out.append(f'<circle cx="{px(pts[0]["step"]):.1f}" cy="{py(pts[0]["mean"]):.1f}" '
                       f'r="3" fill="{color}"/>')
        ly = top + 14 + 18 * i
        out.append(f'<rect x="{width - right + 10}" y="{ly - 9}" width="12" height="10" '
                   f'fill="{color}"/>')
        out.append(f'<text x="{width - right + 26}" y="{ly}" class="label">'
                   f"{html.escape(curve['label'])}</text>")
    out.append(f'<text x="{(left + width - right) / 2}" y="{height - 8}" text-anchor="middle" '
               f'class="axis-label">{html.escape(x_label)}</text>')
    out.append(f'<text x="14" y="{(top + height - bottom) / 2}" text-anchor="middle" '
               f'class="axis-label" transform="rotate(-90 14 {(top + height - bottom) / 2})">'
               f"{html.escape(y_label)}</text>")
    out.append("</svg>")
    return "\n".join(out)


# -- tables ------------------------------------------------------------------------------------
class _Table:
    """A table rendered to both Markdown and HTML."""

    def __init__(self, caption: str, header: Sequence[str], css: str = "") -> None:
        self.caption, self.header, self.css = caption, list(header), css
        self.rows: list[tuple[list[str], str]] = []

    def add(self, cells: Sequence[Any], kind: str = "") -> None:
        self.rows.append(([str(c) for c in cells], kind))

    def markdown(self) -> str:
        def esc(s: str) -> str:
            return s.replace("|", "\\|").replace("\n", " ")

        lines = [f"*{esc(self.caption)}*", "", "| " + " | ".join(map(esc, self.header)) + " |",
                 "|" + "|".join("---" for _ in self.header) + "|"]
        for cells, kind in self.rows:
            if kind == "paper":
                cells = [f"_{c}_" if c else c for c in cells]
            lines.append("| " + " | ".join(esc(c) for c in cells) + " |")
        return "\n".join(lines)

    def html(self) -> str:
        out = [f'<table class="{self.css}"><caption>{html.escape(self.caption)}</caption>',
               "<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in self.header)
               + "</tr></thead><tbody>"]
        for cells, kind in self.rows:
            cls = f' class="{kind}-row"' if kind else ""
            out.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells)
                       + "</tr>")
        out.append("</tbody></table>")
        return "\n".join(out)


# -- the report --------------------------------------------------------------------------------
_CSS = """
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:2em auto;
max-width:1100px;padding:0 1em;color:#222;line-height:1.4}
h1{border-bottom:2px solid #333}h2{border-bottom:1px solid #ccc;margin-top:2em}
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}
caption{text-align:left;font-style:italic;padding:0.3em 0}
th,td{border:1px solid #ccc;padding:0.3em 0.6em;text-align:left;vertical-align:top}
th{background:#f3f3f3}tr.paper-row td{font-style:italic;background:#fff8e1}
tr.anchor-row td{color:#555}td code,pre{font-size:0.85em}
.chart{display:block;margin:0.5em 0}.chart-title{font-size:14px;font-weight:bold}
.tick{font-size:10px;fill:#555}.label{font-size:11px}.axis-label{font-size:12px}
.note{color:#555;font-size:0.9em}.provenance td{font-size:0.8em}
pre{background:#f6f6f6;padding:0.6em;overflow-x:auto}
"""


def _paper_by_env(paper: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in paper:
        out[item["env_id"]].append(item)
    return out


def _anchor(records: Sequence[dict[str, Any]], name: str) -> float | None:
    for r in records:
        if r["agent"]["name"].lower() == name and not (r.get("training") or {}).get("env_id"):
            return r["scores"]["mean"]
    for r in records:
        if r["agent"]["name"].lower() == name:
            return r["scores"]["mean"]
    return None


def _episode_scores(record: dict[str, Any]) -> list[float]:
    return [e.get("score", e["return"]) for s in record["scores"]["per_seed"]
            for e in s["episodes"]]


def build_report(records: Sequence[dict[str, Any]], out_dir: Path | str,
                 paper_results: Sequence[dict[str, Any]] | None = None,
                 title: str = "agentbench-poad leaderboard") -> tuple[Path, Path]:
    """Write ``report.md``, ``report.html`` and ``charts/*.svg`` into ``out_dir``.

    Args:
        records: validated run records (e.g. :func:`~.records.load_records`).
        out_dir: output folder (created).
        paper_results: published numbers (default: :func:`load_paper_results`).
        title: the page title.

    Returns:
        (path of report.md, path of report.html)
    """
    out_dir = Path(out_dir)
    charts_dir = out_dir / "charts"
    charts_dir.mkdir(parents=True, exist_ok=True)
    paper = list(load_paper_results() if paper_results is None else paper_results)
    paper_env = _paper_by_env(paper)
    colors = _Colors()
    by_env: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_env[r["env"]["id"]].append(r)
    env_ids = sorted(set(by_env) | set(paper_env))
    md: list[str] = [f"# {title}", "",
                     f"Built {now_iso()} by agentbench-poad {__version__} from {len(records)} "
                     "record(s). Scores are mean ± standard error over seeds; `normalised` maps "
                     "the random row to 0 and the oracle row to 1. Paper rows are the published "
                     "numbers (labelled, in italics), never our runs.", ""]
    body: list[str] = [f"<h1>{html.escape(title)}</h1>",
                       f'<p class="note">Built {html.escape(now_iso())} by agentbench-poad '
                       f"{__version__} from {len(records)} record(s). Scores are mean ± standard "
                       "error over seeds; <em>normalised</em> maps the random row to 0 and the "
                       "oracle row to 1. Paper rows are the published numbers (labelled, "
                       "italic), never our runs.</p>"]
    if not paper:
        note = ("No published numbers are listed in paper_results.json (none were found in a "
                "citable source), so there are no paper reference rows.")
        md += [f"> {note}", ""]
        body.append(f'<p class="note" id="no-paper-numbers">{html.escape(note)}</p>')

    def section(heading: str, anchor: str) -> None:
        md.extend([f"## {heading}", ""])
        body.append(f'<h2 id="{anchor}">{html.escape(heading)}</h2>')

    def table(t: _Table) -> None:
        md.extend([t.markdown(), ""])
        body.append(t.html())

    def chart(name: str, svg: str) -> None:
        (charts_dir / f"{name}.svg").write_text(svg, encoding="utf-8")
        md.extend([f"![{name}](charts/{name}.svg)", ""])
        body.append(svg)

    # 1. per-env tables and bar charts
    section("Results by environment", "by-env")
    for env_id in env_ids:
        recs = sorted(by_env.get(env_id, []), key=lambda r: -r["scores"]["mean"])
        md.extend([f"### {env_id}", ""])
        body.append(f"<h3>{html.escape(env_id)}</h3>")
        random_score, oracle_score = _anchor(recs, "random"), _anchor(recs, "oracle")
        metric = (recs[0]["scores"]["metric"] if recs else
                  "final_auc" if any(p["metric"] == "final_auc" for p in paper_env[env_id])
                  else "return")
        t = _Table(f"{env_id}: {'final-code ROC AUC' if metric == 'final_auc' else 'return'} "
                   "and success rate", ["agent", "score", "success rate", "normalised",
                                        "seeds × episodes", "failed episodes", "row source"],
                   css="env-table")
        bars = []
        for r in recs:
            sc = r["scores"]
            failed = sum(s.get("failed_episodes", 0) for s in sc["per_seed"])
            kind = "anchor" if r["agent"]["name"].lower() in ("random", "oracle") else ""
            t.add([_row_label(r), _pm(sc["mean"], sc["stderr"]),
                   _pm(sc["success_rate"], sc["success_rate_stderr"]),
                   _fmt(normalised(sc["mean"], random_score, oracle_score)),
                   f"{len(sc['per_seed'])} × {r['protocol']['episodes_per_seed']}", failed,
                   f"record {r['record_id']}"], kind)
            bars.append({"agent": r["agent"]["name"], "label": _row_label(r),
                         "mean": sc["mean"], "se": sc["stderr"]})
            best = (r.get("training") or {}).get("best_code")
            if best:
                t.add([f"{_row_label(r)} — {best['label']}", _fmt(best["reward"]), "--", "--",
                       "1 code", "--", f"record {r['record_id']} (training.best_code)"],
                      "best")
        for p in paper_env.get(env_id, []):
            t.add([f"{p['agent']} (paper, {p.get('table', 'published')})",
                   _pm(p["value"], p.get("stderr")) if p["metric"] != "success_rate" else "--",
                   _pm(p["value"], p.get("stderr")) if p["metric"] == "success_rate" else "--",
                   "--", "--", "--", f"paper: {p['source']['where']} ({p['source']['url']})"],
                  "paper")
            if p["metric"] != "success_rate":
                bars.append({"agent": p["agent"], "label": f"{p['agent']} (paper)",
                             "mean": p["value"], "se": p.get("stderr"), "paper": True})
        table(t)
        if bars:
            chart(f"bars-{env_id}", bar_chart_svg(
                f"{env_id}: mean ± s.e. over seeds", bars, colors,
                "final-code ROC AUC" if metric == "final_auc" else "episodic return"))

    # 2. learning curves
    section("Learning curves", "learning-curves")
    any_curve = False
    for env_id in env_ids:
        curves = [{"agent": r["agent"]["name"], "label": _row_label(r),
                   "points": r["learning_curve"]["points"],
                   "spread": r["learning_curve"].get("spread", "")}
                  for r in by_env.get(env_id, []) if r.get("learning_curve")
                  and r["learning_curve"]["points"]]
        if not curves:
            continue
        any_curve = True
        first = next(r["learning_curve"] for r in by_env[env_id] if r.get("learning_curve"))
        md.extend([f"Shaded: {first.get('spread', 'spread')}.", ""])
        body.append(f'<p class="note">Shaded: {html.escape(first.get("spread", "spread"))}.</p>')
        chart(f"curve-{env_id}", curve_chart_svg(f"{env_id}: learning curves", curves, colors,
                                                 first.get("x", "env steps"),
                                                 first.get("y", "return")))
    if not any_curve:
        md.extend(["No record has a learning curve yet (records of trained agents carry one).",
                   ""])
        body.append('<p class="note">No record has a learning curve yet (records of trained '
                    "agents carry one).</p>")

    # 3. generalisation table (paper Table 1 layout)
    section("Generalisation (layout of the paper's Table 1)", "generalization")
    gen_ids = {f"VirtualHome-{task}-v0": task for task in GENERALIZATION_TASKS}
    gen = _Table("Success rate (mean ± s.e. over seeds) on Food Preparation and its unseen "
                 "variants; success = return > 0 (REFERENCE_SPEC §2.5)",
                 ["agent", *GENERALIZATION_TASKS], css="generalization-table")
    rows: dict[str, dict[str, str]] = defaultdict(dict)
    for env_id, task in gen_ids.items():
        for r in by_env.get(env_id, []):
            key = r["agent"]["name"] + (f" ({Path(r['model']['base']).name})"
                                        if r["model"].get("base") else "")
            rows[key][task] = _pm(r["scores"]["success_rate"], r["scores"]["success_rate_stderr"])
    for key in sorted(rows):
        gen.add([key, *[rows[key].get(t, "--") for t in GENERALIZATION_TASKS]])
    paper_rows: dict[str, dict[str, str]] = defaultdict(dict)
    for env_id, task in gen_ids.items():
        for p in paper_env.get(env_id, []):
            if p["metric"] == "success_rate":
                paper_rows[f"{p['agent']} (paper, {p.get('table', 'Table 1')})"][task] = _pm(
                    p["value"], p.get("stderr"))
    for key in sorted(paper_rows):
        gen.add([key, *[paper_rows[key].get(t, "--") for t in GENERALIZATION_TASKS]], "paper")
    if not gen.rows:
        gen.add(["(no VirtualHome records yet)", *["--"] * len(GENERALIZATION_TASKS)])
    table(gen)

    # 4. DataSciCoding table (paper Table 4 layout)
    section("DataSciCoding (layout of the paper's Table 4)", "datascicoding")
    dsc_envs = [e for e in env_ids if e.startswith("DataSciCoding-")]
    columns: list[str] = []
    cells: dict[str, dict[str, str]] = defaultdict(dict)
    for env_id in dsc_envs:
        dataset = _task_of(env_id)
        for r in by_env.get(env_id, []):
            col = _row_label(r)
            columns.append(col)
            cells[dataset][col] = _pm(r["scores"]["mean"], r["scores"]["stderr"])
            best = (r.get("training") or {}).get("best_code")
            if best:
                bcol = f"{col}: best code during training"
                columns.append(bcol)
                cells[dataset][bcol] = _fmt(best["reward"])
        for p in paper_env.get(env_id, []):
            col = f"{p['agent']} (paper)"
            columns.append(col)
            cells[dataset][col] = _pm(p["value"], p.get("stderr"))
    columns = list(dict.fromkeys(columns))
    dsc = _Table("Final-code ROC AUC per dataset (mean ± s.e. over seeds; a run whose attempts "
                 "all failed scores 0). 'best code during training' is the best reward seen "
                 "while training, labelled as such, not the final policy.",
                 ["dataset", *columns], css="dsc-table")
    for dataset in sorted(cells):
        dsc.add([dataset, *[cells[dataset].get(c, "--") for c in columns]])
    if not dsc.rows:
        dsc.add(["(no DataSciCoding records yet)"])
    table(dsc)

    # 5. pairwise comparison with POAD
    section(f"Pairwise comparison with {REFERENCE_AGENT.upper()}", "pairwise")
    pair = _Table(f"Difference in score, agent − {REFERENCE_AGENT.upper()}, with a "
                  f"{BOOTSTRAP_RESAMPLES}-resample percentile bootstrap 95% CI "
                  f"(seed {BOOTSTRAP_SEED}); unit = seeds when both rows have ≥ 2, else episodes",
                  ["env", "agent", "difference", "95% CI", "unit", "verdict"], css="pairwise")
    for env_id in env_ids:
        recs = by_env.get(env_id, [])
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
            verdict = ("better" if lo > 0 else "worse" if hi < 0 else "no clear difference")
            pair.add([env_id, _row_label(r), f"{diff:+.3f}", f"[{lo:+.3f}, {hi:+.3f}]", unit,
                      verdict])
    if not pair.rows:
        pair.add(["--", f"(no {REFERENCE_AGENT.upper()} record yet)", "--", "--", "--", "--"])
    table(pair)

    # 6. provenance
    section("Provenance of every row", "provenance")
    prov = _Table("Where each row comes from", ["record", "agent version", "model / adapter",
                                                "created", "git commit", "package", "hardware",
                                                "wall time (s)", "command"], css="provenance")
    for r in sorted(records, key=lambda r: r["record_id"]):
        sw, hw = r["software"], r["hardware"]
        commit = (sw.get("git_commit") or "unknown")[:10] + (" (dirty)" if sw.get("git_dirty")
                                                              else "")
        prov.add([r["record_id"], r["agent"]["version"],
                  f"{r['model'].get('base') or '--'} / {r['model'].get('adapter') or '--'}",
                  r["created_at"], commit, sw["package_version"],
                  f"{hw.get('platform', '?')}, {hw.get('cpu_count', '?')} CPU"
                  + (f", {hw['accelerator']}" if hw.get("accelerator") else ""),
                  f"{r['wall_time_s']:.1f}", r["command"]])
    for p in paper:
        prov.add([f"paper: {p['agent']} on {p['env_id']}", "--", p.get("base_model") or "--",
                  "--", "--", "--", "--", "--", f"{p['source']['where']}: {p['source']['url']}"],
                 "paper")
    table(prov)

    md_path = out_dir / "report.md"
    md_path.write_text("\n".join(md), encoding="utf-8")
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")
    html_path = out_dir / "report.html"
    html_path.write_text(page, encoding="utf-8")
    write_json_atomic(out_dir / "report-index.json", {
        "records": [r["record_id"] for r in records], "paper_results": len(paper),
        "env_ids": env_ids, "built": now_iso(),
    })
    return md_path, html_path
