"""The sections of the report laid out like the paper's tables.

* generalisation in the layout of the paper's Table 1 [``generalization``]: discounted return
  (our records' per-seed discounted return; the undiscounted return, marked "(undiscounted)",
  for a record that logs none) and success rate per task, tasks as columns, our rows beside the
  paper's labelled rows;
* DataSciCoding in the layout of the paper's Table 4 [``datascicoding``]: ROC AUC, datasets as
  rows, our columns beside the paper's labelled columns;
* the paper's other tables [``paper-tables``]: dataset sizes (Appendix E.1), wall time
  (Table 5), language ability (Table 2) and any published number no layout places.

Paper numbers are only ever in rows or columns of kind ``"paper"``, labelled "(paper, Table N)";
they never enter a mean of ours. The task layout comes from the env facts
(:func:`agentbench_poad.paper_layout`) and ``paper_results.json`` (``layouts``), never from
literals here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from agentbench_poad.leaderboard.report.blocks import Paragraph, Row, Section, Table
from agentbench_poad.leaderboard.report.common import (
    Inputs,
    agent_label,
    discounted,
    facts,
    fmt,
    hours,
    n_seeds,
    paper_label,
    pm,
    published,
)
from agentbench_poad.leaderboard.report.paper import layout_tasks


def missing_layout(name: str, what: str, anchor: str) -> Section:
    return Section(
        what,
        anchor,
        (
            Paragraph(
                f"paper_results.json has no {name!r} layout, so this table cannot be laid out; add the "
                "layout (its tasks and methods) to that file."
            ),
        ),
    )


def generalisation_section(inputs: Inputs) -> Section:
    name, heading, anchor = (
        "table1",
        "Generalisation (layout of the paper's Table 1)",
        "generalization",
    )
    layout = inputs.paper.layouts.get(name)
    if layout is None:
        return missing_layout(name, heading, anchor)
    columns = [
        (env_id, f"{label} (training task)" if env_id == layout.get("trained_on") else label)
        for env_id, label in layout_tasks(layout)
    ]
    header = ("agent", *(label for _, label in columns))

    ours_return: dict[str, dict[str, str]] = defaultdict(dict)
    ours_success: dict[str, dict[str, str]] = defaultdict(dict)
    undiscounted = False
    gammas: set[float | None] = set()
    source = layout.get("trained_on")
    for env_id, _ in columns:
        for r in inputs.by_env.get(env_id, []):
            # a model trained on the source task, scored there: the same row as its scores on
            # the unseen tasks (which carry the "[trained on ...]" label)
            on_source = env_id == source and (r.get("training") or {}).get("env_id") == source
            label, sc = agent_label(r, source=on_source), r["scores"]
            # the discounted return when the record logs it for every seed; else, marked, the
            # undiscounted return (records made before episodes logged a discounted return)
            n = n_seeds(r)
            disc = discounted(r)
            if disc is not None:
                gammas.add(r["protocol"].get("discount"))
                ours_return[label][env_id] = pm(*disc, n)
            else:
                undiscounted = True
                ours_return[label][env_id] = f"{pm(sc['mean'], sc['stderr'], n)} (undiscounted)"
            ours_success[label][env_id] = pm(sc["success_rate"], sc["success_rate_stderr"], n)

    def table(metric: str, ours: dict[str, dict[str, str]], caption: str, css: str) -> Table:
        rows = [
            Row((label, *(cells.get(env_id, "--") for env_id, _ in columns)))
            for label, cells in sorted(ours.items())
        ]
        if not rows:
            rows.append(Row(("(no records of ours on these tasks yet)", *("--" for _ in columns))))
        for method in inputs.methods(name):
            cells = []
            for env_id, _ in columns:
                item = inputs.published(name, env_id, method["agent"], metric)
                cells.append(published(item) if item else "--")
            if any(c != "--" for c in cells):
                rows.append(Row((f"{method['label']} (paper, {layout['table']})", *cells), "paper"))
        return Table(caption, header, tuple(rows), css=css)

    note = (
        " Cells marked (undiscounted) hold our records' undiscounted episodic return, which "
        "is not the paper's discounted return: compare their success rates, not these "
        "numbers."
        if undiscounted
        else ""
    )
    stated = sorted(f"{g:g}" for g in gammas if g is not None)
    ours = (
        "Ours: mean ± s.e. over seeds of the discounted return Σ_t γ^t r_t over decisions"
        + (f" (γ = {', '.join(stated)}, the records' protocol.discount)" if stated else "")
        + "."
        if gammas
        else "Ours: mean ± s.e. over seeds."
    )
    return_table = table(
        "discounted_return",
        ours_return,
        f"Discounted episodic return per task. {ours} Paper rows: "
        f"{layout['table']}, as published.{note}",
        "generalization-table generalization-return",
    )
    success_table = table(
        "success_rate",
        ours_success,
        f"Success rate per task (success = return > 0, the protocol of the paper's "
        f"{layout['table']}: sampled actions, 100 episodes per seed). Ours: mean ± s.e. "
        f"over seeds. Paper rows: {layout['table']}, as published.",
        "generalization-table generalization-success",
    )
    intro = Paragraph(
        f"{layout['title']}. {layout.get('description', '')} Columns are the "
        f"tasks of the paper's {layout['env_facts_table']} (from the env facts) "
        "in its order; paper rows are labelled "
        "'(paper, ...)' and set in italics."
    )
    return Section(heading, anchor, (intro, return_table, success_table))


def datascicoding_section(env_ids: Sequence[str], inputs: Inputs) -> Section:
    name, heading, anchor = (
        "table4",
        "DataSciCoding (layout of the paper's Table 4)",
        "datascicoding",
    )
    layout = inputs.paper.layouts.get(name)
    if layout is None:
        return missing_layout(name, heading, anchor)
    tasks = layout_tasks(layout)
    listed = {env_id for env_id, _ in tasks}
    family = {facts(e, inputs.records)[0] for e in listed}
    tasks += [
        (e, facts(e, inputs.records)[1])
        for e in env_ids
        if e not in listed and facts(e, inputs.records)[0] in family
    ]

    columns: list[str] = []
    cells: dict[str, dict[str, str]] = defaultdict(dict)
    for env_id, _ in tasks:
        for r in inputs.by_env.get(env_id, []):
            col = agent_label(r)
            columns.append(col)
            cells[env_id][col] = pm(r["scores"]["mean"], r["scores"]["stderr"], n_seeds(r))
            best = (r.get("training") or {}).get("best_code")
            if best:
                bcol = f"{col}: best code during training"
                columns.append(bcol)
                cells[env_id][bcol] = fmt(best["reward"])
    columns = list(dict.fromkeys(columns))
    paper_columns: list[str] = []
    for method in inputs.methods(name):
        col = f"{method['label']} (paper, {layout['table']})"
        for env_id, _ in tasks:
            for metric in layout.get("metrics") or ("final_auc", "best_code_auc"):
                item = inputs.published(name, env_id, method["agent"], metric)
                if item:
                    cells[env_id][col] = published(item)
        if any(col in cells[e] for e, _ in tasks):
            paper_columns.append(col)
    header = ("dataset", *columns, *paper_columns)
    rows = tuple(
        Row((label, *(cells[env_id].get(c, "--") for c in header[1:])))
        for env_id, label in tasks
        if cells.get(env_id) or env_id in listed
    )
    table = Table(
        "ROC AUC per dataset. Ours: final-code AUC, mean ± s.e. over seeds (a run whose "
        "attempts all failed scores 0); a 'best code during training' column is the best reward "
        "seen while training, labelled as such, not the final policy. Paper columns: "
        f"{layout['table']}, as published.",
        header,
        rows,
        css="dsc-table",
        column_kinds=("", *("" for _ in columns), *("paper" for _ in paper_columns)),
    )
    intro = Paragraph(
        f"{layout['title']}. {layout.get('description', '')} Rows are the "
        f"datasets of the paper's {layout['env_facts_table']} (from the env facts), "
        "then any other dataset of the family we scored; paper "
        "columns are labelled '(paper, ...)' and set in italics."
    )
    return Section(heading, anchor, (intro, table))


def paper_tables_section(inputs: Inputs) -> Section:
    paper = inputs.paper
    blocks: list[Any] = []
    if paper.datasets:
        blocks.append(
            Table(
                "Dataset sizes after CAAFE's pruning (paper, Appendix E.1)",
                ("dataset", "env id", "features", "samples", "classes", "source"),
                tuple(
                    Row(
                        (
                            d["label"],
                            d["env_id"],
                            str(d["features"]),
                            str(d["samples"]),
                            str(d["classes"]),
                            d["source"]["where"],
                        ),
                        "paper",
                    )
                    for d in paper.datasets
                ),
                css="paper-datasets",
            )
        )
    if paper.wall_time:
        blocks.append(
            Table(
                "Wall time of POAD training on DataSciCoding (paper, Table 5 / Appendix G)",
                ("env id", "agent", "wall time", "env steps", "hardware", "base model", "source"),
                tuple(
                    Row(
                        (
                            w["env_id"],
                            w["agent"],
                            hours(w["wall_time_s"]),
                            str(w.get("env_steps") or "--"),
                            w.get("hardware") or "--",
                            w.get("base_model") or "--",
                            w["source"]["where"],
                        ),
                        "paper",
                    )
                    for w in paper.wall_time
                ),
                css="paper-wall-time",
            )
        )
    if paper.language_ability:
        benches = list(dict.fromkeys(x["benchmark"] for x in paper.language_ability))
        models = list(dict.fromkeys(x["model"] for x in paper.language_ability))
        value = {(x["model"], x["benchmark"]): str(x["value"]) for x in paper.language_ability}
        table = paper.language_ability[0].get("table", "Table 2")
        blocks.append(
            Table(
                f"Zero-shot language ability after RL fine-tuning on Food Preparation (paper, "
                f"{table})",
                ("model", *benches),
                tuple(
                    Row((f"{m} (paper)", *(value.get((m, b), "--") for b in benches)), "paper")
                    for m in models
                ),
                css="paper-language",
            )
        )
    if inputs.unplaced:
        blocks.append(
            Table(
                "Published numbers that no layout of paper_results.json places",
                ("env id", "agent", "metric", "value", "source"),
                tuple(
                    Row(
                        (
                            p["env_id"],
                            paper_label(p),
                            p["metric"],
                            published(p),
                            p["source"]["where"],
                        ),
                        "paper",
                    )
                    for p in inputs.unplaced
                ),
                css="paper-other",
            )
        )
    if not blocks:
        blocks.append(Paragraph("paper_results.json lists none of the paper's other tables."))
    return Section("Other tables of the paper", "paper-tables", tuple(blocks))
