"""Advantage backups (docs/reference.md#advantages): loops, identities and the BAD consistency result."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from agentbench_poad.rl.advantages import action_level_gae, discount_matrix, token_level_gae
from agentbench_poad.rl.toy import ACTIONS_BY_STAGE, microwave_transition

torch = pytest.importorskip("torch")


# -- plain loops, written from the spec's recursion ---------------------------------------------
def loop_token_gae(rewards, values, mask, dones, next_value, gamma, lam, intra_gamma):
    steps, envs, width = values.shape
    adv = np.zeros((steps, envs, width))
    for i in range(envs):
        g = 0.0
        next_first = next_value[i]
        for t in reversed(range(steps)):
            n = int(mask[t, i].sum())
            keep = 1.0 - dones[t, i]
            for j in reversed(range(n)):
                if j == n - 1:
                    delta = rewards[t, i] + gamma * keep * next_first - values[t, i, j]
                    g = delta + gamma * lam * keep * g
                else:
                    delta = intra_gamma * values[t, i, j + 1] - values[t, i, j]
                    g = delta + intra_gamma * lam * g
                adv[t, i, j] = g
            next_first = values[t, i, 0]
    returns = np.where(mask, adv + values, 0.0)
    return adv, returns


def loop_action_gae(rewards, values, dones, next_value, gamma, lam):
    steps, envs = values.shape
    adv = np.zeros((steps, envs))
    for i in range(envs):
        g, following = 0.0, next_value[i]
        for t in reversed(range(steps)):
            keep = 1.0 - dones[t, i]
            g = rewards[t, i] + gamma * keep * following - values[t, i] + gamma * lam * keep * g
            adv[t, i] = g
            following = values[t, i]
    return adv, adv + values


def random_rollout(rng, steps=6, envs=5, width=7):
    lengths = rng.integers(1, width + 1, size=(steps, envs))
    mask = np.arange(width)[None, None, :] < lengths[..., None]
    values = np.where(mask, rng.normal(size=(steps, envs, width)), 0.0)
    rewards = rng.normal(size=(steps, envs))
    dones = rng.random((steps, envs)) < 0.3
    next_value = rng.normal(size=envs)
    return rewards, values, mask, dones.astype(np.float64), next_value


@pytest.mark.parametrize("intra", ["bad", "naive"])
@pytest.mark.parametrize("lam", [1.0, 0.95, 0.0])
def test_token_gae_matches_loop(intra, lam):
    rng = np.random.default_rng(3)
    rewards, values, mask, dones, next_value = random_rollout(rng)
    gamma = 0.9
    intra_gamma = 1.0 if intra == "bad" else gamma
    adv, ret = token_level_gae(
        rewards, values, mask, dones, next_value, gamma=gamma, lam=lam, intra_gamma=intra_gamma
    )
    ref_adv, ref_ret = loop_token_gae(
        rewards, values, mask, dones, next_value, gamma, lam, intra_gamma
    )
    np.testing.assert_allclose(adv, ref_adv, atol=1e-10)
    np.testing.assert_allclose(ret, ref_ret, atol=1e-10)
    assert np.all(adv[~mask] == 0) and np.all(ret[~mask] == 0)


def test_pad_values_are_ignored():
    rng = np.random.default_rng(4)
    rewards, values, mask, dones, next_value = random_rollout(rng)
    noisy = np.where(mask, values, rng.normal(size=values.shape) * 100)
    noisy[tuple(np.argwhere(~mask)[::3].T)] = np.nan  # even NaN at pads must not leak
    assert np.isnan(noisy).any()
    a = token_level_gae(
        rewards, values, mask, dones, next_value, gamma=0.9, lam=0.95, intra_gamma=1.0
    )[0]
    b = token_level_gae(
        rewards, noisy, mask, dones, next_value, gamma=0.9, lam=0.95, intra_gamma=1.0
    )[0]
    np.testing.assert_allclose(a, b)


def test_action_gae_matches_loop():
    rng = np.random.default_rng(5)
    rewards, values, _, dones, next_value = random_rollout(rng)
    values = values[..., 0]
    adv, ret = action_level_gae(rewards, values, dones, next_value, gamma=0.99, lam=0.95)
    ref_adv, ref_ret = loop_action_gae(rewards, values, dones, next_value, 0.99, 0.95)
    np.testing.assert_allclose(adv, ref_adv, atol=1e-12)
    np.testing.assert_allclose(ret, ref_ret, atol=1e-12)


@pytest.mark.parametrize("intra_gamma", [1.0, 0.9])
def test_one_token_actions_reduce_to_action_level(intra_gamma):
    rng = np.random.default_rng(6)
    rewards, values, _, dones, next_value = random_rollout(rng, width=1)
    mask = np.ones_like(values, dtype=bool)
    adv, ret = token_level_gae(
        rewards, values, mask, dones, next_value, gamma=0.9, lam=0.8, intra_gamma=intra_gamma
    )
    ref_adv, ref_ret = action_level_gae(
        rewards, values[..., 0], dones, next_value, gamma=0.9, lam=0.8
    )
    np.testing.assert_allclose(adv[..., 0], ref_adv, atol=1e-12)
    np.testing.assert_allclose(ret[..., 0], ref_ret, atol=1e-12)


def test_bad_lambda_one_telescopes():
    """docs/reference.md#advantages: with λ = 1 every token of an action gets A^n + V^n − V^j (no discount inside)."""
    rng = np.random.default_rng(7)
    rewards, values, mask, dones, next_value = random_rollout(rng)
    adv, _ = token_level_gae(
        rewards, values, mask, dones, next_value, gamma=0.9, lam=1.0, intra_gamma=1.0
    )
    last = mask.sum(-1) - 1
    adv_last = np.take_along_axis(adv, last[..., None], -1)
    v_last = np.take_along_axis(values, last[..., None], -1)
    np.testing.assert_allclose(
        np.where(mask, adv, 0), np.where(mask, adv_last + v_last - values, 0), atol=1e-10
    )


