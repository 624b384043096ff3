"""Statistics of the report: rliable's estimates over seeds, plus normalisation between anchors.

The comparison statistics come from rliable (Agarwal et al., "Deep RL at the Edge of the
Statistical Precipice", NeurIPS 2021), not from a bootstrap written here:

* the interquartile mean (IQM) of an agent's per-seed scores with its stratified-bootstrap 95 %
  CI (:func:`iqm_estimate`);
* the difference of two agents' IQMs with its CI, the runs of each agent resampled
  independently (:func:`iqm_difference`);
* the probability of improvement P(X > Y) with its CI (:func:`probability_of_improvement`),
  and the gap between two such probabilities on two tasks (:func:`improvement_gap`);
* performance profiles, the fraction of runs whose score exceeds each threshold
  (:func:`performance_profile`).

Beside the bootstrap, an exact two-sided permutation test over seeds (:func:`permutation_p`),
and the verdict words (:func:`verdict`): "better"/"worse" only with at least ten seeds per
agent, a CI that excludes zero and p < 0.05.

A *run* is one training seed: its score is the record's per-seed score (the mean over that seed's
episodes), so episodes are never resampled as if they were seeds. With fewer than two runs there
is no interval: an :class:`Estimate` then has ``low``/``high`` of ``None`` and the report prints
"n = 1" instead of an interval of width zero.

Every bootstrap is seeded (:data:`BOOTSTRAP_SEED`, printed in the report's captions), so a report
built twice from the same records is the same. rliable 1.2 draws its resampling indices from
numpy's global generator whatever ``random_state`` says (and arch deprecates that argument), so
:func:`_seeded` seeds the global generator for the call and restores it afterwards. rliable is imported lazily, only here.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

#: Bootstrap resamples per interval, and the seed of every bootstrap of the report.
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20240523
#: Coverage of every interval the report prints.
CONFIDENCE = 0.95


class Estimate(NamedTuple):
    """A point estimate over ``runs`` seeds and its bootstrap CI (``None`` with one run)."""

    point: float
    low: float | None
    high: float | None
    runs: int

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    def excludes(self, value: float) -> bool:
        """Whether the CI lies wholly on one side of ``value`` (False without a CI)."""
        return self.has_interval and (self.low > value or self.high < value)  # type: ignore[operator]


def _rliable() -> tuple[Any, Any]:
    try:
        from rliable import library, metrics
    except ImportError as exc:  # pragma: no cover - the extra is part of train and dev
        raise ImportError(
            "the report's statistics need rliable; install it with "
            '`pip install -e ".[report]"` (included in the train and dev extras)'
        ) from exc
    return library, metrics


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Seed numpy's global generator (rliable resamples with it) and restore it afterwards."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def _runs(values: Sequence[float]) -> np.ndarray:
    """Per-seed scores as rliable's (runs × tasks) matrix with one task."""
    array = np.asarray(list(values), dtype=float).reshape(-1, 1)
    if array.size == 0:
        raise ValueError("an estimate needs at least one run (seed)")
    return array


def iqm(scores: np.ndarray) -> float:
    """rliable's ``aggregate_iqm`` (``scipy.stats.trim_mean(scores, 0.25, axis=None)``: sort all
    scores, drop ``int(0.25 n)`` from each end, average the rest), computed without scipy's
    per-call argument checks, which cost more than the statistic inside a 2,000-resample
    bootstrap. Tests hold it equal to ``rliable.metrics.aggregate_iqm``."""
    flat = np.sort(np.asarray(scores, dtype=float), axis=None)
    cut = int(0.25 * flat.size)
    return float(flat[cut : flat.size - cut].mean())


def improvement(scores_x: np.ndarray, scores_y: np.ndarray) -> float:
    """rliable's ``probability_of_improvement`` for one task: the Mann-Whitney U of X over Y
    divided by ``n_x n_y`` (a tie counts one half), counted directly rather than through
    ``scipy.stats.mannwhitneyu`` (the same number; tests hold it equal to rliable's)."""
    x = np.asarray(scores_x, dtype=float).reshape(-1, 1)
    y = np.asarray(scores_y, dtype=float).reshape(1, -1)
    return float(((x > y).sum() + 0.5 * (x == y).sum()) / (x.size * y.size))


def _interval(
    scores: np.ndarray | list[np.ndarray], func: Any, seed: int, resamples: int
) -> tuple[float, float, float]:
    library, _ = _rliable()
    with _seeded(seed):
        points, intervals = library.get_interval_estimates(
            {"x": scores},
            func,
            reps=resamples,
            confidence_interval_size=CONFIDENCE,
        )
    low, high = np.asarray(intervals["x"]).reshape(2)
    return float(np.asarray(points["x"]).reshape(-1)[0]), float(low), float(high)


@functools.lru_cache(maxsize=4096)
def _iqm_cached(values: tuple[float, ...], seed: int, resamples: int) -> Estimate:
    runs = _runs(values)
    if len(values) < 2:
        return Estimate(iqm(runs), None, None, len(values))
    point, low, high = _interval(runs, lambda s: np.array([iqm(s)]), seed, resamples)
    return Estimate(point, low, high, len(values))


