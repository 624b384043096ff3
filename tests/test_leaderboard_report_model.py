"""The report model on its own (no files, no browser) and the shipped paper numbers."""

from __future__ import annotations

import copy
import html
import json
import re
from pathlib import Path

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentbench_poad  # noqa: F401 - registers the ids
from agentbench_poad.leaderboard.records import history_path, load_records, mean_stderr
from agentbench_poad.leaderboard.report import PAPER_RESULTS, build_model, load_paper
from agentbench_poad.leaderboard.report.common import agent_label, md_text
from agentbench_poad.leaderboard.report.html_page import render_html
from agentbench_poad.leaderboard.report.markdown import render_markdown
from agentbench_poad.leaderboard.report.model import Paragraph, Table
from agentbench_poad.leaderboard.report.paper import (
    PaperResults,
    check_paper_data,
    layout_tasks,
)
from agentbench_poad.registration import EnvFamily, TaskRow, register_family
from tests.test_leaderboard_toys import CorridorEnv

RESULTS = Path(__file__).resolve().parents[1] / "leaderboard" / "results"
BUILT = "2026-01-01T00:00:00+00:00"


@pytest.fixture(scope="module")
def committed():
    """The committed reference records (real records, made by the tooling)."""
    return load_records(RESULTS)


@pytest.fixture(scope="module")
def shipped():
    return load_paper()


def _raw() -> dict:
    return json.loads(PAPER_RESULTS.read_text(encoding="utf-8"))


# -- the shipped numbers ---------------------------------------------------------------------
def test_shipped_paper_file_covers_table1_and_table4(shipped):
    registered = set(gym.registry)
    table1 = shipped.layouts["table1"]
    table4 = shipped.layouts["table4"]
    assert table1["tasks_as"] == "columns" and table4["tasks_as"] == "rows"
    # the tasks are env facts: Food Preparation (the training task) and its six variants
    tasks1, tasks4 = layout_tasks(table1), layout_tasks(table4)
    assert tasks1[0] == (table1["trained_on"], "Food Preparation") and len(tasks1) == 7
    assert len(tasks4) == 6 and all(e in registered for e, _ in tasks1 + tasks4)
    # every (method, task, metric) cell of both tables is present exactly once; the paper's
    # extraction holds the six unseen Table 1 columns, not the training task's
    for name, layout, n_tasks in (("table1", table1, 6), ("table4", table4, 6)):
        cells = {(r["agent"], r["env_id"], r["metric"]) for r in shipped.in_layout(name)}
        assert len(cells) == len(shipped.in_layout(name))
        per_method = n_tasks * (2 if name == "table1" else 1)
        assert len(cells) == per_method * len(layout["methods"])
    assert not {r["env_id"] for r in shipped.in_layout("table1")} & {table1["trained_on"]}
    for r in shipped.results:
        assert r["env_id"] in registered
        assert r["source"]["url"].startswith("https://arxiv.org/abs/2405.15821")
        assert r["source"]["where"].startswith(r["table"]) and r["source"]["reading"]
        assert 0.0 <= r["value"] <= 1.0
    for extra in (*shipped.datasets, *shipped.wall_time):
        assert extra["env_id"] in {e for e, _ in tasks4} and extra["source"]["where"]
    assert {x["benchmark"] for x in shipped.language_ability} == {
        "ARC-Challenge",
        "HellaSwag",
        "PIQA",
        "MMLU",
    }