def test_numpy_and_torch_agree():
    rng = np.random.default_rng(8)
    rewards, values, mask, dones, next_value = random_rollout(rng)
    kwargs = dict(gamma=0.95, lam=0.95, intra_gamma=1.0)
    adv_np, ret_np = token_level_gae(rewards, values, mask, dones, next_value, **kwargs)
    adv_t, ret_t = token_level_gae(
        torch.tensor(rewards),
        torch.tensor(values, dtype=torch.float32),
        torch.tensor(mask),
        torch.tensor(dones),
        torch.tensor(next_value),
        **kwargs,
    )
    assert isinstance(adv_t, torch.Tensor) and adv_t.dtype == torch.float32
    np.testing.assert_allclose(adv_t.numpy(), adv_np, atol=1e-5)
    np.testing.assert_allclose(ret_t.numpy(), ret_np, atol=1e-5)
    a_np, _ = action_level_gae(rewards, values[..., 0], dones, next_value, gamma=0.9, lam=0.9)
    a_t, _ = action_level_gae(
        torch.tensor(rewards),
        torch.tensor(values[..., 0]),
        torch.tensor(dones),
        torch.tensor(next_value),
        gamma=0.9,
        lam=0.9,
    )
    assert isinstance(a_t, torch.Tensor)
    np.testing.assert_allclose(a_t.numpy(), a_np, atol=1e-12)


def test_bad_masks_are_rejected():
    rng = np.random.default_rng(9)
    rewards, values, mask, dones, next_value = random_rollout(rng)
    holes = mask.copy()
    holes[0, 0, :] = [True, False, True] + [False] * (mask.shape[-1] - 3)
    with pytest.raises(ValueError, match="prefix"):
        token_level_gae(
            rewards, values, holes, dones, next_value, gamma=0.9, lam=0.9, intra_gamma=1.0
        )
    empty = mask.copy()
    empty[1, 2, :] = False
    with pytest.raises(ValueError, match="at least one token"):
        token_level_gae(
            rewards, values, empty, dones, next_value, gamma=0.9, lam=0.9, intra_gamma=1.0
        )
    with pytest.raises(ValueError, match="next_value"):
        token_level_gae(
            rewards, values, mask, dones, next_value[:-1], gamma=0.9, lam=0.9, intra_gamma=1.0
        )


