"""Host side of a run, shared by the backends: the job directory, the result stream, validation.

A job directory (private, 0700) holds::

    in/            0755, read-only for the sandbox
      harness.py   the runner (a fresh copy per job)
      job.json     entry name, input names, output count, output budget
      solution.py  the untrusted source
      inputs/*.npy numeric arrays, saved with allow_pickle=False
    out/           0755 and owned by the host: the sandbox cannot create files here
      result       a FIFO (named pipe), writable by the sandbox user

Everything the sandbox hands back goes through ``out/result``: one JSON status line, then the
returned arrays as consecutive ``.npy`` records. It is a pipe, not a file: the host drains it
while the run lasts (:class:`ResultStream`) and keeps at most the output budget in memory, so
nothing the sandbox writes there reaches the host's disk (a regular file could be grown past
``RLIMIT_FSIZE`` with ``fallocate(FALLOC_FL_KEEP_SIZE)``). ``out/`` holds no other file, and the
sandbox cannot create one there. Everything read back is checked: the status field by field,
each array with ``numpy.lib.format.read_array(allow_pickle=False)``, numeric dtype, finite
values, expected names and shapes, no trailing bytes.
"""

from __future__ import annotations

import io
import json
import os
import select
import shutil
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from agentbench_poad.sandbox.api import (
    MAX_OUTPUT_SLOTS,
    FailureCategory,
    Limits,
    OutputShapes,
    SandboxResult,
    valid_name,
)

#: Unprivileged uid/gid the sandbox runs as (``nobody`` on Debian).
SANDBOX_UID = 65534
#: Outputs a call may return when ``output_shapes`` does not name more.
OUTPUT_SLOTS = 8
#: The harness's status line is tiny; anything bigger is tampering.
MAX_STATUS_BYTES = 64_000
#: The name of the result FIFO in ``out/``.
RESULT = "result"
_HARNESS = Path(__file__).with_name("harness.py")
#: Categories the harness may report; "timeout" and "sandbox_error" are the host's to decide.
_HARNESS_CATEGORIES = {
    "syntax_error": FailureCategory.SYNTAX_ERROR,
    "exception": FailureCategory.EXCEPTION,
    "memory_exceeded": FailureCategory.MEMORY_EXCEEDED,
    "output_invalid": FailureCategory.OUTPUT_INVALID,
}


def slots_for(output_shapes: OutputShapes | None) -> int:
    """How many outputs a call may return."""
    return max(OUTPUT_SLOTS, len(output_shapes or ()))


def result_cap(limits: Limits) -> int:
    """Bytes of the result stream the host keeps: the status line and the output budget."""
    return MAX_STATUS_BYTES + 1 + limits.output_mb * 2**20


class ResultStream:
    """The host's end of a job's result FIFO, drained by a thread while the sandbox runs.

    Opened read-write, so the open never blocks and a read never sees end-of-file while the
    sandbox has not written yet; the thread reads whatever arrives and keeps the first ``cap``
    bytes (memory only, never a file); past that it counts and discards, so a writer that
    floods the pipe neither blocks on it nor grows the host's memory. :meth:`close` drains what
    is left in the pipe and ends the thread.
    """

    def __init__(self, path: Path, cap: int) -> None:
        self.cap = cap
        self.size = 0
        self._chunks: list[bytes] = []
        self._kept = 0
        self._fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drain, name="abp-sandbox-result", daemon=True)
        self._thread.start()

    def _read_available(self) -> None:
        while True:
            try:
                chunk = os.read(self._fd, 1 << 20)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # closed under us
                return
            if not chunk:
                return
            self.size += len(chunk)
            room = self.cap - self._kept
            if room > 0:
                self._chunks.append(chunk[:room])
                self._kept += min(room, len(chunk))

    def _drain(self) -> None:
        poller = select.poll()  # not select(): a busy host may hold descriptors past 1024
        poller.register(self._fd, select.POLLIN)
        while not self._stop.is_set():
            try:
                poller.poll(50)
            except OSError:
                return
            self._read_available()

    def close(self) -> bytes:
        """Stop the thread, drain the pipe, close it; the bytes kept (``size`` counts them all)."""
        if self._fd >= 0:
            self._stop.set()
            self._thread.join(timeout=10)
            self._read_available()
            os.close(self._fd)
            self._fd = -1
        return b"".join(self._chunks)

    @property
    def overflowed(self) -> bool:
        """True when more than ``cap`` bytes arrived."""
        return self.size > self.cap


def _can_chown() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


