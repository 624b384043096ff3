"""Generalised advantage estimation at action and token granularity (REFERENCE_SPEC §4.4).

Three backups share one recursion. Time runs over rollout steps ``t``; inside step ``t`` the
action has tokens ``w^1..w^n`` (``n`` may differ per step and env) and the token critic gives
``V_t^j``, the value *before* token ``j``:

* **action level** (TWOSOME): ``δ_t = r_t + γ m_{t+1} V_{t+1} − V_t``, ``A_t = δ_t + γλ m_{t+1}
  A_{t+1}``;
* **token level** (POAD's BAD, NTPO): on the last token ``δ = r_t + γ m_{t+1} V_{t+1}^1 − V_t^n``
  and ``A_t^n = δ + γλ m_{t+1} A_{t+1}^1``; on an inner token ``δ = c V_t^{j+1} − V_t^j`` and
  ``A_t^j = δ + cλ A_t^{j+1}``, where ``c`` is the *intra-action* discount: ``c = 1`` is BAD
  (POAD: no discount inside an action, so every token is credited with the action's return) and
  ``c = γ`` is NTPO (every token discounted as if it were an environment step).

``m_{t+1} = 1 − dones[t]``: ``dones[t]`` says the episode ended with step ``t`` (the env
auto-reset), so nothing is bootstrapped across it. Returns are ``R = A + V``.

The implementation loops over ``T`` only, on ``(N,)`` vectors: only the first token's advantage
crosses step boundaries. Inside an action the token recursion is a reversed discounted cumulative
sum (scaled by powers of ``cλ`` so that it is a plain cumulative sum), computed for all steps, envs
and tokens at once; torch's cumsum kernel is used when torch is loaded (same numbers, faster).
Inputs may be NumPy arrays or torch tensors; the result has the same kind (and, for torch, the
dtype and device of ``values``). The arithmetic is float64.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["action_level_gae", "discount_matrix", "reverse_discounted_cumsum", "token_level_gae"]


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def _to_numpy(x: Any, dtype: Any = np.float64) -> np.ndarray:
    if _is_torch(x):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


def _like(result: np.ndarray, reference: Any) -> Any:
    """Return ``result`` as the same kind of array as ``reference``."""
    if _is_torch(reference):
        import torch

        dtype = reference.dtype if reference.is_floating_point() else torch.float32
        return torch.as_tensor(result, dtype=dtype, device=reference.device)
    dtype = reference.dtype if np.issubdtype(np.asarray(reference).dtype, np.floating) else np.float64
    return result.astype(dtype, copy=False)


def discount_matrix(length: int, factor: float) -> np.ndarray:
    """``W[j, k] = factor ** (k − j)`` for ``k ≥ j`` else 0, shape ``(length, length)``.

    ``x @ W.T`` is the reversed discounted cumulative sum ``y_j = Σ_{k≥j} factor^{k−j} x_k``.
    """
    offsets = np.arange(length)[None, :] - np.arange(length)[:, None]
    powers = np.power(float(factor), np.arange(length, dtype=np.float64))
    return np.where(offsets >= 0, powers[np.maximum(offsets, 0)], 0.0)


def reverse_discounted_cumsum(x: np.ndarray, factor: float) -> np.ndarray:
    """``y_j = Σ_{k≥j} factor^{k−j} x_k`` along the last axis, in O(size) where it is safe.

    ``factor = 1`` is a reversed cumulative sum. For ``0 < factor < 1`` the terms are scaled by
    ``factor^k``, summed cumulatively and unscaled; when ``factor^L`` would underflow (tiny
    factors, very long rows) the exact product with :func:`discount_matrix` is used instead.
    """
    length = x.shape[-1]
    if factor == 1.0:
        return _cumsum_last(x[..., ::-1])[..., ::-1]
    if 0.0 < factor < 1.0 and length * -np.log(factor) < 600.0:
        scale = np.power(float(factor), np.arange(length, dtype=np.float64))
        summed = _cumsum_last((x * scale)[..., ::-1])[..., ::-1]
        summed /= scale
        return summed
    return x @ discount_matrix(length, factor).T


def _cumsum_last(x: np.ndarray) -> np.ndarray:
    """Cumulative sum over the last axis, as a fresh array."""
    return _cumsum_last_inplace(np.array(x, dtype=np.float64, order="C"))


def _cumsum_last_inplace(x: np.ndarray) -> np.ndarray:
    """Cumulative sum over the last axis of a C-contiguous float64 array, in place.

    NumPy's cumsum over short rows is slow (a strided inner loop per row); torch's CPU kernel is
    several times faster and gives the same sequential float64 sums, so it is used when torch is
    already loaded (it never imports torch by itself: that costs seconds).
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return np.cumsum(x, axis=-1, out=x)
    tensor = torch.from_numpy(x)
    torch.cumsum(tensor, dim=-1, out=tensor)
    return x


