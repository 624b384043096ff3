"""``agentbench-poad evaluate``: score an agent with greedy episodes.

One function per way of naming the agent (``evaluate_run`` for a training run directory); a new
mode adds its option to the mutually exclusive group and its own function.

* ``--run DIR`` -- :func:`evaluate_run` (RL-learning engineer).
* ``--agent module:Factory`` -- :func:`evaluate_agent_spec` (leaderboard): any user agent under
  the leaderboard protocol, written as a run record (``--out``; ``--add`` also puts it on the
  board). Options of this mode are added by :func:`_add_agent_mode_options`.
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
        "--run DIR: the policy of a training run (its newest checkpoint) on the run's env.\n"
        "--agent MODULE:FACTORY: your agent under the leaderboard protocol, written as a run\n"
        "record (options below; docs/leaderboard.md says how to submit it).",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", help="a run directory written by `agentbench-poad train`")
    source.add_argument("--agent", metavar="MODULE:FACTORY",
                        help="your agent: a class or factory, 'package.module:Name' or "
                             "'path/to/file.py:Name' (leaderboard protocol, writes a run record)")
    p.add_argument("--env", dest="env_id", help="environment id (default: the run's)")
    p.add_argument("--episodes", type=int, default=10, help="episodes")
    p.add_argument("--seed", type=int, default=0, help="seed of the episodes' resets")
    p.add_argument("--device", help="torch device (default: the run's)")
    _add_agent_mode_options(p)
    p.set_defaults(func=run_evaluate)


def run_evaluate(args: argparse.Namespace) -> int:
    if args.run:
        return evaluate_run(args)
    if args.agent:
        return evaluate_agent_spec(args)
    return die("name the agent to evaluate (--run DIR or --agent MODULE:FACTORY)")


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


# -- --agent mode (leaderboard) ------------------------------------------------------------------
def _add_agent_mode_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "--agent mode (leaderboard protocol)",
        "The factory is called with env= and/or seed= when its signature takes them, plus "
        "--agent-kwargs. Each act() runs in a thread with a --timeout deadline; agents that "
        "raise, return a non-string or hang become failed episodes. Re-running the same command "
        "resumes an interrupted evaluation from the partial file in --out.",
    )
    g.add_argument("--seeds", nargs="+", type=int,
                   help="evaluation seeds, one per-seed score each (default: --seed)")
    g.add_argument("--agent-kwargs", default="{}", metavar="JSON",
                   help="keyword arguments for the factory, as a JSON object")
    g.add_argument("--env-kwargs", default="{}", metavar="JSON",
                   help="keyword arguments for gym.make, as a JSON object")
    g.add_argument("--name", help="the agent's name on the board (default: its name attribute)")
    g.add_argument("--base-model", help="base model of an LLM agent (provenance)")
    g.add_argument("--adapter", help="adapter of an LLM agent (provenance)")
    g.add_argument("--timeout", type=float, default=60.0,
                   help="per-action deadline in seconds (0: none)")
    g.add_argument("--out", default="agentbench-runs/eval",
                   help="the record file (NAME.json) or a folder for <record_id>.json; the "
                        "resumable partial file goes next to it")
    g.add_argument("--add", action="store_true", help="also add the record to the board")
    g.add_argument("--store", help="with --add: records folder (default: the package's)")
    g.add_argument("--replace", action="store_true", help="with --add: replace a same-id record")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    x = p.add_argument_group(
        "executors (--agent mode)",
        "With --executor each (env, seed) is one cell: 'local' runs the cells here one after "
        "another, 'ray' runs each as a Ray task (pip install \"agentbench-poad[ray]\"; "
        "docs/scale-out.md). Records equal the in-process protocol's; finished cells are kept "
        "under <out>/.cells/ so a re-run resumes, and a cell that fails is retried "
        "(--max-retries) without losing the others.",
    )
    x.add_argument("--executor", choices=("local", "ray"),
                   help="run the seeds as cells on this executor (default: in-process protocol "
                        "with per-episode resume)")
    x.add_argument("--address", help="with --executor ray: an existing cluster's address "
                                     "(default: start a local Ray cluster)")
    x.add_argument("--max-retries", type=int, default=2,
                   help="re-runs of a cell that raised before it is reported as failed")


def _json_object(text: str, flag: str) -> dict:
    import json

    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{flag} is not valid JSON ({exc.msg}): {text!r}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{flag} must be a JSON object, got {text!r}")
    return value


def _seeds(args: argparse.Namespace) -> list[int]:
    return list(args.seeds) if args.seeds else [args.seed]


def canonical_command(args: argparse.Namespace) -> str:
    """The command that reproduces an ``--agent`` evaluation, rebuilt from the parsed options.

    Rebuilt rather than read from ``sys.argv`` so that in-process calls (``main([...])``)
    record the real command too.
    """
    import shlex

    parts = ["agentbench-poad", "evaluate", "--agent", args.agent, "--env", args.env_id,
             "--seeds", *map(str, _seeds(args)), "--episodes", str(args.episodes)]
    for flag, value, default in (("--agent-kwargs", args.agent_kwargs, "{}"),
                                 ("--env-kwargs", args.env_kwargs, "{}"),
                                 ("--name", args.name, None),
                                 ("--base-model", args.base_model, None),
                                 ("--adapter", args.adapter, None),
                                 ("--timeout", args.timeout, 60.0)):
        if value != default:
            parts += [flag, str(value)]
    return " ".join(shlex.quote(part) for part in parts)


def evaluate_agent_spec(args: argparse.Namespace) -> int:
    """A user's agent (``--agent module:Factory``) under the leaderboard protocol."""
    import gymnasium as gym

    from agentbench_poad.leaderboard.protocol import evaluate, load_factory, output_path

    if not args.env_id:
        return die("--env is required with --agent (see `agentbench-poad envs` for the ids)")
    try:
        agent_kwargs = _json_object(args.agent_kwargs, "--agent-kwargs")
        env_kwargs = _json_object(args.env_kwargs, "--env-kwargs")
        load_factory(args.agent)  # fail fast, before any env is made
    except ValueError as exc:
        return die(str(exc))
    if args.env_id not in gym.registry:
        return die(f"unknown environment id {args.env_id!r}; see `agentbench-poad envs`")
    if args.executor:
        return _evaluate_on_executor(args, agent_kwargs, env_kwargs)
    if args.address:
        return die("--address names a Ray cluster; add --executor ray")
    (record,) = evaluate(
        args.agent, [args.env_id], seeds=_seeds(args), episodes=args.episodes,
        agent_kwargs=agent_kwargs, env_kwargs=env_kwargs, agent_name=args.name,
        action_timeout=args.timeout or None, out_dir=args.out, base_model=args.base_model,
        adapter=args.adapter, command=canonical_command(args), progress=not args.no_progress,
    )
    _print_record(record, args.episodes)
    print(f"record: {output_path(args.out, record['record_id'])}")
    return _add(args, record)


