"""Property-based tests of the RL math against plain per-element loops written here.

Every estimator and loss is compared with an obviously-correct Python loop over steps, envs and
tokens (docs/reference.md#advantages and #ppo-losses), on shapes drawn over T 1-16, N 1-8 and widths 1-64 (width 8,
the NumPy AVX-512 defect's stride, is always among the draws: docs/numpy-strided-out-defect.md),
float32 and float64, NumPy and torch inputs. The loops use Python floats only, so they do not
share a NumPy kernel with the code they check.
"""

from __future__ import annotations

import math
import sys
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentbench_poad.rl.advantages import action_level_gae, token_level_gae

torch = pytest.importorskip("torch")

from agentbench_poad.rl.policy import NORMALIZATIONS  # noqa: E402
from agentbench_poad.rl.ppo import (  # noqa: E402
    PolicyEvaluation,
    PPOBatch,
    PPOSettings,
    approx_kl_k3,
    clipped_surrogate_loss,
    clipped_value_loss,
    make_adamw,
    masked_mean,
    normalize_advantages,
    ppo_update,
)
from tests._array_kinds import as_kind, to_numpy, tolerance  # noqa: E402

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Widths: the interesting ones always get drawn (8 is the defect's stride), any other 1-64 too.
WIDTHS = st.one_of(st.sampled_from([1, 2, 7, 8, 9, 16, 64]), st.integers(1, 64))
DISCOUNTS = st.one_of(st.sampled_from([0.0, 1.0, 0.5, 0.9, 0.95, 0.99]), st.floats(0.0, 1.0))


# -- the reference loops ------------------------------------------------------------------------
def loop_token_gae(rewards, values, lengths, dones, next_value, gamma, lam, intra_gamma):
    """docs/reference.md#advantages token recursion, one env and one token at a time (Python floats)."""
    steps, envs = len(rewards), len(rewards[0])
    width = len(values[0][0])
    adv = [[[0.0] * width for _ in range(envs)] for _ in range(steps)]
    ret = [[[0.0] * width for _ in range(envs)] for _ in range(steps)]
    for i in range(envs):
        following_advantage = 0.0  # A_{t+1}^1
        following_value = next_value[i]  # V_{t+1}^1
        for t in reversed(range(steps)):
            n = lengths[t][i]
            keep = 1.0 - dones[t][i]
            v = values[t][i]
            for j in reversed(range(n)):
                if j == n - 1:  # last token: the env reward and the next observation enter
                    delta = rewards[t][i] + gamma * keep * following_value - v[j]
                    a = delta + gamma * lam * keep * following_advantage
                else:  # inner token: intra-action discount, no reward
                    delta = intra_gamma * v[j + 1] - v[j]
                    a = delta + intra_gamma * lam * a
                adv[t][i][j] = a
                ret[t][i][j] = a + v[j]
            following_advantage = adv[t][i][0]
            following_value = v[0]
    return np.array(adv), np.array(ret)


def loop_action_gae(rewards, values, dones, next_value, gamma, lam):
    steps, envs = len(rewards), len(rewards[0])
    adv = [[0.0] * envs for _ in range(steps)]
    for i in range(envs):
        a, following = 0.0, next_value[i]
        for t in reversed(range(steps)):
            keep = 1.0 - dones[t][i]
            a = rewards[t][i] + gamma * keep * following - values[t][i] + gamma * lam * keep * a
            adv[t][i] = a
            following = values[t][i]
    adv = np.array(adv)
    return adv, adv + np.array(values)


# -- drawing rollouts ---------------------------------------------------------------------------
def make_rollout(seed, steps, envs, width, *, done_rate=0.3, scale=3.0, full_row=True):
    """Random rewards/values/lengths/dones; pads hold NaN and large junk (must be ignored)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, width + 1, size=(steps, envs))
    if full_row:  # as RolloutBuffer.value_grid: the longest action sets the width
        lengths[rng.integers(steps), rng.integers(envs)] = width
    mask = np.arange(width) < lengths[..., None]
    values = rng.normal(scale=scale, size=(steps, envs, width))
    junk = rng.choice([np.nan, np.inf, -np.inf, 1e30], size=values.shape)
    values = np.where(mask, values, junk)
    rewards = rng.normal(scale=scale, size=(steps, envs))
    dones = rng.random((steps, envs)) < done_rate
    next_value = rng.normal(scale=scale, size=envs)
    return rewards, values, mask, dones, next_value


@st.composite
def rollouts(draw):
    return dict(
        seed=draw(st.integers(0, 2**32 - 1)),
        steps=draw(st.integers(1, 16)),
        envs=draw(st.integers(1, 8)),
        width=draw(WIDTHS),
        done_rate=draw(st.sampled_from([0.0, 0.3, 1.0])),
        full_row=draw(st.booleans()),
    )


@st.composite
def discounts(draw):
    gamma = draw(DISCOUNTS)
    lam = draw(DISCOUNTS)
    intra = draw(
        st.one_of(st.just("bad"), st.just("ntpo"), DISCOUNTS, st.sampled_from([1e-9, 1e-3]))
    )  # tiny: the discount-matrix path
    intra_gamma = {"bad": 1.0, "ntpo": gamma}.get(intra, intra)
    return gamma, lam, intra_gamma


# -- token-level GAE ----------------------------------------------------------------------------
@settings(SETTINGS, max_examples=100)
@given(
    case=rollouts(),
    discount=discounts(),
    kind=st.sampled_from(["numpy", "torch"]),
    dtype=st.sampled_from([np.float64, np.float32]),
    torch_loaded=st.booleans(),
)
@example(
    case=dict(seed=0, steps=3, envs=4, width=8, done_rate=0.3, full_row=True),
    discount=(0.95, 0.95, 1.0),
    kind="numpy",
    dtype=np.float64,
    torch_loaded=True,
)
@example(
    case=dict(seed=1, steps=16, envs=8, width=8, done_rate=0.3, full_row=True),
    discount=(0.99, 0.95, 0.99),
    kind="numpy",
    dtype=np.float64,
    torch_loaded=False,
)
@example(
    case=dict(seed=2, steps=5, envs=3, width=1, done_rate=0.3, full_row=True),
    discount=(0.9, 0.8, 1.0),
    kind="numpy",
    dtype=np.float64,
    torch_loaded=True,
)
def test_token_gae_matches_the_loop(case, discount, kind, dtype, torch_loaded):
    """``torch_loaded=False`` hides torch (NumPy inputs only): the NumPy cumsum path runs."""
    gamma, lam, intra_gamma = discount
    rewards, values, mask, dones, next_value = make_rollout(**case)
    inputs = [as_kind(x, kind, dtype) for x in (rewards, values, mask, dones, next_value)]
    before = [to_numpy(x).copy() for x in inputs]

    hide_torch = {"torch": None} if kind == "numpy" and not torch_loaded else {}
    with mock.patch.dict(sys.modules, hide_torch):
        adv, ret = token_level_gae(*inputs, gamma=gamma, lam=lam, intra_gamma=intra_gamma)

    # The loop sees exactly the numbers the estimator was given (float32 inputs rounded first).
    r, v, _, d, nv = (to_numpy(x).astype(np.float64) for x in inputs)
    lengths = mask.sum(-1)
    ref_adv, ref_ret = loop_token_gae(
        r.tolist(), v.tolist(), lengths.tolist(), d.tolist(), nv.tolist(), gamma, lam, intra_gamma
    )
    # Same kind, dtype and shape as ``values``; inputs untouched.
    assert type(adv) is type(inputs[1]) and type(ret) is type(inputs[1])
    assert adv.dtype == inputs[1].dtype and ret.dtype == inputs[1].dtype
    assert tuple(adv.shape) == values.shape and tuple(ret.shape) == values.shape
    for x, old in zip(inputs, before):
        np.testing.assert_array_equal(to_numpy(x), old)
    adv, ret = to_numpy(adv).astype(np.float64), to_numpy(ret).astype(np.float64)
    atol = tolerance(dtype, ref_adv, ref_ret)
    np.testing.assert_allclose(adv, ref_adv, rtol=0, atol=atol)
    np.testing.assert_allclose(ret, ref_ret, rtol=0, atol=atol)
    # Pads: exactly 0, whatever junk (NaN, inf) the values held there.
    assert np.all(adv[~mask] == 0) and np.all(ret[~mask] == 0)


@SETTINGS
@given(case=rollouts(), discount=discounts())
def test_one_token_actions_are_action_level_gae(case, discount):
    """Width 1: every intra-action discount reduces to TWOSOME's backup."""
    gamma, lam, intra_gamma = discount
    rewards, values, mask, dones, next_value = make_rollout(**{**case, "width": 1})
    adv, ret = token_level_gae(
        rewards, values, mask, dones, next_value, gamma=gamma, lam=lam, intra_gamma=intra_gamma
    )
    a_adv, a_ret = action_level_gae(
        rewards, values[..., 0], dones, next_value, gamma=gamma, lam=lam
    )
    atol = tolerance(np.float64, a_adv, a_ret)
    np.testing.assert_allclose(adv[..., 0], a_adv, rtol=0, atol=atol)
    np.testing.assert_allclose(ret[..., 0], a_ret, rtol=0, atol=atol)


@SETTINGS
@given(case=rollouts(), discount=discounts(), data=st.data())
def test_pad_contents_never_matter(case, discount, data):
    """Rewriting every pad (NaN, inf, anything) leaves advantages and returns bit-identical."""
    gamma, lam, intra_gamma = discount
    rewards, values, mask, dones, next_value = make_rollout(**case)
    other = np.where(mask, values, data.draw(st.sampled_from([0.0, np.nan, -1e300, 7.0])))
    kwargs = dict(gamma=gamma, lam=lam, intra_gamma=intra_gamma)
    a1, r1 = token_level_gae(rewards, values, mask, dones, next_value, **kwargs)
    a2, r2 = token_level_gae(rewards, other, mask, dones, next_value, **kwargs)
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_array_equal(r1, r2)


@SETTINGS
@given(case=rollouts(), data=st.data())
def test_masks_that_are_not_prefixes_are_rejected(case, data):
    rewards, values, mask, dones, next_value = make_rollout(
        **{**case, "width": max(case["width"], 2)}
    )
    t = data.draw(st.integers(0, mask.shape[0] - 1))
    i = data.draw(st.integers(0, mask.shape[1] - 1))
    hole = data.draw(st.integers(0, mask.shape[2] - 2))
    after = data.draw(st.integers(hole + 1, mask.shape[2] - 1))
    bad = mask.copy()
    bad[t, i, hole] = False
    bad[t, i, after] = True  # a real token after a pad
    with pytest.raises(ValueError, match="prefix"):
        token_level_gae(
            rewards, values, bad, dones, next_value, gamma=0.9, lam=0.9, intra_gamma=1.0
        )


@SETTINGS
@given(case=rollouts(), data=st.data())
def test_zero_length_actions_are_rejected(case, data):
    rewards, values, mask, dones, next_value = make_rollout(**case)
    bad = mask.copy()
    bad[
        data.draw(st.integers(0, mask.shape[0] - 1)), data.draw(st.integers(0, mask.shape[1] - 1))
    ] = False
    with pytest.raises(ValueError, match="at least one token"):
        token_level_gae(
            rewards, values, bad, dones, next_value, gamma=0.9, lam=0.9, intra_gamma=0.9
        )
    with pytest.raises(ValueError, match="at least one token"):
        token_level_gae(
            rewards,
            values[..., :0],
            mask[..., :0],
            dones,
            next_value,
            gamma=0.9,
            lam=0.9,
            intra_gamma=0.9,
        )


@SETTINGS
@given(case=rollouts(), data=st.data(), bad=st.sampled_from([np.nan, np.inf, -np.inf]))
def test_non_finite_numbers_where_they_are_used_are_rejected(case, data, bad):
    rewards, values, mask, dones, next_value = make_rollout(**case)
    where = data.draw(st.sampled_from(["values", "rewards", "next_value"]))
    if where == "values":
        real = np.argwhere(mask)
        values = values.copy()
        values[tuple(real[data.draw(st.integers(0, len(real) - 1))])] = bad
    elif where == "rewards":
        rewards = rewards.copy()
        rewards[data.draw(st.integers(0, rewards.shape[0] - 1)), 0] = bad
    else:
        next_value = next_value.copy()
        next_value[0] = bad
    intra_gamma = data.draw(st.sampled_from([1.0, 0.9, 0.0]))
    with pytest.raises(ValueError, match=f"{where} contains NaN or inf"):
        token_level_gae(
            rewards, values, mask, dones, next_value, gamma=0.9, lam=0.9, intra_gamma=intra_gamma
        )


@pytest.mark.parametrize("intra_gamma", [1.0, 0.9, 0.0])
def test_overflow_is_a_clear_error_not_a_silent_inf(intra_gamma):
    rewards, values, mask, dones, next_value = make_rollout(0, 3, 2, 4)
    values = np.where(mask, 1e308, np.nan)  # finite, but differences overflow
    values[..., 0] = -1e308
    try:
        adv, ret = token_level_gae(
            rewards, values, mask, dones, next_value, gamma=0.9, lam=0.9, intra_gamma=intra_gamma
        )
    except ValueError as error:  # never a silent inf or NaN, nor an endless restart
        assert "overflows float64" in str(error)
    else:
        assert np.isfinite(adv).all() and np.isfinite(ret).all()


@pytest.mark.parametrize("name", ["gamma", "lam", "intra_gamma"])
@pytest.mark.parametrize("value", [-0.1, 1.5, float("nan")])
def test_discounts_outside_the_unit_interval_are_rejected(name, value):
    rewards, values, mask, dones, next_value = make_rollout(0, 2, 2, 3)
    kwargs = {"gamma": 0.9, "lam": 0.9, "intra_gamma": 1.0, name: value}
    with pytest.raises(ValueError, match=f"{name} must be a number in \\[0, 1\\]"):
        token_level_gae(rewards, values, mask, dones, next_value, **kwargs)
    if name != "intra_gamma":
        kwargs.pop("intra_gamma")
        with pytest.raises(ValueError, match=name):
            action_level_gae(rewards, values[..., 0], dones, next_value, **kwargs)


def test_dones_must_be_zero_or_one():
    rewards, values, mask, dones, next_value = make_rollout(0, 2, 2, 3)
    half = np.full(dones.shape, 0.5)
    with pytest.raises(ValueError, match="dones must be"):
        token_level_gae(
            rewards, values, mask, half, next_value, gamma=0.9, lam=0.9, intra_gamma=1.0
        )
    with pytest.raises(ValueError, match="dones must be"):
        action_level_gae(rewards, values[..., 0], half, next_value, gamma=0.9, lam=0.9)


# -- action-level GAE ---------------------------------------------------------------------------
@SETTINGS
@given(
    case=rollouts(),
    gamma=DISCOUNTS,
    lam=DISCOUNTS,
    kind=st.sampled_from(["numpy", "torch"]),
    dtype=st.sampled_from([np.float64, np.float32]),
)
def test_action_gae_matches_the_loop(case, gamma, lam, kind, dtype):
    rewards, values, _, dones, next_value = make_rollout(**case)
    values = np.nan_to_num(values[..., 0])  # one value per step (column 0 is always real)
    inputs = [as_kind(x, kind, dtype) for x in (rewards, values, dones, next_value)]
    adv, ret = action_level_gae(*inputs, gamma=gamma, lam=lam)
    r, v, d, nv = (to_numpy(x).astype(np.float64).tolist() for x in inputs)
    ref_adv, ref_ret = loop_action_gae(r, v, d, nv, gamma, lam)
    assert type(adv) is type(inputs[1]) and adv.dtype == inputs[1].dtype
    atol = tolerance(dtype, ref_adv, ref_ret)
    np.testing.assert_allclose(to_numpy(adv).astype(np.float64), ref_adv, rtol=0, atol=atol)
    np.testing.assert_allclose(to_numpy(ret).astype(np.float64), ref_ret, rtol=0, atol=atol)


# -- PPO losses ---------------------------------------------------------------------------------
@st.composite
def loss_batches(draw):
    """(B, L) log-probs, old log-probs, advantages, values, returns and a prefix mask."""
    seed = draw(st.integers(0, 2**32 - 1))
    rows = draw(st.integers(1, 16))
    width = draw(WIDTHS)
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0 if draw(st.booleans()) else 1, width + 1, size=rows)
    mask = np.arange(width) < lengths[:, None]
    old = np.log(rng.uniform(0.01, 1.0, size=(rows, width)))
    new = old + rng.normal(scale=draw(st.sampled_from([0.0, 0.05, 0.5, 2.0])), size=old.shape)
    tensors = {
        k: torch.tensor(x, dtype=dtype)
        for k, x in dict(
            new=new,
            old=old,
            adv=rng.normal(scale=2.0, size=old.shape),
            values=rng.normal(size=old.shape),
            old_values=rng.normal(size=old.shape),
            returns=rng.normal(size=old.shape),
        ).items()
    }
    tensors["mask"] = torch.tensor(mask)
    return tensors


