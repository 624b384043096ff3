"""The docker warm pool: pre-started, single-use containers, refilled and swept."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from agentbench_poad.sandbox import FailureCategory, Limits, get_backend, run_code

pytestmark = pytest.mark.docker

POOL_LIMITS = Limits(wall_time_s=10, memory_mb=512, pids=64, tmpfs_mb=32, log_bytes=2000)


def _my_containers() -> set[str]:
    import docker

    from agentbench_poad.sandbox.docker_backend import (
        LABEL,
        OWNER_LABEL,
        labelled_containers,
        owner_id,
    )

    client = docker.from_env(timeout=30)
    try:
        # Sparse: the pool removes used containers in the background while we list.
        found = labelled_containers(client, LABEL, f"{OWNER_LABEL}={owner_id()}")
        return {c.id for c in found}
    finally:
        client.close()


def test_pool_runs_are_single_use_and_closed() -> None:
    pool = get_backend("docker", pool_size=1, limits=POOL_LIMITS)
    try:
        assert "warm pool" in pool.isolation
        assert pool.wait_ready(timeout=120)
        first_warm = pool._ready.queue[0]
        leave_mark = run_code(
            """
import os, numpy as np
def f(x):
    open("/tmp/mark", "w").write("left behind")
    import sklearn.ensemble  # pre-imported: already in sys.modules
    return x + 1
""",
            "f",
            {"x": np.zeros(2)},
            backend=pool,
            limits=POOL_LIMITS,
        )
        assert leave_mark.ok and leave_mark.backend == "docker", leave_mark
        np.testing.assert_array_equal(leave_mark.outputs["output"], [1.0, 1.0])
        deadline = time.monotonic() + 30  # removal happens in the background
        while first_warm.container.id in _my_containers() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert first_warm.container.id not in _my_containers()  # destroyed after one use

        # The refilled container is a fresh one: nothing of the previous run is visible.
        fresh = run_code(
            """
import os, numpy as np
def f():
    return np.array([os.path.exists("/tmp/mark")])
""",
            "f",
            {},
            backend=pool,
            limits=POOL_LIMITS,
        )
        assert fresh.ok and fresh.outputs["output"].tolist() == [False]

        timeout = pool.run(
            "def f():\n    while True:\n        pass\n",
            "f",
            {},
            limits=Limits(wall_time_s=1, memory_mb=512, pids=64, tmpfs_mb=32),
        )
        assert timeout.category is FailureCategory.TIMEOUT
    finally:
        pool.close()
    assert _my_containers() == set()


def test_pool_falls_back_for_other_limits() -> None:
    with get_backend("docker", pool_size=1, limits=POOL_LIMITS) as pool:
        bigger = Limits(wall_time_s=10, memory_mb=768, pids=64, tmpfs_mb=32)
        assert not pool._compatible(bigger)
        assert pool._compatible(
            Limits(wall_time_s=5, memory_mb=512, pids=64, tmpfs_mb=32, output_mb=8)
        )
        result = pool.run(
            "import numpy as np\ndef f():\n    return np.ones(1)\n", "f", {}, limits=bigger
        )
        assert result.ok, result
    assert _my_containers() == set()


def test_idle_pool_containers_are_replaced() -> None:
    with get_backend("docker", pool_size=1, limits=POOL_LIMITS, idle_s=6) as pool:
        assert pool.wait_ready(timeout=120)
        first = pool._ready.queue[0].container.id
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready = list(pool._ready.queue)
            if ready and ready[0].container.id != first and first not in _my_containers():
                break
            time.sleep(0.2)
        else:
            pytest.fail("the idle container was not replaced")
        result = pool.run(
            "import numpy as np\ndef f():\n    return np.ones(2)\n", "f", {}, limits=POOL_LIMITS
        )
        assert result.ok, result
    assert _my_containers() == set()


def test_sweep_tolerates_containers_removed_while_it_lists(sandbox_image: str) -> None:
    """A container removed between the listing and its inspection (a pool discarding a used
    one, another process's sweep) must not make the sweep give up: it removes the rest."""
    import socket
    import threading
    import uuid

    import docker

    from agentbench_poad.sandbox.docker_backend import LABEL, OWNER_LABEL, sweep

    # This pid with a start time it never had: an owner that is gone, so sweep may take them.
    owner = f"{socket.gethostname()}:{os.getpid()}:gone-{uuid.uuid4().hex[:8]}"
    client = docker.from_env(timeout=30)
    created = [
        client.containers.create(
            sandbox_image, ["true"], labels={LABEL: "1", OWNER_LABEL: owner}, network_disabled=True
        )
        for _ in range(3)
    ]
    victim = created[0]
    real_list = client.api.containers

    def list_then_lose_one(*args, **kwargs):
        # The real listing, then the victim vanishes (removed from another thread) before the
        # sweep gets to look at each listed container.
        listed = real_list(*args, **kwargs)
        remover = threading.Thread(target=lambda: victim.remove(force=True))
        remover.start()
        remover.join()
        return listed

    client.api.containers = list_then_lose_one
    try:
        removed = sweep(client)
        client.api.containers = real_list
        left = client.containers.list(
            all=True, sparse=True, filters={"label": f"{OWNER_LABEL}={owner}"}
        )
        assert left == [], f"the sweep left {len(left)} of the gone owner's containers"
        assert removed >= 2, f"the sweep reported {removed} removals"
    finally:
        client.api.containers = real_list
        for container in created:
            try:
                container.remove(force=True)
            except docker.errors.NotFound:
                pass
        client.close()