def action_level_gae(
    rewards: Any,
    values: Any,
    dones: Any,
    next_value: Any,
    *,
    gamma: float,
    lam: float,
) -> tuple[Any, Any]:
    """Action-level GAE (TWOSOME's backup).

    Args:
        rewards: ``(T, N)`` env rewards of each rollout step.
        values: ``(T, N)`` critic values ``V_t`` of the observation each step acted on.
        dones: ``(T, N)`` whether the episode ended with step ``t``.
        next_value: ``(N,)`` value of the observation after the last rollout step.
        gamma: discount ``γ``.
        lam: GAE ``λ``.

    Returns:
        ``(advantages, returns)``, each ``(T, N)``, of the same kind as ``values``.
    """
    r = _to_numpy(rewards)
    v = _to_numpy(values)
    d = _to_numpy(dones)
    nv = _to_numpy(next_value)
    if r.ndim != 2 or v.shape != r.shape or d.shape != r.shape or nv.shape != r.shape[1:]:
        raise ValueError(
            "action_level_gae expects rewards/values/dones of shape (T, N) and next_value (N,); "
            f"got {r.shape}, {v.shape}, {d.shape}, {nv.shape}"
        )
    steps = r.shape[0]
    advantages = np.zeros_like(v)
    running = np.zeros_like(nv)
    following_value = nv
    for t in reversed(range(steps)):
        keep = 1.0 - d[t]
        delta = r[t] + gamma * keep * following_value - v[t]
        running = delta + gamma * lam * keep * running
        advantages[t] = running
        following_value = v[t]
    returns = advantages + v
    return _like(advantages, values), _like(returns, values)