def close(a, b, dtype):
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    return math.isclose(a, b, rel_tol=tol, abs_tol=tol)


@SETTINGS
@given(batch=loss_batches(), clip=st.sampled_from([0.0, 0.1, 0.2, 0.5]))
def test_clipped_surrogate_matches_the_loop(batch, clip):
    loss = clipped_surrogate_loss(batch["new"], batch["old"], batch["adv"], clip=clip)
    assert loss.shape == batch["new"].shape and loss.dtype == batch["new"].dtype
    for lp, old, a, got in zip(
        batch["new"].flatten().tolist(),
        batch["old"].flatten().tolist(),
        batch["adv"].flatten().tolist(),
        loss.flatten().tolist(),
    ):
        ratio = math.exp(lp - old)
        clipped_ratio = min(max(ratio, 1.0 - clip), 1.0 + clip)
        assert close(got, max(-ratio * a, -clipped_ratio * a), batch["new"].dtype)


@SETTINGS
@given(batch=loss_batches(), clip=st.sampled_from([0.0, 0.1, 0.2, 0.5]))
def test_clipped_value_loss_matches_the_loop(batch, clip):
    got = clipped_value_loss(
        batch["values"], batch["old_values"], batch["returns"], batch["mask"], clip=clip
    ).item()
    terms = []
    for v, old, ret, real in zip(
        batch["values"].flatten().tolist(),
        batch["old_values"].flatten().tolist(),
        batch["returns"].flatten().tolist(),
        batch["mask"].flatten().tolist(),
    ):
        if real:
            v_clip = old + min(max(v - old, -clip), clip)
            terms.append(max(0.5 * (ret - v_clip) ** 2, 0.5 * (ret - v) ** 2))
    expected = sum(terms) / max(len(terms), 1)
    assert close(got, expected, batch["values"].dtype)


