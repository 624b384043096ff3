"""The results pages (docs/results.md and docs/results/*.md, issue 61 item 5).

* every generated table on every page is what the records give today, and docs/results.md opens
  with the summary;
* the summary's rows follow the verdict rule and are the board's own tables' numbers (credit and
  speed-pairs), and its several-task row picks the smallest exact p (against a plain loop);
* the guard: every interval, mean ± s.e., IQM, mean and exact p that the prose of any page
  quotes (outside the generated tables, a quote broken across lines included) is in a generated
  table or a committed record, and editing one digit of any of them fails the guard;
* no prose claims a verdict the tables do not give; every link between the pages resolves;
* `leaderboard results-tables` checks and writes every page by default.
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import re
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbench_poad.cli import main
from agentbench_poad.leaderboard import add_record
from agentbench_poad.leaderboard.records import history_store, load_records
from agentbench_poad.leaderboard.report.results_tables import MARKER, fill, pages
from agentbench_poad.leaderboard.report.stats import MIN_VERDICT_SEEDS
from agentbench_poad.leaderboard.report.summary import UNSEEN, env_name, summary_rows

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "leaderboard" / "results"
SUMMARY_PAGE = ROOT / "docs" / "results.md"


# -- the pages and their generated tables -----------------------------------------------------
@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    """Every results page, by its path relative to the repository root."""
    found = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in pages(ROOT)}
    assert "docs/results.md" in found and len(found) >= 5  # the summary and the study pages
    return found


@pytest.fixture(scope="module")
def bodies(texts) -> dict[str, str]:
    """Every generated region of every page, by region name."""
    return {m.group("name"): m.group("body") for t in texts.values() for m in MARKER.finditer(t)}


def test_every_results_page_equals_its_generated_tables(texts):
    """What `leaderboard results-tables --check` runs: each page's marked tables are what the
    records (and the history, for the summary and the changes table) give today."""
    records = load_records(RESULTS)
    history = load_records(history_store(RESULTS))
    names = set()
    for path, text in texts.items():
        names |= {m.group("name") for m in MARKER.finditer(text)}
        regenerated = fill(text, records, root=ROOT, history=history)
        assert regenerated == text, (
            f"{path} differs from the records; run "
            f"`agentbench-poad leaderboard results-tables --write {path}`"
        )
    assert {
        "summary",
        "comparison",
        "credit",
        "table1",
        "env:Overcooked-TomatoSalad-v0",
        "speed-pairs:Overcooked-TomatoSalad-v0",
    } <= names


def test_the_summary_opens_a_short_page(texts):
    """docs/results.md: the generated summary before any section, and a page short enough to
    read in minutes (the reasoning lives on the study pages)."""
    text = texts["docs/results.md"]
    first = MARKER.search(text)
    assert first is not None and first.group("name") == "summary"
    assert "\n## " not in text[: first.start()]
    prose = MARKER.sub("", text)
    assert len(prose.split()) < 1500, "docs/results.md grew: move the reasoning to a study page"


# -- the summary -------------------------------------------------------------------------------
def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split(" | ")]


def _table(body: str) -> list[dict[str, str]]:
    """The rows of the generated Markdown tables of ``body`` (a region may hold two tables),
    each as {header: cell}."""
    lines = [line for line in body.splitlines() if line.startswith("|")]
    rows: list[dict[str, str]] = []
    header: list[str] = []
    for k, line in enumerate(lines):
        if line.startswith("|---"):
            continue
        if k + 1 < len(lines) and lines[k + 1].startswith("|---"):
            header = _cells(line)
            continue
        rows.append(dict(zip(header, _cells(line), strict=True)))
    return rows


def _mirror(cell: str) -> str:
    """ "+0.031 [-0.064, +0.123]" as the other agent's "-0.031 [-0.123, +0.064]"."""
    point, low, high = re.findall(r"[+-]\d+\.\d{3}", cell)

    def flip(v: str) -> str:  # a zero prints "+0.000" either way round
        return ("-" if v[0] == "+" and float(v) != 0 else "+") + v[1:]

    return f"{flip(point)} [{flip(high)}, {flip(low)}]"


