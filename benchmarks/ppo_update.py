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

import torch
from _bench_model import collect_rollout, resolve_model, time_update

from agentbench_poad.baselines.poad import POAD, POADConfig
from agentbench_poad.rl.trainer import build_policy


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
    buffer = collect_rollout(algorithm, args.env, config)
    timing = time_update(algorithm, config, buffer, args.repeats)
    settings = config.ppo_settings()
    real_tokens, anchor_s, update_s = timing.real_tokens, timing.anchor_s, timing.update_s

    adapted = "all" if config.__dict__.get("lora_layers") is None else f"top {config.lora_layers}"
    print(
        f"model: {described}; LoRA r={config.lora_r} on {','.join(config.lora_target_modules)} "
        f"({adapted} layers); threads {torch.get_num_threads()}; device {policy.device}"
    )
    print(
        f"rollout: {args.env}, {timing.samples} samples, {real_tokens // config.epochs} tokens "
        f"per epoch ({timing.action_tokens} action tokens); {config.epochs} epoch(s) x "
        f"{settings.num_minibatches} minibatches x {settings.grad_accum_steps} chunk(s); "
        f"anchor padding {100 * (1 - real_tokens / timing.padded_tokens):.0f}%"
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
        f"ratio: {timing.ratio:.2f} (median of {len(anchor_s)} interleaved pairs; "
        f"min-time ratio {timing.min_time_ratio:.2f}) of plain forward+backward "
        "throughput (goal >= 0.8)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
