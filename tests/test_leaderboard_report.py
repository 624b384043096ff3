"""The report: tables, normalisation, paper rows, bootstrap, and a real browser render."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from agentbench_poad.baselines.random import RandomAgent
from agentbench_poad.cli import main
from agentbench_poad.leaderboard import add_record, evaluate
from agentbench_poad.leaderboard.report import (
    bootstrap_difference,
    build_report,
    load_paper_results,
    normalised,
)
from tests.test_leaderboard_toys import CODE_ID, CORRIDOR_ID, CodeAgent, make_corridor_oracle

CHROMIUM = shutil.which("chromium") or (
    "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
)


def _as(record, *, name=None, env_id=None, mean_shift=0.0, base=None):
    """A copy of ``record`` relabelled (another agent / env) -- report input only."""
    r = copy.deepcopy(record)
    if name:
        r["agent"]["name"] = name
    if env_id:
        r["env"]["id"] = env_id
        r["env"]["family"] = env_id.split("-")[0].lower()
    if base:
        r["model"]["base"] = base
    for s in r["scores"]["per_seed"]:
        s["score"] += mean_shift
    r["scores"]["mean"] += mean_shift
    r["record_id"] = f"{r['env']['id']}__{r['agent']['name']}"
    return r


@pytest.fixture(scope="module")
def records():
    oracle = evaluate(make_corridor_oracle, CORRIDOR_ID, seeds=[0, 1, 2], episodes=3)[0]
    random = evaluate(RandomAgent, CORRIDOR_ID, seeds=[0, 1, 2], episodes=3)[0]
    poad = _as(random, name="poad", mean_shift=0.5, base="tiny-lm")
    poad["learning_curve"] = {
        "x": "env steps",
        "y": "greedy evaluation return",
        "spread": "mean +- standard error over training seeds",
        "points": [
            {"step": 0, "mean": -1.0, "low": -1.2, "high": -0.8},
            {"step": 64, "mean": 0.2, "low": 0.0, "high": 0.4},
        ],
    }
    poad["training"] = {"env_id": CORRIDOR_ID, "runs": ["r0"], "total_steps": 64, "best_code": None}
    code = evaluate(CodeAgent, CODE_ID, seeds=[0, 1], episodes=2)[0]
    dsc = _as(code, name="oracle", env_id="DataSciCoding-iris-v0")
    dsc_poad = _as(code, name="poad", env_id="DataSciCoding-iris-v0", mean_shift=-0.1)
    dsc_poad["training"] = {
        "env_id": "DataSciCoding-iris-v0",
        "runs": ["r"],
        "total_steps": 8,
        "best_code": {
            "label": "best code found during training",
            "reward": 0.97,
            "code": "model = None",
        },
    }
    vh = _as(oracle, name="poad", env_id="VirtualHome-Cheese-v0")
    return [oracle, random, poad, dsc, dsc_poad, vh]


PAPER = [
    {
        "table": "Table 1",
        "env_id": "VirtualHome-Cheese-v0",
        "agent": "twosome",
        "metric": "success_rate",
        "value": 0.5,
        "spread": None,
        "source": {"url": "https://example.org/test-fixture", "where": "test fixture row"},
    },
    {
        "table": "Table 4",
        "env_id": "DataSciCoding-airlines-v0",
        "agent": "caafe-gpt-4",
        "metric": "final_auc",
        "value": 0.61,
        "spread": 0.02,
        "source": {"url": "https://example.org/test-fixture", "where": "test fixture row"},
    },
]


def test_normalised_and_bootstrap_math():
    assert normalised(5.0, 0.0, 10.0) == 0.5
    assert normalised(0.0, 0.0, 10.0) == 0.0 and normalised(10.0, 0.0, 10.0) == 1.0
    assert normalised(1.0, None, 10.0) is None and normalised(1.0, 2.0, 2.0) is None
    a, b = [1.0, 1.2, 0.9, 1.1], [0.0, 0.1, -0.1, 0.05]
    diff, lo, hi = bootstrap_difference(a, b)
    assert diff == pytest.approx(sum(a) / 4 - sum(b) / 4)
    assert lo < diff < hi and lo > 0
    assert bootstrap_difference(a, b) == (diff, lo, hi)  # seeded: identical twice
    same = bootstrap_difference(a, a)
    assert same[1] < 0 < same[2]


def test_shipped_paper_results_file_is_valid():
    results = load_paper_results()
    for item in results:  # every shipped number names its source
        assert item["source"]["url"] and item["source"]["where"]


def test_report_tables(tmp_path, records):
    md, page = build_report(records, tmp_path, paper_results=PAPER)
    text = md.read_text()
    # per-env table with mean ± s.e. and normalisation (oracle 1, random 0)
    corridor = text.split(f"### {CORRIDOR_ID}")[1].split("###")[0]
    assert re.search(r"\| oracle \| [-\d.]+ ± [\d.]+ \| 1\.000 ± 0\.000 \| 1\.000 \|", corridor)
    assert re.search(r"\| random \| [-\d.]+ ± [\d.]+ \| [\d.]+ ± [\d.]+ \| 0\.000 \|", corridor)
    poad_row = next(line for line in corridor.splitlines() if line.startswith("| poad"))
    oracle, random, poad = records[0], records[1], records[2]
    expected = (poad["scores"]["mean"] - random["scores"]["mean"]) / (
        oracle["scores"]["mean"] - random["scores"]["mean"]
    )
    assert f"| {expected:.3f} |" in poad_row
    # generalisation tables in the Table 1 layout (columns from the env facts' paper layout)
    gen = text.split("\n## Generalisation")[1].split("\n## ")[0]
    assert (
        "| agent | Food Preparation (training task) | Cheese | Hamburger | Apple Pie | Pizza | "
        "Washing Plate | Laundry |"
    ) in gen
    assert re.search(r"\| poad \| -- \| [-\d.]+ ± [\d.]+ \(undiscounted\) \| -- ", gen)
    assert re.search(r"\| poad \| -- \| 1\.000 ± 0\.000 \| -- ", gen)
    assert "_TWOSOME (paper, Table 1 / Appendix H)_ | _--_ | _0.5_ | _--_" in gen
    # DataSciCoding table in the Table 4 layout: datasets as rows, best code labelled
    dsc = text.split("\n## DataSciCoding (")[1].split("\n## ")[0]
    assert "poad: best code during training" in dsc
    assert "CAAFE (GPT-4) (paper, Table 4 / Appendix F)" in dsc
    assert re.search(r"\| iris \| 0\.750 ± 0\.000 \| .*0\.970 \| _--_ \|", dsc)
    assert re.search(r"\| airlines \| (-- \| )+_0\.61 ± 0\.02_ \|", dsc)
    # pairwise comparison with POAD, seeded bootstrap
    pair = text.split("Pairwise comparison")[1].split("## ")[0]
    assert f"| {CORRIDOR_ID} | oracle |" in pair and "| seeds |" in pair
    # provenance names every record and the paper sources
    prov = text.split("Provenance")[1]
    for r in records:
        assert r["record_id"] in prov
    assert "test fixture row: https://example.org/test-fixture" in prov
    assert (tmp_path / "charts" / f"curve-{CORRIDOR_ID}.svg").exists()


def test_html_is_self_contained(tmp_path, records):
    _, page = build_report(records, tmp_path, paper_results=PAPER)
    html = page.read_text()
    assert "<style>" in html and "<script" not in html
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:|//|file:)""", html)
    assert "<link" not in html and "@import" not in html
    assert html.count("<svg") == len(list((tmp_path / "charts").glob("*.svg")))
    assert 'class="spread"' in html  # the shaded learning-curve band


