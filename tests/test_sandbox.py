"""Functional tests of the sandbox API over both backends (docker ones need an engine)."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import numpy as np
import pytest

from agentbench_poad.sandbox import (
    Backend,
    FailureCategory,
    Limits,
    SandboxResult,
    _jobs,
    get_backend,
    run_code,
    sandbox_status,
)
from agentbench_poad.sandbox.concurrency import MachineSlots, concurrency_limit

FAST = Limits(wall_time_s=20, memory_mb=1024, pids=64, tmpfs_mb=64, log_bytes=4000)


@pytest.fixture(
    scope="module", params=["process", pytest.param("docker", marks=pytest.mark.docker)]
)
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "docker":
        request.getfixturevalue("sandbox_image")
    b = get_backend(request.param)
    yield b
    b.close()


def run(
    backend: Backend,
    source: str,
    inputs=None,
    *,
    entry: str = "f",
    limits: Limits = FAST,
    output_shapes=None,
) -> SandboxResult:
    return backend.run(
        textwrap.dedent(source), entry, inputs or {}, limits=limits, output_shapes=output_shapes
    )


# -- the happy paths ---------------------------------------------------------------------------


def test_array_in_array_out(backend: Backend) -> None:
    x = np.arange(12, dtype=np.float64).reshape(4, 3)
    result = run(
        backend,
        """
        import numpy as np
        def f(x, w):
            print("shape", x.shape)
            return x @ w
    """,
        {"x": x, "w": np.ones(3)},
    )
    assert result.ok, result
    assert result.category is None and result.backend == backend.name
    np.testing.assert_array_equal(result.outputs["output"], x @ np.ones(3))
    assert "shape (4, 3)" in result.stdout_tail
    assert result.duration_s > 0


def test_dict_outputs_and_shapes(backend: Backend) -> None:
    result = run(
        backend,
        """
        import numpy as np
        def f(n):
            k = int(n[0])
            return {"scores": np.linspace(0, 1, k), "labels": np.arange(k) % 2 == 0}
    """,
        {"n": np.array([5])},
        output_shapes={"scores": (None,), "labels": (5,)},
    )
    assert result.ok, result
    assert set(result.outputs) == {"scores", "labels"}
    assert result.outputs["labels"].dtype == np.bool_
    np.testing.assert_allclose(result.outputs["scores"], np.linspace(0, 1, 5))


def test_more_outputs_than_the_default_slots(backend: Backend) -> None:
    shapes = {f"proba_{i}": (2,) for i in range(12)}
    result = run(
        backend,
        """
        import numpy as np
        def f():
            return {f"proba_{i}": np.full(2, i) for i in range(12)}
    """,
        output_shapes=shapes,
    )
    assert result.ok, result
    assert [int(result.outputs[f"proba_{i}"][0]) for i in range(12)] == list(range(12))
    too_many = run(
        backend,
        """
        import numpy as np
        def f():
            return {f"o{i}": np.zeros(1) for i in range(9)}
    """,
    )
    assert too_many.category is FailureCategory.OUTPUT_INVALID and "at most 8" in too_many.message


def test_sklearn_fit_predict(backend: Backend) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 5))
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    result = run(
        backend,
        """
        from sklearn.linear_model import LogisticRegression
        def f(x_train, y_train, x_test):
            model = LogisticRegression().fit(x_train, y_train)
            return model.predict_proba(x_test)
    """,
        {"x_train": x[:150], "y_train": y[:150], "x_test": x[150:]},
        output_shapes={"output": (50, 2)},
    )
    assert result.ok, result
    proba = result.outputs["output"]
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert ((proba[:, 1] > 0.5) == y[150:]).mean() > 0.8


def test_syntax_error(backend: Backend) -> None:
    result = run(backend, "def f(:\n    return 1\n")
    assert result.category is FailureCategory.SYNTAX_ERROR and not result.ok
    assert result.message.startswith("SyntaxError") and "line 1" in result.message
    assert result.outputs == {}


def test_exception_has_traceback_tail(backend: Backend) -> None:
    result = run(
        backend,
        """
        def helper(v):
            raise ValueError(f"bad value {v}")
        def f():
            helper(42)
    """,
    )
    assert result.category is FailureCategory.EXCEPTION
    assert result.message == "ValueError: bad value 42"
    assert "solution.py" in result.traceback_tail and "helper" in result.traceback_tail
    assert "harness" not in result.traceback_tail  # the runner's own frames are dropped


def test_missing_entry_and_wrong_return_type(backend: Backend) -> None:
    missing = run(backend, "def g():\n    return 1\n")
    assert missing.category is FailureCategory.EXCEPTION and "'f'" in missing.message
    wrong = run(backend, "def f():\n    return [1, 2, 3]\n")
    assert wrong.category is FailureCategory.OUTPUT_INVALID and "list" in wrong.message


def test_inputs_are_read_only_files(backend: Backend) -> None:
    result = run(
        backend,
        """
        import os, sys
        def f(x):
            x += 1  # the in-memory copy is the code's own
            path = os.path.join(sys.argv[1], "inputs", "x.npy")
            try:
                with open(path, "r+b") as fh:
                    fh.write(b"tampered")
            except OSError as exc:
                print("denied:", type(exc).__name__)
                return x
            raise RuntimeError("the input file was writable")
    """,
        {"x": np.zeros(3)},
    )
    assert result.ok, result
    assert "denied:" in result.stdout_tail
    np.testing.assert_array_equal(result.outputs["output"], np.ones(3))


def test_stderr_is_captured(backend: Backend) -> None:
    result = run(
        backend,
        """
        import sys, numpy as np
        def f():
            print("to stderr", file=sys.stderr)
            return np.zeros(1)
    """,
    )
    assert result.ok and "to stderr" in result.stderr_tail


# -- caller errors are exceptions, not results ----------------------------------------------------


def test_bad_calls_raise() -> None:
    backend = get_backend("process")
    with pytest.raises(TypeError, match="numeric"):
        backend.run("def f(x): return x", "f", {"x": np.array(["a"])})
    with pytest.raises(ValueError, match="identifier"):
        backend.run("def f(x): return x", "f", {"not valid": np.zeros(1)})
    with pytest.raises(ValueError, match="identifier"):
        backend.run("def f(): return 1", "f()", {})
    with pytest.raises(TypeError, match="source"):
        backend.run(b"def f(): pass", "f", {})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown sandbox backend"):
        get_backend("vm")
    with pytest.raises(ValueError, match="no warm pool"):
        get_backend("process", pool_size=2)


def test_limits_validate() -> None:
    with pytest.raises(ValueError, match="wall_time_s"):
        Limits(wall_time_s=0)
    with pytest.raises(ValueError, match="pids"):
        Limits(pids=2)
    limits = Limits(output_mb=8, tmpfs_mb=32, cpus=1.5)
    assert limits.file_size_bytes == 32 * 2**20 and limits.threads == 2


def test_concurrency_limit_reads_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTBENCH_SANDBOX_CONCURRENCY", "3")
    assert concurrency_limit() == 3
    monkeypatch.setenv("AGENTBENCH_SANDBOX_CONCURRENCY", "zero")
    with pytest.raises(ValueError, match="AGENTBENCH_SANDBOX_CONCURRENCY"):
        concurrency_limit()
    monkeypatch.delenv("AGENTBENCH_SANDBOX_CONCURRENCY")
    assert concurrency_limit() == (os.cpu_count() or 1)


def test_concurrency_limit_serialises_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    monkeypatch.setenv("AGENTBENCH_SANDBOX_CONCURRENCY", "1")
    backend = get_backend("process")
    source = (
        "import time, numpy as np\ndef f():\n    t0 = time.time()\n    time.sleep(0.4)\n"
        "    return np.array([t0, time.time()])\n"
    )
    intervals: list[np.ndarray] = []

    def one() -> None:
        result = backend.run(source, "f", {}, limits=FAST)
        assert result.ok, result
        intervals.append(result.outputs["output"])

    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    intervals.sort(key=lambda iv: iv[0])
    assert len(intervals) == 3
    for earlier, later in zip(intervals, intervals[1:]):
        assert later[0] >= earlier[1], "two runs overlapped despite a limit of 1"


def test_machine_slots_bound_runs_across_processes(tmp_path):
    """AsyncVectorEnv / xdist workers are processes: the bound on sandbox runs crosses them."""
    import subprocess
    import sys

    slots = MachineSlots(2, directory=tmp_path)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from agentbench_poad.sandbox.concurrency import MachineSlots\n"
            f"fd = MachineSlots(2, directory={str(tmp_path)!r}).try_acquire()\n"
            "print('held' if fd is not None else 'none', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        mine = slots.try_acquire()
        assert mine is not None
        assert slots.try_acquire() is None  # one slot in the other process, one here
        holder.stdin.close()
        holder.wait(timeout=30)  # the kernel drops the exited holder's lock
        other = slots.try_acquire()
        assert other is not None
        slots.release(other)
        slots.release(mine)
    finally:
        holder.kill()
        holder.wait()


def test_every_run_holds_a_machine_slot(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """The sandbox itself (not its callers) waits for a machine-wide slot before a run."""
    import threading
    import time

    from agentbench_poad.sandbox.concurrency import SLOTS_DIR_ENV_VAR

    monkeypatch.setenv("AGENTBENCH_SANDBOX_CONCURRENCY", "1")
    monkeypatch.setenv(SLOTS_DIR_ENV_VAR, str(tmp_path))
    backend = get_backend("process")
    taken = MachineSlots(1, directory=tmp_path).try_acquire()  # as another process would
    assert taken is not None
    results: list = []
    worker = threading.Thread(
        target=lambda: results.append(
            backend.run(
                "import time, numpy as np\ndef f():\n    return np.array([time.time()])\n",
                "f",
                {},
                limits=FAST,
            )
        )
    )
    worker.start()
    time.sleep(0.5)
    released_at = time.time()
    MachineSlots.release(taken)
    worker.join(timeout=120)
    (result,) = results
    assert result.ok, result
    assert result.outputs["output"][0] >= released_at, "the run did not wait for the slot"


def _run_in_forked_worker(value: int) -> list[float]:
    result = run_code(
        "def f(v):\n    return v * 2\n",
        "f",
        {"v": np.array([float(value)])},
        backend="process",
        limits=FAST,
    )
    return result.outputs["output"].tolist() if result.ok else [result.message]


def test_forked_workers_run_independently() -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    run_code(
        "def f():\n    import numpy\n    return numpy.zeros(1)\n",
        "f",
        {},
        backend="process",
        limits=FAST,
    )  # the parent holds a default backend first
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
        assert list(pool.map(_run_in_forked_worker, [1, 2, 3])) == [[2.0], [4.0], [6.0]]


def test_run_code_with_backend_name() -> None:
    result = run_code(
        "import numpy as np\ndef f(a):\n    return a * 3\n",
        "f",
        {"a": np.array([1, 2])},
        backend="process",
        limits=FAST,
    )
    assert result.ok and result.backend == "process"
    np.testing.assert_array_equal(result.outputs["output"], [3, 6])


def test_process_backend_says_it_is_weaker() -> None:
    backend = get_backend("process")
    assert backend.name == "process" and "weaker" in backend.isolation


def test_auto_falls_back_to_process_when_the_image_is_missing() -> None:
    backend = get_backend("auto", image="agentbench-poad-sandbox:does-not-exist")
    assert backend.name == "process"


def test_sandbox_status_reports_both_backends() -> None:
    status = sandbox_status(image="agentbench-poad-sandbox:does-not-exist")
    assert set(status) == {"docker", "process", "auto"}
    assert status["docker"]["usable"] is False and status["docker"]["why"]
    assert status["process"]["usable"] is True and status["auto"] == "process"
    assert "process" in str(status) and "NOT usable" in str(status)
    json.dumps(status)  # plain data


@pytest.mark.docker
def test_docker_without_its_image_names_the_fix() -> None:
    from agentbench_poad.sandbox import SandboxUnavailable

    with pytest.raises(SandboxUnavailable, match="agentbench-poad sandbox build"):
        get_backend("docker", image="agentbench-poad-sandbox:does-not-exist")


def test_build_image_rejects_unknown_modes() -> None:
    from agentbench_poad.sandbox.image import build_image

    with pytest.raises(ValueError, match="offline"):
        build_image("sideways", progress=lambda line: None)


@pytest.mark.docker
def test_auto_picks_docker_when_the_engine_and_image_exist() -> None:
    backend = get_backend("auto")
    try:
        assert backend.name == "docker" and "uid 65534" in backend.isolation
    finally:
        backend.close()


# -- host-side validation (unit level: the sandbox is not needed to forge files) -----------------


def _write_result(job: _jobs.JobDir, data: bytes) -> None:
    """Write ``data`` into the job's result FIFO, as the sandbox would (the host is listening)."""
    fd = os.open(job.out_dir / _jobs.RESULT, os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _job_with(status, slots: dict[int, bytes], limits: Limits = FAST) -> _jobs.JobDir:
    """A job whose result stream holds ``status`` as its line and the records in index order."""
    job = _jobs.JobDir(sandbox_uid=None)
    job.listen(limits)
    records = b"".join(data for _, data in sorted(slots.items()))
    _write_result(job, json.dumps(status).encode() + b"\n" + records)
    return job


def _npy(array: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=array.dtype == object)
    return buf.getvalue()


def _classify(job: _jobs.JobDir, limits: Limits = FAST, **kw) -> SandboxResult:
    try:
        return _jobs.classify(
            job,
            limits=limits,
            output_shapes=kw.pop("output_shapes", None),
            backend="test",
            duration_s=0.1,
            stdout=b"",
            stderr=b"",
            timed_out=False,
            memory_killed=False,
            exit_description="exit 0",
            **kw,
        )
    finally:
        job.cleanup()


def test_classify_accepts_valid_outputs() -> None:
    job = _job_with({"category": "ok", "outputs": ["a"]}, {0: _npy(np.arange(3.0))})
    result = _classify(job)
    assert result.ok and list(result.outputs) == ["a"]


@pytest.mark.parametrize(
    "status,slot,reason",
    [
        ({"category": "ok", "outputs": ["a"]}, _npy(np.array([1.0, np.inf])), "NaN or infinite"),
        ({"category": "ok", "outputs": ["a"]}, _npy(np.array(["x"])), "dtype"),
        ({"category": "ok", "outputs": ["a"]}, _npy(np.array([{}], dtype=object)), "valid .npy"),
        ({"category": "ok", "outputs": ["a"]}, b"\x80\x04K\x01.", "valid .npy"),  # a pickle
        ({"category": "ok", "outputs": ["a"]}, b"", "valid .npy"),
        ({"category": "ok", "outputs": []}, b"", "no outputs"),
        ({"category": "ok", "outputs": ["a", "a"]}, _npy(np.zeros(1)), "distinct"),
        ({"category": "ok", "outputs": ["../x"]}, _npy(np.zeros(1)), "identifiers"),
        ({"category": "ok", "outputs": ["o"] * 0 + [f"o{i}" for i in range(9)]}, b"", "at most"),
    ],
)
def test_classify_rejects_forged_outputs(status: dict, slot: bytes, reason: str) -> None:
    result = _classify(_job_with(status, {0: slot}))
    assert result.category is FailureCategory.OUTPUT_INVALID and not result.ok
    assert reason in result.message and result.outputs == {}


def test_classify_checks_shape_and_names() -> None:
    ok = {"category": "ok", "outputs": ["output"]}
    shaped = _classify(
        _job_with(ok, {0: _npy(np.zeros((2, 3)))}), output_shapes={"output": (2, None)}
    )
    assert shaped.ok
    wrong = _classify(_job_with(ok, {0: _npy(np.zeros((2, 3)))}), output_shapes={"output": (3,)})
    assert wrong.category is FailureCategory.OUTPUT_INVALID and "shape" in wrong.message
    other = _classify(_job_with(ok, {0: _npy(np.zeros(2))}), output_shapes={"scores": (2,)})
    assert other.category is FailureCategory.OUTPUT_INVALID and "expected outputs" in other.message


def test_classify_caps_output_size() -> None:
    small = Limits(output_mb=1)
    job = _job_with({"category": "ok", "outputs": ["a"]}, {0: _npy(np.zeros(2**18))}, small)
    result = _classify(job, small)  # 2 MiB of outputs against a 1 MiB budget
    assert result.category is FailureCategory.OUTPUT_INVALID and "limit" in result.message
    # the host kept no more of the stream than the status line and the budget
    assert job.stream.size > _jobs.result_cap(small) >= len(job.stream.close())


def test_result_stream_takes_exactly_the_named_records() -> None:
    ok = {"category": "ok", "outputs": ["a", "b"]}
    both = _classify(_job_with(ok, {0: _npy(np.arange(3.0)), 1: _npy(np.ones(2, bool))}))
    assert both.ok and both.outputs["b"].dtype == np.bool_
    trailing = _classify(_job_with(ok, {0: _npy(np.zeros(1)), 1: _npy(np.zeros(1)) + b"x"}))
    assert trailing.category is FailureCategory.OUTPUT_INVALID and "follow" in trailing.message
    missing = _classify(_job_with(ok, {0: _npy(np.zeros(1))}))
    assert missing.category is FailureCategory.OUTPUT_INVALID and "'b'" in missing.message
    buf = __import__("io").BytesIO()
    np.savez(buf, a=np.zeros(1))  # a zip archive, which np.load would open: refused unread
    npz = _classify(_job_with({"category": "ok", "outputs": ["a"]}, {0: buf.getvalue()}))
    assert npz.category is FailureCategory.OUTPUT_INVALID and "header" in npz.message


def test_nothing_but_the_result_fifo_is_in_out() -> None:
    """The sandbox's only way out is a pipe: no file in out/ can hold bytes on the host's disk."""
    import stat

    job = _jobs.JobDir(sandbox_uid=None)
    try:
        entries = list(job.out_dir.iterdir())
        assert [e.name for e in entries] == [_jobs.RESULT]
        assert stat.S_ISFIFO(entries[0].lstat().st_mode)
    finally:
        job.cleanup()


@pytest.mark.parametrize(
    "status",
    [
        {"category": "timeout", "message": "forged"},  # only the host decides timeouts
        {"category": "sandbox_error", "message": "forged"},
        {"category": "ok", "outputs": "output"},
        ["not", "a", "dict"],
        "x" * (_jobs.MAX_STATUS_BYTES + 10),
    ],
)
def test_classify_ignores_malformed_status(status) -> None:
    result = _classify(_job_with(status, {}))
    assert (
        result.category is FailureCategory.EXCEPTION
        and "before its entry returned" in result.message
    )


def test_host_observations_take_precedence() -> None:
    job = _job_with({"category": "ok", "outputs": ["a"]}, {0: _npy(np.zeros(1))})
    timed_out = _jobs.classify(
        job,
        limits=FAST,
        output_shapes=None,
        backend="t",
        duration_s=1,
        stdout=b"x" * 10_000,
        stderr=b"",
        timed_out=True,
        memory_killed=False,
        exit_description="killed",
    )
    assert timed_out.category is FailureCategory.TIMEOUT and "20 s" in timed_out.message
    assert len(timed_out.stdout_tail) == FAST.log_bytes
    oom = _jobs.classify(
        job,
        limits=FAST,
        output_shapes=None,
        backend="t",
        duration_s=1,
        stdout=b"",
        stderr=b"",
        timed_out=False,
        memory_killed=True,
        exit_description="killed",
    )
    job.cleanup()
    assert oom.category is FailureCategory.MEMORY_EXCEEDED and not oom.ok


# -- the CLI ------------------------------------------------------------------------------------


def test_cli_status_and_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from agentbench_poad.cli import main

    assert main(["sandbox", "status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["process"]["usable"] is True
    script = tmp_path / "job.py"
    script.write_text("import numpy as np\ndef go():\n    return np.arange(4)\n")
    assert main(["sandbox", "run", str(script), "go", "--backend", "process"]) == 0
    out = capsys.readouterr().out
    assert "result: ok" in out and "output: int64 (4,)" in out
    script.write_text("def go():\n    raise KeyError('nope')\n")
    assert main(["sandbox", "run", str(script), "go", "--backend", "process"]) == 1
    assert "exception: KeyError: 'nope'" in capsys.readouterr().out


def test_cli_build_flags() -> None:
    from agentbench_poad.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["sandbox", "build"]).mode == "auto"
    args = parser.parse_args(["sandbox", "build", "--offline", "--mirror", "http://m/debian"])
    assert (args.mode, args.mirror, args.tag) == ("offline", "http://m/debian", None)
    with pytest.raises(SystemExit):
        parser.parse_args(["sandbox", "build", "--offline", "--online"])


def test_sandbox_modules_import_no_cycle() -> None:
    """No module of the sandbox imports (at any level, lazily included) one that imports it."""
    import ast

    import agentbench_poad.sandbox as sandbox

    root = Path(sandbox.__file__).parent
    prefix = "agentbench_poad.sandbox."
    edges: dict[str, set[str]] = {}
    for path in root.glob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(prefix):
                deps.add(node.module[len(prefix) :].split(".")[0])
            elif isinstance(node, ast.Import):
                deps |= {
                    a.name[len(prefix) :].split(".")[0]
                    for a in node.names
                    if a.name.startswith(prefix)
                }
        edges[path.stem] = deps - {path.stem}
    assert "_jobs" in edges["docker_backend"] and "api" in edges["_jobs"]  # the walk sees imports

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for dep in edges.get(start, ()):
            if dep == goal or (dep not in seen and reaches(dep, goal, seen | {dep})):
                return True
        return False

    cycles = [m for m in edges if m != "__init__" and reaches(m, m, {m})]
    assert cycles == [], f"import cycle through {cycles}"
