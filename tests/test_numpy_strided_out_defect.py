"""The NumPy strided-``out=`` defect (docs/numpy-strided-out-defect.md), watched and avoided.

``np.negative`` into a non-contiguous ``out=`` view with an input step of 8 float64 elements
returns the wrong numbers on NumPy 2.1-2.4 (at least). The first test runs the reproducer. It is
an expected failure where the defect is present and passes where it is fixed, so the report says
which case this machine is. The guarantee that matters is the second test: the estimator equals
the per-token loop at width 8 whatever the kernel does.
"""

from __future__ import annotations

import numpy as np
import pytest

from agentbench_poad.rl.advantages import token_level_gae


def negative_into_strided_out(step: int, dtype: type = np.float64) -> tuple[np.ndarray, np.ndarray]:
    """``(what np.negative wrote, what it should have written)`` for the reproducer."""
    a = np.arange(8 * step, dtype=dtype)
    o = np.zeros(8 * step, dtype=dtype)
    np.negative(a[::step], out=o[::step])
    return o[::step].copy(), -np.ascontiguousarray(a[::step])


def defect_present() -> bool:
    got, want = negative_into_strided_out(8)
    return not np.array_equal(got, want)


@pytest.mark.xfail(
    defect_present(),
    strict=True,
    reason=f"NumPy {np.__version__} has the strided-out defect "
    "(docs/numpy-strided-out-defect.md); the RL math avoids the pattern",
)
def test_numpy_negative_into_a_strided_out_view_is_correct():
    got, want = negative_into_strided_out(8)
    np.testing.assert_array_equal(got, want)


def loop_token_advantages(rewards, values, lengths, dones, next_value, gamma, lam, intra):
    """Per-token recursion (docs/reference.md#advantages) in Python floats; all token advantages."""
    steps, envs, width = values.shape
    adv = np.zeros((steps, envs, width))
    for i in range(envs):
        a_next, v_next = 0.0, float(next_value[i])
        for t in reversed(range(steps)):
            n, keep, a = int(lengths[t, i]), 1.0 - float(dones[t, i]), 0.0
            for j in reversed(range(n)):
                v = float(values[t, i, j])
                if j == n - 1:
                    a = float(rewards[t, i]) + gamma * keep * (v_next + lam * a_next) - v
                else:
                    a = intra * float(values[t, i, j + 1]) - v + intra * lam * a
                adv[t, i, j] = a
            a_next, v_next = adv[t, i, 0], float(values[t, i, 0])
    return adv


@pytest.mark.parametrize("intra", ["bad", "ntpo"])
def test_token_gae_is_right_at_width_8_whatever_numpy_does(intra):
    rng = np.random.default_rng(8)
    steps, envs, width, gamma, lam = 6, 5, 8, 0.95, 0.95
    intra_gamma = 1.0 if intra == "bad" else gamma
    lengths = rng.integers(1, width + 1, size=(steps, envs))
    lengths[0, 0] = width
    mask = np.arange(width) < lengths[..., None]
    values = np.where(mask, rng.normal(size=(steps, envs, width)), np.nan)
    rewards = rng.normal(size=(steps, envs))
    dones = rng.random((steps, envs)) < 0.3
    next_value = rng.normal(size=envs)
    adv, ret = token_level_gae(
        rewards, values, mask, dones, next_value, gamma=gamma, lam=lam, intra_gamma=intra_gamma
    )
    expected = loop_token_advantages(
        rewards, values, lengths, dones, next_value, gamma, lam, intra_gamma
    )
    np.testing.assert_allclose(adv, expected, rtol=0, atol=1e-10)
    np.testing.assert_allclose(
        ret, np.where(mask, expected + np.nan_to_num(values), 0.0), rtol=0, atol=1e-10
    )
    assert np.all(adv[~mask] == 0)
