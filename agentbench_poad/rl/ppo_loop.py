"""The PPO update loop shared by every agent: epochs, minibatches, chunks, KL guard, steps.

Action-level and token-level PPO are the same computation on tensors of shape ``(B, L)`` with a
mask: a token-level sample has one column per action token, an action-level sample has ``L = 1``.
An algorithm therefore only tells :func:`ppo_update` how to recompute its log-probabilities,
entropies and values for a set of samples (:class:`PolicyEvaluation`); the clipping, masking,
KL guard, gradient accumulation and optimiser steps live here, once. The losses themselves are
:mod:`agentbench_poad.rl.ppo_losses`; the agent template that calls :func:`ppo_update` is
:class:`agentbench_poad.rl.ppo.PPOAgent`.

Per minibatch (the reference's order): one critic step on the clipped value loss, then the policy
step, accumulated over chunks; when the minibatch's KL(old‖new) exceeds ``target_kl`` the
accumulated policy gradients are discarded and that step is skipped (later minibatches and epochs
still run). Gradient accumulation is exact (docs/reference.md#deviations): advantages are
normalised over real entries of the whole minibatch, and every masked mean divides by the
minibatch's real-entry count, not the chunk's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentbench_poad.rl.ppo_losses import (
    approx_kl_k3,
    clipped_surrogate_loss,
    clipped_value_loss,
    masked_mean,
    normalize_advantages,
)

__all__ = [
    "EvaluatePolicy",
    "EvaluateValues",
    "GuardKL",
    "NonFiniteLossError",
    "PPOBatch",
    "PPOSettings",
    "PolicyEvaluation",
    "accumulate_policy_gradients",
    "critic_step",
    "make_adamw",
    "pad_columns",
    "pad_rows",
    "policy_chunks",
    "ppo_update",
]


@dataclass(frozen=True)
class PPOSettings:
    """Knobs of one PPO update (filled from an algorithm config).

    Attributes:
        epochs: passes over the rollout batch.
        num_minibatches: minibatches per epoch (samples drawn without replacement).
        grad_accum_steps: policy chunks per minibatch whose gradients are accumulated.
        clip: PPO ratio clip ε, also the value clip.
        value_coef: weight of the value loss.
        entropy_coef: weight of the entropy bonus.
        max_grad_norm: global grad-norm clip of each network.
        target_kl: skip a minibatch's policy step when its guard KL exceeds this (None: never).
            Checked before the step, so it is not a hard bound on the KL after it.
        normalize_advantages: normalise advantages over real entries (``normalize_over``).
        normalize_over: ``"batch"`` (once over the whole rollout batch) or ``"minibatch"``.
        advantage_std_floor: the standard deviation the normalisation divides by is at least
            this (0: no floor), so a batch of tiny advantages (critic noise) is not scaled up.
        skip_signal_free: skip every policy step of an update whose rollout rewards are all
            equal (no reward signal: the advantages are the critic's noise or exactly 0).
        signal_free_entropy: keep the entropy bonus on an update whose rollout rewards are all
            equal (False: the policy loss of such an update has no entropy term; rule (c) of
            docs/agents.md, "Reward-free updates"). Irrelevant when ``skip_signal_free``.
        dual_clip: dual-clip constant ``c > 1``: the loss of a negative advantage is at most
            ``c·|A|`` (None: plain PPO, unbounded).
        max_log_ratio: the log-ratio is clamped to ``±max_log_ratio`` before ``exp``.
        max_chunk_tokens: when set (and the batch knows its samples' ``sizes``), each
            minibatch's policy pass is split into length-sorted chunks of at most this many
            padded tokens instead of ``grad_accum_steps`` equal chunks (same gradient: the
            accumulation is exact; less padding).
    """

    epochs: int = 1
    num_minibatches: int = 4
    grad_accum_steps: int = 1
    clip: float = 0.2
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    max_grad_norm: float = 0.5
    target_kl: float | None = 0.02
    normalize_advantages: bool = True
    max_chunk_tokens: int | None = None
    normalize_over: str = "batch"
    advantage_std_floor: float = 0.1
    skip_signal_free: bool = False
    signal_free_entropy: bool = True
    dual_clip: float | None = 3.0
    max_log_ratio: float = 20.0


class NonFiniteLossError(FloatingPointError):
    """A loss or gradient norm of an update was NaN or inf: the run stops (never a silent skip)."""


@dataclass
class PolicyEvaluation:
    """What the current policy says about a set of samples (with grad).

    Attributes:
        log_probs: ``(b, L)`` log-probabilities of the stored actions (tokens, or ``L = 1``).
        entropy: ``(b, L)`` entropy at each position.
    """

    log_probs: torch.Tensor
    entropy: torch.Tensor
    candidate_log_probs: Sequence[torch.Tensor] | None = None
    """Restricted actions: per sample, the new ``(K_i,)`` log-categorical over its offered
    actions, when the evaluation computed it anyway (TWOSOME); the KL guard then reuses it instead
    of scoring the candidates again."""


@dataclass
class PPOBatch:
    """A flattened on-policy batch of ``B`` samples, aligned on a ``(B, L)`` grid.

    Attributes:
        old_log_probs: ``(B, L)`` log-probs at sampling time.
        advantages: ``(B, L)`` advantages (0 at pads).
        returns: ``(B, L)`` value targets.
        old_values: ``(B, L)`` values at sampling time.
        mask: ``(B, L)`` bool, True at real entries.
        extras: anything the algorithm needs to recompute log-probs and values (lists of
            prompts, token ids, candidates ...), indexed by sample.
    """

    old_log_probs: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    old_values: torch.Tensor
    mask: torch.Tensor
    extras: dict[str, Sequence[Any]]
    value_mask: torch.Tensor | None = None
    """``(B, L)`` bool where values are real, when it differs from ``mask`` (e.g. an empty
    generated action has a state value but no token to score)."""
    sizes: torch.Tensor | None = None
    """``(B,)`` tokens the policy pass runs per sample (prompt + action), for length-sorted
    chunking (``PPOSettings.max_chunk_tokens``); None when unknown."""

    def __len__(self) -> int:
        return int(self.mask.shape[0])

    def select(self, index: torch.Tensor) -> PPOBatch:
        """The samples at ``index`` (a 1-D long tensor), as a new batch."""
        positions = index.tolist()
        return PPOBatch(
            old_log_probs=self.old_log_probs[index],
            advantages=self.advantages[index],
            returns=self.returns[index],
            old_values=self.old_values[index],
            mask=self.mask[index],
            value_mask=None if self.value_mask is None else self.value_mask[index],
            sizes=None if self.sizes is None else self.sizes[index],
            extras={k: [v[i] for i in positions] for k, v in self.extras.items()},
        )


def make_adamw(parameters: Sequence[torch.nn.Parameter], lr: float) -> torch.optim.Optimizer:
    """The optimiser both networks use: AdamW, eps 1e-5, no weight decay (docs/reference.md#ppo-losses)."""
    return torch.optim.AdamW(list(parameters), lr=lr, eps=1e-5, weight_decay=0.0)


EvaluatePolicy = Callable[[PPOBatch], PolicyEvaluation]
EvaluateValues = Callable[[PPOBatch], torch.Tensor]
#: ``guard_kl(chunk, evaluation)``: ``(b,)`` per-sample KLs of the chunk, or None to use the
#: token-level k3 estimate (open actions).
GuardKL = Callable[[PPOBatch, PolicyEvaluation], "torch.Tensor | None"]


def policy_chunks(minibatch: PPOBatch, settings: PPOSettings) -> list[torch.Tensor]:
    """How a minibatch's policy pass is split: index tensors into the minibatch.

    By default ``grad_accum_steps`` equal consecutive chunks. With ``max_chunk_tokens`` and known
    ``sizes``: samples sorted by size (longest first) and packed greedily into chunks whose
    padded size (samples × longest) stays within the budget (a sample longer than the budget is
    a chunk of its own). Every sample lands in exactly one chunk, so the accumulated gradient is
    the same whatever the split.
    """
    size = len(minibatch)
    if settings.max_chunk_tokens is None or minibatch.sizes is None:
        return [c for c in torch.arange(size).tensor_split(settings.grad_accum_steps) if c.numel()]
    lengths = minibatch.sizes.tolist()
    order = sorted(range(size), key=lambda i: (-lengths[i], i))
    chunks: list[list[int]] = []
    for i in order:
        if chunks and (len(chunks[-1]) + 1) * lengths[chunks[-1][0]] <= settings.max_chunk_tokens:
            chunks[-1].append(i)
        else:
            chunks.append([i])
    return [torch.tensor(c, dtype=torch.long) for c in chunks]


def accumulate_policy_gradients(
    minibatch: PPOBatch,
    advantages: torch.Tensor,
    evaluate_policy: EvaluatePolicy,
    settings: PPOSettings,
    guard_kl: GuardKL | None = None,
    *,
    entropy_coef: float | None = None,
) -> dict[str, float]:
    """Backpropagate the minibatch's policy loss in chunks (:func:`policy_chunks`).

    Every masked mean divides by the real-entry count of the whole minibatch, so the summed chunk
    gradients equal the gradient of the un-chunked loss.

    ``guard_kl`` (see :meth:`~agentbench_poad.rl.ppo.PPOAgent.guard_kl`) gives per-sample KLs
    of a chunk, averaged over the minibatch's samples; where it is None or returns None, the KL
    is the k3 estimate over the minibatch's real tokens.

    ``entropy_coef`` overrides ``settings.entropy_coef`` (0 on a reward-free update under
    rule (c), :attr:`PPOSettings.signal_free_entropy`).

    Returns:
        ``policy_loss``, ``entropy`` and ``approx_kl`` of the minibatch (floats).
    """
    if entropy_coef is None:
        entropy_coef = settings.entropy_coef
    count = minibatch.mask.sum().to(advantages.dtype).clamp(min=1.0)
    samples = max(len(minibatch), 1)
    totals = {"policy_loss": 0.0, "entropy": 0.0, "approx_kl": 0.0}
    for chunk_index in policy_chunks(minibatch, settings):
        chunk = minibatch.select(chunk_index)
        mask = chunk.mask
        chunk_advantages = advantages[chunk_index].to(mask.device)
        evaluation = evaluate_policy(chunk)
        old = chunk.old_log_probs.to(evaluation.log_probs.device)
        mask = mask.to(evaluation.log_probs.device)
        surrogate = clipped_surrogate_loss(
            evaluation.log_probs,
            old,
            chunk_advantages.to(old.device),
            clip=settings.clip,
            dual_clip=settings.dual_clip,
            max_log_ratio=settings.max_log_ratio,
        )
        policy_loss = masked_mean(surrogate, mask, count)
        entropy = masked_mean(evaluation.entropy, mask, count)
        _check_finite(policy_loss=policy_loss, entropy=entropy)
        (policy_loss - entropy_coef * entropy).backward()
        with torch.no_grad():
            per_sample = None if guard_kl is None else guard_kl(chunk, evaluation)
            if per_sample is None:
                kl = approx_kl_k3(evaluation.log_probs, old, mask, count)
            else:
                kl = per_sample.sum() / samples
        totals["policy_loss"] += float(policy_loss.detach())
        totals["entropy"] += float(entropy.detach())
        totals["approx_kl"] += float(kl)
    return totals


def _check_finite(**values: torch.Tensor | float) -> None:
    """Raise :class:`NonFiniteLossError` naming every value that is NaN or inf."""
    tensors = {k: torch.as_tensor(v).detach() for k, v in values.items()}
    bad = {k: float(v) for k, v in tensors.items() if not torch.isfinite(v).all()}
    if bad:
        raise NonFiniteLossError(
            f"non-finite {', '.join(f'{k} = {v}' for k, v in bad.items())}: the run stops rather "
            "than apply or silently skip the step (lower lr, check the model's dtype, or resume "
            "from the last checkpoint)"
        )


def critic_step(
    minibatch: PPOBatch,
    evaluate_values: EvaluateValues,
    critic_parameters: Sequence[torch.nn.Parameter],
    critic_optimizer: torch.optim.Optimizer,
    settings: PPOSettings,
) -> tuple[float, float]:
    """One optimiser step of the critic on the minibatch's clipped value loss.

    Returns:
        ``(value_loss, grad_norm)`` (the norm before clipping).
    """
    critic_optimizer.zero_grad(set_to_none=True)
    values = evaluate_values(minibatch)
    device = values.device
    value_mask = minibatch.mask if minibatch.value_mask is None else minibatch.value_mask
    value_loss = clipped_value_loss(
        values,
        minibatch.old_values.to(device),
        minibatch.returns.to(device),
        value_mask.to(device),
        clip=settings.clip,
    )
    _check_finite(value_loss=value_loss)
    (settings.value_coef * value_loss).backward()
    norm = _grad_norm_step(critic_parameters, critic_optimizer, settings.max_grad_norm)
    return float(value_loss.detach()), norm


def _nan_max(current: float, value: float) -> float:
    """``max`` where the NaN start value (nothing measured yet) loses to any number."""
    return value if current != current else max(current, value)


def _grad_norm(parameters: Sequence[torch.nn.Parameter]) -> float:
    """The global L2 norm of the parameters' gradients (as ``clip_grad_norm_`` measures it)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return 0.0
    return float(
        torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    )


def _grad_norm_step(
    parameters: Sequence[torch.nn.Parameter], optimizer: torch.optim.Optimizer, max_grad_norm: float
) -> float:
    norm = torch.nn.utils.clip_grad_norm_(list(parameters), max_grad_norm)
    _check_finite(grad_norm=norm)
    optimizer.step()
    return float(norm)


def ppo_update(
    batch: PPOBatch,
    *,
    evaluate_policy: EvaluatePolicy,
    evaluate_values: EvaluateValues,
    policy_parameters: Sequence[torch.nn.Parameter],
    critic_parameters: Sequence[torch.nn.Parameter],
    policy_optimizer: torch.optim.Optimizer,
    critic_optimizer: torch.optim.Optimizer | None,
    settings: PPOSettings,
    generator: torch.Generator,
    update_policy: bool = True,
    guard_kl: GuardKL | None = None,
    signal_free_batch: bool = False,
) -> dict[str, float]:
    """Epochs × minibatches of clipped PPO on ``batch``; returns metrics averaged over minibatches.

    Args:
        batch: the flattened rollout.
        evaluate_policy: recomputes log-probs and entropies of a sub-batch, with grad.
        evaluate_values: recomputes the critic values ``(b, L)`` of a sub-batch, with grad.
        policy_parameters: trainable policy parameters (grad-norm clipped together).
        critic_parameters: critic parameters.
        policy_optimizer: the policy's optimiser.
        critic_optimizer: the critic's optimiser; None for critic-free agents (GRPO, GiGPO):
            no critic step, ``value_loss`` and ``critic_grad_norm`` are NaN.
        settings: the PPO knobs.
        generator: CPU generator for the minibatch permutations.
        update_policy: False trains the critic only (the case study of docs/reference.md#case-study).
        guard_kl: the KL guard's per-sample KL
            (:meth:`~agentbench_poad.rl.ppo.PPOAgent.guard_kl`); None: the k3 estimate over tokens.
        signal_free_batch: the rollout's rewards were all equal
            (:func:`~agentbench_poad.rl.ppo_losses.signal_free`); with
            ``settings.skip_signal_free`` no policy step is taken (the critic still learns).

    Returns:
        ``value_loss``, ``policy_loss``, ``entropy``, ``approx_kl`` (the guard's KL; means over
        minibatches), ``critic_grad_norm``, ``policy_grad_norm`` (means over the steps taken),
        ``policy_steps_taken`` and ``policy_steps_skipped`` (policy steps the KL guard skipped),
        ``signal_free`` (1.0 when the rollout's rewards were all equal; with
        ``skip_signal_free`` the policy then took no step: ``policy_steps_taken`` is 0),
        ``policy_loss_max`` and ``policy_grad_norm_max`` (the largest |policy loss| and pre-clip
        policy gradient norm of any minibatch, KL-skipped ones included; NaN when no policy
        pass ran).
    """
    size = len(batch)
    if settings.num_minibatches > size:
        raise ValueError(
            f"num_minibatches={settings.num_minibatches} exceeds the batch of {size} samples; "
            "lower num_minibatches or collect more steps per update"
        )
    sums: dict[str, float] = {
        "value_loss": 0.0,
        "policy_loss": 0.0,
        "entropy": 0.0,
        "approx_kl": 0.0,
    }
    critic_norms: list[float] = []
    policy_norms: list[float] = []
    # Per-update maxima over minibatches: a mean hides one bad minibatch (its loss must exceed
    # 16 to show as > 1 in a mean over 16), the ablation's criterion reads these.
    loss_max = norm_max = float("nan")
    skipped = 0
    minibatches = 0
    hold_policy = settings.skip_signal_free and signal_free_batch
    entropy_coef = (
        0.0 if signal_free_batch and not settings.signal_free_entropy else settings.entropy_coef
    )
    advantages_all = batch.advantages
    if settings.normalize_advantages and settings.normalize_over == "batch":
        advantages_all = normalize_advantages(
            batch.advantages, batch.mask, std_floor=settings.advantage_std_floor
        )
    for _ in range(settings.epochs):
        order = torch.randperm(size, generator=generator)
        for index in order.tensor_split(settings.num_minibatches):
            minibatch = batch.select(index)
            minibatches += 1

            # Critic step first, as the reference does (critic-free agents have no optimiser).
            if critic_optimizer is not None:
                value_loss, critic_norm = critic_step(
                    minibatch, evaluate_values, critic_parameters, critic_optimizer, settings
                )
                critic_norms.append(critic_norm)
                sums["value_loss"] += value_loss
            if not update_policy or hold_policy:
                continue

            advantages = advantages_all[index]
            if settings.normalize_advantages and settings.normalize_over == "minibatch":
                advantages = normalize_advantages(
                    advantages, minibatch.mask, std_floor=settings.advantage_std_floor
                )
            policy_optimizer.zero_grad(set_to_none=True)
            stats = accumulate_policy_gradients(
                minibatch,
                advantages,
                evaluate_policy,
                settings,
                guard_kl,
                entropy_coef=entropy_coef,
            )
            for key, value in stats.items():
                sums[key] += value
            loss_max = _nan_max(loss_max, abs(stats["policy_loss"]))
            if settings.target_kl is not None and stats["approx_kl"] > settings.target_kl:
                # The step is skipped, but its pre-clip norm is still a minibatch's gradient.
                norm_max = _nan_max(norm_max, _grad_norm(policy_parameters))
                policy_optimizer.zero_grad(set_to_none=True)  # discard; skip this step only
                skipped += 1
            else:
                norm = _grad_norm_step(policy_parameters, policy_optimizer, settings.max_grad_norm)
                policy_norms.append(norm)
                norm_max = _nan_max(norm_max, norm)
    metrics = {key: value / max(minibatches, 1) for key, value in sums.items()}
    metrics["critic_grad_norm"] = sum(critic_norms) / max(len(critic_norms), 1)
    if critic_optimizer is None:  # nothing was measured: logged as null, not 0
        metrics["value_loss"] = metrics["critic_grad_norm"] = float("nan")
    metrics["policy_grad_norm"] = sum(policy_norms) / max(len(policy_norms), 1)
    metrics["policy_steps_taken"] = float(len(policy_norms))
    metrics["policy_steps_skipped"] = float(skipped)
    metrics["signal_free"] = float(signal_free_batch)
    metrics["policy_loss_max"] = loss_max
    metrics["policy_grad_norm_max"] = norm_max
    if hold_policy:  # nothing of the policy was measured: logged as null, not 0
        for key in ("policy_loss", "entropy", "approx_kl", "policy_grad_norm"):
            metrics[key] = float("nan")
    return metrics


def pad_rows(rows: Sequence[torch.Tensor], width: int, *, value: float = 0.0) -> torch.Tensor:
    """Stack 1-D or 2-D tensors of different lengths, right-padded (or cut) to ``width`` rows."""
    first = rows[0]
    out = first.new_full((len(rows), width, *first.shape[1:]), value)
    for i, row in enumerate(rows):
        n = min(int(row.shape[0]), width)
        out[i, :n] = row[:n]
    return out


def pad_columns(x: torch.Tensor, width: int) -> torch.Tensor:
    """Right-pad (or cut) the second axis of a ``(B, L, ...)`` tensor to ``width`` with zeros."""
    if x.shape[1] >= width:
        return x[:, :width]
    pad = x.new_zeros((x.shape[0], width - x.shape[1], *x.shape[2:]))
    return torch.cat([x, pad], dim=1)
