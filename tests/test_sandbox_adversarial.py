"""Hostile code against both backends: each attack ends in its documented failure category, no
secret reaches any output, the host stays healthy, and nothing is left behind (no labelled
container of this process, no sandbox process carrying the attack's token).

Timeouts are a few seconds so the whole file stays fast. Processes spawned by attacks rename
themselves (``prctl(PR_SET_NAME)``) to a per-test token, so leftovers can be found without
confusing them with another xdist worker's sandboxes.
"""

from __future__ import annotations

import os
import socket
import textwrap
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from agentbench_poad.sandbox import Backend, FailureCategory, Limits, SandboxResult, get_backend

SHORT = Limits(wall_time_s=4, memory_mb=512, pids=32, tmpfs_mb=32, output_mb=4, log_bytes=2000)
#: For attacks that must end in an exception, not a timeout: a program that walks /proc can take
#: more than SHORT's 4 s on 2 loaded cores (the full suite beside a Ray pool), and a timeout
#: there would fail the test without saying anything about what it checks.
ROOMY = replace(SHORT, wall_time_s=60)
SANDBOX_UID = 65534
PACKAGE_FILE = Path(__file__).resolve().parents[1] / "agentbench_poad" / "sandbox" / "api.py"

# Renames the calling process so the test can find it later (comm is at most 15 bytes).
NAME_SELF = """
import ctypes
def name_self(token):
    ctypes.CDLL(None).prctl(15, token.encode()[:15], 0, 0, 0)
"""


@pytest.fixture(
    scope="module",
    params=[
        "process",
        pytest.param("docker", marks=pytest.mark.docker),
        "ray-process",
        pytest.param("ray-auto", marks=pytest.mark.docker),
    ],
)
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend, and each through a pool of Ray actors (grading on Ray): ``ray-auto`` is
    what ``sandbox="ray"`` gives a node with a Docker engine and the image."""
    name = request.param
    if name in ("docker", "ray-auto"):
        request.getfixturevalue("sandbox_image")
    if name.startswith("ray-"):
        request.getfixturevalue("ray_cluster")
        from agentbench_poad.ray_sandbox import RaySandboxPool

        b = RaySandboxPool(workers=1, backend=name.removeprefix("ray-"))
        assert name == "ray-process" or b.name == "docker", b.isolation
    else:
        b = get_backend(name)
    yield b
    b.close()


def needs(backend: Backend, *modes: str) -> None:
    """Skip unless the process backend runs in one of ``modes`` (docker always qualifies).

    ``root``: uid 65534 + mount/PID/network namespaces; ``user``: unprivileged namespaces;
    ``none``: rlimits only (see ProcessBackend.isolation).
    """
    mode = getattr(backend, "mode", None)
    if mode is not None and mode not in modes:
        pytest.skip(f"the process backend runs in mode {mode!r} here: {backend.isolation}")


@pytest.fixture
def token() -> str:
    return "abp" + uuid.uuid4().hex[:12]


def _processes_named(token: str) -> list[int]:
    """Pids whose name is ``token`` (the tests only name sandbox processes, uid 65534)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == token[:15]:
                    found.append(int(pid))
        except OSError:
            continue
    return found


def _my_containers(owners: list[str] | None = None) -> list:
    """Labelled containers of this process (or of ``owners``: a Ray pool's actor processes)."""
    import docker

    from agentbench_poad.sandbox.docker_backend import (
        LABEL,
        OWNER_LABEL,
        labelled_containers,
        owner_id,
    )

    client = docker.from_env(timeout=30)
    try:
        return [
            c
            for owner in (owners or [owner_id()])
            for c in labelled_containers(client, LABEL, f"{OWNER_LABEL}={owner}")
        ]
    finally:
        client.close()


def _ticks_since_boot() -> int:
    with open("/proc/uptime") as f:
        return int(float(f.read().split()[0]) * os.sysconf("SC_CLK_TCK"))