def test_summary_rows_follow_the_rule_and_are_the_boards_numbers(bodies):
    rows = _table(bodies["summary"])
    assert len(rows) >= 12
    claims = {r["paper claim (measure)"].split(":")[0] for r in rows}
    assert {"Figure 3", "Table 1", "Figure 4", "Figure 5"} <= claims
    credit = {(r["env"], r["A − B"].split(" (")[0]): r for r in _table(bodies["credit"])}
    speed = {
        (r["A"].split(" (")[0], r["B"].split(" (")[0]): r
        for r in _table(bodies["speed-pairs:Overcooked-TomatoSalad-v0"])
    }
    checked_credit = checked_speed = 0
    for r in rows:
        effect, verdict = r["IQM difference A − B [95% CI]"], r["verdict"]
        seeds = [int(n) for n in re.findall(r"\d+", r["seeds A / B"])]
        if min(seeds) < MIN_VERDICT_SEEDS:
            assert verdict.startswith("exploratory: direction only"), r
        if verdict in ("better", "worse"):
            low, high = (float(v) for v in re.findall(r"[+-]\d+\.\d{3}", effect)[1:3])
            assert (low > 0 or high < 0) and float(r["exact p"]) < 0.05, r
        b = r["A − B"].removeprefix("POAD − ").lower()
        if r["task"] == "Tomato Salad" and "learns faster" in r["paper claim (measure)"]:
            pair = ("poad", b) if ("poad", b) in speed else (b, "poad")
            board = speed[pair]["area IQM difference A − B [95% CI]"]
            assert effect == (board if pair[0] == "poad" else _mirror(board)), r
            assert r["exact p"] == speed[pair]["exact p"]
            checked_speed += 1
        elif r["task"] == "Tomato Salad" and "history" not in r["study"]:
            env = "Overcooked-TomatoSalad-v0"
            if (env, f"POAD − {b.upper()}") in credit:
                board = credit[(env, f"POAD − {b.upper()}")]["IQM difference A − B [95% CI]"]
                assert effect == board, r
            else:
                board = credit[(env, f"{b.upper()} − POAD")]["IQM difference A − B [95% CI]"]
                assert effect == _mirror(board), r
            checked_credit += 1
    assert checked_speed == 4 and checked_credit == 4


def _plain_iqm(values: list[float]) -> float:
    values = sorted(values)
    cut = int(0.25 * len(values))
    kept = values[cut : len(values) - cut]
    return sum(kept) / len(kept)


def _plain_p(x: list[float], y: list[float]) -> float:
    pooled, observed = x + y, abs(sum(x) / len(x) - sum(y) / len(y))
    hits = total = 0
    for chosen in itertools.combinations(range(len(pooled)), len(x)):
        a = [pooled[i] for i in chosen]
        b = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        total += 1
        hits += abs(sum(a) / len(a) - sum(b) / len(b)) >= observed - 1e-9
    return hits / total


@functools.cache
def _unseen_records() -> dict[str, dict]:
    """POAD's, NTPO's and TWOSOME's committed records on the six unseen tasks (a function, not a
    fixture: Hypothesis would print the records with every failing example)."""
    by_id = {r["record_id"]: r for r in load_records(RESULTS)}
    return {
        f"{env}:{agent}": by_id[f"{env}__{agent}__smollm2-135m__trainedon-FoodPreparation"]
        for env in UNSEEN
        for agent in ("poad", "ntpo", "twosome")
    }


