"""``verify``, strict: recompute a record's numbers, check its weights, then replay its episodes.

Three stages, in this order; the first two raise a :class:`RecordError` naming what differs
(nothing is loaded or played after a failure), the third gives the verdict:

1. **Derived numbers** (:func:`agentbench_poad.leaderboard.recompute.check_derived`): every
   summary (per-seed scores, mean, standard errors, success rates, discounted returns, the
   learning curve, wall-time sums) is recomputed from the stored episodes (and the runs) and
   must match (float tolerance); an edited headline number fails here, naming the field.
2. **Hashes** (:meth:`agentbench_poad.leaderboard.loadable.RecordLoads.check_contents`): the
   base model's weights, each seed's adapter files and an ``adapter`` agent kwarg's files must
   have the digests the record states; the model the agent actually loads (an ``lm:`` spec's,
   each run's ``config.json`` model) must be ``model.base`` (same folder or same digest); a
   DataSciCoding dataset must have the digest the record states (``env.dataset``) -- all before
   anything is loaded. ``replay=False`` (``verify --no-replay``) stops here.
3. **Replay**: episodes are re-run from their reset seeds with the record's agent factory
   (its one spec: ``agent.spec``, equal to ``config.agent_spec``; + ``agent_kwargs``) through the
   one evaluation runner
   (:func:`agentbench_poad.evaluation.evaluate_cell`; an agent that plays in batches replays the
   sampled episode's whole batch). By default ``episodes_per_seed`` episodes of *every* seed.

   * A **deterministic** agent -- greedy language model, scripted (oracle) or seeded random
     agent: every record whose ``protocol.greedy`` is not ``false`` -- must reproduce every
     replayed episode exactly: return, score, discounted return, success, length and failure
     (floats within 1e-9). One differing episode fails the record, named in the summary.
   * A **sampled** agent (``protocol.greedy == false``) reproduces when the mean score of the
     replayed episodes is within ``Z * sqrt(2) * s / sqrt(n)`` of their recorded mean, where
     ``s`` is the standard deviation of *all* the record's episode scores (computed from the
     episodes, never a field the record states), ``n`` the number replayed and ``Z`` =
     :data:`SAMPLED_Z` (the difference of two means of ``n`` draws has standard deviation
     ``sqrt(2) * s / sqrt(n)``); the discounted return is judged the same way. Seeded sampling
     on the same hardware usually reproduces exactly anyway; ``exact_matches`` says.

Before stage 1, everything a replay loads is resolved by one function,
:func:`agentbench_poad.leaderboard.loadable.record_loads`, which refuses the rest: a registered
env id (no ``module:`` prefix), env kwargs that are execution kwargs or part of the row's
identity, one agent spec (a user agent's source file inside the record's checkout, with the
sha256 the record states: :func:`~agentbench_poad.leaderboard.agent_source.replay_spec`), the
same agent kwargs shown and replayed, run paths confined to the runs root
(:mod:`agentbench_poad.leaderboard.runs`: no ``..`` escape, no symlink out of it) and an
``adapter`` folder confined to the record's checkout. The replay is given exactly what it
resolved. **Verify imports and runs the user agent's code**: review it before verifying a record
someone else made (docs/leaderboard.md); nothing else a record names is imported.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from agentbench_poad.leaderboard.records import mean_stderr

if TYPE_CHECKING:
    from agentbench_poad.leaderboard.loadable import RecordLoads

#: How many standard deviations (of the difference of means) a sampled agent may drift.
SAMPLED_Z = 3.0
#: Float tolerance of a deterministic replay.
EXACT_TOL = 1e-9


@dataclass
class VerifyResult:
    """The outcome of :func:`verify_record`.

    ``deterministic`` says which rule judged it (see the module doc); ``mismatches`` names each
    replayed episode that differs from its record. The ``discounted_*`` fields compare the
    replayed episodes' discounted returns (0 sampled and None when the record logs none).
    """

    record_id: str
    sampled: int
    recorded_mean: float
    rerun_mean: float
    tolerance: float
    exact_matches: int
    reproduced: bool
    episodes: list[dict[str, Any]] = field(default_factory=list)
    discounted_sampled: int = 0
    recorded_discounted_mean: float | None = None
    rerun_discounted_mean: float | None = None
    discounted_tolerance: float | None = None
    deterministic: bool = True
    derived_checked: int = 0
    hashes_checked: bool = False
    mismatches: list[str] = field(default_factory=list)
    replayed: bool = True

    @property
    def difference(self) -> float:
        return self.rerun_mean - self.recorded_mean

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"difference": self.difference}

    def summary(self) -> str:
        if not self.replayed:
            return (
                f"CHECKED (not replayed): {self.record_id}: {self.derived_checked} derived "
                f"numbers recomputed, weights "
                f"{'checked' if self.hashes_checked else 'not hashed (no model)'}, what a replay "
                "loads resolved and checked; run without --no-replay to replay its episodes"
            )
        verdict = "REPRODUCED" if self.reproduced else "NOT REPRODUCED"
        rule = (
            "deterministic agent: every episode must match"
            if self.deterministic
            else "sampled agent: mean within tolerance"
        )
        discounted = ""
        if self.discounted_sampled:
            rerun = (
                "missing"
                if self.rerun_discounted_mean is None
                else f"{self.rerun_discounted_mean:.4f}"
            )
            discounted = (
                f"; discounted return: recorded mean {self.recorded_discounted_mean:.4f}, "
                f"re-run mean {rerun} (tolerance {self.discounted_tolerance:.4g})"
            )
        text = (
            f"{verdict}: {self.record_id}: {self.derived_checked} derived numbers recomputed, "
            f"weights {'checked' if self.hashes_checked else 'not hashed (no model)'}; re-ran "
            f"{self.sampled} episode(s) ({rule}); recorded mean {self.recorded_mean:.4f}, "
            f"re-run mean {self.rerun_mean:.4f}, difference {self.difference:+.4f} (tolerance "
            f"{self.tolerance:.4g}){discounted}; {self.exact_matches}/{self.sampled} episodes "
            "identical"
        )
        if self.mismatches and (self.deterministic or not self.reproduced):
            shown = self.mismatches[:5]
            more = f" (and {len(self.mismatches) - 5} more)" if len(self.mismatches) > 5 else ""
            text += "\n  differs: " + "\n  differs: ".join(shown) + more
        return text


def sample_indices(total: int, k: int) -> list[int]:
    """``k`` evenly spaced episode indices out of ``total`` (deterministic, covers the range)."""
    if k >= total:
        return list(range(total))
    return sorted({round(i * (total - 1) / max(k - 1, 1)) for i in range(k)})


def is_deterministic(record: dict[str, Any]) -> bool:
    """Whether the record's agent must replay exactly (every agent but a sampling LM)."""
    return record["protocol"].get("greedy") is not False


