"""``agentbench-poad warmstart``: supervised warm starts for DataSciCoding (build, merge, info).

* ``warmstart build --model M --style S --out DIR`` -- TRL ``SFTTrainer`` (LoRA) on working
  programs for non-evaluation datasets; writes the adapter and its manifest;
* ``warmstart merge DIR`` -- the base with the adapter merged, ``DIR/model``, for ``--model``;
* ``warmstart info DIR`` -- the manifest, with the adapter's digest checked.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from agentbench_poad.cli._common import add_command, check_at_least, die, first_error


def add_parser(subparsers) -> None:
    p = add_command(
        subparsers,
        "warmstart",
        "supervised warm starts for DataSciCoding (build, merge, info)",
        "A small model that writes no runnable DataSciCoding program gets the failure penalty on\n"
        "every attempt and has nothing to learn from. A warm start fine-tunes a LoRA adapter\n"
        "(TRL's SFTTrainer) on working build_model bodies, drawn from a grid of estimators x\n"
        "preprocessing x hyper-parameters, for datasets that are not evaluation datasets.\n"
        "Agents then train from the merged model with a fresh adapter of their own, and their\n"
        "records name the warm start. Needs `pip install -e '.[warmstart]'`. See\n"
        "docs/warmstart.md.",
    )
    commands = p.add_subparsers(title="warmstart commands", metavar="WARMSTART_COMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])
    from agentbench_poad.cli import _Formatter

    build = commands.add_parser(
        "build",
        help="fine-tune a warm-start adapter",
        description="Fine-tune a LoRA adapter on (the env's reset prompt, a working body) pairs\n"
        "and write DIR/adapter and DIR/manifest.json. Checks the style, the datasets and\n"
        "that DIR holds no warm start yet before loading anything.",
        formatter_class=_Formatter,
    )
    build.add_argument("--model", required=True, help="base model (name, folder or .gguf)")
    build.add_argument("--style", required=True, choices=("paper", "worked_example"))
    build.add_argument(
        "--chat-template",
        choices=("on", "off"),
        required=True,
        help="read the prompt as a chat turn (as the agents will: their chat_template setting)",
    )
    build.add_argument("--out", required=True, type=Path, help="the warm start's folder")
    build.add_argument(
        "--datasets",
        default="wine,breast-cancer,gen-circles,gen-moons,gen-noisy",
        help="comma-separated training datasets",
    )
    build.add_argument(
        "--exclude",
        default="iris,gen-xor",
        help="evaluation datasets: refused in --datasets",
    )
    build.add_argument("--programs-per-dataset", type=int, default=64)
    build.add_argument("--epochs", type=float, default=2.0)
    build.add_argument("--learning-rate", type=float, default=2e-4)
    build.add_argument("--batch-size", type=int, default=8)
    build.add_argument("--lora-r", type=int, default=16)
    build.add_argument(
        "--lora-layers",
        type=int,
        default=None,
        help="adapt only the top N decoder layers (default: all; 8 halves a CPU step)",
    )
    build.add_argument("--seed", type=int, default=0)
    build.add_argument("--max-steps", type=int, default=-1, help="stop after N steps (-1: epochs)")
    build.set_defaults(func=run_build)

    merge = commands.add_parser(
        "merge",
        help="make DIR/model: the base with the adapter merged",
        description="Load the manifest's base model, merge the adapter and save DIR/model\n"
        "(reused while the adapter's digest matches). Train agents with --model DIR/model.",
        formatter_class=_Formatter,
    )
    merge.add_argument("folder", type=Path)
    merge.set_defaults(func=run_merge)

    info = commands.add_parser(
        "info", help="print a warm start's manifest", formatter_class=_Formatter
    )
    info.add_argument("folder", type=Path)
    info.set_defaults(func=run_info)


def run_build(args: argparse.Namespace) -> int:
    import gymnasium as gym

    import agentbench_poad  # noqa: F401 - registers the envs

    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    exclude = [d.strip() for d in args.exclude.split(",") if d.strip()]
    unknown = [d for d in datasets if f"DataSciCoding-{d}-v0" not in gym.registry]
    overlap = sorted(set(datasets) & set(exclude))
    problem = first_error(
        f"--out {args.out} already holds a warm start; choose another folder"
        if (args.out / "manifest.json").exists()
        else None,
        f"--datasets: unknown {', '.join(unknown)} (see `agentbench-poad envs list`)"
        if unknown
        else None,
        f"--datasets {', '.join(overlap)} are evaluation datasets (--exclude)" if overlap else None,
        check_at_least(args.programs_per_dataset, 1, "--programs-per-dataset"),
        check_at_least(args.batch_size, 1, "--batch-size"),
        check_at_least(args.lora_r, 1, "--lora-r"),
    )
    if problem:
        return die(problem)
    from agentbench_poad.warmstart.sft import train_warm_start

    out = train_warm_start(
        args.model,
        args.out,
        style=args.style,
        chat_template=args.chat_template == "on",
        programs_per_dataset=args.programs_per_dataset,
        datasets=datasets,
        evaluation_datasets=exclude,
        epochs=args.epochs,
        learning_rate=args.learning_rate,
        batch_size=args.batch_size,
        lora_r=args.lora_r,
        lora_layers=args.lora_layers,
        seed=args.seed,
        max_steps=args.max_steps,
    )
    print(f"warm start written to {out} (merge it with `agentbench-poad warmstart merge {out}`)")
    return 0


def run_merge(args: argparse.Namespace) -> int:
    from agentbench_poad.warmstart.sft import merged_model

    try:
        target = merged_model(args.folder)
    except (FileNotFoundError, ValueError) as exc:
        return die(str(exc))
    print(f"{target} (train with --model {target})")
    return 0


def run_info(args: argparse.Namespace) -> int:
    from agentbench_poad.warmstart.sft import read_manifest

    try:
        manifest = read_manifest(args.folder)
    except (FileNotFoundError, ValueError) as exc:
        return die(str(exc))
    print(json.dumps(manifest, indent=2))
    return 0