def test_shipped_numbers_spot_check_against_the_paper_tables(shipped):
    """A few cells re-read from the paper's tables (a transcription check, one per table)."""

    def cell(layout, agent, env_id, metric):
        (hit,) = [
            r
            for r in shipped.in_layout(layout)
            if (r["agent"], r["env_id"], r["metric"]) == (agent, env_id, metric)
        ]
        return hit

    assert cell("table1", "poad", "VirtualHome-Cheese-v0", "discounted_return")["value"] == 0.7553
    assert cell("table1", "untrained", "VirtualHome-Laundry-v0", "success_rate")["value"] == 0.15
    assert cell("table1", "ntpo", "VirtualHome-Laundry-v0", "discounted_return")["value"] == 0.5687
    best = cell("table4", "poad", "DataSciCoding-balance-scale-v0", "best_code_auc")
    assert (best["value"], best["spread"]) == (0.9651, 0.03)
    assert "best code" in best["label"] and "during POAD training" in best["source"]["reading"]
    gpt35 = cell("table4", "caafe-gpt-3.5", "DataSciCoding-airlines-v0", "final_auc")
    assert (gpt35["value"], gpt35["spread"]) == (0.619, 0.04)
    (bw,) = [d for d in shipped.datasets if d["env_id"] == "DataSciCoding-breast-w-v0"]
    assert (bw["features"], bw["samples"], bw["classes"]) == (9, 69, 2)
    (st3,) = [w for w in shipped.wall_time if w["env_id"] == "DataSciCoding-spaceship-titanic-v0"]
    assert st3["wall_time_s"] == 3 * 3600 + 5 * 60


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["results"][0].update(layout="table9"), "not in `layouts`"),
        (lambda d: d["results"][0].update(env_id="VirtualHome-Entertainment-v0"), "do not list"),
        (lambda d: d["results"].append(copy.deepcopy(d["results"][0])), "repeats the cell"),
        (lambda d: d["results"][0]["source"].pop("where"), "schema"),
        (lambda d: d["results"][0].update(value=0.7554), "make them agree"),
        (lambda d: d["results"][-1].update(spread=0.03), "make them agree"),
        (lambda d: d["results"][0].update(metric="auc"), "schema"),
        (lambda d: d.update(schema_version=1), "schema"),
    ],
)
def test_bad_paper_files_are_refused_with_the_fix(mutate, message):
    data = _raw()
    mutate(data)
    with pytest.raises(ValueError, match=re.escape(message)):
        check_paper_data(data, "paper_results.json")


def test_unreadable_paper_file_names_the_fix(tmp_path):
    bad = tmp_path / "paper.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="--paper FILE"):
        load_paper(bad)


# -- the model -------------------------------------------------------------------------------
def test_model_sections_and_paper_rows(committed, shipped):
    report = build_model(committed, shipped, built=BUILT)
    assert [s.anchor for s in report.sections] == [
        "by-env",
        "learning-curves",
        "generalization",
        "datascicoding",
        "paper-tables",
        "pairwise",
        "provenance",
    ]
    returns, success = report.section("generalization").tables()
    assert returns.header[1] == "Food Preparation (training task)"
    assert list(returns.header[2:]) == [
        label for _, label in layout_tasks(shipped.layouts["table1"])[1:]
    ]
    poad = returns.row("POAD (paper, Table 1 / Appendix H)")
    assert poad.kind == "paper" and poad.cells[1:3] == ("--", "0.7553")
    assert poad.cells[returns.header.index("Apple Pie")] == "0.7650"  # as printed
    assert success.row("LLaMA2-7B (untrained) (paper, Table 1 / Appendix H)").cells[2] == "0.55"
    # our rows: the committed oracle on Cheese, success 1.0, its discounted return (backfilled by
    # replaying every episode: `leaderboard backfill --replay-discounted`)
    assert success.row("oracle").kind == "" and success.row("oracle").cells[2] == "1.000 ± 0.000"
    assert returns.row("oracle").cells[2] == "0.774 ± 0.000"
    assert "γ = 0.95" in returns.caption and "undiscounted" not in returns.caption
    (dsc,) = report.section("datascicoding").tables()
    first_paper = dsc.column_kinds.index("paper")
    assert all(k == "paper" for k in dsc.column_kinds[first_paper:])
    assert all("(paper, Table 4 / Appendix F)" in h for h in dsc.header[first_paper:])
    assert dsc.column("POAD-Best (best code during training) (paper, Table 4 / Appendix F)")[
        :6
    ] == [
        "0.5939 ± 0.01",
        "0.7282 ± 0.01",
        "0.8628 ± 0.01",
        "0.664 ± 0.01",
        "0.9651 ± 0.03",
        "0.9981 ± 0.01",
    ]
    assert dsc.row("iris").cells[1] != "--"  # our committed bundled-dataset rows follow
    tables = {t.css: t for t in report.section("paper-tables").tables()}
    assert set(tables) == {"paper-datasets", "paper-wall-time", "paper-language"}
    assert all(r.kind == "paper" for t in tables.values() for r in t.rows)
    assert tables["paper-wall-time"].rows[0].cells[2] == "2 h 34 m"
    prov = report.section("provenance").tables()[0]
    assert sum(r.kind == "paper" for r in prov.rows) == len(shipped.results)
    assert report.index["records"] == [r["record_id"] for r in committed]


