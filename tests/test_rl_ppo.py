"""PPO losses and the shared update loop (REFERENCE_SPEC §4.5)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from agentbench_poad.rl.ppo import (  # noqa: E402
    PolicyEvaluation,
    PPOBatch,
    PPOSettings,
    accumulate_policy_gradients,
    approx_kl_k3,
    clipped_surrogate_loss,
    clipped_value_loss,
    make_adamw,
    masked_mean,
    normalize_advantages,
    ppo_update,
)


def test_surrogate_matches_formula():
    new = torch.tensor([0.0, 0.5, -0.5, 0.1])
    old = torch.zeros(4)
    adv = torch.tensor([1.0, 1.0, -1.0, -2.0])
    loss = clipped_surrogate_loss(new, old, adv, clip=0.2)
    ratio = new.exp()
    expected = [
        max(-r * a, -min(max(r, 0.8), 1.2) * a) for r, a in zip(ratio.tolist(), adv.tolist())
    ]
    torch.testing.assert_close(loss, torch.tensor(expected))
    # a large ratio with a positive advantage is clipped: no incentive beyond 1 + ε
    assert loss[1].item() == pytest.approx(-1.2)


def test_value_loss_matches_formula():
    values = torch.tensor([[1.0, 2.0], [0.0, 9.0]])
    old = torch.tensor([[0.5, 2.0], [0.0, 0.0]])
    returns = torch.tensor([[2.0, 2.5], [1.0, 0.0]])
    mask = torch.tensor([[True, True], [True, False]])
    loss = clipped_value_loss(values, old, returns, mask, clip=0.2)
    clipped = old + (values - old).clamp(-0.2, 0.2)
    err = torch.maximum(0.5 * (returns - clipped) ** 2, 0.5 * (returns - values) ** 2)
    assert loss.item() == pytest.approx(err[mask].mean().item())


def test_normalize_uses_the_mask_not_nonzero_entries():
    adv = torch.tensor([[0.0, 2.0, 0.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True], [True, False, False]])  # real zeros at [0,0],[0,2]
    out = normalize_advantages(adv, mask)
    real = torch.tensor([0.0, 2.0, 0.0, 4.0])
    expected = (real - real.mean()) / (real.std(unbiased=False) + 1e-8)
    torch.testing.assert_close(out[mask], expected)
    assert out[~mask].abs().sum() == 0
    assert masked_mean(out, mask).abs() < 1e-6


def test_k3_kl():
    old = torch.log(torch.tensor([[0.5, 0.25]]))
    mask = torch.ones(1, 2, dtype=torch.bool)
    assert approx_kl_k3(old, old, mask).item() == 0.0
    new = old + torch.tensor([[0.3, -0.2]])
    ratio = (new - old).exp()
    expected = ((ratio - 1) - (new - old)).mean()
    assert approx_kl_k3(new, old, mask).item() == pytest.approx(expected.item())
    assert expected > 0


# -- a tiny softmax "policy" over a 5-token vocabulary, token level ----------------------------
class TinyPolicy(torch.nn.Module):
    def __init__(self, seed=0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.w = torch.nn.Parameter(torch.randn(3, 5, generator=gen) * 0.1)
        self.v = torch.nn.Parameter(torch.randn(3, 1, generator=gen) * 0.1)

    def evaluate(self, chunk: PPOBatch) -> PolicyEvaluation:
        feats = torch.stack(list(chunk.extras["features"]))  # (b, L, 3)
        tokens = torch.stack(list(chunk.extras["tokens"]))  # (b, L)
        logp = torch.log_softmax(feats @ self.w, -1)
        chosen = logp.gather(-1, tokens[..., None])[..., 0]
        entropy = -(logp.exp() * logp).sum(-1)
        mask = chunk.mask
        return PolicyEvaluation(chosen * mask, entropy * mask)

    def values(self, chunk: PPOBatch) -> torch.Tensor:
        feats = torch.stack(list(chunk.extras["features"]))
        return (feats @ self.v)[..., 0]


def make_batch(size=12, width=4, seed=1, policy=None):
    gen = torch.Generator().manual_seed(seed)
    feats = torch.randn(size, width, 3, generator=gen)
    tokens = torch.randint(0, 5, (size, width), generator=gen)
    lengths = torch.randint(1, width + 1, (size,), generator=gen)
    mask = torch.arange(width)[None, :] < lengths[:, None]
    adv = torch.randn(size, width, generator=gen) * mask
    returns = torch.randn(size, width, generator=gen) * mask
    batch = PPOBatch(
        old_log_probs=torch.zeros(size, width),
        advantages=adv,
        returns=returns,
        old_values=torch.zeros(size, width),
        mask=mask,
        extras={"features": list(feats), "tokens": list(tokens)},
    )
    if policy is not None:
        with torch.no_grad():
            batch.old_log_probs = policy.evaluate(batch).log_probs.detach()
            batch.old_values = policy.values(batch).detach() * mask
    return batch


@pytest.mark.parametrize("chunks", [2, 3, 5])
def test_gradient_accumulation_equals_one_step(chunks):
    base = TinyPolicy()
    batch = make_batch(policy=base)
    with torch.no_grad():
        base.w.add_(0.05)  # so the ratios differ from 1 and clipping engages somewhere
    adv = normalize_advantages(batch.advantages, batch.mask)
    grads = []
    for steps in (1, chunks):
        base.zero_grad()
        settings = PPOSettings(grad_accum_steps=steps, entropy_coef=0.01)
        stats = accumulate_policy_gradients(batch, adv, base.evaluate, settings)
        grads.append((base.w.grad.clone(), stats))
    torch.testing.assert_close(grads[0][0], grads[1][0], atol=1e-6, rtol=0)
    for key in ("policy_loss", "entropy", "approx_kl"):
        assert grads[0][1][key] == pytest.approx(grads[1][1][key], abs=1e-6)


def run_update(settings, seed=0, shift=0.0):
    policy = TinyPolicy()
    batch = make_batch(policy=policy)
    batch.old_log_probs = batch.old_log_probs - shift * batch.mask  # pretend the policy moved
    before = [p.detach().clone() for p in (policy.w, policy.v)]
    metrics = ppo_update(
        batch,
        evaluate_policy=policy.evaluate,
        evaluate_values=policy.values,
        policy_parameters=[policy.w],
        critic_parameters=[policy.v],
        policy_optimizer=make_adamw([policy.w], 1e-2),
        critic_optimizer=make_adamw([policy.v], 1e-2),
        settings=settings,
        generator=torch.Generator().manual_seed(seed),
    )
    return policy, before, metrics


def test_kl_guard_skips_the_policy_step_only():
    settings = PPOSettings(epochs=2, num_minibatches=3, target_kl=0.02)
    policy, before, metrics = run_update(settings, shift=1.0)  # KL of a 1-nat shift >> 0.02
    assert metrics["policy_steps_skipped"] == 6 and metrics["policy_steps_taken"] == 0
    assert metrics["approx_kl"] > 0.02
    torch.testing.assert_close(policy.w, before[0])  # policy untouched
    assert not torch.equal(policy.v, before[1])  # the critic still learned


def test_update_runs_all_minibatches_and_is_deterministic():
    settings = PPOSettings(epochs=2, num_minibatches=3, target_kl=None)
    p1, before, m1 = run_update(settings)
    p2, _, m2 = run_update(settings)
    assert m1["policy_steps_taken"] == 6 and m1["policy_steps_skipped"] == 0
    assert not torch.equal(p1.w, before[0])
    torch.testing.assert_close(p1.w, p2.w, rtol=0, atol=0)
    assert m1 == m2
    p3, _, _ = run_update(settings, seed=1)
    assert not torch.equal(p1.w, p3.w)  # the permutation comes from the generator


def test_update_raises_probability_of_advantaged_tokens():
    policy = TinyPolicy()
    batch = make_batch(policy=policy, size=16)
    tokens = torch.stack(list(batch.extras["tokens"]))
    batch.advantages = torch.where(tokens == 2, 1.0, -1.0) * batch.mask
    settings = PPOSettings(epochs=10, num_minibatches=2, target_kl=None, entropy_coef=0.0)

    def prob_of_2():
        feats = torch.stack(list(batch.extras["features"]))
        return torch.softmax(feats @ policy.w, -1)[..., 2][batch.mask].mean().item()

    start = prob_of_2()
    ppo_update(
        batch,
        evaluate_policy=policy.evaluate,
        evaluate_values=policy.values,
        policy_parameters=[policy.w],
        critic_parameters=[policy.v],
        policy_optimizer=make_adamw([policy.w], 2e-1),
        critic_optimizer=make_adamw([policy.v], 1e-2),
        settings=settings,
        generator=torch.Generator().manual_seed(0),
    )
    assert prob_of_2() > start + 0.02


def test_too_many_minibatches_is_a_clear_error():
    with pytest.raises(ValueError, match="num_minibatches"):
        run_update(PPOSettings(num_minibatches=50))
