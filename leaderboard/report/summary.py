"""The summary table that opens docs/results.md (``<!-- results-tables: summary -->``).

One row per comparison that tests a claim of the paper, each computed from the records as the
board's own tables compute it, so the summary cannot drift from them:

* **Figure 3, learning speed** on Tomato Salad: the normalised area under each run's sampled
  learning curve (:mod:`.speed`), POAD against each other agent;
* **Figure 3, final return** on Tomato Salad (greedy evaluation), POAD against each other agent;
* **Table 1**: POAD against the paper's two baselines (NTPO, TWOSOME) on Food Preparation, and
  on its six unseen variants together (the row names the task with the smallest exact p and
  counts the verdicts over the six);
* **Figure 4**: POAD against NTPO on DataSciCoding gen-xor and iris (generated programs; the
  margins' comparison with Tomato Salad's is the ``margins:`` table of the group's page);
* **Figure 5**: POAD against NTPO at three γ_w (the earlier study's ablation, from the history).

Each row gives the seeds, the IQM difference A − B with its 95 % CI (rliable's stratified
bootstrap), the exact permutation p over seeds and the verdict by the board's rule
(:func:`.stats.verdict`: 10 seeds a side, a CI excluding 0 and p < 0.05; fewer seeds give
"exploratory: direction only"). A row names where its records come from (``config.study``); a
comparison whose records are missing or unlike (:func:`.comparison.budget_difference`) says so.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from agentbench_poad.leaderboard.records import record_study
from agentbench_poad.leaderboard.report.common import agent_label, md_table, seed_scores
from agentbench_poad.leaderboard.report.comparison import budget_difference
from agentbench_poad.leaderboard.report.fair_tables import CREDIT_PAIRS, difference_cell
from agentbench_poad.leaderboard.report.stats import (
    Estimate,
    iqm_difference,
    p_text,
    permutation_p,
    verdict,
)

TOMATO_SALAD = "Overcooked-TomatoSalad-v0"
FOOD_PREPARATION = "VirtualHome-FoodPreparation-v0"
#: Table 1's unseen tasks, in the paper's column order.
UNSEEN = tuple(
    f"VirtualHome-{task}-v0"
    for task in ("Cheese", "Hamburger", "ApplePie", "Pizza", "WashingPlate", "Laundry")
)
SMOLLM2 = "smollm2-135m"
#: How the summary spells an agent (its name in capitals otherwise).
NAMES = {"gigpo": "GiGPO"}
WARM_START = "dsc-smollm2-135m-paper-chat-v2"


class Claim(NamedTuple):
    """One row of the summary: agent ``a`` against agent ``b`` on ``envs`` (one env, or several
    summarised together), measured by ``measure`` (``"return"``: the record's per-seed scores;
    ``"speed"``: the normalised area under each run's learning curve). ``study``: read the
    records the history keeps of that study instead of the board's. ``b_label``: how the row
    names ``b`` (default: its name in capitals)."""

    claim: str
    envs: tuple[str, ...]
    a: str
    b: str
    model: str = SMOLLM2
    measure: str = "return"
    study: str | None = None
    b_label: str | None = None


#: The claims the records test, in the page's order.
CLAIMS: tuple[Claim, ...] = (
    *(
        Claim(
            "Figure 3: POAD learns faster (normalised area under the curve)",
            (TOMATO_SALAD,),
            "poad",
            b,
            measure="speed",
        )
        for b in ("ntpo", "twosome", "grpo", "gigpo")
    ),
    *(
        Claim("Figure 3: final return (greedy)", (TOMATO_SALAD,), "poad", b)
        for b in ("ntpo", "twosome", "grpo", "gigpo")
    ),
    *(
        Claim("Table 1: the training task (sampled)", (FOOD_PREPARATION,), "poad", b)
        for b in ("ntpo", "twosome")
    ),
    *(
        Claim("Table 1: the six unseen tasks (sampled)", UNSEEN, "poad", b)
        for b in ("ntpo", "twosome")
    ),
    *(
        Claim(
            "Figure 4: POAD ahead of NTPO on generated programs (final AUC)",
            (env,),
            "poad",
            "ntpo",
            model=WARM_START,
        )
        for env in ("DataSciCoding-gen-xor-v0", "DataSciCoding-iris-v0")
    ),
    *(
        Claim(
            "Figure 5: the gap grows as γ_w falls (greedy return)",
            (TOMATO_SALAD,),
            "poad",
            b,
            study="smollm2-cpu",
            b_label=f"NTPO (γ_w {gw})",
        )
        for b, gw in (("ntpo-gw0.99", "0.99"), ("ntpo-gw0.95", "0.95"), ("ntpo", "0.9"))
    ),
)


def env_name(env_id: str) -> str:
    """A task's short name: ``Overcooked-TomatoSalad-v0`` → ``Tomato Salad``,
    ``DataSciCoding-gen-xor-v0`` → ``gen-xor``."""
    task = re.sub(r"-v\d+$", "", env_id).split("-", 1)[-1]
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", task)


def _record_id(env_id: str, agent: str, model: str) -> str:
    trained_on = (
        "" if env_id == FOOD_PREPARATION or env_id not in UNSEEN else "__trainedon-FoodPreparation"
    )
    return f"{env_id}__{agent}__{model}{trained_on}"


def _find(
    records: Sequence[dict[str, Any]], env_id: str, agent: str, model: str
) -> dict[str, Any] | None:
    wanted = _record_id(env_id, agent, model)
    return next((r for r in records if r["record_id"] == wanted), None)


def _values(
    record: dict[str, Any], measure: str, records: Sequence[dict[str, Any]]
) -> list[float] | None:
    """Per-seed values of ``measure`` (None: the record has no learning curves to measure)."""
    if measure == "return":
        return seed_scores(record)
    from agentbench_poad.leaderboard.report.speed import record_speeds

    speeds = record_speeds(record, records)
    return [s.area for s in speeds] or None


class _Pair(NamedTuple):
    """One env's comparison: its difference (None: not compared), p and verdict words."""

    env_id: str
    seeds: str
    difference: Estimate | None
    p: float | None
    words: str


def _pair(claim: Claim, env_id: str, records: Sequence[dict[str, Any]], b_name: str) -> _Pair:
    a, b = (_find(records, env_id, name, claim.model) for name in (claim.a, claim.b))
    missing = [n for n, r in ((claim.a, a), (claim.b, b)) if r is None]
    if missing or a is None or b is None:
        return _Pair(env_id, "--", None, None, f"no record of {' and '.join(missing)} yet")
    seeds = f"{len(a['scores']['per_seed'])} / {len(b['scores']['per_seed'])}"
    apart = budget_difference(a, b)
    if apart is not None:
        return _Pair(env_id, seeds, None, None, f"not compared: {apart}")
    x, y = _values(a, claim.measure, records), _values(b, claim.measure, records)
    if x is None or y is None:
        return _Pair(env_id, seeds, None, None, "not measured: no learning curves")
    if _board_order(claim, a, b):
        diff = iqm_difference(x, y)
    else:  # the board's tables compute B − A: the same bootstrap, mirrored
        d = iqm_difference(y, x)
        low, high = (None, None) if d.low is None else (0.0 - d.high, 0.0 - d.low)  # no −0.000
        diff = Estimate(0.0 - d.point, low, high, d.runs)
    p = permutation_p(x, y)
    more = "faster" if claim.measure == "speed" else "higher"
    words = verdict(diff, p, higher=f"POAD {more}", lower=f"{b_name} {more}")
    return _Pair(env_id, seeds, diff, p, words)


def _board_order(claim: Claim, a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether the board's own table of this comparison computes A − B (else B − A): the
    credit table's pair order for a return, the speed table's label order for a speed. The
    summary mirrors the other order's bootstrap so that its CI is the board's, digit for digit."""
    if claim.measure == "speed":
        return agent_label(a) <= agent_label(b)
    return (b["agent"]["name"].lower(), a["agent"]["name"].lower()) not in CREDIT_PAIRS


def _study(claim: Claim, records: Sequence[dict[str, Any]]) -> str:
    found = {
        record_study(r) or "no study"
        for env_id in claim.envs
        for name in (claim.a, claim.b)
        if (r := _find(records, env_id, name, claim.model)) is not None
    }
    text = ", ".join(sorted(found)) or "--"
    return f"{text} (history)" if claim.study else text


def _verdict_kind(words: str) -> str:
    """A verdict without its direction ("exploratory: direction only", "better", ...)."""
    return (
        words.split(":")[0]
        if words.startswith(("not compared", "no record"))
        else words.split(" (")[0]
    )


def _summarised(pairs: Sequence[_Pair]) -> tuple[str, str, str, str]:
    """(seeds, effect, p, verdict) cells of several envs' comparisons in one row: the env with
    the smallest exact p (the strongest evidence either way), and the verdicts counted."""
    compared = [q for q in pairs if q.difference is not None and q.p is not None]
    if not compared:
        return pairs[0].seeds, "--", "--", pairs[0].words
    strongest = min(compared, key=lambda q: (q.p, -abs(q.difference.point)))  # type: ignore[union-attr]
    counts: dict[str, int] = {}
    for q in pairs:
        counts[_verdict_kind(q.words)] = counts.get(_verdict_kind(q.words), 0) + 1
    tally = "; ".join(f"{kind} on {n} of {len(pairs)}" for kind, n in counts.items())
    effect = f"{env_name(strongest.env_id)}: {difference_cell(strongest.difference)}"  # type: ignore[arg-type]
    seeds = sorted({q.seeds for q in pairs})
    return ", ".join(seeds), effect, f"{p_text(strongest.p)} (smallest of {len(pairs)})", tally


def summary_rows(
    records: Sequence[dict[str, Any]], history: Sequence[dict[str, Any]] = ()
) -> list[tuple[str, ...]]:
    """The summary's rows (:data:`CLAIMS`): claim, study, task, A − B, seeds, IQM difference
    [95 % CI], exact p, verdict."""
    rows = []
    for claim in CLAIMS:
        pool = (
            list(records)
            if claim.study is None
            else [r for r in history if record_study(r) == claim.study]
        )
        b_name = claim.b_label or NAMES.get(claim.b, claim.b.upper())
        pairs = [_pair(claim, env_id, pool, b_name) for env_id in claim.envs]
        if len(pairs) == 1:
            q = pairs[0]
            cells = (
                q.seeds,
                "--" if q.difference is None else difference_cell(q.difference),
                p_text(q.p),
                q.words,
            )
            task = env_name(q.env_id)
        else:
            cells = _summarised(pairs)
            task = ", ".join(env_name(e) for e in claim.envs)
        rows.append((claim.claim, _study(claim, pool), task, f"POAD − {b_name}", *cells))
    return rows


def summary_table(records: Sequence[dict[str, Any]], history: Sequence[dict[str, Any]] = ()) -> str:
    """The summary as a Markdown table (module docstring)."""
    return md_table(
        (
            "paper claim (measure)",
            "study",
            "task",
            "A − B",
            "seeds A / B",
            "IQM difference A − B [95% CI]",
            "exact p",
            "verdict",
        ),
        summary_rows(records, history),
    )


__all__ = ["CLAIMS", "Claim", "env_name", "summary_rows", "summary_table"]
