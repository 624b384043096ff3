"""PPO losses and the shared update loop (docs/reference.md#ppo-losses).

Action-level and token-level PPO are the same computation on tensors of shape ``(B, L)`` with a
mask: a token-level sample has one column per action token, an action-level sample has ``L = 1``.
An algorithm therefore only tells :func:`ppo_update` how to recompute its log-probabilities,
entropies and values for a set of samples; the clipping, masking, KL guard, gradient accumulation
and optimiser steps live here, once.

Per minibatch (the reference's order): one critic step on the clipped value loss, then the policy
step, accumulated over ``grad_accum_steps`` chunks; when the minibatch's KL(old‖new) exceeds
``target_kl`` the accumulated policy gradients are discarded and the minibatch's policy step is
skipped (later minibatches and epochs still run).

The KL guard measures one quantity for every agent (docs/agents.md, "One KL guard"): in
restricted-action environments the exact KL between the old and the new categorical over the
offered actions, i.e. the distribution every agent samples its actions from, averaged over the
minibatch's samples (:func:`candidate_kl`, computed by :meth:`PPOAgent.guard_kl`, which no
subclass may override); in open-action environments the k3 estimate of the per-token KL of the LM
over the generated tokens (:func:`approx_kl_k3`). The logged ``approx_kl`` is the guard's number.

Deliberate deviations from the reference, each chosen so that gradient accumulation is exact
(the accumulated step equals the un-accumulated one):

* advantages are normalised once per minibatch over real tokens (``mask``), with the population
  std, for both granularities (the reference drops every exact 0.0 entry as if it were padding,
  docs/reference.md#deviations, and TWOSOME normalises per accumulation chunk);
* masked means divide by the number of real entries of the whole minibatch, not of the chunk;
* the logged policy loss is the minibatch mean (the reference logs the last chunk × chunks,
  docs/reference.md#deviations).

Why one file of over 600 lines: the losses, the update loop and the :class:`PPOAgent` template
that calls them are read together (CleanRL's one-file habit); each piece is a small, separately
tested function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "PPOSettings",
    "PolicyEvaluation",
    "PPOBatch",
    "masked_mean",
    "normalize_advantages",
    "NonFiniteLossError",
    "signal_free",
    "clipped_surrogate_loss",
    "clipped_value_loss",
    "approx_kl_k3",
    "candidate_kl",
    "accumulate_policy_gradients",
    "critic_step",
    "policy_chunks",
    "ppo_update",
    "make_adamw",
    "PPOAgent",
    "pad_rows",
    "pad_columns",
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
    normalize_over: str = "minibatch"
    advantage_std_floor: float = 0.0
    skip_signal_free: bool = True
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


def action_level_evaluation(policy: Any, batch: PPOBatch) -> PolicyEvaluation:
    """An action-level loss's evaluation in a restricted-action env (TWOSOME, GRPO, GiGPO).

    Scores each sample's offered actions under the current policy (with grad) and reads the
    log-probability of the chosen one (``batch.extras["index"]``) and the entropy of the
    categorical; the categoricals ride along for the shared KL guard, which then need not score
    the candidates again.
    """
    categoricals = policy.candidate_log_probs(
        list(batch.extras["prompts"]), list(batch.extras["available_actions"])
    )
    chosen = torch.stack([c[i] for c, i in zip(categoricals, batch.extras["index"])])
    entropy = torch.stack([-(c.exp() * c).sum() for c in categoricals])
    return PolicyEvaluation(chosen[:, None], entropy[:, None], categoricals)


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


def masked_mean(
    x: torch.Tensor, mask: torch.Tensor, count: float | torch.Tensor | None = None
) -> torch.Tensor:
    """Mean of ``x`` over ``mask``; ``count`` overrides the denominator (for exact accumulation).

    Entries outside the mask are never read (even NaN or inf there leaves the mean finite).
    """
    mask = mask.to(torch.bool)
    denominator = mask.sum().to(x.dtype) if count is None else count
    total = torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum()
    return total / torch.clamp(torch.as_tensor(denominator, dtype=x.dtype), min=1.0)


def normalize_advantages(
    advantages: torch.Tensor, mask: torch.Tensor, *, eps: float = 1e-8, std_floor: float = 0.0
) -> torch.Tensor:
    """``(A − μ) / (max(σ, std_floor) + eps)`` over the real entries (population std); pads 0.

    Pads are never read, so NaN or inf there does not leak into μ and σ. The reference selected
    "nonzero entries" as real, which also dropped true zero advantages
    (docs/reference.md#deviation-advantage-normalisation); the token mask is the right selector.
    ``std_floor`` keeps a batch of tiny advantages (a critic's noise where no reward was seen)
    from being blown up to unit variance (docs/agents.md, "Stable updates").
    """
    mask = mask.to(torch.bool)
    zero = torch.zeros((), dtype=advantages.dtype, device=advantages.device)
    real = torch.where(mask, advantages, zero)  # pads never read (NaN there stays out)
    count = torch.clamp(mask.sum().to(advantages.dtype), min=1.0)
    mean = real.sum() / count
    var = (torch.where(mask, real - mean, zero) ** 2).sum() / count
    scale = torch.clamp(var.sqrt(), min=std_floor) + eps
    return torch.where(mask, (real - mean) / scale, zero)


def clipped_surrogate_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    *,
    clip: float,
    dual_clip: float | None = None,
    max_log_ratio: float = 20.0,
) -> torch.Tensor:
    """Element-wise PPO loss ``max(−ρÂ, −clip(ρ, 1−ε, 1+ε)Â)`` (mask and average it yourself).

    With ``dual_clip = c`` (Ye et al., 2020, "dual-clip PPO"), the loss of a negative advantage
    is also capped at ``−cÂ = c·|Â|``: plain PPO's ``−ρÂ`` grows without bound as the ratio
    grows, so a few tokens whose probability exploded would decide the step. The log-ratio is
    clamped to ``±max_log_ratio`` before ``exp`` so that no ratio is inf or NaN.
    """
    log_ratio = torch.clamp(log_probs - old_log_probs, -max_log_ratio, max_log_ratio)
    ratio = torch.exp(log_ratio)
    unclipped = -ratio * advantages
    clipped = -torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * advantages
    loss = torch.maximum(unclipped, clipped)
    if dual_clip is not None:
        loss = torch.where(advantages < 0, torch.minimum(loss, -dual_clip * advantages), loss)
    return loss


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip: float,
) -> torch.Tensor:
    """``mean(max(½(R − V_clip)², ½(R − V)²))`` over the mask, ``V_clip = V_old + clip(V − V_old)``.

    Multiply by the value coefficient (0.5 in the paper) to get the reference's ``L_V``.
    """
    clipped_values = old_values + torch.clamp(values - old_values, -clip, clip)
    error = torch.maximum(0.5 * (returns - clipped_values) ** 2, 0.5 * (returns - values) ** 2)
    return masked_mean(error, mask)


def approx_kl_k3(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    mask: torch.Tensor,
    count: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """k3 estimate of KL(old‖new): mean of ``(ρ − 1) − log ρ`` over the mask."""
    log_ratio = log_probs - old_log_probs
    return masked_mean(torch.exp(log_ratio) - 1.0 - log_ratio, mask, count)


def candidate_kl(
    old_log_probs: Sequence[Sequence[float] | torch.Tensor], new_log_probs: Sequence[torch.Tensor]
) -> torch.Tensor:
    """Exact ``KL(old‖new) = Σ_k p_old(k) (log p_old(k) − log p_new(k))`` per sample.

    Args:
        old_log_probs: per sample, the ``(K_i,)`` log-categorical over the offered actions at
            sampling time (``ActionSample.candidate_log_probs``).
        new_log_probs: per sample, the same categorical under the current policy.

    Returns:
        ``(b,)`` float64 KLs, on the device of ``new_log_probs``, without gradient. An action
        with ``p_old = 0`` contributes nothing (``0 · log 0 = 0``).
    """
    if len(old_log_probs) != len(new_log_probs):
        raise ValueError(
            f"got {len(old_log_probs)} old and {len(new_log_probs)} new candidate distributions"
        )
    kls = []
    for old, new in zip(old_log_probs, new_log_probs):
        new = new.detach().to(torch.float64)
        old_t = torch.as_tensor(old, dtype=torch.float64, device=new.device)
        if old_t.shape != new.shape:
            raise ValueError(
                f"old and new candidate distributions differ in size ({tuple(old_t.shape)} vs "
                f"{tuple(new.shape)}): the offered actions changed between rollout and update"
            )
        p_old = old_t.exp()
        terms = torch.where(p_old > 0, p_old * (old_t - new), torch.zeros_like(p_old))
        kls.append(terms.sum())
    if not kls:
        return torch.zeros(0, dtype=torch.float64)
    return torch.stack(kls)


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

    ``guard_kl`` (see :meth:`PPOAgent.guard_kl`) gives per-sample KLs of a chunk, averaged over
    the minibatch's samples; where it is None or returns None, the KL is the k3 estimate over the
    minibatch's real tokens.

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


def signal_free(rewards: Any) -> bool:
    """True when a rollout's rewards are all equal (none, or one value repeated): its
    advantages carry no reward signal, only a critic's noise (or exact zeros for a group)."""
    values = torch.as_tensor(rewards, dtype=torch.float64).reshape(-1)
    if values.numel() == 0:
        return True
    return bool(values.max() == values.min())


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
        guard_kl: the KL guard's per-sample KL (:meth:`PPOAgent.guard_kl`); None: the k3
            estimate over tokens.
        signal_free_batch: the rollout's rewards were all equal (:func:`signal_free`); with
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


class PPOAgent:
    """Base of the PPO agents: an LM policy, a critic head, two optimisers and the update loop.

    An algorithm (``baselines/poad.py`` ...) subclasses it and supplies, top to bottom:

    * ``make_critic()`` -- its value head;
    * ``collect(prompts, available_actions, generator)`` -- choose actions and record values;
    * ``bootstrap_values(prompts)`` -- values of the observations after the rollout;
    * ``compute_advantages(buffer)`` -- its credit assignment;
    * ``make_batch(buffer)`` and ``evaluate_policy``/``evaluate_values`` -- its loss granularity.

    The trainer only calls these methods, never asks which algorithm it runs. The KL guard is
    not among them: :meth:`guard_kl` is defined here once, and a subclass that overrides it is a
    ``TypeError`` at class creation, so every agent's guard measures the same quantity.

    Args:
        config: the algorithm's config (a :class:`~agentbench_poad.rl.config.PPOConfig`).
        policy: the :class:`~agentbench_poad.rl.policy.LMPolicy` to train.
        seed: seeds the critic head's initial weights (a private generator).
    """

    #: Registry name ("poad" ...).
    name: str = "ppo"
    #: The config dataclass of the algorithm.
    config_class: type = object
    #: Whether open-action environments (available_actions None) are supported.
    supports_open_actions: bool = True

    #: Methods that make agents comparable; a subclass may not redefine them.
    _SHARED_METHODS = ("guard_kl", "update")
    #: Set by ``class MyAgent(PPOAgent, custom_guard=True)``: the class brings its own guard or
    #: update path; its runs and records say "custom guard" (docs/agents.md, "One KL guard").
    custom_guard: bool = False

    def __init_subclass__(cls, custom_guard: bool | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if custom_guard is not None:
            cls.custom_guard = bool(custom_guard)
        redefined = [name for name in PPOAgent._SHARED_METHODS if name in vars(cls)]
        if redefined and not cls.custom_guard:
            raise TypeError(
                f"{cls.__name__} redefines {redefined}: the KL guard is shared by every agent so "
                "that their skipped policy steps mean the same thing (docs/agents.md, "
                "'One KL guard'); fill PolicyEvaluation instead of redefining it, or declare "
                "`class X(PPOAgent, custom_guard=True)` (its records then say 'custom guard')"
            )

    def __init__(self, config: Any, policy: Any, *, seed: int = 0) -> None:
        if not isinstance(config, self.config_class):
            raise TypeError(
                f"{type(self).__name__} takes a {self.config_class.__name__}, "
                f"got {type(config).__name__}"
            )
        self.config = config
        self.policy = policy
        critic = self.make_critic(torch.Generator().manual_seed(seed))
        self.policy_optimizer = make_adamw(policy.trainable_parameters(), config.lr)
        # make_critic() returning None makes a critic-free agent (GRPO, GiGPO): no critic step.
        self.critic = None if critic is None else critic.to(policy.device)
        self.critic_optimizer = (
            None if critic is None else make_adamw(list(critic.parameters()), config.critic_lr)
        )

    # -- to implement -------------------------------------------------------------------------
    def make_critic(self, generator: torch.Generator) -> torch.nn.Module:
        """The value head, its initial weights drawn from ``generator`` (None: no critic)."""
        raise NotImplementedError

    def collect(
        self,
        prompts: Sequence[str],
        available_actions: Sequence[Sequence[str] | None],
        generator: torch.Generator,
    ) -> list[Any]:
        """Choose one action per prompt; return one ``StepRecord`` each (reward/done unset)."""
        raise NotImplementedError

    def bootstrap_values(self, prompts: Sequence[str]) -> Any:
        raise NotImplementedError

    def compute_advantages(self, buffer: Any) -> None:
        raise NotImplementedError

    def make_batch(self, buffer: Any) -> PPOBatch:
        raise NotImplementedError

    def evaluate_policy(self, batch: PPOBatch) -> PolicyEvaluation:
        raise NotImplementedError

    def evaluate_values(self, batch: PPOBatch) -> torch.Tensor:
        raise NotImplementedError

    # -- shared -------------------------------------------------------------------------------
    def check_environment(self, env_id: str, open_actions: bool) -> None:
        """Raise a clear error when the algorithm cannot run in this environment."""
        if open_actions and not self.supports_open_actions:
            raise ValueError(
                f"{type(self).__name__} needs a list of offered actions, but {env_id} is an "
                "open-action environment (available_actions is None); train POAD or NTPO there"
            )

    def guard_kl(self, batch: PPOBatch, evaluation: PolicyEvaluation) -> torch.Tensor | None:
        """The KL guard's quantity for a (chunk of a) minibatch: the same for every agent.

        Restricted actions (every sample has offered actions): per sample, the exact
        ``KL(old‖new)`` of the categorical over the offered actions, the distribution the agent
        sampled from (:func:`candidate_kl`). The new categoricals come from the policy itself
        (``LMPolicy.guard_candidate_log_probs``: its record of the scores its own update pass
        computed under the current weights, or a fresh no-grad scoring), never from values the
        agent hands in. Open actions (or a batch without the stored categoricals): None, i.e.
        the k3 estimate of the per-token KL over the evaluation's log-probs.

        Returns:
            ``(b,)`` KLs, or None for the token-level guard.
        """
        old = batch.extras.get("old_candidate_log_probs")
        actions = batch.extras.get("available_actions")
        if old is None or actions is None or any(o is None for o in old):
            return None
        new = self.policy.guard_candidate_log_probs(
            list(batch.extras["prompts"]), [list(a) for a in actions]
        )
        return candidate_kl(old, new)

    def update(self, buffer: Any, generator: torch.Generator) -> dict[str, float]:
        """PPO epochs over the buffer (after :meth:`compute_advantages`); returns metrics."""
        settings = self.config.ppo_settings()
        batch = self.make_batch(buffer)
        # What the shared KL guard reads, whatever the algorithm's batch holds.
        batch.extras.setdefault("prompts", buffer.flat("prompt"))
        batch.extras.setdefault("available_actions", buffer.flat("available_actions"))
        batch.extras["old_candidate_log_probs"] = buffer.flat_samples("candidate_log_probs")
        if settings.max_chunk_tokens is not None and batch.sizes is None:
            batch.sizes = self.sample_sizes(batch)
        self.policy.model.train()
        try:
            return ppo_update(
                batch,
                evaluate_policy=self.evaluate_policy,
                evaluate_values=self.evaluate_values,
                policy_parameters=self.policy.trainable_parameters(),
                critic_parameters=[] if self.critic is None else list(self.critic.parameters()),
                policy_optimizer=self.policy_optimizer,
                critic_optimizer=self.critic_optimizer,
                settings=settings,
                generator=generator,
                update_policy=self.config.train_policy,
                guard_kl=self.guard_kl,
                signal_free_batch=signal_free(buffer.rewards()),
            )
        finally:
            self.policy.model.eval()

    def sample_sizes(self, batch: PPOBatch) -> torch.Tensor:
        """``(B,)`` tokens the policy pass runs per sample, for length-sorted chunking.

        Read from the batch's ``extras``: the prompt's tokens plus the action's (``token_ids``)
        or all offered candidates' (``available_actions``, scored after one shared prompt).
        """
        extras = batch.extras
        sizes = []
        for i, prompt in enumerate(extras["prompts"]):
            n = len(self.policy.encode_prompt(prompt))
            if "token_ids" in extras:
                n += len(extras["token_ids"][i])
            elif extras.get("available_actions") is not None:
                actions = extras["available_actions"][i] or []
                n += sum(len(self.policy.encode_action(prompt, a)) for a in actions)
            sizes.append(n)
        return torch.tensor(sizes, dtype=torch.long)

    def state_dict(self) -> dict[str, Any]:
        """Critic weights and both optimiser states (the adapter is saved by the policy)."""
        if self.critic is None:
            return {"policy_optimizer": self.policy_optimizer.state_dict()}
        return {
            "critic": self.critic.state_dict(),
            "policy_optimizer": self.policy_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        self.policy_optimizer.load_state_dict(state["policy_optimizer"])
        if self.critic is not None:
            self.critic.load_state_dict(state["critic"])
            self.critic_optimizer.load_state_dict(state["critic_optimizer"])


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
