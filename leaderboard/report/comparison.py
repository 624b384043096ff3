"""The comparison with POAD [``pairwise``]: rliable's statistics over seeds, per env.

For every env with a POAD record, each other agent (the random and oracle anchors aside, and
any record :func:`budget_difference` sets apart, whose row says why) gets
its IQM over seeds with a stratified-bootstrap 95 % CI, the difference of IQMs to POAD's with
its CI, and the probability of improvement P(agent > POAD) with its CI (:mod:`.stats`). The
verdict (:func:`.stats.verdict`): "better" or "worse" only with ten seeds per agent, a CI of the
difference excluding zero and an exact permutation p below 0.05; "exploratory: direction only"
with fewer seeds; else "no significant difference" with the direction. A record with one seed gets no interval:
"n/a (n = 1)". Where agents are scored on every task of the paper's Table 1, a performance
profile of their per-seed success rates follows (the fraction of (seed, task) runs above each
threshold).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from agentbench_poad.evaluation import deadline_cuts
from agentbench_poad.leaderboard.report.blocks import (
    Curve,
    CurvePoint,
    Interval,
    IntervalChart,
    Paragraph,
    ProfileChart,
    Row,
    Section,
    Table,
)
from agentbench_poad.leaderboard.report.common import (
    BELOW_RANDOM,
    REFERENCE_AGENT,
    Inputs,
    agent_label,
    below_random_tag,
    budget_text,
    env_steps,
    interval,
    is_anchor,
    seed_scores,
    seed_success,
    seeds_text,
)
from agentbench_poad.leaderboard.report.stats import (
    ALPHA,
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    MIN_VERDICT_SEEDS,
    Estimate,
    iqm_difference,
    iqm_estimate,
    p_text,
    performance_profile,
    permutation_p,
    probability_of_improvement,
    verdict,
)

#: Thresholds of the success-rate performance profile.
PROFILE_THRESHOLDS = tuple(round(t, 2) for t in np.linspace(0.0, 1.0, 21))

HEADER = (
    "env",
    "agent",
    "seeds",
    "IQM [95% CI]",
    "IQM − POAD",
    "95% CI",
    "P(agent > POAD)",
    "95% CI of P",
    "exact p",
    "verdict",
)


def iqm_cell(est: Estimate) -> str:
    return f"{est.point:.3f} {interval(est.low, est.high, est.runs)}"


def compare(record: dict[str, Any], ref: dict[str, Any]) -> tuple[Estimate, Estimate]:
    """(IQM difference to ``ref``, P(record > ref)) over the two records' seeds."""
    a, b = seed_scores(record), seed_scores(ref)
    return iqm_difference(a, b), probability_of_improvement(a, b)


def budget_difference(record: dict[str, Any], ref: dict[str, Any]) -> str | None:
    """Why two records of one env are not compared, or None when they may be.

    Both must be evaluated alike (episodes per seed; greedy or sampled), and neither may have
    episodes that the evaluation's deadline ended
    (:func:`agentbench_poad.evaluation.deadline_cuts`: a score that depends on the machine's
    load decides nothing). Two trained agents must
    also have trained for the same env steps and be evaluated on the same seeds (so that, e.g.,
    an earlier study's three-seed row is not set against a fresh ten-seed row); an untrained
    model's evaluation seeds are only episode seeds and may differ.
    """
    p, q = record["protocol"], ref["protocol"]
    t, u = record.get("training") or {}, ref.get("training") or {}
    reasons = []
    for x in (record, ref):
        if cut := deadline_cuts(x):
            reasons.append(
                f"{cut} episode(s) of {x['agent']['name']} ended by the evaluation deadline "
                "(the machine's load can cause it: re-evaluate with action_timeout = 0)"
            )
    if p.get("greedy") != q.get("greedy"):

        def how(x: dict[str, Any]) -> str:
            return {True: "greedy", False: "sampled"}.get(x.get("greedy"), "unstated")

        reasons.append(f"{how(p)} against {how(q)}")
    if p["episodes_per_seed"] != q["episodes_per_seed"]:
        reasons.append(
            f"{p['episodes_per_seed']} against {q['episodes_per_seed']} episodes per seed"
        )
    if t and u:
        if env_steps(record) is None or env_steps(record) != env_steps(ref):

            def steps(x: dict[str, Any]) -> str:
                return budget_text(x) or "unstated steps"

            reasons.append(f"{steps(record)} against {steps(ref)}")
        if list(p["seeds"]) != list(q["seeds"]):
            reasons.append(f"{seeds_text(p['seeds'])} against {seeds_text(q['seeds'])}")
    return "; ".join(reasons) or None


