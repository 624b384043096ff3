"""The tables of docs/results.md, generated from the records (``leaderboard results-tables``).

docs/results.md keeps its prose by hand; each table that states numbers of the records sits
between two HTML comments::

    <!-- results-tables: NAME -->
    ...generated table...
    <!-- /results-tables: NAME -->

and ``agentbench-poad leaderboard results-tables --write docs/results.md`` replaces the text
between them with :func:`tables` ``[NAME]``; ``--check`` exits 1 when the file differs from what
the records give (a test runs it on the committed file). So a table cannot drift from the
records, and a verdict word in the comparison table follows its CI (:func:`.stats.verdict`).

Tables (NAME): per env, the rows of our records (``env:<env id>``) and the learning curves
(``curves:<env id>``); the paper's Table 1 layout with our rows, per seed for trained agents
(``table1``); the comparison with POAD with its verdict words (``comparison``); credit
assignment pair by pair, e.g. GiGPO against POAD, with the same statistics (``credit``); the
KL guard's policy steps taken and skipped per trained record (``guard``); a study's tuning
from its runs (``tuning:SPEC:OUT``, paths relative to the repository root).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentbench_poad.leaderboard.records import mean_stderr
from agentbench_poad.leaderboard.report.common import (
    REFERENCE_AGENT,
    Inputs,
    agent_label,
    is_anchor,
    n_seeds,
    pm,
    published,
    seed_discounted_returns,
    seed_scores,
)
from agentbench_poad.leaderboard.report.comparison import (
    budget_difference,
    compare,
    iqm_cell,
    reference_record,
)
from agentbench_poad.leaderboard.report.paper import PaperResults, as_paper, layout_tasks
from agentbench_poad.leaderboard.report.stats import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    Estimate,
    iqm_estimate,
    verdict,
)

MARKER = re.compile(
    r"(<!-- results-tables: (?P<name>[^ ]+) -->\n)(?P<body>.*?)(<!-- /results-tables: (?P=name) -->)",
    re.S,
)
#: Most step columns a learning-curve table shows (evenly spaced, the last always in).
CURVE_COLUMNS = 7


def _md(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(header), "|" + "---|" * len(header), *(line(r) for r in rows)])


def _int(n: float) -> str:
    return f"{int(n):,}"


def _seeds(seeds: Sequence[int]) -> str:
    seeds = list(seeds)
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    if seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"seeds {seeds[0]}–{seeds[-1]}"
    return "seeds " + ", ".join(map(str, seeds))


def _protocol(record: dict[str, Any]) -> str:
    p = record["protocol"]
    how = {True: "greedy, ", False: "sampled, "}.get(p.get("greedy"), "")
    return f"{how}{_seeds(p['seeds'])} × {p['episodes_per_seed']} episodes"


def row_name(record: dict[str, Any]) -> str:
    """The agent's board label and, for a trained agent, its training budget."""
    steps = (record.get("training") or {}).get("total_steps")
    return agent_label(record) + (f", {_int(steps)} steps" if steps else "")


