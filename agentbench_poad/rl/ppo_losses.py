"""PPO's losses and KL measures as pure functions on ``(B, L)`` tensors.

The maths, and where it deviates from the reference, is in docs/reference.md#ppo-losses.

Each takes tensors and returns a tensor; none keeps state or reads a config, so each is tested
alone against a plain loop (tests/test_rl_ppo.py, tests/test_rl_math_properties.py). The loop
that calls them is :mod:`agentbench_poad.rl.ppo_loop`; the agent base class is
:mod:`agentbench_poad.rl.ppo`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = [
    "approx_kl_k3",
    "candidate_kl",
    "clipped_surrogate_loss",
    "clipped_value_loss",
    "masked_mean",
    "normalize_advantages",
    "signal_free",
]


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


def signal_free(rewards: Any) -> bool:
    """True when a rollout's rewards are all equal (none, or one value repeated): its
    advantages carry no reward signal, only a critic's noise (or exact zeros for a group)."""
    values = torch.as_tensor(rewards, dtype=torch.float64).reshape(-1)
    if values.numel() == 0:
        return True
    return bool(values.max() == values.min())