class JobDir:
    """A private per-run directory laid out as described in the module docstring."""

    def __init__(
        self,
        *,
        sandbox_uid: int | None = SANDBOX_UID,
        slots: int = OUTPUT_SLOTS,
        prefix: str = "abp-sbx-",
    ):
        if not 1 <= slots <= MAX_OUTPUT_SLOTS:
            raise ValueError(f"a call may return 1 to {MAX_OUTPUT_SLOTS} outputs, not {slots}")
        self.slots = slots
        self.root = Path(tempfile.mkdtemp(prefix=prefix))
        self.in_dir = self.root / "in"
        self.out_dir = self.root / "out"
        self.in_dir.mkdir(mode=0o755)
        (self.in_dir / "inputs").mkdir(mode=0o755)
        self.out_dir.mkdir(mode=0o755)
        for d in (self.in_dir, self.in_dir / "inputs", self.out_dir):
            d.chmod(0o755)  # mkdir's mode is filtered by the umask
        shutil.copyfile(_HARNESS, self.in_dir / "harness.py")
        (self.in_dir / "harness.py").chmod(0o644)
        chown = sandbox_uid is not None and _can_chown()
        path = self.out_dir / RESULT
        os.mkfifo(path, 0o600)
        if chown:
            os.chown(path, sandbox_uid, sandbox_uid)
            path.chmod(0o600)
        else:
            # Not root: the sandbox runs as some other uid we cannot give files to, so the
            # FIFO is world-writable inside our private 0700 job directory.
            path.chmod(0o666)
        self.stream: ResultStream | None = None

    def write_job(
        self,
        source: str,
        entry: str,
        inputs: Mapping[str, np.ndarray],
        extra: Mapping[str, Any] | None = None,
        *,
        limits: Limits | None = None,
    ) -> None:
        """Write the inputs, the source and ``job.json`` (``extra`` adds fields).

        ``limits`` gives the harness the output budget, so it can say "too large" itself (the
        host enforces the budget on its own as well).
        """
        for name, array in inputs.items():
            path = self.in_dir / "inputs" / f"{name}.npy"
            with open(path, "wb") as f:
                np.save(f, np.ascontiguousarray(array), allow_pickle=False)
            path.chmod(0o644)
        (self.in_dir / "solution.py").write_text(source, encoding="utf-8")
        (self.in_dir / "solution.py").chmod(0o644)
        job = {
            "entry": entry,
            "inputs": list(inputs),
            "slots": self.slots,
            "max_output_bytes": (limits or Limits()).output_mb * 2**20,
            **(extra or {}),
        }
        (self.in_dir / "job.json").write_text(json.dumps(job), encoding="utf-8")
        (self.in_dir / "job.json").chmod(0o644)

    def go(self) -> None:
        """Tell a waiting warm-pool harness to start (atomic: rename a finished file)."""
        tmp = self.in_dir / "GO.tmp"
        tmp.write_text("go")
        tmp.chmod(0o644)
        os.replace(tmp, self.in_dir / "GO")

    def listen(self, limits: Limits) -> None:
        """Start draining ``out/result`` (before the sandbox can write to it)."""
        if self.stream is None:
            self.stream = ResultStream(self.out_dir / RESULT, result_cap(limits))

    def collect(self) -> tuple[bytes, bool]:
        """Everything the sandbox wrote to ``out/result`` (up to the cap) and whether it overflowed."""
        if self.stream is None:
            return b"", False
        data = self.stream.close()
        return data, self.stream.overflowed

    def cleanup(self) -> None:
        if self.stream is not None:
            self.stream.close()
        shutil.rmtree(self.root, ignore_errors=True)


# -- reading results back --------------------------------------------------------------------


class _Invalid(Exception):
    pass


def read_status(raw: bytes) -> tuple[dict[str, Any] | None, bytes]:
    """The status line of a result stream, validated field by field, and the bytes after it.

    The status is ``None`` when absent or malformed (no newline within
    :data:`MAX_STATUS_BYTES`, not JSON, not a dict, an unknown category, wrong field types).
    """
    newline = raw.find(b"\n", 0, MAX_STATUS_BYTES + 1)
    if newline < 0:
        return None, b""
    line, rest = raw[:newline], raw[newline + 1 :]
    if not line.strip():
        return None, rest
    try:
        status = json.loads(line.decode("utf-8", errors="replace"))
    except ValueError:
        return None, rest
    if not isinstance(status, dict):
        return None, rest
    category = status.get("category")
    if category != "ok" and category not in _HARNESS_CATEGORIES:
        return None, rest
    message = status.get("message", "")
    trace = status.get("traceback", "")
    names = status.get("outputs", [])
    if not isinstance(message, str) or not isinstance(trace, str) or not isinstance(names, list):
        return None, rest
    return {
        "category": category,
        "message": " ".join(message.split())[:400],
        "traceback": trace[-4000:],
        "outputs": names,
    }, rest


_NPY_MAGIC = b"\x93NUMPY"


