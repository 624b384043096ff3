"""``agentbench-poad train``: train a built-in agent (POAD, NTPO, TWOSOME, GRPO, GiGPO, ARCHER,
ARCHER-ADRL: every name in ``baselines.ALGORITHMS``) or your own algorithm."""

from __future__ import annotations

import argparse

from agentbench_poad.baselines import ALGORITHMS
from agentbench_poad.cli._common import (
    add_command,
    check_agent_env,
    check_at_least,
    check_device,
    check_env_id,
    check_model,
    die,
    first_error,
)

#: The built-in algorithms' names (``--agent`` also takes a spec of your own algorithm class).
AGENTS = tuple(ALGORITHMS)
PRESETS = (
    "auto",
    "mini",
    "none",
    "overcooked",
    "virtualhome",
    "datascicoding",
    "overcooked-mini",
    "virtualhome-mini",
    "datascicoding-mini",
)


def add_parser(subparsers) -> None:
    p = add_command(
        subparsers,
        "train",
        "train an RL agent (POAD, NTPO, TWOSOME, GRPO, GiGPO, ARCHER, ARCHER-ADRL) or your own "
        "algorithm with LoRA",
        "Train a reference agent on ENV with a causal LM: a named model (e.g. smollm2-135m,\n"
        "fetched on first use; `agentbench-poad model list`), a .gguf file, a local directory or\n"
        "a hub id (make a small offline one with `agentbench-poad model init tiny --out DIR`).\n"
        "The run's config.json keeps the model as given (the name, not a cache path). Hyper-parameters\n"
        "come from the paper's preset for the env family (--preset auto) or from its CPU preset\n"
        "for ~100M models on a laptop (--preset mini; docs/agents.md), overridden field by\n"
        "field with --set KEY=VALUE (e.g. --set lr=1e-5 --set num_envs=2). The run directory\n"
        "gets config.json, metrics.jsonl, learning_curve.json, tb/ and checkpoints/; --resume\n"
        "continues a stopped run from its newest checkpoint.\n"
        "--agent takes a built-in name or your own PPOAgent subclass by spec, package.module:Class\n"
        "or path/to/file.py:Class (docs/agents.md, 'Write your own algorithm'; e.g.\n"
        "--agent examples/my_algorithm.py:MyPOAD); a class that is not an algorithm, a spec that\n"
        "does not import or a --set field the class does not know fail before any model loads.",
    )
    p.add_argument(
        "--agent",
        required=True,
        metavar="NAME|SPEC",
        help=f"algorithm: {', '.join(AGENTS)}, or package.module:Class / path/to/file.py:Class",
    )
    p.add_argument("--env", required=True, dest="env_id", help="environment id")
    p.add_argument(
        "--model",
        required=True,
        help="named model (smollm2-135m), .gguf file, local directory or hub id",
    )
    p.add_argument("--total-steps", type=int, required=True, help="environment steps")
    p.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument(
        "--preset",
        choices=PRESETS,
        default="auto",
        help="hyper-parameter preset (auto: the paper's for the env's family; mini: "
        "the family's CPU preset)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="override a config field (repeatable; tuples comma-separated)",
    )
    p.add_argument(
        "--env-arg",
        action="append",
        default=[],
        metavar="KEY=JSON",
        dest="env_args",
        help="extra gym.make argument (repeatable)",
    )
    p.add_argument("--device", help="torch device (overrides the config's)")
    p.add_argument("--max-updates", type=int, help="stop after this many updates (resumable)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_train)


def _pairs(items: list[str], what: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{what} takes KEY=VALUE, got {item!r}")
        pairs[key.strip()] = value.strip()
    return pairs


def run_train(args: argparse.Namespace) -> int:
    import json

    # Everything the user typed is checked before the model is loaded or an env is made.
    error = first_error(
        check_env_id(args.env_id),
        check_at_least(args.total_steps, 1, "--total-steps"),
        check_at_least(args.seed, 0, "--seed"),
        check_at_least(args.max_updates, 1, "--max-updates"),
    )
    if error := error or check_agent_env(args.agent, args.env_id):
        return die(error)
    from agentbench_poad.baselines import get_algorithm
    from agentbench_poad.rl.config import preset_for
    from agentbench_poad.rl.trainer import train

    try:
        algorithm = get_algorithm(args.agent)
        config_class = algorithm.config_class
        overrides = config_class.coerce_overrides(_pairs(args.overrides, "--set"))
        if args.device:
            overrides["device"] = args.device
        # the config itself (preset + overrides, validated by its __post_init__), before the model
        preset = None if args.preset == "none" else args.preset
        config = config_class.preset(preset_for(config_class, args.env_id, preset), **overrides)
        env_kwargs = {k: json.loads(v) for k, v in _pairs(args.env_args, "--env-arg").items()}
    except json.JSONDecodeError as exc:
        return die(f"--env-arg takes KEY=JSON, the value is not JSON ({exc.msg})")
    except (ValueError, KeyError) as exc:
        return die(str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc))
    if error := check_device(config.device):  # no GPU: fail before the model loads
        return die(error)
    if getattr(config, "compile_layers", False):  # inductor compiles here: before the model loads
        from agentbench_poad.rl.compiled_layers import check_compile_layers

        try:
            check_compile_layers(config.device)
        except ValueError as exc:
            return die(str(exc))
    if error := check_model(args.model):  # last: the options above are cheaper to fix
        return die(error)
    try:
        run_dir = train(
            algorithm,
            args.env_id,
            args.model,
            total_steps=args.total_steps,
            seed=args.seed,
            out=args.out,
            resume=args.resume,
            overrides=overrides,
            preset=preset,
            env_kwargs=env_kwargs,
            progress=not args.no_progress,
            max_updates=args.max_updates,
        )
    except (ValueError, OSError) as exc:  # OSError: ModelNotAvailable, FileExistsError, ...
        return die(str(exc))
    print(f"run directory: {run_dir}")
    return 0
