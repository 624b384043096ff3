"""``verify``: re-run a sample of a record's episodes from its config and compare.

Every episode of a record carries its reset seed, and the record's config names the agent
factory (``agent_spec`` + ``agent_kwargs``), so any episode can be replayed with the same runner
that made it (:func:`agentbench_poad.evaluation.evaluate_cell`): on its own, or, for an agent that
plays in batches (``protocol.batch_size``), with the rest of its batch. The
verdict compares the mean score of the sampled episodes as recorded with the mean of their
re-runs: the record *reproduces* when the difference is within the record's standard error
(or, for a single-seed record, the standard error of the sampled episodes' recorded scores;
a deterministic agent must match exactly).

Records whose episodes log a discounted return (``discounted_return``, with ``protocol.discount``)
are replayed with that discount and their discounted returns are judged the same way (mean of
the sampled episodes within the standard error over seeds of ``mean_discounted_return``); an
episode is identical only when both numbers match. Records made before episodes logged it are
judged on the score alone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from agentbench_poad.leaderboard.records import RecordError, mean_stderr


@dataclass
class VerifyResult:
    """The outcome of :func:`verify_record`.

    The ``discounted_*`` fields compare the sampled episodes' discounted returns (0 sampled and
    None when the record logs none: the verdict then rests on the score alone).
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

    @property
    def difference(self) -> float:
        return self.rerun_mean - self.recorded_mean

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"difference": self.difference}

    def summary(self) -> str:
        verdict = "REPRODUCED" if self.reproduced else "NOT REPRODUCED"
        discounted = ""
        if self.discounted_sampled:
            rerun = (
                "missing"
                if self.rerun_discounted_mean is None
                else f"{self.rerun_discounted_mean:.4f}"
            )
            discounted = (
                f"; discounted return: recorded mean {self.recorded_discounted_mean:.4f}, "
                f"re-run mean {rerun} (tolerance {self.discounted_tolerance:.4f})"
            )
        return (
            f"{verdict}: {self.record_id}: re-ran {self.sampled} episode(s); recorded mean "
            f"{self.recorded_mean:.4f}, re-run mean {self.rerun_mean:.4f}, difference "
            f"{self.difference:+.4f} (tolerance {self.tolerance:.4f}){discounted}; "
            f"{self.exact_matches}/{self.sampled} episodes identical"
        )


def sample_indices(total: int, k: int) -> list[int]:
    """``k`` evenly spaced episode indices out of ``total`` (deterministic, covers the range)."""
    if k >= total:
        return list(range(total))
    return sorted({round(i * (total - 1) / max(k - 1, 1)) for i in range(k)})


def verify_record(
    record: dict[str, Any],
    *,
    episodes_per_seed: int = 3,
    max_seeds: int | None = None,
    action_timeout: float | None = None,
    progress: bool = False,
) -> VerifyResult:
    """Re-run a sample of ``record``'s episodes and judge whether its score reproduces.

    Args:
        record: a validated run record.
        episodes_per_seed: how many episodes of each seed to replay.
        max_seeds: replay only the first ``max_seeds`` seeds (default: all).
        action_timeout: per-action deadline (default: the record's own).
        progress: tqdm progress bar.

    Raises:
        RecordError: the record's config names no agent factory to rebuild the agent from.
    """
    from tqdm.auto import tqdm

    from agentbench_poad.evaluation import EvaluationRequest, evaluate_cell, reset_seed

    config = record["config"]
    spec = config.get("agent_spec") or record["agent"].get("spec")
    if not spec:
        raise RecordError(
            f"{record['record_id']}: the record names no agent factory (config.agent_spec), so "
            "its agent cannot be rebuilt; records made with `agentbench-poad evaluate --agent "
            "module:Factory` or `leaderboard add --run` can be verified"
        )
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
        for recorded in sampled:
            if recorded["reset_seed"] != reset_seed(seed, recorded["index"]):
                raise RecordError(
                    f"{record['record_id']}: episode {recorded['index']} of seed {seed} reset "
                    f"with {recorded['reset_seed']}, not by the protocol's rule "
                    f"({record['protocol'].get('reset_seed_rule')}); it cannot be replayed"
                )
        request = EvaluationRequest(
            agent=spec,
            env_id=record["env"]["id"],
            seed=seed,
            episodes=int(record["protocol"]["episodes_per_seed"]),
            indices=tuple(e["index"] for e in sampled),
            agent_kwargs=config.get("agent_kwargs") or {},
            env_kwargs=config.get("env_kwargs") or {},
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
                    "recorded_discounted": recorded.get("discounted_return"),
                    "rerun_discounted": episode.discounted_return,
                    "rerun_failed": episode.failed,
                    "reason": episode.reason,
                }
            )
    recorded_mean, sample_se = mean_stderr([r["recorded"] for r in rows])
    rerun_mean, _ = mean_stderr([r["rerun"] for r in rows])
    tolerance = record["scores"]["stderr"] if len(record["scores"]["per_seed"]) > 1 else sample_se
    tolerance = max(tolerance, 1e-9)
    exact = sum(_identical(r) for r in rows)
    discounted, discounted_ok = _judge_discounted(record, rows)
    return VerifyResult(
        record_id=record["record_id"],
        sampled=len(rows),
        recorded_mean=recorded_mean,
        rerun_mean=rerun_mean,
        tolerance=tolerance,
        exact_matches=exact,
        reproduced=abs(rerun_mean - recorded_mean) <= tolerance and discounted_ok,
        episodes=rows,
        **discounted,
    )


def _identical(row: dict[str, Any]) -> bool:
    """Whether a re-run episode matches its record: the score, and the discounted return when
    the record logged one."""
    if abs(row["recorded"] - row["rerun"]) > 1e-9:
        return False
    if row["recorded_discounted"] is None:
        return True
    return (
        row["rerun_discounted"] is not None
        and abs(row["recorded_discounted"] - row["rerun_discounted"]) <= 1e-9
    )


def _judge_discounted(
    record: dict[str, Any], rows: list[dict[str, Any]]
) -> tuple[dict[str, Any], bool]:
    """The discounted-return part of the verdict, over the rows whose record logged one.

    Returns the :class:`VerifyResult` fields of the comparison and whether it reproduces (True
    when nothing was compared: a record made before episodes logged a discounted return).

    Tolerance: the standard error over seeds of the seeds' ``mean_discounted_return`` (when the
    record has two or more seeds that all state it), else that of the sampled episodes' recorded
    values. A re-run that logs no discounted return does not reproduce.
    """
    compared = [r for r in rows if r["recorded_discounted"] is not None]
    if not compared:
        return {}, True
    recorded_mean, sample_se = mean_stderr([r["recorded_discounted"] for r in compared])
    seed_means = [s.get("mean_discounted_return") for s in record["scores"]["per_seed"]]
    if len(seed_means) > 1 and all(m is not None for m in seed_means):
        tolerance = mean_stderr(seed_means)[1]
    else:
        tolerance = sample_se
    tolerance = max(tolerance, 1e-9)
    reruns = [r["rerun_discounted"] for r in compared]
    rerun_mean = None if any(v is None for v in reruns) else mean_stderr(reruns)[0]
    fields = {
        "discounted_sampled": len(compared),
        "recorded_discounted_mean": recorded_mean,
        "rerun_discounted_mean": rerun_mean,
        "discounted_tolerance": tolerance,
    }
    return fields, rerun_mean is not None and abs(rerun_mean - recorded_mean) <= tolerance
