"""Generalised advantage estimation at action and token granularity (docs/reference.md#advantages).

Three backups share one recursion. Time runs over rollout steps ``t``; inside step ``t`` the
action has tokens ``w^1..w^n`` (``n`` may differ per step and env) and the token critic gives
``V_t^j``, the value *before* token ``j``:

* **action level** (TWOSOME): ``δ_t = r_t + γ m_{t+1} V_{t+1} − V_t``, ``A_t = δ_t + γλ m_{t+1}
  A_{t+1}``;
* **token level** (POAD's BAD, NTPO): on the last token ``δ = r_t + γ m_{t+1} V_{t+1}^1 − V_t^n``
  and ``A_t^n = δ + γλ m_{t+1} A_{t+1}^1``; on an inner token ``δ = c V_t^{j+1} − V_t^j`` and
  ``A_t^j = δ + cλ A_t^{j+1}``, where ``c`` is the *intra-action* discount: ``c = 1`` is BAD
  (POAD: no discount inside an action, so every token is credited with the action's return) and
  ``c = γ`` is NTPO (every token discounted as if it were an environment step);
* **ARCHER as the paper's code ran it** (``boundary="last"``, baselines/archer_adrl.py): NTPO's
  inner tokens, but the last token bootstraps from ``V_{t+1}^{n_{t+1}}``, the value before the
  *last* token of the next action, instead of ``V_{t+1}^1``; the advantage carried across the
  boundary is still ``A_{t+1}^1``. Where there is no next action (the last rollout step, a
  time-limit truncation) the value of the next observation, the value before its first token,
  stands in: the reference's choice for the last rollout step.

``m_{t+1} = 1 − dones[t]``: ``dones[t]`` says the episode ended with step ``t`` (the env
auto-reset), so nothing is bootstrapped across it. Returns are ``R = A + V``.

Time limits (Gymnasium's ``truncated``): where ``truncated[t]`` is 1 the episode ended with step
``t`` (``dones[t]`` is 1 too) but its state was not terminal, so the step's target bootstraps from
the value of the observation the limit cut it at, ``final_values[t]`` (for a token critic the
value before that observation's first token): ``δ = r_t + γ V_final − V_t`` (on the last token at
token level), and the advantage recursion still stops there (the next step belongs to the next
episode). This equals GAE on the reward ``r_t + γ V_final`` with the step marked done, which is
how it is computed. Without ``truncated`` every done is terminal, as in the reference.

The implementation loops over ``T`` only, on ``(N,)`` vectors: only the first token's advantage
crosses step boundaries. Inside an action the token recursion is a reversed discounted cumulative
sum (scaled by powers of ``cλ`` so that it is a plain cumulative sum), computed for all steps, envs
and tokens at once; torch's cumsum kernel is used when torch is loaded (same numbers, faster).
Inputs may be NumPy arrays or torch tensors; the result has the same kind (and, for torch, the
dtype and device of ``values``). The arithmetic is float64.

Bad input: a ``token_mask`` row that is not a non-empty prefix, shapes that do not match,
discounts outside ``[0, 1]``, ``dones`` other than 0/1 and non-finite numbers where they are used
(rewards, next values, values at real tokens) raise :class:`ValueError`. Whatever ``values``
holds at pads (even NaN) is ignored; advantages and returns are exactly 0 there.

NumPy safety rule (docs/numpy-strided-out-defect.md): NumPy 2.1-2.4 computes wrong numbers when
``np.negative`` writes through a *strided* ``out=`` view from an input with a stride of 8 float64
elements (found on an AVX-512 machine, but not limited to NumPy's AVX-512 kernels). In this module
every ufunc writes a fresh array or a whole C-contiguous array (or a contiguous 1-D slice of one);
the only strided writes are plain copies (``a[..., 0] = b``), which use NumPy's copy loops, not
ufunc kernels.

Why one file of over 600 lines: this is the one home of the credit-assignment math every
algorithm shares (action- and token-level GAE, time-limit bootstrapping, group advantages); each
function is small and property-tested against a plain loop, and splitting the file would scatter
what the algorithms must agree on.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

__all__ = [
    "BOUNDARY_BOOTSTRAPS",
    "action_level_gae",
    "discount_matrix",
    "reverse_discounted_cumsum",
    "token_level_gae",
]

#: Values of :func:`token_level_gae`'s ``boundary``: which token value of the next action an
#: action's last token bootstraps from, ``"first"`` (``V_{t+1}^1``: POAD, NTPO) or ``"last"``
#: (``V_{t+1}^{n_{t+1}}``: ARCHER as the paper's code ran it).
BOUNDARY_BOOTSTRAPS = ("first", "last")

#: The scaled (cumulative-sum) form needs ``factor^width`` far from underflow; below this
#: exponent the exact discount-matrix product is used instead.
_MAX_LOG_SCALE = 600.0


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
    dtype = (
        reference.dtype if np.issubdtype(np.asarray(reference).dtype, np.floating) else np.float64
    )
    return result.astype(dtype, copy=False)


#: torch (at::internal::GRAIN_SIZE) runs an op over fewer elements than this on the calling thread.
_TORCH_SERIAL_ELEMENTS = 32768

#: NumPy asks the kernel for transparent huge pages for allocations of at least 4 MiB.
_HUGE_PAGE_ALLOCATION = 4 << 20


def _workspace(count: int, size: int) -> list[np.ndarray]:
    """``count`` C-contiguous float64 arrays of ``size`` elements carved from one allocation.

    Fresh megabyte arrays are a large part of the estimator's cost where page faults are
    expensive (VMs, sandboxes: about 0.5 ms per MiB on the machine this was tuned on, more than
    the arithmetic). One allocation per call, rounded up to 4 MiB once it exceeds 1 MiB so that
    NumPy requests huge pages for it, faults a few pages instead of hundreds. The results returned
    to the caller are two of these arrays (views of the one buffer).
    """
    total = count * size
    if total * 8 >= 1 << 20:
        total = max(total, _HUGE_PAGE_ALLOCATION // 8)
    buffer = np.empty(total)
    return [buffer[i * size : (i + 1) * size] for i in range(count)]


def _check_discounts(**discounts: float) -> None:
    for name, value in discounts.items():
        if not (isinstance(value, (int, float, np.floating)) and 0.0 <= float(value) <= 1.0):
            raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")


def _check_dones(dones: np.ndarray) -> None:
    if not ((dones == 0.0) | (dones == 1.0)).all():
        raise ValueError("dones must be booleans or 0/1 (1 where the episode ended with the step)")


def _check_finite(name: str, x: np.ndarray, what: str) -> None:
    if not np.isfinite(x).all():
        raise ValueError(f"{name} contains NaN or inf {what}; check the critic and the env rewards")


def _bootstrapped_rewards(
    rewards: np.ndarray, dones: np.ndarray, truncated: Any, final_values: Any, gamma: float
) -> np.ndarray:
    """``r_t + γ V_final`` at time-limit truncations, ``r_t`` elsewhere (a fresh array).

    ``final_values`` is read only where ``truncated`` is 1 (anything, NaN included, elsewhere).
    """
    if truncated is None and final_values is None:
        return rewards
    if truncated is None or final_values is None:
        raise ValueError("pass truncated and final_values together (or neither)")
    trunc = _to_numpy(truncated)
    final = _to_numpy(final_values)
    if trunc.shape != rewards.shape or final.shape != rewards.shape:
        raise ValueError(
            f"truncated and final_values must have the rewards' shape {rewards.shape}; "
            f"got {trunc.shape} and {final.shape}"
        )
    if not ((trunc == 0.0) | (trunc == 1.0)).all():
        raise ValueError("truncated must be booleans or 0/1 (1 where a time limit ended the step)")
    cut = trunc == 1.0
    if (cut & (dones != 1.0)).any():
        raise ValueError(
            "truncated is 1 where dones is 0: a truncated step ends its episode; set dones to "
            "terminated or truncated"
        )
    used = np.where(cut, final, 0.0)
    _check_finite("final_values", used, "at truncated steps")
    return rewards + gamma * used


def discount_matrix(length: int, factor: float) -> np.ndarray:
    """``W[j, k] = factor ** (k − j)`` for ``k ≥ j`` else 0, shape ``(length, length)``.

    ``x @ W.T`` is the reversed discounted cumulative sum ``y_j = Σ_{k≥j} factor^{k−j} x_k``.
    """
    offsets = np.arange(length)[None, :] - np.arange(length)[:, None]
    powers = np.power(float(factor), np.arange(length, dtype=np.float64))
    return np.where(offsets >= 0, powers[np.maximum(offsets, 0)], 0.0)


def _scaled_form_is_safe(factor: float, length: int) -> bool:
    """Whether ``factor^k`` for ``k < length`` stays far from underflow (and factor > 0)."""
    return 0.0 < factor <= 1.0 and length * -math.log(factor) < _MAX_LOG_SCALE


def reverse_discounted_cumsum(x: np.ndarray, factor: float) -> np.ndarray:
    """``y_j = Σ_{k≥j} factor^{k−j} x_k`` along the last axis, in O(size) where it is safe.

    ``factor = 1`` is a reversed cumulative sum. For ``0 < factor < 1`` the terms are scaled by
    ``factor^k``, summed cumulatively and unscaled; when ``factor^L`` would underflow (tiny
    factors, very long rows) the exact product with :func:`discount_matrix` is used instead.
    The result is a fresh C-contiguous float64 array.
    """
    x = np.asarray(x, dtype=np.float64)
    length = x.shape[-1]
    if not _scaled_form_is_safe(factor, length):
        return np.ascontiguousarray(x @ discount_matrix(length, factor).T)
    # Work on the reversed axis (a contiguous copy) so that the cumulative sum runs forwards.
    reversed_x = x[..., ::-1].copy(order="C")  # always a copy (the caller keeps x)
    if factor != 1.0:
        scale_reversed = np.power(float(factor), np.arange(length - 1, -1, -1, dtype=np.float64))
        np.multiply(reversed_x, scale_reversed, out=reversed_x)
    _cumsum_last_inplace(reversed_x)
    result = np.ascontiguousarray(reversed_x[..., ::-1])
    if factor != 1.0:
        np.divide(result, np.power(float(factor), np.arange(length, dtype=np.float64)), out=result)
    return result


def _cumsum_last_inplace(x: np.ndarray) -> np.ndarray:
    """Cumulative sum over the last axis of a C-contiguous float64 array, in place.

    NumPy's cumsum over short rows is slow (a sequential loop per row); torch's CPU kernel gives
    the same sequential float64 sums four to five times faster, so it is used when torch is
    already loaded (this never imports torch by itself: that costs seconds). Torch hands a cumsum
    of more rows than ``32768 // width`` to its thread pool, and on a loaded machine waiting for
    those threads costs milliseconds, far more than the sum; so the rows go in chunks below that
    size, which torch runs on the calling thread.
    """
    if not x.flags.c_contiguous:  # an internal error, never the caller's
        raise AssertionError("_cumsum_last_inplace needs a C-contiguous array")
    torch = sys.modules.get("torch")
    if torch is None or x.size == 0:
        return np.cumsum(x, axis=-1, out=x)
    rows = torch.from_numpy(x.reshape(-1, x.shape[-1]))
    chunk = max(1, _TORCH_SERIAL_ELEMENTS // max(1, x.shape[-1]) - 1)
    for start in range(0, rows.shape[0], chunk):
        part = rows[start : start + chunk]
        torch.cumsum(part, dim=-1, out=part)
    return x


def action_level_gae(
    rewards: Any,
    values: Any,
    dones: Any,
    next_value: Any,
    *,
    gamma: float,
    lam: float,
    truncated: Any = None,
    final_values: Any = None,
) -> tuple[Any, Any]:
    """Action-level GAE (TWOSOME's backup).

    Args:
        rewards: ``(T, N)`` env rewards of each rollout step.
        values: ``(T, N)`` critic values ``V_t`` of the observation each step acted on.
        dones: ``(T, N)`` whether the episode ended with step ``t`` (bool or 0/1).
        next_value: ``(N,)`` value of the observation after the last rollout step.
        gamma: discount ``γ`` in ``[0, 1]``.
        lam: GAE ``λ`` in ``[0, 1]``.
        truncated: ``(T, N)`` whether a time limit (not a terminal state) ended the episode with
            step ``t`` (implies ``dones[t]``); None: every done is terminal.
        final_values: ``(T, N)`` value of the observation each truncated episode stopped at
            (read only where ``truncated``); with ``truncated``.

    Returns:
        ``(advantages, returns)``, each ``(T, N)``, of the same kind as ``values``.

    Raises:
        ValueError: on mismatched shapes, discounts outside ``[0, 1]``, ``dones`` or
            ``truncated`` other than 0/1, a truncation that is not a done, or NaN/inf in the
            inputs.
    """
    _check_discounts(gamma=gamma, lam=lam)
    r = _to_numpy(rewards)
    v = _to_numpy(values)
    d = _to_numpy(dones)
    nv = _to_numpy(next_value)
    if r.ndim != 2 or v.shape != r.shape or d.shape != r.shape or nv.shape != r.shape[1:]:
        raise ValueError(
            "action_level_gae expects rewards/values/dones of shape (T, N) and next_value (N,); "
            f"got {r.shape}, {v.shape}, {d.shape}, {nv.shape}"
        )
    _check_dones(d)
    for name, x in (("rewards", r), ("values", v), ("next_value", nv)):
        _check_finite(name, x, "")
    r = _bootstrapped_rewards(r, d, truncated, final_values, gamma)
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
    truncated: Any = None,
    final_values: Any = None,
    boundary: str = "first",
) -> tuple[Any, Any]:
    """Token-level GAE: BAD (``intra_gamma=1``, POAD) or the naive backup (``intra_gamma=gamma``, NTPO).

    Args:
        rewards: ``(T, N)`` env rewards of each rollout step (credited to the action's last token).
        values: ``(T, N, L)`` token values; ``values[t, i, j]`` is the value before token ``j + 1``.
            Entries at pads are ignored (they may be anything, NaN included).
        token_mask: ``(T, N, L)`` bool, True at real action tokens; each row is a non-empty prefix.
        dones: ``(T, N)`` whether the episode ended with step ``t`` (bool or 0/1).
        next_value: ``(N,)`` value before the first token after the last rollout step (the
            bootstrap observation's value).
        gamma: discount ``γ`` between environment steps, in ``[0, 1]``.
        lam: GAE ``λ`` (applied between steps and between tokens), in ``[0, 1]``.
        intra_gamma: discount between the tokens of one action (1 = BAD, ``gamma`` = NTPO), in
            ``[0, 1]``.
        truncated: ``(T, N)`` whether a time limit (not a terminal state) ended the episode with
            step ``t`` (implies ``dones[t]``); None: every done is terminal.
        final_values: ``(T, N)`` value before the first token of the observation each truncated
            episode stopped at (read only where ``truncated``); with ``truncated``.
        boundary: which value of the next step's action an action's last token bootstraps from:
            ``"first"`` (``V_{t+1}^1``, POAD and NTPO) or ``"last"`` (``V_{t+1}^{n_{t+1}}``, the
            value before the next action's last token: ARCHER as the paper's code ran it). Either
            way ``next_value`` serves the last rollout step and ``final_values`` a truncation,
            and the advantage carried across the boundary is ``A_{t+1}^1``.

    Returns:
        ``(advantages, returns)``, each ``(T, N, L)`` and exactly 0 at pads, of the same kind as
        ``values``.

    Raises:
        ValueError: on mismatched shapes, a mask row that is empty or not a prefix, discounts
            outside ``[0, 1]``, ``dones`` other than 0/1, NaN/inf in rewards, next values or
            values at real tokens, or (values near the float64 limit) an overflow.
    """
    _check_discounts(gamma=gamma, lam=lam, intra_gamma=intra_gamma)
    if boundary not in BOUNDARY_BOOTSTRAPS:
        raise ValueError(f"boundary must be one of {BOUNDARY_BOOTSTRAPS}, got {boundary!r}")
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
    if v.shape[-1] == 0:
        raise ValueError("every action needs at least one token (values has width 0)")
    steps, envs, width = v.shape
    if v.size == 0:  # no steps or no envs: nothing to estimate
        return _like(np.zeros(v.shape), values), _like(np.zeros(v.shape), values)
    # The leading run of True of each row ends at its first False (argmin), or at the width when
    # it has none; the rows are prefixes iff those runs hold every True of the mask.
    lengths = np.where(mask[..., -1], width, mask.argmin(axis=-1))
    if np.count_nonzero(mask) != lengths.sum():
        raise ValueError("token_mask rows must be prefixes (True on real tokens, then padding)")
    if (lengths == 0).any():
        raise ValueError("every action needs at least one token (a token_mask row is all False)")
    _check_dones(d)
    _check_finite("rewards", r, "")
    _check_finite("next_value", nv, "")
    r = _bootstrapped_rewards(r, d, truncated, final_values, gamma)

    with np.errstate(invalid="ignore", over="ignore"):  # non-finite values raise ValueError below
        advantages, returns = _token_gae_arrays(
            r,
            v,
            mask,
            d,
            nv,
            lengths,
            gamma=gamma,
            lam=lam,
            intra_gamma=intra_gamma,
            boundary=boundary,
        )
    return _like(advantages, values), _like(returns, values)


def _token_gae_arrays(
    r: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray,
    d: np.ndarray,
    nv: np.ndarray,
    lengths: np.ndarray,
    *,
    gamma: float,
    lam: float,
    intra_gamma: float,
    boundary: str,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`token_level_gae` on validated float64 arrays: ``(advantages, returns)``."""
    steps, envs, width = v.shape
    settings = dict(gamma=gamma, lam=lam, intra_gamma=intra_gamma, boundary=boundary)
    factor = intra_gamma * lam
    last = lengths - 1  # 0-based index of each action's last token, (T, N)
    outside = np.empty((steps, envs))  # e_t, what enters an action from outside (below)
    # Three work arrays from one allocation. ``returns`` first holds the values with 0 at pads
    # (whatever the pads held, NaN included, is never read) and becomes the returns at the end;
    # ``advantages`` holds the scaled TD errors, then the advantages; ``work`` is the reversed copy
    # that is summed cumulatively. The caller's arrays are never written.
    returns, advantages, work = (part.reshape(v.shape) for part in _workspace(3, v.size))
    # V · mask is exactly 0 at pads unless a pad holds NaN or inf; then a row total below is not
    # finite, and the computation starts over on values whose pads are set to 0.
    np.multiply(v, mask, out=returns)
    values = returns  # zero-padded V, until the advantages are added at the end
    first_value = values[..., 0]  # V_t^1, (T, N) (a copy is not needed: read before the end)
    # What the previous step's last token bootstraps from: V_t^1, or V_t^{n_t} (a fresh gather).
    if boundary == "first":
        boundary_value = first_value
    else:
        boundary_value = np.take_along_axis(values, last[..., None], axis=-1)[..., 0]

    if _scaled_form_is_safe(factor, width):
        # With V zeroed at pads, delta_j = c·V^{j+1} − V^j is the TD error of an inner token, −V^n
        # on the last token (its successor is a pad) and 0 on pads. Writing
        # e_t = r_t + γ m_{t+1} (V_{t+1}^1 + λ A_{t+1}^1) for what enters from outside the action,
        # every token's advantage is A_t^j = Σ_{k≥j} f^{k−j} delta_k + f^{n−j} e_t, f = cλ, i.e.
        # f^j A^j = Σ_{k≥j} f^k delta_k + f^n e_t: one reversed cumulative sum of scaled TD errors
        # (the code counts tokens from 0: the last one is ``last = n − 1``).
        # c·V^{j+1} is a shift by one element of the flat array (whole contiguous 1-D slices);
        # the last column, whose successor the shift took from the next row, is rewritten after.
        flat = advantages.reshape(-1)
        np.multiply(values.reshape(-1)[1:], intra_gamma, out=flat[:-1])  # c·V^{j+1}
        flat[-1] = 0.0
        np.subtract(advantages, values, out=advantages)  # − V^j
        advantages[..., -1] = np.multiply(values[..., -1], -1.0)  # a plain copy into the column
        scale = np.power(factor, np.arange(width, dtype=np.float64))  # f^j
        if factor != 1.0:
            np.multiply(advantages, scale, out=advantages)
        row_total = advantages.sum(axis=-1)  # f^0 A^0 without e_t, (T, N)
        if not np.isfinite(row_total).all():
            return _restart_with_clean_pads(r, v, mask, d, nv, lengths, **settings)
        last_weight = np.power(factor, last.astype(np.float64))  # f^last, (T, N)
        discount = gamma * (1.0 - d)  # γ m_{t+1}, (T, N)
        next_boundary_value = nv  # V_{t+1}^1 (or V_{t+1}^n); beyond the rollout: V_T^1
        next_first_advantage = np.zeros_like(nv)  # A_{t+1}^1 (0 beyond the rollout)
        for t in reversed(range(steps)):
            outside[t] = r[t] + discount[t] * (next_boundary_value + lam * next_first_advantage)
            next_boundary_value = boundary_value[t]
            next_first_advantage = row_total[t] + last_weight[t] * outside[t]
        # Add f^last e_t at each action's last token; then the reversed cumulative sum: a
        # reversed copy, a forward cumulative sum, a copy back. Pads after the last token hold 0
        # and come first in the reversed rows, so they stay 0.
        at_last = np.arange(steps * envs) * width + last.reshape(-1)
        flat[at_last] = flat[at_last] + (last_weight * outside).reshape(-1)
        np.copyto(work, advantages[..., ::-1])
        _cumsum_last_inplace(work)
        np.copyto(advantages, work[..., ::-1])
        if factor != 1.0:  # f^−j is finite here (f^L ≥ e^−600); multiplying is faster
            np.multiply(
                advantages, np.power(factor, -np.arange(width, dtype=np.float64)), out=advantages
            )
    else:
        # Tiny factors (f^L would underflow) or f = 0: exact products with the discount matrix.
        delta = np.concatenate([intra_gamma * values[..., 1:], np.zeros((steps, envs, 1))], axis=-1)
        np.subtract(delta, values, out=delta)
        if not np.isfinite(delta).all():
            return _restart_with_clean_pads(r, v, mask, d, nv, lengths, **settings)
        last_one_hot = np.arange(width) == last[..., None]
        stacked = np.concatenate([delta.reshape(-1, width), last_one_hot.reshape(-1, width)])
        summed = stacked @ discount_matrix(width, factor).T
        inner = summed[: steps * envs].reshape(steps, envs, width)
        to_last = summed[steps * envs :].reshape(steps, envs, width)  # f^{n−j}, 0 at pads
        next_boundary_value = nv
        next_first_advantage = np.zeros_like(nv)
        for t in reversed(range(steps)):
            keep = 1.0 - d[t]
            outside[t] = r[t] + gamma * keep * (next_boundary_value + lam * next_first_advantage)
            next_boundary_value = boundary_value[t]
            next_first_advantage = inner[t, :, 0] + to_last[t, :, 0] * outside[t]
        np.copyto(advantages, inner + to_last * outside[..., None])
    np.add(returns, advantages, out=returns)  # R = A + V; 0 + 0 at pads
    return advantages, returns


def _restart_with_clean_pads(
    r: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray,
    d: np.ndarray,
    nv: np.ndarray,
    lengths: np.ndarray,
    *,
    gamma: float,
    lam: float,
    intra_gamma: float,
    boundary: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Non-finite row totals: a ValueError for NaN/inf at real tokens, else pads held NaN/inf."""
    _check_finite("values", v[mask], "at real tokens")
    if np.isfinite(v[~mask]).all():  # finite inputs overflowed: restarting would not help
        raise ValueError(
            "token_level_gae overflows float64 with these values and rewards; "
            "rescale them (e.g. normalise the rewards)"
        )
    return _token_gae_arrays(
        r,
        np.where(mask, v, 0.0),
        mask,
        d,
        nv,
        lengths,
        gamma=gamma,
        lam=lam,
        intra_gamma=intra_gamma,
        boundary=boundary,
    )


# ------------------------------------------------------------------------------------------------
# Group-relative advantages (critic-free agents: baselines/grpo.py, baselines/gigpo.py)
# ------------------------------------------------------------------------------------------------
# A group is a set of samples that share something the policy cannot change: GRPO's and GiGPO's
# episode groups are the G episodes reset with the same seed; GiGPO's step groups ("anchor
# states") are the steps, across those episodes, taken in the same observation. A sample's
# advantage is its value (a return) relative to its group. Everything here is NumPy float64 on
# flat arrays; the agents broadcast the results over steps.

#: Values of the group agents' ``advantage_normalization``: ``"mean_std"`` divides by the group's
#: standard deviation (GRPO, Shao et al. 2024, §4.1.2; GiGPO's ``F_norm = std``), ``"mean"``
#: only subtracts the group mean (GiGPO's ``F_norm = 1``, the released code's ``mean_norm``).
GROUP_NORMALIZATIONS = ("mean_std", "mean")

__all__ += [
    "GROUP_NORMALIZATIONS",
    "anchor_state_groups",
    "discounted_step_returns",
    "group_relative_advantages",
]


def _group_index(group_ids: Any) -> tuple[np.ndarray, int]:
    """Dense ``0..K-1`` ids of any hashable group labels, in order of first appearance."""
    dense: dict[Any, int] = {}
    index = np.array([dense.setdefault(g, len(dense)) for g in list(group_ids)], dtype=np.int64)
    return index, len(dense)


def group_relative_advantages(
    group_ids: Any,
    values: Any,
    *,
    normalization: str = "mean_std",
    eps: float = 1e-6,
) -> np.ndarray:
    """Each value relative to its group: ``(x − mean_g) / (std_g + eps)`` or ``x − mean_g``.

    ``std_g`` is the sample standard deviation (``ddof = 1``), as GRPO's and GiGPO's released
    code compute it (``torch.std``). A group whose values are all equal gives exactly 0 (its
    samples carry no signal; no rounding residue is divided by ``eps``). A group of one sample
    gives 0: its mean is itself. This is GiGPO's rule for anchor states seen once (the released
    code sets ``std = 1`` there, so the step advantage is ``x − x = 0`` and such a step keeps only
    its episode advantage).

    Args:
        group_ids: ``(n,)`` hashable group labels (ints, tuples, strings ...).
        values: ``(n,)`` finite numbers (returns).
        normalization: ``"mean_std"`` or ``"mean"`` (:data:`GROUP_NORMALIZATIONS`).
        eps: added to the std (``> 0``).

    Returns:
        ``(n,)`` float64 advantages.

    Raises:
        ValueError: lengths differ, a value is not finite, an unknown normalisation, ``eps <= 0``.
    """
    if normalization not in GROUP_NORMALIZATIONS:
        raise ValueError(
            f"normalization must be one of {GROUP_NORMALIZATIONS}, got {normalization!r}"
        )
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps!r}")
    x = _to_numpy(values).reshape(-1)
    index, count = _group_index(group_ids)
    if index.shape[0] != x.shape[0]:
        raise ValueError(f"got {index.shape[0]} group ids for {x.shape[0]} values")
    if not np.isfinite(x).all():
        raise ValueError("group values (returns) contain NaN or inf; check the env rewards")
    if x.size == 0:
        return np.zeros(0, dtype=np.float64)
    sizes = np.bincount(index, minlength=count).astype(np.float64)
    means = np.bincount(index, weights=x, minlength=count) / sizes
    centered = x - means[index]
    lows = np.full(count, np.inf)
    highs = np.full(count, -np.inf)
    np.minimum.at(lows, index, x)
    np.maximum.at(highs, index, x)
    constant = (lows == highs)[index]
    centered = np.where(constant, 0.0, centered)
    if normalization == "mean":
        return centered
    squares = np.bincount(index, weights=centered * centered, minlength=count)
    stds = np.sqrt(squares / np.maximum(sizes - 1.0, 1.0))
    stds = np.where(sizes > 1, stds, 1.0)  # one sample: centered is 0 anyway
    return centered / (stds[index] + eps)


def discounted_step_returns(rewards: Any, mask: Any, gamma: float) -> np.ndarray:
    """``R_t = Σ_{k ≥ t} γ^{k−t} r_k`` within each episode (GiGPO's step return).

    Episodes are rows of a padded ``(E, T)`` grid: ``mask[e]`` is True on the episode's real
    steps, a non-empty prefix. The sum stops at the episode's last real step whether the episode
    terminated or a time limit truncated it: a critic-free agent has no value to bootstrap a
    truncated episode from, so its remaining future counts as 0 (GiGPO does the same; a time
    limit is part of its tasks).

    Args:
        rewards: ``(E, T)`` rewards; whatever pads hold (even NaN) is never read.
        mask: ``(E, T)`` bool, True at real steps.
        gamma: the discount in ``[0, 1]``.

    Returns:
        ``(E, T)`` float64 returns, 0 at pads.

    Raises:
        ValueError: shapes differ, a mask row is not a non-empty prefix, a real reward is not
            finite, ``gamma`` outside ``[0, 1]``.
    """
    _check_discounts(gamma=gamma)
    r = _to_numpy(rewards)
    m = _to_numpy(mask, dtype=bool)
    if r.ndim != 2 or r.shape != m.shape:
        raise ValueError(
            f"rewards and mask must both be (episodes, steps), got {r.shape} and {m.shape}"
        )
    lengths = m.sum(axis=1)
    prefix = np.arange(r.shape[1])[None, :] < lengths[:, None]
    if (lengths < 1).any() or not np.array_equal(prefix, m):
        raise ValueError("each mask row must be a non-empty prefix (an episode's real steps)")
    if not np.isfinite(r[m]).all():
        raise ValueError("rewards contain NaN or inf at real steps; check the env rewards")
    clean = np.where(m, r, 0.0)
    returns = np.zeros(r.shape, dtype=np.float64)
    running = np.zeros(r.shape[0], dtype=np.float64)
    for t in range(r.shape[1] - 1, -1, -1):
        running = clean[:, t] + gamma * running
        returns[:, t] = np.where(m[:, t], running, 0.0)
    return returns


def anchor_state_groups(episode_groups: Any, states: Any) -> np.ndarray:
    """GiGPO's step groups: dense ids, equal iff same episode group *and* same state key.

    Steps are grouped only inside their episode group (the G episodes reset with one seed), as
    GiGPO's anchor states are defined (states repeated across the trajectories of one group).
    A state repeated inside one episode (a loop) puts both of its steps in the same group.

    Args:
        episode_groups: ``(n,)`` the episode group of each step.
        states: ``(n,)`` hashable state keys (the agents use the exact observation text with the
            offered actions).

    Returns:
        ``(n,)`` int64 ids ``0..K-1`` in order of first appearance.
    """
    episode_groups, states = list(episode_groups), list(states)
    if len(episode_groups) != len(states):
        raise ValueError(f"got {len(episode_groups)} episode groups for {len(states)} states")
    index, _ = _group_index(zip(episode_groups, states))
    return index
