"""What every part of the report reads: records grouped by env, labels, numbers as text.

Every number the report prints about a record goes through :func:`pm` (mean ± s.e., or
"n = 1" for one seed, so a single seed never reads as a spread of zero), and every discounted
return through :func:`seed_discounted_returns` (one place that knows where records keep it).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbench_poad.leaderboard.records import (
    ANCHOR_AGENTS,
    LABEL_ENV_KWARGS,
    mean_stderr,
    task_env_kwargs,
)
from agentbench_poad.leaderboard.report.paper import PaperResults, layout_tasks
from agentbench_poad.leaderboard.report.stats import iqm_estimate, normalised
from agentbench_poad.registration import UnknownEnvError, env_facts
from agentbench_poad.rl.config import reward_free_rule

#: The agent every other agent is compared with.
REFERENCE_AGENT = "poad"
#: Rows that anchor the normalised score (0 and 1) and are not compared with POAD
#: (:data:`~agentbench_poad.leaderboard.records.ANCHOR_AGENTS`, imported above). The top anchor
#: is the oracle (the best return the env admits); where no best can be computed the row is a
#: scripted solution ("scripted"), not an upper bound, and the report says so. A row's anchors
#: are those of its env and env kwargs (:func:`anchors`).
TOP_ANCHORS = ("oracle", "scripted")

#: Where a seed keeps its mean discounted return, and an episode its discounted return. Records
#: written before episodes logged one have neither: the report then says "(undiscounted)".
SEED_DISCOUNTED_FIELDS = ("mean_discounted_return", "discounted_return")
EPISODE_DISCOUNTED_FIELDS = ("discounted_return",)


# -- env facts ---------------------------------------------------------------------------------
def facts(env_id: str, records: Sequence[dict[str, Any]] = ()) -> tuple[str, str]:
    """``(family, task)`` of ``env_id`` from the env facts; for an id this interpreter has not
    registered (a record of another package's env), the family its records carry and the id."""
    try:
        found = env_facts(env_id)
    except UnknownEnvError:
        family = next((r["env"]["family"] for r in records if r["env"]["id"] == env_id), "")
        return family, env_id
    return found.family, found.task


# -- numbers as text ---------------------------------------------------------------------------
def fmt(value: float | None, digits: int = 3) -> str:
    return "--" if value is None else f"{value:.{digits}f}"


_BACKTICKS = re.compile(r"`+")


def md_text(text: str, *, brackets: bool = False) -> str:
    """``text`` with its HTML and links made inert for Markdown (it may quote a record).

    Outside code spans: ``&`` and ``<`` become entities, so no tag, comment or autolink
    (``<script>``, ``<img onerror=...>``, ``<https://...>``) reaches a renderer that allows some
    HTML; a ``]`` that would close a link, image or reference (``](``, ``][``, ``]:``) is
    backslash-escaped, so ``[click](javascript:...)`` and ``![](https://tracker/pixel.png)``
    show as text; bare URLs, ``www.`` addresses and e-mail addresses, which GitHub links by
    itself, are put in code spans; backslashes and backticks are backslash-escaped, so the
    text's own escapes cannot undo these. What a reader sees is the text as written.
    ``brackets``: escape every ``[`` and ``]`` (for text inside a link's or image's brackets).

    Code spans are found as CommonMark finds them (a run of n backticks, not escaped by a
    backslash, up to the next run of exactly n); their content is shown literally by every
    renderer, so it is left as is. ``>`` cannot open HTML and is kept (``P(A > B)``).
    """
    out: list[str] = []
    i = 0
    while i < len(text):
        opener = _BACKTICKS.search(text, i)
        if opener is None:
            out.append(_entities(text[i:], brackets))
            break
        start, end = opener.span()
        escaped = len(text[:start]) - len(text[:start].rstrip("\\"))
        if escaped % 2:  # \` is a literal backtick, not an opener (one backtick of the run)
            out.append(_entities(text[i : start + 1], brackets))
            i = start + 1
            continue
        closer = next(
            (m for m in _BACKTICKS.finditer(text, end) if len(m.group()) == end - start), None
        )
        if closer is None:  # no closing run: the backticks are literal
            out.append(_entities(text[i:end], brackets))
            i = end
            continue
        out.append(_entities(text[i:start], brackets) + text[start : closer.end()])
        i = closer.end()
    return "".join(out)


#: What GitHub's Markdown links without brackets (its autolink extension): a URL with a scheme,
#: a ``www.`` address, an e-mail address, a ``mailto:``/``xmpp:`` address.
_BARE_LINK = re.compile(
    r"[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s<>]*"
    r"|(?<![A-Za-z0-9])www\.[^\s<>]+"
    r"|(?:mailto|xmpp):[^\s<>]+"
    r"|[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+"
)
_TRAILING = ".,:;!?*_~'\")"
#: A ``]`` that closes a link's text: an inline link or image ``](``, a reference ``][``, a
#: link reference definition ``]:``.
_LINK_CLOSE = re.compile(r"\](?=[(\[:])")


def _code_span(text: str) -> str:
    """``text`` as a code span (shown literally), fenced by more backticks than it holds."""
    fence = "`" * (max((len(m) for m in _BACKTICKS.findall(text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _entities(text: str, brackets: bool = False) -> str:
    """Text outside code spans, inert: bare links in code spans, the rest escaped
    (:func:`_inert`)."""
    out: list[str] = []
    i = 0
    for link in _BARE_LINK.finditer(text):
        # trailing punctuation stays text, as GitHub leaves it out of a link
        url = link.group().rstrip(_TRAILING)
        if not url:
            continue
        out.append(_inert(text[i : link.start()], brackets))
        out.append(_code_span(url))
        i = link.start() + len(url)
    out.append(_inert(text[i:], brackets))
    return "".join(out)


def _inert(text: str, brackets: bool) -> str:
    # Backslashes first: after this every backslash of the text is a literal one, so the
    # escapes below are the only live ones (a text's own "\](" cannot re-open a link).
    text = text.replace("\\", "\\\\").replace("`", "\\`")
    text = text.replace("&", "&amp;").replace("<", "&lt;")
    if brackets:
        return text.replace("[", "\\[").replace("]", "\\]")
    return _LINK_CLOSE.sub(r"\\]", text)


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table; a ``|`` inside a cell is escaped, and its HTML
    (:func:`md_text`)."""

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(md_text(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(header), "|" + "---|" * len(header), *(line(r) for r in rows)])


def thousands(n: float) -> str:
    """An integer count with thousands separators: 12288 -> "12,288"."""
    return f"{int(n):,}"


def pm(mean: float, se: float | None, runs: int | None = None, digits: int = 3) -> str:
    """``mean ± se``; with one run (seed) ``mean (n = 1)``: one seed has no spread to show."""
    if runs == 1:
        return f"{mean:.{digits}f} (n = 1)"
    return f"{mean:.{digits}f} ± {se:.{digits}f}" if se is not None else f"{mean:.{digits}f}"


def interval(low: float | None, high: float | None, runs: int, digits: int = 3) -> str:
    """A 95 % CI as ``[low, high]``, or "(n = 1: no CI)" without one."""
    if low is None or high is None:
        return f"(n = {runs}: no CI)"
    return f"[{low:.{digits}f}, {high:.{digits}f}]"


def published(item: dict[str, Any]) -> str:
    """A published number as printed (no rounding), with its spread when it has one."""
    if item.get("printed"):
        return item["printed"]
    text = str(item["value"])
    return f"{text} ± {item['spread']}" if item.get("spread") is not None else text


def hours(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60} m"


# -- records -----------------------------------------------------------------------------------
def agent_label(record: dict[str, Any], *, source: bool = False) -> str:
    """Agent, base model and training env: the same label on every env the agent is scored on.

    ``source``: name the training env also when the record is scored on it (a table whose row
    joins a model's scores on its training task and on unseen ones)."""
    label = record["agent"]["name"]
    base = record["model"].get("base")
    if base:
        # a merged warm start is named by the record (model.base_weights.warm_start), not by
        # its folder, which is "model" for every warm start (docs/warmstart.md)
        warm = ((record["model"].get("base_weights") or {}).get("warm_start") or {}).get("name")
        label += f" ({warm or Path(base.rstrip('/')).name})"
    trained_on = (record.get("training") or {}).get("env_id")
    if trained_on and (source or trained_on != record["env"]["id"]):
        label += f" [trained on {trained_on}]"
    if is_exploratory(record):
        label += " [exploratory]"
    training = record.get("training") or {}
    if training.get("guard") == "custom":  # its own KL guard (docs/agents.md, "One KL guard")
        label += " [custom guard]"
    if training.get("safeguards_default") is False:  # dual clip off or another noise rule
        label += " [non-default update rule]"
        # and which reward-free rule the runs followed, where it is a named one
        rule = reward_free_rule(training.get("safeguards") or {})
        if rule is not None:
            label += f" [reward-free: {rule}]"
    outside = (record.get("training") or {}).get("trainer_version")  # docs/integrations.md
    if outside:
        label += f" [trainer: {outside}]"
    if is_anchor(record) and env_kwargs_of(record):  # one env has an anchor per env kwargs
        label += f" [{kwargs_text(env_kwargs_of(record))}]"
    elif shown := {k: v for k, v in env_kwargs_of(record).items() if k in LABEL_ENV_KWARGS}:
        label += f" [{kwargs_text(shown)}]"  # e.g. the prompt style the agent saw
    return label


def env_steps(record: dict[str, Any]) -> int | None:
    """The env steps the agent trained for (``training.total_steps``), or None when unknown.

    An outside trainer's record states its own step count apart (``training.trainer_steps``);
    records of such trainers written before that field existed kept the trainer's count in
    ``total_steps``, so their env steps are unknown."""
    t = record.get("training") or {}
    if t.get("trainer") and "trainer_steps" not in t:
        return None
    steps = t.get("total_steps")
    return None if steps is None else int(steps)


def budget_text(record: dict[str, Any]) -> str | None:
    """A trained record's budget as text ("3,072 steps", "2 trainer steps"), None when it
    states none."""
    t = record.get("training") or {}
    steps = env_steps(record)
    # an outside trainer's own count (a legacy record kept it in total_steps: env_steps)
    trainer = t.get("trainer_steps", t.get("total_steps")) if t.get("trainer") else None
    own = None if trainer is None else f"{int(trainer):,} trainer steps"
    if not steps:
        return own
    return f"{steps:,} steps" + (f" ({own})" if own else "")


def is_exploratory(record: dict[str, Any]) -> bool:
    """The record comes from a study group marked ``exploratory = true`` (too few seeds for a
    verdict of its own; docs/study.md)."""
    study = (record.get("config") or {}).get("study")
    return isinstance(study, dict) and study.get("exploratory") is True


def paper_label(item: dict[str, Any], table: str | None = None) -> str:
    return (
        f"{item.get('label') or item['agent']} (paper, {table or item.get('table', 'published')})"
    )


def is_anchor(record: dict[str, Any]) -> bool:
    return record["agent"]["name"].lower() in ANCHOR_AGENTS


def seed_scores(record: dict[str, Any]) -> list[float]:
    """The record's per-seed scores: the runs of every statistic over seeds."""
    return [float(s["score"]) for s in record["scores"]["per_seed"]]


def seed_success(record: dict[str, Any]) -> list[float]:
    return [float(s["success_rate"]) for s in record["scores"]["per_seed"]]


def n_seeds(record: dict[str, Any]) -> int:
    return len(record["scores"]["per_seed"])


def seeds_text(seeds: Sequence[int]) -> str:
    """``seed 3``, ``seeds 100–109`` (a run of three or more), else ``seeds 0, 2``."""
    seeds = list(seeds)
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"seeds {seeds[0]}–{seeds[-1]}"
    return "seeds " + ", ".join(map(str, seeds))


@dataclass(frozen=True)
class Anchors:
    """The anchors that normalise one row: the random and top rows of its env and env kwargs."""

    random: float | None
    top_name: str
    top: float | None
    random_id: str | None = None
    top_id: str | None = None

    def normalise(self, score: float) -> float | None:
        return normalised(score, self.random, self.top)


def env_kwargs_of(record: dict[str, Any]) -> dict[str, Any]:
    """The record's task env kwargs (``config.env_kwargs`` less the execution ones)."""
    return task_env_kwargs((record.get("config") or {}).get("env_kwargs"))


def kwargs_text(env_kwargs: dict[str, Any]) -> str:
    """``max_episode_steps=30``, ``no env kwargs`` for none."""
    return ", ".join(f"{k}={v}" for k, v in sorted(env_kwargs.items())) or "no env kwargs"


def _anchor(
    candidates: Sequence[dict[str, Any]], name: str
) -> tuple[float, str] | tuple[None, None]:
    named = [r for r in candidates if r["agent"]["name"].lower() == name]
    # an anchor evaluated where it was made before one trained elsewhere
    named.sort(key=lambda r: (bool((r.get("training") or {}).get("env_id")), r["record_id"]))
    return (named[0]["scores"]["mean"], named[0]["record_id"]) if named else (None, None)


def anchors(record: dict[str, Any], records: Sequence[dict[str, Any]]) -> Anchors:
    """The anchors of ``record``: the random row (0) and the oracle, else scripted, row (1) of
    the same env whose task env kwargs (:func:`env_kwargs_of`) equal the record's.

    A return depends on the env kwargs (the oracle's on Tomato Salad is 1.860 without a step
    cap and 1.4635 with ``max_episode_steps=30``), so a row is only normalised by anchors
    played under its own; with none, its normalised score is ``None`` ("--"). This is the one
    place anchor scores are read: the report's per-env tables call it for their normalised
    column; the charts and the results tables (:mod:`.results_tables`) print no normalised
    score and only tell anchors apart (:func:`is_anchor`, and :func:`agent_label`, which names
    an anchor's env kwargs).
    """
    kwargs = env_kwargs_of(record)
    same = [
        r
        for r in records
        if is_anchor(r) and r["env"]["id"] == record["env"]["id"] and env_kwargs_of(r) == kwargs
    ]
    random_score, random_id = _anchor(same, "random")
    for name in TOP_ANCHORS:
        top, top_id = _anchor(same, name)
        if top is not None:
            return Anchors(random_score, name, top, random_id, top_id)
    return Anchors(random_score, TOP_ANCHORS[0], None, random_id, None)


def below_random(record: dict[str, Any], records: Sequence[dict[str, Any]]) -> float | None:
    """Random's mean where ``record`` is a trained row that scores below chance, else None.

    A trained row is below random when the upper bound of its IQM's 95 % CI over seeds is at
    or below the mean of the random row of its env and env kwargs (the same task and cap,
    :func:`anchors`): training left it no better than a uniform policy, which is news. A row
    with one seed (no CI) or without a random row of its kind is not flagged."""
    if is_anchor(record) or not record.get("training"):
        return None
    random_score = anchors(record, records).random
    if random_score is None:
        return None
    est = iqm_estimate(seed_scores(record))
    if est.high is None or est.high > random_score:
        return None
    return float(random_score)


#: How the tables and the report flag a row :func:`below_random` finds.
BELOW_RANDOM = "below random"


def below_random_tag(record: dict[str, Any], records: Sequence[dict[str, Any]]) -> str:
    """`` [below random: 0.023]`` (random's mean) for a row :func:`below_random` flags, else ""."""
    found = below_random(record, records)
    return "" if found is None else f" [{BELOW_RANDOM}: {found:.3f}]"


def anchor_records(env_id: str, records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every anchor record of ``env_id`` (for a note on which anchors exist)."""
    return sorted(
        (r for r in records if is_anchor(r) and r["env"]["id"] == env_id),
        key=lambda r: r["record_id"],
    )


def _seed_discounted(seed: dict[str, Any]) -> float | None:
    for name in SEED_DISCOUNTED_FIELDS:
        if seed.get(name) is not None:
            return float(seed[name])
    values = [
        next((e[n] for n in EPISODE_DISCOUNTED_FIELDS if e.get(n) is not None), None)
        for e in seed["episodes"]
    ]
    if not values or any(v is None for v in values):
        return None
    return sum(values) / len(values)


def seed_discounted_returns(record: dict[str, Any]) -> list[float] | None:
    """Each seed's mean discounted return (Σ_t γ^t r_t, the paper's Table 1 metric): the seed's
    stored mean, else the mean of its episodes' stored discounted returns; ``None`` when any
    seed has neither (a record made before episodes logged one)."""
    per_seed = [_seed_discounted(s) for s in record["scores"]["per_seed"]]
    if not per_seed or any(v is None for v in per_seed):
        return None
    return [float(v) for v in per_seed if v is not None]


def discounted(record: dict[str, Any]) -> tuple[float, float] | None:
    """Mean ± s.e. over seeds of the discounted return, when every seed has one (None else)."""
    values = seed_discounted_returns(record)
    return None if values is None else mean_stderr(values)


# -- grouped inputs ----------------------------------------------------------------------------
class Inputs:
    """Records grouped by env and paper results placed in their layouts."""

    def __init__(self, records: Sequence[dict[str, Any]], paper: PaperResults) -> None:
        self.records = list(records)
        self.paper = paper
        self.by_env: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in self.records:
            self.by_env[r["env"]["id"]].append(r)
        self.placed: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.unplaced: list[dict[str, Any]] = []
        for item in paper.results:
            name = item.get("layout") or self._layout_of(item["env_id"])
            (self.placed[name] if name else self.unplaced).append(item)

    def _layout_of(self, env_id: str) -> str | None:
        for name, layout in self.paper.layouts.items():
            if env_id in {e for e, _ in layout_tasks(layout)}:
                return name
        return None

    def layout_envs(self, layout: str) -> list[str]:
        """The env ids of a layout's tasks (empty when the layout is missing)."""
        found = self.paper.layouts.get(layout)
        return [e for e, _ in layout_tasks(found)] if found else []

    def published(self, layout: str, env_id: str, agent: str, metric: str) -> dict | None:
        for item in self.placed.get(layout, []):
            if (item["env_id"], item["agent"], item["metric"]) == (env_id, agent, metric):
                return item
        return None

    def published_on(self, env_id: str, metrics: Sequence[str]) -> list[dict[str, Any]]:
        """Every published number on ``env_id`` with one of ``metrics``."""
        return [p for p in self.paper.results if p["env_id"] == env_id and p["metric"] in metrics]

    def methods(self, layout: str) -> list[dict[str, str]]:
        """The paper's methods of ``layout`` in its order, then any other agent placed there."""
        listed = list(self.paper.layouts[layout].get("methods", []))
        known = {m["agent"] for m in listed}
        for item in self.placed.get(layout, []):
            if item["agent"] not in known:
                known.add(item["agent"])
                listed.append({"agent": item["agent"], "label": item.get("label") or item["agent"]})
        return listed
