"""This tree's training updates against a landed commit's, interleaved in one run, per agent.

Run: ``python benchmarks/side_by_side.py [--landed 9b20f95] [--agents poad,twosome,grpo]
[--updates 6] [--threads 2] [--tiny]``.

Two worker processes train the same agent with the same seed, model and configuration: one
imports ``agentbench_poad`` from this tree, the other from a git worktree of ``--landed`` (made in
a temporary directory, or ``--landed-tree DIR``; the worker maps ``agentbench_poad`` and its
``environments``, ``baselines`` and ``leaderboard`` subpackages onto that tree, as the package's
``package-dir`` does). The driver lets one worker at a time run one update (A B, then B A, ...),
so both meet the same machine load; the first segment is the model load, the setup and the first
update, each later one a whole update (rollout, update, the learning-curve evaluation when due,
log and checkpoint) as the trainer runs it.

The training is the README main command's (``quickstart``): the CPU preset on Overcooked Tomato
Salad, episodes capped at 30 decisions, a learning-curve point of 4 sampled episodes every 6
updates, checkpoints every update. Printed per agent: the landed time over this tree's, for the
first segment and for the warm updates (median of the interleaved pairs, and the ratio of the
sums), whether both trees logged the same first-update metrics (to 1e-3 relative: float rounding
may differ where this tree computes the same numbers another way), and an estimate of the
quickstart's training time (the first segment plus 23 warm updates at the measured mean).

Absolute seconds move with the machine's load (other runs share its cores); the interleaved
ratio is the number to read.

``--tiny``: a tiny random model at a smoke-test size, both workers on this tree unless
``--landed``/``--landed-tree`` is given (the smoke test in ``tests/test_rl_speed.py``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _bench_model import (
    QUICKSTART_MAX_EPISODE_STEPS,
    QUICKSTART_OVERRIDES,
    TINY_MAX_EPISODE_STEPS,
    TINY_OVERRIDES,
    resolve_model,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: The commit issue 62 starts from.
DEFAULT_LANDED = "9b20f95"
#: The quickstart's trainer settings (agentbench_poad/cli/quickstart.py).
QUICKSTART = {
    "overrides": QUICKSTART_OVERRIDES,
    "env_kwargs": {"max_episode_steps": QUICKSTART_MAX_EPISODE_STEPS},
    "total_steps": 3072,
    "updates": 24,
}
TINY = {
    "overrides": TINY_OVERRIDES,
    "env_kwargs": {"max_episode_steps": TINY_MAX_EPISODE_STEPS},
    "total_steps": 400,
}
METRICS = ("env_steps", "policy_loss", "value_loss", "approx_kl", "entropy", "reward_mean")


# -- the worker: one tree, one agent, one update per "go" ----------------------------------------
def _map_tree(tree: Path) -> None:
    """Import ``agentbench_poad`` (and its mapped subpackages) from ``tree``, ahead of any
    installed or editable copy."""
    import importlib.abc
    import importlib.util

    mapping = {
        "agentbench_poad": tree / "agentbench_poad",
        "agentbench_poad.environments": tree / "environments",
        "agentbench_poad.baselines": tree / "baselines",
        "agentbench_poad.leaderboard": tree / "leaderboard",
    }

    class TreeFinder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001, ANN201
            if fullname in mapping:
                init = mapping[fullname] / "__init__.py"
                return importlib.util.spec_from_file_location(
                    fullname, init, submodule_search_locations=[str(mapping[fullname])]
                )
            return None

    sys.meta_path.insert(0, TreeFinder())


def _send(message: dict[str, Any]) -> None:
    print("@@" + json.dumps(message), flush=True)


def worker(args: argparse.Namespace) -> int:
    if args.tree:
        _map_tree(Path(args.tree))
    import torch

    torch.set_num_threads(args.threads)
    settings = json.loads(args.settings)
    import agentbench_poad
    from agentbench_poad.baselines import get_algorithm
    from agentbench_poad.rl import trainer

    loop = trainer.train.__globals__
    name = "rollout" if "rollout" in loop else "_rollout"  # the landed tree's name
    original_rollout = loop[name]
    metrics: list[dict[str, Any]] = []
    state = {"start": 0.0, "segment": 0}

    def wait() -> None:
        command = sys.stdin.readline().strip()
        if command != "go":
            raise SystemExit(0)
        state["start"] = time.perf_counter()

    def rollout(*a: Any, **k: Any) -> Any:
        if state["segment"]:
            seconds = time.perf_counter() - state["start"]
            _send({"segment": state["segment"], "seconds": seconds, "metrics": metrics[-1:]})
            wait()
        state["segment"] += 1
        return original_rollout(*a, **k)

    for stage in ("_log", "_commit_update"):  # each update's metrics, whichever the tree has
        if stage in loop:
            original_stage = loop[stage]

            def logged(session: Any, row: dict[str, Any], *a: Any, _o: Any = original_stage) -> Any:
                metrics.append({k: row.get(k) for k in METRICS})
                return _o(session, row, *a)

            loop[stage] = logged
    loop[name] = rollout
    _send({"ready": str(Path(agentbench_poad.__file__).parent)})
    wait()
    with tempfile.TemporaryDirectory() as out:
        algorithm = get_algorithm(args.agent)
        overrides = dict(settings["overrides"])
        if args.agent in ("grpo", "gigpo") and "num_envs" in overrides:
            overrides["group_size"] = 2
        trainer.train(
            algorithm,
            args.env,
            args.model,
            total_steps=settings["total_steps"],
            seed=0,
            out=Path(out) / "run",
            preset="mini",
            overrides=overrides,
            env_kwargs=settings["env_kwargs"],
            progress=False,
        )
    return 0


# -- the driver ---------------------------------------------------------------------------------
class Side:
    """One worker process (this tree, or the landed one)."""

    def __init__(self, label: str, tree: str | None, agent: str, model: str, args: Any) -> None:
        self.label = label
        settings = TINY if args.tiny else QUICKSTART
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            "--agent",
            agent,
            "--model",
            model,
            "--env",
            args.env,
            "--threads",
            str(args.threads),
            "--settings",
            json.dumps(settings),
        ]
        if tree:
            command += ["--tree", tree]
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TQDM_DISABLE": "1"}
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tempfile.gettempdir(),
        )
        self.seconds: list[float] = []
        self.metrics: list[dict[str, Any]] = []
        self.package = self._read()["ready"]

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("@@"):
                return json.loads(line[2:])
        raise RuntimeError(f"the {self.label} worker stopped (exit {self.process.wait()})")

    def step(self) -> float:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        message = self._read()
        self.seconds.append(message["seconds"])
        self.metrics += message["metrics"]
        return message["seconds"]

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.write("stop\n")
            self.process.stdin.close()
            self.process.wait(timeout=600)


def _same_metrics(a: dict[str, Any], b: dict[str, Any]) -> bool:
    for key in METRICS:
        x, y = a.get(key), b.get(key)
        if x is None or y is None:
            if x is not y:
                return False
        elif not math.isclose(x, y, rel_tol=1e-3, abs_tol=1e-5):
            return False
    return True


def compare(agent: str, model: str, trees: dict[str, str | None], args: Any) -> dict[str, Any]:
    sides = [Side(label, tree, agent, model, args) for label, tree in trees.items()]
    try:
        for round_ in range(args.updates):
            for side in sides if round_ % 2 == 0 else sides[::-1]:
                side.step()
    finally:
        for side in sides:
            side.close()
    new, landed = sides
    warm = list(zip(landed.seconds[1:], new.seconds[1:]))
    ratios = [a / b for a, b in warm]
    warm_new = statistics.fmean(new.seconds[1:])
    result = {
        "agent": agent,
        "first_ratio": landed.seconds[0] / new.seconds[0],
        "warm_ratio": statistics.median(ratios),
        "warm_sum_ratio": sum(a for a, _ in warm) / sum(b for _, b in warm),
        "new_s": new.seconds,
        "landed_s": landed.seconds,
        "same_first_metrics": _same_metrics(new.metrics[0], landed.metrics[0]),
        "quickstart_estimate_s": {
            side.label: side.seconds[0]
            + (QUICKSTART["updates"] - 1) * statistics.fmean(side.seconds[1:])
            for side in sides
        },
    }
    print(
        f"\n{agent}: this tree {new.package}; landed {landed.package}\n"
        f"  seconds per segment (first = model load + setup + update 1):\n"
        f"    this tree: {' '.join(f'{s:.1f}' for s in new.seconds)}\n"
        f"    landed:    {' '.join(f'{s:.1f}' for s in landed.seconds)}\n"
        f"  first segment: ratio {result['first_ratio']:.2f}; warm update: this tree mean "
        f"{warm_new:.1f} s\n"
        f"  same first-update metrics: {result['same_first_metrics']} "
        f"(this tree {new.metrics[0]}; landed {landed.metrics[0]})\n"
        f"  quickstart training estimate (first + 23 warm): this tree "
        f"{result['quickstart_estimate_s']['this tree'] / 60:.1f} min, landed "
        f"{result['quickstart_estimate_s']['landed'] / 60:.1f} min\n"
        f"  ratio: {result['warm_ratio']:.2f} landed / this tree per warm update (median of "
        f"{len(ratios)} interleaved pairs; ratio of sums {result['warm_sum_ratio']:.2f}; "
        "goal >= 2 for poad)"
    )
    return result


def _worktree(rev: str) -> tuple[str, Any]:
    """A detached git worktree of ``rev`` in a temporary directory, and its remover."""
    directory = tempfile.mkdtemp(prefix="landed-")
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", directory, rev],
        check=True,
        capture_output=True,
    )

    def remove() -> None:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", directory],
            capture_output=True,
        )

    return directory, remove


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landed", default=None, help=f"commit to compare with [{DEFAULT_LANDED}]")
    parser.add_argument("--landed-tree", default=None, help="an existing checkout of it instead")
    parser.add_argument("--agents", default="poad,twosome,grpo")
    parser.add_argument("--env", default="Overcooked-TomatoSalad-v0")
    parser.add_argument("--model", default=None, help="model (default: see _bench_model.py)")
    parser.add_argument("--updates", type=int, default=6, help="segments per side and agent")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per worker")
    parser.add_argument("--tiny", action="store_true", help="tiny random model, smoke size")
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tree", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--agent", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--settings", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.updates < 2:
        parser.error("--updates must be >= 2 (the first segment, then warm updates)")

    tiny = tempfile.TemporaryDirectory()
    if args.tiny and not args.model:
        from agentbench_poad.models import init_tiny_model

        model = str(init_tiny_model(Path(tiny.name) / "tiny", seed=0, num_layers=4))
        described = "tiny random model (--tiny)"
    else:
        model, described = resolve_model(args.model, tiny)
    remove = None
    landed_tree: str | None = args.landed_tree
    if landed_tree is None and (args.landed or not args.tiny):
        landed_tree, remove = _worktree(args.landed or DEFAULT_LANDED)
    print(
        f"model: {described}; {args.env}; {args.updates} segments per side; threads "
        f"{args.threads} per worker; landed: {landed_tree or 'this tree (--tiny)'}"
    )
    results = []
    try:
        for agent in args.agents.split(","):
            trees = {"this tree": None, "landed": landed_tree or str(ROOT)}
            results.append(compare(agent, model, trees, args))
    finally:
        if remove is not None:
            remove()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