def reference_record(records: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    refs = [r for r in records if r["agent"]["name"].lower() == REFERENCE_AGENT]
    return refs[0] if refs else None


def _iqm(record: dict[str, Any], inputs: Inputs) -> str:
    """The record's IQM with its CI, flagged where it lies below random."""
    return iqm_cell(iqm_estimate(seed_scores(record))) + below_random_tag(record, inputs.records)


def _uncompared_row(env_id: str, record: dict[str, Any], verdict_text: str, inputs: Inputs) -> Row:
    """A row with the record's IQM and no comparison (POAD itself, or a record set apart)."""
    return Row(
        (
            env_id,
            agent_label(record),
            str(len(record["scores"]["per_seed"])),
            _iqm(record, inputs),
            "--",
            "--",
            "--",
            "--",
            "--",
            verdict_text,
        )
    )


def _rows_for(env_id: str, inputs: Inputs) -> tuple[list[Row], list[Interval]]:
    recs = inputs.by_env.get(env_id, [])
    ref = reference_record(recs)
    if ref is None:
        return [], []
    rows = [_uncompared_row(env_id, ref, "reference", inputs)]
    bars: list[Interval] = []
    others = sorted((r for r in recs if r is not ref and not is_anchor(r)), key=agent_label)
    for r in others:
        apart = budget_difference(r, ref)
        if apart is not None:
            rows.append(_uncompared_row(env_id, r, f"not compared: {apart}", inputs))
            continue
        diff, poi = compare(r, ref)
        p = permutation_p(seed_scores(r), seed_scores(ref))
        rows.append(
            Row(
                (
                    env_id,
                    agent_label(r),
                    str(len(r["scores"]["per_seed"])),
                    _iqm(r, inputs),
                    f"{diff.point:+.3f}",
                    interval(diff.low, diff.high, diff.runs),
                    f"{poi.point:.2f}",
                    interval(poi.low, poi.high, poi.runs, digits=2),
                    p_text(p),
                    verdict(diff, p),
                )
            )
        )
        bars.append(Interval(r["agent"]["name"], agent_label(r), *poi))
    return rows, bars


def _profile(inputs: Inputs) -> list[Any]:
    """A success-rate performance profile over the Table 1 tasks, for every agent scored on all
    of them with the same number of seeds."""
    tasks = inputs.layout_envs("table1")
    if not tasks:
        return []
    groups: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    for env_id in tasks:
        for r in inputs.by_env.get(env_id, []):
            key = (
                r["agent"]["name"],
                r["model"].get("base") or "",
                (r.get("training") or {}).get("env_id") or "",
            )
            groups[key].setdefault(env_id, r)
    matrices: dict[str, np.ndarray] = {}
    agents: dict[str, str] = {}
    for (name, _, _), by_task in sorted(groups.items()):
        if len(by_task) != len(tasks):
            continue
        columns = [seed_success(by_task[e]) for e in tasks]
        if len({len(c) for c in columns}) != 1 or len(columns[0]) < 2:
            continue
        label = agent_label(by_task[tasks[0]], source=True)  # Table 1's row label
        matrices[label] = np.asarray(columns, dtype=float).T  # runs × tasks
        agents[label] = name
    if len(matrices) < 2:
        return []
    profiles, cis = performance_profile(matrices, PROFILE_THRESHOLDS)
    curves = tuple(
        Curve(
            agents[label],
            label,
            tuple(
                CurvePoint(t, float(p), float(lo), float(hi))
                for t, p, lo, hi in zip(PROFILE_THRESHOLDS, profiles[label], *cis[label])
            ),
        )
        for label in matrices
    )
    return [
        Paragraph(
            f"Performance profile over the {len(tasks)} tasks of the paper's Table 1: for each "
            "threshold τ, the fraction of an agent's (seed, task) runs whose success rate "
            "exceeds τ, with its stratified-bootstrap 95% CI (rliable's score distributions, "
            f"{BOOTSTRAP_RESAMPLES} resamples, seed {BOOTSTRAP_SEED}). A curve above another "
            "at every τ is better across the whole distribution of runs, not only on average."
        ),
        ProfileChart(
            "profile-table1-success",
            "Success-rate performance profile, Table 1 tasks",
            PROFILE_THRESHOLDS,
            curves,
            "success rate τ",
            "fraction of runs with success rate > τ",
        ),
    ]


def comparison_section(env_ids: Sequence[str], inputs: Inputs) -> Section:
    rows: list[Row] = []
    charts: list[Any] = []
    for env_id in env_ids:
        env_rows, bars = _rows_for(env_id, inputs)
        rows += env_rows
        if any(b.low is not None for b in bars):
            charts.append(
                IntervalChart(
                    f"improvement-{env_id}",
                    f"{env_id}: probability of improvement over {REFERENCE_AGENT.upper()}",
                    tuple(bars),
                    f"P(agent > {REFERENCE_AGENT.upper()}) with 95% CI",
                    reference=0.5,
                )
            )
    if not rows:
        rows.append(Row(("--", f"(no {REFERENCE_AGENT.upper()} record yet)", *("--",) * 8)))
    intro = Paragraph(
        "Statistics over seeds from rliable (Agarwal et al., NeurIPS 2021): a run is one "
        "training seed, scored by the mean over its episodes. IQM = interquartile mean over "
        "seeds; 95% CIs are percentile stratified bootstraps over seeds "
        f"({BOOTSTRAP_RESAMPLES} resamples, seed {BOOTSTRAP_SEED}), the two agents' seeds "
        "resampled independently for the difference and for P(agent > POAD), the chance that a "
        "seed of the agent scores above a seed of POAD (ties count one half). The exact p is a "
        "two-sided permutation test over seeds (every split of the pooled seeds). The verdict "
        f"says 'better' or 'worse' only with at least {MIN_VERDICT_SEEDS} seeds per agent, "
        f"a CI of the difference that excludes zero and p < {ALPHA}; with fewer seeds it says "
        "'exploratory: direction only'. With one seed there is no interval (n = 1). A trained "
        "row whose IQM CI lies at or below the random row's mean (same task and cap) is "
        f"flagged '[{BELOW_RANDOM}: MEAN]'. The random and oracle anchors are not compared, and "
        "neither is an agent evaluated unlike POAD (greedy or sampled, episodes per seed) or, "
        "both trained, on other seeds or after other training steps: its row says why."
    )
    table = Table(
        f"Comparison with {REFERENCE_AGENT.upper()} per env: IQM over seeds, difference of IQMs "
        f"and probability of improvement, each with its 95% CI",
        HEADER,
        tuple(rows),
        css="pairwise",
    )
    return Section(
        f"Comparison with {REFERENCE_AGENT.upper()}",
        "pairwise",
        (intro, table, *charts, *_profile(inputs)),
    )
