"""The ``docker`` backend (default): one hardened, single-use container per run.

Profile: ``network_mode="none"``, read-only root file system plus a sized tmpfs at ``/tmp``,
user 65534:65534, ``cap_drop=["ALL"]``, ``no-new-privileges`` (default seccomp/AppArmor stay on),
``mem_limit == memswap_limit``, ``nano_cpus``, ``pids_limit``, ulimits (fsize, nofile, core 0),
``init=True``, private IPC, capped json-file logs, ``stop_signal=SIGKILL``, an explicit minimal
environment and labels. Inputs are a read-only bind mount; outputs go through a pre-created FIFO
in a bind-mounted host directory the container cannot create files in (nothing it writes there
reaches the host's disk).

Lifecycle: ``create -> start -> wait(timeout) -> kill -> remove(force=True)`` in ``try/finally``
(``wait``'s timeout is an HTTP read timeout, so both ``ReadTimeout`` and ``ConnectionError`` mean
"deadline"). Containers carry an owner label ``host:pid:start-time``; stale ones are swept when a
backend starts and this process's own at exit. ``timeout -s KILL`` inside the container bounds its
life even if the host process dies.

:class:`DockerPool` keeps pre-started, single-use containers whose harness has already imported
numpy/scikit-learn and waits for a ``GO`` file; a container is destroyed after one run.
"""

from __future__ import annotations

import atexit
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Mapping

import numpy as np

from agentbench_poad.sandbox._jobs import (
    SANDBOX_UID,
    JobDir,
    classify,
    sandbox_error,
    slots_for,
)
from agentbench_poad.sandbox.api import (
    Backend,
    Limits,
    OutputShapes,
    SandboxResult,
    SandboxUnavailable,
)
from agentbench_poad.sandbox.image import image_tag
from agentbench_poad.sandbox.process_backend import sandbox_env

LABEL = "agentbench-poad.sandbox"
OWNER_LABEL = "agentbench-poad.owner"
IN_DIR, OUT_DIR = "/sbx/in", "/sbx/out"
#: Modules a warm-pool harness imports before it waits for work.
POOL_PREIMPORT = (
    "numpy",
    "pandas",
    "sklearn",
    "sklearn.base",
    "sklearn.ensemble",
    "sklearn.linear_model",
    "sklearn.preprocessing",
    "sklearn.pipeline",
    "sklearn.model_selection",
    "sklearn.tree",
    "sklearn.impute",
)