def test_discount_matrix():
    w = discount_matrix(4, 0.5)
    x = np.array([1.0, 2.0, 3.0, 4.0])
    expected = [1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 4, 2 + 0.5 * 3 + 0.25 * 4, 3 + 0.5 * 4, 4]
    np.testing.assert_allclose(x @ w.T, expected)


# -- the consistency result on the microwave MDP, with exact values -----------------------------
GAMMA = 0.95
HORIZON = 5  # the toy's time limit


def tokens(action: str) -> list[str]:
    return action.split()  # one "token" per word is enough for the backups


def exact_values(intra_gamma: float):
    """Exact token-MDP values under the uniform policy, by backward induction over time.

    Returns ``(V, Q)``: ``V[(stage, k)]`` is the value before an action's first token with ``k``
    steps taken; ``Q[(stage, k, action)]`` the value before its last token. With intra-action
    discount ``c``, the value before token j ≥ 2 is ``c^(n-j) Q`` and the first token's value is
    the policy average of ``c^(n-1) Q``.
    """
    V, Q = {}, {}
    for k in reversed(range(HORIZON)):
        for stage, actions in ACTIONS_BY_STAGE.items():
            total = 0.0
            for action in actions:
                nxt, reward, success = microwave_transition(stage, action)
                done = success or k + 1 >= HORIZON
                if not success and k + 1 >= HORIZON:
                    reward = -1.0
                q = reward + (0.0 if done else GAMMA * V[(nxt, k + 1)])
                Q[(stage, k, action)] = q
                total += intra_gamma ** (len(tokens(action)) - 1) * q / len(actions)
            V[(stage, k)] = total
    return V, Q


def trajectory(seed: int):
    """A uniform-random episode of the toy: list of (stage, k, action, reward, done)."""
    rng = np.random.default_rng(seed)
    stage, out = 0, []
    for k in range(HORIZON):
        actions = ACTIONS_BY_STAGE[stage]
        action = actions[rng.integers(len(actions))]
        nxt, reward, success = microwave_transition(stage, action)
        done = success or k + 1 >= HORIZON
        if not success and done:
            reward = -1.0
        out.append((stage, k, action, reward, done))
        stage = nxt
        if done:
            break
    return out


def rollout_arrays(steps, V, Q, intra_gamma):
    width = max(len(tokens(a)) for a in itertools.chain(*ACTIONS_BY_STAGE.values()))
    T = len(steps)
    values = np.zeros((T, 1, width))
    mask = np.zeros((T, 1, width), dtype=bool)
    for t, (stage, k, action, _, _) in enumerate(steps):
        n = len(tokens(action))
        mask[t, 0, :n] = True
        values[t, 0, 0] = V[(stage, k)]
        for j in range(1, n):  # value before token j+1 (1-based), the action being known
            values[t, 0, j] = intra_gamma ** (n - 1 - j) * Q[(stage, k, action)]
    rewards = np.array([[s[3]] for s in steps])
    dones = np.array([[float(s[4])] for s in steps])
    return rewards, values, mask, dones, np.zeros(1)


