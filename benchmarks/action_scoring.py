"""Restricted-action scoring: shared prompt KV cache vs one forward per (prompt + candidate).

Every restricted-action step scores all offered actions after the same prompt. The reference ran
one padded sequence per candidate (the prompt K times); ``LMPolicy`` encodes the prompt once and
runs the K candidates' tokens in one batched forward over the shared cache. This script checks
that both give the same log-probs (to 1e-4) and prints the speed ratio against the anchor
measured in the same run: one plain forward per (prompt + candidate).

Setup (defaults): a random Llama-style model (hidden 256, 4 layers, byte-level tokenizer, LoRA on
q/v with non-zero weights), a 300-token prompt and 10 candidates of 5-10 tokens.

    python benchmarks/action_scoring.py [--device cpu|cuda] [--threads N] [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

import torch

from agentbench_poad.rl.models import init_tiny_model
from agentbench_poad.rl.policy import LMPolicy

CANDIDATES = [  # 4..9 bytes each: 5..10 tokens with the byte-level tokenizer (leading space)
    "wait", "go up", "chop", "serve it", "take bowl", "go left", "pick one", "put it",
    "sit down", "open it",
]


def _prompt(n_tokens: int) -> str:
    words = ("You are a cook in a kitchen with a tomato, a lettuce and an onion on the counter. "
             "The bowl is empty and both cutting boards are free. ")
    text = (words * (n_tokens // len(words) + 1))[: n_tokens - 1]  # BOS is the 300th token
    return text


def _timed(fn, repeats: int, device: torch.device) -> tuple[float, object]:
    """Median wall time of ``fn()`` over ``repeats`` runs (after one warm-up), and its result."""
    result = fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        result = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads on CPU (1 is stable on a shared machine)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--prompt-tokens", type=int, default=300)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--num-layers", type=int, default=4)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = init_tiny_model(tmp, seed=0, hidden_size=args.hidden_size,
                                    num_layers=args.num_layers, num_heads=4)
        policy = LMPolicy(model_dir, device=args.device)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # a trained-looking adapter, so the LoRA path is really exercised
        for param in policy.trainable_parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=generator).to(param.device))
    device = policy.device

    prompt = _prompt(args.prompt_tokens)
    prompt_ids = policy.encode_prompt(prompt)
    candidates = [policy.encode_action(prompt, a) for a in CANDIDATES]
    lengths = sorted(len(c) for c in candidates)
    print(f"model: hidden {args.hidden_size}, {args.num_layers} layers, LoRA r=8 on q/v; "
          f"device {device}; prompt {len(prompt_ids)} tokens; {len(candidates)} candidates of "
          f"{lengths[0]}-{lengths[-1]} tokens")

    def shared_prefix() -> torch.Tensor:
        with torch.no_grad():
            (log_probs,) = policy._score_group([prompt_ids], [candidates])
        return log_probs

    def one_forward_per_candidate() -> torch.Tensor:
        rows = torch.zeros((len(candidates), max(lengths)), device=device)
        with torch.no_grad():
            for k, ids in enumerate(candidates):
                inputs = torch.tensor([prompt_ids + ids], device=device)
                logits = policy.model(input_ids=inputs).logits[0].float()
                log_probs = torch.log_softmax(logits[len(prompt_ids) - 1 : -1], dim=-1)
                rows[k, : len(ids)] = log_probs.gather(-1, inputs[0, len(prompt_ids):, None])[:, 0]
        return rows

    def padded_batch() -> torch.Tensor:
        # The reference's way: all K (prompt + candidate) sequences in one right-padded batch.
        return policy.token_log_probs([prompt] * len(candidates), candidates).log_probs

    anchor_s, expected = _timed(one_forward_per_candidate, args.repeats, device)
    shared_s, got = _timed(shared_prefix, args.repeats, device)
    with torch.no_grad():
        batch_s, batched = _timed(padded_batch, args.repeats, device)
    error = float((got - expected).abs().max())
    batch_error = float((batched - expected).abs().max())
    print(f"max |log-prob difference|: shared-prefix {error:.2e}, padded batch {batch_error:.2e} "
          "(tolerance 1e-4)")
    if error > 1e-4 or batch_error > 1e-4:
        print("FAILED: the scoring paths disagree", file=sys.stderr)
        return 1
    print(f"one forward per candidate: {anchor_s * 1e3:.1f} ms; padded batch (reference): "
          f"{batch_s * 1e3:.1f} ms; shared prefix: {shared_s * 1e3:.1f} ms")
    print(f"ratio vs padded batch: {batch_s / shared_s:.2f}x (informative)")
    print(f"ratio: {anchor_s / shared_s:.2f}x (target >= 3x: one forward per candidate / "
          "shared-prefix scoring)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
