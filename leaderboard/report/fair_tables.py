"""The fair comparison's tables of docs/results.md (``leaderboard results-tables``,
:mod:`.results_tables`): each agent against POAD (``comparison``), credit assignment pair by
pair (``credit``), the shared KL guard's policy steps per trained record (``guard``) and a
study's tuning from its runs (``tuning:SPEC:OUT``). Verdict words follow the CIs, the exact
permutation p and the seed counts (:func:`.stats.verdict`); a trained row that scores below the
random row of its task and cap is flagged "[below random: MEAN]" (:func:`.common.below_random`);
two records of unequal budgets are named, not compared
(:func:`.comparison.budget_difference`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from agentbench_poad.leaderboard.records import record_study
from agentbench_poad.leaderboard.report.common import (
    REFERENCE_AGENT,
    Inputs,
    agent_label,
    below_random_tag,
    is_anchor,
    md_table,
    seed_scores,
    thousands,
)
from agentbench_poad.leaderboard.report.comparison import (
    budget_difference,
    compare,
    iqm_cell,
    reference_record,
)
from agentbench_poad.leaderboard.report.stats import (
    Estimate,
    iqm_estimate,
    p_text,
    permutation_p,
    verdict,
)


def estimate_cell(e: Estimate, spec: str) -> str:
    """``point [low, high]`` in the format ``spec`` (e.g. ``"+.3f"``), or ``point (n = 1: no
    CI)`` without an interval."""
    if e.low is None or e.high is None:
        return f"{e.point:{spec}} (n = {e.runs}: no CI)"
    return f"{e.point:{spec}} [{e.low:{spec}}, {e.high:{spec}}]"


def difference_cell(diff: Estimate) -> str:
    """A difference of IQMs with its CI, as every comparison table prints it."""
    return estimate_cell(diff, "+.3f")


def improvement_cell(poi: Estimate) -> str:
    """A probability of improvement with its CI, as every comparison table prints it."""
    return estimate_cell(poi, ".2f")


def records_by_model(records: Sequence[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """One env's trained and untrained agents (anchors aside), grouped by (base model, training
    env), each group by lower-case agent name: the records a pair of agents is compared on."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for r in records:
        if is_anchor(r):
            continue
        key = (str(r["model"].get("base")), str((r.get("training") or {}).get("env_id")))
        groups.setdefault(key, {})[r["agent"]["name"].lower()] = r
    return {key: groups[key] for key in sorted(groups)}


def _iqm(record: dict[str, Any], inputs: Inputs) -> str:
    """A record's IQM with its CI, flagged when it lies below random."""
    return iqm_cell(iqm_estimate(seed_scores(record))) + below_random_tag(record, inputs.records)


def comparison_table(inputs: Inputs, env_ids: Sequence[str] | None = None) -> str:
    """Each agent against POAD per env: IQM over seeds with its 95 % CI, difference of IQMs and
    P(agent > POAD) with their CIs, the exact permutation p over seeds, and the verdict they
    allow (:func:`.stats.verdict`: "better"/"worse" needs 10 seeds per agent, a CI excluding
    zero and p < 0.05; fewer seeds give "exploratory: direction only"); an agent not evaluated or
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
                        _iqm(r, inputs),
                        _iqm(ref, inputs),
                        "--",
                        "--",
                        "--",
                        f"not compared: {apart}",
                    )
                )
                continue
            diff, poi = compare(r, ref)
            p = permutation_p(seed_scores(r), seed_scores(ref))
            rows.append(
                (
                    env_id,
                    agent_label(r),
                    _iqm(r, inputs),
                    _iqm(ref, inputs),
                    difference_cell(diff),
                    improvement_cell(poi),
                    p_text(p),
                    verdict(diff, p, higher="agent higher", lower="POAD higher"),
                )
            )
    return md_table(
        (
            "env",
            "agent",
            "agent IQM [95% CI]",
            f"{REFERENCE_AGENT.upper()} IQM [95% CI]",
            "IQM difference [95% CI]",
            f"P(agent > {REFERENCE_AGENT.upper()}) [95% CI]",
            "exact p",
            "verdict",
        ),
        rows,
    )


#: The pairs of the credit-assignment table, (A, B): step-level group credit (GiGPO) and
#: episode-level group credit (GRPO) against the token-level critic (POAD); what GiGPO's
#: step-level term adds to GRPO; no discount inside an action (POAD) against a discount per
#: token (NTPO); a critic per token (POAD) against a critic per action (TWOSOME); the paper
#: code's ARCHER against NTPO, which differ only in the action-boundary bootstrap (the value
#: before the next action's last token against its first); the published ArCHer's
#: utterance-level off-policy critic (Q, V, target network; its advantage on every token)
#: against POAD's token-level on-policy critic.
CREDIT_PAIRS: tuple[tuple[str, str], ...] = (
    ("gigpo", "poad"),
    ("grpo", "poad"),
    ("gigpo", "grpo"),
    ("poad", "ntpo"),
    ("poad", "twosome"),
    ("archer-adrl", "ntpo"),
    ("archer", "poad"),
)


class PairCells(NamedTuple):
    """Two records set side by side (:func:`pair_cells`): the IQM difference A − B (None when
    they are not compared) and the table cells."""

    difference: Estimate | None
    difference_text: str
    improvement_text: str
    p_text: str
    verdict: str


def pair_cells(a: dict[str, Any], b: dict[str, Any], a_name: str, b_name: str) -> PairCells:
    """Two records of one env set side by side: the difference of IQMs A − B and P(A > B) with
    their 95 % CIs, the exact permutation p and the verdict they allow; for records that were not
    evaluated or trained alike (:func:`.comparison.budget_difference`), no difference, three "--"
    and why they are not compared."""
    apart = budget_difference(a, b)
    if apart is not None:
        return PairCells(None, "--", "--", "--", f"not compared: {apart}")
    diff, poi = compare(a, b)
    p = permutation_p(seed_scores(a), seed_scores(b))
    words = verdict(diff, p, higher=f"{a_name.upper()} higher", lower=f"{b_name.upper()} higher")
    return PairCells(diff, difference_cell(diff), improvement_cell(poi), p_text(p), words)


def model_suffix(record: dict[str, Any]) -> str:
    """What a record's label adds to its agent's name (base model, training env, tags): what
    sets a pair's records apart from others of the env."""
    return agent_label(record)[len(record["agent"]["name"]) :].strip()