def _print_record(record: dict, episodes: int) -> None:
    sc = record["scores"]
    failed = sum(s["failed_episodes"] for s in sc["per_seed"])
    print(f"{record['env']['id']}: {record['agent']['name']} score {sc['mean']:.4f} ± "
          f"{sc['stderr']:.4f}, success {sc['success_rate']:.3f} ({len(sc['per_seed'])} seeds × "
          f"{episodes} episodes, {failed} failed)")


def _add(args: argparse.Namespace, record: dict) -> int:
    from agentbench_poad.leaderboard.records import RecordError, add_record

    if args.add:
        try:
            path = add_record(record, args.store, replace=args.replace)
        except RecordError as exc:
            return die(str(exc))
        print(f"added to the board: {path}")
    return 0


def _evaluate_on_executor(args: argparse.Namespace, agent_kwargs: dict, env_kwargs: dict) -> int:
    """``--executor local|ray``: one cell per seed (agentbench_poad.leaderboard.sweep)."""
    import sys

    from agentbench_poad.errors import DependencyNotInstalled
    from agentbench_poad.executors import get_executor
    from agentbench_poad.leaderboard.sweep import evaluate_grid

    def report_failure(cell, attempt: int, error: str) -> None:
        print(f"cell {cell.env_id} seed {cell.seed} failed (attempt {attempt}): "
              f"{error.splitlines()[0]}", file=sys.stderr)

    try:
        executor = get_executor(args.executor, address=args.address,
                                max_retries=args.max_retries)
    except (DependencyNotInstalled, ValueError, ConnectionError) as exc:
        return die(str(exc))
    with executor:
        result = evaluate_grid(
            args.agent, [args.env_id], seeds=_seeds(args), episodes=args.episodes,
            executor=executor, out_dir=args.out, agent_kwargs=agent_kwargs,
            env_kwargs=env_kwargs, agent_name=args.name, action_timeout=args.timeout or None,
            base_model=args.base_model, adapter=args.adapter, command=canonical_command(args),
            on_failure=report_failure,
        )
    for outcome in result.failed:
        print(f"FAILED cell {outcome.cell.env_id} seed {outcome.cell.seed} after "
              f"{outcome.attempts} attempts: {outcome.error.splitlines()[0]}", file=sys.stderr)
    if not result.records:
        return die("no record written: a cell failed on every attempt (see above); re-run the "
                   "same command to retry the failed cells (finished cells are kept)")
    (record,) = result.records
    _print_record(record, args.episodes)
    print(f"record: {result.paths[0]} ({result.reused} cells reused)")
    return _add(args, record)