def _ordered(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our agents by mean score (highest first), then the anchors."""
    return sorted(records, key=lambda r: (is_anchor(r), -r["scores"]["mean"], r["record_id"]))


def _mean_cell(record: dict[str, Any]) -> str:
    sc, n = record["scores"], n_seeds(record)
    text = pm(sc["mean"], sc["stderr"], n)
    if 1 < n <= 5:
        text += " (" + ", ".join(f"{v:.3f}" for v in seed_scores(record)) + ")"
    return text


def _success_cell(record: dict[str, Any]) -> str:
    per_seed = [s["success_rate"] for s in record["scores"]["per_seed"]]
    text = f"{100 * record['scores']['success_rate']:.0f} %"
    if 1 < len(per_seed) <= 5 and len(set(per_seed)) > 1:
        text += " (" + ", ".join(f"{100 * v:.0f}" for v in per_seed) + ")"
    return text


def env_table(env_id: str, inputs: Inputs) -> str:
    """Our records on ``env_id``: name, record, protocol, mean ± s.e. over seeds, success."""
    recs = _ordered(inputs.by_env.get(env_id, []))
    metric = recs[0]["scores"]["metric"] if recs else "return"
    score = "final AUC" if metric == "final_auc" else "mean return"
    return _md(
        ("row", "record", "protocol", f"{score} (s.e. over seeds; per seed)", "success (per seed)"),
        [
            (row_name(r), f"`{r['record_id']}`", _protocol(r), _mean_cell(r), _success_cell(r))
            for r in recs
        ],
    )


def curves_table(env_id: str, inputs: Inputs) -> str:
    """Mean ± s.e. over seeds of each record's learning curve at up to :data:`CURVE_COLUMNS`
    steps (the band is mean ± s.e., so s.e. is half its width)."""
    recs = [
        r
        for r in _ordered(inputs.by_env.get(env_id, []))
        if r.get("learning_curve") and r["learning_curve"]["points"]
    ]
    steps = sorted({p["step"] for r in recs for p in r["learning_curve"]["points"]})
    if len(steps) > CURVE_COLUMNS:
        stride = -(-len(steps) // CURVE_COLUMNS)
        steps = sorted(set(steps[::-1][::stride]))
    rows = []
    for r in recs:
        points = {p["step"]: p for p in r["learning_curve"]["points"]}
        cells = []
        for step in steps:
            p = points.get(step)
            if p is None:
                cells.append("--")
            elif p.get("low") is None or p.get("high") is None:
                cells.append(f"{p['mean']:.2f}")
            else:
                cells.append(f"{p['mean']:.2f} ± {(p['high'] - p['low']) / 2:.2f}")
        rows.append((row_name(r), *cells))
    return _md(("agent", *(_int(s) for s in steps)), rows)


def _cell(discounted: float | None, success: float) -> str:
    return f"{'--' if discounted is None else f'{discounted:.4f}'} ({success:.3f})"


def table1(inputs: Inputs) -> str:
    """The paper's Table 1 layout: discounted return (success rate) per task, our rows (and,
    for trained agents, one row per seed) above the paper's."""
    layout = inputs.paper.layouts.get("table1")
    if layout is None:
        return "(paper_results.json has no table1 layout)"
    tasks = layout_tasks(layout)
    trained_on = layout.get("trained_on")
    groups: dict[str, dict[str, dict[str, Any]]] = {}
    for env_id, _ in tasks:
        for r in inputs.by_env.get(env_id, []):
            name = r["agent"]["name"]
            base = r["model"].get("base")
            source = (r.get("training") or {}).get("env_id")
            label = f"{name}" + (f" ({base})" if base else "")
            label += ", trained on Food Prep." if source == trained_on and source else ""
            groups.setdefault(label, {})[env_id] = r
    rows: list[tuple[str, ...]] = []
    order = sorted(groups, key=lambda k: (is_anchor(next(iter(groups[k].values()))), k))
    for label in order:
        by_task = groups[label]
        cells = []
        for env_id, _ in tasks:
            r = by_task.get(env_id)
            if r is None:
                cells.append("--")
                continue
            disc = seed_discounted_returns(r)
            mean = None if disc is None else mean_stderr(disc)[0]
            cells.append(_cell(mean, r["scores"]["success_rate"]))
        rows.append((f"{label} (ours)", *cells))
        any_record = next(iter(by_task.values()))
        if (any_record.get("training") or {}).get("env_id") and n_seeds(any_record) > 1:
            for i, seed in enumerate(any_record["protocol"]["seeds"]):
                seed_cells = []
                for env_id, _ in tasks:
                    r = by_task.get(env_id)
                    if r is None or i >= n_seeds(r):
                        seed_cells.append("--")
                        continue
                    disc = seed_discounted_returns(r)
                    seed_cells.append(
                        _cell(
                            None if disc is None else disc[i],
                            r["scores"]["per_seed"][i]["success_rate"],
                        )
                    )
                rows.append((f"{label}, seed {seed} alone (ours)", *seed_cells))
    for method in inputs.methods("table1"):
        cells = []
        for env_id, _ in tasks:
            d = inputs.published("table1", env_id, method["agent"], "discounted_return")
            s = inputs.published("table1", env_id, method["agent"], "success_rate")
            cells.append(
                f"{published(d) if d else '--'} ({published(s) if s else '--'})"
                if d or s
                else "not in our extraction"
            )
        rows.append((f"{method['label']} (paper)", *cells))
    header = (
        "row",
        *(f"{label} (training task)" if e == trained_on else label for e, label in tasks),
    )
    return _md(header, rows)


