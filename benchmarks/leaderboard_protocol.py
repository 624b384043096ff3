"""Leaderboard protocol overhead: ``evaluate`` (deadline thread per action, records) vs a bare loop.

The protocol runs every ``act`` in a worker thread with a deadline, builds per-episode entries
and validates the record. This script measures that overhead against the anchor measured in the
same run: the same episodes (same agent, same reset seeds) played by a plain
``reset``/``act``/``step`` loop. A scripted agent is used so the environment and the protocol,
not a model, dominate.

    python benchmarks/leaderboard_protocol.py [--env Overcooked-TomatoSalad-v0] [--episodes 200]
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym

from agentbench_poad.agents import reset_agent
from agentbench_poad.baselines.random import RandomAgent
from agentbench_poad.leaderboard.protocol import evaluate


def bare_loop(env_id: str, episodes: int) -> float:
    env = gym.make(env_id)
    agent = RandomAgent(seed=0)
    total = 0.0
    for i in range(episodes):
        reset_agent(agent, seed=i)
        obs, info = env.reset(seed=i)
        done = False
        while not done:
            obs, reward, term, trunc, info = env.step(agent.act(obs, info["available_actions"]))
            total += reward
            done = term or trunc
    env.close()
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Overcooked-TomatoSalad-v0")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    anchor, protocol, unthreaded = [], [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        bare_loop(args.env, args.episodes)
        anchor.append(time.perf_counter() - start)
        start = time.perf_counter()
        evaluate(RandomAgent, args.env, seeds=[0], episodes=args.episodes, action_timeout=60.0)
        protocol.append(time.perf_counter() - start)
        start = time.perf_counter()
        evaluate(RandomAgent, args.env, seeds=[0], episodes=args.episodes, action_timeout=None)
        unthreaded.append(time.perf_counter() - start)
    a, p, u = min(anchor), min(protocol), min(unthreaded)
    print(f"{args.env}: {args.episodes} episodes, best of {args.repeats}")
    print(f"anchor (bare loop)            {a:.3f}s")
    print(f"evaluate, 60s deadline thread {p:.3f}s")
    print(f"evaluate, no deadline         {u:.3f}s")
    print(f"ratio: {p / a:.2f} (target <= 2.0: protocol with per-action deadline vs bare loop)")
    print(f"ratio: {u / a:.2f} (target <= 1.3: protocol without deadline vs bare loop)")


if __name__ == "__main__":
    main()
