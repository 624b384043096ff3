"""DataSciCoding grading through Ray: ``--steps`` graded steps on a pool of ``--workers`` Ray
actors against the same steps graded one after another, in the same run.

Each step grades a typical body (a 50-tree random forest; the 5-split evaluation) on the bundled
breast-cancer table. The anchor is the same grades done one after another with the sandbox
backend of this machine (``--backend``, default ``auto``: docker when the engine and image are
there, else process). The Ray run sends the grades from ``2 x workers`` threads to a
:class:`~agentbench_poad.ray_sandbox.RaySandboxPool` of ``workers`` actors on a local cluster
(``ray.init(num_cpus=workers)``, or ``--address`` of an existing one), each using the same
backend on its node. Actor start-up is outside the timing (a pool lives as long as training).
Printed: both wall times and the ratio sequential / Ray (target >= 1.6x with 2 workers on 2
cores). The ratio is only meaningful on an otherwise idle machine; the load average is printed
beside it.

    python benchmarks/ray_grading.py [--steps 32] [--workers 2] [--backend auto|docker|process]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

TARGET = 1.6
BODY = (
    "from sklearn.ensemble import RandomForestClassifier\n"
    "model = RandomForestClassifier(n_estimators=50, random_state=0)\n"
    "model.fit(x_train, y_train)\n"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backend", default="auto", choices=("auto", "docker", "process"))
    parser.add_argument("--address", help="an existing Ray cluster (default: a local one)")
    args = parser.parse_args(argv)

    from agentbench_poad.environments.datascicoding.datasets import load_dataset
    from agentbench_poad.environments.datascicoding.grader import Grader
    from agentbench_poad.environments.datascicoding.prompts import parse_action
    from agentbench_poad.executors import ensure_ray
    from agentbench_poad.ray_sandbox import RaySandboxPool
    from agentbench_poad.sandbox import Limits, get_backend

    data = load_dataset("breast-cancer")
    limits = Limits(wall_time_s=120, memory_mb=1024, cpus=1.0)
    submission = parse_action(BODY)

    local = get_backend(args.backend)
    # One grade at a time by construction (the list comprehension below); the sandbox's own
    # machine-wide bound (agentbench_poad.sandbox.concurrency) is not a limit at one run.
    sequential = Grader(data.X, data.y, data.n_classes, sandbox=local, limits=limits)
    first = sequential.grade(submission)  # warm-up (imports, page cache)
    if not first.ok:
        print(f"the benchmark body failed: {first.message}", file=sys.stderr)
        return 1
    started = time.perf_counter()
    seq = [sequential.grade(submission) for _ in range(args.steps)]
    seq_s = time.perf_counter() - started
    local.close()

    ensure_ray(args.address, num_cpus=None if args.address else args.workers)
    pool = RaySandboxPool(workers=args.workers, backend=args.backend, address=args.address)
    remote = Grader(data.X, data.y, data.n_classes, sandbox=pool, limits=limits)
    with ThreadPoolExecutor(2 * args.workers) as threads:
        list(threads.map(lambda _: remote.grade(submission), range(args.workers)))  # warm-up
        started = time.perf_counter()
        par = list(threads.map(lambda _: remote.grade(submission), range(args.steps)))
        par_s = time.perf_counter() - started
    pool.close()

    assert all(g.ok for g in seq + par), "a grade failed"
    assert {g.reward for g in seq} == {g.reward for g in par}, "the grades differ"
    ratio = seq_s / par_s
    load = os.getloadavg()
    print(
        f"{args.steps} DataSciCoding steps (breast-cancer, 50-tree forest, 5 splits), backend "
        f"{first.backend}"
    )
    print(f"one after another: {seq_s:8.2f} s  ({seq_s / args.steps:.2f} s/step)")
    print(f"Ray, {args.workers} workers:    {par_s:8.2f} s  ({par_s / args.steps:.2f} s/step)")
    print(
        f"speed-up: {ratio:.2f}x (target >= {TARGET}x on {args.workers} cores; "
        f"{os.cpu_count()} CPUs here, load average {load[0]:.1f} / {load[1]:.1f} / "
        f"{load[2]:.1f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
