"""How many sandbox runs may execute at once: the sandbox owns this, not its callers.

Two bounds, both of ``AGENTBENCH_SANDBOX_CONCURRENCY`` runs (default: the CPU count), are held
around every :meth:`Backend.run <agentbench_poad.sandbox.api.Backend.run>`:

* per process, a semaphore (threads wait on it without polling);
* per machine and user, :class:`MachineSlots`: ``flock``-ed slot files, so processes that each
  run sandboxes (gymnasium ``AsyncVectorEnv`` workers, pytest-xdist workers, several trainings)
  share one budget. The kernel releases a slot when its holder exits, even when it is killed.

The slot files live in a folder only their user can touch (:func:`open_slots_dir`): another
user who pre-creates the predictable default path, or puts a symlink there, could otherwise hold
every slot (and stall this user's runs) or point the files elsewhere; such a folder is refused
with an error that names it and the fix.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

CONCURRENCY_ENV_VAR = "AGENTBENCH_SANDBOX_CONCURRENCY"
#: Folder of the machine-wide slot files (default: :func:`default_slots_dir`); point several
#: users at one folder to share one budget.
SLOTS_DIR_ENV_VAR = "AGENTBENCH_SANDBOX_SLOTS_DIR"


class UnsafeSlotsDir(RuntimeError):
    """The slot folder is not private to this user (someone else's, a symlink, or open to
    others): using it would let another user hold or redirect this user's slots."""


