"""DataSciCoding: the cost of one sandboxed ``step()`` against the same evaluation in-process.

One ``step()`` with a typical body (a 100-tree random forest) on airlines-shaped data (a
synthetic 2000 x 7 binary table handed to the env as a ``Dataset`` object, so no cache or
network is involved) runs the 5-split evaluation in a sandbox: one sandbox call per split, each
holding only that split's data (issue 64). The anchor, measured in the same run, is that
evaluation done in this process with no sandbox: the same splits, the same model,
``predict_proba`` and ``roc_auc_score``. Printed per backend (median of ``--repeats`` runs
each): the step's seconds and its ratio to the anchor, and the ratio *new/old* against the
grading before issue 64 (one sandbox call holding every split, ``tests/_dsc_reference.py``),
timed in the same run on the same backend:

* docker with a warm pool (``get_backend("docker", pool_size=5)``): target <= 1.5x the anchor;
* docker, one container per call;
* the process backend.

    python benchmarks/datascicoding_step.py [--repeats N] [--trees N] [--pool-size N]
        [--pause S] [--rows pool,docker,process]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from agentbench_poad.environments.datascicoding.datasets import Dataset
from agentbench_poad.environments.datascicoding.env import DataSciCodingEnv
from agentbench_poad.environments.datascicoding.grader import make_splits, roc_auc
from agentbench_poad.sandbox import Limits, SandboxUnavailable, get_backend

TARGET = 1.5
#: The rows besides the warm pool: (label, backend name, --rows name).
ROWS = (("process", "process", "process"), ("docker per-call", "docker", "docker"))
#: The one-call grading before issue 64 lives with the tests, as their reference; it is loaded
#: from its file so that running this script never changes ``sys.path``.
ONE_CALL_REFERENCE = Path(__file__).resolve().parents[1] / "tests" / "_dsc_reference.py"


def airlines_like(rows: int = 2000, seed: int = 0) -> Dataset:
    """A 2000 x 7 binary table shaped like the pruned airlines task (3 nominal-code columns)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(2, size=rows)
    X = np.column_stack(
        [
            rng.integers(18, size=rows),  # Airline
            rng.integers(1, 7000, size=rows),  # Flight
            rng.integers(293, size=rows),  # AirportFrom
            rng.integers(293, size=rows),  # AirportTo
            rng.integers(7, size=rows),  # DayOfWeek
            rng.integers(10, 1440, size=rows) + 60 * y,  # Time (weakly informative)
            rng.integers(20, 650, size=rows),  # Length
        ]
    ).astype(np.float64)
    names = ("Airline", "Flight", "AirportFrom", "AirportTo", "DayOfWeek", "Time", "Length")
    return Dataset("airlines", "Airlines", X, y, names, "synthetic")


def body(trees: int) -> str:
    return (
        "from sklearn.ensemble import RandomForestClassifier\n"
        f"    model = RandomForestClassifier(n_estimators={trees}, random_state=0)\n"
        "    model.fit(x_train, y_train)\n"
        "    return"
    )


def in_process(dataset: Dataset, trees: int) -> float:
    """The anchor: the 5-split evaluation without a sandbox; returns the mean AUC."""
    from sklearn.ensemble import RandomForestClassifier

    aucs = []
    for train, test in make_splits(len(dataset.y)):
        model = RandomForestClassifier(n_estimators=trees, random_state=0)
        model.fit(dataset.X[train], dataset.y[train])
        aucs.append(roc_auc(dataset.y[test], model.predict_proba(dataset.X[test])))
    return float(np.mean(aucs))


def sandboxed(env: DataSciCodingEnv, action: str) -> float:
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(action)
    if not terminated:
        raise RuntimeError(
            f"the step failed: {info['failure_category']}: {info['failure_message']}"
        )
    return reward


def one_call(env: DataSciCodingEnv, action: str) -> float:
    """The grading before issue 64 (every split in one sandbox call), for the ratio new/old."""
    spec = importlib.util.spec_from_file_location("_dsc_reference", ONE_CALL_REFERENCE)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"the one-call reference is missing: {ONE_CALL_REFERENCE}")
    reference = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = reference  # its dataclasses look their module up by name
    spec.loader.exec_module(reference)

    env.reset(seed=0)
    grade = reference.one_call_grade(env.grader, action)
    if grade.category is not None:
        raise RuntimeError(f"the one-call grading failed: {grade.category}: {grade.message}")
    return grade.reward


def median_time(fn, repeats: int, pause: float = 0.0) -> tuple[float, object]:
    result = fn()  # warm-up (imports, image, pool refill)
    times = []
    for _ in range(repeats):
        time.sleep(pause)  # untimed: a warm pool refills here, as between an agent's steps
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument(
        "--pool-size", type=int, default=5, help="warm containers (a step takes one per split)"
    )
    parser.add_argument(
        "--pause",
        type=float,
        default=0.0,
        help="untimed seconds before each timed step (a warm pool refills meanwhile, as while "
        "an agent generates its next actions); 0: steps back to back",
    )
    parser.add_argument(
        "--rows", default="pool,docker,process", help="which of pool, docker, process to time"
    )
    args = parser.parse_args(argv)
    wanted = set(args.rows.split(","))

    dataset = airlines_like()
    action = body(args.trees)
    limits = Limits(wall_time_s=120.0)
    anchor, anchor_auc = median_time(lambda: in_process(dataset, args.trees), args.repeats)
    print(f"anchor (in-process 5-split evaluation): {anchor:.3f} s, mean AUC {anchor_auc:.4f}")

    rows: list[tuple[str, object]] = []
    if "pool" in wanted:
        try:
            pool = get_backend("docker", pool_size=args.pool_size, limits=limits)
            rows.append(("docker warm pool", pool))
        except SandboxUnavailable as exc:
            print(f"docker warm pool: unavailable ({exc})")
    rows += [(label, name) for label, name, row in ROWS if row in wanted]
    for label, sandbox in rows:
        env = DataSciCodingEnv(dataset, sandbox=sandbox, limits=limits)
        try:
            seconds, reward = median_time(
                lambda env=env: sandboxed(env, action), args.repeats, args.pause
            )
            before, before_reward = median_time(
                lambda env=env: one_call(env, action), args.repeats, args.pause
            )
        except (SandboxUnavailable, RuntimeError) as exc:
            print(f"{label}: unavailable ({exc})")
            continue
        finally:
            if not isinstance(sandbox, str):
                sandbox.close()
        if abs(reward - anchor_auc) > 1e-9 or reward != before_reward:
            print(
                f"{label}: WARNING reward {reward:.6f} differs from the anchor {anchor_auc:.6f} "
                f"or the one-call grading {before_reward:.6f}"
            )
        target = f"target <= {TARGET}" if label == "docker warm pool" else "for information"
        print(
            f"{label}: {seconds:.3f} s per step; ratio: {seconds / anchor:.2f} ({target}); "
            f"one call for all splits (before issue 64): {before:.3f} s; "
            f"ratio new/old: {seconds / before:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