@SETTINGS
@given(batch=loss_batches(), junk=st.sampled_from([0.0, float("nan"), float("inf"), 1e30]))
def test_masked_mean_and_kl_match_the_loop_and_ignore_pads(batch, junk):
    mask = batch["mask"]
    new = torch.where(mask, batch["new"], torch.full_like(batch["new"], junk))
    real = [
        (lp, old)
        for lp, old, m in zip(
            batch["new"].flatten().tolist(),
            batch["old"].flatten().tolist(),
            mask.flatten().tolist(),
        )
        if m
    ]
    count = max(len(real), 1)
    expected_mean = sum(lp for lp, _ in real) / count
    expected_kl = sum(math.exp(lp - old) - 1.0 - (lp - old) for lp, old in real) / count
    dtype = batch["new"].dtype
    assert close(masked_mean(new, mask).item(), expected_mean, dtype)
    assert close(approx_kl_k3(new, batch["old"], mask).item(), expected_kl, dtype)
    # ``count`` overrides the denominator (exact gradient accumulation)
    assert close(masked_mean(new, mask, count=7.0).item(), sum(lp for lp, _ in real) / 7.0, dtype)
    assert approx_kl_k3(new, batch["old"], mask).item() >= -1e-6  # k3 is never negative


@SETTINGS
@given(batch=loss_batches(), junk=st.sampled_from([0.0, float("nan"), 1e30]))
def test_masked_advantage_normalisation_matches_the_loop(batch, junk):
    mask = batch["mask"]
    adv = torch.where(mask, batch["adv"], torch.full_like(batch["adv"], junk))
    out = normalize_advantages(adv, mask)
    real = [a for a, m in zip(batch["adv"].flatten().tolist(), mask.flatten().tolist()) if m]
    count = max(len(real), 1)
    mean = sum(real) / count
    std = math.sqrt(sum((a - mean) ** 2 for a in real) / count)  # population std
    for got, a, m in zip(
        out.flatten().tolist(), batch["adv"].flatten().tolist(), mask.flatten().tolist()
    ):
        assert close(got, (a - mean) / (std + 1e-8) if m else 0.0, batch["adv"].dtype)