def _difference_cell(diff: Estimate) -> str:
    ci = f"(n = {diff.runs}: no CI)" if diff.low is None else f"[{diff.low:+.3f}, {diff.high:+.3f}]"
    return f"{diff.point:+.3f} {ci}"


def _improvement_cell(poi: Estimate) -> str:
    ci = f"(n = {poi.runs}: no CI)" if poi.low is None else f"[{poi.low:.2f}, {poi.high:.2f}]"
    return f"{poi.point:.2f} {ci}"


def comparison_table(inputs: Inputs, env_ids: Sequence[str] | None = None) -> str:
    """Each agent against POAD per env: IQM over seeds with its 95 % CI, difference of IQMs and
    P(agent > POAD) with their CIs, and the verdict those CIs allow; an agent not evaluated or
    trained like POAD (:func:`.comparison.budget_difference`) gets its IQM and the reason, no
    verdict."""
    rows = []
    for env_id in env_ids or sorted(inputs.by_env):
        recs = inputs.by_env.get(env_id, [])
        ref = reference_record(recs)
        if ref is None:
            continue
        for r in sorted((r for r in recs if r is not ref and not is_anchor(r)), key=agent_label):
            apart = budget_difference(r, ref)
            if apart is not None:
                rows.append(
                    (
                        env_id,
                        agent_label(r),
                        iqm_cell(iqm_estimate(seed_scores(r))),
                        iqm_cell(iqm_estimate(seed_scores(ref))),
                        "--",
                        "--",
                        f"not compared: {apart}",
                    )
                )
                continue
            diff, poi = compare(r, ref)
            rows.append(
                (
                    env_id,
                    agent_label(r),
                    f"{iqm_cell(iqm_estimate(seed_scores(r)))}",
                    iqm_cell(iqm_estimate(seed_scores(ref))),
                    _difference_cell(diff),
                    _improvement_cell(poi),
                    verdict(diff, higher="agent higher", lower="POAD higher"),
                )
            )
    return _md(
        (
            "env",
            "agent",
            "agent IQM [95% CI]",
            f"{REFERENCE_AGENT.upper()} IQM [95% CI]",
            "IQM difference [95% CI]",
            f"P(agent > {REFERENCE_AGENT.upper()}) [95% CI]",
            "verdict",
        ),
        rows,
    )


#: The pairs of the credit-assignment table, (A, B): step-level group credit (GiGPO) and
#: episode-level group credit (GRPO) against the token-level critic (POAD); what GiGPO's
#: step-level term adds to GRPO; no discount inside an action (POAD) against a discount per
#: token (NTPO); a critic per token (POAD) against a critic per action (TWOSOME).
CREDIT_PAIRS: tuple[tuple[str, str], ...] = (
    ("gigpo", "poad"),
    ("grpo", "poad"),
    ("gigpo", "grpo"),
    ("poad", "ntpo"),
    ("poad", "twosome"),
)


