"""How many sandbox runs may execute at once: the sandbox owns this, not its callers.

Two bounds, both of ``AGENTBENCH_SANDBOX_CONCURRENCY`` runs (default: the CPU count), are held
around every :meth:`Backend.run <agentbench_poad.sandbox.api.Backend.run>`:

* per process, a semaphore (threads wait on it without polling);
* per machine and user, :class:`MachineSlots`: ``flock``-ed slot files, so processes that each
  run sandboxes (gymnasium ``AsyncVectorEnv`` workers, pytest-xdist workers, several trainings)
  share one budget. The kernel releases a slot when its holder exits, even when it is killed.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

CONCURRENCY_ENV_VAR = "AGENTBENCH_SANDBOX_CONCURRENCY"
#: Folder of the machine-wide slot files (default: a per-user folder in the temp dir); point
#: several users at one folder to share one budget.
SLOTS_DIR_ENV_VAR = "AGENTBENCH_SANDBOX_SLOTS_DIR"


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
        directory: where the slot files live (default: ``AGENTBENCH_SANDBOX_SLOTS_DIR`` or a
            per-user folder in the temp dir).
    """

    def __init__(self, n: int | None = None, directory: str | Path | None = None) -> None:
        if n is None:
            n = concurrency_limit()
        if n < 1:
            raise ValueError(f"MachineSlots needs n >= 1, got {n}")
        self.n = int(n)
        if directory is None:
            directory = (
                os.environ.get(SLOTS_DIR_ENV_VAR, "").strip()
                or Path(tempfile.gettempdir()) / f"agentbench-poad-sandbox-slots-{os.getuid()}"
            )
        self.directory = Path(directory)

    def try_acquire(self) -> int | None:
        """A held slot's file descriptor, or ``None`` when all ``n`` are taken."""
        import fcntl

        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        for i in range(self.n):
            fd = os.open(self.directory / f"slot-{i}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return fd
        return None

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