def test_layout_is_data_not_literals(committed, shipped):
    """Tasks of another table in the env facts move the columns: the report lists no task."""
    family = EnvFamily("layouttoy", "LayoutToy", entry_point=CorridorEnv, version=0)
    rows = [
        TaskRow("Second", {}, paper_name="Salad B", paper_tables=("Table 98",)),
        TaskRow("First", {}, paper_name="Salad A", paper_tables=("Table 98",)),
    ]
    try:
        ids = register_family(family, rows)
        layouts = dict(shipped.layouts)
        layouts["table1"] = {
            **layouts["table1"],
            "env_facts_table": "Table 98",
            "trained_on": ids[1],
        }
        paper = PaperResults(results=(), layouts=layouts)
        records = [r for r in committed if r["env"]["family"] == "datascicoding"]
        records = [dict(r, env=dict(r["env"], id=i)) for r in records[:1] for i in ids]
        returns, success = (
            build_model(records, paper, built=BUILT).section("generalization").tables()
        )
        assert returns.header == ("agent", "Salad B", "Salad A (training task)")
        assert len(success.rows) == 1 and success.rows[0].cells[1] == success.rows[0].cells[2]
    finally:
        for env_id in ("LayoutToy-Second-v0", "LayoutToy-First-v0"):
            gym.registry.pop(env_id, None)
    without = PaperResults(results=(), layouts={})
    para = build_model(committed, without, built=BUILT).section("generalization").paragraphs()
    assert "no 'table1' layout" in para[0].text


@settings(max_examples=25, deadline=None)
@given(
    value=st.floats(0.0, 1.0, allow_nan=False),
    spread=st.one_of(st.none(), st.floats(0.001, 0.5, allow_nan=False)),
)
def test_paper_numbers_never_enter_our_rows(committed, value, spread):
    """Any published value: our cells are those of the model without paper numbers."""
    shipped = load_paper()
    entries = [
        {k: v for k, v in r.items() if k != "printed"} | {"value": value, "spread": spread}
        for r in shipped.results
    ]
    paper = PaperResults(results=tuple(entries), layouts=shipped.layouts)
    with_paper = build_model(committed, paper, built=BUILT)
    without = build_model(committed, PaperResults(layouts=shipped.layouts), built=BUILT)
    assert with_paper.section("by-env") == without.section("by-env")
    assert with_paper.section("pairwise") == without.section("pairwise")
    for ours, theirs in zip(
        without.section("generalization").tables(), with_paper.section("generalization").tables()
    ):
        our_rows = [r for r in theirs.rows if r.kind != "paper"]
        assert tuple(our_rows) == tuple(r for r in ours.rows)
        assert all(r.kind == "paper" for r in theirs.rows[len(our_rows) :])
    (dsc,) = with_paper.section("datascicoding").tables()
    n_ours = dsc.column_kinds.count("")
    (dsc0,) = without.section("datascicoding").tables()
    assert [r.cells[:n_ours] for r in dsc.rows] == [r.cells for r in dsc0.rows]


def test_discounted_return_is_used_when_records_log_it(committed, shipped):
    """Mean ± s.e. over seeds of per-seed means, against a plain loop."""
    rec = copy.deepcopy(
        next(r for r in committed if r["record_id"] == "VirtualHome-Pizza-v0__random")
    )
    expected_seed_means = []
    for s in rec["scores"]["per_seed"]:
        total = 0.0
        for e in s["episodes"]:
            e["discounted_return"] = 0.95 ** max(e["length"] - 1, 0) * e["return"]
            total += e["discounted_return"]
        expected_seed_means.append(total / len(s["episodes"]))
    report = build_model([rec], shipped, built=BUILT)
    returns, _ = report.section("generalization").tables()
    mean, se = mean_stderr(expected_seed_means)
    assert returns.row("random").cells[returns.header.index("Pizza")] == f"{mean:.3f} ± {se:.3f}"
    assert "undiscounted" not in returns.caption


