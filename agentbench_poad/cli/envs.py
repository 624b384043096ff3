"""``agentbench-poad envs`` and ``agentbench-poad play``."""

from __future__ import annotations

import argparse
import sys

from agentbench_poad.cli._common import add_command, die
from agentbench_poad.registration import BENCHMARK_FAMILIES


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "envs", "list the registered environment ids")
    p.add_argument("--family", choices=list(BENCHMARK_FAMILIES), help="only this family")
    p.set_defaults(func=run_envs)

    p = add_command(
        subparsers,
        "play",
        "play an environment yourself in the terminal",
        "Play ENV_ID in the terminal. Restricted-action environments show numbered actions: type\n"
        "a number (or the action text). Open-action environments (DataSciCoding) read code until a\n"
        "line with a single '.'; an empty first line submits nothing. Type 'q' to quit.",
    )
    p.add_argument("env_id", help="an id from `agentbench-poad envs`")
    p.add_argument("--seed", type=int, default=0, help="reset seed")
    p.add_argument("--episodes", type=int, default=1, help="episodes to play")
    p.set_defaults(func=run_play)


def run_envs(args: argparse.Namespace) -> int:
    from agentbench_poad.environments import describe, registered_ids

    ids = registered_ids(args.family)
    width = max((len(i) for i in ids), default=0)
    for env_id in ids:
        print(f"{env_id:<{width}}  {describe(env_id)}".rstrip())
    return 0


def _read_choice(prompt: str, actions: list[str] | None) -> str | None:
    """Read one action from stdin; ``None`` means quit."""
    if actions is not None:
        while True:
            line = input(prompt).strip()
            if line.lower() in {"q", "quit", "exit"}:
                return None
            if line.isdigit() and 1 <= int(line) <= len(actions):
                return actions[int(line) - 1]
            if line:
                return line  # free text: the env decides whether it is available
    print("Enter code; finish with a line holding a single '.' ('q' alone quits):")
    lines: list[str] = []
    while True:
        line = input()
        if not lines and line.strip().lower() in {"q", "quit", "exit"}:
            return None
        if line.strip() == ".":
            return "\n".join(lines)
        lines.append(line)


def run_play(args: argparse.Namespace) -> int:
    import gymnasium as gym

    try:
        env = gym.make(args.env_id)
    except gym.error.Error as exc:
        return die(f"{exc} (see `agentbench-poad envs` for the ids)")
    try:
        for episode in range(args.episodes):
            observation, info = env.reset(seed=args.seed + episode)
            total, done = 0.0, False
            while not done:
                print("\n" + observation)
                actions = info.get("available_actions")
                if actions is not None:
                    for i, action in enumerate(actions, 1):
                        print(f"  {i}. {action}")
                try:
                    choice = _read_choice("your choice> ", actions)
                except EOFError:
                    choice = None
                if choice is None:
                    print(f"quit; return so far {total:.3f}")
                    return 0
                observation, reward, terminated, truncated, info = env.step(choice)
                total += reward
                print(
                    f"reward {reward:+.3f}"
                    + ("" if info.get("action_valid", True) else " (action not available)")
                )
                done = terminated or truncated
            print(
                f"\nepisode {episode} over: return {total:.3f}"
                f" ({'success' if terminated else 'time limit'})"
            )
    finally:
        env.close()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_envs(argparse.Namespace(family=None)))