@pytest.mark.parametrize("seed", range(6))
def test_bad_token_values_are_consistent_with_action_values(seed):
    """Exact values + BAD backup: every token's return is the action's Q (λ = 0: one-step TD)."""
    steps = trajectory(seed)
    V, Q = exact_values(1.0)
    rewards, values, mask, dones, nv = rollout_arrays(steps, V, Q, 1.0)
    adv, ret = token_level_gae(
        rewards, values, mask, dones, nv, gamma=GAMMA, lam=0.0, intra_gamma=1.0
    )
    action_values = values[:, :, 0]
    a_adv, a_ret = action_level_gae(rewards, action_values, dones, nv, gamma=GAMMA, lam=0.0)
    for t, (stage, k, action, _, _) in enumerate(steps):
        n = len(tokens(action))
        q = Q[(stage, k, action)]
        np.testing.assert_allclose(ret[t, 0, :n], q, atol=1e-12)  # every token: Q(s, a)
        np.testing.assert_allclose(a_ret[t, 0], q, atol=1e-12)  # = the action-level target
        np.testing.assert_allclose(adv[t, 0, 0], a_adv[t, 0], atol=1e-12)  # first token: A(s, a)
        np.testing.assert_allclose(adv[t, 0, 1:n], 0.0, atol=1e-12)  # later tokens: no credit
    # The BAD state values are the action-level (policy-evaluation) values of the toy.
    assert V[(0, 0)] == pytest.approx(exact_action_state_value(0, 0))


def exact_action_state_value(stage: int, k: int) -> float:
    V = {}
    for kk in reversed(range(HORIZON)):
        for s, actions in ACTIONS_BY_STAGE.items():
            total = 0.0
            for action in actions:
                nxt, reward, success = microwave_transition(s, action)
                done = success or kk + 1 >= HORIZON
                if not success and done:
                    reward = -1.0
                total += (reward + (0.0 if done else GAMMA * V[(nxt, kk + 1)])) / len(actions)
            V[(s, kk)] = total
    return V[(stage, k)]


@pytest.mark.parametrize("seed", range(6))
def test_ntpo_discounts_earlier_tokens(seed):
    """NTPO's own exact values are self-consistent but give token j the return γ^(n−j)·Q."""
    steps = trajectory(seed)
    V, Q = exact_values(GAMMA)
    rewards, values, mask, dones, nv = rollout_arrays(steps, V, Q, GAMMA)
    adv, ret = token_level_gae(
        rewards, values, mask, dones, nv, gamma=GAMMA, lam=0.0, intra_gamma=GAMMA
    )
    V_bad, Q_bad = exact_values(1.0)
    for t, (stage, k, action, _, _) in enumerate(steps):
        n = len(tokens(action))
        q = Q[(stage, k, action)]
        for j in range(n):  # 0-based token index: return γ^(n-1-j) Q_NTPO
            assert ret[t, 0, j] == pytest.approx(GAMMA ** (n - 1 - j) * q, abs=1e-12)
        np.testing.assert_allclose(adv[t, 0, 1:n], 0.0, atol=1e-12)  # fixed point: no TD error
        if n > 1 and Q_bad[(stage, k, action)] != 0:
            # ... which differs from the action-level value that BAD reproduces.
            assert ret[t, 0, 0] != pytest.approx(Q_bad[(stage, k, action)], abs=1e-6)


@pytest.mark.parametrize("factor", [1.0, 0.9, 0.3, 0.0, 1e-9])
def test_reverse_discounted_cumsum_paths_agree(factor):
    from agentbench_poad.rl.advantages import reverse_discounted_cumsum

    x = np.random.default_rng(10).normal(size=(3, 40))
    expected = x @ discount_matrix(40, factor).T
    np.testing.assert_allclose(
        reverse_discounted_cumsum(x, factor), expected, rtol=1e-9, atol=1e-12
    )


def test_numpy_only_path_gives_the_same_numbers(monkeypatch):
    """Without torch loaded the cumulative sums are NumPy's; the results are identical."""
    import sys

    rng = np.random.default_rng(11)
    rewards, values, mask, dones, next_value = random_rollout(rng)
    kwargs = dict(gamma=0.9, lam=0.95, intra_gamma=0.9)
    with_torch = token_level_gae(rewards, values, mask, dones, next_value, **kwargs)[0]
    monkeypatch.setitem(sys.modules, "torch", None)
    numpy_only = token_level_gae(rewards, values, mask, dones, next_value, **kwargs)[0]
    np.testing.assert_allclose(numpy_only, with_torch, rtol=0, atol=1e-12)