def test_table1_cells_show_the_discounted_return_records_log(shipped):
    """A new record logs discounted returns: its Table 1 cell shows them, unmarked; the same
    record without them (as made before) falls back to the undiscounted return, marked."""
    from agentbench_poad.leaderboard import evaluate

    new = evaluate(
        "agentbench_poad.baselines.oracle:make_oracle",
        "VirtualHome-Cheese-v0",
        seeds=[0, 1, 2],
        episodes=3,
    )[0]
    seed_means = []
    for s in new["scores"]["per_seed"]:
        values = [e["discounted_return"] for e in s["episodes"]]
        seed_means.append(sum(values) / len(values))
        assert s["mean_discounted_return"] == pytest.approx(seed_means[-1])
    mean, se = mean_stderr(seed_means)
    returns, _ = build_model([new], shipped, built=BUILT).section("generalization").tables()
    column = returns.header.index("Cheese")
    assert returns.row("oracle").cells[column] == f"{mean:.3f} ± {se:.3f}"
    assert mean < new["scores"]["mean"]  # the oracle's reward comes late: γ^t < 1 shows
    assert "undiscounted" not in returns.caption
    assert f"γ = {new['protocol']['discount']:g}" in returns.caption

    old = copy.deepcopy(new)
    old["record_id"] = "VirtualHome-Pizza-v0__oracle"
    old["env"]["id"] = old["config"]["env_id"] = "VirtualHome-Pizza-v0"
    del old["protocol"]["discount"]
    for s in old["scores"]["per_seed"]:
        del s["mean_discounted_return"]
        for e in s["episodes"]:
            del e["discounted_return"]
    returns, _ = build_model([new, old], shipped, built=BUILT).section("generalization").tables()
    row = returns.row("oracle")
    assert row.cells[column] == f"{mean:.3f} ± {se:.3f}"  # the new record: still discounted
    sc = old["scores"]
    assert row.cells[returns.header.index("Pizza")] == (
        f"{sc['mean']:.3f} ± {sc['stderr']:.3f} (undiscounted)"
    )
    assert "Cells marked (undiscounted)" in returns.caption


def test_a_model_trained_on_the_source_task_is_one_table1_row(committed, shipped):
    """The model trained on Food Preparation is scored there (its own record) and on the unseen
    tasks (records "trained on" it): Table 1 shows both in one row, as the paper does."""
    source = "VirtualHome-FoodPreparation-v0"
    mine = [
        r
        for r in committed
        if r["agent"]["name"] == "ntpo"
        and (r.get("training") or {}).get("env_id") == source
        and r["env"]["id"].startswith("VirtualHome-")
    ]
    assert {r["env"]["id"] for r in mine} >= {source, "VirtualHome-Cheese-v0"}
    returns, success = build_model(mine, shipped, built=BUILT).section("generalization").tables()
    for table in (returns, success):
        ours = [row for row in table.rows if row.cells[0].startswith("ntpo")]
        assert len(ours) == 1, [row.cells[0] for row in ours]
        assert f" [trained on {source}]" in ours[0].cells[0]  # then "[exploratory]", if so
    columns = [env_id for env_id, _ in layout_tasks(shipped.layouts["table1"])]
    row = success.rows[0]
    for record in mine:
        column = 1 + columns.index(record["env"]["id"])
        sc = record["scores"]
        assert row.cells[column] == f"{sc['success_rate']:.3f} ± {sc['success_rate_stderr']:.3f}"


def test_each_sentence_is_in_both_renderings(committed, shipped):
    report = build_model(committed, shipped, built=BUILT)
    charts = {c.name: f"<svg><title>{c.name}</title></svg>" for c in report.charts()}
    md = render_markdown(report, {n: f"charts/{n}.svg" for n in charts})
    page = render_html(report, charts)
    texts = [p.text for p in report.intro]
    for section in report.sections:
        texts.append(section.heading)
        for block in section.walk():
            if isinstance(block, Paragraph):
                texts.append(block.text)
            elif isinstance(block, Table):
                texts += [
                    block.caption,
                    *block.header,
                    *(c for row in block.rows for c in row.cells),
                ]
    for text in texts:
        # Markdown makes HTML inert (md_text: "<" and "&" as entities outside code spans)
        assert md_text(text).replace("|", "\\|") in md, text
        assert html.escape(text) in page, text
    for name in charts:
        assert f"(charts/{name}.svg)" in md and f"<title>{name}</title>" in page
    # paper rows are italic in Markdown and styled in HTML
    assert "| _POAD (paper, Table 1 / Appendix H)_ |" in md
    assert '<tr class="paper-row"><td>POAD (paper, Table 1 / Appendix H)</td>' in page
    assert '<th class="paper-col">CAAFE (GPT-4) (paper, Table 4 / Appendix F)</th>' in page