def credit_table(inputs: Inputs) -> str:
    """Credit assignment, pair by pair (:data:`CREDIT_PAIRS`): per env, where both agents have
    a record of the same base model and training env, the difference of IQMs A − B and
    P(A > B) with their 95 % CIs and the verdict those CIs allow. Records that were not
    evaluated or trained alike (:func:`.comparison.budget_difference`) are named, not
    compared."""
    rows = []
    for env_id in sorted(inputs.by_env):
        groups: dict[tuple[Any, Any], dict[str, dict[str, Any]]] = {}
        for r in inputs.by_env[env_id]:
            if is_anchor(r):
                continue
            key = (r["model"].get("base"), (r.get("training") or {}).get("env_id"))
            groups.setdefault(key, {})[r["agent"]["name"].lower()] = r
        for key in sorted(groups, key=lambda k: tuple(str(x) for x in k)):
            by_agent = groups[key]
            for a_name, b_name in CREDIT_PAIRS:
                a, b = by_agent.get(a_name), by_agent.get(b_name)
                if a is None or b is None:
                    continue
                where = agent_label(a)[len(a["agent"]["name"]) :].strip()
                pair = f"{a_name.upper()} − {b_name.upper()}" + (f" {where}" if where else "")
                apart = budget_difference(a, b)
                if apart is not None:
                    rows.append((env_id, pair, "--", "--", "--", "--", f"not compared: {apart}"))
                    continue
                diff, poi = compare(a, b)
                rows.append(
                    (
                        env_id,
                        pair,
                        iqm_cell(iqm_estimate(seed_scores(a))),
                        iqm_cell(iqm_estimate(seed_scores(b))),
                        _difference_cell(diff),
                        _improvement_cell(poi),
                        verdict(
                            diff,
                            higher=f"{a_name.upper()} higher",
                            lower=f"{b_name.upper()} higher",
                        ),
                    )
                )
    if not rows:
        return "(no env has records of both agents of any pair yet)"
    return _md(
        (
            "env",
            "A − B",
            "A IQM [95% CI]",
            "B IQM [95% CI]",
            "IQM difference A − B [95% CI]",
            "P(A > B) [95% CI]",
            "verdict",
        ),
        rows,
    )


def _config_text(record: dict[str, Any]) -> str:
    chosen = ((record.get("training") or {}).get("config_source") or {}).get("chosen")
    if not chosen:
        return "--"
    return _chosen_text(chosen)


def guard_table(inputs: Inputs) -> str:
    """The shared KL guard per trained record: the configuration its study chose, and the
    policy steps PPO took and the guard skipped, summed over the record's training runs
    (docs/agents.md, "One KL guard"). Records that do not count them are left out."""
    rows = []
    for env_id in sorted(inputs.by_env):
        for r in sorted(inputs.by_env[env_id], key=agent_label):
            t = r.get("training") or {}
            taken, skipped = t.get("policy_steps_taken"), t.get("policy_steps_skipped")
            if taken is None or skipped is None:
                continue
            share = "--" if taken + skipped == 0 else f"{100 * skipped / (taken + skipped):.1f} %"
            rows.append(
                (env_id, agent_label(r), _config_text(r), _int(taken), _int(skipped), share)
            )
    if not rows:
        return "(no record counts the KL guard's policy steps yet)"
    return _md(
        ("env", "agent", "chosen configuration", "policy steps taken", "skipped", "share skipped"),
        rows,
    )


def _chosen_text(chosen: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(chosen.items()))


def tuning_table(spec: Path, out: Path) -> str:
    """A study's tuning from its committed runs: per agent and configuration, the selection
    rule's score of each tuning seed's run and their mean, the policy steps the KL guard skipped
    over those runs, and which configuration the spec chose (``[tuning.chosen]``). A run not
    finished yet shows "--" and adds no policy steps."""
    from agentbench_poad.leaderboard.from_run import read_policy_steps
    from agentbench_poad.study import load_study
    from agentbench_poad.study.run import tuning_run_done
    from agentbench_poad.study.tuning import run_scores

    study = load_study(spec, out=out)
    tuning = study.tuning
    if tuning is None:
        raise ValueError(f"docs: {spec} has no [tuning] table")
    scores, _ = run_scores(tuning, study.out, is_done=tuning_run_done(study))
    seeds = sorted(tuning.seeds)
    rows = []
    for agent, search in tuning.searches.items():
        for index, configuration in enumerate(search.configurations):
            got = [scores.get((agent, index, seed)) for seed in search.seeds]
            taken = skipped = 0
            for seed in search.seeds:
                if (agent, index, seed) not in scores:  # not finished: no count yet
                    continue
                counts = read_policy_steps(tuning.run_dir(study.out, agent, index, seed))
                taken += counts["policy_steps_taken"] or 0
                skipped += counts["policy_steps_skipped"] or 0
            done = [g for g in got if g is not None]
            rows.append(
                (
                    agent,
                    f"config{index}: {_chosen_text(configuration)}",
                    *("--" if g is None else f"{g:.3f}" for g in got),
                    f"{sum(done) / len(done):.3f}" if len(done) == len(got) else "--",
                    f"{_int(skipped)} of {_int(taken + skipped)}" if taken + skipped else "--",
                    "**chosen**" if tuning.chosen.get(agent) == configuration else "",
                )
            )
    return _md(
        (
            "agent",
            "configuration",
            *(f"seed {s}" for s in seeds),
            "mean",
            "policy steps skipped",
            "[tuning.chosen]",
        ),
        rows,
    )


