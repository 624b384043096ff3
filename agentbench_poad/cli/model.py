"""``agentbench-poad model``: build the small models used by tests and examples."""

from __future__ import annotations

import argparse
import sys

from agentbench_poad.cli._common import add_command, die


def add_parser(subparsers) -> None:
    p = add_command(
        subparsers,
        "model",
        "build small local models (the Hugging Face hub may be unreachable)",
    )
    model_commands = p.add_subparsers(title="model commands", metavar="MODEL_COMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])

    from agentbench_poad.cli import _Formatter

    init = model_commands.add_parser(
        "init",
        help="write a random-init model directory",
        description=(
            "Write a random-init causal LM that loads with AutoModelForCausalLM.from_pretrained(DIR)\n"
            "and AutoTokenizer.from_pretrained(DIR). 'tiny' is a Llama-style model with a byte-level\n"
            "tokenizer (259 tokens); pass DIR wherever a model name is expected, e.g.\n"
            "  agentbench-poad model init tiny --out models/tiny\n"
            "  agentbench-poad train poad Overcooked-TomatoSalad-v0 --model models/tiny"
        ),
        formatter_class=_Formatter,
    )
    init.add_argument("kind", choices=["tiny"], help="which model to build")
    init.add_argument("--out", required=True, help="directory to write the model to")
    init.add_argument("--seed", type=int, default=0, help="seed of the weight initialisation")
    init.add_argument("--hidden-size", type=int, default=64, help="model width")
    init.add_argument("--num-layers", type=int, default=2, help="decoder layers")
    init.add_argument("--num-heads", type=int, default=4, help="attention heads")
    init.add_argument("--num-kv-heads", type=int, default=None,
                      help="key/value heads (default: --num-heads)")
    init.add_argument("--intermediate-size", type=int, default=None,
                      help="MLP width (default: 2 x hidden size)")
    init.add_argument("--max-positions", type=int, default=2048, help="longest sequence")
    init.set_defaults(func=run_init)


def run_init(args: argparse.Namespace) -> int:
    from agentbench_poad.errors import DependencyNotInstalled

    try:
        from agentbench_poad.rl.models import init_tiny_model

        out = init_tiny_model(
            args.out,
            seed=args.seed,
            hidden_size=args.hidden_size,
            num_layers=args.num_layers,
            num_heads=args.num_heads,
            num_kv_heads=args.num_kv_heads,
            intermediate_size=args.intermediate_size,
            max_positions=args.max_positions,
        )
    except DependencyNotInstalled as exc:
        return die(str(exc))
    except ValueError as exc:
        return die(str(exc))
    import math

    from safetensors import safe_open

    # Count from the file's headers: no need to load the weights again.
    with safe_open(str(out / "model.safetensors"), framework="pt") as weights:
        n_params = sum(math.prod(weights.get_slice(k).get_shape()) for k in weights.keys())
    print(f"wrote a random-init {args.kind} model ({n_params:,} parameters) to {out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_init(argparse.Namespace(
        kind="tiny", out="tiny-model", seed=0, hidden_size=64, num_layers=2, num_heads=4,
        num_kv_heads=None, intermediate_size=None, max_positions=2048)))
