"""The report: tables, normalisation, paper rows, rliable's statistics, charts, and the
generated tables of docs/results.md. (The real-browser render of the committed board is in
test_leaderboard_report_browser.py.)"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbench_poad.baselines.random import RandomAgent
from agentbench_poad.cli import main
from agentbench_poad.leaderboard import add_record, evaluate
from agentbench_poad.leaderboard.report import (
    build_report,
    iqm_difference,
    iqm_estimate,
    load_paper_results,
    normalised,
    probability_of_improvement,
    stats,
)
from agentbench_poad.leaderboard.report.blocks import (
    Curve,
    CurveChart,
    CurvePoint,
    Interval,
    IntervalChart,
)
from agentbench_poad.leaderboard.report.charts import AgentColors, inline_svg, render_chart
from agentbench_poad.leaderboard.report.common import pm
from agentbench_poad.leaderboard.report.results_tables import MARKER, fill, tables
from tests.test_leaderboard_toys import CODE_ID, CORRIDOR_ID, CodeAgent, make_corridor_oracle

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "leaderboard" / "results"
BUILT = "2026-01-01T00:00:00+00:00"


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
    ntpo = _as(poad, name="ntpo", mean_shift=-0.3)
    ntpo["learning_curve"] = copy.deepcopy(poad["learning_curve"])
    for point in ntpo["learning_curve"]["points"]:
        point.update(mean=point["mean"] - 0.3, low=point["low"] - 0.3, high=point["high"] - 0.3)
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
    return [oracle, random, poad, dsc, dsc_poad, vh, ntpo]


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


def test_shipped_paper_results_file_is_valid():
    results = load_paper_results()
    for item in results:  # every shipped number names its source
        assert item["source"]["url"] and item["source"]["where"]


def test_report_tables(tmp_path, records):
    md, page = build_report(records, tmp_path, paper_results=PAPER)
    text = md.read_text()
    # per-env table: mean ± s.e., IQM with its CI, success, normalisation (oracle 1, random 0)
    corridor = text.split(f"### {CORRIDOR_ID}")[1].split("###")[0]
    num, ci = r"-?[\d.]+", r"\[-?[\d.]+, -?[\d.]+\]"
    assert re.search(
        rf"\| oracle \| {num} ± [\d.]+ \| {num} {ci} \| 1\.000 ± 0\.000 \| 1\.000 \|", corridor
    )
    assert re.search(
        rf"\| random \| {num} ± [\d.]+ \| {num} {ci} \| [\d.]+ ± [\d.]+ \| 0\.000 \|", corridor
    )
    poad_row = next(line for line in corridor.splitlines() if line.startswith("| poad"))
    oracle, random, poad = records[0], records[1], records[2]
    expected = (poad["scores"]["mean"] - random["scores"]["mean"]) / (
        oracle["scores"]["mean"] - random["scores"]["mean"]
    )
    assert f"| {expected:.3f} |" in poad_row
    iqm = iqm_estimate([s["score"] for s in poad["scores"]["per_seed"]])
    assert f"| {iqm.point:.3f} [{iqm.low:.3f}, {iqm.high:.3f}] |" in poad_row
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
    # the comparison with POAD: rliable's IQM difference and P(agent > POAD), verdict from the CI
    pair = text.split("## Comparison with POAD")[1].split("\n## ")[0]
    ntpo_row = next(
        line for line in pair.splitlines() if line.startswith(f"| {CORRIDOR_ID} | ntpo")
    )
    runs = lambda r: [s["score"] for s in r["scores"]["per_seed"]]  # noqa: E731
    diff = iqm_difference(runs(records[6]), runs(poad))
    poi = probability_of_improvement(runs(records[6]), runs(poad))
    assert f"| {diff.point:+.3f} | [{diff.low:.3f}, {diff.high:.3f}] |" in ntpo_row
    assert f"| {poi.point:.2f} | [{poi.low:.2f}, {poi.high:.2f}] |" in ntpo_row
    p = stats.permutation_p(runs(records[6]), runs(poad))
    assert ntpo_row.endswith(f"| {stats.p_text(p)} | {stats.verdict(diff, p)} |")
    assert f"| {CORRIDOR_ID} | oracle |" not in pair  # anchors are not compared
    # the chart files: IQM intervals per env, learning curves, P(agent > POAD)
    charts = {p.name for p in (tmp_path / "charts").glob("*.svg")}
    assert {f"iqm-{CORRIDOR_ID}.svg", f"curve-{CORRIDOR_ID}.svg"} <= charts
    assert f"improvement-{CORRIDOR_ID}.svg" in charts
    # provenance names every record and the paper sources
    prov = text.split("Provenance")[1]
    for r in records:
        assert r["record_id"] in prov
    # a URL is shown, in a code span: never a link (issue 64: no link reaches report.md)
    assert "test fixture row: `https://example.org/test-fixture`" in prov


def test_html_is_self_contained(tmp_path, records):
    _, page = build_report(records, tmp_path, paper_results=PAPER)
    html = page.read_text()
    assert "<style>" in html and "<script" not in html
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:|//|file:)""", html)
    assert "<link" not in html and "@import" not in html
    files = sorted((tmp_path / "charts").glob("*.svg"))
    assert html.count("<svg") == len(files) and "<?xml" not in html
    for f in files:  # each chart inline, its ids prefixed so that charts cannot clash
        assert f'data-chart="{f.stem}"' in html
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids)), "duplicate ids in the page"
    for ref in re.findall(r'(?:href="#|url\(#)([^")]+)', html):
        assert ref in ids, ref


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


