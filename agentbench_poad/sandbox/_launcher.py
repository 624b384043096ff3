"""Process-backend launcher: a standalone script run by the host interpreter with ``-I -S``.

It receives one JSON argument and, in order:

1. (namespaces on, i.e. the host runs as root) enters a new mount namespace, makes every mount
   private and builds the sandbox's file system from an allow-list on an empty tmpfs: the plan
   of :func:`agentbench_poad.sandbox.process_backend.root_plan` (system trees, a few ``/etc``
   entries and the interpreter's directories, bound read-only), a minimal ``/dev`` (null, zero,
   full, random, urandom, tty and a small ``/dev/shm``), an empty ``/proc`` mount point, a sized
   tmpfs at ``/tmp`` (made first, so an interpreter directory under the host's ``/tmp`` is bound
   inside it) with the job's ``in`` (read-only) and ``out`` directories under
   ``/tmp/.sbx``; it makes that root read-only, switches to it with ``pivot_root`` and detaches the
   host's root, so nothing else of the host's file system (``/work``, ``/root``, ``/home``,
   its ``/tmp``, the package source) exists for the code;
2. sets the rlimits (address space, data, CPU, processes, file size, open files, core = 0),
   ``no_new_privs`` and a seccomp filter that answers ``EPERM`` to the kernel keyring calls
   (``add_key``, ``request_key``, ``keyctl``; Docker's default profile refuses them too): a
   uid's keyring outlives its processes, so two runs as uid 65534 could pass data through it;
3. ``exec``\\ s ``unshare --pid --fork --kill-child --net --ipc --mount-proc --setgid/--setuid
   65534`` (new PID, network and IPC namespaces; the uid drop happens *before* the harness starts, so
   RLIMIT_NPROC applies), then ``timeout -s KILL`` (PID 1 of the namespace: a backstop should
   the host die) and the harness. When PID 1 exits or is killed, the kernel kills every process
   left in the namespace, daemons included.

Without namespaces it only sets the rlimits and the seccomp filter and execs the command (the
weak mode, announced by the backend). Exit status 120 with a message on stderr means the launcher itself failed.
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
_libc.syscall.restype = ctypes.c_long
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
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


MNT_DETACH = 2
#: ``pivot_root`` has no libc wrapper: its syscall number per machine.
_SYS_PIVOT_ROOT = {
    "x86_64": 155,
    "aarch64": 41,
    "riscv64": 41,
    "ppc64le": 203,
    "ppc64": 203,
    "s390x": 217,
}
#: Device nodes of the sandbox's ``/dev`` (bound from the host's).
_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


#: The tmpfs mounts of the new root: the only mount points :func:`_make` may create below.
_OWN_MOUNTS: set[str] = set()


def _tmpfs(target: str, size: str, mode: str) -> None:
    _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode={mode}")
    _OWN_MOUNTS.add(target)


def _make(root: str, path: str, kind: str, target: str = "") -> str:
    """Create ``root + path`` (``"dir"``, ``"file"`` or ``"link"`` to ``target``) and parents.

    Refuses to step through a link or a host directory bound in: a directory created there
    would be created on the host's file system.
    """
    parts = [p for p in path.split("/") if p]
    current = root
    for part in parts[:-1]:
        current = os.path.join(current, part)
        if os.path.islink(current) or (os.path.ismount(current) and current not in _OWN_MOUNTS):
            _fail(f"cannot place {path} in the sandbox: {current} is a link or a mount")
        if not os.path.exists(current):
            os.mkdir(current, 0o755)
    full = os.path.join(current, parts[-1]) if parts else root
    if os.path.lexists(full):
        _fail(f"cannot place {path} in the sandbox: it is there already")
    if kind == "dir":
        os.mkdir(full, 0o755)
    elif kind == "file":
        os.close(os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    else:
        os.symlink(target, full)
    return full


def _bind_ro(source: str, target: str) -> None:
    _mount(source, target, None, MS_BIND | MS_REC)
    _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _build_root(config: dict) -> None:
    """Build the allow-listed root at ``config["new_root"]`` (module docstring, step 1)."""
    root = config["new_root"]
    _tmpfs(root, "1m", "755")
    # The sandbox's own /tmp first: an allow-listed directory that lives under the host's /tmp
    # (a virtual environment or a checkout there, as on a CI machine) is then bound inside it.
    tmp = _make(root, "/tmp", "dir")
    _tmpfs(tmp, f"{config['tmpfs_mb']}m", "1777")
    for step in config["plan"]:
        if step[0] == "link":
            _make(root, step[1], "link", step[2])
        elif os.path.isdir(step[1]):
            _bind_ro(step[1], _make(root, step[1], "dir"))
        elif os.path.exists(step[1]):
            _bind_ro(step[1], _make(root, step[1], "file"))
    dev = _make(root, "/dev", "dir")
    _tmpfs(dev, "64k", "755")
    for name in _DEVICES:
        if os.path.exists(f"/dev/{name}"):
            # Not read-only: /dev/null and friends are written to.
            _mount(f"/dev/{name}", _make(root, f"/dev/{name}", "file"), None, MS_BIND)
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        _make(root, f"/dev/{name}", "link", target)
    # POSIX semaphores / shared memory (multiprocessing, loky) need a writable /dev/shm;
    # small, since tmpfs pages are host RAM that no rlimit charges to the sandbox.
    _tmpfs(_make(root, "/dev/shm", "dir"), f"{min(64, config['tmpfs_mb'])}m", "1777")
    _make(root, "/proc", "dir")  # `unshare --mount-proc` mounts the PID namespace's /proc here
    os.makedirs(f"{tmp}/.sbx/in", mode=0o755)
    os.makedirs(f"{tmp}/.sbx/out", mode=0o755)
    _bind_ro(config["job_in"], f"{tmp}/.sbx/in")
    _mount(config["job_out"], f"{tmp}/.sbx/out", None, MS_BIND)
    os.makedirs(f"{tmp}/work", mode=0o700)
    os.chown(f"{tmp}/work", config["uid"], config["uid"])
    _mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    number = _SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        _fail(f"pivot_root: unknown syscall number on {os.uname().machine}")
    os.chdir(root)
    # pivot_root(".", "."): the host's root is stacked on the new one; detach it right away.
    if _libc.syscall(number, b".", b".") != 0:
        _fail(f"pivot_root failed: {os.strerror(ctypes.get_errno())}")
    if _libc.umount2(b".", MNT_DETACH) != 0:
        _fail(f"detaching the host's root failed: {os.strerror(ctypes.get_errno())}")
    os.chdir("/")


PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
EPERM = 1
#: ``(AUDIT_ARCH_*, (add_key, request_key, keyctl))`` per machine.
_KEYRING_CALLS = {
    "x86_64": (0xC000003E, (248, 249, 250)),
    "aarch64": (0xC00000B7, (217, 218, 219)),
    "riscv64": (0xC00000F3, (217, 218, 219)),
    "ppc64le": (0xC0000015, (269, 270, 271)),
    "s390x": (0x80000016, (278, 279, 280)),
}
#: x86_64's x32 ABI sets this bit in the call number; nothing here uses that ABI.
_X32_BIT = 0x40000000


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _refuse_keyrings() -> None:
    """Install the seccomp filter of step 2 (inherited by everything the command starts).

    A classic BPF program over ``struct seccomp_data`` (``nr`` at offset 0, ``arch`` at 4): a
    call from another ABI than the machine's own (i386 or x32 on x86_64) or a keyring call gets
    ``EPERM``; everything else is allowed. On a machine missing from the table the filter is
    left out (the backend's isolation line is then one guarantee short).
    """
    machine = _KEYRING_CALLS.get(os.uname().machine)
    if machine is None:
        return
    arch, calls = machine
    load_w, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    deny = SECCOMP_RET_ERRNO | EPERM
    program = [
        (load_w, 0, 0, 4),  # A = arch
        (jeq, 1, 0, arch),  # native ABI: go on
        (ret, 0, 0, deny),
        (load_w, 0, 0, 0),  # A = nr
        (jge, 4, 0, _X32_BIT),  # x32 call numbers: deny
        (jeq, 3, 0, calls[0]),
        (jeq, 2, 0, calls[1]),
        (jeq, 1, 0, calls[2]),
        (ret, 0, 0, SECCOMP_RET_ALLOW),
        (ret, 0, 0, deny),
    ]
    filters = (_SockFilter * len(program))(*[_SockFilter(*step) for step in program])
    fprog = _SockFprog(len(program), filters)
    _libc.prctl.argtypes = [
        ctypes.c_int,
        ctypes.c_ulong,
        ctypes.c_void_p,
        ctypes.c_ulong,
        ctypes.c_ulong,
    ]
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        _fail(f"prctl(NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}")
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        _fail(f"installing the seccomp filter failed: {os.strerror(ctypes.get_errno())}")


def main(config: dict) -> None:
    if config["namespaces"]:
        if _libc.unshare(CLONE_NEWNS) != 0:
            _fail(f"unshare(CLONE_NEWNS) failed: {os.strerror(ctypes.get_errno())}")
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        _build_root(config)
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
    _refuse_keyrings()
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