# -- the KL skip of the PPO update ----------------------------------------------------------------
@SETTINGS
@given(
    seed=st.integers(0, 2**16),
    size=st.integers(2, 12),
    width=st.integers(1, 9),
    target_kl=st.sampled_from([None, 0.0, 1e-4, 0.01, 0.1, 1e9]),
    epochs=st.integers(1, 3),
    lr=st.sampled_from([1e-3, 0.1, 1.0]),
)
def test_kl_skip_matches_the_loop(seed, size, width, target_kl, epochs, lr):
    """A minibatch's policy step is taken iff its k3 KL (recomputed here) is <= target_kl.

    The policy is a real learnable table of token logits (one categorical over 5 tokens per
    position), the critic a learnable table of values; the test records, at every policy
    evaluation, the loop KL of that minibatch and the optimiser's step count.
    """
    gen = torch.Generator().manual_seed(seed)
    logits = torch.nn.Parameter(torch.randn(size, width, 5, generator=gen, dtype=torch.float64))
    value_table = torch.nn.Parameter(torch.zeros(size, width, dtype=torch.float64))
    tokens = torch.randint(0, 5, (size, width), generator=gen)
    lengths = torch.randint(1, width + 1, (size,), generator=gen)
    mask = torch.arange(width)[None, :] < lengths[:, None]
    with torch.no_grad():
        old = torch.log_softmax(logits, -1).gather(-1, tokens[..., None])[..., 0]
    batch = PPOBatch(
        old_log_probs=old.where(mask, torch.zeros_like(old)),
        advantages=torch.randn(size, width, generator=gen, dtype=torch.float64) * mask,
        returns=torch.randn(size, width, generator=gen, dtype=torch.float64),
        old_values=torch.zeros(size, width, dtype=torch.float64),
        mask=mask,
        extras={"row": list(range(size))},
    )
    policy_optimizer = make_adamw([logits], lr)
    critic_optimizer = make_adamw([value_table], 0.01)
    seen = []  # (loop KL of the minibatch, optimiser steps so far)

    def evaluate_policy(minibatch):
        rows = torch.tensor(minibatch.extras["row"])
        log_probs_all = torch.log_softmax(logits[rows], -1)
        log_probs = log_probs_all.gather(-1, tokens[rows][..., None])[..., 0]
        entropy = -(log_probs_all.exp() * log_probs_all).sum(-1)
        kl_terms = [
            math.exp(lp - o) - 1.0 - (lp - o)
            for lp, o, m in zip(
                log_probs.flatten().tolist(),
                minibatch.old_log_probs.flatten().tolist(),
                minibatch.mask.flatten().tolist(),
            )
            if m
        ]
        state = policy_optimizer.state.get(logits, {})
        seen.append((sum(kl_terms) / max(len(kl_terms), 1), int(state.get("step", 0))))
        return PolicyEvaluation(log_probs, entropy)

    def evaluate_values(minibatch):
        return value_table[torch.tensor(minibatch.extras["row"])]

    num_minibatches = min(2, size)
    metrics = ppo_update(
        batch,
        evaluate_policy=evaluate_policy,
        evaluate_values=evaluate_values,
        policy_parameters=[logits],
        critic_parameters=[value_table],
        policy_optimizer=policy_optimizer,
        critic_optimizer=critic_optimizer,
        settings=PPOSettings(epochs=epochs, num_minibatches=num_minibatches, target_kl=target_kl),
        generator=torch.Generator().manual_seed(seed),
    )

    final_steps = int(policy_optimizer.state.get(logits, {}).get("step", 0))
    steps_after = [s for _, s in seen[1:]] + [final_steps]
    taken = [after - before for (_, before), after in zip(seen, steps_after)]
    expected = [1 if target_kl is None or kl <= target_kl else 0 for kl, _ in seen]
    assert len(seen) == epochs * num_minibatches
    # Exactly at the threshold the float comparison may go either way; elsewhere it must agree.
    for (kl, _), got, want in zip(seen, taken, expected):
        if target_kl is None or not math.isclose(kl, target_kl, rel_tol=1e-9, abs_tol=1e-12):
            assert got == want, (kl, target_kl, taken, expected)
    assert metrics["policy_steps_skipped"] == len(seen) - sum(taken)
    assert metrics["policy_steps_taken"] == sum(taken)
    assert math.isclose(
        metrics["approx_kl"], sum(kl for kl, _ in seen) / len(seen), rel_tol=1e-9, abs_tol=1e-12
    )


