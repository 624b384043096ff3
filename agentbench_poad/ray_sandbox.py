"""Sandboxed runs on a pool of Ray actors: DataSciCoding grading spread over a cluster.

:class:`RaySandboxPool` is a sandbox :class:`~agentbench_poad.sandbox.Backend`: its ``run``
sends the call (source, entry, numeric input arrays, limits) to the least busy of its Ray actors;
each actor holds the sandbox backend of *its* node, chosen there by the usual ``auto`` rule
(Docker where the node's engine answers and has the image, else the process backend). The
actor's backend validates the outputs exactly as it does locally; the result comes back to the
caller.

What crosses the network is what a local sandbox gets: the grader sends one call per split,
each with that split's training features and labels and its test *features* only, and computes
the AUC on the host from the returned probabilities
(:mod:`agentbench_poad.environments.datascicoding.grader`), so no label a run is scored on
leaves the host, let alone enters a container; each call is one run of the actor's backend
(a fresh container or namespaced process). The cluster itself is trusted (Ray moves objects
between its own processes with pickle); the code under test never talks to Ray.

A node that has no usable backend is reported when the pool starts, naming the node and the fix
(:class:`~agentbench_poad.sandbox.SandboxUnavailable`). Use it directly::

    pool = RaySandboxPool(workers=4)           # ray.init() or RAY_ADDRESS
    env = gym.make("DataSciCoding-iris-v0", sandbox=pool)

or by name: ``gym.make("DataSciCoding-iris-v0", sandbox="ray")`` uses one shared pool per
process with one worker per CPU free on the cluster when it starts.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

from agentbench_poad.executors import ensure_ray
from agentbench_poad.sandbox import Backend, Limits, SandboxResult, SandboxUnavailable

__all__ = ["RaySandboxPool", "shared_pool"]


class SandboxWorker:
    """The actor: one sandbox backend on one node (made by :class:`RaySandboxPool`)."""

    def __init__(self, backend: str, backend_kwargs: dict[str, Any]) -> None:
        import socket

        from agentbench_poad.sandbox import get_backend

        self.node = socket.gethostname()
        try:
            self.backend = get_backend(backend, **backend_kwargs)
        except SandboxUnavailable as exc:
            raise SandboxUnavailable(
                f"Ray node {self.node} has no usable sandbox backend {backend!r}: {exc} "
                "(run `agentbench-poad sandbox status` on that node)"
            ) from None

    def describe(self) -> dict[str, Any]:
        owner = None
        if self.backend.name == "docker":
            from agentbench_poad.sandbox.docker_backend import owner_id

            owner = owner_id()
        return {
            "node": self.node,
            "pid": os.getpid(),
            "backend": self.backend.name,
            "isolation": self.backend.isolation,
            "mode": getattr(self.backend, "mode", None),
            "owner": owner,
        }

    def run(
        self,
        source: str,
        entry: str,
        inputs: Mapping[str, Any],
        limits: Limits | None,
        output_shapes: Any,
    ) -> SandboxResult:
        return self.backend.run(source, entry, inputs, limits=limits, output_shapes=output_shapes)

    def close(self) -> None:
        self.backend.close()


class RaySandboxPool(Backend):
    """A sandbox backend whose runs go to ``workers`` Ray actors.

    Args:
        workers: number of actors (runs at once); ``None``: one per CPU free on the cluster.
        backend: the backend each actor makes on its node (``"auto"``, ``"docker"``,
            ``"process"``).
        address: an existing Ray cluster; ``None``: ``RAY_ADDRESS`` or a local cluster.
        cpus_per_worker: CPUs each actor reserves (Ray places actors where they fit).
        spread: place actors on as many nodes as possible (``SPREAD`` scheduling).
        start_timeout_s: how long the workers may take to start (placement included).
        **backend_kwargs: passed to the actors' backend (e.g. ``image=``).

    Raises:
        SandboxUnavailable: an actor's node has no usable backend (the message names the node).
    """

    def __init__(
        self,
        workers: int | None = None,
        backend: str = "auto",
        *,
        address: str | None = None,
        cpus_per_worker: float = 1.0,
        spread: bool = True,
        start_timeout_s: float = 300.0,
        **backend_kwargs: Any,
    ) -> None:
        ray = ensure_ray(address)
        self._ray = ray
        if workers is None:  # one per CPU the cluster has free now
            workers = max(1, int(ray.available_resources().get("CPU", 1) // cpus_per_worker))
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        actor = ray.remote(SandboxWorker).options(
            num_cpus=cpus_per_worker,
            max_restarts=2,
            max_task_retries=1,
            scheduling_strategy="SPREAD" if spread else "DEFAULT",
        )
        self.actors = [actor.remote(backend, dict(backend_kwargs)) for _ in range(workers)]
        try:
            self.workers = ray.get(
                [a.describe.remote() for a in self.actors], timeout=start_timeout_s
            )
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise SandboxUnavailable(
                f"the Ray cluster could not start {workers} sandbox workers of "
                f"{cpus_per_worker:g} CPU each within {start_timeout_s:g} s (free now: "
                f"{ray.available_resources().get('CPU', 0):g} CPUs); ask for fewer workers or "
                "add nodes"
            ) from None
        except Exception as exc:  # noqa: BLE001 - an actor's __init__ raised on its node
            self.close()
            cause = getattr(exc, "cause", None) or exc
            message = str(cause).strip().splitlines()[-1] if str(cause).strip() else repr(cause)
            raise SandboxUnavailable(message) from None
        names = sorted({w["backend"] for w in self.workers})
        self.name = names[0] if len(names) == 1 else "mixed"
        modes = {w["mode"] for w in self.workers if w["mode"] is not None}
        self.mode = modes.pop() if len(modes) == 1 else None
        nodes = sorted({w["node"] for w in self.workers})
        self.isolation = (
            f"Ray pool of {workers} workers on {len(nodes)} node(s) "
            f"({', '.join(nodes)}): "
            + "; ".join(sorted({f"{w['backend']}: {w['isolation']}" for w in self.workers}))
        )
        self.owners = [w["owner"] for w in self.workers if w["owner"]]
        self._busy = [0] * workers
        self._lock = threading.Lock()

    def run(
        self,
        source: str,
        entry: str,
        inputs: Mapping[str, Any],
        *,
        limits: Limits | None = None,
        output_shapes: Mapping[str, tuple[int | None, ...]] | None = None,
    ) -> SandboxResult:
        """Run on the least busy actor (checks and validation happen on the actor's node)."""
        if not self.actors:
            raise SandboxUnavailable("this RaySandboxPool is closed; make a new one")
        with self._lock:
            index = min(range(len(self.actors)), key=self._busy.__getitem__)
            self._busy[index] += 1
        try:
            ref = self.actors[index].run.remote(source, entry, dict(inputs), limits, output_shapes)
            try:
                return self._ray.get(ref)
            except self._ray.exceptions.RayTaskError as exc:
                # the call itself was wrong (TypeError/ValueError from the backend's checks)
                cause = exc.cause if isinstance(exc.cause, Exception) else exc
                raise cause from None
        finally:
            with self._lock:
                self._busy[index] -= 1

    def _run(self, source, entry, inputs, limits, output_shapes):  # pragma: no cover
        raise NotImplementedError("RaySandboxPool overrides run()")

    def close(self) -> None:
        """Close the actors' backends and end the actors. Idempotent."""
        actors, self.actors = getattr(self, "actors", []), []
        for a in actors:
            try:
                self._ray.get(a.close.remote(), timeout=60)
            except Exception:  # noqa: BLE001,S110 - the actor may already be gone
                pass
            self._ray.kill(a)


_SHARED: dict[int, RaySandboxPool] = {}
_SHARED_LOCK = threading.Lock()


def shared_pool() -> RaySandboxPool:
    """One pool per process (``sandbox="ray"``): a worker per CPU of the cluster, ``auto`` backend."""
    with _SHARED_LOCK:
        pool = _SHARED.get(os.getpid())
        if pool is None or not pool.actors:
            pool = _SHARED[os.getpid()] = RaySandboxPool()
        return pool
