"""The ``process`` backend: a child process with an unprivileged uid, rlimits and namespaces.

Weaker than docker (it shares the host kernel; memory is capped by address space, not by a
cgroup), used where no engine runs.

As root, each run goes through :mod:`agentbench_poad.sandbox._launcher`: a private mount namespace
whose root is an allow-list (:func:`root_plan`): the system trees (``/usr`` and its links), a few
``/etc`` entries and the interpreter's own directories (prefix, stdlib, the site-packages it
imports from), all read-only, a minimal ``/dev``, a sized tmpfs at ``/tmp`` and a small one at
``/dev/shm`` (the only writable places, besides the pre-created result FIFO). Nothing else of
the host's file system exists there: not its ``/work``, ``/root``, ``/home``, ``/srv``, ``/tmp``,
the package source or the working directory (only the path components leading to the
interpreter's directories). Then new PID, network and IPC namespaces (``unshare`` from
util-linux), a seccomp filter refusing the kernel keyring calls (keyrings are per uid and outlive
a run), uid/gid 65534 before any user code runs, rlimits, a scrubbed environment and a session
of its own. At the deadline the host SIGKILLs the namespace's PID 1 (which takes every process of the
namespace with it) and the process group.

Not root: the code runs as the current user with rlimits, a scrubbed environment and a private
temporary working directory, and, where unprivileged user namespaces work, in new user, PID,
network and IPC namespaces; it sees (and may write) the host's file system as that user does.
:attr:`ProcessBackend.isolation` says which.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

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

_LAUNCHER = Path(__file__).with_name("_launcher.py")
#: New PID, network and IPC namespaces: no run sees another's processes, sockets or System V /
#: POSIX IPC objects (shared memory, semaphores, message queues), which otherwise outlive the
#: run and would let one run hand data to the next.
_NS_ARGS = ["--pid", "--fork", "--kill-child", "--net", "--ipc", "--mount-proc"]


def sandbox_env(limits: Limits, home: str) -> dict[str, str]:
    """The whole environment of the sandbox: nothing is inherited from the host."""
    threads = str(limits.threads)
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "OMP_NUM_THREADS": threads,
        "OPENBLAS_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        "LOKY_MAX_CPU_COUNT": threads,
        "MPLBACKEND": "Agg",
    }


@lru_cache(maxsize=1)
def _unshare_bin() -> str | None:
    return shutil.which("unshare", path="/usr/bin:/bin:/usr/sbin:/sbin")


@lru_cache(maxsize=1)
def probe_namespaces() -> tuple[str, str]:
    """Which namespace mode works here: ``("root", why)``, ``("user", why)`` or ``("none", why)``.

    Cached per process: the answer depends on the kernel and our privileges only.
    """
    tool = _unshare_bin()
    if tool is None:
        return "none", "util-linux `unshare` is not installed"
    if os.geteuid() == 0:
        args = [
            tool,
            "--mount",
            *_NS_ARGS,
            "--setgid",
            str(SANDBOX_UID),
            "--setuid",
            str(SANDBOX_UID),
            "true",
        ]
        mode = "root"
    else:
        args = [tool, "--user", "--map-root-user", *_NS_ARGS, "true"]
        mode = "user"
    try:
        proc = subprocess.run(args, capture_output=True, timeout=10, env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "none", f"unshare failed: {exc}"
    if proc.returncode != 0:
        why = proc.stderr.decode(errors="replace").strip().splitlines()
        return "none", f"the kernel refused new namespaces ({why[-1] if why else proc.returncode})"
    return mode, "unshare works"


#: System trees of the root-mode sandbox's file system, bound read-only (or re-created as the
#: links they are on merged-/usr systems).
_SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: The few entries of ``/etc`` that the dynamic linker, libc and Python look at.
_ETC_ENTRIES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "localtime",
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "os-release",
)


#: Prints ``[dirs the interpreter needs, its site-packages dirs]`` as JSON (run without -S: a
#: venv's prefix and site-packages are set by the site module).
_LAYOUT_PROBE = """
import json, os, sys, sysconfig
p = sysconfig.get_paths()
dirs = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        p["stdlib"], p["platstdlib"], p["purelib"], p["platlib"]]
print(json.dumps([dirs, sorted({p["purelib"], p["platlib"]})]))
"""


@lru_cache(maxsize=8)
def _python_layout(python: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(dirs the interpreter needs, its site-packages dirs)`` for the interpreter ``python``.

    Asked of the interpreter itself once (cached): another interpreter than the running one
    has other directories.
    """
    try:
        proc = subprocess.run(
            [python, "-I", "-c", _LAYOUT_PROBE],
            capture_output=True,
            timeout=60,
            check=True,
            env={"PATH": "/usr/bin:/bin"},
        )
        dirs, sites = json.loads(proc.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise SandboxUnavailable(
            f"cannot ask the sandbox interpreter {python} where its files are ({exc}); "
            f"pass python= an interpreter that runs here"
        ) from None
    dirs.append(os.path.dirname(os.path.abspath(python)))
    return tuple(dirs), tuple(sites)


def _site_dirs(python: str | None = None) -> list[str]:
    return list(_python_layout(python or sys.executable)[1])


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def root_plan(python: str | None = None) -> list[list[str]]:
    """The root-mode sandbox's whole file system outside ``/tmp``, ``/dev`` and ``/proc``.

    An allow-list, applied in order by the launcher on an empty read-only root: ``["bind",
    path]`` binds the host's ``path`` read-only at the same place, ``["link", path, target]``
    makes a symbolic link. It holds the system trees (:data:`_SYSTEM_TREES`), a few ``/etc``
    entries (:data:`_ETC_ENTRIES`) and the directories of the interpreter (prefix, stdlib,
    site-packages), nothing else: the host's ``/work``, ``/root``, ``/home``, ``/srv``,
    ``/tmp``, the package source and the working directory do not exist in the sandbox, except
    for the path components leading to the interpreter's own directories.
    """
    python = python or sys.executable
    plan: list[list[str]] = []
    bound: list[str] = []
    made: set[str] = set()

    def covered(path: str) -> bool:
        return path in made or any(_under(path, b) for b in bound)

    for path in (*_SYSTEM_TREES, *(f"/etc/{name}" for name in _ETC_ENTRIES)):
        if os.path.islink(path):
            plan.append(["link", path, os.readlink(path)])
            made.add(path)
        elif os.path.exists(path):
            plan.append(["bind", path])
            bound.append(path)
    wanted = {os.path.abspath(p) for p in _python_layout(python)[0]}
    for path in sorted(wanted, key=lambda p: (p.count("/"), p)):  # parents first
        real = os.path.realpath(path)
        if real == "/" or not os.path.isdir(real):
            continue
        if not covered(real):
            plan.append(["bind", real])
            bound.append(real)
        if path != real and not covered(path):
            plan.append(["link", path, real])
            made.add(path)
    return plan


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (scanning /proc: ``task/*/children`` is optional in kernels)."""
    out: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if len(fields) > 1 and int(fields[1]) == pid:
            out.append(int(entry))
    return out


class _TailReader(threading.Thread):
    """Drain a pipe, keeping only the last ``limit`` bytes (a flood cannot fill host memory)."""

    def __init__(self, stream, limit: int):
        super().__init__(daemon=True)
        self.stream = stream
        self.chunks: collections.deque[bytes] = collections.deque()
        self.size = 0
        self.limit = max(limit, 1)

    def run(self) -> None:
        try:
            while True:
                chunk = self.stream.read1(65536)
                if not chunk:
                    break
                self.chunks.append(chunk)
                self.size += len(chunk)
                while self.chunks and self.size - len(self.chunks[0]) >= self.limit:
                    self.size -= len(self.chunks.popleft())
        except (OSError, ValueError):
            pass

    def data(self) -> bytes:
        return b"".join(self.chunks)[-self.limit :]


class ProcessBackend(Backend):
    """Run code in a namespaced, unprivileged child process (see the module docstring).

    Args:
        python: Interpreter for the sandbox (it needs numpy; scikit-learn for DataSciCoding).
            Defaults to the running interpreter.
        require_namespaces: Refuse (raise :class:`SandboxUnavailable`) instead of running with
            rlimits only where the kernel grants no namespaces.

    Attributes:
        mode: ``"root"`` (uid 65534 + mount/PID/network namespaces), ``"user"`` (unprivileged
            user/PID/network namespaces) or ``"none"`` (rlimits only).
    """

    name = "process"

    def __init__(self, python: str | None = None, *, require_namespaces: bool = False):
        self.python = python or sys.executable
        self.mode, why = probe_namespaces()
        if require_namespaces and self.mode == "none":
            raise SandboxUnavailable(
                f"no namespaces for the process sandbox here ({why}); run "
                f"as root, enable unprivileged user namespaces, or use "
                f"Docker"
            )
        self.root = os.geteuid() == 0
        if self.mode == "root":
            self.isolation = (
                "process (weaker than docker): uid 65534, new mount/PID/network/IPC "
                "namespaces via unshare, an allow-listed read-only file system (system "
                "trees and the interpreter; no host work folders), no keyring calls "
                "(seccomp), rlimits, scrubbed environment; memory capped by address space, "
                "no cgroup"
            )
        elif self.mode == "user":
            self.isolation = (
                "process (weaker than docker): NOT root, so runs as the current "
                "user in user/PID/network/IPC namespaces via unshare with rlimits and a "
                "scrubbed environment; host files readable (and writable) by this user "
                "stay so"
            )
        else:
            who = "uid 65534" if self.root else "the current user (not root: cannot drop uid)"
            self.isolation = (
                f"process (weakest): runs as {who} with rlimits, a scrubbed "
                f"environment and a temporary working directory; NO network or "
                f"PID namespace ({why})"
            )

    def _rlimits(self, limits: Limits) -> dict[str, tuple[int, int]]:
        memory = limits.memory_mb * 2**20
        # A backstop only (the wall clock is the limit): generous, since threads add up.
        cpu = int(2 * limits.wall_time_s * max(1.0, limits.cpus)) + 2
        rlimits = {
            "RLIMIT_AS": (memory, memory),
            "RLIMIT_DATA": (memory, memory),
            "RLIMIT_CPU": (cpu, cpu + 1),
            "RLIMIT_FSIZE": (limits.file_size_bytes, limits.file_size_bytes),
            "RLIMIT_NOFILE": (256, 256),
            "RLIMIT_CORE": (0, 0),
        }
        if self.root:
            # Counted per uid across the host: meaningful only for the dedicated uid 65534. For
            # an ordinary user it would count their shell, editor and test runner too.
            rlimits["RLIMIT_NPROC"] = (limits.pids, limits.pids)
        return rlimits

    def _command(self, job: JobDir, limits: Limits) -> tuple[list[str], dict]:
        harness = ["-I", "-S", "-B"]
        tool = _unshare_bin()
        if self.mode == "root":
            in_dir, out_dir, home = "/tmp/.sbx/in", "/tmp/.sbx/out", "/tmp/work"
            prefix = [
                tool,
                *_NS_ARGS,
                "--setgid",
                str(SANDBOX_UID),
                "--setuid",
                str(SANDBOX_UID),
                "--",
            ]
            new_root = job.root / "root"
            new_root.mkdir(mode=0o700)
            config = {
                "namespaces": True,
                "new_root": str(new_root),
                "plan": root_plan(self.python),
                "tmpfs_mb": limits.tmpfs_mb,
                "uid": SANDBOX_UID,
                "job_in": str(job.in_dir),
                "job_out": str(job.out_dir),
            }
        else:
            in_dir, out_dir = str(job.in_dir), str(job.out_dir)
            home = str(job.root / "work")
            os.makedirs(home, mode=0o700)
            if self.mode == "user":
                prefix = [tool, "--user", "--map-root-user", *_NS_ARGS, "--"]
            else:
                prefix = []
            config = {"namespaces": False, "workdir": home}
            if self.mode == "none" and self.root:
                config["drop_uid"] = SANDBOX_UID
                os.chown(home, SANDBOX_UID, SANDBOX_UID)
                job.root.chmod(0o711)  # uid 65534 must traverse to reach in/ and out/
        # `timeout` is a backstop should the host die mid-run; as the namespace's PID 1 its
        # death (even killed by the code itself) ends every process of the run.
        backstop = shutil.which("timeout", path="/usr/bin:/bin")
        if backstop:
            prefix += [backstop, "-s", "KILL", str(int(limits.wall_time_s) + 10)]
        command = [*prefix, self.python, *harness, f"{in_dir}/harness.py", in_dir, out_dir]
        config.update(command=command, env=sandbox_env(limits, home), rlimits=self._rlimits(limits))
        return command, config

    def _run(
        self,
        source: str,
        entry: str,
        inputs: Mapping[str, np.ndarray],
        limits: Limits,
        output_shapes: OutputShapes | None,
    ) -> SandboxResult:
        start = time.monotonic()
        job = JobDir(sandbox_uid=SANDBOX_UID if self.root else None, slots=slots_for(output_shapes))
        try:
            job.write_job(
                source, entry, inputs, {"sys_path": _site_dirs(self.python)}, limits=limits
            )
            _, config = self._command(job, limits)
            job.listen(limits)
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-B", str(_LAUNCHER), json.dumps(config)],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    close_fds=True,
                    start_new_session=True,
                    env=config["env"],
                    cwd=tempfile.gettempdir(),
                )
            except OSError as exc:
                return sandbox_error(f"cannot start the sandbox process: {exc}", backend=self.name)
            readers = [
                _TailReader(proc.stdout, limits.log_bytes),
                _TailReader(proc.stderr, max(limits.log_bytes, 4096)),
            ]
            for r in readers:
                r.start()
            timed_out = False
            try:
                proc.wait(timeout=max(0.0, limits.wall_time_s - (time.monotonic() - start)))
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                self._kill(proc)
            for r in readers:
                r.join(timeout=5)
            stderr = readers[1].data()
            if proc.returncode == 120 and b"sandbox launcher:" in stderr:
                line = stderr.decode(errors="replace").strip().splitlines()[-1]
                return sandbox_error(line, backend=self.name, duration_s=time.monotonic() - start)
            rc = proc.returncode
            cpu_limited = not timed_out and rc in (-signal.SIGXCPU, 128 + signal.SIGXCPU)
            return classify(
                job,
                limits=limits,
                output_shapes=output_shapes,
                backend=self.name,
                duration_s=time.monotonic() - start,
                stdout=readers[0].data(),
                stderr=stderr[-limits.log_bytes :] if limits.log_bytes else b"",
                timed_out=timed_out,
                memory_killed=False,
                cpu_limited=cpu_limited,
                exit_description=_describe_exit(rc),
            )
        finally:
            job.cleanup()

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        # PID 1 of the sandbox's PID namespace first: its death kills everything in the
        # namespace, including daemons that left our process group with setsid().
        for child in _children(proc.pid):
            try:
                os.kill(child, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state)
            pass


def _describe_exit(rc: int | None) -> str:
    if rc is None:
        return "still running"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    if rc > 128:
        try:
            return f"killed by {signal.Signals(rc - 128).name}"
        except ValueError:
            pass
    return f"exit status {rc}"