# -- TWOSOME's word / token normalisation ---------------------------------------------------------
WORDS = st.sampled_from(["open", "close", "the", "microwave", "put", "pancake", "in", "a", "x"])


@st.composite
def candidate_sets(draw):
    """Offered actions (texts) with per-token log-probs (1-12 tokens each)."""
    count = draw(st.integers(1, 6))
    texts = [" ".join(draw(st.lists(WORDS, min_size=0, max_size=6))) for _ in range(count)]
    token_log_probs = [
        draw(st.lists(st.floats(-20.0, 0.0), min_size=1, max_size=12)) for _ in range(count)
    ]
    return texts, token_log_probs


@SETTINGS
@given(candidates=candidate_sets(), normalization=st.sampled_from(["word", "token", "sum"]))
def test_candidate_normalisation_matches_the_loop(candidates, normalization):
    """The restricted-action policy: log-softmax of normalised action log-likelihoods (docs/reference.md#action-scoring)."""
    texts, token_log_probs = candidates
    normalise = NORMALIZATIONS[normalization]
    scores = torch.stack(
        [
            normalise(torch.tensor(lp, dtype=torch.float64).sum(), len(lp), text)
            for text, lp in zip(texts, token_log_probs)
        ]
    )
    categorical = torch.log_softmax(scores, dim=0).tolist()

    def loop_score(text, lp):
        total = sum(lp)
        if normalization == "word":
            return total / max(1, len(text.split()))
        if normalization == "token":
            return total / len(lp)
        return total

    loop_scores = [loop_score(t, lp) for t, lp in zip(texts, token_log_probs)]
    top = max(loop_scores)
    log_z = top + math.log(sum(math.exp(s - top) for s in loop_scores))
    for got, s in zip(categorical, loop_scores):
        assert math.isclose(got, s - log_z, rel_tol=1e-9, abs_tol=1e-9)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    actions=st.lists(
        st.lists(WORDS, min_size=1, max_size=4).map(" ".join), min_size=1, max_size=4, unique=True
    ),
    normalization=st.sampled_from(["word", "token", "sum"]),
)
def test_lm_candidate_policy_matches_the_loop_over_token_log_probs(
    actions, normalization, shared_tiny_policy
):
    """``candidate_log_probs`` (batched scoring) equals the loop over ``token_log_probs``."""
    policy = shared_tiny_policy
    policy.normalization = normalization
    prompt = "You are in the kitchen. Your next action is to"
    with torch.no_grad():
        got = policy.candidate_log_probs([prompt], [actions])[0].tolist()
        scores = []
        for action in actions:
            ids = policy.encode_action(prompt, action)
            per_token = policy.token_log_probs([prompt], [ids]).log_probs[0, : len(ids)].tolist()
            total = sum(per_token)
            scores.append(
                {
                    "word": total / max(1, len(action.split())),
                    "token": total / max(1, len(ids)),
                    "sum": total,
                }[normalization]
            )
    top = max(scores)
    log_z = top + math.log(sum(math.exp(s - top) for s in scores))
    # The batched path computes in float32: its rounding error grows with the magnitude of the
    # summed log-probs (a long action's total is ~1e2), so the tolerance is float32 precision
    # relative to the terms of s - log_z, plus a floor for values near zero.
    for g, s in zip(got, scores):
        tolerance = 2e-5 + 1e-6 * (abs(s) + abs(log_z))
        assert abs(g - (s - log_z)) <= tolerance, (g, s - log_z, tolerance)


