"""The rules for reward-free updates (docs/agents.md, "Reward-free updates") and the per-update
maxima the ablation's criterion reads, checked on a small softmax policy against plain loops."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from agentbench_poad.rl.ppo import (  # noqa: E402
    PolicyEvaluation,
    PPOBatch,
    PPOSettings,
    make_adamw,
    ppo_update,
)


class _SoftmaxPolicy(torch.nn.Module):
    """Logits per sample over V tokens: each sample's L tokens are drawn from its own row."""

    def __init__(self, samples: int, vocab: int, seed: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.logits = torch.nn.Parameter(torch.randn(samples, vocab, generator=generator))

    def evaluate(self, batch: PPOBatch) -> PolicyEvaluation:
        rows = torch.as_tensor(batch.extras["row"])
        tokens = torch.as_tensor(np.asarray(batch.extras["tokens"]))
        log_p = torch.log_softmax(self.logits[rows], dim=-1)  # (b, V)
        log_probs = torch.gather(log_p, 1, tokens)  # (b, L)
        entropy = -(log_p.exp() * log_p).sum(-1, keepdim=True).expand_as(log_probs)
        return PolicyEvaluation(log_probs=log_probs, entropy=entropy)


def _batch(samples: int, width: int, vocab: int, advantages: np.ndarray, seed: int) -> PPOBatch:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, size=(samples, width))
    lengths = rng.integers(1, width + 1, size=samples)
    mask = torch.as_tensor(np.arange(width)[None, :] < lengths[:, None])
    old = torch.as_tensor(rng.normal(-1.5, 0.5, size=(samples, width)), dtype=torch.float32)
    return PPOBatch(
        old_log_probs=old,
        advantages=torch.as_tensor(advantages, dtype=torch.float32) * mask,
        returns=torch.zeros(samples, width),
        old_values=torch.zeros(samples, width),
        mask=mask,
        extras={"row": list(range(samples)), "tokens": [list(t) for t in tokens]},
    )


def _run(policy, batch, settings, *, signal_free_batch):
    optimizer = make_adamw(list(policy.parameters()), 1e-2)
    return ppo_update(
        batch,
        evaluate_policy=policy.evaluate,
        evaluate_values=lambda b: torch.zeros_like(b.old_values),
        policy_parameters=list(policy.parameters()),
        critic_parameters=[],
        policy_optimizer=optimizer,
        critic_optimizer=None,
        settings=settings,
        generator=torch.Generator().manual_seed(0),
        signal_free_batch=signal_free_batch,
    )


def _plain_maxima(policy, batch, settings, entropy_coef):
    """Replays the update minibatch by minibatch with plain Python: the largest |loss| and
    pre-clip gradient norm, taking every step (target_kl None)."""
    optimizer = make_adamw(list(policy.parameters()), 1e-2)
    order = torch.randperm(len(batch), generator=torch.Generator().manual_seed(0))
    loss_max = norm_max = 0.0
    adv = batch.advantages
    for index in order.tensor_split(settings.num_minibatches):
        mb = batch.select(index)
        optimizer.zero_grad()
        evaluation = policy.evaluate(mb)
        count = 0
        terms = []
        for i in range(len(mb)):
            for j in range(mb.mask.shape[1]):
                if not mb.mask[i, j]:
                    continue
                count += 1
                log_ratio = torch.clamp(
                    evaluation.log_probs[i, j] - mb.old_log_probs[i, j], -20, 20
                )
                ratio = torch.exp(log_ratio)
                a = float(adv[index[i], j])
                clipped = torch.clamp(ratio, 1 - settings.clip, 1 + settings.clip)
                loss = torch.maximum(-ratio * a, -clipped * a)
                if a < 0:
                    loss = torch.minimum(loss, torch.tensor(-settings.dual_clip * a))
                terms.append((loss, evaluation.entropy[i, j]))
        total = sum(t[0] for t in terms) / count
        entropy_total = sum(t[1] for t in terms) / count
        (total - entropy_coef * entropy_total).backward()
        grads = [p.grad.reshape(-1) for p in policy.parameters()]
        norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))
        loss_max = max(loss_max, abs(float(total.detach())))
        norm_max = max(norm_max, norm)
        torch.nn.utils.clip_grad_norm_(list(policy.parameters()), settings.max_grad_norm)
        optimizer.step()
    return loss_max, norm_max


@settings(max_examples=25, deadline=None)
@given(
    samples=st.integers(2, 9),
    width=st.integers(1, 5),
    minibatches=st.integers(1, 3),
    seed=st.integers(0, 10_000),
    scale=st.sampled_from([0.01, 1.0, 30.0]),
)
def test_per_update_maxima_equal_a_plain_loop(samples, width, minibatches, seed, scale):
    minibatches = min(minibatches, samples)
    vocab = 7
    advantages = np.random.default_rng(seed + 1).normal(0, scale, size=(samples, width))
    settings_ = PPOSettings(
        epochs=1,
        num_minibatches=minibatches,
        target_kl=None,
        normalize_advantages=False,
        entropy_coef=0.01,
    )
    batch = _batch(samples, width, vocab, advantages, seed)
    metrics = _run(_SoftmaxPolicy(samples, vocab, seed), batch, settings_, signal_free_batch=False)
    loss_max, norm_max = _plain_maxima(_SoftmaxPolicy(samples, vocab, seed), batch, settings_, 0.01)
    assert metrics["policy_loss_max"] == pytest.approx(loss_max, rel=1e-4, abs=1e-6)
    assert metrics["policy_grad_norm_max"] == pytest.approx(norm_max, rel=1e-4, abs=1e-6)
    # a maximum is never below the mean the log already had
    assert metrics["policy_loss_max"] >= abs(metrics["policy_loss"]) - 1e-6
    assert metrics["policy_grad_norm_max"] >= metrics["policy_grad_norm"] - 1e-6


