"""``agentbench-poad evaluate``: score an agent with greedy episodes.

One function per way of naming the agent (``evaluate_run`` for a training run directory); a new
mode adds its option to the mutually exclusive group and its own function.

* ``--run DIR`` -- :func:`evaluate_run` (RL-learning engineer).
* ``--agent module:Factory`` -- :func:`evaluate_agent_spec` (leaderboard): any user agent under
  the leaderboard protocol, written as a run record (``--out``; ``--add`` also puts it on the
  board). Options of this mode are added by :func:`_add_agent_mode_options`. ``--agent
  lm:MODEL`` is the untrained model as an agent (``agentbench_poad.baselines.base_model``).
"""

from __future__ import annotations

import argparse

from agentbench_poad.cli._common import (
    add_command,
    check_at_least,
    check_env_id,
    check_model,
    check_run_device,
    check_run_dir,
    die,
    first_error,
)


def add_parser(subparsers) -> None:
    p = add_command(
        subparsers,
        "evaluate",
        "evaluate an agent (e.g. a trained run) on an environment",
        "Run greedy episodes of an agent and print its mean return and success rate.\n"
        "--run DIR: the policy of a training run (its newest checkpoint) on the run's env,\n"
        "played exactly like a point of the run's learning curve (same runner, same seeds).\n"
        "--agent MODULE:FACTORY: your agent under the leaderboard protocol, written as a run\n"
        "record (options below; docs/leaderboard.md says how to submit it).\n"
        "--agent lm:MODEL: the untrained model as an agent (the board's base-model row), e.g.\n"
        "  agentbench-poad evaluate --agent lm:smollm2-135m --env Overcooked-TomatoSalad-v0 \\\n"
        "      --seeds 0 1 2 --episodes 10\n"
        "MODEL is a named model (fetched on first use; `agentbench-poad model list`), a .gguf\n"
        "file, a model directory or a hub id. It samples like the paper's evaluation;\n"
        "--agent-kwargs '{\"greedy\": true}' takes the most likely action instead.",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", help="a run directory written by `agentbench-poad train`")
    source.add_argument(
        "--agent",
        metavar="MODULE:FACTORY",
        help="your agent: a class or factory, 'package.module:Name' or "
        "'path/to/file.py:Name'; or 'lm:MODEL', the untrained model "
        "(leaderboard protocol, writes a run record)",
    )
    p.add_argument("--env", dest="env_id", help="environment id (default: the run's)")
    p.add_argument("--episodes", type=int, default=10, help="episodes")
    p.add_argument("--seed", type=int, default=0, help="seed of the episodes' resets")
    p.add_argument("--device", help="torch device (default: the run's)")
    _add_agent_mode_options(p)
    p.set_defaults(func=run_evaluate)


#: Where ``--agent`` writes its record when ``--out`` is not given.
DEFAULT_OUT = "agentbench-runs/eval"
#: ``--agent``-mode options that ``--run`` has no use for: (dest, flag, default).
_AGENT_ONLY = (
    ("out", "--out", None),
    ("add", "--add", False),
    ("store", "--store", None),
    ("replace", "--replace", False),
    ("seeds", "--seeds", None),
    ("agent_kwargs", "--agent-kwargs", "{}"),
    ("env_kwargs", "--env-kwargs", "{}"),
    ("name", "--name", None),
    ("base_model", "--base-model", None),
    ("adapter", "--adapter", None),
    ("batch_size", "--batch-size", None),
    ("executor", "--executor", None),
    ("address", "--address", None),
)


def _run_mode_problem(args: argparse.Namespace) -> str | None:
    """``--run`` with an ``--agent``-mode option it would ignore: an error naming the option
    (never a silent no-op: ``--run DIR --out X`` writes nothing to X)."""
    if not args.run:
        return None
    given = [flag for dest, flag, default in _AGENT_ONLY if getattr(args, dest) != default]
    if not given:
        return None
    return (
        f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to --agent only; "
        "--run prints the run's greedy score and writes no file. To write a run record of a "
        "trained run (and put it on the board), use `agentbench-poad leaderboard add --run "
        f"{args.run} --store DIR` (see `agentbench-poad leaderboard add --help`)"
    )


def run_evaluate(args: argparse.Namespace) -> int:
    error = first_error(
        _run_mode_problem(args),
        check_run_dir(args.run),
        check_env_id(args.env_id),
        check_at_least(args.episodes, 1, "--episodes"),
        check_at_least(args.seed, 0, "--seed"),
        *(check_at_least(seed, 0, "--seeds") for seed in args.seeds or ()),
        check_at_least(args.timeout, 0, "--timeout"),
        check_at_least(args.batch_size, 1, "--batch-size"),
        check_at_least(args.max_retries, 0, "--max-retries"),
        check_run_device(args.run, args.device),
        check_model(args.agent[3:], "--agent lm:")
        if (args.agent or "").startswith("lm:")
        else None,
    )
    if error:
        return die(error)
    if args.run:
        return evaluate_run(args)
    if args.agent:
        return evaluate_agent_spec(args)
    return die("name the agent to evaluate (--run DIR or --agent MODULE:FACTORY)")


def _report(name: str, result) -> None:  # noqa: ANN001 - a CellResult
    print(f"agent: {name}")
    print(f"env: {result.env_id}")
    print(f"episodes: {len(result.episodes)} (seed {result.seed})")
    print(f"mean return: {result.mean_return:.4f}")
    if result.metric != "return":
        print(f"mean score ({result.metric}): {result.score:.4f}")
    print(f"success rate: {result.success_rate:.3f}")
    if result.failed_episodes:
        print(f"failed episodes: {result.failed_episodes}")


def evaluate_run(args: argparse.Namespace) -> int:
    """The greedy policy of a training run's newest checkpoint (the runner of the curves)."""
    from agentbench_poad.evaluation import EvaluationRequest, evaluate_cell
    from agentbench_poad.models import ModelNotAvailable
    from agentbench_poad.models.reference import model_problem
    from agentbench_poad.rl.run_dir import load_run_config
    from agentbench_poad.rl.trainer import load_agent

    try:
        spec = load_run_config(args.run)
    except (FileNotFoundError, ValueError) as exc:
        return die(str(exc))
    # before the loader asks the hub (and retries for a minute) for a model that is not here
    if problem := model_problem(
        str(spec.get("model")), where=f"the run's model (--run {args.run})"
    ):
        return die(problem)
    try:
        agent = load_agent(args.run, greedy=True, device=args.device)
    except (FileNotFoundError, ValueError, ModelNotAvailable) as exc:
        return die(str(exc))
    env_id = args.env_id or spec["env_id"]
    env_kwargs = spec.get("env_kwargs", {}) if env_id == spec["env_id"] else {}
    result = evaluate_cell(
        EvaluationRequest(
            agent=agent,
            env_id=env_id,
            seed=args.seed,
            episodes=args.episodes,
            env_kwargs=env_kwargs,
            action_timeout=None,  # in-process, as the trainer's curve
        )
    )
    _report(f"{spec['agent']} ({args.run})", result)
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
    g.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        help="evaluation seeds, one per-seed score each (default: --seed)",
    )
    g.add_argument(
        "--agent-kwargs",
        default="{}",
        metavar="JSON",
        help="keyword arguments for the factory, as a JSON object",
    )
    g.add_argument(
        "--env-kwargs",
        default="{}",
        metavar="JSON",
        help="keyword arguments for gym.make, as a JSON object",
    )
    g.add_argument("--name", help="the agent's name on the board (default: its name attribute)")
    g.add_argument("--base-model", help="base model of an LLM agent (provenance)")
    g.add_argument(
        "--adapter",
        help="adapter of an LLM agent (provenance); with --agent lm:MODEL a peft LoRA folder "
        "that is loaded onto MODEL, its agentbench_trainer.json (if any) going into the record",
    )
    g.add_argument(
        "--timeout", type=float, default=60.0, help="per-action deadline in seconds (0: none)"
    )
    g.add_argument(
        "--batch-size",
        type=int,
        help="episodes an agent with act_batch plays in lockstep (default: all of a seed's)",
    )
    g.add_argument(
        "--out",
        help="the record file (NAME.json) or a folder for <record_id>.json (default: "
        f"{DEFAULT_OUT}); the resumable partial file goes next to it. Not with --run: a "
        "trained run's record is made by `agentbench-poad leaderboard add --run DIR`",
    )
    g.add_argument("--add", action="store_true", help="also add the record to the board")
    g.add_argument("--store", help="with --add: records folder (default: the package's)")
    g.add_argument("--replace", action="store_true", help="with --add: replace a same-id record")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    x = p.add_argument_group(
        "executors (--agent mode)",
        "With --executor each (env, seed) is one cell: 'local' plays the cells here one after "
        "another, 'ray' plays each as a Ray task (pip install \"agentbench-poad[ray]\"; "
        "docs/scale-out.md). Records equal the in-process protocol's; finished cells are kept "
        "under <out>/.cells/ so a re-run resumes, and a cell that fails is retried "
        "(--max-retries) without losing the others.",
    )
    x.add_argument(
        "--executor",
        choices=("local", "ray"),
        help="play the seeds as cells on this executor (default: in-process protocol "
        "with per-episode resume)",
    )
    x.add_argument(
        "--address",
        help="with --executor ray: an existing cluster's address "
        "(default: start a local Ray cluster)",
    )
    x.add_argument(
        "--max-retries",
        type=int,
        default=2,
        help="re-runs of a cell that raised before it is reported as failed",
    )


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

    parts = [
        "agentbench-poad",
        "evaluate",
        "--agent",
        args.agent,
        "--env",
        args.env_id,
        "--seeds",
        *map(str, _seeds(args)),
        "--episodes",
        str(args.episodes),
    ]
    for flag, value, default in (
        ("--agent-kwargs", args.agent_kwargs, "{}"),
        ("--env-kwargs", args.env_kwargs, "{}"),
        ("--name", args.name, None),
        ("--base-model", args.base_model, None),
        ("--adapter", args.adapter, None),
        ("--timeout", args.timeout, 60.0),
        ("--batch-size", args.batch_size, None),
    ):
        if value != default:
            parts += [flag, str(value)]
    return " ".join(shlex.quote(part) for part in parts)