# -- statistics: rliable's, against plain loops ------------------------------------------------
scores = st.lists(st.floats(-2.0, 2.0, allow_nan=False).map(lambda x: round(x, 3)), min_size=1)


@settings(max_examples=60, deadline=None)
@given(values=scores)
def test_iqm_is_rliables_and_a_plain_trimmed_mean(values):
    from rliable import metrics

    ordered = sorted(values)
    cut = int(0.25 * len(ordered))  # scipy's trim_mean: int(0.25 n) off each end
    kept = ordered[cut : len(ordered) - cut]
    plain = sum(kept) / len(kept)
    runs = np.asarray(values).reshape(-1, 1)
    assert stats.iqm(runs) == pytest.approx(plain, abs=1e-9)
    assert stats.iqm(runs) == pytest.approx(float(metrics.aggregate_iqm(runs)), abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(x=scores, y=scores)
def test_probability_of_improvement_is_rliables_and_a_plain_count(x, y):
    from rliable import metrics

    wins = 0.0
    for a in x:
        for b in y:
            wins += 1.0 if a > b else 0.5 if a == b else 0.0
    plain = wins / (len(x) * len(y))
    ax, ay = np.asarray(x).reshape(-1, 1), np.asarray(y).reshape(-1, 1)
    assert stats.improvement(ax, ay) == pytest.approx(plain, abs=1e-9)
    assert stats.improvement(ax, ay) == pytest.approx(
        float(metrics.probability_of_improvement(ax, ay)), abs=1e-9
    )


def test_intervals_are_seeded_and_leave_numpys_generator_alone():
    np.random.seed(7)
    before = np.random.get_state()[1].copy()
    a, b = [1.0, 1.2, 0.9, 1.1, 1.05], [0.0, 0.1, -0.1, 0.05, 0.02]
    first = stats._difference_cached(tuple(a), tuple(b), 11, 300)
    stats._difference_cached.cache_clear()
    assert stats._difference_cached(tuple(a), tuple(b), 11, 300) == first  # seeded
    assert (np.random.get_state()[1] == before).all()  # the caller's stream is untouched
    assert first.point == pytest.approx(stats.iqm(np.array(a)) - stats.iqm(np.array(b)))
    assert first.low is not None and 0 < first.low <= first.point <= first.high
    # five seeds: the CI excludes zero, but a verdict needs ten seeds per agent
    assert stats.verdict(first, 0.01) == "exploratory: direction only (higher)"
    same = iqm_difference(a, a)
    assert same.low < 0 < same.high
    assert stats.verdict(same, 1.0) == "exploratory: direction only (equal)"
    poi = probability_of_improvement(a, b)
    assert poi.point == 1.0 and poi.low is not None and poi.low <= poi.high <= 1.0


def test_one_seed_is_told_apart():
    one = iqm_estimate([0.7])
    assert (one.point, one.low, one.high, one.runs) == (0.7, None, None, 1)
    assert not one.has_interval and not one.excludes(0.0)
    assert stats.verdict(iqm_difference([0.7], [0.1, 0.2]), 0.67) == (
        "exploratory: direction only (higher)"
    )
    assert pm(0.7, 0.0, 1) == "0.700 (n = 1)" and pm(0.7, 0.05, 3) == "0.700 ± 0.050"


def test_normalised():
    assert normalised(5.0, 0.0, 10.0) == 0.5
    assert normalised(0.0, 0.0, 10.0) == 0.0 and normalised(10.0, 0.0, 10.0) == 1.0
    assert normalised(1.0, None, 10.0) is None and normalised(1.0, 2.0, 2.0) is None


def test_a_single_seed_record_shows_n_1_not_a_zero_spread(tmp_path, records):
    single = copy.deepcopy(records[2])
    single["scores"]["per_seed"] = single["scores"]["per_seed"][:1]
    single["protocol"]["seeds"] = single["protocol"]["seeds"][:1]
    md, _ = build_report([records[0], single], tmp_path, paper_results=[])
    row = next(
        line
        for line in md.read_text().split(f"### {CORRIDOR_ID}")[1].splitlines()
        if line.startswith("| poad")
    )
    assert "(n = 1)" in row and "(n = 1: no CI)" in row and "± 0.000" not in row


# -- charts ------------------------------------------------------------------------------------
LONG = "ntpo (smollm2-135m) [trained on VirtualHome-FoodPreparation-v0]"


def test_charts_are_reproducible_and_self_contained(tmp_path, records):
    a, b = tmp_path / "a", tmp_path / "b"
    build_report(records, a, paper_results=PAPER, built=BUILT)
    build_report(records, b, paper_results=PAPER, built=BUILT)
    for f in sorted((a / "charts").glob("*.svg")):
        text = f.read_text()
        assert text == (b / "charts" / f.name).read_text(), f.name  # same records, same bytes
        assert "<dc:date>" not in text  # no build date: the bytes depend on the records only
        assert "<image" not in text  # vectors only
    assert (a / "report.html").read_text() == (b / "report.html").read_text()


def test_one_colour_per_agent_in_every_chart():
    colors = AgentColors(["twosome", "zeta", "poad", "alpha"])
    assert colors("poad") == colors("POAD") == AgentColors()("poad")  # fixed for known agents
    assert len({colors(n) for n in ("poad", "ntpo", "twosome", "zeta", "alpha", "oracle")}) == 6
    interval = IntervalChart(
        "i",
        "title",
        (Interval("zeta", LONG, 0.5, 0.2, 0.8, 3), Interval("poad", "poad", 0.1, None, None, 1)),
        "x",
    )
    curve = CurveChart(
        "c",
        "title",
        (Curve("zeta", LONG, (CurvePoint(0, 0.1, 0.0, 0.2), CurvePoint(64, 0.4, 0.3, 0.5))),),
        "env steps",
        "return",
    )
    for chart in (interval, curve):
        svg = render_chart(chart, colors).lower()
        assert colors("zeta").lower() in svg
    # a long agent name is wrapped (and the figure grows), not cut
    assert render_chart(interval, colors) == render_chart(interval, colors)
    inline = inline_svg(render_chart(interval, colors), "i", "title")
    assert inline.startswith('<svg class="chart" data-chart="i" role="img"')
    assert "<title>title</title>" in inline


# The results pages (docs/results.md, docs/results/*.md): tests/test_results_pages.py.


def test_results_tables_command_writes_checks_and_refuses(tmp_path, records, capsys):
    store = tmp_path / "store"
    for r in records:
        add_record(r, store)
    page = tmp_path / "results.md"
    page.write_text(
        "# Results\n\nProse stays.\n\n"
        f"<!-- results-tables: env:{CORRIDOR_ID} -->\nstale\n<!-- /results-tables: env:{CORRIDOR_ID} -->\n"
        "<!-- results-tables: comparison -->\n<!-- /results-tables: comparison -->\n"
    )
    args = ["leaderboard", "--store", str(store), "results-tables", str(page)]
    assert main([*args, "--check"]) == 1
    assert "--write" in capsys.readouterr().err
    assert main([*args, "--write"]) == 0
    written = page.read_text()
    assert "Prose stays." in written and "stale" not in written
    assert f"`{records[2]['record_id']}`" in written
    verdicts = [
        line.rsplit("|", 2)[1].strip()
        for line in written.splitlines()
        if line.startswith(f"| {CORRIDOR_ID} | ntpo")
    ]
    assert verdicts and all(
        v in ("better", "worse")
        or v.startswith(("no significant difference", "exploratory: direction only"))
        for v in verdicts
    )
    assert main([*args, "--check"]) == 0
    page.write_text(written.replace("comparison -->", "nonsense -->"))
    assert main([*args, "--check"]) == 2
    assert "'nonsense'" in capsys.readouterr().err


def _plain_iqm(values):
    """The interquartile mean as rliable defines it for one task: drop the lowest and highest
    25 % of the runs (``floor``), average the rest."""
    values = sorted(values)
    cut = int(0.25 * len(values))
    kept = values[cut : len(values) - cut]
    return sum(kept) / len(kept)


def _rows(table, first):
    return [
        [c.strip() for c in line.strip("|").split(" | ")]
        for line in table.splitlines()
        if line.startswith(f"| {first} |")
    ]


def test_credit_table_compares_each_pair_on_equal_budgets_only(records):
    poad = next(
        r for r in records if r["agent"]["name"] == "poad" and r["env"]["id"] == CORRIDOR_ID
    )
    poad_scores = [s["score"] for s in poad["scores"]["per_seed"]]
    # every seed of GiGPO above every seed of POAD (the seeds are resampled independently)
    gigpo = _as(poad, name="gigpo", mean_shift=max(poad_scores) - min(poad_scores) + 0.25)
    grpo = _as(poad, name="grpo", mean_shift=-0.05)
    for i, s in enumerate(grpo["scores"]["per_seed"]):  # a spread, so that the CI is wide
        s["score"] += 0.4 * (i - 1)
    twosome = _as(poad, name="twosome")
    twosome["training"] = {**poad["training"], "total_steps": 128}  # another budget
    table = tables([*records, gigpo, grpo, twosome])["credit"]()
    rows = {row[1]: row for row in _rows(table, CORRIDOR_ID)}
    assert set(rows) == {
        "GIGPO − POAD (tiny-lm)",
        "GRPO − POAD (tiny-lm)",
        "GIGPO − GRPO (tiny-lm)",
        "POAD − NTPO (tiny-lm)",
        "POAD − TWOSOME (tiny-lm)",
    }
    scores = {
        r["agent"]["name"]: [s["score"] for s in r["scores"]["per_seed"]]
        for r in [
            poad,
            gigpo,
            grpo,
            twosome,
            next(r for r in records if r["agent"]["name"] == "ntpo"),
        ]
    }
    for a, b in (("gigpo", "poad"), ("grpo", "poad"), ("gigpo", "grpo"), ("poad", "ntpo")):
        row = rows[f"{a.upper()} − {b.upper()} (tiny-lm)"]
        point = float(row[4].split()[0])
        assert point == pytest.approx(_plain_iqm(scores[a]) - _plain_iqm(scores[b]), abs=6e-4)
        # three seeds a side: the direction only, whatever the CI (a verdict needs ten)
        direction = "equal" if point == 0 else f"{(a if point > 0 else b).upper()} higher"
        assert row[7] == f"exploratory: direction only ({direction})"
        assert float(row[6]) == pytest.approx(stats.permutation_p(scores[a], scores[b]), abs=5e-4)
    assert rows["GIGPO − POAD (tiny-lm)"][5].startswith("1.00 ")
    assert rows["GIGPO − POAD (tiny-lm)"][6] == "0.100"  # 3 vs 3 seeds: the smallest p
    # unequal budgets are named, not compared
    assert rows["POAD − TWOSOME (tiny-lm)"][4] == "--"
    assert rows["POAD − TWOSOME (tiny-lm)"][7] == "not compared: 64 steps against 128 steps"
    # no pair on the board: a sentence, not an empty table
    assert tables([poad])["credit"]().startswith("(no env has records")


def test_guard_table_sums_the_policy_steps_of_each_training_once(records):
    poad = next(
        r for r in records if r["agent"]["name"] == "poad" and r["env"]["id"] == CORRIDOR_ID
    )
    counted = _as(poad, name="gigpo")
    counted["training"] = {
        **poad["training"],
        "policy_steps_taken": 347,
        "policy_steps_skipped": 37,
        "config_source": {"chosen": {"target_kl": 0.1, "lr": 0.001}},
    }
    # the same training evaluated on another env: its record shares the row, which counts it
    unseen = copy.deepcopy(counted)
    unseen["record_id"] += "__unseen"
    unseen["env"]["id"] = "LeaderboardToy-Other-v0"
    unseen["training"]["env_id"] = CORRIDOR_ID
    table = tables([*records, counted, unseen])["guard"]()
    rows = _rows(table, CORRIDOR_ID)
    assert rows == [
        [
            CORRIDOR_ID,
            "gigpo (tiny-lm)",
            "lr 0.001, target_kl 0.1",
            "2",
            "347",
            "37",
            f"{100 * 37 / 384:.1f} %",
        ]
    ]
    assert tables(records)["guard"]().startswith("(no record counts")


def test_records_evaluated_or_trained_unlike_poad_get_no_verdict(records, tmp_path):
    """The comparison with POAD sets an agent against POAD only when both were evaluated alike
    and, if both trained, on the same seeds after the same steps; otherwise it says why."""
    from agentbench_poad.leaderboard.report.comparison import budget_difference

    poad = copy.deepcopy(
        next(r for r in records if r["agent"]["name"] == "poad" and r["env"]["id"] == CORRIDOR_ID)
    )
    poad["protocol"]["greedy"] = True
    same = _as(poad, name="ntpo")
    assert budget_difference(same, poad) is None
    sampled = copy.deepcopy(same)
    sampled["protocol"]["greedy"] = False
    sampled["protocol"]["episodes_per_seed"] += 5
    other_seeds = copy.deepcopy(same)
    other_seeds["protocol"]["seeds"] = [100, 101, 102]
    untrained = copy.deepcopy(other_seeds)
    untrained["training"] = None
    episodes = poad["protocol"]["episodes_per_seed"]
    assert budget_difference(sampled, poad) == (
        f"sampled against greedy; {episodes + 5} against {episodes} episodes per seed"
    )
    assert budget_difference(other_seeds, poad) == "seeds 100–102 against seeds 0–2"
    assert budget_difference(untrained, poad) is None  # an untrained model's seeds may differ
    for name, record in (("sampled", sampled), ("seeds", other_seeds)):
        record["agent"]["name"] = name
    table = tables([poad, sampled, other_seeds])["comparison"]()
    verdicts = {row[1]: row[7] for row in _rows(table, CORRIDOR_ID)}
    assert verdicts["sampled (tiny-lm)"].startswith("not compared: ")
    assert verdicts["seeds (tiny-lm)"] == "not compared: seeds 100–102 against seeds 0–2"
    md, _ = build_report([poad, sampled, other_seeds], tmp_path, paper_results=PAPER)
    assert "not compared: seeds 100–102 against seeds 0–2" in md.read_text()


def test_curves_table_places_group_agents_points_beside_the_step_grid():
    """Group agents' curve points sit at each evaluation's mean env step (a few steps off the
    grid): the table shows each beside the nearest grid column, marked "≈", and nothing where
    no point lies within half a column's spacing."""
    from agentbench_poad.leaderboard.report.common import Inputs
    from agentbench_poad.leaderboard.report.paper import as_paper
    from agentbench_poad.leaderboard.report.record_tables import curves_table

    def record(name, points, x):
        return {
            "record_id": f"E__{name}",
            "agent": {"name": name},
            "model": {"base": "m"},
            "env": {"id": "E"},
            "scores": {"mean": 1.0},
            "training": {"env_id": "E", "runs": ["r"], "total_steps": 1024},
            "learning_curve": {
                "x": x,
                "points": [
                    {"step": s, "mean": v, "low": v - 0.1, "high": v + 0.1, "n": 2}
                    for s, v in points
                ],
            },
        }

    grid = record("poad", [(512.0, 0.25), (1024.0, 0.5)], "env steps")
    group = record("gigpo", [(531.5, 0.75), (1790.0, 1.0)], "env steps (mean over runs)")
    table = curves_table("E", Inputs([grid, group], as_paper(None)))
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:] for line in table.splitlines()}
    assert rows["agent"] == ["512", "1,024 |"]
    assert rows["poad (m), 1,024 steps"] == ["0.25 ± 0.10", "0.50 ± 0.10 |"]
    assert rows["gigpo (m), 1,024 steps"] == ["≈0.75 ± 0.10", "-- |"]

    # Where every episode runs to the cap, a group agent's seeds share a grid of their own
    # (whole-episode rounds): its record says "env steps" too, yet the columns stay the
    # trainer's grid of the majority, and a shorter budget on that grid keeps its own cells.
    twosome = record("twosome", [(512.0, 0.3), (1024.0, 0.6)], "env steps")
    short = record("ntpo", [(512.0, 0.1)], "env steps")
    rounds = record("grpo", [(600.0, 0.2), (1080.0, 0.4)], "env steps")
    table = curves_table("E", Inputs([rounds, grid, twosome, short], as_paper(None)))
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:] for line in table.splitlines()}
    assert rows["agent"] == ["512", "1,024 |"]
    assert rows["twosome (m), 1,024 steps"] == ["0.30 ± 0.10", "0.60 ± 0.10 |"]
    assert rows["ntpo (m), 1,024 steps"] == ["0.10 ± 0.10", "-- |"]
    assert rows["grpo (m), 1,024 steps"] == ["≈0.20 ± 0.10", "≈0.40 ± 0.10 |"]