def test_maxima_include_a_minibatch_the_kl_guard_skipped():
    samples, width, vocab = 6, 3, 5
    advantages = np.random.default_rng(0).normal(0, 1, size=(samples, width))
    batch = _batch(samples, width, vocab, advantages, 0)
    batch.old_log_probs = batch.old_log_probs - 5.0  # every ratio is huge: the guard fires
    settings_ = PPOSettings(num_minibatches=2, target_kl=1e-6, normalize_advantages=False)
    policy = _SoftmaxPolicy(samples, vocab, 0)
    before = policy.logits.detach().clone()
    metrics = _run(policy, batch, settings_, signal_free_batch=False)
    assert metrics["policy_steps_taken"] == 0 and metrics["policy_steps_skipped"] == 2
    assert torch.equal(before, policy.logits.detach())
    assert metrics["policy_grad_norm_max"] > 0 and math.isfinite(metrics["policy_loss_max"])


def _zero_advantage_update(skip: bool, entropy: bool):
    samples, width, vocab = 6, 3, 5
    batch = _batch(samples, width, vocab, np.zeros((samples, width)), 1)
    policy = _SoftmaxPolicy(samples, vocab, 1)
    with torch.no_grad():  # on-policy: ratios start at 1
        batch.old_log_probs = policy.evaluate(batch).log_probs.clone()
    settings_ = PPOSettings(
        num_minibatches=2,
        normalize_over="batch",
        advantage_std_floor=0.1,
        skip_signal_free=skip,
        signal_free_entropy=entropy,
        entropy_coef=0.5,
    )
    before = policy.logits.detach().clone()
    metrics = _run(policy, batch, settings_, signal_free_batch=True)
    return metrics, not torch.equal(before, policy.logits.detach())


@pytest.mark.parametrize(
    "skip, entropy, moves",
    [
        (True, True, False),  # (a) skip: no policy pass at all
        (False, True, True),  # (b) keep: only the entropy bonus acts on a zero advantage
        (False, False, False),  # (c) keep without the entropy bonus on reward-free updates
    ],
)
def test_the_three_rules_on_a_reward_free_batch_of_zero_advantages(skip, entropy, moves):
    metrics, moved = _zero_advantage_update(skip, entropy)
    assert moved is moves
    assert (metrics["policy_steps_taken"] == 0) is skip
    if not skip:
        assert metrics["policy_loss_max"] == pytest.approx(0.0, abs=1e-7)


def test_entropy_is_kept_on_updates_with_a_reward_signal_under_rule_c():
    """Rule (c) drops the bonus only where rewards are all equal: the same batch with a reward
    signal keeps it, so the two updates differ."""
    samples, width, vocab = 4, 2, 5
    batch = _batch(samples, width, vocab, np.zeros((samples, width)), 2)
    results = []
    for signal_free_batch in (True, False):
        policy = _SoftmaxPolicy(samples, vocab, 2)
        with torch.no_grad():
            batch.old_log_probs = policy.evaluate(batch).log_probs.clone()
        settings_ = PPOSettings(
            num_minibatches=1, skip_signal_free=False, signal_free_entropy=False, entropy_coef=0.5
        )
        _run(policy, batch, settings_, signal_free_batch=signal_free_batch)
        results.append(policy.logits.detach().clone())
    assert not torch.equal(results[0], results[1])


# -- the rules by name: what a run's config or a record's safeguards say it followed -------------
_FIELDS = {
    "skip_signal_free": st.booleans(),
    "normalize_over": st.sampled_from(["batch", "minibatch"]),
    "advantage_std_floor": st.sampled_from([0.0, 0.1, 0.5]),
    "signal_free_entropy": st.booleans(),
    "normalize_advantages": st.booleans(),
}


@given(
    st.fixed_dictionaries({}, optional=_FIELDS)  # any field may be missing (older runs)
)
def test_a_rule_is_named_by_the_fields_that_matter_to_it(settings_):
    from agentbench_poad.rl.config import reward_free_rule

    normalised = settings_.get("normalize_advantages", True)
    plain_norm = (settings_.get("normalize_over"), settings_.get("advantage_std_floor"))
    entropy = settings_.get("signal_free_entropy", True)  # on in every run before the field
    skip = settings_.get("skip_signal_free")
    expected = None
    if skip is True and (not normalised or plain_norm == ("minibatch", 0.0)):
        expected = "skip"
    elif skip is False and (not normalised or plain_norm == ("batch", 0.1)):
        expected = "keep" if entropy else "keep-noent"
    assert reward_free_rule(settings_) == expected


def test_the_named_rules_are_the_ablations_and_the_default_is_one_of_them():
    from pathlib import Path

    from agentbench_poad.rl.config import REWARD_FREE_RULES, PPOConfig, reward_free_rule

    tomllib = pytest.importorskip("tomllib")
    spec = Path(__file__).resolve().parents[1] / "studies" / "reward-free-ablation"
    groups = tomllib.loads((spec / "ablation.toml").read_text())["group"]
    assert len(groups) == 18
    for group in groups:  # every group's overrides name its label's rule
        assert reward_free_rule(group["overrides"]) == group["label"], group["name"]
    assert set(REWARD_FREE_RULES) == {g["label"] for g in groups}
    assert reward_free_rule(PPOConfig().to_dict()) in REWARD_FREE_RULES
