"""The token-level loss's batch grid and policy evaluation, shared by the agents that clip per token.

POAD and NTPO take PPO's clipped ratio per action token everywhere; GRPO and GiGPO do on generated
(open) actions, where the product of the LM's token probabilities is the distribution the action
was sampled from. Both build the same ``(B, L)`` grid of the stored actions' tokens
(:func:`token_grid`) and recompute it the same way (:func:`token_level_evaluation`); only what
fills the advantage and value columns differs (a token critic's GAE, or one group-relative
advantage per step broadcast over its tokens). The agents whose advantage is one number per
step (GRPO and GiGPO on open actions, ArCHer's ``Q − V``) build their whole batch with
:func:`step_advantage_batch`. The action-level counterpart is
:func:`~agentbench_poad.rl.ppo.action_level_evaluation`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from agentbench_poad.rl.ppo_loop import PolicyEvaluation, PPOBatch, pad_columns

__all__ = ["step_advantage_batch", "token_grid", "token_level_evaluation"]


def token_grid(
    token_log_probs: Sequence[Sequence[float]], width: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The stored actions' token log-probs on a ``(B, width)`` grid, and its mask.

    Args:
        token_log_probs: per sample, the log-probs of its action's tokens at sampling time
            (``ActionSample.token_log_probs``, one per token of ``token_ids``).
        width: columns of the grid; default the longest action, at least 1 (an empty generated
            action is a row with no real entry).

    Returns:
        ``(old_log_probs, mask)``: float32 log-probs right-padded with 0, and the bool mask of
        real tokens.
    """
    lengths = torch.tensor([len(row) for row in token_log_probs], dtype=torch.long)
    if width is None:
        width = max(int(lengths.max()) if len(lengths) else 0, 1)
    mask = torch.arange(width)[None, :] < lengths[:, None]
    old_log_probs = torch.zeros(len(token_log_probs), width)
    for i, row in enumerate(token_log_probs):
        old_log_probs[i, : len(row)] = torch.tensor(row, dtype=torch.float32)
    return old_log_probs, mask


def step_advantage_batch(buffer: Any) -> PPOBatch:
    """One column per action token; every token carries its step's advantage (no critic column).

    Args:
        buffer: a rollout or group buffer whose ``advantages`` hold one number per step, in the
            order of ``buffer.flat`` (a ``(T, N)`` array is read time-major, as ``flat`` is).

    Returns:
        The batch :func:`token_level_evaluation` scores: the stored token log-probs on the
        :func:`token_grid`, each step's advantage (float32) on its real tokens, zero returns and
        old values, and the prompts and token ids in ``extras``.
    """
    old_log_probs, mask = token_grid(buffer.flat_samples("token_log_probs"))
    step_advantages = torch.as_tensor(
        np.asarray(buffer.advantages, dtype=np.float64).reshape(-1), dtype=torch.float32
    )
    zeros = torch.zeros(mask.shape)
    return PPOBatch(
        old_log_probs=old_log_probs,
        advantages=step_advantages[:, None] * mask,
        returns=zeros,
        old_values=zeros,
        mask=mask,
        extras={
            "prompts": buffer.flat("prompt"),
            "token_ids": buffer.flat_samples("token_ids"),
        },
    )


def token_level_evaluation(policy: Any, batch: PPOBatch) -> PolicyEvaluation:
    """Per-token log-probs and full-vocabulary entropies of the stored action tokens.

    Reads ``batch.extras["prompts"]`` and ``["token_ids"]``. With restricted actions
    (``extras["available_actions"]``) the same pass scores every offered action, and the
    categoricals ride along for the shared KL guard (exact; one forward instead of two); with
    open actions the guard is the k3 estimate over these tokens. A chunk whose actions are all
    empty has no token to score: its loss is 0 and it moves no weight.
    """
    offered = batch.extras.get("available_actions")
    scored = policy.token_log_probs(
        list(batch.extras["prompts"]),
        list(batch.extras["token_ids"]),
        available_actions=None if offered is None else list(offered),
    )
    width = batch.mask.shape[1]
    log_probs = pad_columns(scored.log_probs, width)
    if torch.is_grad_enabled() and not log_probs.requires_grad:
        # Every action of this chunk is empty (a generation stopped at once): nothing to
        # differentiate. A leaf of zeros lets the shared update's backward run and leaves every
        # weight's gradient untouched, so the chunk adds nothing to the step.
        log_probs = log_probs.detach().requires_grad_()
    return PolicyEvaluation(
        log_probs,
        pad_columns(scored.entropy, width),
        scored.candidate_log_probs,
    )
