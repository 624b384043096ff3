"""Statistics of the report: normalisation between anchors and a seeded bootstrap difference."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20240523


def bootstrap_difference(
    a: Sequence[float],
    b: Sequence[float],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = 0.95,
) -> tuple[float, float, float]:
    """mean(a) - mean(b) and its percentile bootstrap CI (independent resampling, seeded)."""
    a_arr, b_arr = np.asarray(a, float), np.asarray(b, float)
    if a_arr.size == 0 or b_arr.size == 0:
        raise ValueError("bootstrap_difference needs two non-empty samples")
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, a_arr.size, size=(resamples, a_arr.size))
    ib = rng.integers(0, b_arr.size, size=(resamples, b_arr.size))
    diffs = a_arr[ia].mean(axis=1) - b_arr[ib].mean(axis=1)
    alpha = (1 - level) / 2
    low, high = np.quantile(diffs, [alpha, 1 - alpha])
    return float(a_arr.mean() - b_arr.mean()), float(low), float(high)


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