def default_slots_dir() -> Path:
    """Where this user's slot files live by default: ``$XDG_RUNTIME_DIR`` (a folder the system
    makes for the user alone) when it is set and ours, else ``agentbench-poad-sandbox-slots-<uid>``
    in the temp dir (checked private by :func:`open_slots_dir`)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "").strip()
    if runtime:
        try:
            info = os.stat(runtime)
            if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid():
                return Path(runtime) / "agentbench-poad-sandbox-slots"
        except OSError:
            pass
    return Path(tempfile.gettempdir()) / f"agentbench-poad-sandbox-slots-{os.getuid()}"


def open_slots_dir(directory: Path, *, private: bool) -> int:
    """A descriptor of the slot folder ``directory``, made (mode 0700) if missing.

    ``private`` (the default folder): the folder must be a real directory, not a symlink, owned
    by this user and closed to group and others, checked on the opened descriptor (so it cannot
    be swapped between the check and the use). A folder the user named
    (``AGENTBENCH_SANDBOX_SLOTS_DIR``, meant to be shared) must be a directory; the slot files
    in either are opened without following symlinks (:meth:`MachineSlots.try_acquire`).

    Raises:
        UnsafeSlotsDir: the folder fails a check (the message names it and the fix).
    """
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o700)
    flags = os.O_RDONLY | os.O_DIRECTORY | (os.O_NOFOLLOW if private else 0)
    fix = (
        f"remove it if it is not yours to share, or set {SLOTS_DIR_ENV_VAR} to a folder of your own"
    )
    try:
        fd = os.open(directory, flags)
    except OSError as exc:
        what = "a symlink or not a folder" if private else "not a folder"
        raise UnsafeSlotsDir(
            f"the sandbox slot folder {directory} is {what} ({exc.strerror}); {fix}"
        ) from None
    if not private:
        return fd
    info = os.fstat(fd)
    problem = None
    if info.st_uid != os.getuid():
        problem = f"owned by uid {info.st_uid}, not by this user (uid {os.getuid()})"
    elif info.st_mode & 0o077:
        problem = f"open to other users (mode {stat.S_IMODE(info.st_mode):04o}, want 0700)"
    if problem is not None:
        os.close(fd)
        raise UnsafeSlotsDir(
            f"the sandbox slot folder {directory} is {problem}: another user could hold this "
            f"user's sandbox slots or replace their files; {fix}"
        )
    return fd


def concurrency_limit() -> int:
    """Runs allowed at once: ``AGENTBENCH_SANDBOX_CONCURRENCY`` or the CPU count."""
    raw = os.environ.get(CONCURRENCY_ENV_VAR, "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(
                f"{CONCURRENCY_ENV_VAR} must be a positive integer, got {raw!r}"
            ) from None
        if value < 1:
            raise ValueError(f"{CONCURRENCY_ENV_VAR} must be >= 1, got {value}")
        return value
    return os.cpu_count() or 1


class MachineSlots:
    """At most ``n`` sandbox runs at once across every process of this user on this machine.

    Args:
        n: slots; default :func:`concurrency_limit`.
        directory: where the slot files live (default: ``AGENTBENCH_SANDBOX_SLOTS_DIR`` or
            :func:`default_slots_dir`, which must be private to this user: see
            :func:`open_slots_dir`).
    """

    def __init__(self, n: int | None = None, directory: str | Path | None = None) -> None:
        if n is None:
            n = concurrency_limit()
        if n < 1:
            raise ValueError(f"MachineSlots needs n >= 1, got {n}")
        self.n = int(n)
        # Only the default folder must be private; one named here or in the environment
        # variable may be shared on purpose (several users, one budget).
        self.private = False
        if directory is None:
            directory = os.environ.get(SLOTS_DIR_ENV_VAR, "").strip()
        if not directory:
            directory, self.private = default_slots_dir(), True
        self.directory = Path(directory)

    def try_acquire(self) -> int | None:
        """A held slot's file descriptor, or ``None`` when all ``n`` are taken."""
        import fcntl

        if not self.private:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder = open_slots_dir(self.directory, private=self.private)
        try:
            for i in range(self.n):
                try:
                    fd = os.open(
                        f"slot-{i}.lock",
                        os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW,
                        0o600,
                        dir_fd=folder,
                    )
                except OSError as exc:
                    raise UnsafeSlotsDir(
                        f"cannot open the sandbox slot file {self.directory / f'slot-{i}.lock'} "
                        f"({exc.strerror}; a symlink there is refused); remove it"
                    ) from None
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                return fd
            return None
        finally:
            os.close(folder)

    @staticmethod
    def release(fd: int) -> None:
        os.close(fd)  # closing the descriptor drops its flock

    @contextlib.contextmanager
    def hold(self, poll_s: float = 0.05) -> Iterator[None]:
        """Wait for a free slot, hold it for the ``with`` block."""
        fd = self.try_acquire()
        while fd is None:
            time.sleep(poll_s)
            fd = self.try_acquire()
        try:
            yield
        finally:
            self.release(fd)


_LOCK = threading.Lock()
_SEMAPHORE: tuple[tuple[int, int], threading.BoundedSemaphore] | None = None
_MACHINE: MachineSlots | None = None


def _semaphore() -> threading.BoundedSemaphore:
    # Keyed by pid: a forked worker (gymnasium AsyncVectorEnv) must not inherit a semaphore whose
    # holders live in the parent. Keyed by the limit too, so a changed setting takes effect.
    global _SEMAPHORE
    key = (os.getpid(), concurrency_limit())
    with _LOCK:
        if _SEMAPHORE is None or _SEMAPHORE[0] != key:
            _SEMAPHORE = (key, threading.BoundedSemaphore(key[1]))
        return _SEMAPHORE[1]


def machine_slots() -> MachineSlots:
    """The machine-wide slots every run holds (rebuilt when a setting changes)."""
    global _MACHINE
    wanted = MachineSlots(concurrency_limit())
    with _LOCK:
        if _MACHINE is None or (_MACHINE.n, _MACHINE.directory) != (wanted.n, wanted.directory):
            _MACHINE = wanted
        return _MACHINE


@contextlib.contextmanager
def run_slot() -> Iterator[None]:
    """Hold a place for one sandbox run: this process's semaphore, then a machine slot."""
    with _semaphore(), machine_slots().hold():
        yield
