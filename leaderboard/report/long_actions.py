"""The tables of the paper's long-action claims in docs/results.md (``leaderboard results-tables``,
:mod:`.results_tables`).

* ``margins:A-B`` (or ``margins:A-B:ENV,ENV,...``): one agent's margin over another, env by env,
  and, between every env with open (generated) actions and every env with restricted
  (candidate) actions, whether the margin is larger where actions are long. POAD's case is
  credit assignment inside long actions; the paper's largest POAD − NTPO margin is on
  DataSciCoding (generated programs), so ``margins:poad-ntpo`` sets that margin beside the
  margin on Overcooked. Scores of two tasks are on different scales (an AUC, a dish count), so
  the margins are compared as probabilities of improvement, P(A > B), which are not
  (:func:`.stats.improvement_gap`).
* ``best-code:BASELINE``: per open-action env, the best program each trained agent found during
  training (its reward, the mean ROC AUC over the env's fixed splits) beside a fixed baseline
  agent's score on the same splits, e.g. ``best-code:scripted-forest`` (scikit-learn's default
  random forest).

Verdict words follow :func:`.stats.verdict` for a margin on one env. A gap between two envs'
margins has a bootstrap CI but no exact test, so it never gets a verdict word: it gives its
direction, and says whether its CI excludes zero, once every sample has ten seeds; with fewer it
is "exploratory: direction only".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentbench_poad.leaderboard.report.common import (
    Inputs,
    agent_label,
    md_table,
    seed_scores,
)
from agentbench_poad.leaderboard.report.comparison import budget_difference, compare
from agentbench_poad.leaderboard.report.fair_tables import (
    difference_cell,
    estimate_cell,
    improvement_cell,
    model_suffix,
    records_by_model,
)
from agentbench_poad.leaderboard.report.stats import (
    MIN_VERDICT_SEEDS,
    Estimate,
    improvement_gap,
    p_text,
    permutation_p,
    verdict,
)


def is_open_action(record: dict[str, Any]) -> bool:
    """The env's actions are generated text (DataSciCoding's programs), not a choice among
    candidate actions."""
    return bool(record["env"].get("open_action"))


def pairs_by_env(
    inputs: Inputs, a: str, b: str, env_ids: Sequence[str] | None = None
) -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """``(env id, where, record of a, record of b)`` for every env (of ``env_ids``, default:
    all) where both agents have a record of the same base model and training env; ``where``
    names that model and training env (the label less the agent's name)."""
    found = []
    for env_id in env_ids or sorted(inputs.by_env):
        for by_agent in records_by_model(inputs.by_env.get(env_id, [])).values():
            ra, rb = by_agent.get(a), by_agent.get(b)
            if ra is not None and rb is not None:
                found.append((env_id, model_suffix(ra), ra, rb))
    return found


def _actions_text(record: dict[str, Any]) -> str:
    return "open (generated)" if is_open_action(record) else "restricted (candidates)"


def gap_reading(gap: Estimate, first: str, second: str) -> str:
    """The words for P(A > B) on ``first`` minus on ``second``: a direction, never a verdict
    (no exact test of a difference of margins)."""
    if gap.point == 0:
        direction = "equal margins"
    else:
        direction = f"margin larger on {first if gap.point > 0 else second}"
    if gap.runs < MIN_VERDICT_SEEDS:
        return f"exploratory: direction only ({direction})"
    if gap.excludes(0.0):
        return f"{direction}; the CI excludes 0 (no exact test of a gap: not a verdict)"
    return f"{direction}; the CI includes 0"


def margin_table(inputs: Inputs, a: str, b: str, env_ids: Sequence[str] | None = None) -> str:
    """Agent ``a``'s margin over agent ``b`` per env (difference of IQMs, P(A > B), the exact
    permutation p, the verdict), then the gap between the margins on each open-action env and
    each restricted-action env (:func:`.stats.improvement_gap`, :func:`gap_reading`). Two
    records not evaluated or trained alike (:func:`.comparison.budget_difference`) are named,
    not compared."""
    a, b = a.lower(), b.lower()
    pair = f"{a.upper()} − {b.upper()}"
    rows, compared = [], []
    for env_id, where, ra, rb in pairs_by_env(inputs, a, b, env_ids):
        apart = budget_difference(ra, rb)
        if apart is not None:
            no = ("--",) * 4
            rows.append((env_id, where, _actions_text(ra), *no, f"not compared: {apart}"))
            continue
        diff, poi = compare(ra, rb)
        p = permutation_p(seed_scores(ra), seed_scores(rb))
        seeds = f"{len(seed_scores(ra))} / {len(seed_scores(rb))}"
        rows.append(
            (
                env_id,
                where,
                _actions_text(ra),
                seeds,
                difference_cell(diff),
                improvement_cell(poi),
                p_text(p),
                verdict(diff, p, higher=f"{a.upper()} higher", lower=f"{b.upper()} higher"),
            )
        )
        compared.append((env_id, ra, rb))
    if not rows:
        return f"(no env has records of both {a.upper()} and {b.upper()} yet)"
    margins = md_table(
        (
            "env",
            "model [training env]",
            "actions",
            f"seeds {a.upper()} / {b.upper()}",
            f"IQM difference {pair} [95% CI]",
            f"P({a.upper()} > {b.upper()}) [95% CI]",
            "exact p",
            "verdict",
        ),
        rows,
    )
    gaps = []
    for long_env, la, lb in (c for c in compared if is_open_action(c[1])):
        for short_env, sa, sb in (c for c in compared if not is_open_action(c[1])):
            gap = improvement_gap(
                seed_scores(la), seed_scores(lb), seed_scores(sa), seed_scores(sb)
            )
            gaps.append(
                (
                    long_env,
                    short_env,
                    estimate_cell(gap, "+.2f"),
                    gap_reading(gap, long_env, short_env),
                )
            )
    if not gaps:
        return (
            margins + "\n\n(no pair of an open-action env and a restricted-action env "
            "with both agents compared yet: no gap between margins)"
        )
    gap_table = md_table(
        (
            "open-action env (long actions)",
            "restricted-action env",
            f"P({a.upper()} > {b.upper()}) there − here [95% CI]",
            "reading",
        ),
        gaps,
    )
    return f"{margins}\n\n{gap_table}"


def best_code_table(inputs: Inputs, baseline: str) -> str:
    """Per open-action env with a record of ``baseline``: the baseline's score (mean and range
    over its seeds), then each trained record's best code during training (the highest reward
    any program earned, over all its seeds, with the seed) and its difference from the
    baseline's mean. The best code is a maximum over every program the agent wrote, so it is
    selected after the fact and biased upwards; the baseline is one fixed program."""
    baseline = baseline.lower()
    rows = []
    for env_id in sorted(inputs.by_env):
        recs = inputs.by_env[env_id]
        base = [r for r in recs if r["agent"]["name"].lower() == baseline]
        if not base or not is_open_action(base[0]):
            continue
        scores = seed_scores(base[0])
        mean = sum(scores) / len(scores)
        base_text = f"{mean:.3f} (seeds {min(scores):.3f}–{max(scores):.3f})"
        trained = [
            r
            for r in recs
            if r.get("training")
            and (r["training"].get("best_code") or {}).get("reward") is not None
        ]
        if not trained:
            rows.append((env_id, "--", base_text, "--", "--", "no trained record yet"))
            continue
        for r in sorted(trained, key=agent_label):
            best = r["training"]["best_code"]
            seed = f", seed {best['seed']}" if "seed" in best else ""
            gap = float(best["reward"]) - mean
            rows.append(
                (
                    env_id,
                    agent_label(r),
                    base_text,
                    f"{float(best['reward']):.3f}{seed}",
                    f"{gap:+.3f}",
                    "above the baseline" if gap > 0 else "not above the baseline",
                )
            )
    if not rows:
        return f"(no open-action env has a record of {baseline!r} yet)"
    return md_table(
        (
            "env",
            "agent",
            f"{baseline} (mean ROC AUC, range over seeds)",
            "best code during training (reward)",
            "best − baseline",
            "reading",
        ),
        rows,
    )