def _proc_start(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "0"


def owner_id(pid: int | None = None) -> str:
    """``host:pid:start-time`` of a process: identifies the owner of a container."""
    pid = pid or os.getpid()
    return f"{socket.gethostname()}:{pid}:{_proc_start(pid)}"


def _owner_alive(owner: str) -> bool:
    host, _, rest = owner.partition(":")
    pid, _, start = rest.partition(":")
    if host != socket.gethostname():
        return True  # another machine's container on a shared engine: not ours to judge
    if not pid.isdigit():
        return False
    return os.path.exists(f"/proc/{pid}") and _proc_start(int(pid)) == start


def _connect(timeout: int = 60):
    import docker

    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means "no engine"
        raise SandboxUnavailable(
            f"no Docker engine answers ({type(exc).__name__}: {str(exc)[:120]}); start the "
            f"engine (dockerd / systemctl start docker) or use backend='process'"
        ) from None
    return client


def docker_usable(image: str | None = None) -> tuple[bool, str]:
    """``(True, why)`` when the engine answers and the image exists, else ``(False, fix)``."""
    import docker

    tag = image or image_tag()
    try:
        client = _connect(timeout=10)
    except SandboxUnavailable as exc:
        return False, str(exc)
    try:
        version = client.version().get("Version", "?")
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False, (
            f"the engine answers but the image {tag} is missing; build it with "
            f"`agentbench-poad sandbox build`"
        )
    except Exception as exc:  # noqa: BLE001
        return False, f"the engine answered but failed: {type(exc).__name__}: {exc}"
    finally:
        client.close()
    return True, f"Docker engine {version}, image {tag}"


def _remove(container) -> None:
    import docker

    if container is None:
        return
    for attempt in range(5):
        try:
            container.remove(force=True, v=True)
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:  # 409 "removal in progress", transient 500s
            if attempt == 4:
                raise SandboxUnavailable(
                    f"cannot remove container {container.name or container.short_id}: {exc}"
                ) from None
            time.sleep(0.2 * (attempt + 1))


def labelled_containers(client, *labels: str) -> list:
    """Containers (running or not) carrying every label in ``labels`` (``key`` or ``key=value``).

    A sparse listing: one ``GET /containers/json`` and no per-container inspect, so a container
    removed meanwhile (a pool discarding a used one, another sweep) cannot make the listing
    fail with ``NotFound``. The objects carry ``id``, ``name`` and :func:`container_labels`;
    call ``reload()`` for more.
    """
    return client.containers.list(all=True, sparse=True, filters={"label": list(labels)})


def container_labels(container) -> dict[str, str]:
    """The labels of a container from :func:`labelled_containers` (sparse or inspected)."""
    attrs = container.attrs
    labels = attrs.get("Labels") if "Labels" in attrs else attrs.get("Config", {}).get("Labels")
    return dict(labels or {})


def sweep(client, *, only_mine: bool = False) -> int:
    """Remove labelled containers whose owner process is gone (or, ``only_mine``, ours).

    Containers that vanish between the listing and their removal count as removed; one that
    cannot be removed is skipped, and the rest are still removed.

    Returns:
        How many containers were removed (0 when the engine cannot even list them).
    """
    import docker

    mine = owner_id()
    removed = 0
    try:
        containers = labelled_containers(client, LABEL)
    except docker.errors.DockerException:
        return 0
    for container in containers:
        owner = container_labels(container).get(OWNER_LABEL, "")
        if (owner == mine) if only_mine else not _owner_alive(owner):
            try:
                _remove(container)
                removed += 1
            except SandboxUnavailable:
                pass
    return removed


_ATEXIT_PIDS: set[int] = set()


def _register_atexit() -> None:
    if os.getpid() in _ATEXIT_PIDS:
        return
    _ATEXIT_PIDS.add(os.getpid())

    def _sweep_mine(pid: int = os.getpid()) -> None:
        if os.getpid() != pid:  # a forked child inherited the hook: not its containers
            return
        try:
            client = _connect(timeout=10)
            sweep(client, only_mine=True)
            client.close()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass

    atexit.register(_sweep_mine)


class DockerBackend(Backend):
    """One fresh hardened container per run (see the module docstring).

    Args:
        image: Image tag; defaults to ``agentbench-poad-sandbox:<version>``.
        runtime: Container runtime, e.g. ``"runsc"`` (gVisor) where the engine lists it.

    Raises:
        SandboxUnavailable: No engine, or the image is missing (the message names the fix).
    """

    name = "docker"

    def __init__(self, image: str | None = None, *, runtime: str | None = None):
        import docker

        self.image = image or image_tag()
        self.runtime = runtime
        self.client = _connect()
        try:
            self.client.images.get(self.image)
        except docker.errors.ImageNotFound:
            raise SandboxUnavailable(
                f"the sandbox image {self.image} is missing; build it with "
                f"`agentbench-poad sandbox build`"
            ) from None
        sweep(self.client)
        _register_atexit()
        self.isolation = (
            "docker: no network, read-only root, uid 65534, all capabilities "
            "dropped, no-new-privileges, default seccomp, memory/CPU/pids limits"
            + (f", runtime {runtime}" if runtime else "")
        )

    # -- container plumbing -------------------------------------------------------------

    def _create(self, job: JobDir, limits: Limits, command: list[str], client=None):
        from docker.types import LogConfig, Ulimit

        client = client or self.client
        fsize = limits.file_size_bytes
        return client.containers.create(
            image=self.image,
            command=command,
            name=f"abp-sbx-{uuid.uuid4().hex[:16]}",
            detach=True,
            network_mode="none",
            mem_limit=f"{limits.memory_mb}m",
            memswap_limit=f"{limits.memory_mb}m",
            nano_cpus=int(limits.cpus * 1e9),
            pids_limit=limits.pids,
            read_only=True,
            tmpfs={"/tmp": f"rw,nosuid,nodev,size={limits.tmpfs_mb}m,mode=1777"},
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            user=f"{SANDBOX_UID}:{SANDBOX_UID}",
            init=True,
            ipc_mode="private",
            shm_size=f"{min(limits.tmpfs_mb, 256)}m",
            ulimits=[
                Ulimit(name="fsize", soft=fsize, hard=fsize),
                Ulimit(name="nofile", soft=256, hard=256),
                Ulimit(name="core", soft=0, hard=0),
            ],
            environment=sandbox_env(limits, "/tmp"),
            volumes={
                str(job.in_dir): {"bind": IN_DIR, "mode": "ro"},
                str(job.out_dir): {"bind": OUT_DIR, "mode": "rw"},
            },
            working_dir="/tmp",
            hostname="sandbox",
            labels={LABEL: "1", OWNER_LABEL: owner_id()},
            log_config=LogConfig(type="json-file", config={"max-size": "1m", "max-file": "1"}),
            stop_signal="SIGKILL",
            runtime=self.runtime,
        )

    @staticmethod
    def _harness_command(backstop_s: float, extra: list[str] | None = None) -> list[str]:
        # `timeout` is a backstop for a host that died mid-run; the host's deadline comes first.
        return [
            "timeout",
            "-s",
            "KILL",
            str(int(backstop_s) + 1),
            "python3",
            "-I",
            "-B",
            f"{IN_DIR}/harness.py",
            IN_DIR,
            OUT_DIR,
            *(extra or []),
        ]

    def _finish(
        self,
        container,
        job: JobDir,
        limits: Limits,
        output_shapes: OutputShapes | None,
        started: float,
    ) -> SandboxResult:
        """Wait for the deadline, kill, collect logs and state, validate."""
        import requests

        timed_out, code = False, None
        try:
            code = container.wait(
                timeout=max(0.05, limits.wall_time_s - (time.monotonic() - started))
            ).get("StatusCode")
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            timed_out = True
        if timed_out:
            try:
                container.kill()
            except Exception:  # noqa: BLE001 - it may have exited in between
                pass
            try:
                container.wait(timeout=30)
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                pass
        duration = time.monotonic() - started
        oom_killed = False
        if timed_out or code != 0:  # a clean exit needs no inspection (one API call saved)
            container.reload()
            state = container.attrs.get("State", {})
            oom_killed, code = bool(state.get("OOMKilled")), state.get("ExitCode")
        stdout = container.logs(stdout=True, stderr=False, tail=5000)
        stderr = container.logs(stdout=False, stderr=True, tail=5000)
        return classify(
            job,
            limits=limits,
            output_shapes=output_shapes,
            backend=self.name,
            duration_s=duration,
            stdout=stdout,
            stderr=stderr,
            timed_out=timed_out,
            memory_killed=oom_killed,
            exit_description=f"exit status {code}",
        )

    def _run(
        self,
        source: str,
        entry: str,
        inputs: Mapping[str, np.ndarray],
        limits: Limits,
        output_shapes: OutputShapes | None,
    ) -> SandboxResult:
        import docker

        started = time.monotonic()
        job = JobDir(sandbox_uid=SANDBOX_UID, slots=slots_for(output_shapes))
        container = None
        try:
            job.write_job(source, entry, inputs, limits=limits)
            container = self._create(job, limits, self._harness_command(limits.wall_time_s + 10))
            job.listen(limits)
            started = time.monotonic()
            container.start()
            return self._finish(container, job, limits, output_shapes, started)
        except docker.errors.DockerException as exc:
            return sandbox_error(
                f"docker: {type(exc).__name__}: {str(exc)[:300]}",
                backend=self.name,
                duration_s=time.monotonic() - started,
            )
        finally:
            try:
                _remove(container)
            finally:
                job.cleanup()

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # noqa: BLE001
            pass


class _Warm:
    """A started pool container and its job directory."""

    def __init__(self, container, job: JobDir, deadline: float):
        self.container = container
        self.job = job
        self.deadline = deadline  # after this its harness has given up waiting


class DockerPool(DockerBackend):
    """Docker with ``pool_size`` pre-started, pre-imported, single-use containers.

    Runs whose ``Limits`` differ from the pool's in a container-level field (memory, cpus,
    pids, tmpfs, output size) or that need a longer deadline run in a fresh container instead.

    Args:
        pool_size: Containers kept ready.
        limits: The limits pool containers are created with (default :class:`Limits`).
        image: Image tag.
        idle_s: A ready container that waited this long is replaced.
        runtime: Container runtime (e.g. ``"runsc"``).
    """

    def __init__(
        self,
        pool_size: int,
        *,
        limits: Limits | None = None,
        image: str | None = None,
        idle_s: float = 300.0,
        runtime: str | None = None,
    ):
        if pool_size < 1:
            raise ValueError(f"pool_size must be >= 1, got {pool_size}")
        if idle_s < 2:
            raise ValueError(f"idle_s must be at least 2 seconds, got {idle_s}")
        super().__init__(image, runtime=runtime)
        self.pool_size = pool_size
        self.pool_limits = limits or Limits()
        self.idle_s = idle_s
        self.isolation += f"; warm pool of {pool_size} single-use containers"
        self._ready: queue.Queue[_Warm] = queue.Queue()
        self._used: queue.Queue[_Warm] = queue.Queue()
        self._wanted = threading.Semaphore(pool_size)
        self._closed = threading.Event()
        self._refill_client = _connect()
        self._errors = 0
        self._thread = threading.Thread(target=self._refill, name="abp-sandbox-pool", daemon=True)
        self._thread.start()

    def _spawn(self) -> _Warm:
        job = JobDir(sandbox_uid=SANDBOX_UID)
        container = None
        try:
            command = self._harness_command(
                self.idle_s + self.pool_limits.wall_time_s + 10,
                ["--wait-go", str(self.idle_s), "--preimport", ",".join(POOL_PREIMPORT)],
            )
            container = self._create(job, self.pool_limits, command, client=self._refill_client)
            container.start()
        except BaseException:
            _remove(container)
            job.cleanup()
            raise
        # Retire it a little before its harness gives up waiting for GO.
        return _Warm(container, job, time.monotonic() + self.idle_s - min(5.0, self.idle_s / 2))

    def _refill(self) -> None:
        while not self._closed.is_set():
            self._empty_trash()
            self._expire()
            if not self._wanted.acquire(timeout=0.1):
                continue
            if self._closed.is_set():
                break
            try:
                self._ready.put(self._spawn())
                self._errors = 0
            except Exception:  # noqa: BLE001 - retry with backoff; runs fall back meanwhile
                self._wanted.release()
                self._errors += 1
                self._closed.wait(min(30.0, 0.5 * 2**self._errors))

    def _compatible(self, limits: Limits) -> bool:
        pool = self.pool_limits
        same_container = (limits.memory_mb, limits.cpus, limits.pids, limits.tmpfs_mb) == (
            pool.memory_mb,
            pool.cpus,
            pool.pids,
            pool.tmpfs_mb,
        )
        return (
            same_container
            and limits.output_mb <= pool.output_mb
            and limits.wall_time_s <= pool.wall_time_s
        )

    def wait_ready(self, count: int = 1, timeout: float = 60.0) -> bool:
        """Block until ``count`` containers are ready (or ``timeout``); True when they are."""
        end = time.monotonic() + timeout
        while self._ready.qsize() < min(count, self.pool_size):
            if time.monotonic() >= end or self._closed.is_set():
                return False
            time.sleep(0.05)
        return True

    def _take(self, timeout: float = 10.0) -> _Warm | None:
        end = time.monotonic() + timeout
        while not self._closed.is_set():
            try:
                warm = self._ready.get(timeout=max(0.0, min(0.5, end - time.monotonic())))
            except queue.Empty:
                if time.monotonic() >= end:
                    return None
                continue
            if time.monotonic() < warm.deadline:
                return warm
            self._discard(warm)  # its harness stopped waiting
        return None

    def _expire(self) -> None:
        """Replace ready containers whose harness is about to stop waiting."""
        for _ in range(self._ready.qsize()):
            try:
                warm = self._ready.get_nowait()
            except queue.Empty:
                return
            if time.monotonic() < warm.deadline:
                self._ready.put(warm)
            else:
                self._discard(warm)

    def _empty_trash(self) -> None:
        while True:
            try:
                warm = self._used.get_nowait()
            except queue.Empty:
                return
            self._discard(warm)

    def _discard(self, warm: _Warm) -> None:
        try:
            _remove(warm.container)
        finally:
            warm.job.cleanup()
            if not self._closed.is_set():
                self._wanted.release()

    def _run(
        self,
        source: str,
        entry: str,
        inputs: Mapping[str, np.ndarray],
        limits: Limits,
        output_shapes: OutputShapes | None,
    ) -> SandboxResult:
        import docker

        usable = self._compatible(limits)
        warm = self._take() if usable else None
        if warm is None:
            return super()._run(source, entry, inputs, limits, output_shapes)
        started = time.monotonic()
        try:
            warm.job.slots = slots_for(output_shapes)
            warm.job.write_job(source, entry, inputs, limits=limits)
            warm.job.listen(limits)
            warm.job.go()
            started = time.monotonic()
            return self._finish(warm.container, warm.job, limits, output_shapes, started)
        except docker.errors.DockerException as exc:
            return sandbox_error(
                f"docker: {type(exc).__name__}: {str(exc)[:300]}",
                backend=self.name,
                duration_s=time.monotonic() - started,
            )
        finally:
            # Single use, whatever happened. It has exited or was killed in _finish; the refill
            # thread removes it, off the caller's critical path.
            self._used.put(warm)

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._thread.join(timeout=60)
        self._empty_trash()
        while True:
            try:
                warm = self._ready.get_nowait()
            except queue.Empty:
                break
            self._discard(warm)
        for client in (self._refill_client, self.client):
            try:
                client.close()
            except Exception:  # noqa: BLE001
                pass
