"""``agentbench-poad evaluate``: score an agent under the leaderboard's protocol.

Two modes, one command:

* ``--agent module:Factory --env ID... --seeds ... --episodes N`` -- any user agent (a class or
  factory; ``path/to/file.py:Factory`` works too). Writes one run record per env id to ``--out``
  and, with ``--add``, into the leaderboard store. Owned by the leaderboard
  (:func:`run_agent_mode`).
* ``--run RUN_DIR --episodes K`` -- the last checkpoint of a training run. Owned by the
  RL-learning engineer (:func:`run_training_run_mode`; replace its body freely).
"""

from __future__ import annotations

import argparse
import json
import sys

from agentbench_poad.cli._common import add_command, die


def add_parser(subparsers) -> None:
    p = add_command(
        subparsers,
        "evaluate",
        "score an agent (yours or a training run) under the leaderboard protocol",
        "Score an agent under the leaderboard protocol.\n\n"
        "  agentbench-poad evaluate --agent my_pkg.agents:MyAgent --env Overcooked-TomatoSalad-v0 \\\n"
        "      --seeds 0 1 2 --episodes 100 --out runs/eval --add\n\n"
        "The factory is called with env= and/or seed= when its signature takes them (plus\n"
        "--agent-kwargs). Each act() runs in a thread with a --timeout deadline; agents that\n"
        "raise, return a non-string or hang become failed episodes. Re-running the same command\n"
        "resumes an interrupted evaluation from the partial file in --out.",
    )
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--agent", metavar="MODULE:FACTORY",
                      help="agent class or factory, 'package.module:Name' or 'file.py:Name'")
    mode.add_argument("--run", metavar="RUN_DIR", help="a training run dir (see `train`)")
    p.add_argument("--env", nargs="+", metavar="ENV_ID", help="environment id(s)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="evaluation seeds")
    p.add_argument("--episodes", type=int, default=100, help="episodes per seed")
    p.add_argument("--agent-kwargs", default="{}", metavar="JSON",
                   help="keyword arguments for the factory, as a JSON object")
    p.add_argument("--env-kwargs", default="{}", metavar="JSON",
                   help="keyword arguments for gym.make, as a JSON object")
    p.add_argument("--name", help="the agent's name on the board (default: its name attribute)")
    p.add_argument("--base-model", help="base model of an LLM agent (provenance)")
    p.add_argument("--adapter", help="adapter of an LLM agent (provenance)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="per-action deadline in seconds (0: none)")
    p.add_argument("--out", default="agentbench-runs/eval",
                   help="folder for the records and the resumable partial files")
    p.add_argument("--add", action="store_true", help="also add the records to the store")
    p.add_argument("--store", help="leaderboard store (default: the package's results/)")
    p.add_argument("--replace", action="store_true", help="with --add: replace same-id records")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_evaluate)


def run_evaluate(args: argparse.Namespace) -> int:
    if args.run:
        return run_training_run_mode(args)
    return run_agent_mode(args)


# -- --agent mode (leaderboard) ------------------------------------------------------------------
def _json_arg(text: str, flag: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{flag} is not valid JSON ({exc.msg}): {text!r}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{flag} must be a JSON object, got {text!r}")
    return value


def canonical_command(args: argparse.Namespace) -> str:
    """The command that reproduces this evaluation, rebuilt from the parsed options.

    Rebuilt rather than read from ``sys.argv`` so that in-process calls (``main([...])``)
    record the real command too.
    """
    import shlex

    parts = ["agentbench-poad", "evaluate", "--agent", args.agent, "--env", *args.env,
             "--seeds", *map(str, args.seeds), "--episodes", str(args.episodes)]
    for flag, value, default in (("--agent-kwargs", args.agent_kwargs, "{}"),
                                 ("--env-kwargs", args.env_kwargs, "{}"),
                                 ("--name", args.name, None),
                                 ("--base-model", args.base_model, None),
                                 ("--adapter", args.adapter, None),
                                 ("--timeout", args.timeout, 60.0)):
        if value != default:
            parts += [flag, str(value)]
    return " ".join(shlex.quote(p) for p in parts)


def run_agent_mode(args: argparse.Namespace) -> int:
    from agentbench_poad.leaderboard.protocol import evaluate, load_factory
    from agentbench_poad.leaderboard.records import RecordError, add_record

    if not args.env:
        return die("--env is required with --agent (see `agentbench-poad envs` for the ids)")
    try:
        agent_kwargs = _json_arg(args.agent_kwargs, "--agent-kwargs")
        env_kwargs = _json_arg(args.env_kwargs, "--env-kwargs")
        load_factory(args.agent)  # fail fast with a clear message before any env is made
    except ValueError as exc:
        return die(str(exc))
    import gymnasium as gym

    for env_id in args.env:
        if env_id not in gym.registry:
            return die(f"unknown environment id {env_id!r}; see `agentbench-poad envs`")
    records = evaluate(
        args.agent, args.env, seeds=args.seeds, episodes=args.episodes,
        agent_kwargs=agent_kwargs, env_kwargs=env_kwargs, agent_name=args.name,
        action_timeout=args.timeout or None, out_dir=args.out, base_model=args.base_model,
        adapter=args.adapter, command=canonical_command(args), progress=not args.no_progress,
    )
    for record in records:
        sc = record["scores"]
        failed = sum(s["failed_episodes"] for s in sc["per_seed"])
        print(f"{record['env']['id']}: {record['agent']['name']} score {sc['mean']:.4f} ± "
              f"{sc['stderr']:.4f}, success {sc['success_rate']:.3f} "
              f"({len(sc['per_seed'])} seeds × {args.episodes} episodes, {failed} failed)")
        print(f"  record: {args.out}/{record['record_id']}.json")
        if args.add:
            try:
                path = add_record(record, args.store, replace=args.replace)
            except RecordError as exc:
                return die(str(exc))
            print(f"  added to the board: {path}")
    return 0


# -- --run mode (RL-learning engineer) -----------------------------------------------------------
def run_training_run_mode(args: argparse.Namespace) -> int:
    """Evaluate a training run's last checkpoint (placeholder until the trainer's owner fills it).

    It loads the agent with ``agentbench_poad.rl.trainer.load_agent`` and scores it with the
    leaderboard protocol on the run's env; ``leaderboard add --run`` makes a record of it.
    """
    from pathlib import Path

    from agentbench_poad.leaderboard.from_run import load_run_agent, read_run_config
    from agentbench_poad.leaderboard.protocol import evaluate
    from agentbench_poad.leaderboard.records import RecordError

    try:
        config = read_run_config(Path(args.run))
    except RecordError as exc:
        return die(str(exc))
    env_ids = args.env or [config["env_id"]]
    seed = int(config.get("seed", 0))
    records = evaluate(load_run_agent, env_ids, seeds=[seed], episodes=args.episodes,
                       agent_kwargs={"runs": {str(seed): str(Path(args.run).resolve())}},
                       agent_name=args.name or config.get("agent"),
                       action_timeout=args.timeout or None, progress=not args.no_progress)
    for record in records:
        sc = record["scores"]
        print(f"{record['env']['id']}: return {sc['mean']:.4f}, success {sc['success_rate']:.3f}"
              f" over {args.episodes} episodes")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(0)