SCORE = st.sampled_from([0.0, 0.01, 0.1, 0.25, 0.5, 0.77])


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_the_six_task_row_names_the_smallest_p_and_counts_the_verdicts(data):
    """The Table 1 unseen-task row, on committed records given drawn scores (3 seeds): the task
    it names is the one whose plain-loop permutation p is smallest, its difference is the plain
    IQM difference there, and every one of the six verdicts is counted."""
    built, scores = [], {}
    for key, record in _unseen_records().items():
        r = copy.deepcopy(record)
        values = data.draw(st.lists(SCORE, min_size=3, max_size=3), label=key)
        r["scores"]["per_seed"] = [
            {**s, "score": v} for s, v in zip(r["scores"]["per_seed"][:3], values, strict=True)
        ]
        r["protocol"]["seeds"] = [s["seed"] for s in r["scores"]["per_seed"]]
        built.append(r)
        scores[key] = values
    row = next(
        r
        for r in summary_rows(built)
        if r[0].startswith("Table 1: the six") and r[3] == "POAD − NTPO"
    )
    _, _, tasks, _, seeds, effect, p_cell, tally = row
    assert tasks == ", ".join(env_name(e) for e in UNSEEN) and seeds == "3 / 3"
    plain = {env: _plain_p(scores[f"{env}:poad"], scores[f"{env}:ntpo"]) for env in UNSEEN}
    smallest = min(plain.values())
    named = next(e for e in UNSEEN if effect.startswith(env_name(e) + ":"))
    assert plain[named] == pytest.approx(smallest, abs=1e-9)
    point = float(effect.split(": ")[1].split()[0])
    expected = _plain_iqm(scores[f"{named}:poad"]) - _plain_iqm(scores[f"{named}:ntpo"])
    assert point == pytest.approx(expected, abs=5e-4)
    assert p_cell.endswith("(smallest of 6)")
    assert tally == "exploratory: direction only on 6 of 6"  # 3 seeds: no verdict


# -- the guard on quoted numbers ---------------------------------------------------------------
class Quote(NamedTuple):
    """A number (or interval) the prose quotes: its kind, its text as normalised, and where it
    starts and ends in the normalised prose."""

    kind: str
    text: str
    start: int
    end: int


N3 = r"[+-]?\d+\.\d{3}(?!\d)"
#: Quote kinds, each checked against what the generated tables or the records hold.
PATTERNS = {
    # an IQM difference with its CI, "+0.242 [+0.153, +0.296]" (or a gap of P(A > B), 2 decimals)
    "difference": re.compile(r"(?<![\d.])[+-]\d\.\d{2,3} \[[+-]\d\.\d{2,3}, [+-]\d\.\d{2,3}\]"),
    # an IQM with its CI, "0.870 [0.783, 0.895]", or P(A > B) with its CI, "0.55 [0.50, 0.65]"
    "estimate": re.compile(r"(?<![\d.+-])\d+\.\d{2,3} \[-?\d+\.\d{2,3}, -?\d+\.\d{2,3}\]"),
    # a mean with its standard error, "1.142 ± 0.004" or a curve point "0.87 ± 0.07"
    "mean ± s.e.": re.compile(r"(?<![\d.])-?\d+\.\d{2,3} ± \d+\.\d{2,3}(?![\d%])(?! %)"),
    # an exact p, "p 0.008", "exact p 1.2e-04"
    "p": re.compile(r"(?<=\bp )(?:\d\.\d{3}|\d\.\de-\d\d)(?![\d.])"),
}
#: Words after which a bare number is an IQM or a mean (up to the end of the clause).
BARE = {"IQM": re.compile(r"\bIQMs?\b"), "mean": re.compile(r"\b(?:by )?means?\b")}
#: An agent's name followed by a bare score, "POAD 0.947" (an interval or ± s.e. is its own kind).
AGENT_SCORE = re.compile(
    r"\b(?:POAD|NTPO|TWOSOME|GRPO|GiGPO|ARCHER)(?:'s)? (-?\d+\.\d{3})(?!\d| ±| \[)"
)
CLAUSE_END = re.compile(r"; |: |\. (?=[A-Z(])|\|")