def verify_record(
    record: dict[str, Any],
    *,
    episodes_per_seed: int = 3,
    max_seeds: int | None = None,
    action_timeout: float | None = None,
    progress: bool = False,
    runs_root: str | os.PathLike | None = None,
    download: bool | None = None,
    agent_root: str | os.PathLike | None = None,
    trust_unhashed: bool = False,
    replay: bool = True,
) -> VerifyResult:
    """Recompute, check the hashes of, then replay ``record`` (see the module doc).

    Args:
        record: a validated run record.
        episodes_per_seed: how many episodes of each seed to replay (at least one).
        max_seeds: replay only the first ``max_seeds`` seeds (default: all; the recomputation
            and hash checks always cover every seed).
        action_timeout: per-action deadline (default: the record's own).
        progress: tqdm progress bar.
        runs_root: the folder the record's run paths are relative to (default:
            ``$AGENTBENCH_POAD_RUNS`` or the checkout's ``runs/``).
        download: fetch a named base model that is not cached (default: unless offline).
        agent_root: the folder a user agent's file must lie in (default: the record's checkout,
            :func:`~agentbench_poad.leaderboard.agent_source.agent_root`).
        trust_unhashed: replay a user agent whose record states no source hash (made before
            records carried one); the caller has reviewed the file.
        replay: replay episodes (stage 3); without it, stages 1 and 2 and every check of what
            a replay would load run, and nothing is imported or played (``--no-replay``).

    Raises:
        RecordError: the record names something no tool may load
            (:class:`~agentbench_poad.leaderboard.loadable.NotLoadable`), the record's agent
            cannot be rebuilt, or is not the one it shows (two
            specs, a source hash that differs or is absent, an agent file outside its root:
            :class:`~agentbench_poad.leaderboard.agent_source.AgentSourceMismatch`,
            :class:`~agentbench_poad.leaderboard.runs.PathEscapes`), a derived number differs
            (:class:`~agentbench_poad.leaderboard.recompute.DerivedMismatch`), a hash differs or a
            weight file is missing (:class:`~agentbench_poad.leaderboard.provenance.HashMismatch`),
            or a run is not in the runs root.
    """
    from agentbench_poad.leaderboard.loadable import record_loads
    from agentbench_poad.leaderboard.recompute import check_derived

    if episodes_per_seed < 1:
        raise ValueError(f"episodes_per_seed must be >= 1, got {episodes_per_seed}")
    loads = record_loads(
        record, runs_root=runs_root, agent_root=agent_root, trust_unhashed=trust_unhashed
    )
    derived = check_derived(record, run_dirs=loads.runs)
    loads.check_contents(record, runs_root=runs_root, download=download)
    hashed = bool(record["model"].get("base")) or bool(loads.runs)
    if not replay:
        return VerifyResult(
            record_id=record["record_id"],
            sampled=0,
            recorded_mean=float(record["scores"]["mean"]),
            rerun_mean=float(record["scores"]["mean"]),
            tolerance=EXACT_TOL,
            exact_matches=0,
            reproduced=True,
            deterministic=is_deterministic(record),
            derived_checked=derived,
            hashes_checked=hashed,
            replayed=False,
        )
    rows = _replay(record, loads, episodes_per_seed, max_seeds, action_timeout, progress)
    deterministic = is_deterministic(record)
    recorded_mean = _mean([r["recorded"] for r in rows])
    rerun_mean = _mean([r["rerun"] for r in rows])
    mismatches = [_describe(r) for r in rows if not _identical(r)]
    exact = len(rows) - len(mismatches)
    all_scores = [
        e.get("score", e["return"]) for s in record["scores"]["per_seed"] for e in s["episodes"]
    ]
    tolerance = EXACT_TOL if deterministic else _sampled_tolerance(all_scores, len(rows))
    discounted, discounted_ok = _judge_discounted(record, rows, deterministic)
    if deterministic:
        reproduced = not mismatches
    else:
        reproduced = abs(rerun_mean - recorded_mean) <= tolerance and discounted_ok
    return VerifyResult(
        record_id=record["record_id"],
        sampled=len(rows),
        recorded_mean=recorded_mean,
        rerun_mean=rerun_mean,
        tolerance=tolerance,
        exact_matches=exact,
        reproduced=reproduced,
        episodes=rows,
        deterministic=deterministic,
        derived_checked=derived,
        hashes_checked=hashed,
        mismatches=mismatches,
        **discounted,
    )


