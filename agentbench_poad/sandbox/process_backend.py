"""The ``process`` backend: a child process with an unprivileged uid, rlimits and namespaces.

Weaker than docker (it shares the host kernel *and* the host file system view, minus what it
hides; memory is capped by address space, not by a cgroup), used where no engine runs.

As root, each run goes through :mod:`agentbench_poad.sandbox._launcher`: a private mount namespace
that hides the host's home, ``/root``, ``/home``, ``/run`` and the package source under empty
tmpfs, a sized tmpfs at ``/tmp`` and a small one at ``/dev/shm`` (the only writable places,
besides the pre-created output files),
new PID and network namespaces (``unshare`` from util-linux), uid/gid 65534 before any user code
runs, rlimits, a scrubbed environment and a session of its own. At the deadline the host
SIGKILLs the namespace's PID 1 (which takes every process of the namespace with it) and the
process group.

Not root: the code runs as the current user with rlimits, a scrubbed environment and a private
temporary working directory, and, where unprivileged user namespaces work, in new user, PID and
network namespaces. :attr:`ProcessBackend.isolation` says which.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
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
_PKG_ROOT = Path(__file__).resolve().parents[2]
_NS_ARGS = ["--pid", "--fork", "--kill-child", "--net", "--mount-proc"]


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


def _keep_paths() -> list[str]:
    """Directories the interpreter needs, re-bound read-only where a hidden path covers them."""
    paths = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        *_site_dirs(),
    }
    out = set()
    for p in paths:
        out.add(os.path.realpath(p))
        out.add(os.path.abspath(p))
    return sorted(p for p in out if os.path.isdir(p))


def _site_dirs() -> list[str]:
    paths = sysconfig.get_paths()
    return sorted({paths["purelib"], paths["platlib"]})


#: Never hidden even when they are the working directory: the interpreter needs them.
_SYSTEM_DIRS = (
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/bin",
    "/sbin",
    "/etc",
    "/proc",
    "/dev",
    "/sys",
    "/opt",
    "/var/lib",
    "/tmp",
)


def _hidden_paths() -> list[str]:
    hide = {os.path.expanduser("~"), "/root", "/home", "/run"}
    if (_PKG_ROOT / "pyproject.toml").exists():  # a source checkout (editable install)
        hide.add(str(_PKG_ROOT))
    cwd = os.path.realpath(os.getcwd())
    system = any(cwd == d or cwd.startswith(d + "/") for d in _SYSTEM_DIRS)
    if (
        cwd != "/"
        and not system
        and not any(cwd == k or k.startswith(cwd + "/") for k in _keep_paths())
    ):
        hide.add(cwd)  # the host's project directory, typically
    return sorted(os.path.realpath(p) for p in hide if p and os.path.isdir(p) and p != "/")


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
                "process (weaker than docker): uid 65534, new mount/PID/network "
                "namespaces via unshare, host home and sources hidden, rlimits, "
                "scrubbed environment; memory capped by address space, no cgroup"
            )
        elif self.mode == "user":
            self.isolation = (
                "process (weaker than docker): NOT root, so runs as the current "
                "user in user/PID/network namespaces via unshare with rlimits and a "
                "scrubbed environment; host files readable by this user stay "
                "readable"
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
            config = {
                "namespaces": True,
                "keep": _keep_paths(),
                "hide": _hidden_paths(),
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
        import json

        start = time.monotonic()
        job = JobDir(sandbox_uid=SANDBOX_UID if self.root else None, slots=slots_for(output_shapes))
        try:
            job.write_job(source, entry, inputs, {"sys_path": _site_dirs()})
            _, config = self._command(job, limits)
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