def _normalise(text: str) -> tuple[str, list[int]]:
    """The page's prose (generated regions left out) with "−" as "-" and every run of white
    space as one space, so a quote broken across lines reads as one; and, per character, its
    index in the page."""
    hidden = [False] * len(text)
    for m in MARKER.finditer(text):
        for i in range(m.start(), m.end()):
            hidden[i] = True
    out: list[str] = []
    where: list[int] = []
    for i, ch in enumerate(text):
        if hidden[i]:
            continue
        if ch.isspace():
            if out and out[-1] == " ":
                continue
            ch = " "
        out.append("-" if ch == "−" else ch)
        where.append(i)
    return "".join(out), where


def quotes(prose: str) -> list[Quote]:
    """Every quoted number of the normalised prose (:data:`PATTERNS`, and the bare numbers of an
    IQM or a mean clause, :data:`BARE`)."""
    found = [
        Quote(k, m.group(0), m.start(), m.end())
        for k, p in PATTERNS.items()
        for m in p.finditer(prose)
    ]
    taken = [(q.start, q.end) for q in found]
    for m in AGENT_SCORE.finditer(prose):  # "POAD 0.947": an agent's mean score
        s, e = m.span(1)
        if not any(a <= s < b for a, b in taken):
            found.append(Quote("mean", m.group(1), s, e))
            taken.append((s, e))
    for kind, word in BARE.items():
        for m in word.finditer(prose):
            end = CLAUSE_END.search(prose, m.end())
            stop = min(end.start() if end else len(prose), m.end() + 160)
            for n in re.finditer(N3, prose[m.end() : stop]):
                s, e = m.end() + n.start(), m.end() + n.end()
                if any(a <= s < b for a, b in taken) or prose[max(0, s - 2) : s] == "p ":
                    continue  # part of an interval, a mean ± s.e. or a p
                found.append(Quote(kind, n.group(0), s, e))
                taken.append((s, e))
    return sorted(found, key=lambda q: q.start)


class Known(NamedTuple):
    """What a quote may be: the generated tables' text, their exact-p cells, the numbers of their
    IQM columns, the records' mean ± s.e., and the means of the records, the tables and the
    committed probes (studies/probes/)."""

    generated: str
    p_values: frozenset[str]
    iqm_numbers: frozenset[str]
    record_means: frozenset[str]
    means: frozenset[str]


def _flip_difference(text: str) -> str:
    point, rest = text.split(" [")
    low, high = rest.rstrip("]").split(", ")

    def flip(v: str) -> str:
        return ("-" if v[0] == "+" else "+") + v[1:]

    return f"{flip(point)} [{flip(high)}, {flip(low)}]"


def _flip_probability(text: str) -> str:
    point, rest = text.split(" [")
    low, high = rest.rstrip("]").split(", ")
    digits = len(point.split(".")[1])

    def flip(v: str) -> str:
        return f"{1 - float(v):.{digits}f}"

    return f"{flip(point)} [{flip(high)}, {flip(low)}]"


def stale(prose: str, known: Known) -> list[Quote]:
    """The quotes of ``prose`` that neither the generated tables nor the records hold."""
    out = []
    for q in quotes(prose):
        if q.kind == "difference":
            ok = q.text in known.generated or _flip_difference(q.text) in known.generated
        elif q.kind == "estimate":
            ok = q.text in known.generated or (
                "." in q.text
                and len(q.text.split()[0].split(".")[1]) == 2
                and _flip_probability(q.text) in known.generated
            )
        elif q.kind == "mean ± s.e.":
            ok = q.text in known.record_means or q.text in known.generated
        elif q.kind == "p":
            ok = q.text in known.p_values
        elif q.kind == "IQM":
            ok = q.text.lstrip("+") in known.iqm_numbers
        else:  # a bare mean
            ok = q.text.lstrip("+") in known.means
        if not ok:
            out.append(q)
    return out


