"""Public types of the sandbox: limits, results, failure categories and the backend base class.

The contract every backend honours: untrusted Python source runs in another process (a container
or a namespaced, unprivileged child), gets numeric arrays in as read-only ``.npy`` files, and
hands arrays back as ``.npy`` files that the host validates before anything is returned. Nothing
else the sandbox says is trusted: a forged "ok" status without valid outputs is a failure.
"""

from __future__ import annotations

import abc
import keyword
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from agentbench_poad.core import to_text
from agentbench_poad.sandbox.concurrency import run_slot

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
        output_mb: Maximum total size of the returned arrays (the host keeps no more of what
            the code writes to its result pipe).
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
            raise ValueError(
                f"Limits.pids must be at least 8 (Python itself needs a few), got {self.pids}"
            )

    @property
    def file_size_bytes(self) -> int:
        """RLIMIT_FSIZE / docker ``fsize``: the largest file the sandbox may write (in its
        scratch space: nothing it writes reaches the host's disk, docs/sandbox.md)."""
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

    :meth:`Backend.run` returns these texts sanitised and capped (:func:`seal`).
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


#: Caps (characters, after escaping) on the texts of a result that carry the code's own words.
MAX_MESSAGE_CHARS = 2_000
MAX_TRACEBACK_CHARS = 4_000


def seal(result: SandboxResult, limits: Limits) -> SandboxResult:
    """Pass every text of ``result`` through the observation sanitiser, capped.

    The code chooses these texts (an exception can carry a whole file it read), so they are
    escaped to printable ASCII and capped by :func:`agentbench_poad.core.to_text`:
    ``message`` at :data:`MAX_MESSAGE_CHARS`, ``traceback_tail`` at
    :data:`MAX_TRACEBACK_CHARS`, the stdout and stderr tails at ``limits.log_bytes``. Idempotent.
    """
    result.message = to_text(result.message, MAX_MESSAGE_CHARS)
    result.traceback_tail = to_text(result.traceback_tail, MAX_TRACEBACK_CHARS)
    result.stdout_tail = to_text(result.stdout_tail, limits.log_bytes)
    result.stderr_tail = to_text(result.stderr_tail, limits.log_bytes)
    return result


class SandboxUnavailable(RuntimeError):
    """A backend cannot run on this machine; the message says what to install or start."""


# -- call checks ---------------------------------------------------------------------------------

#: Hard cap on outputs per call: each one may reach the file-size limit on the host disk.
MAX_OUTPUT_SLOTS = 64
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def valid_name(name: str) -> bool:
    """True for a Python identifier of at most 64 characters that is not a keyword."""
    return bool(_NAME.match(name)) and not keyword.iskeyword(name)


def check_call(
    source: object, entry: object, inputs: object, output_shapes: OutputShapes | None
) -> None:
    """Reject caller mistakes (these are bugs on the host side, not sandbox failures)."""
    import numpy as np

    if not isinstance(source, str):
        raise TypeError(f"source must be a str, got {type(source).__name__}")
    if not isinstance(entry, str) or not valid_name(entry):
        raise ValueError(f"entry must be a Python identifier, got {entry!r}")
    if not isinstance(inputs, Mapping):
        raise TypeError(
            f"inputs must be a mapping of name -> numpy array, got {type(inputs).__name__}"
        )
    for name, array in inputs.items():
        if not isinstance(name, str) or not valid_name(name):
            raise ValueError(
                f"input names must be Python identifiers (they become keyword "
                f"arguments), got {name!r}"
            )
        if not isinstance(array, np.ndarray) or array.dtype.kind not in "biuf":
            raise TypeError(
                f"input {name!r} must be a numeric numpy array (bool, int, uint or "
                f"float); convert it on the host first"
            )
    if output_shapes is not None:
        if len(output_shapes) > MAX_OUTPUT_SLOTS:
            raise ValueError(
                f"at most {MAX_OUTPUT_SLOTS} outputs per call, got {len(output_shapes)}"
            )
        for name, shape in output_shapes.items():
            if not valid_name(name) or not all(d is None or isinstance(d, int) for d in shape):
                raise ValueError(
                    f"output_shapes must map identifiers to tuples of int | None, "
                    f"got {name!r}: {shape!r}"
                )


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
        check_call(source, entry, inputs, output_shapes)
        limits = limits or Limits()
        with run_slot():
            result = self._run(source, entry, inputs, limits, output_shapes)
        return seal(result, limits)

    @abc.abstractmethod
    def _run(
        self,
        source: str,
        entry: str,
        inputs: Mapping[str, np.ndarray],
        limits: Limits,
        output_shapes: OutputShapes | None,
    ) -> SandboxResult:
        """Backend-specific run; arguments are already checked."""

    def close(self) -> None:  # noqa: B027 - optional hook: most backends hold nothing
        """Release what the backend holds (containers, threads). Idempotent."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}: {self.isolation}>"