def test_table1_tasks_show_the_discounted_return_beside_the_return(committed, shipped):
    """The paper's Table 1 metric is the discounted return: on its tasks the per-env table
    shows it beside our (undiscounted) score, from the records' per-seed values."""
    from agentbench_poad.leaderboard.report.common import seed_discounted_returns

    report = build_model(committed, shipped, built=BUILT)
    (cheese,) = report.section("env-VirtualHome-Cheese-v0").tables()
    (column,) = [h for h in cheese.header if h.startswith("discounted return")]
    assert column == "discounted return (γ = 0.95)"
    record = next(
        r
        for r in committed
        if r["env"]["id"] == "VirtualHome-Cheese-v0" and r["agent"]["name"] == "grpo"
    )
    label = agent_label(record)
    assert label.startswith("grpo (smollm2-135m) [trained on VirtualHome-FoodPreparation-v0]")
    mean, se = mean_stderr(seed_discounted_returns(record))
    assert cheese.row(label).cells[cheese.header.index(column)] == f"{mean:.3f} ± {se:.3f}"
    (salad,) = report.section("env-Overcooked-TomatoSalad-v0").tables()
    assert not any(h.startswith("discounted") for h in salad.header)  # not a Table 1 task
    # one seed reads "n = 1", never a spread of zero
    base = salad.row("base (smollm2-135m)")
    assert base.cells[1].endswith("(n = 1)") and "(n = 1: no CI)" in base.cells[2]


def test_learning_curves_mark_the_papers_numbers(committed, shipped):
    from agentbench_poad.leaderboard.report.blocks import Marker

    item = {
        "table": "Figure 3",
        "env_id": "Overcooked-TomatoSalad-v0",
        "agent": "poad",
        "label": "POAD",
        "metric": "return",
        "value": 0.9,
        "source": {"url": "https://example.org/fixture", "where": "Figure 3 (fixture)"},
    }
    paper = PaperResults(results=(item,), layouts=shipped.layouts)
    charts = {c.name: c for c in build_model(committed, paper, built=BUILT).charts()}
    curve = charts["curve-Overcooked-TomatoSalad-v0"]
    assert curve.markers == (Marker("poad", "POAD (paper, Figure 3)", 0.9),)
    assert {c.agent for c in curve.curves} >= {"poad", "ntpo", "twosome"}  # one axes for all
    assert charts["curve-Overcooked-TomatoLettuceSalad-v0"].markers == ()


def test_comparison_has_a_performance_profile_over_the_table1_tasks(committed, shipped):
    from agentbench_poad.leaderboard.report.blocks import ProfileChart

    section = build_model(committed, shipped, built=BUILT).section("pairwise")
    (profile,) = [c for c in section.charts() if isinstance(c, ProfileChart)]
    labels = {c.label: c for c in profile.curves}
    source = "VirtualHome-FoodPreparation-v0"
    ntpo = next(r for r in committed if r["agent"]["name"] == "ntpo" and r["env"]["id"] == source)
    trained = agent_label(ntpo, source=True)  # the same label as its Table 1 row
    assert trained.startswith(f"ntpo (smollm2-135m) [trained on {source}]")
    assert trained in labels and "oracle" in labels
    assert len(profile.thresholds) == 21
    oracle = labels["oracle"]  # succeeds on every episode: every run above every τ < 1
    assert all(p.mean == 1.0 for p in oracle.points if p.step < 1.0)
    for curve in profile.curves:
        assert all(p.lower <= p.mean + 1e-9 and p.mean <= p.upper + 1e-9 for p in curve.points)


def test_a_scripted_row_normalises_where_no_oracle_exists_and_says_so(committed, shipped):
    report = build_model(committed, shipped, built=BUILT)
    (iris,) = report.section("env-DataSciCoding-iris-v0").tables()
    assert "the scripted row 1 (a scripted solution, not an upper bound" in iris.caption
    assert iris.row("scripted").kind == "anchor"
    assert iris.row("scripted").cells[iris.header.index("normalised")] == "1.000"
    (salad,) = report.section("env-Overcooked-TomatoSalad-v0").tables()
    assert "the oracle row 1" in salad.caption and "scripted" not in salad.caption
    (comparison,) = report.section("pairwise").tables()
    assert not [r for r in comparison.rows if r.cells[1] in ("scripted", "oracle", "random")]


