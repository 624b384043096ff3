"""ARCHER-ADRL's advantages (``token_level_gae(..., boundary="last")``) against a plain loop.

The loop below is the backup of baselines/archer_adrl.py written one env and one token at a time
with Python floats (docs/reference.md#advantages): NTPO's inner tokens, the last token
bootstrapping from the value before the *last* token of the next action, ``V_T^1`` after the
last rollout step, nothing after a terminal step, the final observation's first-token value after
a time-limit truncation. Shapes: T 1-16, N 1-8, widths 1-64 (8, the NumPy strided-out defect's
stride, always among the draws: docs/numpy-strided-out-defect.md), padded rows whose pads hold
NaN and inf, NumPy and torch inputs, float32 and float64.
"""

from __future__ import annotations

import sys
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentbench_poad.rl.advantages import token_level_gae

torch = pytest.importorskip("torch")

from tests._array_kinds import as_kind, to_numpy, tolerance  # noqa: E402

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
WIDTHS = st.one_of(st.sampled_from([1, 2, 7, 8, 9, 16, 64]), st.integers(1, 64))
DISCOUNTS = st.one_of(st.sampled_from([0.0, 1.0, 0.5, 0.9, 0.95, 0.99]), st.floats(0.0, 1.0))


def loop_archer_gae(
    rewards, values, lengths, terminated, truncated, final_values, next_value, gamma, lam, intra
):
    """The paper code's ARCHER backup, with this package's time-limit rule, token by token."""
    steps, envs = len(rewards), len(rewards[0])
    width = len(values[0][0])
    adv = [[[0.0] * width for _ in range(envs)] for _ in range(steps)]
    ret = [[[0.0] * width for _ in range(envs)] for _ in range(steps)]
    for i in range(envs):
        # Beyond the rollout: V_T^1, the next observation's value before its first token.
        bootstrap, following_advantage = next_value[i], 0.0
        for t in reversed(range(steps)):
            if terminated[t][i]:
                bootstrap, following_advantage = 0.0, 0.0
            elif truncated[t][i]:  # no next action: the cut observation's first-token value
                bootstrap, following_advantage = final_values[t][i], 0.0
            n = lengths[t][i]
            v = values[t][i]
            for j in reversed(range(n)):
                if j == n - 1:
                    delta = rewards[t][i] + gamma * bootstrap - v[j]
                    a = delta + gamma * lam * following_advantage
                else:
                    a = intra * v[j + 1] - v[j] + intra * lam * a
                adv[t][i][j] = a
                ret[t][i][j] = a + v[j]
            # What the previous step's last token sees: the value before THIS action's last
            # token; the advantage carried is still this action's first-token advantage.
            bootstrap, following_advantage = v[n - 1], adv[t][i][0]
    return np.array(adv), np.array(ret)


@st.composite
def rollouts(draw):
    """A rollout (pads hold NaN/inf junk) whose steps terminate, truncate or go on anywhere."""
    seed = draw(st.integers(0, 2**32 - 1))
    steps, envs, width = draw(st.integers(1, 16)), draw(st.integers(1, 8)), draw(WIDTHS)
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, width + 1, size=(steps, envs))
    if draw(st.booleans()):  # as RolloutBuffer.value_grid: the longest action sets the width
        lengths[rng.integers(steps), rng.integers(envs)] = width
    mask = np.arange(width) < lengths[..., None]
    values = rng.normal(scale=3.0, size=(steps, envs, width))
    values = np.where(mask, values, rng.choice([np.nan, np.inf, -np.inf, 1e30], size=values.shape))
    rewards = rng.normal(scale=3.0, size=(steps, envs))
    next_value = rng.normal(scale=3.0, size=envs)
    ends = rng.random((steps, envs)) < draw(st.sampled_from([0.0, 0.2, 0.5, 1.0]))
    cut = ends & (rng.random((steps, envs)) < draw(st.sampled_from([0.0, 0.5, 1.0])))
    final_values = np.where(
        cut, rng.normal(scale=3.0, size=cut.shape), rng.choice([np.nan, 1e30], size=cut.shape)
    )
    return dict(
        rewards=rewards,
        values=values,
        mask=mask,
        terminated=ends & ~cut,
        truncated=cut,
        final_values=final_values,
        next_value=next_value,
    )


@st.composite
def discounts(draw):
    gamma, lam = draw(DISCOUNTS), draw(DISCOUNTS)
    # ARCHER is NTPO inside an action (γ_w = γ); any γ_w (the config's intra_gamma) and tiny
    # ones (the discount-matrix path) too.
    intra = draw(st.one_of(st.just("gamma"), DISCOUNTS, st.sampled_from([1e-9, 1e-3])))
    return gamma, lam, gamma if intra == "gamma" else intra


