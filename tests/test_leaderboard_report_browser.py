"""The committed board's HTML report in a real browser: every chart label inside its chart, no
two labels overlapping, nothing loaded besides the page, and a screenshot kept as an artefact.

Headless Chromium renders the report of the full committed board (leaderboard/results, not a
fixture). The report has no script; the test renders a copy of it with one script appended that
measures the page's own geometry (``getBoundingClientRect`` of every text group matplotlib
writes, ``<g id="...text_N">``) and writes it into the DOM, which ``--dump-dom`` prints. The
screenshot goes to ``$ARTIFACTS`` when set (CI keeps it), else to pytest's tmp dir.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from agentbench_poad.leaderboard.records import load_records
from agentbench_poad.leaderboard.report import build_report

CHROMIUM = shutil.which("chromium") or (
    "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
)
RESULTS = Path(__file__).resolve().parents[1] / "leaderboard" / "results"
BUILT = "2026-01-01T00:00:00+00:00"
WINDOW = (1280, 1000)
TOLERANCE_PX = 1.0
MAX_SCREENSHOT_HEIGHT = 16_000

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (CI installs Debian's `chromium`); the render test needs "
    "a real browser",
)

MEASURE = """
<script>
(() => {
  const box = (el) => { const r = el.getBoundingClientRect();
    return {x0: r.left, y0: r.top, x1: r.right, y1: r.bottom}; };
  const charts = [...document.querySelectorAll("svg.chart")].map((svg) => ({
    name: svg.dataset.chart,
    frame: box(svg),
    texts: [...svg.querySelectorAll('g[id*="--text_"]')]
      .map((g) => ({id: g.id, ...box(g)}))
      .filter((t) => t.x1 - t.x0 > 0 && t.y1 - t.y0 > 0),
  }));
  const out = document.createElement("pre");
  out.id = "measured-geometry";
  const page = document.documentElement;
  out.textContent = JSON.stringify({width: page.clientWidth, height: page.scrollHeight, charts});
  document.body.appendChild(out);
})();
</script>
"""


def _chromium(
    profile: Path, page: Path, *extra: str, height: int = WINDOW[1]
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--no-first-run",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            f"--window-size={WINDOW[0]},{height}",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=1",  # also logs every file the page loads (FileURLLoader::Start: URL)
            *extra,
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _page_errors(stderr: str) -> list[str]:
    """Console messages and script errors of the page (not chromium's own dbus/gpu noise)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def _loaded_files(stderr: str) -> set[str]:
    return set(re.findall(r"FileURLLoader::Start: (\S+)", stderr))


def _geometry(tmp_path: Path, page: Path) -> dict:
    probe = tmp_path / "measured.html"
    probe.write_text(
        page.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>"),
        encoding="utf-8",
    )
    run = _chromium(tmp_path / "profile-measure", probe, "--dump-dom")
    assert run.returncode == 0, run.stderr[-2000:]
    found = re.search(r'<pre id="measured-geometry">(.*?)</pre>', run.stdout, re.S)
    assert found, "the measuring script did not run"
    return json.loads(found.group(1).replace("&amp;", "&").replace("&lt;", "<"))


def _overlap(a: dict, b: dict) -> float:
    w = min(a["x1"], b["x1"]) - max(a["x0"], b["x0"])
    h = min(a["y1"], b["y1"]) - max(a["y0"], b["y0"])
    return w * h if w > TOLERANCE_PX and h > TOLERANCE_PX else 0.0


def layout_problems(geometry: dict) -> list[str]:
    """Every text outside its chart, every pair of overlapping texts, every chart wider than
    the page."""
    problems = []
    for chart in geometry["charts"]:
        frame = chart["frame"]
        if frame["x1"] > geometry["width"] + TOLERANCE_PX:
            problems.append(f"{chart['name']}: wider than the page ({frame['x1']:.0f} px)")
        texts = chart["texts"]
        for t in texts:
            if (
                t["x0"] < frame["x0"] - TOLERANCE_PX
                or t["y0"] < frame["y0"] - TOLERANCE_PX
                or t["x1"] > frame["x1"] + TOLERANCE_PX
                or t["y1"] > frame["y1"] + TOLERANCE_PX
            ):
                problems.append(f"{chart['name']}: {t['id']} falls outside the chart")
        for i, a in enumerate(texts):
            for b in texts[i + 1 :]:
                if _overlap(a, b):
                    problems.append(f"{chart['name']}: {a['id']} overlaps {b['id']}")
    return problems


@pytest.fixture(scope="module")
def board_page(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("board")
    _, page = build_report(load_records(RESULTS), out, built=BUILT)
    return page


@needs_chromium
def test_the_committed_board_renders_with_every_label_readable(tmp_path, board_page):
    dom = _chromium(tmp_path / "profile-dom", board_page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert _page_errors(dom.stderr) == []
    assert _loaded_files(dom.stderr) == {board_page.resolve().as_uri()}  # one file, offline
    assert "<script" not in board_page.read_text(encoding="utf-8")

    geometry = _geometry(tmp_path, board_page)
    charts = geometry["charts"]
    n_charts = len(list((board_page.parent / "charts").glob("*.svg")))
    assert len(charts) == n_charts >= 20
    # every chart has its text (ticks, labels, titles) measured, so the checks are not vacuous
    assert all(len(c["texts"]) >= 5 for c in charts), [c["name"] for c in charts]
    assert layout_problems(geometry) == []

    artefacts = Path(os.environ.get("ARTIFACTS") or tmp_path)
    artefacts.mkdir(parents=True, exist_ok=True)
    shot = artefacts / "leaderboard-report.png"
    # the whole page in one image: a window as tall as the page, scaled down when the page is
    # taller than MAX_SCREENSHOT_HEIGHT pixels
    height = int(geometry["height"])
    scale = min(1.0, MAX_SCREENSHOT_HEIGHT / height)
    run = _chromium(
        tmp_path / "profile-shot",
        board_page,
        f"--screenshot={shot}",
        f"--force-device-scale-factor={scale:.3f}",
        height=height,
    )
    assert run.returncode == 0 and shot.exists() and shot.stat().st_size > 10_000


@needs_chromium
def test_the_geometry_check_catches_cut_and_overlapping_labels(tmp_path):
    """The detectors are not vacuous: a label past the chart's edge and two labels on top of
    each other are both reported, and a script error or an extra file shows up."""
    page = tmp_path / "broken.html"
    page.write_text(
        "<!DOCTYPE html><html><body>"
        '<svg class="chart" data-chart="toy" width="200" height="100">'
        '<g id="toy--text_1"><text x="150" y="50">a label far too long for this chart</text></g>'
        '<g id="toy--text_2"><text x="10" y="20">left</text></g>'
        '<g id="toy--text_3"><text x="12" y="22">left</text></g>'
        '</svg><img src="missing.png"><script>undefined_function();</script></body></html>'
    )
    problems = layout_problems(_geometry(tmp_path, page))
    assert any("toy--text_1 falls outside" in p for p in problems)
    assert any("toy--text_2 overlaps toy--text_3" in p for p in problems)
    run = _chromium(tmp_path / "profile-broken", page, "--dump-dom")
    assert any("undefined_function" in line for line in _page_errors(run.stderr))
    assert (tmp_path / "missing.png").as_uri() in _loaded_files(run.stderr)