@pytest.fixture(scope="module")
def shared_tiny_policy(tiny_model):
    from agentbench_poad.baselines import get_algorithm
    from agentbench_poad.rl.trainer import build_policy

    config = get_algorithm("twosome").config_class(num_envs=1, rollout_length=1, num_minibatches=1)
    policy = build_policy(config, tiny_model, seed=0)
    policy.model.eval()
    normalization = policy.normalization
    yield policy
    policy.normalization = normalization


# -- time-limit truncation (issue 27 item 2) ------------------------------------------------------
def loop_token_gae_with_time_limits(
    rewards, values, lengths, terminated, truncated, final_values, next_value, gamma, lam, intra
):
    """Gymnasium's rule, one env and one token at a time: after a terminal step nothing follows;
    after a time-limit truncation the observation it stopped at is worth ``final_values[t]`` and
    no advantage follows (the next step is another episode); otherwise the next step follows."""
    steps, envs = len(rewards), len(rewards[0])
    width = len(values[0][0])
    adv = [[[0.0] * width for _ in range(envs)] for _ in range(steps)]
    ret = [[[0.0] * width for _ in range(envs)] for _ in range(steps)]
    for i in range(envs):
        following_value, following_advantage = next_value[i], 0.0
        for t in reversed(range(steps)):
            if terminated[t][i]:
                following_value, following_advantage = 0.0, 0.0
            elif truncated[t][i]:
                following_value, following_advantage = final_values[t][i], 0.0
            n = lengths[t][i]
            v = values[t][i]
            for j in reversed(range(n)):
                if j == n - 1:
                    delta = rewards[t][i] + gamma * following_value - v[j]
                    a = delta + gamma * lam * following_advantage
                else:
                    a = intra * v[j + 1] - v[j] + intra * lam * a
                adv[t][i][j] = a
                ret[t][i][j] = a + v[j]
            following_value, following_advantage = v[0], adv[t][i][0]
    return np.array(adv), np.array(ret)


@st.composite
def time_limited_rollouts(draw):
    """A rollout whose steps terminate, truncate or go on anywhere (rates 0 to 1 each)."""
    case = draw(rollouts())
    rng = np.random.default_rng(case["seed"] + 1)
    shape = (case["steps"], case["envs"])
    end_rate = draw(st.sampled_from([0.0, 0.2, 0.5, 1.0]))
    truncated_share = draw(st.sampled_from([0.0, 0.5, 1.0]))
    ends = rng.random(shape) < end_rate
    cut = ends & (rng.random(shape) < truncated_share)
    final_values = rng.normal(scale=3.0, size=shape)
    # Where nothing was truncated the final values are never read: junk there must not matter.
    final_values = np.where(cut, final_values, rng.choice([np.nan, np.inf, 1e30], size=shape))
    return case, ends & ~cut, cut, final_values


