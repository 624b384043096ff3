"""Process-backend launcher: a standalone script run by the host interpreter with ``-I -S``.

It receives one JSON argument and, in order:

1. (namespaces on, i.e. the host runs as root) enters a new mount namespace, makes every mount
   private, hides sensitive directories under empty read-only tmpfs (the host's home, the package
   source, ``/run``, ``/var/tmp``...) while re-binding read-only the directories the interpreter
   needs, mounts sized tmpfs at ``/tmp`` and ``/dev/shm`` and binds the job's ``in`` (read-only)
   and ``out`` directories under ``/tmp/.sbx``;
2. sets the rlimits (address space, data, CPU, processes, file size, open files, core = 0);
3. ``exec``\\ s ``unshare --pid --fork --kill-child --net --mount-proc --setgid/--setuid 65534``
   (new PID and network namespaces; the uid drop happens *before* the harness starts, so
   RLIMIT_NPROC applies), then ``timeout -s KILL`` (PID 1 of the namespace: a backstop should
   the host die) and the harness. When PID 1 exits or is killed, the kernel kills every process
   left in the namespace, daemons included.

Without namespaces it only sets the rlimits and execs the command (the weak mode, announced by
the backend). Exit status 120 with a message on stderr means the launcher itself failed.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import sys

CLONE_NEWNS = 0x00020000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_char_p,
]


def _fail(message: str) -> None:
    sys.stderr.write(f"sandbox launcher: {message}\n")
    sys.stderr.flush()
    os._exit(120)


def _mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    enc = [None if s is None else s.encode() for s in (source, target, fstype, data)]
    if _libc.mount(enc[0], enc[1], enc[2], flags, enc[3]) != 0:
        err = ctypes.get_errno()
        _fail(f"mount {source} -> {target} ({fstype}) failed: {os.strerror(err)}")


def _bind(fd: int, target: str, readonly: bool) -> None:
    # Binding from /proc/self/fd/N reaches the directory even after its path was hidden.
    _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
    if readonly:
        _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _hide(path: str, keep_fds: dict[str, int], *, size: str, mode: str, readonly: bool) -> None:
    """Cover ``path`` with a fresh tmpfs, re-binding read-only the kept paths below it."""
    if not os.path.isdir(path):
        return
    inner = {k: fd for k, fd in keep_fds.items() if _under(k, path)}
    _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode={mode}")
    for kept, fd in sorted(inner.items()):
        os.makedirs(kept, mode=0o755, exist_ok=True)
        _bind(fd, kept, readonly=True)
    if readonly:
        _mount(
            None,
            path,
            None,
            MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV,
            f"size={size},mode={mode}",
        )


def main(config: dict) -> None:
    if config["namespaces"]:
        if _libc.unshare(CLONE_NEWNS) != 0:
            _fail(f"unshare(CLONE_NEWNS) failed: {os.strerror(ctypes.get_errno())}")
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        # Opened inside the new namespace (a bind source must be one of its mounts) and before
        # anything is hidden: the fds keep reaching the directories once covered.
        keep_fds = {}
        for path in config["keep"]:
            try:
                keep_fds[path] = os.open(path, os.O_PATH | os.O_DIRECTORY)
            except OSError:
                continue
        in_fd = os.open(config["job_in"], os.O_PATH | os.O_DIRECTORY)
        out_fd = os.open(config["job_out"], os.O_PATH | os.O_DIRECTORY)
        for path in config["hide"]:
            _hide(path, keep_fds, size="64k", mode="755", readonly=True)
        _hide("/var/tmp", keep_fds, size="64k", mode="755", readonly=True)
        # POSIX semaphores / shared memory (multiprocessing, loky) need a writable /dev/shm;
        # small, since tmpfs pages are host RAM that no rlimit charges to the sandbox.
        _hide(
            "/dev/shm",
            keep_fds,
            size=f"{min(64, config['tmpfs_mb'])}m",
            mode="1777",
            readonly=False,
        )
        _hide("/tmp", keep_fds, size=f"{config['tmpfs_mb']}m", mode="1777", readonly=False)
        os.makedirs("/tmp/.sbx/in", mode=0o755)
        os.makedirs("/tmp/.sbx/out", mode=0o755)
        _bind(in_fd, "/tmp/.sbx/in", readonly=True)
        _bind(out_fd, "/tmp/.sbx/out", readonly=False)
        os.makedirs("/tmp/work", mode=0o700)
        os.chown("/tmp/work", config["uid"], config["uid"])
        os.chdir("/tmp/work")
    else:
        os.chdir(config["workdir"])

    for name, (soft, hard) in config["rlimits"].items():
        limit = getattr(resource, name)
        try:
            resource.setrlimit(limit, (soft, hard))
        except (ValueError, OSError) as exc:
            _fail(f"setrlimit({name}, {soft}) failed: {exc}")
    uid = config.get("drop_uid")
    if uid is not None:  # no unshare tool to do it for us: drop privileges here, last
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    command = config["command"]
    try:
        os.execve(command[0], command, config["env"])
    except OSError as exc:
        _fail(f"exec {command[0]} failed: {exc}")


if __name__ == "__main__":
    try:
        main(json.loads(sys.argv[1]))
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - report any launcher bug as exit 120
        _fail(f"{type(exc).__name__}: {exc}")