def archer(case, gamma, lam, intra, boundary="last", time_limits=True):
    dones = case["terminated"] | case["truncated"]
    extra = (
        dict(truncated=case["truncated"], final_values=case["final_values"]) if time_limits else {}
    )
    args = (case["rewards"], case["values"], case["mask"], dones, case["next_value"])
    return token_level_gae(
        *args, gamma=gamma, lam=lam, intra_gamma=intra, boundary=boundary, **extra
    )


@settings(SETTINGS, max_examples=150)
@given(
    case=rollouts(),
    discount=discounts(),
    kind=st.sampled_from(["numpy", "torch"]),
    dtype=st.sampled_from([np.float64, np.float32]),
    torch_loaded=st.booleans(),
    time_limits=st.booleans(),
)
@example(  # width 8 (the defect's stride), every kind of step end, NTPO's discounts
    case=dict(
        rewards=np.linspace(-1, 1, 16 * 8).reshape(16, 8),
        values=np.where(
            np.arange(8) < (np.arange(16 * 8).reshape(16, 8) % 8 + 1)[..., None],
            np.sin(np.arange(16 * 8 * 8)).reshape(16, 8, 8),
            np.nan,
        ),
        mask=np.arange(8) < (np.arange(16 * 8).reshape(16, 8) % 8 + 1)[..., None],
        terminated=np.eye(16, 8, dtype=bool),
        truncated=np.eye(16, 8, k=-2, dtype=bool),
        final_values=np.full((16, 8), 2.5),
        next_value=np.linspace(-2, 2, 8),
    ),
    discount=(0.95, 0.95, 0.95),
    kind="numpy",
    dtype=np.float64,
    torch_loaded=True,
    time_limits=True,
)
def test_archer_gae_matches_the_loop(case, discount, kind, dtype, torch_loaded, time_limits):
    """``torch_loaded=False`` hides torch (NumPy inputs only): the NumPy cumsum path runs.
    ``time_limits=False`` passes no truncations: every end is terminal, as in the reference."""
    gamma, lam, intra = discount
    dones = case["terminated"] | case["truncated"]
    names = ("rewards", "values", "mask", "next_value")
    inputs = {k: as_kind(case[k], kind, dtype) for k in names}
    inputs["dones"] = as_kind(dones, kind, dtype)
    before = {k: to_numpy(x).copy() for k, x in inputs.items()}
    extra = {}
    if time_limits:
        extra = dict(
            truncated=as_kind(case["truncated"], kind, dtype),
            final_values=as_kind(case["final_values"], kind, np.float64),
        )
    hide_torch = {"torch": None} if kind == "numpy" and not torch_loaded else {}
    with mock.patch.dict(sys.modules, hide_torch):
        adv, ret = token_level_gae(
            inputs["rewards"],
            inputs["values"],
            inputs["mask"],
            inputs["dones"],
            inputs["next_value"],
            gamma=gamma,
            lam=lam,
            intra_gamma=intra,
            boundary="last",
            **extra,
        )

    # The loop sees exactly the numbers the estimator was given (float32 inputs rounded first).
    r, v, nv = (to_numpy(inputs[k]).astype(np.float64) for k in ("rewards", "values", "next_value"))
    cut = case["truncated"] if time_limits else np.zeros_like(dones)
    ends = case["terminated"] if time_limits else dones
    final = np.where(cut, case["final_values"], 0.0)
    ref_adv, ref_ret = loop_archer_gae(
        r.tolist(),
        v.tolist(),
        case["mask"].sum(-1).tolist(),
        ends.tolist(),
        cut.tolist(),
        final.tolist(),
        nv.tolist(),
        gamma,
        lam,
        intra,
    )
    assert type(adv) is type(inputs["values"]) and adv.dtype == inputs["values"].dtype
    assert tuple(adv.shape) == case["values"].shape and tuple(ret.shape) == adv.shape
    for k, x in inputs.items():
        np.testing.assert_array_equal(to_numpy(x), before[k])
    adv, ret = to_numpy(adv).astype(np.float64), to_numpy(ret).astype(np.float64)
    atol = tolerance(dtype, ref_adv, ref_ret, final)
    np.testing.assert_allclose(adv, ref_adv, rtol=0, atol=atol)
    np.testing.assert_allclose(ret, ref_ret, rtol=0, atol=atol)
    mask = case["mask"]
    assert np.all(adv[~mask] == 0) and np.all(ret[~mask] == 0)


def last_token_td_errors(adv, mask, dones, gamma, lam):
    """``δ_t`` at each action's last token, read back from the advantages:
    ``A_t^n − γλ m_{t+1} A_{t+1}^1`` (nothing follows the last rollout step)."""
    last = mask.sum(-1) - 1
    at_last = np.take_along_axis(adv, last[..., None], axis=-1)[..., 0]
    following = np.concatenate([adv[1:, :, 0], np.zeros((1, adv.shape[1]))])
    return at_last - gamma * lam * (1.0 - dones) * following