def test_pairs_of_hyphenated_agent_names(records):
    """``archer-adrl``'s pair with NTPO: its credit row, and a margins region that names it
    with an env (agent names may hold hyphens; the region's pair is read as the pair it names)."""
    ntpo = next(
        r for r in records if r["agent"]["name"] == "ntpo" and r["env"]["id"] == CORRIDOR_ID
    )
    archer = _as(ntpo, name="archer-adrl", mean_shift=0.1)
    table = tables([*records, archer])["credit"]()
    row = {row[1]: row for row in _rows(table, CORRIDOR_ID)}["ARCHER-ADRL − NTPO (tiny-lm)"]
    scores = [[s["score"] for s in r["scores"]["per_seed"]] for r in (archer, ntpo)]
    assert float(row[4].split()[0]) == pytest.approx(
        _plain_iqm(scores[0]) - _plain_iqm(scores[1]), abs=6e-4
    )
    name = f"margins:archer-adrl-ntpo:{CORRIDOR_ID}"
    region = f"<!-- results-tables: {name} -->\n<!-- /results-tables: {name} -->"
    filled = fill(region, [*records, archer])
    body = next(MARKER.finditer(filled)).group("body")
    # read as archer-adrl − ntpo, not archer − adrl-ntpo (no such records: no row)
    assert "ARCHER-ADRL − NTPO" in body and len(_rows(body, CORRIDOR_ID)) == 1, body