def _sandbox_orphans(since: int) -> list[int]:
    """uid-65534 processes started since ``since`` whose parent is init: escaped their run.

    A live run's processes always have a live parent (unshare, containerd-shim); an orphan is
    what a leak looks like, whatever the process calls itself.
    """
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                uid = next(line.split()[1] for line in f if line.startswith("Uid:"))
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, StopIteration):
            continue
        if int(uid) == SANDBOX_UID and int(fields[1]) == 1 and int(fields[19]) >= since:
            found.append(int(pid))
    return found


def assert_clean(backend: Backend, token: str, since: int) -> None:
    """Nothing of the run survives: processes carrying the token, orphans of uid 65534 started
    during the run, or containers of this process."""
    deadline = time.monotonic() + 5  # namespace / container teardown is asynchronous
    while (_processes_named(token) or _sandbox_orphans(since)) and time.monotonic() < deadline:
        time.sleep(0.1)
    leftovers = _processes_named(token) + _sandbox_orphans(since)
    assert leftovers == [], f"sandbox processes outlived their run: {leftovers}"
    if backend.name == "docker":
        owners = getattr(backend, "owners", None)  # a Ray pool: its actors own the containers
        assert _my_containers(owners) == [], "a labelled container outlived its run"


def attack(
    backend: Backend,
    source: str,
    *,
    limits: Limits = SHORT,
    output_shapes=None,
    token: str | None = None,
) -> SandboxResult:
    """Run ``f`` from ``source``; the runner process and all it forks carry ``token``."""
    token = token or "abp" + uuid.uuid4().hex[:12]
    source = NAME_SELF + f"name_self({token!r})\n" + textwrap.dedent(source).replace("TOKEN", token)
    since = _ticks_since_boot()
    result = backend.run(source, "f", {}, limits=limits, output_shapes=output_shapes)
    assert_clean(backend, token, since)
    return result


def everything(result: SandboxResult) -> str:
    arrays = " ".join(a.tobytes().decode("latin-1") for a in result.outputs.values())
    return " ".join(
        [result.message, result.traceback_tail, result.stdout_tail, result.stderr_tail, arrays]
    )


# -- reading what is not theirs -----------------------------------------------------------------

READ_AND_LEAK = """
import numpy as np
def f():
    data = open(PATH, "rb").read()
    print(data.decode("latin-1"))
    return np.frombuffer(data, dtype=np.uint8)
"""


def test_read_etc_shadow(backend: Backend) -> None:
    result = attack(backend, READ_AND_LEAK.replace("PATH", "'/etc/shadow'"))
    assert result.category is FailureCategory.EXCEPTION
    # Unreadable to uid 65534; absent from the root-mode process sandbox's allow-listed /etc.
    assert "PermissionError" in result.message or "FileNotFoundError" in result.message
    shadow = Path("/etc/shadow")
    if os.access(shadow, os.R_OK):
        root_line = shadow.read_text().splitlines()[0]
        assert root_line not in everything(result)


def test_read_host_home(backend: Backend) -> None:
    needs(backend, "root")  # otherwise it runs as this user, who can read the home
    secret = "home-secret-" + uuid.uuid4().hex
    path = Path.home() / f".abp-sandbox-test-{uuid.uuid4().hex[:8]}"
    path.write_text(secret)
    path.chmod(0o644)  # readable by anyone who can reach it: only hiding protects it
    try:
        result = attack(backend, READ_AND_LEAK.replace("PATH", repr(str(path))))
    finally:
        path.unlink()
    assert result.category is FailureCategory.EXCEPTION
    assert "FileNotFoundError" in result.message or "PermissionError" in result.message
    assert secret not in everything(result)


def test_read_package_source(backend: Backend) -> None:
    needs(backend, "root")  # only a mount namespace can hide the package source
    secret = PACKAGE_FILE.read_text().splitlines()[0]
    result = attack(backend, READ_AND_LEAK.replace("PATH", repr(str(PACKAGE_FILE))))
    assert result.category is FailureCategory.EXCEPTION
    assert secret not in everything(result)