@settings(SETTINGS, max_examples=100)
@given(
    drawn=time_limited_rollouts(),
    discount=discounts(),
    kind=st.sampled_from(["numpy", "torch"]),
    dtype=st.sampled_from([np.float64, np.float32]),
)
@example(  # width 8: the NumPy strided-out defect's stride (docs/numpy-strided-out-defect.md)
    drawn=(
        dict(seed=3, steps=16, envs=8, width=8, done_rate=0.0, full_row=True),
        np.eye(16, 8, dtype=bool),
        np.eye(16, 8, k=-2, dtype=bool),
        np.full((16, 8), 2.5),
    ),
    discount=(0.9, 0.95, 1.0),
    kind="numpy",
    dtype=np.float64,
)
def test_token_gae_bootstraps_time_limits_like_the_loop(drawn, discount, kind, dtype):
    case, terminated, truncated, final_values = drawn
    gamma, lam, intra_gamma = discount
    rewards, values, mask, _, next_value = make_rollout(**case)
    dones = terminated | truncated
    inputs = [as_kind(x, kind, dtype) for x in (rewards, values, mask, dones, next_value)]
    cut, final = as_kind(truncated, kind, dtype), as_kind(final_values, kind, np.float64)
    adv, ret = token_level_gae(
        *inputs,
        gamma=gamma,
        lam=lam,
        intra_gamma=intra_gamma,
        truncated=cut,
        final_values=final,
    )
    r, v, _, _, nv = (to_numpy(x).astype(np.float64) for x in inputs)
    ref_adv, ref_ret = loop_token_gae_with_time_limits(
        r.tolist(),
        v.tolist(),
        mask.sum(-1).tolist(),
        terminated.tolist(),
        truncated.tolist(),
        np.where(truncated, final_values, 0.0).tolist(),
        nv.tolist(),
        gamma,
        lam,
        intra_gamma,
    )
    assert type(adv) is type(inputs[1]) and adv.dtype == inputs[1].dtype
    adv, ret = to_numpy(adv).astype(np.float64), to_numpy(ret).astype(np.float64)
    atol = tolerance(dtype, ref_adv, ref_ret, np.where(truncated, final_values, 0.0))
    np.testing.assert_allclose(adv, ref_adv, rtol=0, atol=atol)
    np.testing.assert_allclose(ret, ref_ret, rtol=0, atol=atol)
    assert np.all(adv[~mask] == 0) and np.all(ret[~mask] == 0)


@settings(SETTINGS, max_examples=100)
@given(
    drawn=time_limited_rollouts(),
    gamma=DISCOUNTS,
    lam=DISCOUNTS,
    kind=st.sampled_from(["numpy", "torch"]),
    dtype=st.sampled_from([np.float64, np.float32]),
)
def test_action_gae_bootstraps_time_limits_like_the_loop(drawn, gamma, lam, kind, dtype):
    """Width 1 of the token loop is the action-level rule (TWOSOME)."""
    case, terminated, truncated, final_values = drawn
    rewards, values, _, _, next_value = make_rollout(**case)
    values = np.nan_to_num(values[..., :1])
    inputs = [
        as_kind(x, kind, dtype) for x in (rewards, values[..., 0], terminated | truncated)
    ] + [as_kind(next_value, kind, dtype)]
    adv, ret = action_level_gae(
        *inputs,
        gamma=gamma,
        lam=lam,
        truncated=as_kind(truncated, kind, dtype),
        final_values=as_kind(final_values, kind, np.float64),
    )
    r, v, _, nv = (to_numpy(x).astype(np.float64) for x in inputs)
    ref_adv, ref_ret = loop_token_gae_with_time_limits(
        r.tolist(),
        v[..., None].tolist(),
        np.ones(r.shape, dtype=int).tolist(),
        terminated.tolist(),
        truncated.tolist(),
        np.where(truncated, final_values, 0.0).tolist(),
        nv.tolist(),
        gamma,
        lam,
        1.0,
    )
    atol = tolerance(dtype, ref_adv, ref_ret, np.where(truncated, final_values, 0.0))
    np.testing.assert_allclose(to_numpy(adv).astype(np.float64), ref_adv[..., 0], rtol=0, atol=atol)
    np.testing.assert_allclose(to_numpy(ret).astype(np.float64), ref_ret[..., 0], rtol=0, atol=atol)


@SETTINGS
@given(drawn=time_limited_rollouts(), discount=discounts())
def test_no_truncation_is_the_old_estimator(drawn, discount):
    """All-zero ``truncated``: bit-identical to passing none (every done terminal)."""
    case, terminated, _, final_values = drawn
    gamma, lam, intra_gamma = discount
    rewards, values, mask, _, next_value = make_rollout(**case)
    kwargs = dict(gamma=gamma, lam=lam, intra_gamma=intra_gamma)
    plain = token_level_gae(rewards, values, mask, terminated, next_value, **kwargs)
    none_cut = token_level_gae(
        rewards,
        values,
        mask,
        terminated,
        next_value,
        truncated=np.zeros(terminated.shape),
        final_values=final_values,
        **kwargs,
    )
    for a, b in zip(plain, none_cut):
        np.testing.assert_array_equal(a, b)


def test_truncation_inputs_are_checked():
    rewards, values, mask, dones, next_value = make_rollout(0, 3, 2, 4, done_rate=0.0)
    cut = np.zeros(dones.shape)
    cut[1, 0] = 1.0
    final = np.ones(dones.shape)
    kwargs = dict(gamma=0.9, lam=0.9, intra_gamma=1.0)
    with pytest.raises(ValueError, match="truncated is 1 where dones is 0"):
        token_level_gae(
            rewards, values, mask, dones, next_value, truncated=cut, final_values=final, **kwargs
        )
    with pytest.raises(ValueError, match="together"):
        action_level_gae(
            rewards, values[..., 0], dones, next_value, gamma=0.9, lam=0.9, truncated=cut
        )
    dones = cut.astype(bool)
    final[1, 0] = np.nan
    with pytest.raises(ValueError, match="final_values contains NaN"):
        action_level_gae(
            np.nan_to_num(rewards),
            np.nan_to_num(values[..., 0]),
            dones,
            next_value,
            gamma=0.9,
            lam=0.9,
            truncated=cut,
            final_values=final,
        )
    with pytest.raises(ValueError, match="truncated must be"):
        action_level_gae(
            rewards,
            np.nan_to_num(values[..., 0]),
            dones,
            next_value,
            gamma=0.9,
            lam=0.9,
            truncated=cut * 0.5,
            final_values=np.ones(cut.shape),
        )