#: The manifest an outside trainer writes next to its adapter (docs/integrations.md).
TRAINER_MANIFEST = "agentbench_trainer.json"


def _adapter_training(
    args: argparse.Namespace, agent_kwargs: dict
) -> tuple[dict | None, str | None]:
    """``--agent lm:MODEL --adapter DIR``: load the adapter onto the model (``adapter`` agent
    kwarg) and read the trainer's manifest, if any, into the record's ``training``.

    Returns ``(training, agent name)``; both None when there is no adapter or no manifest.
    Other agents keep ``--adapter`` as provenance only.
    """
    import json
    from pathlib import Path

    from agentbench_poad.baselines.base_model import SPEC_PREFIX

    if not args.adapter or not args.agent.startswith(SPEC_PREFIX):
        return None, None
    folder = Path(args.adapter)
    if not (folder / "adapter_config.json").is_file():
        raise ValueError(
            f"--adapter {args.adapter!r} is not a peft adapter folder (no adapter_config.json)"
        )
    agent_kwargs.setdefault("adapter", args.adapter)
    path = folder / TRAINER_MANIFEST
    if not path.is_file():
        return None, None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc.msg})") from exc
    missing = [k for k in ("trainer", "trainer_version", "config") if k not in manifest]
    if missing:
        raise ValueError(f"{path} does not state {', '.join(missing)} (docs/integrations.md)")
    training = {
        "env_id": manifest.get("env_id"),
        "runs": [args.adapter],
        # env steps, the budget every record states; the trainer's own steps apart
        "total_steps": _count(manifest, "env_steps", path),
        "trainer_steps": _count(manifest, "steps", path),
        "trainer": manifest["trainer"],
        "trainer_version": manifest["trainer_version"],
        "trainer_config": manifest["config"],
        "trainer_software": manifest.get("software", {}),
        "trainer_command": manifest.get("command"),
        "adapter_sha256": _adapter_digest(folder),
    }
    return training, manifest.get("agent_name")


