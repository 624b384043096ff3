"""The runner that executes *inside* the sandbox (a standalone script: stdlib + numpy only).

Usage: ``python3 -I -B harness.py IN_DIR OUT_DIR [--wait-go IDLE_S] [--preimport MOD,...]``.

``IN_DIR`` (read-only) holds ``job.json``, ``solution.py`` and ``inputs/<name>.npy``. ``OUT_DIR``
holds one FIFO the host created in advance and drains: ``result``; the sandbox can write to it
but create nothing there. The runner loads the inputs with ``allow_pickle=False``, compiles the
source, calls the entry with the inputs as keyword arguments and, once, writes to ``result`` a
one-line JSON status (category, one-line message, traceback tail, output names) followed by each
returned array as a ``.npy`` record (``allow_pickle=False``).

Nothing here is trusted by the host: the user code runs in this very process and can rewrite
any of it. The host validates the status fields and every array on its own.

With ``--wait-go`` the runner is a warm-pool container: it imports the heavy modules first, then
waits (up to ``IDLE_S`` seconds) for the host to drop the job and create ``IN_DIR/GO``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

MAX_MESSAGE = 400
MAX_TRACEBACK = 4000


def _write_status(out_dir: str, status: dict, records: list | None = None) -> None:
    """Write the status line, then the output records, to the host's FIFO (once, at the end)."""
    pieces = [json.dumps(status).encode("utf-8") + b"\n", *(records or [])]
    # Non-blocking open: with no reader (no host listening) this fails instead of hanging.
    try:
        fd = os.open(os.path.join(out_dir, "result"), os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        os.set_blocking(fd, True)
        for piece in pieces:
            view = memoryview(piece)
            while view:
                view = view[os.write(fd, view) :]
    except OSError:
        pass
    finally:
        os.close(fd)


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    text = " ".join(text.split())
    return text[:MAX_MESSAGE]


def _user_traceback(exc: BaseException) -> str:
    # Drop the runner's own frames: the model only needs to see its code.
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "solution.py"]
    lines = traceback.format_list(frames) + traceback.format_exception_only(type(exc), exc)
    return "".join(lines)[-MAX_TRACEBACK:]


def _wait_for_go(in_dir: str, idle_s: float) -> bool:
    go = os.path.join(in_dir, "GO")
    deadline = time.monotonic() + idle_s
    while time.monotonic() < deadline:
        if os.path.exists(go):
            return True
        time.sleep(0.003)
    return False


def main(argv: list[str]) -> int:
    in_dir, out_dir = argv[0], argv[1]
    wait_go = None
    preimport: list[str] = []
    rest = argv[2:]
    while rest:
        flag, value, rest = rest[0], rest[1], rest[2:]
        if flag == "--wait-go":
            wait_go = float(value)
        elif flag == "--preimport":
            preimport = [m for m in value.split(",") if m]

    if wait_go is not None:
        import importlib

        for module in preimport:
            try:
                importlib.import_module(module)
            except Exception:  # a missing optional module must not kill the pool
                pass
        if not _wait_for_go(in_dir, wait_go):
            return 0  # idle too long: the host will have replaced this container

    with open(os.path.join(in_dir, "job.json"), encoding="utf-8") as f:
        job = json.load(f)
    # The process backend runs Python with -S (no site, so no host .pth hooks) and names the
    # directories holding numpy/scikit-learn explicitly.
    for path in job.get("sys_path", []):
        if path not in sys.path:
            sys.path.append(path)

    import numpy as np

    entry = job["entry"]
    slots = int(job["slots"])
    inputs = {}
    for name in job["inputs"]:
        inputs[name] = np.load(os.path.join(in_dir, "inputs", name + ".npy"), allow_pickle=False)
    with open(os.path.join(in_dir, "solution.py"), encoding="utf-8") as f:
        source = f.read()

    try:
        code = compile(source, "solution.py", "exec")
    except (SyntaxError, ValueError) as exc:
        message = _one_line(exc)
        if isinstance(exc, SyntaxError) and exc.lineno:
            message = f"{type(exc).__name__}: {exc.msg} (line {exc.lineno})"
        _write_status(
            out_dir,
            {
                "category": "syntax_error",
                "message": message,
                "traceback": "".join(traceback.format_exception_only(type(exc), exc))[
                    -MAX_TRACEBACK:
                ],
            },
        )
        return 0

    import types

    module = types.ModuleType("solution")
    module.__file__ = "solution.py"
    sys.modules["solution"] = module
    try:
        exec(code, module.__dict__)
        function = module.__dict__.get(entry)
        if not callable(function):
            _write_status(
                out_dir,
                {
                    "category": "exception",
                    "message": f"NameError: the code defines no function named {entry!r}",
                    "traceback": "",
                },
            )
            return 0
        returned = function(**inputs)
    except MemoryError as exc:
        _write_status(
            out_dir,
            {
                "category": "memory_exceeded",
                "message": _one_line(exc),
                "traceback": _user_traceback(exc),
            },
        )
        return 0
    except BaseException as exc:  # SystemExit and KeyboardInterrupt from user code too
        _write_status(
            out_dir,
            {"category": "exception", "message": _one_line(exc), "traceback": _user_traceback(exc)},
        )
        return 0

    if isinstance(returned, np.ndarray):
        outputs = {"output": returned}
    elif isinstance(returned, dict) and all(isinstance(k, str) for k in returned):
        outputs = dict(returned)
    else:
        _write_status(
            out_dir,
            {
                "category": "output_invalid",
                "message": f"{entry} returned {type(returned).__name__}; expected a numpy array "
                f"or a dict of name -> numpy array",
                "traceback": "",
            },
        )
        return 0
    if len(outputs) > slots:
        _write_status(
            out_dir,
            {
                "category": "output_invalid",
                "message": f"{entry} returned {len(outputs)} outputs; at most {slots} are allowed",
                "traceback": "",
            },
        )
        return 0
    import io

    budget = int(job.get("max_output_bytes", 64 * 2**20))
    names, records, size = [], [], 0
    for name, array in outputs.items():
        if not isinstance(array, np.ndarray):
            _write_status(
                out_dir,
                {
                    "category": "output_invalid",
                    "message": f"output {name[:50]!r} is a "
                    f"{type(array).__name__}, not a numpy array",
                    "traceback": "",
                },
            )
            return 0
        buffer = io.BytesIO()
        try:
            np.save(buffer, array, allow_pickle=False)
        except (ValueError, OSError, MemoryError) as exc:  # object dtype, ...
            _write_status(
                out_dir,
                {
                    "category": "output_invalid",
                    "message": f"output {name[:50]!r} could not be written as "
                    f"a plain .npy: {_one_line(exc)}",
                    "traceback": "",
                },
            )
            return 0
        size += buffer.tell()
        if size > budget:
            _write_status(
                out_dir,
                {
                    "category": "output_invalid",
                    "message": f"the outputs take more than the limit of {budget} bytes",
                    "traceback": "",
                },
            )
            return 0
        names.append(name)
        records.append(buffer.getbuffer())
    _write_status(
        out_dir, {"category": "ok", "message": "", "traceback": "", "outputs": names}, records
    )
    return 0


if __name__ == "__main__":
    try:
        code = main(sys.argv[1:])
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    # _exit: threads or atexit hooks left by the user code must not keep the sandbox alive.
    os._exit(code)