def _record_files() -> list[Path]:
    files = [*RESULTS.glob("*.json"), *(ROOT / "leaderboard" / "history").rglob("*.json")]
    return files + list((ROOT / "runs").glob("*/*__*.json"))  # records kept beside their runs


def _probe_means(folder: Path) -> set[str]:
    """The means the committed probes report (every number under a key that starts with
    "mean", e.g. ``mean_auc_runnable``), as the prose prints them."""
    found: set[str] = set()

    def walk(node: object, key: str = "") -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, str(k))
        elif isinstance(node, list):
            for v in node:
                walk(v, key)
        elif isinstance(node, float) and key.startswith("mean"):
            found.add(f"{node:.3f}")

    for path in folder.glob("*.json"):
        walk(json.loads(path.read_text(encoding="utf-8")))
    return found


@pytest.fixture(scope="module")
def known(bodies) -> Known:
    generated = "\n".join(bodies.values())
    p_values, iqm_numbers = set(), set()
    for body in bodies.values():
        for row in _table(body):
            for header, cell in row.items():
                if header == "exact p" or header.endswith(" p"):
                    p_values.add(cell.split(" ")[0])
                if "IQM" in header:
                    iqm_numbers |= {v.lstrip("+") for v in re.findall(N3, cell)}
    record_means, means = set(), set(re.findall(r"(?<![\d.])-?\d+\.\d{3}(?!\d)", generated))
    for path in _record_files():
        record = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(record, dict) and "scores" in record:
            mean, se = record["scores"]["mean"], record["scores"]["stderr"]
            record_means.add(f"{mean:.3f} ± {se:.3f}")
            means.add(f"{mean:.3f}")
    means |= _probe_means(ROOT / "studies" / "probes")
    return Known(
        generated,
        frozenset(p_values),
        frozenset(iqm_numbers),
        frozenset(record_means),
        frozenset(means),
    )


def test_every_number_the_results_prose_quotes_is_in_a_table_or_a_record(texts, known):
    """Intervals, means ± s.e., IQMs, means and exact p quoted by hand on any results page must
    be in today's generated tables (a difference either way round, "A − B" or "B − A") or, for a
    mean, in a committed record (the history and the records kept beside runs included). New
    records that change a table fail here until the prose that quotes it is rewritten."""
    counts: dict[str, int] = {}
    wrapped = 0
    bad = []
    for path, text in texts.items():
        prose, where = _normalise(text)
        for q in quotes(prose):
            counts[q.kind] = counts.get(q.kind, 0) + 1
            wrapped += "\n" in text[where[q.start] : where[q.end - 1] + 1]
        bad += [f"{path}: {q.kind} {q.text!r}" for q in stale(prose, known)]
    assert bad == [], f"quoted in the prose but in no generated table or record: {bad}"
    # every kind is quoted on the pages, and some quotes wrap: no check above is vacuous
    assert counts.get("difference", 0) >= 50 and counts.get("p", 0) >= 30, counts
    assert min(counts.get(k, 0) for k in ("mean ± s.e.", "IQM", "mean")) >= 5, counts
    assert counts.get("estimate", 0) >= 1, counts
    assert wrapped >= 3


def _edited(text: str, where: list[int], q: Quote) -> list[str]:
    """``text`` with one digit of quote ``q`` changed, each way that makes a number no table or
    record is likely to hold (the quote's last digit, then its first decimal)."""
    digits = [i for i in range(q.start, q.end) if q.text[i - q.start].isdigit()]
    out = []
    for i in (digits[-1], digits[1] if len(digits) > 1 else digits[0]):
        raw = where[i]
        digit = int(text[raw])
        for step in (1, 2, 3):
            new = text[:raw] + str((digit + step) % 10) + text[raw + 1 :]
            out.append(new)
    return out


