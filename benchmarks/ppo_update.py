"""PPO update throughput (POAD, token level) against a plain Hugging Face forward + backward.

Run: ``python benchmarks/ppo_update.py [--model DIR] [--threads 2] [--repeats 3]``.

A real rollout of Overcooked is collected with POAD (``--num-envs`` × ``--rollout-length`` action
samples), then ``POAD.update`` (``--epochs`` epochs, every critic and policy step, backward passes
and optimiser steps included) is timed. The anchor, measured in the same run and interleaved with
the update (A B A B ...), is a plain Hugging Face forward + backward over the same tokens: the
same minibatches in the same order, each split into the same ``grad_accum_steps`` chunks and
right-padded as one batch, the same LoRA adapters, ``model(input_ids, attention_mask,
labels).loss.backward()`` (full-vocabulary logits at every position, as a plain fine-tuning step
computes them). The printed ratio is update tokens/s over anchor tokens/s, i.e. anchor time over
update time (goal >= 0.8). Tokens are real prompt + action tokens; pads are not counted.

Exact speed options (see ``PPOConfig``): ``--lora-layers K`` adapts only the top ``K`` decoder
layers (a deviation from the paper: it changes what is trained) and lets the update start from the
cached hidden states below them; the anchor then uses the same top-``K`` adapters.
``--max-chunk-tokens N`` packs each minibatch into length-sorted chunks of at most ``N`` padded
tokens (exactly the same gradient).

Model: ``--model``, else ``$AGENTBENCH_POAD_BENCH_MODEL``, else the cached named model ``smollm2-135m``, else a tiny random model (see ``benchmarks/_bench_model.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time

import gymnasium as gym
import torch
from _bench_model import resolve_model

from agentbench_poad.baselines.poad import POAD, POADConfig
from agentbench_poad.rl.buffer import RolloutBuffer
from agentbench_poad.rl.trainer import build_policy


def _collect(algorithm: POAD, env_id: str, config: POADConfig) -> RolloutBuffer:
    envs = [gym.make(env_id) for _ in range(config.num_envs)]
    observations, infos = map(list, zip(*(e.reset(seed=i) for i, e in enumerate(envs))))
    generator = torch.Generator().manual_seed(0)
    buffer = RolloutBuffer(num_envs=config.num_envs)
    for _ in range(config.rollout_length):
        records = algorithm.collect(
            observations, [i["available_actions"] for i in infos], generator
        )
        for k, record in enumerate(records):
            obs, reward, terminated, truncated, info = envs[k].step(record.sample.text)
            record.reward, record.done = float(reward), bool(terminated or truncated)
            if record.done:
                obs, info = envs[k].reset(seed=100 + k)
            observations[k], infos[k] = obs, info
        buffer.add(records)
    buffer.next_values = algorithm.bootstrap_values(observations)
    algorithm.compute_advantages(buffer)
    return buffer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model directory (default: see above)")
    parser.add_argument("--env", default="Overcooked-TomatoSalad-v0")
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--rollout-length", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--num-minibatches", type=int, default=2)
    parser.add_argument("--grad-accum-steps", type=int, default=1)
    parser.add_argument(
        "--lora-layers",
        type=int,
        default=None,
        help="adapt only the top K decoder layers (PPOConfig.lora_layers)",
    )
    parser.add_argument(
        "--max-chunk-tokens",
        type=int,
        default=None,
        help="length-sorted policy chunks of at most N tokens (PPOConfig.max_chunk_tokens)",
    )
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--repeats", type=int, default=3, help="timed (anchor, update) pairs")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    tiny = tempfile.TemporaryDirectory()
    model, described = resolve_model(args.model, tiny, hidden_size=64)
    options = {}
    fields = {f.name for f in dataclasses.fields(POADConfig)}
    for name in ("lora_layers", "max_chunk_tokens"):
        value = getattr(args, name)
        if value is not None:
            if name not in fields:
                parser.error(
                    f"--{name.replace('_', '-')} needs PPOConfig.{name} (not in this tree)"
                )
            options[name] = value
    config = POADConfig.preset(
        "overcooked",
        num_envs=args.num_envs,
        rollout_length=args.rollout_length,
        epochs=args.epochs,
        num_minibatches=args.num_minibatches,
        grad_accum_steps=args.grad_accum_steps,
        target_kl=None,
        device=args.device,
        **options,
    )
    policy = build_policy(config, model, seed=0)
    algorithm = POAD(config, policy, seed=0)
    buffer = _collect(algorithm, args.env, config)

    prompts = buffer.flat("prompt")
    tokens = buffer.flat_samples("token_ids")
    sequences = [policy.encode_prompt(p) + list(t) for p, t in zip(prompts, tokens)]
    real_tokens = sum(len(s) for s in sequences) * config.epochs
    settings = config.ppo_settings()

    def anchor_chunks() -> list[list[int]]:
        # The minibatches ppo_update draws with the same generator, split as it splits them.
        generator = torch.Generator().manual_seed(1)
        chunks = []
        for _ in range(config.epochs):
            order = torch.randperm(len(sequences), generator=generator)
            for index in order.tensor_split(settings.num_minibatches):
                for chunk in index.tensor_split(settings.grad_accum_steps):
                    if chunk.numel():
                        chunks.append(chunk.tolist())
        return chunks

    chunks = anchor_chunks()
    padded_tokens = sum(len(c) * max(len(sequences[i]) for i in c) for c in chunks)

    def plain_forward_backward() -> None:
        policy.model.train()
        try:
            for chunk in chunks:
                ids, mask = policy._right_padded([sequences[i] for i in chunk])
                labels = ids.masked_fill(mask == 0, -100)
                out = policy.model(input_ids=ids, attention_mask=mask, labels=labels)
                out.loss.backward()
                policy.model.zero_grad(set_to_none=True)
        finally:
            policy.model.eval()

    def update() -> None:
        algorithm.update(buffer, torch.Generator().manual_seed(1))

    plain_forward_backward()  # warm-up of both paths
    update()
    anchor_s, update_s = [], []
    for _ in range(args.repeats):
        for fn, times in ((plain_forward_backward, anchor_s), (update, update_s)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    ratios = [a / u for a, u in zip(anchor_s, update_s)]

    adapted = "all" if config.__dict__.get("lora_layers") is None else f"top {config.lora_layers}"
    print(
        f"model: {described}; LoRA r={config.lora_r} on {','.join(config.lora_target_modules)} "
        f"({adapted} layers); threads {torch.get_num_threads()}; device {policy.device}"
    )
    print(
        f"rollout: {args.env}, {len(sequences)} samples, {real_tokens // config.epochs} tokens "
        f"per epoch ({sum(len(t) for t in tokens)} action tokens); {config.epochs} epoch(s) x "
        f"{settings.num_minibatches} minibatches x {settings.grad_accum_steps} chunk(s); "
        f"anchor padding {100 * (1 - real_tokens / padded_tokens):.0f}%"
    )
    print(
        f"plain HF forward+backward: median {statistics.median(anchor_s):.2f} s, min "
        f"{min(anchor_s):.2f} s ({real_tokens / statistics.median(anchor_s):,.0f} tokens/s)"
    )
    print(
        f"PPO update:                median {statistics.median(update_s):.2f} s, min "
        f"{min(update_s):.2f} s ({real_tokens / statistics.median(update_s):,.0f} tokens/s)"
    )
    print(
        f"ratio: {statistics.median(ratios):.2f} (median of {len(ratios)} interleaved pairs; "
        f"min-time ratio {min(anchor_s) / min(update_s):.2f}) of plain forward+backward "
        "throughput (goal >= 0.8)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
