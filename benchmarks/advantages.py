"""Vectorised token-level GAE against a per-token Python loop (target: >= 50x).

Run: ``python benchmarks/advantages.py [--threads K]``. T = 8 steps, N = 128 envs, L = 128 tokens,
random action lengths and episode ends; both give the same numbers (checked here too, and at
width 8, the stride of the NumPy defect in docs/numpy-strided-out-defect.md).

The estimator runs its cumulative sum with torch's kernel when torch is loaded (on the calling
thread, in chunks; NumPy's otherwise, about 0.35 ms slower here); ``--threads`` sets torch's
intra-op threads (default: torch's own default). The vectorised form's best of 30 calls is
compared with the loop's best of 5, measured in the same run. Both are single-threaded Python /
NumPy work, but the loop speeds up about threefold when the machine is idle and the vectorised
form does not (it is bound by memory traffic), so the ratio is lowest on an idle machine.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch  # loaded, as in training: token_level_gae may then use its cumsum

from agentbench_poad.rl.advantages import token_level_gae

T, N, L = 8, 128, 128
GAMMA, LAM, INTRA = 0.95, 0.95, 1.0  # INTRA: the loop's default backup (BAD)


def loop_token_gae(rewards, values, mask, dones, next_value, intra=INTRA):
    adv = np.zeros(values.shape)
    for i in range(values.shape[1]):
        g, next_first = 0.0, next_value[i]
        for t in reversed(range(values.shape[0])):
            n = int(mask[t, i].sum())
            keep = 1.0 - dones[t, i]
            for j in reversed(range(n)):
                if j == n - 1:
                    g = (
                        rewards[t, i]
                        + GAMMA * keep * next_first
                        - values[t, i, j]
                        + GAMMA * LAM * keep * g
                    )
                else:
                    g = intra * values[t, i, j + 1] - values[t, i, j] + intra * LAM * g
                adv[t, i, j] = g
            next_first = values[t, i, 0]
    return adv


def best_of(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads (default: torch's default)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny run that checks the script works (16 envs, few repeats; ratio not meaningful)",
    )
    args = parser.parse_args()
    n_envs, loop_repeats, vec_repeats = (16, 1, 3) if args.smoke else (N, 5, 30)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, L + 1, size=(T, n_envs))
    mask = np.arange(L)[None, None, :] < lengths[..., None]
    values = np.where(mask, rng.normal(size=(T, n_envs, L)), 0.0)
    rewards = rng.normal(size=(T, n_envs))
    dones = (rng.random((T, n_envs)) < 0.2).astype(np.float64)
    next_value = rng.normal(size=n_envs)

    # Width 8 (the defect's stride): the estimator must still equal the loop.
    small = np.arange(8) < np.minimum(lengths[:, :16], 8)[..., None]
    small_values = np.where(small, values[:, :16, :8], 0.0)
    for intra in (1.0, GAMMA):
        got, _ = token_level_gae(
            rewards[:, :16],
            small_values,
            small,
            dones[:, :16],
            next_value[:16],
            gamma=GAMMA,
            lam=LAM,
            intra_gamma=intra,
        )
        want = loop_token_gae(
            rewards[:, :16], small_values, small, dones[:, :16], next_value[:16], intra
        )
        assert np.allclose(got, want, atol=1e-10), "width 8: vectorised and loop results differ"

    tokens = int(mask.sum())
    print(
        f"token_level_gae T={T} N={n_envs} L={L} ({tokens} real tokens); torch threads: "
        f"{torch.get_num_threads()}"
    )
    for name, intra in (("POAD/BAD, intra_gamma=1", 1.0), ("NTPO, intra_gamma=gamma", GAMMA)):
        loop_s, loop_adv = best_of(
            lambda intra=intra: loop_token_gae(rewards, values, mask, dones, next_value, intra),
            loop_repeats,
        )
        vec_s, (vec_adv, _) = best_of(
            lambda intra=intra: token_level_gae(
                rewards, values, mask, dones, next_value, gamma=GAMMA, lam=LAM, intra_gamma=intra
            ),
            vec_repeats,
        )
        assert np.allclose(vec_adv, loop_adv, atol=1e-8), "vectorised and loop results differ"
        print(
            f"[{name}] python loop: {loop_s * 1e3:.1f} ms ({tokens / loop_s:,.0f} tokens/s); "
            f"vectorised: {vec_s * 1e3:.2f} ms ({tokens / vec_s:,.0f} tokens/s)"
        )
        print(f"[{name}] ratio: {loop_s / vec_s:.1f}x (target >= 50x)")


if __name__ == "__main__":
    main()
