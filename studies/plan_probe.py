"""How likely is an untrained model to stumble on a restricted-action task's shortest plan?

PPO can only reinforce what the sampling policy finds: with a +1-on-completion reward (VirtualHome),
a model that never completes the task in training gets no learning signal at all. This probe walks
the oracle's shortest plan from several reset seeds and, in each state on it, scores the offered
actions with the model exactly as every reference agent samples them at the start of training
(the softmax of word-normalised action log-likelihoods, docs/reference.md#action-scoring). It reports, per
plan step, the probability of the plan's action and its rank among the offered actions, the
model's favourite action instead, and the probability of following the whole plan, beside a
uniformly random policy's. Example::

    OMP_NUM_THREADS=1 python studies/plan_probe.py VirtualHome-FoodPreparation-v0 \\
        --model smollm2-135m --seeds 5 --out studies/probes/plan-probe-smollm2-135m.json
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path


def probe_env(policy, env_id: str, seeds: int) -> dict:
    """The plan-following probabilities of ``policy`` on ``env_id`` from reset seeds ``0..seeds-1``."""
    import gymnasium as gym
    import torch

    import agentbench_poad  # noqa: F401  (registers the envs)
    from agentbench_poad.baselines.oracle import make_oracle

    env = gym.make(env_id)
    episodes = []
    try:
        for seed in range(seeds):
            observation, info = env.reset(seed=seed)
            oracle = make_oracle(env)
            steps = []
            terminated = truncated = False
            while not (terminated or truncated):
                actions = list(info["available_actions"])
                target = oracle.act(observation, actions)
                with torch.no_grad():
                    log_policy = policy.candidate_log_probs([observation], [actions])[0]
                probs = log_policy.exp().tolist()
                order = sorted(range(len(actions)), key=lambda k: -probs[k])
                index = actions.index(target)
                steps.append(
                    {
                        "action": target,
                        "p": probs[index],
                        "rank": order.index(index) + 1,
                        "offered": len(actions),
                        "favourite": actions[order[0]],
                        "p_favourite": probs[order[0]],
                    }
                )
                observation, _, terminated, truncated, info = env.step(target)
            episodes.append(
                {
                    "reset_seed": seed,
                    "solved": bool(terminated),
                    "steps": steps,
                    "log_p_plan": sum(math.log(s["p"]) for s in steps),
                    "log_p_plan_uniform": -sum(math.log(s["offered"]) for s in steps),
                }
            )
    finally:
        env.close()
    return {"env_id": env_id, "episodes": episodes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("envs", nargs="+", help="restricted-action env ids")
    parser.add_argument("--model", default="smollm2-135m", help="named model, .gguf or directory")
    parser.add_argument("--seeds", type=int, default=5, help="reset seeds 0..N-1 per env")
    parser.add_argument("--out", type=Path, help="write the measurements as JSON")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be >= 1")

    from agentbench_poad.models import LoraSettings
    from agentbench_poad.rl.policy import LMPolicy

    policy = LMPolicy(args.model, lora=LoraSettings())  # fresh adapter: exactly the base model
    result = {"model": args.model, "python": sys.version.split()[0], "envs": []}
    for env_id in args.envs:
        row = probe_env(policy, env_id, args.seeds)
        result["envs"].append(row)
        for episode in row["episodes"]:
            print(
                f"{env_id} seed {episode['reset_seed']}: P(plan) = "
                f"{math.exp(episode['log_p_plan']):.2e} "
                f"(uniform {math.exp(episode['log_p_plan_uniform']):.2e})",
                flush=True,
            )
            for k, step in enumerate(episode["steps"], 1):
                print(
                    f"  {k}. {step['action']!r}: p {step['p']:.3f}, rank {step['rank']}"
                    f"/{step['offered']}; favourite {step['favourite']!r} "
                    f"({step['p_favourite']:.3f})",
                    flush=True,
                )
    if args.out:
        from agentbench_poad.rl.run_dir import write_json

        write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
