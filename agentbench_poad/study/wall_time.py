"""Training wall time of a study's runs, counted across sessions and read back for records.

:class:`WallTimeLog` adds one training session's wall time to ``<run_dir>/study_wall_time.json``
while it runs; :func:`run_wall_time` reads the total back, and :func:`run_update_time` gives a
lower bound from the run's metrics when a session's entry was lost.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


class WallTimeLog:
    """Adds one session's wall time to ``<run_dir>/study_wall_time.json``, as it runs.

    The file holds ``{"seconds": total, "sessions": n}`` summed over the run's sessions. While
    the ``with`` block runs, a daemon thread rewrites it (atomically) every ``interval`` seconds,
    and once more on exit, also on an exception or Ctrl-C; so a session ended by SIGKILL or a
    machine restart loses at most ``interval`` seconds, not its whole time. Nothing is written
    before ``run_dir`` exists (the trainer creates it).
    """

    def __init__(self, run_dir: str | os.PathLike, interval: float = 30.0) -> None:
        import threading

        self.path = Path(run_dir) / "study_wall_time.json"
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._flush_every, daemon=True)
        self._before = (0.0, 0)
        self._started = 0.0

    def __enter__(self) -> WallTimeLog:
        self._before = _read_wall_time(self.path) or (0.0, 0)
        self._started = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()  # the last flush is ours alone
        self.flush()

    def flush(self) -> None:
        from agentbench_poad.leaderboard.records import write_json_atomic

        seconds, sessions = self._before
        data = {"seconds": seconds + time.perf_counter() - self._started, "sessions": sessions + 1}
        if self.path.parent.exists():
            write_json_atomic(self.path, data)

    def _flush_every(self) -> None:
        while not self._stop.wait(self.interval):
            self.flush()


def _read_wall_time(path: Path) -> tuple[float, int] | None:
    """``study_wall_time.json`` as (seconds, sessions); None when missing or corrupt."""
    try:
        data = json.loads(path.read_text())
        return float(data["seconds"]), int(data["sessions"])
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def run_wall_time(run_dir: str | os.PathLike) -> float | None:
    """Training wall time of a run made by a study (all its sessions), or None."""
    counted = _read_wall_time(Path(run_dir) / "study_wall_time.json")
    return None if counted is None else counted[0]


def run_update_time(run_dir: str | os.PathLike) -> float | None:
    """Seconds the logged updates took (rollout and PPO update; not evaluation or checkpointing).

    Read back from ``metrics.jsonl``, so it survives a SIGKILL that loses a session's
    ``study_wall_time.json`` entry: a lower bound on the training wall time. None without metrics.
    """
    from agentbench_poad.rl.run_dir import RunDirectory

    try:
        rows = RunDirectory(run_dir).read_metrics()
    except FileNotFoundError:
        return None
    seconds, steps = 0.0, 0
    for row in rows:
        rate, now = row.get("steps_per_second"), row.get("env_steps")
        if isinstance(rate, (int, float)) and rate > 0 and isinstance(now, int):
            seconds += (now - steps) / rate
            steps = now
    return seconds if rows else None


__all__ = ["WallTimeLog", "run_update_time", "run_wall_time"]