def _count(manifest: dict, key: str, path) -> int | None:  # noqa: ANN001 - a Path
    """A manifest's non-negative integer count ``key``, or None where it does not state it."""
    value = manifest.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{path}: {key!r} must be a non-negative integer, got {value!r}")
    return value


def _adapter_digest(folder) -> str | None:  # noqa: ANN001 - a Path
    """sha256 of the adapter's weights file (which exact adapter the record scored)."""
    import hashlib

    for name in ("adapter_model.safetensors", "adapter_model.bin"):
        path = folder / name
        if path.is_file():
            digest = hashlib.sha256()
            with path.open("rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(chunk)
            return digest.hexdigest()
    return None


def evaluate_agent_spec(args: argparse.Namespace) -> int:
    """A user's agent (``--agent module:Factory``) under the leaderboard protocol."""
    import gymnasium as gym

    from agentbench_poad.agents import load_factory
    from agentbench_poad.leaderboard.protocol import (
        EvaluationPlan,
        Provenance,
        evaluate_plan,
        output_path,
    )

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
    try:
        training, trained_name = _adapter_training(args, agent_kwargs)
    except ValueError as exc:
        return die(str(exc))
    from agentbench_poad.errors import DependencyNotInstalled
    from agentbench_poad.models import ModelNotAvailable

    try:
        plan = EvaluationPlan(
            agent=args.agent,
            env_ids=(args.env_id,),
            seeds=tuple(_seeds(args)),
            episodes=args.episodes,
            agent_kwargs=agent_kwargs,
            env_kwargs=env_kwargs,
            action_timeout=args.timeout or None,
            batch_size=args.batch_size,
        )
    except ValueError as exc:
        return die(str(exc))
    provenance = Provenance(
        agent_name=args.name or trained_name,
        base_model=args.base_model,
        adapter=args.adapter,
        training=training,
        command=canonical_command(args),
    )
    out = args.out or DEFAULT_OUT
    if args.executor:
        return _evaluate_on_executor(args, plan, provenance)
    if args.address:
        return die("--address names a Ray cluster; add --executor ray")
    try:
        (record,) = evaluate_plan(plan, provenance, out_dir=out, progress=not args.no_progress)
    except (ModelNotAvailable, DependencyNotInstalled) as exc:  # e.g. lm:NAME offline
        return die(str(exc))
    failed = sum(s["failed_episodes"] for s in record["scores"]["per_seed"])
    return _summarise_and_add(
        args, record, output_path(out, record["record_id"]), f"{failed} failed"
    )


def _evaluate_on_executor(args: argparse.Namespace, plan, provenance) -> int:
    """``--executor local|ray``: one cell per seed (agentbench_poad.leaderboard.sweep)."""
    import sys

    from agentbench_poad.errors import DependencyNotInstalled
    from agentbench_poad.executors import get_executor
    from agentbench_poad.leaderboard.sweep import evaluate_grid

    def report_failure(cell, attempt: int, error: str) -> None:
        print(
            f"cell {cell.env_id} seed {cell.seed} failed (attempt {attempt}): "
            f"{error.splitlines()[0]}",
            file=sys.stderr,
        )

    try:
        executor = get_executor(args.executor, address=args.address, max_retries=args.max_retries)
    except (DependencyNotInstalled, ValueError, ConnectionError) as exc:
        return die(str(exc))
    with executor:
        result = evaluate_grid(
            plan,
            provenance,
            executor=executor,
            out_dir=args.out or DEFAULT_OUT,
            on_failure=report_failure,
        )
    for outcome in result.failed:
        print(
            f"FAILED cell {outcome.cell.env_id} seed {outcome.cell.seed} after "
            f"{outcome.attempts} attempts: {outcome.error.splitlines()[0]}",
            file=sys.stderr,
        )
    if not result.records:
        return die(
            "no record written: a cell failed on every attempt (see above); re-run the "
            "same command to retry the failed cells (finished cells are kept)"
        )
    (record,) = result.records
    return _summarise_and_add(args, record, result.paths[0], f"{result.reused} cells reused")


def _summarise_and_add(args: argparse.Namespace, record: dict, path: object, detail: str) -> int:
    """Print the record's headline and where it was written; with ``--add`` put it on the board."""
    from agentbench_poad.leaderboard.records import RecordError, add_record

    sc = record["scores"]
    print(
        f"{record['env']['id']}: {record['agent']['name']} score {sc['mean']:.4f} ± "
        f"{sc['stderr']:.4f}, success {sc['success_rate']:.3f} ({len(sc['per_seed'])} seeds × "
        f"{args.episodes} episodes, {detail})"
    )
    print(f"record: {path}")
    if args.add:
        try:
            added = add_record(record, args.store, replace=args.replace)
        except RecordError as exc:
            return die(str(exc))
        print(f"added to the board: {added}")
    return 0