def read_outputs(
    payload: bytes,
    names: list[Any],
    limits: Limits,
    output_shapes: OutputShapes | None,
    slots: int = OUTPUT_SLOTS,
) -> dict[str, np.ndarray]:
    """Load and validate the arrays named by the status; raises ``_Invalid`` with the reason.

    ``payload`` is the rest of the result stream after the status line: one ``.npy`` record per
    name, in order, and nothing else.
    """
    if not names:
        raise _Invalid("the entry returned no outputs")
    if len(names) > slots:
        raise _Invalid(f"{len(names)} outputs; at most {slots} are allowed")
    if not all(isinstance(n, str) and valid_name(n) for n in names) or len(set(names)) != len(
        names
    ):
        raise _Invalid("output names must be distinct Python identifiers")
    if output_shapes is not None and set(names) != set(output_shapes):
        raise _Invalid(f"expected outputs {sorted(output_shapes)}, got {sorted(names)}")
    budget = limits.output_mb * 2**20
    if len(payload) > budget:
        raise _Invalid(f"the outputs are {len(payload)} bytes; the limit is {budget}")
    stream = io.BytesIO(payload)
    outputs: dict[str, np.ndarray] = {}
    for name in names:
        at = stream.tell()
        if payload[at : at + len(_NPY_MAGIC)] != _NPY_MAGIC:
            raise _Invalid(f"output {name!r} is not a valid .npy array (no .npy header)")
        try:
            array = np.lib.format.read_array(stream, allow_pickle=False)
        except Exception as exc:  # noqa: BLE001 - any parse failure is the sandbox's fault
            raise _Invalid(
                f"output {name!r} is not a valid .npy array ({type(exc).__name__})"
            ) from None
        if not isinstance(array, np.ndarray) or array.dtype.kind not in "biuf":
            raise _Invalid(
                f"output {name!r} has dtype {getattr(array, 'dtype', '?')}; a numeric "
                f"(bool, int or float) array is required"
            )
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            raise _Invalid(f"output {name!r} contains NaN or infinite values")
        if output_shapes is not None:
            expected = tuple(output_shapes[name])
            if len(expected) != array.ndim or any(
                e is not None and e != s for e, s in zip(expected, array.shape)
            ):
                shown = tuple("any" if e is None else e for e in expected)
                raise _Invalid(f"output {name!r} has shape {array.shape}; expected {shown}")
        outputs[name] = array
    if stream.tell() != len(payload):
        raise _Invalid(f"{len(payload) - stream.tell()} bytes follow the last output")
    return outputs


def tail(data: bytes, limit: int) -> str:
    """Decode the last ``limit`` bytes."""
    if limit <= 0:
        return ""
    return data[-limit:].decode("utf-8", errors="replace")


def classify(
    job: JobDir,
    *,
    limits: Limits,
    output_shapes: OutputShapes | None,
    backend: str,
    duration_s: float,
    stdout: bytes,
    stderr: bytes,
    timed_out: bool,
    memory_killed: bool,
    exit_description: str,
    cpu_limited: bool = False,
) -> SandboxResult:
    """Turn what the host observed into a :class:`SandboxResult`.

    Precedence: the host's own observations (deadline, OOM kill) first, then the harness status,
    and success only when the status says ok *and* every output validates.
    """
    result = SandboxResult(
        ok=False,
        stdout_tail=tail(stdout, limits.log_bytes),
        stderr_tail=tail(stderr, limits.log_bytes),
        duration_s=duration_s,
        backend=backend,
    )
    if timed_out or cpu_limited:
        result.category = FailureCategory.TIMEOUT
        result.message = (
            f"timed out after {limits.wall_time_s:g} s"
            if timed_out
            else "CPU time limit reached (the code kept computing past the deadline)"
        )
        return result
    if memory_killed:
        result.category = FailureCategory.MEMORY_EXCEEDED
        result.message = f"killed for exceeding the memory limit of {limits.memory_mb} MiB"
        return result
    raw, overflowed = job.collect()
    status, payload = read_status(raw)
    if status is None:
        result.category = FailureCategory.EXCEPTION
        result.message = (
            f"the code ended the sandboxed process ({exit_description}) before its entry returned"
        )
        return result
    if status["category"] != "ok":
        result.category = _HARNESS_CATEGORIES[status["category"]]
        result.message = status["message"] or result.category.value
        result.traceback_tail = status["traceback"]
        return result
    try:
        if overflowed:
            raise _Invalid(
                f"the result is {job.stream.size if job.stream else 0} bytes; the limit is "
                f"{limits.output_mb * 2**20} bytes of outputs"
            )
        outputs = read_outputs(payload, status["outputs"], limits, output_shapes, job.slots)
    except _Invalid as exc:
        result.category = FailureCategory.OUTPUT_INVALID
        result.message = str(exc)
        return result
    result.ok = True
    result.outputs = outputs
    result.message = "ok"
    return result


def sandbox_error(message: str, *, backend: str, duration_s: float = 0.0) -> SandboxResult:
    """A failure of the sandbox machinery itself (not of the user's code)."""
    return SandboxResult(
        ok=False,
        category=FailureCategory.SANDBOX_ERROR,
        message=message,
        duration_s=duration_s,
        backend=backend,
    )