def test_editing_any_digit_of_a_quoted_number_fails_the_guard(texts, known):
    """Each quote on each page, edited in place (one digit, where it stands in the page, so a
    quote that wraps is edited across its line break): the guard then reports the page. An edit
    may land on another number some table holds (e.g. 0.000 → 0.001); at least one of the six
    single-digit edits of every quote must fail, and most must."""
    edits = caught = 0
    for path, text in texts.items():
        prose, where = _normalise(text)
        assert stale(prose, known) == []
        for q in quotes(prose):
            results = []
            for new in _edited(text, where, q):
                results.append(bool(stale(_normalise(new)[0], known)))
            assert any(results), f"{path}: no edit of {q.kind} {q.text!r} is caught"
            edits += len(results)
            caught += sum(results)
    assert edits > 1000 and caught / edits > 0.9, (caught, edits)


def test_the_guard_reads_a_quote_across_a_line_break():
    known = Known(
        "| x | +0.242 [+0.153, +0.296] | 0.008 |",
        frozenset({"0.008"}),
        frozenset(),
        frozenset(),
        frozenset(),
    )
    page = "POAD − NTPO +0.242\n[+0.153, +0.296] (exact\np 0.008).\n"
    prose, _ = _normalise(page)
    assert [q.text for q in quotes(prose)] == ["+0.242 [+0.153, +0.296]", "0.008"]
    assert stale(prose, known) == []
    assert [q.text for q in stale(_normalise(page.replace("0.296", "0.297"))[0], known)] == [
        "+0.242 [+0.153, +0.297]"
    ]
    assert [q.text for q in stale(_normalise(page.replace("p 0.008", "p 0.009"))[0], known)] == [
        "0.009"
    ]


# -- verdict words -----------------------------------------------------------------------------
#: Words that claim a verdict: "better"/"worse", "holds", "significant(ly)" (not after "no"),
#: "beat(s)", "outperform(s)". Inside a `code span` a word is mentioned, not claimed.
CLAIM = re.compile(
    r"\b(better|worse|holds|beats?|outperforms?|significantly)\b|(?<!no )\bsignificant\b", re.I
)
CODE_SPAN = re.compile(r"`[^`]*`")
INTERVAL = PATTERNS["difference"]


def _prose_verdict_claims(prose: str, signed: set[str]) -> list[str]:
    """The verdict words of ``prose`` that no generated verdict signs: a claim word is signed
    when the quoted IQM difference nearest to it in its paragraph (or table cell) is one whose
    generated verdict is "better" or "worse" (``signed``); a word with no quoted difference
    beside it claims a verdict on its own."""
    unsigned = []
    for block in re.split(r"\n\s*\n| \| ", CODE_SPAN.sub("``", prose)):
        block = re.sub(r"\s+", " ", block)  # a phrase may wrap across lines
        found = [(m.start(), m.group(0)) for m in INTERVAL.finditer(block)]
        for word in CLAIM.finditer(block):
            nearest = min(found, key=lambda q: abs(q[0] - word.start()), default=None)
            if nearest is None or nearest[1] not in signed:
                unsigned.append(block[max(0, word.start() - 60) : word.end() + 20])
    return unsigned


def _signed(bodies: dict[str, str]) -> set[str]:
    signed = set()
    for body in bodies.values():
        for line in body.splitlines():
            if _cells(line)[-1] in ("better", "worse"):
                for d in INTERVAL.findall(line):
                    signed |= {d, _flip_difference(d)}
    return signed