def _replay(
    record: dict[str, Any],
    loads: RecordLoads,
    episodes_per_seed: int,
    max_seeds: int | None,
    action_timeout: float | None,
    progress: bool,
) -> list[dict[str, Any]]:
    from tqdm.auto import tqdm

    from agentbench_poad.evaluation import EvaluationRequest, evaluate_cell

    config = record["config"]
    timeout = action_timeout if action_timeout is not None else config.get("action_timeout_s")
    per_seed = record["scores"]["per_seed"]
    if max_seeds is not None:
        per_seed = per_seed[:max_seeds]
    rows = []
    for seed_entry in tqdm(per_seed, disable=not progress, desc="verify", unit="seed"):
        seed, recorded_episodes = int(seed_entry["seed"]), seed_entry["episodes"]
        sampled = [
            recorded_episodes[i] for i in sample_indices(len(recorded_episodes), episodes_per_seed)
        ]
        request = EvaluationRequest(  # what record_loads resolved and checked, nothing else
            agent=loads.agent_spec,
            env_id=loads.env_id,
            seed=seed,
            episodes=int(record["protocol"]["episodes_per_seed"]),
            indices=tuple(e["index"] for e in sampled),
            agent_kwargs=loads.agent_kwargs,
            env_kwargs=loads.env_kwargs,
            action_timeout=timeout,
            batch_size=record["protocol"].get("batch_size"),
            discount=record["protocol"].get("discount"),
        )
        rerun = {e.index: e for e in evaluate_cell(request).episodes}
        for recorded in sampled:
            episode = rerun[recorded["index"]]
            rows.append(
                {
                    "seed": seed,
                    "index": recorded["index"],
                    "recorded": recorded.get("score", recorded["return"]),
                    "rerun": episode.score,
                    "recorded_return": recorded["return"],
                    "rerun_return": episode.episode_return,
                    "recorded_discounted": recorded.get("discounted_return"),
                    "rerun_discounted": episode.discounted_return,
                    "recorded_success": bool(recorded["success"]),
                    "rerun_success": episode.success,
                    "recorded_length": int(recorded["length"]),
                    "rerun_length": episode.length,
                    "recorded_failed": bool(recorded["failed"]),
                    "rerun_failed": episode.failed,
                    "reason": episode.reason,
                }
            )
    return rows