def iqm_estimate(
    values: Sequence[float], *, seed: int = BOOTSTRAP_SEED, resamples: int = BOOTSTRAP_RESAMPLES
) -> Estimate:
    """IQM of per-seed scores with its stratified-bootstrap 95 % CI (no CI with one seed)."""
    return _iqm_cached(tuple(float(v) for v in values), seed, resamples)


@functools.lru_cache(maxsize=4096)
def _difference_cached(
    x: tuple[float, ...], y: tuple[float, ...], seed: int, resamples: int
) -> Estimate:
    a, b = _runs(x), _runs(y)
    point = iqm(a) - iqm(b)
    if min(len(x), len(y)) < 2:
        return Estimate(point, None, None, min(len(x), len(y)))
    _, low, high = _interval([a, b], lambda s, t: np.array([iqm(s) - iqm(t)]), seed, resamples)
    return Estimate(point, low, high, min(len(x), len(y)))


def iqm_difference(
    x: Sequence[float],
    y: Sequence[float],
    *,
    seed: int = BOOTSTRAP_SEED,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> Estimate:
    """IQM(x) − IQM(y) with a 95 % CI, the seeds of x and of y resampled independently
    (rliable's stratified independent bootstrap); ``runs`` is the smaller sample."""
    return _difference_cached(
        tuple(float(v) for v in x), tuple(float(v) for v in y), seed, resamples
    )


@functools.lru_cache(maxsize=4096)
def _improvement_cached(
    x: tuple[float, ...], y: tuple[float, ...], seed: int, resamples: int
) -> Estimate:
    a, b = _runs(x), _runs(y)
    point = improvement(a, b)
    if min(len(x), len(y)) < 2:
        return Estimate(point, None, None, min(len(x), len(y)))
    _, low, high = _interval([a, b], lambda s, t: np.array([improvement(s, t)]), seed, resamples)
    return Estimate(point, low, high, min(len(x), len(y)))


def probability_of_improvement(
    x: Sequence[float],
    y: Sequence[float],
    *,
    seed: int = BOOTSTRAP_SEED,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> Estimate:
    """P(X > Y): the chance that a seed of X scores above a seed of Y (ties count one half;
    the Mann-Whitney U statistic over both samples), with its 95 % CI."""
    return _improvement_cached(
        tuple(float(v) for v in x), tuple(float(v) for v in y), seed, resamples
    )


@functools.lru_cache(maxsize=4096)
def _improvement_gap_cached(
    x1: tuple[float, ...],
    y1: tuple[float, ...],
    x2: tuple[float, ...],
    y2: tuple[float, ...],
    seed: int,
    resamples: int,
) -> Estimate:
    samples = [_runs(v) for v in (x1, y1, x2, y2)]
    point = improvement(samples[0], samples[1]) - improvement(samples[2], samples[3])
    runs = min(len(v) for v in (x1, y1, x2, y2))
    if runs < 2:
        return Estimate(point, None, None, runs)
    _, low, high = _interval(
        samples,
        lambda a, b, c, d: np.array([improvement(a, b) - improvement(c, d)]),
        seed,
        resamples,
    )
    return Estimate(point, low, high, runs)


def improvement_gap(
    x1: Sequence[float],
    y1: Sequence[float],
    x2: Sequence[float],
    y2: Sequence[float],
    *,
    seed: int = BOOTSTRAP_SEED,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> Estimate:
    """P(X1 > Y1) − P(X2 > Y2) with a 95 % CI, each of the four samples of seeds resampled
    independently: how much larger one pair's margin is on one task than on another. P(X > Y)
    is free of the tasks' score scales (an AUC against a dish count), which a difference of
    score differences is not; ``runs`` is the smallest sample."""
    return _improvement_gap_cached(
        *(tuple(float(v) for v in s) for s in (x1, y1, x2, y2)), seed, resamples
    )


def performance_profile(
    runs_by_agent: Mapping[str, np.ndarray],
    thresholds: Sequence[float],
    *,
    seed: int = BOOTSTRAP_SEED,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Score distributions: for each agent, the fraction of its (run, task) scores above each
    threshold, with 95 % CIs (rows: low, high); ``runs_by_agent`` maps an agent to its
    (runs × tasks) matrix (rliable's ``create_performance_profile``)."""
    key = tuple(
        (name, tuple(map(tuple, np.asarray(m, dtype=float).tolist())))
        for name, m in runs_by_agent.items()
    )
    return _profile_cached(key, tuple(float(t) for t in thresholds), seed, resamples)


@functools.lru_cache(maxsize=256)
def _profile_cached(
    key: tuple[tuple[str, tuple[tuple[float, ...], ...]], ...],
    thresholds: tuple[float, ...],
    seed: int,
    resamples: int,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    library, _ = _rliable()
    taus = np.asarray(thresholds, dtype=float)
    with _seeded(seed):
        profiles, cis = library.create_performance_profile(
            {name: np.asarray(m, dtype=float) for name, m in key},
            taus,
            reps=resamples,
            confidence_interval_size=CONFIDENCE,
        )
    return (
        {k: np.asarray(v, dtype=float) for k, v in profiles.items()},
        {k: np.asarray(v, dtype=float) for k, v in cis.items()},
    )


#: The fewest seeds per agent for a verdict: below it a comparison gives its direction only.
MIN_VERDICT_SEEDS = 10
#: The exact test's level: "better"/"worse" needs p below it as well as a CI excluding zero.
ALPHA = 0.05
#: Most splits :func:`permutation_p` enumerates (C(20, 10) = 184,756 fits: 10 seeds each);
#: beyond it the exact Mann-Whitney test over ranks stands in.
MAX_SPLITS = 200_000


def permutation_p(x: Sequence[float], y: Sequence[float]) -> float:
    """Exact two-sided permutation p of the difference of means of two samples of seeds.

    Every way of splitting the pooled scores into groups of ``len(x)`` and ``len(y)`` is
    equally likely when the agents do not differ; p is the share of splits whose
    ``|mean(x') − mean(y')|`` is at least the observed one (ties within 1e-9 count). With
    3 seeds against 3 there are C(6, 3) = 20 splits, so the smallest p is 2/20 = 0.1: no
    verdict at the 5 % level is possible. Beyond :data:`MAX_SPLITS` splits the statistic is the
    Mann-Whitney rank sum (mid-ranks for ties), its exact null distribution counted over all
    subsets by dynamic programming: an exact test of the same null hypothesis.
    """
    return _permutation_cached(tuple(float(v) for v in x), tuple(float(v) for v in y))


@functools.lru_cache(maxsize=4096)
def _permutation_cached(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    if not a or not b:
        raise ValueError("a permutation test needs at least one seed on each side")
    pooled = np.asarray(a + b)
    n, total = len(a), float(pooled.sum())
    if math.comb(len(pooled), n) <= MAX_SPLITS:
        splits = np.fromiter(
            itertools.chain.from_iterable(itertools.combinations(range(len(pooled)), n)),
            dtype=np.int64,
        ).reshape(-1, n)
        sums = pooled[splits].sum(axis=1)
        diffs = np.abs(sums / n - (total - sums) / len(b))
        observed = abs(sum(a) / n - (total - sum(a)) / len(b))
        tolerance = 1e-9 * max(1.0, float(np.abs(pooled).max()))
        return float(np.mean(diffs >= observed - tolerance))
    return _rank_sum_p(pooled, n)


def _rank_sum_p(pooled: np.ndarray, n: int) -> float:
    """Exact two-sided p of the rank sum of the first ``n`` of ``pooled`` (mid-ranks, doubled
    to integers), counting every n-subset's rank sum by dynamic programming."""
    order = pooled.argsort(kind="stable")
    ranks = np.empty(len(pooled))
    ranks[order] = np.arange(1, len(pooled) + 1)
    for value in np.unique(pooled):  # mid-ranks for ties
        tied = pooled == value
        ranks[tied] = ranks[tied].mean()
    doubled = np.rint(2 * ranks).astype(np.int64)
    top = int(doubled.sum())
    counts = np.zeros((n + 1, top + 1))  # counts[k, s]: k-subsets with doubled rank sum s
    counts[0, 0] = 1.0
    for r in doubled:
        counts[1:, r:] = counts[1:, r:] + counts[:-1, : top + 1 - r]
    dist = counts[n] / counts[n].sum()
    centre = n * (len(pooled) + 1)  # the doubled mean rank sum
    observed = abs(int(doubled[:n].sum()) - centre)
    sums = np.arange(top + 1)
    return float(dist[np.abs(sums - centre) >= observed].sum())


def verdict(
    difference: Estimate,
    p: float | None,
    higher: str = "higher",
    lower: str = "lower",
) -> str:
    """The words the board uses for a difference of two agents.

    "better"/"worse" only where every test agrees: at least :data:`MIN_VERDICT_SEEDS` seeds per
    agent (the estimate's ``runs``, the smaller sample), the bootstrap 95 %
    CI excluding zero **and** the exact permutation ``p`` (:func:`permutation_p`) below
    :data:`ALPHA`. With fewer seeds: "exploratory: direction only" and the direction; else
    "no significant difference" and the direction (and, where the CI alone would have said
    more, that the exact test does not)."""
    direction = "equal" if difference.point == 0 else higher if difference.point > 0 else lower
    if difference.runs < MIN_VERDICT_SEEDS:
        return f"exploratory: direction only ({direction})"
    if difference.excludes(0.0) and p is not None and p < ALPHA:
        return "better" if difference.point > 0 else "worse"
    if difference.excludes(0.0):
        return f"no significant difference ({direction}; the CI excludes 0, the exact test not)"
    return f"no significant difference ({direction})"


def p_text(p: float | None) -> str:
    """An exact p as the tables print it."""
    return "--" if p is None else f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def normalised(
    score: float, random_score: float | None, oracle_score: float | None
) -> float | None:
    """(score - random) / (oracle - random); None without both anchors or when they coincide."""
    if random_score is None or oracle_score is None:
        return None
    span = oracle_score - random_score
    if abs(span) < 1e-12:
        return None
    return (score - random_score) / span