def _pair_label(a: dict[str, Any], a_name: str, b_name: str) -> str:
    """``A − B`` and the model and training env of ``a``'s label."""
    where = model_suffix(a)
    return f"{a_name.upper()} − {b_name.upper()}" + (f" {where}" if where else "")


def _pairs(
    records: Sequence[dict[str, Any]],
) -> dict[tuple[str, str, str, tuple[str, str]], tuple]:
    """Every pair of :data:`CREDIT_PAIRS` that ``records`` hold both agents of, by (env, base
    model, training env, (a, b)): the two records. (Agent names may hold hyphens:
    ``archer-adrl``.)"""
    by_env: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_env.setdefault(r["env"]["id"], []).append(r)
    found = {}
    for env_id in sorted(by_env):
        for (base, trained_on), by_agent in records_by_model(by_env[env_id]).items():
            for a_name, b_name in CREDIT_PAIRS:
                a, b = by_agent.get(a_name), by_agent.get(b_name)
                if a is not None and b is not None:
                    found[(env_id, base, trained_on, (a_name, b_name))] = (a, b)
    return found


def credit_table(inputs: Inputs) -> str:
    """Credit assignment, pair by pair (:data:`CREDIT_PAIRS`): per env, where both agents have
    a record of the same base model and training env, the difference of IQMs A − B and
    P(A > B) with their 95 % CIs, the exact permutation p and the verdict they allow
    (:func:`pair_cells`). Records that were not evaluated or trained alike
    (:func:`.comparison.budget_difference`) are named, not compared."""
    rows = []
    for (env_id, _, _, (a_name, b_name)), (a, b) in _pairs(inputs.records).items():
        cells = pair_cells(a, b, a_name, b_name)
        iqms = ("--", "--") if cells.difference is None else (_iqm(a, inputs), _iqm(b, inputs))
        rows.append((env_id, _pair_label(a, a_name, b_name), *iqms, *cells[1:]))
    if not rows:
        return "(no env has records of both agents of any pair yet)"
    return md_table(
        (
            "env",
            "A − B",
            "A IQM [95% CI]",
            "B IQM [95% CI]",
            "IQM difference A − B [95% CI]",
            "P(A > B) [95% CI]",
            "exact p",
            "verdict",
        ),
        rows,
    )


def _verdict_kind(words: str) -> str:
    """A verdict without its direction: "better", "worse", "no significant difference",
    "exploratory: direction only" or "not compared"."""
    return words.split(":")[0] if words.startswith("not compared") else words.split(" (")[0]


def verdict_changes_table(records: Sequence[dict[str, Any]], before: str, after: str) -> str:
    """What a study's verdicts became in a later study of the same pairs: for every pair of
    :data:`CREDIT_PAIRS` that the records of study ``before`` (:func:`record_study`; the
    board's and its history's records together) hold both agents of, its seeds, difference of
    IQMs, exact p and verdict there and in study ``after``, under today's verdict rule
    (:func:`.stats.verdict`), and whether the verdict or the direction changed. A pair that
    ``after`` does not hold yet says so."""
    studies = {before: [], after: []}
    for r in records:
        if record_study(r) in studies:
            studies[record_study(r)].append(r)
    old, new = _pairs(studies[before]), _pairs(studies[after])
    if not old:
        return f"(no pair of agents has records of study {before!r})"
    rows = []
    for key, (a, b) in old.items():
        env_id, _, _, (a_name, b_name) = key
        was = pair_cells(a, b, a_name, b_name)
        cells = [env_id, _pair_label(a, a_name, b_name), _seeds(a, b)]
        cells += [was.difference_text, was.p_text, was.verdict]
        if key not in new:
            rows.append((*cells, "--", "--", "--", f"no record pair of {after} yet", "--"))
            continue
        c, d = new[key]
        now = pair_cells(c, d, a_name, b_name)
        if _verdict_kind(was.verdict) != _verdict_kind(now.verdict):
            change = "verdict changed"
        elif None not in (was.difference, now.difference) and _sign(was.difference) != _sign(
            now.difference
        ):
            change = "direction changed"
        else:
            change = "same"
        cells += [_seeds(c, d), now.difference_text, now.p_text, now.verdict]
        rows.append((*cells, change))
    return md_table(
        (
            "env",
            "A − B",
            f"{before} seeds",
            f"{before} IQM difference [95% CI]",
            f"{before} p",
            f"{before} verdict",
            f"{after} seeds",
            f"{after} IQM difference [95% CI]",
            f"{after} p",
            f"{after} verdict",
            "change",
        ),
        rows,
    )


