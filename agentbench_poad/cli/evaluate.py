"""``agentbench-poad evaluate``: score an agent with greedy episodes.

One function per way of naming the agent (``evaluate_run`` for a training run directory); a new
mode adds its option to the mutually exclusive group and its own function.
"""

from __future__ import annotations

import argparse

from agentbench_poad.cli._common import add_command, die


def add_parser(subparsers) -> None:
    p = add_command(
        subparsers,
        "evaluate",
        "evaluate an agent (e.g. a trained run) on an environment",
        "Run greedy episodes of an agent and print its mean return and success rate.\n"
        "--run DIR: the policy of a training run (its newest checkpoint) on the run's env.",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", help="a run directory written by `agentbench-poad train`")
    p.add_argument("--env", dest="env_id", help="environment id (default: the run's)")
    p.add_argument("--episodes", type=int, default=10, help="episodes")
    p.add_argument("--seed", type=int, default=0, help="seed of the episodes' resets")
    p.add_argument("--device", help="torch device (default: the run's)")
    p.set_defaults(func=run_evaluate)


def run_evaluate(args: argparse.Namespace) -> int:
    if args.run:
        return evaluate_run(args)
    return die("name the agent to evaluate (--run DIR)")


def _report(name: str, env_id: str, result: dict) -> None:
    rate = result["success_rate"]
    print(f"agent: {name}")
    print(f"env: {env_id}")
    print(f"episodes: {len(result['returns'])}")
    print(f"mean return: {result['mean_return']:.4f}")
    print(f"success rate: {'n/a' if rate is None else f'{rate:.3f}'}")


def evaluate_run(args: argparse.Namespace) -> int:
    """The greedy policy of a training run's newest checkpoint."""
    from agentbench_poad.rl.trainer import evaluate_agent, load_agent, load_run_config

    try:
        spec = load_run_config(args.run)
        agent = load_agent(args.run, greedy=True, device=args.device)
    except (FileNotFoundError, ValueError) as exc:
        return die(str(exc))
    env_id = args.env_id or spec["env_id"]
    env_kwargs = spec.get("env_kwargs", {}) if env_id == spec["env_id"] else {}
    result = evaluate_agent(agent, env_id, episodes=args.episodes, seed=args.seed,
                            env_kwargs=env_kwargs)
    _report(f"{spec['agent']} ({args.run})", env_id, result)
    return 0
