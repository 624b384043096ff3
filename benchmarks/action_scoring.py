"""Rollout scoring cost: one restricted-action step against one forward of the prompts alone.

Run: ``python benchmarks/action_scoring.py [--model DIR] [--threads 2] [--repeats 10]``.

Every rollout step of POAD / TWOSOME in Overcooked scores all offered actions after the prompt
(TWOSOME's categorical over the word-normalised likelihoods, and the chosen action's per-token
log-probs that POAD stores), then reads the frozen model's features for the critic. This script
takes ``--num-envs`` real Overcooked observations (``--env``, 8 offered actions in the two-
ingredient tasks) and times, in the same run and interleaved:

* anchor: one forward of the adapted model over the prompts alone (right-padded batch, logits at
  the last position only, inference mode) -- the least any scoring method can cost;
* ``LMPolicy.act``: every candidate scored, one sampled (the prompt runs once, its candidates
  after it as one trie);
* ``act`` + ``critic_features``: everything ``POAD.collect`` asks of the model per step.

The ratio printed is scoring time over anchor time (goal <= 2x). The log-probs of the scoring
path are checked against one plain forward per (prompt + candidate) first (tolerance 1e-4).

``--lora-layers K`` adapts only the top ``K`` layers (``PPOConfig.lora_layers``, a deviation from
the paper); the layers below are frozen, so the policy keeps their states of every (prompt,
offered actions) tree it scored and of every chosen sequence (exact). ``act`` is then timed twice:
*cold* (the tree cache emptied before each call: a prompt seen for the first time, all layers
run) and *warm* (the trees cached: only the top ``K`` layers run, which is what a rollout pays
when it meets an observation again; an Overcooked task has a few dozen distinct observations).
The headline ratio is the cold one.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import gymnasium as gym
import torch
from _bench_model import resolve_model

import agentbench_poad  # noqa: F401  (registers the environments)
from agentbench_poad.rl.policy import LMPolicy


def _observations(env_id: str, count: int) -> tuple[list[str], list[list[str]]]:
    """``count`` observations a few random steps into different episodes."""
    prompts, actions = [], []
    generator = torch.Generator().manual_seed(0)
    for i in range(count):
        env = gym.make(env_id)
        observation, info = env.reset(seed=i)
        for _ in range(i % 3):
            offered = info["available_actions"]
            pick = int(torch.randint(len(offered), (1,), generator=generator))
            observation, _, terminated, truncated, info = env.step(offered[pick])
            if terminated or truncated:
                observation, info = env.reset(seed=100 + i)
        prompts.append(observation)
        actions.append(list(info["available_actions"]))
    return prompts, actions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model directory (default: see above)")
    parser.add_argument("--env", default="Overcooked-TomatoLettuceSalad-v0")
    parser.add_argument("--num-envs", type=int, default=4, help="prompts scored per step")
    parser.add_argument(
        "--lora-layers",
        type=int,
        default=None,
        help="adapt only the top K decoder layers (PPOConfig.lora_layers)",
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads on CPU")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    tiny = tempfile.TemporaryDirectory()
    model, described = resolve_model(args.model, tiny, hidden_size=256, num_layers=4, num_heads=4)
    options = {} if args.lora_layers is None else {"lora_layers": args.lora_layers}
    policy = LMPolicy(model, device=args.device, **options)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # a trained-looking adapter, so the LoRA path is really exercised
        for param in policy.trainable_parameters():
            param.add_(0.02 * torch.randn(param.shape, generator=generator).to(param.device))
    device = policy.device

    prompts, offered = _observations(args.env, args.num_envs)
    prompt_ids = [policy.encode_prompt(p) for p in prompts]
    candidates = [[policy.encode_action(p, a) for a in acts] for p, acts in zip(prompts, offered)]
    n_prompt = sum(len(p) for p in prompt_ids)
    n_cand = sum(len(c) for group in candidates for c in group)
    n_offered = sorted({len(a) for a in offered})
    print(
        f"model: {described}; LoRA on {'all' if args.lora_layers is None else args.lora_layers}"
        f" layers; threads {torch.get_num_threads()}; device {device}"
    )
    print(
        f"{args.env}: {len(prompts)} prompts ({n_prompt} tokens), {n_offered} offered actions "
        f"each ({n_cand} candidate tokens)"
    )

    # Correctness first: the shared-prefix log-probs equal one plain forward per candidate.
    with torch.no_grad():
        (shared,) = policy._score_group([prompt_ids[0]], [candidates[0]])
        worst = 0.0
        for k, ids in enumerate(candidates[0]):
            inputs = torch.tensor([prompt_ids[0] + ids], device=device)
            logits = policy.model(input_ids=inputs).logits[0].float()
            plain = torch.log_softmax(logits[len(prompt_ids[0]) - 1 : -1], dim=-1)
            plain = plain.gather(-1, inputs[0, len(prompt_ids[0]) :, None])[:, 0]
            worst = max(worst, float((shared[k, : len(ids)] - plain).abs().max()))
    print(f"max |log-prob difference| shared prefix vs one forward per candidate: {worst:.1e}")
    if worst > 1e-4:
        print("FAILED: the scoring paths disagree", file=sys.stderr)
        return 1

    ids, attention = policy._right_padded(prompt_ids)

    def prompts_only() -> None:
        with torch.inference_mode():
            policy._lm(keep=1, input_ids=ids, attention_mask=attention, use_cache=False)

    action_generator = torch.Generator().manual_seed(1)

    def act() -> list:
        return policy.act(prompts, offered, generator=action_generator)

    def act_cold() -> list:
        policy.clear_frozen_cache()  # every layer runs, as for a prompt never seen before
        return act()

    def act_and_critic() -> None:
        policy.clear_frozen_cache()
        samples = act()
        policy.critic_features(prompts, [s.token_ids for s in samples])

    paths: dict[str, Callable[[], object]] = {
        "prompt forward (anchor)": prompts_only,
        "act (scoring)": act_cold,
        "act + critic features": act_and_critic,
    }
    if args.lora_layers is not None:
        paths["act, trees cached (warm)"] = act
    times: dict[str, list[float]] = {name: [] for name in paths}
    for fn in paths.values():
        fn()  # warm-up
    for _ in range(args.repeats):
        for name, fn in paths.items():
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times[name].append(time.perf_counter() - start)
    anchor = times["prompt forward (anchor)"]
    for name, values in times.items():
        ratios = [v / a for v, a in zip(values, anchor)]
        print(
            f"{name:26s} median {statistics.median(values) * 1e3:7.1f} ms, min "
            f"{min(values) * 1e3:7.1f} ms; x anchor: median {statistics.median(ratios):.2f}, "
            f"min-time {min(values) / min(anchor):.2f}"
        )
    scoring = statistics.median(v / a for v, a in zip(times["act (scoring)"], anchor))
    print(
        f"ratio: {scoring:.2f}x of one prompt forward (goal <= 2x; median of {args.repeats} "
        "interleaved runs)"
    )
    if "act, trees cached (warm)" in times:
        warm = statistics.median(v / a for v, a in zip(times["act, trees cached (warm)"], anchor))
        print(f"warm ratio: {warm:.2f}x (an observation met again; lower layers cached)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