def _seeds(a: dict[str, Any], b: dict[str, Any]) -> str:
    """The seed counts of a pair's records, "n" or "n against m"."""
    n, m = len(a["scores"]["per_seed"]), len(b["scores"]["per_seed"])
    return str(n) if n == m else f"{n} against {m}"


def _sign(e: Estimate) -> int:
    return (e.point > 0) - (e.point < 0)


def _config_text(record: dict[str, Any]) -> str:
    chosen = ((record.get("training") or {}).get("config_source") or {}).get("chosen")
    if not chosen:
        return "--"
    return _chosen_text(chosen)


def guard_table(inputs: Inputs) -> str:
    """The shared KL guard per training: the configuration its study chose, and the policy
    steps PPO took and the guard skipped, summed over the training runs (docs/agents.md, "One
    KL guard"). The records one training produced (its env and the unseen envs it was evaluated
    on) share a row, which counts them. Records that do not count the steps are left out."""
    trainings: dict[tuple[str, str, str, int, int], int] = {}
    for env_id in sorted(inputs.by_env):
        for r in inputs.by_env[env_id]:
            t = r.get("training") or {}
            taken, skipped = t.get("policy_steps_taken"), t.get("policy_steps_skipped")
            if taken is None or skipped is None:
                continue
            trained_on = t.get("env_id") or env_id
            # the label its records carry on the training env (the column names that env)
            label = agent_label({**r, "env": {**r["env"], "id": trained_on}})
            key = (trained_on, label, _config_text(r), taken, skipped)
            trainings[key] = trainings.get(key, 0) + 1
    if not trainings:
        return "(no record counts the KL guard's policy steps yet)"
    rows = [
        (
            trained_on,
            label,
            config,
            str(count),
            thousands(taken),
            thousands(skipped),
            "--" if taken + skipped == 0 else f"{100 * skipped / (taken + skipped):.1f} %",
        )
        for (trained_on, label, config, taken, skipped), count in sorted(trainings.items())
    ]
    return md_table(
        (
            "trained on",
            "agent",
            "chosen configuration",
            "records",
            "policy steps taken",
            "skipped",
            "share skipped",
        ),
        rows,
    )


def _chosen_text(chosen: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(chosen.items()))


def tuning_table(spec: Path, out: Path, name: str | None = None) -> str:
    """A study's tuning from its committed runs: per agent and configuration, the selection
    rule's score of each tuning seed's run and their mean, the policy steps the KL guard skipped
    over those runs, and which configuration the spec chose (``[tuning.chosen]``, or
    ``[tuning_chosen.NAME]`` for a ``[[tuning]]`` entry). A run not finished yet shows "--" and
    adds no policy steps. ``name`` picks one of several ``[[tuning]]`` protocols (needed when
    the spec has more than one)."""
    from agentbench_poad.leaderboard.from_run import read_policy_steps
    from agentbench_poad.study import load_study
    from agentbench_poad.study.selection import run_scores, tuning_run_done

    study = load_study(spec, out=out)
    protocols = {t.name: t for t in study.tunings}
    if name is not None:
        if name not in protocols:
            raise ValueError(
                f"docs: {spec} has no tuning protocol {name!r}; it has {', '.join(protocols)}"
            )
        tuning = protocols[name]
    elif len(protocols) > 1:
        raise ValueError(
            f"docs: {spec} has several tuning protocols ({', '.join(protocols)}): name one, "
            "tuning:SPEC:OUT:NAME"
        )
    else:
        tuning = study.tuning or next(iter(protocols.values()), None)
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
                    f"{thousands(skipped)} of {thousands(taken + skipped)}"
                    if taken + skipped
                    else "--",
                    "**chosen**" if tuning.chosen.get(agent) == configuration else "",
                )
            )
    return md_table(
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


__all__ = [
    "CREDIT_PAIRS",
    "comparison_table",
    "credit_table",
    "guard_table",
    "model_suffix",
    "pair_cells",
    "tuning_table",
    "verdict_changes_table",
]