# -- the shared KL guard (issue 27 item 1) --------------------------------------------------------
@SETTINGS
@given(
    seed=st.integers(0, 2**16),
    sizes=st.lists(st.integers(1, 9), min_size=1, max_size=8),
    scale=st.sampled_from([0.0, 0.1, 1.0, 5.0]),
)
def test_candidate_kl_matches_the_loop(seed, sizes, scale):
    from agentbench_poad.rl.ppo import candidate_kl

    rng = np.random.default_rng(seed)
    old, new = [], []
    for k in sizes:
        logits = rng.normal(size=k)
        old.append(torch.log_softmax(torch.tensor(logits), 0).tolist())
        new.append(torch.log_softmax(torch.tensor(logits + scale * rng.normal(size=k)), 0))
    got = candidate_kl(old, new).tolist()
    for o, n, kl in zip(old, new, got):
        want = sum(math.exp(a) * (a - b) for a, b in zip(o, n.tolist()))
        assert math.isclose(kl, want, rel_tol=1e-9, abs_tol=1e-12)
        assert kl >= -1e-12


@SETTINGS
@given(
    seed=st.integers(0, 2**16),
    size=st.integers(2, 10),
    candidates=st.integers(1, 6),
    target_kl=st.sampled_from([0.0, 1e-4, 0.01, 0.1, 1e9]),
    epochs=st.integers(1, 3),
    lr=st.sampled_from([1e-3, 0.1, 1.0]),
)
def test_candidate_kl_guard_matches_the_loop(seed, size, candidates, target_kl, epochs, lr):
    """With a guard over the offered actions, a policy step is taken iff the minibatch's mean
    exact KL of the candidate categorical (recomputed here in floats) is <= target_kl."""
    from agentbench_poad.rl.ppo import candidate_kl

    gen = torch.Generator().manual_seed(seed)
    logits = torch.nn.Parameter(torch.randn(size, candidates, generator=gen, dtype=torch.float64))
    value_table = torch.nn.Parameter(torch.zeros(size, 1, dtype=torch.float64))
    chosen = torch.randint(0, candidates, (size,), generator=gen)
    with torch.no_grad():
        old_categorical = torch.log_softmax(logits, -1)
    batch = PPOBatch(
        old_log_probs=old_categorical.gather(-1, chosen[:, None]),
        advantages=torch.randn(size, 1, generator=gen, dtype=torch.float64),
        returns=torch.randn(size, 1, generator=gen, dtype=torch.float64),
        old_values=torch.zeros(size, 1, dtype=torch.float64),
        mask=torch.ones(size, 1, dtype=torch.bool),
        extras={"row": list(range(size)), "old": old_categorical.tolist()},
    )
    policy_optimizer = make_adamw([logits], lr)
    critic_optimizer = make_adamw([value_table], 0.01)
    seen = []

    def evaluate_policy(minibatch):
        rows = torch.tensor(minibatch.extras["row"])
        categorical = torch.log_softmax(logits[rows], -1)
        kls = [
            sum(math.exp(a) * (a - b) for a, b in zip(o, n))
            for o, n in zip(minibatch.extras["old"], categorical.tolist())
        ]
        state = policy_optimizer.state.get(logits, {})
        seen.append((sum(kls) / len(kls), int(state.get("step", 0))))
        entropy = -(categorical.exp() * categorical).sum(-1)
        return PolicyEvaluation(
            categorical.gather(-1, chosen[rows][:, None]), entropy[:, None], list(categorical)
        )

    def guard(minibatch, evaluation):
        return candidate_kl(minibatch.extras["old"], evaluation.candidate_log_probs)

    metrics = ppo_update(
        batch,
        evaluate_policy=evaluate_policy,
        evaluate_values=lambda mb: value_table[torch.tensor(mb.extras["row"])],
        policy_parameters=[logits],
        critic_parameters=[value_table],
        policy_optimizer=policy_optimizer,
        critic_optimizer=critic_optimizer,
        settings=PPOSettings(epochs=epochs, num_minibatches=2, target_kl=target_kl),
        generator=torch.Generator().manual_seed(seed),
        guard_kl=guard,
    )
    final_steps = int(policy_optimizer.state.get(logits, {}).get("step", 0))
    taken = [
        after - before for (_, before), after in zip(seen, [s for _, s in seen[1:]] + [final_steps])
    ]
    for (kl, _), got in zip(seen, taken):
        if not math.isclose(kl, target_kl, rel_tol=1e-9, abs_tol=1e-12):
            assert got == (1 if kl <= target_kl else 0), (kl, target_kl)
    assert metrics["policy_steps_taken"] == sum(taken)
    assert metrics["policy_steps_skipped"] == len(seen) - sum(taken)
    assert math.isclose(
        metrics["approx_kl"], sum(kl for kl, _ in seen) / len(seen), rel_tol=1e-9, abs_tol=1e-12
    )