def test_no_results_prose_claims_a_verdict_the_tables_do_not_give(texts, bodies):
    """Hand-written prose on every results page and in README.md may not claim more than the
    generated verdicts: "better", "worse", "holds", "significant(ly)", "beats" and "outperforms"
    only beside a quoted IQM difference whose table verdict is "better" or "worse"."""
    signed = _signed(bodies)
    assert signed  # the Tomato Salad verdicts
    claims = []
    for path, text in texts.items():
        claims += [
            f"{path}: {c}"
            for c in _prose_verdict_claims(MARKER.sub("", text).replace("−", "-"), signed)
        ]
    readme = (ROOT / "README.md").read_text(encoding="utf-8").replace("−", "-")
    claims += [f"README.md: {c}" for c in _prose_verdict_claims(readme, signed)]
    assert claims == [], f"prose claims verdicts no generated table gives: {claims}"
    # the rule can fail: a claim beside an unsigned difference, or alone
    assert _prose_verdict_claims("A − B holds: +0.660 [+0.161, +1.053].", set())
    assert _prose_verdict_claims("GRPO transfers significantly better than POAD.", signed)
    assert not _prose_verdict_claims(
        "A − B +0.660 [+0.161, +1.053], `better`; no significant difference.", set()
    )


# -- links -------------------------------------------------------------------------------------
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"`", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    headings = {_slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}
    return headings | set(re.findall(r'<a id="([^"]+)"', text))  # explicit anchors too


def test_every_link_of_and_to_the_results_pages_resolves(texts):
    """Relative links on the results pages, and links to them from README.md and docs/, point at
    files that exist and at headings those files have."""
    sources = [ROOT / p for p in texts] + [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
    ]
    checked, broken = 0, []
    for source in sources:
        for target in LINK.findall(source.read_text(encoding="utf-8")):
            if (
                re.match(r"[a-z]+:", target)
                or target.startswith("#")
                and source == ROOT / "README.md"
            ):
                continue
            file, _, anchor = target.partition("#")
            path = (source.parent / file).resolve() if file else source
            if source not in [ROOT / p for p in texts] and "results" not in file:
                continue  # other docs' links are their own pages' business
            checked += 1
            if not path.exists():
                broken.append(f"{source.relative_to(ROOT)}: {target} (no file)")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{source.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == [] and checked >= 20, (broken, checked)
    assert (
        _slug("Tomato-Lettuce Salad (the board's rows)") == "tomato-lettuce-salad-the-boards-rows"
    )


# -- the command -------------------------------------------------------------------------------
def test_the_command_checks_and_writes_every_results_page(tmp_path, monkeypatch, capsys):
    """Without a file, `results-tables` fills docs/results.md and docs/results/*.md under the
    directory it runs in; --check names each stale page; a page without a table is skipped among
    the defaults and refused when named."""
    store = tmp_path / "store"
    tomato = "Overcooked-TomatoSalad-v0"
    for name in ("poad", "ntpo"):
        add_record(
            json.loads((RESULTS / f"{tomato}__{name}__smollm2-135m.json").read_text()), store
        )
    region = (
        f"<!-- results-tables: env:{tomato} -->\nstale\n<!-- /results-tables: env:{tomato} -->\n"
    )
    (tmp_path / "docs" / "results").mkdir(parents=True)
    (tmp_path / "docs" / "results.md").write_text("# Summary\n\n" + region)
    (tmp_path / "docs" / "results" / "study.md").write_text("# A study\n\n" + region)
    (tmp_path / "docs" / "results" / "prose.md").write_text("# Prose only\n")
    monkeypatch.chdir(tmp_path)
    args = ["leaderboard", "--store", str(store), "results-tables"]
    assert main([*args, "--check"]) == 1
    err = capsys.readouterr().err
    assert "docs/results.md: its tables differ" in err and "docs/results/study.md" in err
    assert main([*args, "--write"]) == 0
    for page in ("results.md", "results/study.md"):
        written = (tmp_path / "docs" / page).read_text()
        assert "stale" not in written and f"`{tomato}__poad__smollm2-135m`" in written
    assert main([*args, "--check"]) == 0
    (tmp_path / "docs" / "results" / "study.md").write_text("# A study\n\n" + region)
    assert main([*args, "--check", "docs/results.md"]) == 0  # only the page given
    assert main([*args, "--check", "docs/results/prose.md"]) == 2
    assert "no `<!-- results-tables: NAME -->` region" in capsys.readouterr().err