LOOK_AROUND = """
import json, os
def f():
    seen = {}
    for d in ["/", PARENT, HOST_TMP]:
        try:
            seen[d] = sorted(os.listdir(d))
        except OSError as exc:
            seen[d] = type(exc).__name__
    for path in [SECRET, TMP_SECRET]:
        try:
            seen[path] = open(path).read()
        except OSError as exc:
            seen[path] = type(exc).__name__
    print(json.dumps(seen))
    raise RuntimeError(json.dumps(seen))
"""


def _interpreter_dirs() -> list[str]:
    """The directories of the running interpreter (the sandbox may show these and their parents)."""
    import sys
    import sysconfig

    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, sys.executable]
    paths += list(sysconfig.get_paths().values())
    return [p for path in paths for p in (os.path.abspath(path), os.path.realpath(path))]


def _leading(folder: str) -> set[str]:
    """Names in ``folder`` on the way to the interpreter's directories."""
    return {
        Path(p).relative_to(folder).parts[0]
        for p in _interpreter_dirs()
        if Path(p).is_relative_to(folder) and p != folder
    }


def test_host_work_folders_are_not_visible(backend: Backend, token: str) -> None:
    """Only an allow-list of the host's file system exists in the sandbox: a world-readable file
    beside the checkout (the machine's work folder) can be neither listed nor read."""
    needs(backend, "root")  # otherwise it runs as this user, who can read these files
    parent = str(PACKAGE_FILE.parents[3])  # the folder that holds the checkout, e.g. /work
    secret = "work-secret-" + uuid.uuid4().hex
    folder = Path(parent) / f".abp-sbx-{token}"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    (folder / "notes.txt").write_text(secret)
    (folder / "notes.txt").chmod(0o644)  # readable by anyone who can reach it
    host_tmp = Path("/tmp") / f"abp-sbx-{token}.txt"
    host_tmp.write_text(secret)
    host_tmp.chmod(0o644)
    source = (
        LOOK_AROUND.replace("PARENT", repr(parent))
        .replace("HOST_TMP", repr("/tmp"))
        .replace("TMP_SECRET", repr(str(host_tmp)))
        .replace("SECRET", repr(str(folder / "notes.txt")))
    )
    try:
        result = attack(backend, source, limits=replace(SHORT, log_bytes=64_000))
    finally:
        (folder / "notes.txt").unlink()
        folder.rmdir()
        host_tmp.unlink()
    assert result.category is FailureCategory.EXCEPTION, result
    assert secret not in everything(result)
    import json

    seen = json.loads(result.stdout_tail.strip().splitlines()[-1])
    assert folder.name not in seen[parent] and host_tmp.name not in seen["/tmp"]
    assert seen[str(folder / "notes.txt")] == "FileNotFoundError"
    assert seen[str(host_tmp)] == "FileNotFoundError"
    if getattr(backend, "mode", None) == "root":  # docker: the image's own root, not the host's
        system = {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp"}
        allowed = system | {"usr"} | _leading("/")
        assert set(seen["/"]) <= allowed, f"the sandbox sees {sorted(set(seen['/']) - allowed)}"
        listed = seen[parent]
        # a checkout under /tmp (a fresh CI clone): the sandbox's own /tmp holds its job folders
        own = {".sbx", "work"} if parent == "/tmp" else set()
        assert isinstance(listed, str) or set(listed) <= _leading(parent) | own, listed


def test_failure_texts_are_capped_and_sanitised(backend: Backend) -> None:
    """A failure that carries a huge file (control characters, bidi overrides, non-ASCII) comes
    back capped and escaped to printable ASCII, in every text of the result."""
    import string

    limits = Limits(wall_time_s=20, memory_mb=512, pids=32, tmpfs_mb=32, log_bytes=3000)
    result = attack(
        backend,
        """
        import sys
        def f():
            chunk = "secret\\x00\\x1b[31m\\u202e\\u00e9\\U0001f600" * 10 + "\\n"
            with open("/tmp/huge.txt", "w", encoding="utf-8") as fh:
                for _ in range(20_000):  # several MB
                    fh.write(chunk)
            data = open("/tmp/huge.txt", encoding="utf-8").read()
            sys.stdout.write(data)
            sys.stderr.write(data)
            raise ValueError(data)
    """,
        limits=limits,
    )
    assert result.category is FailureCategory.EXCEPTION
    assert result.message.startswith("ValueError: secret")
    assert len(result.message) <= 4096 and len(result.traceback_tail) <= 4096  # a few KB
    assert len(result.stdout_tail) <= limits.log_bytes
    assert len(result.stderr_tail) <= limits.log_bytes
    printable = set(string.printable)
    for name in ("message", "traceback_tail", "stdout_tail", "stderr_tail"):
        text = getattr(result, name)
        assert set(text) <= printable, f"{name} has {sorted(set(text) - printable)[:5]}"
    assert "\\u202e" in result.message  # escaped, so a reader still sees it was there


def test_environment_is_scrubbed(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "env-secret-" + uuid.uuid4().hex
    monkeypatch.setenv("ABP_SANDBOX_TEST_SECRET", secret)
    result = attack(
        backend,
        """
        import os
        def f():
            print(dict(os.environ))
            for pid in os.listdir("/proc"):
                try:
                    print(open(f"/proc/{pid}/environ", "rb").read())
                except OSError:
                    pass
            return os.environ["ABP_SANDBOX_TEST_SECRET"]
    """,
        limits=ROOMY,
    )
    assert result.category is FailureCategory.EXCEPTION and "KeyError" in result.message
    assert secret not in everything(result)


# -- network ----------------------------------------------------------------------------------


def test_no_network(backend: Backend) -> None:
    needs(backend, "root", "user")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    connections: list[object] = []

    def accept() -> None:
        try:
            connections.append(server.accept())
        except OSError:
            pass

    thread = threading.Thread(target=accept)
    thread.start()
    try:
        result = attack(
            backend,
            f"""
            import socket
            def f():
                errors = []
                for host, port in [("127.0.0.1", {port}), ("1.1.1.1", 53), ("172.17.0.1", 22)]:
                    try:
                        socket.create_connection((host, port), timeout=1).close()
                    except OSError as exc:
                        errors.append(type(exc).__name__)
                    else:
                        return "connected"
                raise ConnectionError(",".join(errors))
        """,
        )
    finally:
        thread.join()
        server.close()
    assert connections == [], "the sandbox reached a host socket"
    assert result.category is FailureCategory.EXCEPTION
    assert result.message.startswith("ConnectionError")


# -- resource exhaustion -------------------------------------------------------------------------


def test_fork_bomb_is_capped(backend: Backend, token: str) -> None:
    needs(backend, "root")  # RLIMIT_NPROC needs a dedicated uid
    # Capped by construction too: at most 200 children, each only sleeps (never forks again).
    result = attack(
        backend,
        """
        import os, time
        def f():
            for _ in range(200):
                if os.fork() == 0:
                    name_self("TOKEN")
                    time.sleep(60)
                    os._exit(0)
            raise AssertionError("200 processes were allowed")
    """,
        token=token,
    )
    assert result.category is FailureCategory.EXCEPTION
    assert "BlockingIOError" in result.message or "Resource temporarily" in result.message


def test_unbounded_memory(backend: Backend) -> None:
    result = attack(
        backend,
        """
        def f():
            hoard = []
            while True:
                hoard.append(b"\\x01" * (32 << 20))  # touched pages, not lazy zeros
    """,
        limits=Limits(wall_time_s=10, memory_mb=256, pids=32, tmpfs_mb=32, log_bytes=2000),
    )
    assert result.category is FailureCategory.MEMORY_EXCEEDED, result


def test_fill_the_disk(backend: Backend) -> None:
    result = attack(
        backend,
        """
        import os, tempfile
        def f():
            chunk = b"\\x00" * (1 << 20)
            with open(os.path.join(tempfile.gettempdir(), "fill"), "wb") as fh:
                for _ in range(10_000):  # 10 GB if nothing stopped it
                    fh.write(chunk)
                    fh.flush()
    """,
    )
    assert result.category in (FailureCategory.EXCEPTION, FailureCategory.MEMORY_EXCEEDED)
    if result.category is FailureCategory.EXCEPTION:
        assert "No space left" in result.message or "File too large" in result.message


def test_loop_forever(backend: Backend) -> None:
    result = attack(
        backend,
        "def f():\n    while True:\n        pass\n",
        limits=Limits(wall_time_s=2, memory_mb=512, pids=32, tmpfs_mb=32),
    )
    assert result.category is FailureCategory.TIMEOUT and "timed out after 2 s" == result.message


def test_ignore_sigterm(backend: Backend, token: str) -> None:
    result = attack(
        backend,
        """
        import signal, time
        def f():
            name_self("TOKEN")
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            while True:
                time.sleep(0.05)
    """,
        token=token,
        limits=Limits(wall_time_s=2, memory_mb=512, pids=32, tmpfs_mb=32),
    )
    assert result.category is FailureCategory.TIMEOUT


def test_escape_the_process_group_and_hang(backend: Backend, token: str) -> None:
    result = attack(
        backend,
        """
        import os, time
        def f():
            name_self("TOKEN")
            os.setsid()  # leaves the host's process group: killpg alone would miss it
            while True:
                time.sleep(0.05)
    """,
        token=token,
        limits=Limits(wall_time_s=2, memory_mb=512, pids=32, tmpfs_mb=32),
    )
    assert result.category is FailureCategory.TIMEOUT


def test_kill_the_runner_from_inside(backend: Backend, token: str) -> None:
    needs(backend, "root", "user")
    result = attack(
        backend,
        """
        import os, signal, time
        def f():
            if os.fork() == 0:
                name_self("TOKEN")
                time.sleep(60)
            os.kill(1, signal.SIGKILL)  # PID 1 of the sandbox (init / timeout backstop)
            os.kill(os.getpid(), signal.SIGKILL)
    """,
        token=token,
    )
    assert result.category is FailureCategory.EXCEPTION
    assert "before its entry returned" in result.message


def test_flood_stdout(backend: Backend) -> None:
    result = attack(
        backend,
        """
        import sys, numpy as np
        def f():
            line = "y" * 1023 + "\\n"
            for _ in range(20_000):  # 20 MB
                sys.stdout.write(line)
            sys.stdout.write("THE END\\n")
            return np.ones(2)
    """,
        limits=Limits(wall_time_s=20, memory_mb=512, pids=32, tmpfs_mb=32, log_bytes=3000),
    )
    assert result.ok, result
    assert len(result.stdout_tail.encode()) <= 3000 and result.stdout_tail.endswith("THE END\n")


def test_flood_stdout_forever(backend: Backend) -> None:
    result = attack(
        backend,
        """
        import sys
        def f():
            while True:
                sys.stdout.write("z" * 65536)
    """,
        limits=Limits(wall_time_s=2, memory_mb=512, pids=32, tmpfs_mb=32, log_bytes=1000),
    )
    assert result.category is FailureCategory.TIMEOUT
    assert len(result.stdout_tail.encode()) <= 1000


def test_daemons_do_not_survive(backend: Backend, token: str) -> None:
    needs(backend, "root", "user")  # a PID namespace takes daemons down with it
    result = attack(
        backend,
        """
        import os, time, numpy as np
        def f():
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    name_self("TOKEN")
                    os.close(1); os.close(2)
                    time.sleep(120)
                os._exit(0)
            os.wait()
            time.sleep(0.3)
            return np.array([1.0])
    """,
        token=token,
    )
    assert result.ok, result  # the daemon is not an error; assert_clean checked it is gone


# -- forged and invalid outputs --------------------------------------------------------------------


@pytest.mark.parametrize(
    "returned,shapes,category",
    [
        ("np.array([1.0, np.nan])", None, FailureCategory.OUTPUT_INVALID),
        ("np.array([np.inf])", None, FailureCategory.OUTPUT_INVALID),
        ("np.zeros(4)", {"output": (3,)}, FailureCategory.OUTPUT_INVALID),
        ("np.zeros((3, 2))", {"output": (3,)}, FailureCategory.OUTPUT_INVALID),
        ("np.array([object(), 1], dtype=object)", None, FailureCategory.OUTPUT_INVALID),
        ("np.array(['a', 'b'])", None, FailureCategory.OUTPUT_INVALID),
        (
            "{'output': np.zeros(3), 'extra': np.zeros(1)}",
            {"output": (3,)},
            FailureCategory.OUTPUT_INVALID,
        ),
        ("np.zeros(2 * 2**20)", None, FailureCategory.OUTPUT_INVALID),  # 16 MiB > output_mb
        ("__import__('pickle').dumps([1, 2])", None, FailureCategory.OUTPUT_INVALID),
    ],
)
def test_invalid_outputs(backend: Backend, returned: str, shapes, category) -> None:
    result = attack(
        backend, f"import numpy as np\ndef f():\n    return {returned}\n", output_shapes=shapes
    )
    assert result.category is category and not result.ok and result.outputs == {}


#: Writes bytes straight into the result pipe, as the runner does, and leaves before it does.
FORGE = """
import os, sys
def forge(data):
    fd = os.open(os.path.join(sys.argv[2], "result"), os.O_WRONLY)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.close(fd)
    os._exit(0)
"""


def test_forged_pickle_is_never_loaded(backend: Backend, token: str) -> None:
    marker = Path("/tmp") / f"abp-pwned-{token}"
    result = attack(
        backend,
        FORGE
        + f"""
import json, pickle
class Evil:
    def __reduce__(self):
        return (os.system, ("touch {marker}",))
def f():
    status = json.dumps({{"category": "ok", "outputs": ["output"]}}).encode()
    forge(status + b"\\n" + pickle.dumps(Evil()))
""",
    )
    assert result.category is FailureCategory.OUTPUT_INVALID
    assert not marker.exists()


def test_forged_object_npy(backend: Backend) -> None:
    result = attack(
        backend,
        FORGE
        + """
import io, json
import numpy as np
def f():
    buffer = io.BytesIO()
    # np.save pickles object arrays by default: the forged record is a pickle.
    np.save(buffer, np.array([{"a": 1}], dtype=object))
    status = json.dumps({"category": "ok", "outputs": ["output"]}).encode()
    forge(status + b"\\n" + buffer.getvalue())
""",
    )
    assert result.category is FailureCategory.OUTPUT_INVALID


def test_tamper_with_harness_and_status(backend: Backend) -> None:
    result = attack(
        backend,
        FORGE
        + """
import json
def f():
    in_dir, out = sys.argv[1], sys.argv[2]
    denied = []
    for path in (os.path.join(in_dir, "harness.py"), os.path.join(in_dir, "job.json"),
                 os.path.join(out, "status.json")):
        try:
            open(path, "a").write("# tampered")
        except OSError:
            denied.append(path)
    print("denied", len(denied), flush=True)
    status = {"category": "ok", "outputs": ["output"], "score": 1.0}
    forge(json.dumps(status).encode() + b"\\ngarbage, not an array")
""",
    )
    assert result.category is FailureCategory.OUTPUT_INVALID
    assert "denied 3" in result.stdout_tail


def test_forged_status_categories_are_not_trusted(backend: Backend) -> None:
    result = attack(
        backend,
        FORGE
        + """
import json
def f():
    forge(json.dumps({"category": "timeout", "message": "not me"}).encode() + b"\\n")
""",
    )
    assert result.category is FailureCategory.EXCEPTION and "not me" not in result.message


def test_monkeypatched_runner_cannot_forge_success(backend: Backend) -> None:
    # Replace the runner's np.save so "outputs" are empty files, then return normally.
    result = attack(
        backend,
        """
        import numpy as np
        def f():
            np.save = lambda fh, arr, allow_pickle=False: fh.write(b"")
            return np.ones(3)
    """,
    )
    assert result.category is FailureCategory.OUTPUT_INVALID


def test_write_outside_the_work_dir(backend: Backend, token: str) -> None:
    needs(backend, "root")  # otherwise the sandbox shares the host's /tmp
    host_targets = [
        f"/tmp/abp-escape-{token}",
        f"/var/tmp/abp-escape-{token}",
        str(Path.home() / f"abp-escape-{token}"),
    ]
    result = attack(
        backend,
        f"""
        import os, sys
        def f():
            targets = {host_targets!r} + ["/etc/abp-{token}", "/usr/abp-{token}",
                       os.path.join(sys.argv[2], "new_file"), os.path.join(sys.argv[1], "x")]
            written = []
            for path in targets[3:]:
                try:
                    with open(path, "w") as fh:
                        fh.write("x")
                    written.append(path)
                except OSError:
                    pass
            for path in targets[:3]:  # inside the sandbox these may be its own scratch space
                try:
                    with open(path, "w") as fh:
                        fh.write("x")
                except OSError:
                    pass
            raise PermissionError(f"{{len(written)}} forbidden writes succeeded: {{written}}")
    """,
    )
    assert result.category is FailureCategory.EXCEPTION
    assert result.message.startswith("PermissionError: 0 forbidden writes"), result.message
    for path in host_targets:
        assert not Path(path).exists(), f"the sandbox wrote {path} on the host"


def _allocated(folder: Path) -> int:
    """Bytes the host's file system holds for the entries of ``folder`` (allocated blocks)."""
    return sum(entry.lstat().st_blocks * 512 for entry in folder.iterdir())


def test_outputs_cannot_fill_the_host_disk(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/sandbox.md: nothing the code writes through ``out/`` lands on the host's disk, and
    the host keeps at most the output budget of what it writes there, in memory.

    The attack grows every file it can open in its input and output folders past the file-size
    limit with ``fallocate(FALLOC_FL_KEEP_SIZE)`` (which RLIMIT_FSIZE does not stop), tries to
    create a file in ``out/``, and pours three times the output budget into the result pipe.
    """
    from agentbench_poad.sandbox import _jobs

    measured: list[tuple[int, int, int]] = []
    real_cleanup = _jobs.JobDir.cleanup

    def measuring_cleanup(job: _jobs.JobDir) -> None:
        kept = len(job.stream.close()) if job.stream is not None else 0
        measured.append((_allocated(job.out_dir), kept, job.stream.size if job.stream else 0))
        real_cleanup(job)

    # the job directory lives in this process for the local backends (in the actor for Ray)
    monkeypatch.setattr(_jobs.JobDir, "cleanup", measuring_cleanup)
    pour = 3 * SHORT.output_mb << 20
    result = attack(
        backend,
        f"""
        import ctypes, os, sys
        def f():
            libc = ctypes.CDLL(None, use_errno=True)
            libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
            in_dir, out = sys.argv[1], sys.argv[2]
            targets = [os.path.join(out, "new_file")]
            for folder in (out, in_dir, os.path.join(in_dir, "inputs")):
                targets += [os.path.join(folder, name) for name in os.listdir(folder)]
            allocated, poured = 0, 0
            for path in targets:
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, 0o644)
                except OSError:
                    continue
                try:
                    libc.fallocate(fd, 1, 0, 48 << 20)  # KEEP_SIZE: past RLIMIT_FSIZE (32 MiB)
                    os.set_blocking(fd, True)
                    chunk = b"\\x01" * (1 << 20)
                    while poured < {pour}:
                        poured += os.write(fd, chunk)
                except OSError:
                    pass
                allocated += os.fstat(fd).st_blocks * 512
                os.close(fd)
            print("allocated", allocated, "poured", poured, flush=True)
            os._exit(0)
    """,
        limits=ROOMY,
    )
    assert not result.ok
    assert "allocated 0 poured" in result.stdout_tail, result.stdout_tail
    if backend.name in ("docker", "process") and not hasattr(backend, "actors"):
        ((on_disk, kept, arrived),) = measured
        assert on_disk == 0
        assert arrived >= pour > _jobs.result_cap(ROOMY) >= kept


def test_host_is_healthy_afterwards(backend: Backend) -> None:
    result = attack(backend, "import numpy as np\ndef f():\n    return np.arange(3)\n")
    assert result.ok and result.outputs["output"].tolist() == [0, 1, 2]