def _mean(records, record_id):
    return next(r for r in records if r["record_id"] == record_id)["scores"]["mean"]


@pytest.mark.parametrize("task", ["TomatoSalad", "TomatoLettuceSalad"])
def test_a_row_is_normalised_by_the_anchors_of_its_own_env_kwargs(committed, shipped, task):
    """The LLM rows ran with ``max_episode_steps=30``: the capped anchors normalise them, the
    uncapped anchors only the uncapped rows (the oracle's return depends on the cap)."""
    env = f"Overcooked-{task}-v0"
    report = build_model(committed, shipped, built=BUILT)
    (table,) = report.section(f"env-{env}").tables()
    column = table.header.index("normalised")
    poad = _mean(committed, f"{env}__poad__smollm2-135m")
    random30 = _mean(committed, f"{env}__random__steps30")
    oracle30 = _mean(committed, f"{env}__oracle__steps30")
    by_hand = (poad - random30) / (oracle30 - random30)
    # the fair study's Tomato-Lettuce Salad rows are exploratory: their label says so
    (label,) = [r.cells[0] for r in table.rows if r.cells[0].startswith("poad (smollm2-135m)")]
    assert table.row(label).cells[column] == f"{by_hand:.3f}"
    uncapped = (poad - _mean(committed, f"{env}__random")) / (
        _mean(committed, f"{env}__oracle") - _mean(committed, f"{env}__random")
    )
    assert f"{uncapped:.3f}" != f"{by_hand:.3f}"  # the two anchor pairs disagree here
    # each anchor row is 0 or 1 under its own kwargs, and the label names the capped ones
    for label, value in (
        ("oracle", "1.000"),
        ("random", "0.000"),
        ("oracle [max_episode_steps=30]", "1.000"),
        ("random [max_episode_steps=30]", "0.000"),
    ):
        assert table.row(label).cells[column] == value, label
    # an uncapped row is normalised by the uncapped anchors
    row = copy.deepcopy(
        next(r for r in committed if r["record_id"] == f"{env}__poad__smollm2-135m")
    )
    row["record_id"] += "__uncapped"
    row["agent"]["name"] = "poad-uncapped"
    row["config"]["env_kwargs"] = {}
    report = build_model([*committed, row], shipped, built=BUILT)
    (table,) = report.section(f"env-{env}").tables()
    (label,) = [r.cells[0] for r in table.rows if r.cells[0].startswith("poad-uncapped (")]
    assert table.row(label).cells[column] == f"{uncapped:.3f}"


def test_a_row_without_anchors_of_its_env_kwargs_is_not_normalised(committed, shipped):
    env = "Overcooked-TomatoSalad-v0"
    row = copy.deepcopy(
        next(r for r in committed if r["record_id"] == f"{env}__poad__smollm2-135m")
    )
    row["record_id"] += "__steps20"
    row["agent"]["name"] = "poad-20"
    row["config"]["env_kwargs"] = {"max_episode_steps": 20}
    report = build_model([*committed, row], shipped, built=BUILT)
    (table,) = report.section(f"env-{env}").tables()
    assert table.row("poad-20 (smollm2-135m)").cells[table.header.index("normalised")] == "--"
    assert "no normalised score ('--') for rows with max_episode_steps=20" in table.caption
    assert "anchors on this env: oracle (no env kwargs), oracle (max_episode_steps=30)" in (
        table.caption
    )
    # the sandbox a DataSciCoding row ran in does not keep it from its anchors (a trained row
    # of the earlier study, retired to the history beside the store)
    retired = history_path(
        RESULTS / "DataSciCoding-iris-v0__poad__smollm2-135m.json", "smollm2-cpu"
    )
    dsc = json.loads(retired.read_text(encoding="utf-8"))
    assert dsc["config"]["env_kwargs"].get("sandbox")
    report = build_model([*committed, dsc], shipped, built=BUILT)
    (iris,) = report.section("env-DataSciCoding-iris-v0").tables()
    # (no program it wrote ran: the row sits at random's mean and is flagged "[below random]")
    (label,) = [r.cells[0] for r in iris.rows if r.cells[0].startswith("poad (smollm2-135m)")]
    assert iris.row(label).cells[iris.header.index("normalised")] == "0.000"
