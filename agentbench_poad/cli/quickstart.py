"""``agentbench-poad quickstart``: the whole benchmark in miniature, offline, on CPU.

On embedded defaults it

1. writes a tiny random-init causal LM (``agentbench_poad.rl.models.init_tiny_model``);
2. trains POAD, NTPO and TWOSOME briefly on an Overcooked task;
3. evaluates them, plus the oracle and random rows, under the leaderboard protocol;
4. scores the oracle and random agents on a bundled DataSciCoding dataset (sandbox ``auto``);
5. builds the report (Markdown + self-contained HTML) and prints where it is.

Everything goes under ``--out`` (default ``./agentbench-runs/quickstart``); records are kept in
``<out>/records`` so the packaged board is never touched. Re-running continues: finished training
runs and records are reused. The tiny model learns little in a few steps -- the point is to see
every part of the pipeline run end to end, not to reproduce the paper.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentbench_poad.cli._common import add_command, die

DEFAULT_ENV = "Overcooked-TomatoSalad-v0"
DEFAULT_DATASET_ENV = "DataSciCoding-iris-v0"
DEFAULT_AGENTS = ("poad", "ntpo", "twosome")


@dataclass
class QuickstartPlan:
    """What a quickstart run does; ``--tiny`` shrinks every number to a smoke test."""

    env_id: str = DEFAULT_ENV
    dataset_env_id: str = DEFAULT_DATASET_ENV
    agents: tuple[str, ...] = DEFAULT_AGENTS
    total_steps: int = 64
    eval_episodes: int = 5
    anchor_seeds: tuple[int, ...] = (0, 1, 2)
    anchor_episodes: int = 20
    dataset_episodes: int = 2
    #: trainer overrides: small rollouts so a few dozen steps make several PPO updates
    overrides: dict[str, Any] = field(default_factory=lambda: {
        "num_envs": 2, "rollout_length": 8, "eval_episodes": 2, "eval_every": 2,
        "critic_hidden_sizes": [64, 32],
    })
    #: gym.make arguments for training and evaluation. Episodes are capped at 20 decisions (the
    #: oracle needs 6, a random agent ~70) so that every greedy evaluation of the untrained tiny
    #: model fits the time budget; the records keep this in ``config.env_kwargs``.
    env_kwargs: dict[str, Any] = field(default_factory=lambda: {"max_episode_steps": 20})

    @classmethod
    def tiny(cls) -> QuickstartPlan:
        return cls(total_steps=2, eval_episodes=1, anchor_seeds=(0, 1), anchor_episodes=2,
                   dataset_episodes=1,
                   overrides={"num_envs": 1, "rollout_length": 2, "eval_episodes": 1,
                              "eval_every": 1, "epochs": 1, "num_minibatches": 1,
                             "critic_hidden_sizes": [16]},
                   env_kwargs={"max_episode_steps": 3})


def add_parser(subparsers) -> None:
    p = add_command(
        subparsers, "quickstart",
        "train POAD/NTPO/TWOSOME briefly, score them with oracle and random rows, build the report",
        "The whole benchmark in miniature, offline on CPU: a tiny local model, POAD, NTPO and\n"
        "TWOSOME trained briefly on an Overcooked task, oracle and random rows, DataSciCoding on a\n"
        "bundled dataset, and the report. Prints where the report is.",
    )
    p.add_argument("--out", default="agentbench-runs/quickstart", help="output folder")
    p.add_argument("--steps", type=int, help="training env steps per agent [64; --tiny: 2]")
    p.add_argument("--episodes", type=int, help="evaluation episodes per trained agent [5; --tiny: 1]")
    p.add_argument("--tiny", action="store_true",
                   help="smoke-test sizes (a couple of steps, 1 episode, 3-step episodes)")
    p.add_argument("--env", default=DEFAULT_ENV, help="Overcooked (or any restricted) env id")
    p.add_argument("--dataset-env", default=DEFAULT_DATASET_ENV,
                   help="DataSciCoding id (bundled datasets work offline); 'none' skips it")
    p.add_argument("--agents", nargs="+", default=list(DEFAULT_AGENTS),
                   help="reference agents to train")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run_quickstart)


def _stage(bar, text: str) -> None:
    bar.set_description(text)
    bar.refresh()


def run_quickstart(args: argparse.Namespace) -> int:
    import gymnasium as gym
    from tqdm.auto import tqdm

    plan = QuickstartPlan.tiny() if args.tiny else QuickstartPlan()
    plan.env_id, plan.agents = args.env, tuple(args.agents)
    plan.dataset_env_id = "" if args.dataset_env.lower() == "none" else args.dataset_env
    if args.steps is not None:
        plan.total_steps = args.steps
    if args.episodes is not None:
        plan.eval_episodes = args.episodes
    for env_id in filter(None, (plan.env_id, plan.dataset_env_id)):
        if env_id not in gym.registry:
            return die(f"unknown environment id {env_id!r}; see `agentbench-poad envs`")
    try:
        from agentbench_poad.baselines import get_algorithm
        from agentbench_poad.rl.models import init_tiny_model
        from agentbench_poad.rl.trainer import train
    except ImportError as exc:
        return die(f"quickstart needs the training stack ({exc}); "
                   'pip install "agentbench-poad[train]"')
    try:
        algorithms = {agent: get_algorithm(agent) for agent in plan.agents}
    except KeyError as exc:
        return die(str(exc.args[0]))
    out = Path(args.out).resolve()
    store = out / "records"
    progress = not args.no_progress
    started = time.perf_counter()
    stages = 2 + 2 * len(plan.agents) + 2 + (2 if plan.dataset_env_id else 0)
    bar = tqdm(total=stages, desc="quickstart", unit="stage", disable=not progress,
               position=0, leave=True)
    try:
        _stage(bar, "tiny model")
        model_dir = out / "model"
        if not (model_dir / "config.json").exists():
            init_tiny_model(model_dir, seed=0)
        bar.update(1)
        runs = {}
        for agent in plan.agents:
            _stage(bar, f"train {agent}")
            run_dir = out / "runs" / agent
            resume = (run_dir / "checkpoints").exists()
            runs[agent] = train(algorithms[agent], env_id=plan.env_id, model=str(model_dir),
                                total_steps=plan.total_steps, seed=0, out=run_dir,
                                resume=resume, overrides=dict(plan.overrides),
                                env_kwargs=dict(plan.env_kwargs), progress=False)
            bar.update(1)
        for agent, run_dir in runs.items():
            _stage(bar, f"evaluate {agent}")
            _record_trained(run_dir, agent, plan, store, progress)
            bar.update(1)
        for name, factory in (("oracle", "agentbench_poad.baselines.oracle:make_oracle"),
                              ("random", "agentbench_poad.baselines.random:RandomAgent")):
            _stage(bar, f"evaluate {name}")
            _record_anchor(factory, plan.env_id, plan.anchor_seeds, plan.anchor_episodes,
                           plan.env_kwargs, store, progress)
            bar.update(1)
        if plan.dataset_env_id:
            for name, factory in (("oracle", "agentbench_poad.baselines.oracle:make_oracle"),
                                  ("random", "agentbench_poad.baselines.random:RandomAgent")):
                _stage(bar, f"DataSciCoding {name}")
                _record_anchor(factory, plan.dataset_env_id, (0,), plan.dataset_episodes,
                               {"sandbox": "auto"}, store, progress)
                bar.update(1)
        _stage(bar, "report")
        from agentbench_poad.leaderboard.records import load_records
        from agentbench_poad.leaderboard.report import build_report

        md, page = build_report(load_records(store), out / "report",
                                title="agentbench-poad quickstart")
        bar.update(1)
    finally:
        bar.close()
    minutes = (time.perf_counter() - started) / 60
    print(f"quickstart finished in {minutes:.1f} min")
    print(f"records: {store}")
    print(f"report:  {page}")
    print(f"         {md}")
    return 0


def _record_trained(run_dir: Path, agent: str, plan: QuickstartPlan, store: Path,
                    progress: bool) -> None:
    from agentbench_poad.leaderboard.from_run import read_run_config, record_from_runs
    from agentbench_poad.leaderboard.records import (
        RecordError,
        add_record,
        make_record_id,
        read_record,
    )

    config = read_run_config(run_dir)
    existing = store / f"{make_record_id(plan.env_id, agent, str(config.get('model')))}.json"
    if existing.exists():
        try:
            if read_record(existing)["training"]["total_steps"] == config.get("total_steps"):
                return  # already evaluated at this training length
        except (RecordError, TypeError, KeyError):
            pass  # unreadable: evaluate again
    record = record_from_runs([run_dir], episodes=plan.eval_episodes, greedy=True,
                              agent_name=agent, env_kwargs=dict(plan.env_kwargs),
                              config={"quickstart": True},
                              command="agentbench-poad quickstart", progress=progress,
                              out_dir=store.parent / "eval")
    add_record(record, store, replace=True)


def _record_anchor(factory: str, env_id: str, seeds, episodes: int, env_kwargs: dict,
                   store: Path, progress: bool) -> None:
    from agentbench_poad.leaderboard.protocol import Provenance, evaluate
    from agentbench_poad.leaderboard.records import add_record, make_record_id

    name = "oracle" if "oracle" in factory else "random"
    if (store / f"{make_record_id(env_id, name)}.json").exists():
        return
    (record,) = evaluate(factory, [env_id], seeds=list(seeds), episodes=episodes,
                         env_kwargs=dict(env_kwargs), progress=progress,
                         provenance=Provenance(agent_name=name, config={"quickstart": True},
                                               command="agentbench-poad quickstart"),
                         out_dir=store.parent / "eval")
    add_record(record, store, replace=True)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(0)