def tables(
    records: Sequence[dict[str, Any]], paper: PaperResults | None = None
) -> dict[str, Callable[[], str]]:
    """Every table :func:`write` can fill, by name (computed when called)."""
    from agentbench_poad.core import display_safe

    inputs = Inputs(display_safe(list(records)), as_paper(paper))
    found: dict[str, Callable[[], str]] = {
        "table1": lambda: table1(inputs),
        "comparison": lambda: comparison_table(inputs),
        "credit": lambda: credit_table(inputs),
        "guard": lambda: guard_table(inputs),
    }
    for env_id in sorted(inputs.by_env):
        found[f"env:{env_id}"] = lambda e=env_id: env_table(e, inputs)
        if any(r.get("learning_curve") for r in inputs.by_env[env_id]):
            found[f"curves:{env_id}"] = lambda e=env_id: curves_table(e, inputs)
    return found


def fill(
    text: str,
    records: Sequence[dict[str, Any]],
    paper: PaperResults | None = None,
    root: Path | None = None,
) -> str:
    """``text`` with every marked region replaced by its generated table.

    A region ``tuning:SPEC:OUT`` is a study's tuning table (:func:`tuning_table`), SPEC and OUT
    relative to ``root`` (default: the current directory).

    Raises:
        ValueError: a region names a table the records cannot give.
    """
    available = tables(records, paper)

    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        if name.startswith("tuning:") and name.count(":") == 2:
            _, spec, out = name.split(":")
            base = Path.cwd() if root is None else Path(root)
            return f"{match.group(1)}{tuning_table(base / spec, base / out)}\n{match.group(4)}"
        if name not in available:
            raise ValueError(
                f"docs: a results-tables region names {name!r}, which the records do not give; "
                f"known: {', '.join(sorted(available))}"
            )
        return f"{match.group(1)}{available[name]()}\n{match.group(4)}"

    return MARKER.sub(replace, text)


def add_parser(sub: Any) -> None:
    """``leaderboard results-tables``: the hook ``cli/leaderboard.py`` calls."""
    t = sub.add_parser(
        "results-tables",
        help="regenerate the marked tables of docs/results.md from the records",
        description=__doc__.split("\n\n")[0],
    )
    t.add_argument("file", nargs="?", default="docs/results.md", help="the Markdown file")
    mode = t.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the file in place")
    mode.add_argument(
        "--check", action="store_true", help="exit 1 if the file differs from the records"
    )
    t.add_argument("--paper", help="paper_results.json to use (default: the shipped one)")
    t.add_argument("--store", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    t.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agentbench_poad.leaderboard.records import load_records
    from agentbench_poad.leaderboard.report.paper import load_paper

    records = load_records(getattr(args, "store", None))
    path = Path(args.file)
    if not path.exists():
        print(f"{path}: no such file; pass the Markdown file to fill", file=sys.stderr)
        return 2
    text = path.read_text(encoding="utf-8")
    if not MARKER.search(text):
        print(
            f"{path}: no `<!-- results-tables: NAME -->` region; add one where a table goes",
            file=sys.stderr,
        )
        return 2
    try:
        new = fill(text, records, load_paper(args.paper))
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if args.write:
        if new != text:
            path.write_text(new, encoding="utf-8")
        print(f"wrote {path}" if new != text else f"{path} is up to date")
        return 0
    if args.check:
        if new != text:
            print(
                f"{path}: its tables differ from the records; run `agentbench-poad leaderboard "
                f"results-tables --write {path}`",
                file=sys.stderr,
            )
            return 1
        print(f"{path} matches the records")
        return 0
    sys.stdout.write(new)
    return 0


__all__ = ["BOOTSTRAP_RESAMPLES", "BOOTSTRAP_SEED", "CREDIT_PAIRS", "MARKER", "fill", "tables"]
