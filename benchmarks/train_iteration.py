"""Training iterations (rollout + update) with the exact reuse techniques against the same without.

Run: ``python benchmarks/train_iteration.py [--model DIR] [--agent poad] [--threads 2]``.

Two copies of one agent (same model, seed and CPU preset) train side by side on Overcooked, one
iteration each in turn (A B A B ...): an iteration is a rollout of ``num_envs`` x
``rollout_length`` steps and the PPO update after it, KL guard included. The anchor computes
everything afresh, as the trainer did before these techniques:

* every restricted-action score in the rollout (``policy.memoize = False``), where the default
  scores each (observation, offered actions) pair once under the rollout's fixed weights;
* the critic's frozen features of every step, where the default computes each (prompt, action)
  pair once (the pre-trained weights never change);
* for token-level agents (POAD, NTPO), the KL guard's categorical over the offered actions in a
  second forward per policy chunk, where the default reads it from the update's own pass (every
  offered action runs after the prompt, the chosen one's tokens are read from it).

All three are exact up to float rounding: both copies take the same actions in the first rollout,
which the script checks (it fails otherwise). After an update, rounding differences of ~1e-7 in
the weights let two sampled runs drift apart eventually, as any two runs on different hardware
would; the script reports the first step where they did. The printed ratio is anchor time over
default time per iteration (> 1: faster).

Model: ``--model``, else ``$AGENTBENCH_POAD_BENCH_MODEL``, else the cached named model
``smollm2-135m``, else a tiny random model (see ``benchmarks/_bench_model.py``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import gymnasium as gym
import torch
from _bench_model import resolve_model

from agentbench_poad.baselines import get_algorithm
from agentbench_poad.rl.ppo_loop import PolicyEvaluation, pad_columns
from agentbench_poad.rl.rollout import EnvSlot, Progress, bootstrap, rollout
from agentbench_poad.rl.trainer import build_policy

#: The seed of both copies (env resets, action sampling).
SEED = 0


def _two_pass(agent_class: type) -> type:
    """The agent with the guard's categorical scored in a pass of its own (token level)."""

    class TwoPass(agent_class):  # type: ignore[misc, valid-type]
        def evaluate_policy(self, batch):  # noqa: ANN001, ANN202 - the agent's signature
            if "token_ids" not in batch.extras:
                return super().evaluate_policy(batch)
            scored = self.policy.token_log_probs(
                list(batch.extras["prompts"]), list(batch.extras["token_ids"])
            )
            width = batch.mask.shape[1]
            return PolicyEvaluation(
                pad_columns(scored.log_probs, width), pad_columns(scored.entropy, width)
            )

    return TwoPass


class _Run:
    """One agent copy with its envs, stepping one iteration at a time through the trainer's own
    rollout and bootstrap (``agentbench_poad.rl.rollout``), so the timing is the trainer's."""

    def __init__(self, agent, env_id: str, env_kwargs: dict, config) -> None:  # noqa: ANN001
        self.agent, self.config, self.env_id = agent, config, env_id
        self.slots = [
            EnvSlot(gym.make(env_id, **env_kwargs), index) for index in range(config.num_envs)
        ]
        for slot in self.slots:
            slot.start(SEED)
        self.generator = torch.Generator().manual_seed(SEED)
        self.progress = Progress()
        self.actions: list[str] = []

    def iteration(self, update_seed: int) -> None:
        buffer, _ = rollout(
            self.agent, self.slots, self.config, self.generator, self.progress, SEED, self.env_id
        )
        self.actions += buffer.flat_samples("text")
        bootstrap(self.agent, buffer, self.slots)
        self.agent.compute_advantages(buffer)
        self.agent.update(buffer, torch.Generator().manual_seed(update_seed))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model directory (default: see above)")
    parser.add_argument(
        "--agent", default="poad", choices=["poad", "ntpo", "twosome"], help="the agent"
    )
    parser.add_argument("--env", default="Overcooked-TomatoSalad-v0")
    parser.add_argument("--max-episode-steps", type=int, default=30)
    parser.add_argument("--num-envs", type=int, default=None, help="default: the CPU preset's")
    parser.add_argument(
        "--rollout-length", type=int, default=None, help="default: the CPU preset's"
    )
    parser.add_argument(
        "--lora-layers", type=int, default=None, help="default: the CPU preset's (top 8 layers)"
    )
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument(
        "--repeats", type=int, default=3, help="timed (anchor, default) iteration pairs"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    tiny = tempfile.TemporaryDirectory()
    model, described = resolve_model(args.model, tiny, hidden_size=64)
    agent_class = get_algorithm(args.agent)
    overrides = {
        k: v
        for k, v in (
            ("num_envs", args.num_envs),
            ("rollout_length", args.rollout_length),
            ("lora_layers", args.lora_layers),
        )
        if v is not None
    }
    config = agent_class.config_class.preset("overcooked-mini", **overrides)
    env_kwargs = {"max_episode_steps": args.max_episode_steps}
    runs = []
    for cls, memoize in ((_two_pass(agent_class), False), (agent_class, True)):
        policy = build_policy(config, model, seed=0)
        policy.memoize = memoize
        runs.append(_Run(cls(config, policy, seed=SEED), args.env, env_kwargs, config))
    anchor, fast = runs

    times: tuple[list[float], list[float]] = ([], [])
    for repeat in range(args.repeats + 1):  # the first pair warms both up and is not timed
        for run, spent in zip(runs, times):
            start = time.perf_counter()
            run.iteration(update_seed=repeat)
            if repeat:
                spent.append(time.perf_counter() - start)
    steps = config.num_envs * config.rollout_length
    first_difference = next(
        (i for i, (a, b) in enumerate(zip(anchor.actions, fast.actions)) if a != b), None
    )
    same_first_rollout = first_difference is None or first_difference >= steps
    ratios = [a / f for a, f in zip(*times)]
    print(
        f"model: {described}; agent {args.agent}; {args.env} (max {args.max_episode_steps} "
        f"steps); {config.num_envs} envs x {config.rollout_length} steps, {config.epochs} "
        f"epochs x {config.num_minibatches} minibatches; threads {torch.get_num_threads()}"
    )
    for name, spent in zip(("anchor (afresh)", "default (reuse)"), times):
        print(
            f"{name:16s}: median {statistics.median(spent):.2f} s per iteration, min "
            f"{min(spent):.2f} s ({steps / statistics.median(spent):.2f} env steps/s)"
        )
    print(
        f"same actions in the first rollout: {same_first_rollout}; identical for "
        f"{len(fast.actions) if first_difference is None else first_difference} of "
        f"{len(fast.actions)} steps"
    )
    print(
        f"ratio: {statistics.median(ratios):.2f} (median of {len(ratios)} interleaved pairs; "
        f"min-time ratio {min(times[0]) / min(times[1]):.2f}) of the anchor's time per iteration "
        "(goal > 1)"
    )
    return 0 if same_first_rollout else 1


if __name__ == "__main__":
    raise SystemExit(main())