def test_report_without_paper_numbers_says_so(tmp_path, records):
    md, _ = build_report(records[:2], tmp_path, paper_results=[])
    assert "No published numbers are listed" in md.read_text()


def test_report_cli_reads_the_store(tmp_path, records, capsys):
    store = tmp_path / "store"
    for r in records[:2]:
        add_record(r, store)
    (store / "junk.json").write_text("{not json")
    assert (
        main(["leaderboard", "--store", str(store), "report", "--out", str(tmp_path / "site")]) == 0
    )
    captured = capsys.readouterr()
    assert "junk.json" in captured.err
    assert (tmp_path / "site" / "report.html").exists()
    assert "report.html" in captured.out


# -- a real browser --------------------------------------------------------------------------
def _chromium(tmp_path: Path, page: Path, *extra: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "chromium-profile"
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            # --v=1 also logs every file the page loads (FileURLLoader::Start: URL)
            "--v=1",
            *extra,
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _page_errors(stderr: str) -> list[str]:
    """Console messages and script errors of the page (not chromium's own dbus/gpu noise)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def _loaded_files(stderr: str) -> set[str]:
    return set(re.findall(r"FileURLLoader::Start: (\S+)", stderr))


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (CI installs Debian's "
    "`chromium`); the render test needs a real browser",
)
def test_report_renders_in_headless_chromium(tmp_path, records):
    _, page = build_report(records, tmp_path / "site", paper_results=PAPER)
    dom = _chromium(tmp_path, page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert _page_errors(dom.stderr) == []
    assert _loaded_files(dom.stderr) == {page.resolve().as_uri()}  # nothing besides the page
    html = dom.stdout
    for css in (
        "env-table",
        "generalization-table generalization-return",
        "dsc-table",
        "pairwise",
        "provenance",
    ):
        assert f'class="{css}"' in html, css
    assert html.count("<svg") >= 4 and "<polyline" in html and "<polygon" in html
    assert "Food Preparation" in html and "TWOSOME (paper, Table 1 / Appendix H)" in html

    shot = tmp_path / "shot.png"
    run = _chromium(
        tmp_path, page, f"--screenshot={shot}", "--window-size=1200,2400", "--hide-scrollbars"
    )
    assert run.returncode == 0 and shot.exists()
    image = pytest.importorskip("PIL.Image").open(shot).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 20) or []
    painted = sum(n for n, c in colours if c != (255, 255, 255))
    assert painted > 0.02 * image.width * image.height  # text, table rules and charts drawn
    poad_blue = sum(
        n for n, (r, g, b) in colours if abs(r - 0x1F) < 40 and abs(g - 0x77) < 40 and b > 150
    )
    assert poad_blue > 200  # the POAD bars / curve were painted


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_the_render_check_catches_a_broken_page(tmp_path):
    """The detectors above are not vacuous: script errors and extra files are reported."""
    page = tmp_path / "broken.html"
    page.write_text(
        '<!DOCTYPE html><html><body><img src="missing.png">'
        "<script>undefined_function();</script></body></html>"
    )
    run = _chromium(tmp_path, page, "--dump-dom")
    assert run.returncode == 0
    assert any("undefined_function" in line for line in _page_errors(run.stderr))
    assert (tmp_path / "missing.png").as_uri() in _loaded_files(run.stderr)
