"""Token log-probabilities and entropies read at a few slots, with a backward that skips idle rows.

A scoring pass reads, at each of ``S`` slots (the positions whose next token is scored), the
log-probability of one or more target tokens and, for token-level PPO, the full-vocabulary
entropy. Through autograd that is a chain of vocabulary-wide tensors (the LM head's logits, their
log-softmax, its exponential, a product, a gather per read, and the backward of each), several
times the size of everything else the pass holds. :func:`slot_log_probs` computes the same
numbers with one log-softmax per slot and a hand-written backward:

* for reads ``(row, target)`` with upstream gradients ``g`` and entropies with upstream ``h``,
  the gradient of the logits of row ``s`` is
  ``p_s * (-h_s * (log p_s + H_s) - sum of g over the reads of s)`` plus ``g`` at each read's
  target (``p_s`` the row's softmax, ``H_s`` its entropy);
* a row whose upstream gradients are all zero contributes exactly zero: it is skipped (no
  vocabulary-wide work, no LM-head product). A PPO update scores every offered action after a
  prompt (the KL guard reads their categorical) but its token-level loss reads only the chosen
  actions' tokens, so most rows are idle in the backward.

Exact: the same values as ``log_softmax(hidden @ weight.T)`` read at the targets and the same
gradients, to float rounding (``tests/test_rl_speed.py`` checks both against autograd).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["slot_log_probs"]


class _SlotHead(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        rows: torch.Tensor,
        targets: torch.Tensor,
        with_entropy: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        log_p = torch.log_softmax(torch.nn.functional.linear(hidden, weight).float(), dim=-1)
        picked = log_p[rows, targets]
        if with_entropy:
            entropy = -(log_p.exp() * log_p).sum(dim=-1)
        else:
            entropy = log_p.new_zeros(log_p.shape[0])
        ctx.save_for_backward(hidden, weight, rows, targets, log_p, entropy)
        ctx.with_entropy = with_entropy
        return picked, entropy

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, grad_picked: torch.Tensor, grad_entropy: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, None, None, None]:
        hidden, weight, rows, targets, log_p, entropy = ctx.saved_tensors
        slots = log_p.shape[0]
        if grad_picked is None:
            grad_picked = log_p.new_zeros(rows.shape[0])
        if grad_entropy is None or not ctx.with_entropy:
            grad_entropy = log_p.new_zeros(slots)
        # Per row: the summed upstream gradient of its reads; rows with nothing upstream are idle.
        read_sum = log_p.new_zeros(slots).index_add_(0, rows, grad_picked.float())
        busy = (read_sum != 0) | (grad_entropy != 0)
        busy.index_fill_(0, rows[grad_picked != 0], True)
        active = busy.nonzero().squeeze(-1)
        grad_hidden = grad_weight = None
        if active.numel() == 0:
            if ctx.needs_input_grad[0]:
                grad_hidden = torch.zeros_like(hidden)
            if ctx.needs_input_grad[1]:
                grad_weight = torch.zeros_like(weight)
            return grad_hidden, grad_weight, None, None, None
        position = torch.full((slots,), -1, dtype=torch.long, device=log_p.device)
        position[active] = torch.arange(active.numel(), device=log_p.device)
        log_p_a = log_p[active]
        h = grad_entropy.float()[active, None]
        grad_logits = log_p_a.exp() * (
            -h * (log_p_a + entropy[active, None]) - read_sum[active, None]
        )
        reads = position[rows] >= 0
        grad_logits.index_put_(
            (position[rows][reads], targets[reads]), grad_picked.float()[reads], accumulate=True
        )
        grad_logits = grad_logits.to(weight.dtype)
        if ctx.needs_input_grad[0]:
            grad_hidden = torch.zeros_like(hidden)
            grad_hidden[active] = (grad_logits @ weight).to(hidden.dtype)
        if ctx.needs_input_grad[1]:
            grad_weight = (grad_logits.transpose(0, 1) @ hidden[active].to(weight.dtype)).to(
                weight.dtype
            )
        return grad_hidden, grad_weight, None, None, None


def slot_log_probs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    rows: torch.Tensor,
    targets: torch.Tensor,
    *,
    with_entropy: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log p(targets[n] | slot rows[n]) (N,), entropy of each slot (S,))`` in float32.

    Args:
        hidden: ``(S, H)`` the last hidden states at the slots (after the final norm).
        weight: ``(V, H)`` the LM head's weight (no bias; a model that scales or caps its logits
            is not a plain head and must not come here).
        rows: ``(N,)`` long, the slot of each read (a slot may be read several times).
        targets: ``(N,)`` long, the token id each read scores.
        with_entropy: compute the slots' full-vocabulary entropies (zeros otherwise).
    """
    return _SlotHead.apply(hidden, weight, rows, targets, with_entropy)