@SETTINGS
@given(case=rollouts(), gamma=st.floats(0.1, 1.0), lam=DISCOUNTS)
def test_archer_differs_from_ntpo_exactly_at_the_boundary_bootstrap(case, gamma, lam):
    """Against NTPO (``boundary="first"``) only the last token's TD error changes, by exactly
    ``γ m_{t+1} (V_{t+1}^{n_{t+1}} − V_{t+1}^1)``: nonzero where the episode goes on into a next
    action of the rollout with more than one token, zero at the last rollout step, after a
    terminal step and after a truncation."""
    a_archer, _ = archer(case, gamma, lam, gamma)
    a_ntpo, _ = archer(case, gamma, lam, gamma, boundary="first")
    mask, values = case["mask"], np.nan_to_num(case["values"])
    dones = (case["terminated"] | case["truncated"]).astype(np.float64)
    shift = last_token_td_errors(a_archer, mask, dones, gamma, lam)
    shift -= last_token_td_errors(a_ntpo, mask, dones, gamma, lam)

    lengths = mask.sum(-1)
    next_last = np.take_along_axis(values, (lengths - 1)[..., None], axis=-1)[1:, :, 0]
    expected = np.zeros(dones.shape)
    expected[:-1] = gamma * (1.0 - dones[:-1]) * (next_last - values[1:, :, 0])
    atol = tolerance(np.float64, a_archer, a_ntpo)
    np.testing.assert_allclose(shift, expected, rtol=0, atol=atol)
    # Where: the next step exists in this episode and its action has more than one token.
    goes_on = np.zeros(dones.shape, dtype=bool)
    goes_on[:-1] = (dones[:-1] == 0) & (lengths[1:] > 1)
    gap = np.zeros(dones.shape)
    gap[:-1] = np.abs(next_last - values[1:, :, 0])
    clear = gap > 1e3 * atol  # random values: V^n = V^1 up to rounding is a measure-zero draw
    assert np.all(np.abs(shift[goes_on & clear]) > atol)
    assert np.all(np.abs(shift[~goes_on]) <= atol)


@SETTINGS
@given(case=rollouts(), discount=discounts(), time_limits=st.booleans())
def test_one_token_actions_are_ntpo_exactly(case, discount, time_limits):
    """Every action one token (the width may still be padded): the two bootstraps are the
    same number, so ARCHER-ADRL and NTPO are bit-identical."""
    gamma, lam, intra = discount
    mask = np.zeros_like(case["mask"])
    mask[..., 0] = True
    case = {**case, "mask": mask, "values": np.where(mask, np.nan_to_num(case["values"]), np.nan)}
    for got, ntpo in zip(
        archer(case, gamma, lam, intra, time_limits=time_limits),
        archer(case, gamma, lam, intra, boundary="first", time_limits=time_limits),
    ):
        np.testing.assert_array_equal(got, ntpo)


def test_a_hand_computed_boundary():
    """Two steps, one env, γ = λ = 1 inside and across: the numbers worked by hand.

    Step 0: tokens with values (1, 2), reward 0; step 1: tokens with values (5, 7), reward 1;
    after the rollout V_T^1 = 10. Step 1's last token: 1 + 10 − 7 = 4, its first: 7 − 5 + 4 = 6.
    Step 0's last token bootstraps from step 1's LAST-token value 7 (NTPO: 5):
    0 + 7 − 2 + A_1^1 = 5 + 6 = 11, its first: 2 − 1 + 11 = 12.
    """
    values = np.array([[[1.0, 2.0]], [[5.0, 7.0]]])
    mask = np.ones(values.shape, dtype=bool)
    args = (np.array([[0.0], [1.0]]), values, mask, np.zeros((2, 1)), np.array([10.0]))
    adv, ret = token_level_gae(*args, gamma=1.0, lam=1.0, intra_gamma=1.0, boundary="last")
    np.testing.assert_array_equal(adv[..., 0, :], [[12.0, 11.0], [6.0, 4.0]])
    np.testing.assert_array_equal(ret, adv + values)
    ntpo, _ = token_level_gae(*args, gamma=1.0, lam=1.0, intra_gamma=1.0)
    np.testing.assert_array_equal(ntpo[..., 0, :], [[10.0, 9.0], [6.0, 4.0]])


def test_an_unknown_boundary_is_rejected():
    args = (np.zeros((1, 1)), np.zeros((1, 1, 1)), np.ones((1, 1, 1), bool), np.zeros((1, 1)))
    with pytest.raises(ValueError, match="boundary must be one of"):
        token_level_gae(*args, np.zeros(1), gamma=0.9, lam=0.9, intra_gamma=0.9, boundary="next")