def token_level_gae(
    rewards: Any,
    values: Any,
    token_mask: Any,
    dones: Any,
    next_value: Any,
    *,
    gamma: float,
    lam: float,
    intra_gamma: float,
) -> tuple[Any, Any]:
    """Token-level GAE: BAD (``intra_gamma=1``, POAD) or the naive backup (``intra_gamma=gamma``, NTPO).

    Args:
        rewards: ``(T, N)`` env rewards of each rollout step (credited to the action's last token).
        values: ``(T, N, L)`` token values; ``values[t, i, j]`` is the value before token ``j + 1``.
        token_mask: ``(T, N, L)`` bool, True at real action tokens; each row is a non-empty prefix.
        dones: ``(T, N)`` whether the episode ended with step ``t``.
        next_value: ``(N,)`` value before the first token after the last rollout step (the
            bootstrap observation's value).
        gamma: discount ``γ`` between environment steps.
        lam: GAE ``λ`` (applied between steps and between tokens).
        intra_gamma: discount between the tokens of one action (1 = BAD, ``gamma`` = NTPO).

    Returns:
        ``(advantages, returns)``, each ``(T, N, L)`` and 0 at pads, of the same kind as ``values``.
    """
    r = _to_numpy(rewards)
    v = _to_numpy(values)
    mask = _to_numpy(token_mask, dtype=bool)
    d = _to_numpy(dones)
    nv = _to_numpy(next_value)
    if v.ndim != 3 or mask.shape != v.shape or r.shape != v.shape[:2] or d.shape != r.shape:
        raise ValueError(
            "token_level_gae expects rewards/dones (T, N) and values/token_mask (T, N, L); "
            f"got {r.shape}, {d.shape}, {v.shape}, {mask.shape}"
        )
    if nv.shape != r.shape[1:]:
        raise ValueError(f"next_value must have shape (N,) = {r.shape[1:]}, got {nv.shape}")
    lengths = mask.sum(axis=-1)
    if (lengths == 0).any():
        raise ValueError("every action needs at least one token (a token_mask row is all False)")
    steps, envs, width = v.shape
    positions = np.arange(width)
    if not np.array_equal(mask, positions < lengths[..., None]):
        raise ValueError("token_mask rows must be prefixes (True on real tokens, then padding)")

    # With V zeroed at pads, delta_j = c·V^{j+1} − V^j is the TD error of an inner token, −V^n on
    # the last token (its successor is a pad) and 0 on pads. Writing
    # e_t = r_t + γ m_{t+1} (V_{t+1}^1 + λ A_{t+1}^1) for what enters from outside the action,
    # every token's advantage is A_t^j = Σ_{k≥j} f^{k−j} delta_k + f^{n−j} e_t with f = cλ.
    # Large fresh arrays are a good part of this function's cost, so it allocates three: the
    # zero-padded values (which become the returns), the reversed TD errors, the advantages.
    v = np.where(mask, v, 0.0)  # whatever the pads held (even NaN) is gone
    factor = intra_gamma * lam
    last = lengths - 1  # 0-based index of each action's last token, (T, N)
    outside = np.zeros((steps, envs))  # e_t

    if 0.0 < factor <= 1.0 and width * -np.log(factor) < 600.0:
        # Scaled form: f^j A^j = Σ_{k≥j} f^k delta_k + f^n e_t. The first token's advantage
        # (the only quantity that crosses step boundaries) needs row totals only; e_t is then
        # added at each action's last token and one reversed cumulative sum gives every token.
        # Work on the reversed token axis (index L−1−j) so the cumulative sum runs forwards.
        v_rev = v[..., ::-1]
        scaled = np.empty_like(v)
        np.multiply(v_rev[..., :-1], intra_gamma, out=scaled[..., 1:])  # c·V^{j+1}
        scaled[..., 1:] -= v_rev[..., 1:]  # − V^j
        np.negative(v_rev[..., 0], out=scaled[..., 0])
        scale = np.power(float(factor), np.arange(width, dtype=np.float64))
        scaled *= scale[::-1]
        row_total = scaled.sum(axis=-1)  # f^0 A^0 without e_t, (T, N)
        last_weight = scale[last]  # f^n, (T, N)
        next_first_value = nv  # V_{t+1}^1
        next_first_advantage = np.zeros_like(nv)  # A_{t+1}^1 (0 beyond the rollout)
        for t in reversed(range(steps)):
            keep = 1.0 - d[t]
            outside[t] = r[t] + gamma * keep * (next_first_value + lam * next_first_advantage)
            next_first_value = v[t, :, 0]
            next_first_advantage = row_total[t] + last_weight[t] * outside[t]
        at_last = (width - 1 - last)[..., None]  # the last token's index on the reversed axis
        np.put_along_axis(
            scaled, at_last,
            np.take_along_axis(scaled, at_last, axis=-1) + (last_weight * outside)[..., None],
            axis=-1,
        )
        _cumsum_last_inplace(scaled)  # pads stay 0: nothing is added after an action's end
        advantages = np.divide(scaled[..., ::-1], scale)
    else:
        # Tiny factors (f^L would underflow): exact products with the discount matrix.
        delta = np.concatenate([intra_gamma * v[..., 1:], np.zeros((steps, envs, 1))], axis=-1)
        delta -= v
        last_one_hot = positions == last[..., None]
        stacked = np.concatenate([delta.reshape(-1, width), last_one_hot.reshape(-1, width)])
        summed = stacked @ discount_matrix(width, factor).T
        inner = summed[: steps * envs].reshape(steps, envs, width)
        to_last = summed[steps * envs :].reshape(steps, envs, width)  # f^{n−j}, 0 at pads
        next_first_value = nv
        next_first_advantage = np.zeros_like(nv)
        for t in reversed(range(steps)):
            keep = 1.0 - d[t]
            outside[t] = r[t] + gamma * keep * (next_first_value + lam * next_first_advantage)
            next_first_value = v[t, :, 0]
            next_first_advantage = inner[t, :, 0] + to_last[t, :, 0] * outside[t]
        advantages = inner + to_last * outside[..., None]
    returns = v  # the zero-padded copy, reused
    returns += advantages
    return _like(advantages, values), _like(returns, values)
