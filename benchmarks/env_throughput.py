"""Steps per second of every registered restricted-action env, against FrozenLake-v1 (ansi).

Each env is stepped with uniformly random *available* actions (seeded generator, so runs are
repeatable) and reset when an episode ends; resets are not timed. The anchor is gymnasium's
``FrozenLake-v1`` with ``render_mode="ansi"`` and ``render()`` called after every step, measured in
the same run. The printed ratio is (env step time) / (FrozenLake step time); the target is a ratio
of at most 20 (one Overcooked macro step, text included, costs at most 20 FrozenLake steps).

Usage::

    python benchmarks/env_throughput.py [--seconds 1.0] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np

from agentbench_poad import env_facts, registered_ids

TARGET_RATIO = 20.0


def time_env(env: gym.Env, seconds: float, seed: int, *, anchor: bool = False) -> float:
    """Mean seconds per step over about ``seconds`` of stepping."""
    rng = np.random.default_rng(seed)
    if anchor:
        env.action_space.seed(seed)
    _, info = env.reset(seed=seed)
    steps = 0
    elapsed = 0.0
    while elapsed < seconds or steps < 200:
        if anchor:
            action = env.action_space.sample()
        else:
            actions = info["available_actions"]
            action = actions[int(rng.integers(len(actions)))]
        start = time.perf_counter()
        _, _, terminated, truncated, info = env.step(action)
        if anchor:
            env.render()
        elapsed += time.perf_counter() - start
        steps += 1
        if terminated or truncated:
            _, info = env.reset()
    return elapsed / steps


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="timed seconds per env")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    def measure_anchor() -> float:
        lake = gym.make("FrozenLake-v1", render_mode="ansi")
        return time_env(lake, args.seconds, args.seed, anchor=True)

    ids = [i for i in registered_ids() if env_facts(i).actions == "restricted"]
    per_step = {}
    # The anchor is measured before and after the envs (the machine may be shared) and averaged.
    first = measure_anchor()
    for env_id in ids:
        env = gym.make(env_id)
        per_step[env_id] = time_env(env, args.seconds, args.seed)
        env.close()
    anchor = (first + measure_anchor()) / 2
    print(f"{'FrozenLake-v1 (ansi + render)':40s} {1 / anchor:10.0f} steps/s  ratio: 1.0 (anchor)")
    for env_id in ids:
        ratio = per_step[env_id] / anchor
        verdict = "ok" if ratio <= TARGET_RATIO else "OVER"
        print(
            f"{env_id:40s} {1 / per_step[env_id]:10.0f} steps/s  ratio: {ratio:.1f} "
            f"(target <= {TARGET_RATIO:.0f}x) {verdict}"
        )


if __name__ == "__main__":
    main()
