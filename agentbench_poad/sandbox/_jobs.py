"""Host side of a run, shared by the backends: the job directory and result validation.

A job directory (private, 0700) holds::

    in/            0755, read-only for the sandbox
      harness.py   the runner (a fresh copy per job)
      job.json     entry name, input names, slot count
      solution.py  the untrusted source
      inputs/*.npy numeric arrays, saved with allow_pickle=False
    out/           0755 and owned by the host: the sandbox cannot create files here
      status.json  pre-created, writable by the sandbox user
      slot_<i>.npy pre-created, writable by the sandbox user (size capped by RLIMIT_FSIZE)

Only pre-created files are writable, so the sandbox cannot fill the host disk through ``out/``
and cannot plant links there. Everything read back is checked: regular file, one link, size
caps, ``np.load(allow_pickle=False)``, numeric dtype, finite values, expected shapes.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
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
#: Output files pre-created per job (more when ``output_shapes`` names more outputs).
OUTPUT_SLOTS = 8
#: The harness's status file is tiny; anything bigger is tampering.
MAX_STATUS_BYTES = 64_000
_HARNESS = Path(__file__).with_name("harness.py")
#: Categories the harness may report; "timeout" and "sandbox_error" are the host's to decide.
_HARNESS_CATEGORIES = {
    "syntax_error": FailureCategory.SYNTAX_ERROR,
    "exception": FailureCategory.EXCEPTION,
    "memory_exceeded": FailureCategory.MEMORY_EXCEEDED,
    "output_invalid": FailureCategory.OUTPUT_INVALID,
}


def slots_for(output_shapes: OutputShapes | None) -> int:
    """Output files to pre-create for a call."""
    return max(OUTPUT_SLOTS, len(output_shapes or ()))


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
        for name in ["status.json", *(f"slot_{i}.npy" for i in range(slots))]:
            path = self.out_dir / name
            path.touch()
            if chown:
                os.chown(path, sandbox_uid, sandbox_uid)
                path.chmod(0o600)
            else:
                # Not root: the sandbox runs as some other uid we cannot give files to, so the
                # slots are world-writable inside our private 0700 job directory.
                path.chmod(0o666)

    def write_job(
        self,
        source: str,
        entry: str,
        inputs: Mapping[str, np.ndarray],
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Write the inputs, the source and ``job.json`` (``extra`` adds fields)."""
        for name, array in inputs.items():
            path = self.in_dir / "inputs" / f"{name}.npy"
            with open(path, "wb") as f:
                np.save(f, np.ascontiguousarray(array), allow_pickle=False)
            path.chmod(0o644)
        (self.in_dir / "solution.py").write_text(source, encoding="utf-8")
        (self.in_dir / "solution.py").chmod(0o644)
        job = {"entry": entry, "inputs": list(inputs), "slots": self.slots, **(extra or {})}
        (self.in_dir / "job.json").write_text(json.dumps(job), encoding="utf-8")
        (self.in_dir / "job.json").chmod(0o644)

    def go(self) -> None:
        """Tell a waiting warm-pool harness to start (atomic: rename a finished file)."""
        tmp = self.in_dir / "GO.tmp"
        tmp.write_text("go")
        tmp.chmod(0o644)
        os.replace(tmp, self.in_dir / "GO")

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


# -- reading results back --------------------------------------------------------------------


class _Invalid(Exception):
    pass


def _read_capped(path: Path, cap: int) -> bytes:
    """Read a regular, singly-linked file no bigger than ``cap`` without following links."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise _Invalid(f"{path.name} cannot be opened ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            raise _Invalid(f"{path.name} is not a plain file")
        if st.st_size > cap:
            raise _Invalid(f"{path.name} is {st.st_size} bytes; the limit is {cap}")
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, cap + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > cap:
                raise _Invalid(f"{path.name} grew past the limit of {cap} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_status(out_dir: Path) -> dict[str, Any] | None:
    """The harness's status, validated field by field; ``None`` when absent or malformed."""
    try:
        raw = _read_capped(out_dir / "status.json", MAX_STATUS_BYTES)
    except _Invalid:
        return None
    if not raw.strip():
        return None
    try:
        status = json.loads(raw.decode("utf-8", errors="replace"))
    except ValueError:
        return None
    if not isinstance(status, dict):
        return None
    category = status.get("category")
    if category != "ok" and category not in _HARNESS_CATEGORIES:
        return None
    message = status.get("message", "")
    trace = status.get("traceback", "")
    names = status.get("outputs", [])
    if not isinstance(message, str) or not isinstance(trace, str) or not isinstance(names, list):
        return None
    return {
        "category": category,
        "message": " ".join(message.split())[:400],
        "traceback": trace[-4000:],
        "outputs": names,
    }


def read_outputs(
    out_dir: Path,
    names: list[Any],
    limits: Limits,
    output_shapes: OutputShapes | None,
    slots: int = OUTPUT_SLOTS,
) -> dict[str, np.ndarray]:
    """Load and validate the arrays named by the status; raises ``_Invalid`` with the reason."""
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
    outputs: dict[str, np.ndarray] = {}
    for index, name in enumerate(names):
        raw = _read_capped(out_dir / f"slot_{index}.npy", budget)
        budget -= len(raw)
        try:
            import io

            array = np.load(io.BytesIO(raw), allow_pickle=False)
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
    status = read_status(job.out_dir)
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
        outputs = read_outputs(job.out_dir, status["outputs"], limits, output_shapes, job.slots)
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
