"""The tables of the results pages, generated from the records (``leaderboard results-tables``).

The results pages (:data:`PAGES`: docs/results.md and one page per study under docs/results/)
keep their prose by hand; each table that states numbers of the records sits between two HTML
comments::

    <!-- results-tables: NAME -->
    ...generated table...
    <!-- /results-tables: NAME -->

and ``agentbench-poad leaderboard results-tables --write`` replaces the text between them with
:func:`tables` ``[NAME]`` on every page (or on the pages it is given); ``--check`` exits 1 when
a page differs from what the records give (a test runs it on the committed pages). So a table
cannot drift from the records, and a verdict word in the comparison table follows its CI
(:func:`.stats.verdict`).

Tables (NAME): per env, the rows of our records (``env:<env id>``) and the learning curves
(``curves:<env id>``); the paper's Table 1 layout with our rows, per seed for trained agents
(``table1``); the comparison with POAD with its verdict words (``comparison``); credit
assignment pair by pair, e.g. GiGPO against POAD, with the same statistics (``credit``); the
KL guard's policy steps taken and skipped per training (``guard``); a study's tuning
from its runs (``tuning:SPEC:OUT``, paths relative to the repository root); one agent's margin
over another env by env and where actions are long against where they are not
(``margins:A-B`` or ``margins:A-B:ENV,ENV``), and the best code found against a fixed baseline
(``best-code:BASELINE``), in :mod:`.long_actions`; a study's learning curves by runnable rate and
final AUC from its runs (``run-curves:SPEC:OUT:ENV``, :mod:`.run_curves`); learning speed per
env, each agent's normalised area under its runs' curves (``speed:<env id>``) and every pair's
comparison with its verdict (``speed-pairs:<env id>``), in :mod:`.speed`; what one study's
verdicts became in a later
study of the same pairs, from the board and its history together (``changes:BEFORE:AFTER``,
study names); the summary that opens docs/results.md, one row per comparison that tests a
claim of the paper (``summary``, :mod:`.summary`, the board and its history). Any record table
may name the studies whose records it shows (``NAME@STUDY`` or ``NAME@A,B``): a later study's
record that replaced one of theirs gives way to theirs again (:func:`as_study_left_it`). The record tables
live in :mod:`.record_tables`, the fair comparison's in :mod:`.fair_tables`; this module finds
the regions, fills them and is the command.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentbench_poad.core import display_safe
from agentbench_poad.leaderboard.report.common import Inputs
from agentbench_poad.leaderboard.report.fair_tables import (
    CREDIT_PAIRS,
    comparison_table,
    credit_table,
    guard_table,
    tuning_table,
    verdict_changes_table,
)
from agentbench_poad.leaderboard.report.long_actions import best_code_table, margin_table
from agentbench_poad.leaderboard.report.paper import PaperResults, as_paper
from agentbench_poad.leaderboard.report.record_tables import curves_table, env_table, table1
from agentbench_poad.leaderboard.report.run_curves import run_curves_table
from agentbench_poad.leaderboard.report.speed import speed_pairs_table, speed_table
from agentbench_poad.leaderboard.report.stats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED
from agentbench_poad.leaderboard.report.summary import summary_table

#: The results pages, relative to the repository root: the command's default.
PAGES = ("docs/results.md", "docs/results/*.md")

MARKER = re.compile(
    r"(<!-- results-tables: (?P<name>[^ ]+) -->\n)(?P<body>.*?)(<!-- /results-tables: (?P=name) -->)",
    re.S,
)


def tables(
    records: Sequence[dict[str, Any]], paper: PaperResults | None = None
) -> dict[str, Callable[[], str]]:
    """Every table :func:`write` can fill, by name (computed when called)."""
    return _tables(Inputs(display_safe(list(records)), as_paper(paper)))


def _tables(inputs: Inputs) -> dict[str, Callable[[], str]]:
    found: dict[str, Callable[[], str]] = {
        "table1": lambda: table1(inputs),
        "comparison": lambda: comparison_table(inputs),
        "credit": lambda: credit_table(inputs),
        "guard": lambda: guard_table(inputs),
    }
    for a, b in CREDIT_PAIRS:
        found[f"margins:{a}-{b}"] = lambda a=a, b=b: margin_table(inputs, a, b)
    for name in sorted(
        {
            r["agent"]["name"].lower()
            for r in inputs.records
            if r["env"].get("open_action") and not r.get("training")
        }
    ):
        found[f"best-code:{name}"] = lambda n=name: best_code_table(inputs, n)
    for env_id in sorted(inputs.by_env):
        found[f"env:{env_id}"] = lambda e=env_id: env_table(e, inputs)
        if any(r.get("learning_curve") for r in inputs.by_env[env_id]):
            found[f"curves:{env_id}"] = lambda e=env_id: curves_table(e, inputs)
            found[f"speed:{env_id}"] = lambda e=env_id: speed_table(inputs, e)
            found[f"speed-pairs:{env_id}"] = lambda e=env_id: speed_pairs_table(inputs, e)
    return found


def fill(
    text: str,
    records: Sequence[dict[str, Any]],
    paper: PaperResults | None = None,
    root: Path | None = None,
    history: Sequence[dict[str, Any]] = (),
) -> str:
    """``text`` with every marked region replaced by its generated table.

    A region ``tuning:SPEC:OUT`` (or ``tuning:SPEC:OUT:NAME``, one of several ``[[tuning]]``
    protocols) is a study's tuning table (:func:`tuning_table`), SPEC and OUT relative to
    ``root`` (default: the current directory); ``run-curves:SPEC:OUT:ENV`` reads the same
    study's evaluation runs on ENV (:func:`.run_curves.run_curves_table`). A region
    ``changes:BEFORE:AFTER`` reads the records and ``history`` (the records the board's history
    holds) together, and so does ``summary`` (:mod:`.summary`).

    ``NAME@STUDY`` is the table NAME over the board as study STUDY left it
    (:func:`as_study_left_it`): a later study's record that replaced one of STUDY's (and moved
    it to the history) gives way to STUDY's own again, so a study's page keeps showing the
    records it reasons about while the board moves on; ``NAME@A,B`` does so for each study.

    Raises:
        ValueError: a region names a table the records cannot give, or a study with no record.
    """

    def replace(match: re.Match[str]) -> str:
        name, _, studies = match.group("name").partition("@")
        board = list(records)
        for study in filter(None, studies.split(",")):
            board = as_study_left_it(board, history, study)
        return _fill_one(name, match, board, paper, root, history)

    return MARKER.sub(replace, text)


def as_study_left_it(
    records: Sequence[dict[str, Any]], history: Sequence[dict[str, Any]], study: str
) -> list[dict[str, Any]]:
    """The board's records with each one that replaced a record of ``study`` swapped back.

    A record of the history made by ``study`` (:func:`~agentbench_poad.leaderboard.records.
    record_study`) takes the place of the board's record of the same ``record_id``; every other
    record stays as it is.

    Raises:
        ValueError: neither the board nor the history holds a record of ``study``.
    """
    from agentbench_poad.leaderboard.records import record_study

    kept = {r["record_id"]: r for r in history if record_study(r) == study}
    if not kept and not any(record_study(r) == study for r in records):
        raise ValueError(
            f"docs: a results-tables region names study {study!r}, which made no record on the "
            "board or in its history (NAME@STUDY takes a record's config.study.study)"
        )
    return [kept.get(r.get("record_id"), r) for r in records]


def _fill_one(
    name: str,
    match: re.Match[str],
    records: Sequence[dict[str, Any]],
    paper: PaperResults | None,
    root: Path | None,
    history: Sequence[dict[str, Any]],
) -> str:
    """One region ``match`` filled with the table ``name`` of ``records``."""
    inputs = Inputs(display_safe(list(records)), as_paper(paper))
    available = _tables(inputs)

    def _margins(pair: str, env_ids: Sequence[str]) -> str:
        # Agent names may hold hyphens (archer-adrl): a credit pair's own spelling wins.
        known = {f"{a}-{b}": (a, b) for a, b in CREDIT_PAIRS}
        a, _, b = pair.partition("-")
        a, b = known.get(pair, (a, b))
        if not a or not b:
            raise ValueError(f"docs: a margins region names {pair!r}; write it margins:A-B[:ENVS]")
        unknown = [e for e in env_ids if e not in inputs.by_env]
        if unknown:
            raise ValueError(f"docs: a margins region names env(s) without records: {unknown}")
        return margin_table(inputs, a, b, env_ids)

    if name.startswith("tuning:") and name.count(":") in (2, 3):
        _, spec, out, *protocol = name.split(":")
        base = Path.cwd() if root is None else Path(root)
        table = tuning_table(base / spec, base / out, *protocol)
        return f"{match.group(1)}{table}\n{match.group(4)}"
    if name.startswith("run-curves:") and name.count(":") == 3:
        _, spec, out, env_id = name.split(":")
        base = Path.cwd() if root is None else Path(root)
        table = run_curves_table(base / spec, base / out, env_id)
        return f"{match.group(1)}{table}\n{match.group(4)}"
    if name.startswith("changes:") and name.count(":") == 2:
        _, before, after = name.split(":")
        every = [*inputs.records, *display_safe(list(history))]
        table = verdict_changes_table(every, before, after)
        return f"{match.group(1)}{table}\n{match.group(4)}"
    if name == "summary":
        table = summary_table(inputs.records, display_safe(list(history)))
        return f"{match.group(1)}{table}\n{match.group(4)}"
    if name.startswith("margins:") and name.count(":") == 2:
        _, pair, envs = name.split(":")
        return f"{match.group(1)}{_margins(pair, envs.split(','))}\n{match.group(4)}"
    if name not in available:
        raise ValueError(
            f"docs: a results-tables region names {name!r}, which the records do not give; "
            f"known: {', '.join(sorted(available))}"
        )
    return f"{match.group(1)}{available[name]()}\n{match.group(4)}"


def add_parser(sub: Any) -> None:
    """``leaderboard results-tables``: the hook ``cli/leaderboard.py`` calls."""
    t = sub.add_parser(
        "results-tables",
        help="regenerate the marked tables of the results pages from the records",
        description=__doc__.split("\n\n")[0],
    )
    t.add_argument(
        "files",
        nargs="*",
        metavar="file",
        help="Markdown pages to fill (default: docs/results.md and docs/results/*.md)",
    )
    mode = t.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the pages in place")
    mode.add_argument(
        "--check", action="store_true", help="exit 1 if a page differs from the records"
    )
    t.add_argument("--paper", help="paper_results.json to use (default: the shipped one)")
    t.add_argument("--store", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    t.set_defaults(func=run)


def pages(root: Path | None = None) -> list[Path]:
    """The results pages (:data:`PAGES`) under ``root`` (default: the current directory)."""
    base = Path.cwd() if root is None else Path(root)
    found: list[Path] = []
    for pattern in PAGES:
        found += sorted(base.glob(pattern))
    return found


def run(args: argparse.Namespace) -> int:
    from agentbench_poad.leaderboard.records import history_store, load_records
    from agentbench_poad.leaderboard.report.paper import load_paper

    store = getattr(args, "store", None)
    given = [Path(f) for f in args.files]
    paths = given or [p.relative_to(Path.cwd()) for p in pages()]
    if not paths:
        print(
            "no results page here (docs/results.md, docs/results/*.md); pass the Markdown "
            "file(s) to fill, or run from the repository root",
            file=sys.stderr,
        )
        return 2
    texts = {}
    for path in paths:
        if not path.exists():
            print(f"{path}: no such file; pass the Markdown file to fill", file=sys.stderr)
            return 2
        text = path.read_text(encoding="utf-8")
        if MARKER.search(text):
            texts[path] = text
        elif given:  # a page of prose alone is fine among the defaults, not when named
            print(
                f"{path}: no `<!-- results-tables: NAME -->` region; add one where a table goes",
                file=sys.stderr,
            )
            return 2
    records = load_records(store)
    needs_history = any(
        "results-tables: changes:" in t or "results-tables: summary -->" in t
        for t in texts.values()
    )
    history = load_records(history_store(store)) if needs_history else []
    paper = load_paper(args.paper)
    stale = []
    for path, text in texts.items():
        try:
            new = fill(text, records, paper, history=history)
        except ValueError as exc:
            print(f"{path}: {exc}", file=sys.stderr)
            return 2
        if args.write:
            if new != text:
                path.write_text(new, encoding="utf-8")
            print(f"wrote {path}" if new != text else f"{path} is up to date")
        elif args.check:
            if new != text:
                stale.append(path)
                print(
                    f"{path}: its tables differ from the records; run `agentbench-poad "
                    f"leaderboard results-tables --write {path}`",
                    file=sys.stderr,
                )
            else:
                print(f"{path} matches the records")
        else:
            sys.stdout.write(new)
    return 1 if stale else 0


__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "CREDIT_PAIRS",
    "MARKER",
    "PAGES",
    "fill",
    "pages",
    "tables",
]
