"""Tokens per second of one PPO epoch (POAD, token level) on the tiny model.

Run: ``python benchmarks/ppo_update.py [--hidden-size 64] [--batch 32]``. A rollout of Overcooked
prompts is collected, then one epoch of POAD's update (critic and policy steps over minibatches,
backward passes included) is timed. The anchor is a forward-only pass of the same policy over the
same prompts and action tokens in the same minibatches (``token_log_probs`` without grad), so the
ratio says how much an update costs relative to scoring (about 3x is what forward + backward
costs in a transformer).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import torch

from agentbench_poad.baselines.poad import POAD, POADConfig
from agentbench_poad.rl.buffer import RolloutBuffer
from agentbench_poad.rl.models import init_tiny_model
from agentbench_poad.rl.trainer import build_policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--rollout-length", type=int, default=8)
    parser.add_argument("--env", default="Overcooked-TomatoSalad-v0")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        model = init_tiny_model(Path(tmp) / "tiny", hidden_size=args.hidden_size)
        config = POADConfig(num_envs=args.num_envs, rollout_length=args.rollout_length,
                            epochs=1, num_minibatches=2, critic_hidden_sizes=(256, 128),
                            target_kl=None, device=args.device)
        policy = build_policy(config, model, seed=0)
        algorithm = POAD(config, policy, seed=0)
        envs = [gym.make(args.env) for _ in range(config.num_envs)]
        observations, infos = map(list, zip(*(e.reset(seed=i) for i, e in enumerate(envs))))
        generator = torch.Generator().manual_seed(0)
        buffer = RolloutBuffer(num_envs=config.num_envs)
        for _ in range(config.rollout_length):
            records = algorithm.collect(observations, [i["available_actions"] for i in infos],
                                        generator)
            for k, record in enumerate(records):
                obs, reward, terminated, truncated, info = envs[k].step(record.sample.text)
                record.reward, record.done = reward, terminated or truncated
                if record.done:
                    obs, info = envs[k].reset(seed=100 + k)
                observations[k], infos[k] = obs, info
            buffer.add(records)
        buffer.next_values = algorithm.bootstrap_values(observations)
        algorithm.compute_advantages(buffer)

        prompts = buffer.flat("prompt")
        tokens = buffer.flat_samples("token_ids")
        total_tokens = sum(len(policy.encode_prompt(p)) + len(t) for p, t in zip(prompts, tokens))
        action_tokens = sum(len(t) for t in tokens)
        half = len(prompts) // 2

        def forward_only() -> None:
            with torch.no_grad():
                for part in (slice(0, half), slice(half, None)):
                    policy.token_log_probs(prompts[part], tokens[part])

        def one_epoch() -> None:
            algorithm.update(buffer, torch.Generator().manual_seed(1))

        forward_only()  # warm-up
        timings = {}
        for name, fn in (("forward", forward_only), ("update", one_epoch)):
            best = float("inf")
            for _ in range(3):
                start = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - start)
            timings[name] = best
        print(f"tiny model hidden={args.hidden_size}, {len(prompts)} samples, "
              f"{total_tokens} tokens ({action_tokens} action tokens), device={args.device}")
        print(f"forward-only: {total_tokens / timings['forward']:,.0f} tokens/s")
        print(f"PPO epoch:    {total_tokens / timings['update']:,.0f} tokens/s")
        print(f"ratio: {timings['forward'] / timings['update']:.2f} of forward-only throughput "
              "(target >= 0.25: an update is a forward + backward + optimiser step)")


if __name__ == "__main__":
    main()
