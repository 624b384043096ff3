"""Public types of the sandbox: limits, results, failure categories and the backend base class.

The contract every backend honours: untrusted Python source runs in another process (a container
or a namespaced, unprivileged child), gets numeric arrays in as read-only ``.npy`` files, and
hands arrays back as ``.npy`` files that the host validates before anything is returned. Nothing
else the sandbox says is trusted: a forged "ok" status without valid outputs is a failure.
"""

from __future__ import annotations

import abc
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

#: Shape spec per output: ``None`` on an axis accepts any size.
OutputShapes = Mapping[str, tuple[int | None, ...]]


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed run.

    Attributes:
        wall_time_s: Hard deadline in seconds, enforced from the host by killing the sandbox.
        memory_mb: Memory limit in MiB (memory and memory+swap are the same: no swap).
        cpus: CPU share (docker ``nano_cpus``; the process backend sets thread counts from it).
        pids: Maximum number of processes and threads inside the sandbox.
        output_mb: Maximum total size of the returned arrays (and of any single file written).
        log_bytes: How many trailing bytes of stdout and of stderr are kept.
        tmpfs_mb: Size of the writable scratch space mounted at ``/tmp``.
    """

    wall_time_s: float = 60.0
    memory_mb: int = 2048
    cpus: float = 1.0
    pids: int = 128
    output_mb: int = 64
    log_bytes: int = 64_000
    tmpfs_mb: int = 256

    def __post_init__(self) -> None:
        for name in ("wall_time_s", "memory_mb", "cpus", "pids", "output_mb", "tmpfs_mb"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Limits.{name} must be positive, got {getattr(self, name)!r}")
        if self.log_bytes < 0:
            raise ValueError(f"Limits.log_bytes must be >= 0, got {self.log_bytes!r}")
        if self.pids < 8:
            raise ValueError(f"Limits.pids must be at least 8 (Python itself needs a few), "
                             f"got {self.pids}")

    @property
    def file_size_bytes(self) -> int:
        """RLIMIT_FSIZE / docker ``fsize``: the largest file the sandbox may write."""
        return max(self.output_mb, self.tmpfs_mb) * 2**20

    @property
    def threads(self) -> int:
        """Thread count handed to BLAS/OpenMP/loky through the environment."""
        return max(1, int(self.cpus + 0.999))


class FailureCategory(str, Enum):
    """Why a run failed. The values are stable strings (they end up in observations and logs)."""

    SYNTAX_ERROR = "syntax_error"
    EXCEPTION = "exception"
    TIMEOUT = "timeout"
    MEMORY_EXCEEDED = "memory_exceeded"
    OUTPUT_INVALID = "output_invalid"
    SANDBOX_ERROR = "sandbox_error"


@dataclass
class SandboxResult:
    """What a run produced, after host-side validation.

    Attributes:
        ok: True when the entry returned and every output passed validation.
        outputs: Validated arrays by name (``"output"`` for a bare array); empty on failure.
        category: The failure category, ``None`` on success.
        message: One readable line (``"ValueError: ..."``, ``"timed out after 60 s"``).
        traceback_tail: Last lines of the traceback (exception category), else ``""``.
        stdout_tail: Last ``Limits.log_bytes`` bytes of stdout, decoded with replacement.
        stderr_tail: Same for stderr.
        duration_s: Host wall time of the run, sandbox start-up included.
        backend: ``"docker"`` or ``"process"``.
    """

    ok: bool
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    category: FailureCategory | None = None
    message: str = ""
    traceback_tail: str = ""
    stdout_tail: str = ""
    stderr_tail: str = ""
    duration_s: float = 0.0
    backend: str = ""


class SandboxUnavailable(RuntimeError):
    """A backend cannot run on this machine; the message says what to install or start."""


# -- concurrency ---------------------------------------------------------------------------------

_SEMAPHORE_LOCK = threading.Lock()
_SEMAPHORE: tuple[tuple[int, int], threading.BoundedSemaphore] | None = None


def concurrency_limit() -> int:
    """Runs allowed at once in this process: ``AGENTBENCH_SANDBOX_CONCURRENCY`` or the CPU count."""
    raw = os.environ.get("AGENTBENCH_SANDBOX_CONCURRENCY", "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"AGENTBENCH_SANDBOX_CONCURRENCY must be a positive integer, "
                             f"got {raw!r}") from None
        if value < 1:
            raise ValueError(f"AGENTBENCH_SANDBOX_CONCURRENCY must be >= 1, got {value}")
        return value
    return os.cpu_count() or 1


def _semaphore() -> threading.BoundedSemaphore:
    # Keyed by pid: a forked worker (gymnasium AsyncVectorEnv) must not inherit a semaphore whose
    # holders live in the parent. Keyed by the limit too, so a changed setting takes effect.
    global _SEMAPHORE
    key = (os.getpid(), concurrency_limit())
    with _SEMAPHORE_LOCK:
        if _SEMAPHORE is None or _SEMAPHORE[0] != key:
            _SEMAPHORE = (key, threading.BoundedSemaphore(key[1]))
        return _SEMAPHORE[1]


class Backend(abc.ABC):
    """A way to run untrusted code. Subclasses implement :meth:`_run`.

    Attributes:
        name: ``"docker"`` or ``"process"``.
        isolation: One line describing the isolation actually in force.
    """

    name: str = ""
    isolation: str = ""

    def run(
        self,
        source: str,
        entry: str,
        inputs: Mapping[str, np.ndarray],
        *,
        limits: Limits | None = None,
        output_shapes: OutputShapes | None = None,
    ) -> SandboxResult:
        """Run ``entry(**inputs)`` from ``source`` in the sandbox; see :func:`run_code`."""
        from agentbench_poad.sandbox._jobs import check_call

        check_call(source, entry, inputs, output_shapes)
        limits = limits or Limits()
        with _semaphore():
            return self._run(source, entry, inputs, limits, output_shapes)

    @abc.abstractmethod
    def _run(self, source: str, entry: str, inputs: Mapping[str, np.ndarray], limits: Limits,
             output_shapes: OutputShapes | None) -> SandboxResult:
        """Backend-specific run; arguments are already checked."""

    def close(self) -> None:  # noqa: B027 - optional hook: most backends hold nothing
        """Release what the backend holds (containers, threads). Idempotent."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}: {self.isolation}>"