def _mean(values: list[float]) -> float:
    return mean_stderr(values)[0] if values else 0.0


def _sampled_tolerance(scores: list[float], n: int) -> float:
    """``SAMPLED_Z * sqrt(2) * s / sqrt(n)``, ``s`` the episodes' standard deviation."""
    if len(scores) < 2 or n < 1:
        return EXACT_TOL
    mean = sum(scores) / len(scores)
    sd = math.sqrt(sum((v - mean) ** 2 for v in scores) / (len(scores) - 1))
    return max(SAMPLED_Z * math.sqrt(2.0) * sd / math.sqrt(n), EXACT_TOL)


def _close(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and abs(a - b) <= EXACT_TOL


def _differences(row: dict[str, Any]) -> list[str]:
    out = []
    for key, label in (("", "score"), ("_return", "return")):
        recorded, rerun = row[f"recorded{key}"], row[f"rerun{key}"]
        if not _close(recorded, rerun):
            out.append(f"{label} {recorded!r} -> {rerun!r}")
    if row["recorded_discounted"] is not None and not _close(
        row["recorded_discounted"], row["rerun_discounted"]
    ):
        out.append(
            f"discounted return {row['recorded_discounted']!r} -> {row['rerun_discounted']!r}"
        )
    for key in ("success", "length", "failed"):
        if row[f"recorded_{key}"] != row[f"rerun_{key}"]:
            out.append(f"{key} {row[f'recorded_{key}']!r} -> {row[f'rerun_{key}']!r}")
    return out


def _identical(row: dict[str, Any]) -> bool:
    """Whether a re-run episode matches its record in every stored outcome."""
    return not _differences(row)


def _describe(row: dict[str, Any]) -> str:
    reason = f" (re-run failed: {row['reason']})" if row["rerun_failed"] and row["reason"] else ""
    return f"seed {row['seed']} episode {row['index']}: " + ", ".join(_differences(row)) + reason


def _judge_discounted(
    record: dict[str, Any], rows: list[dict[str, Any]], deterministic: bool
) -> tuple[dict[str, Any], bool]:
    """The discounted-return part of the verdict, over the rows whose record logged one.

    Returns the :class:`VerifyResult` fields and whether it reproduces (True when nothing was
    compared: a record made before episodes logged a discounted return). A sampled agent's
    tolerance is derived from all the record's episodes' discounted returns, as for the score.
    """
    compared = [r for r in rows if r["recorded_discounted"] is not None]
    if not compared:
        return {}, True
    recorded_mean = _mean([r["recorded_discounted"] for r in compared])
    if deterministic:
        tolerance = EXACT_TOL
    else:
        values = [
            e["discounted_return"]
            for s in record["scores"]["per_seed"]
            for e in s["episodes"]
            if e.get("discounted_return") is not None
        ]
        tolerance = _sampled_tolerance(values, len(compared))
    reruns = [r["rerun_discounted"] for r in compared]
    rerun_mean = None if any(v is None for v in reruns) else _mean(reruns)
    fields = {
        "discounted_sampled": len(compared),
        "recorded_discounted_mean": recorded_mean,
        "rerun_discounted_mean": rerun_mean,
        "discounted_tolerance": tolerance,
    }
    return fields, rerun_mean is not None and abs(rerun_mean - recorded_mean) <= tolerance
