"""Executors: run a function over a grid of cells, in this process or as Ray tasks.

A *cell* is a small picklable request (a frozen dataclass such as
:class:`~agentbench_poad.leaderboard.sweep.EvalCell`); the function turns one cell into a
picklable result. Both executors honour the same contract:

* every cell yields exactly one :class:`CellOutcome` (``ok`` with its ``value``, or the error
  of its last attempt);
* a cell whose function raises is reported (``on_failure``) and run again, up to
  ``max_retries`` more times, while the other cells go on;
* ``on_result`` is called in the calling process as soon as a cell finishes, so the caller can
  persist it at once: nothing finished is lost when a later cell (or the driver) dies;
* ``on_result`` may return *follow-up* cells (for the same function), which run next, before
  the cells still queued: a study evaluates a record as soon as its runs are trained, in the
  first free slot, while the other slots go on training. Their outcomes come after those of
  ``cells``, in the order they were added.

:class:`LocalExecutor` runs the cells one after another in this process. :class:`RayExecutor`
submits each cell as a Ray task (``ray.init()`` of a local cluster, or ``address=`` of an
existing one); a worker or node that dies mid-task is retried by Ray itself, an exception by us.
A cell that trains on a GPU asks Ray for one (``task_gpus``; a fraction when several runs share
a GPU: :func:`gpu_share`), so Ray places it on a node with a free GPU and sets
``CUDA_VISIBLE_DEVICES`` for it (docs/scale-out.md, "GPUs").

Ray is an optional dependency (``pip install "agentbench-poad[ray]"``) and is imported only
when a :class:`RayExecutor` is made.
"""

from __future__ import annotations

import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from agentbench_poad.errors import DependencyNotInstalled

__all__ = [
    "EXECUTORS",
    "CellOutcome",
    "Executor",
    "LocalExecutor",
    "RayExecutor",
    "get_executor",
    "gpu_share",
    "require_ray",
]

C = TypeVar("C")

#: Executor names accepted by :func:`get_executor` and the ``--executor`` options.
EXECUTORS = ("local", "ray")


def require_ray() -> Any:
    """``import ray``, or :class:`~agentbench_poad.errors.DependencyNotInstalled` naming the extra."""
    try:
        import ray
    except ImportError as exc:
        raise DependencyNotInstalled(
            'Ray is not installed; the Ray executor needs the "ray" extra: '
            'pip install "agentbench-poad[ray]" (or use --executor local)'
        ) from exc
    return ray


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> Any:
    """Connect to Ray once per process and return the module.

    Args:
        address: an existing cluster (``"auto"``, ``"ray://host:10001"``, ``"host:6379"``);
            ``None`` starts a local cluster (or reuses the one this process already joined).
        num_cpus: CPUs of a local cluster (``None``: all of this machine's).
    """
    ray = require_ray()
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {
            "ignore_reinit_error": True,
            "log_to_driver": False,
            "include_dashboard": False,
        }
        if address is not None:
            kwargs["address"] = address
        elif num_cpus is not None:
            kwargs["num_cpus"] = num_cpus
        try:
            ray.init(**kwargs)
        except ConnectionError as exc:
            raise ConnectionError(
                f"cannot reach the Ray cluster at {address!r}: {exc}; start one with "
                "`ray start --head` on the head node (docs/scale-out.md) or omit --address "
                "for a local cluster"
            ) from exc
    return ray


@dataclass
class CellOutcome(Generic[C]):
    """What became of one cell.

    Attributes:
        cell: the request.
        ok: the function returned.
        value: its result (``None`` on failure).
        error: the last attempt's error, one line plus the traceback tail (``""`` on success).
        attempts: how many times the cell ran.
        seconds: wall time of the successful (or last) attempt, as seen by the caller.
    """

    cell: C
    ok: bool
    value: Any = None
    error: str = ""
    attempts: int = 1
    seconds: float = 0.0


def _describe(exc: BaseException) -> str:
    tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:])
    return f"{type(exc).__name__}: {exc}\n{tail}".strip()


class Executor:
    """Maps a function over cells with retries (see the module docstring).

    Args:
        max_retries: extra attempts of a cell whose function raised (0: no retry).
    """

    name = ""

    def __init__(self, max_retries: int = 2) -> None:
        if not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
        self.max_retries = max_retries

    def map(
        self,
        fn: Callable[[C], Any],
        cells: Sequence[C],
        *,
        on_result: Callable[[CellOutcome[C]], Iterable[C] | None] | None = None,
        on_failure: Callable[[C, int, str], None] | None = None,
    ) -> list[CellOutcome[C]]:
        """Run ``fn(cell)`` for every cell; outcomes come back in the order of ``cells``, then
        those of the follow-ups in the order they were added.

        Args:
            fn: a module-level function (Ray pickles it by reference).
            cells: picklable requests.
            on_result: called with each final outcome (success or last failure) as it arrives;
                may return follow-up cells, which run before every cell still queued.
            on_failure: called with ``(cell, attempt, error)`` after every failed attempt.
        """
        raise NotImplementedError

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the executor holds."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalExecutor(Executor):
    """One cell after another in this process."""

    name = "local"

    def map(self, fn, cells, *, on_result=None, on_failure=None):
        grid = _Grid(cells)
        while grid:
            index = grid.pop()
            cell = grid.cells[index]
            attempt = 0
            while True:
                attempt += 1
                started = time.perf_counter()
                try:
                    value = fn(cell)
                except Exception as exc:  # noqa: BLE001 - reported, retried, never lost
                    error = _describe(exc)
                    if on_failure is not None:
                        on_failure(cell, attempt, error)
                    if attempt <= self.max_retries:
                        continue
                    outcome = CellOutcome(
                        cell, False, None, error, attempt, time.perf_counter() - started
                    )
                else:
                    outcome = CellOutcome(
                        cell, True, value, "", attempt, time.perf_counter() - started
                    )
                break
            grid.finish(index, outcome, on_result(outcome) if on_result is not None else None)
        return grid.results()


class _Grid:
    """A map's cells, their outcomes and the order in which the rest are submitted: the cells
    in order, with follow-ups (returned by ``on_result``) ahead of those still waiting."""

    def __init__(self, cells: Sequence[Any]) -> None:
        self.cells = list(cells)
        self.outcomes: list[CellOutcome | None] = [None] * len(self.cells)
        self._waiting: deque[int] = deque(range(len(self.cells)))
        self._follow_ups: deque[int] = deque()

    def __bool__(self) -> bool:
        """Cells are still waiting to be submitted."""
        return bool(self._waiting or self._follow_ups)

    def pop(self) -> int:
        """The index of the next cell to submit."""
        return (self._follow_ups or self._waiting).popleft()

    def finish(self, index: int, outcome: CellOutcome, follow_ups: Iterable[Any] | None) -> None:
        self.outcomes[index] = outcome
        for cell in follow_ups or ():
            self.cells.append(cell)
            self.outcomes.append(None)
            self._follow_ups.append(len(self.cells) - 1)

    def results(self) -> list[CellOutcome]:
        return [o for o in self.outcomes if o is not None]


def _call(fn: Callable[[Any], Any], cell: Any) -> Any:
    return fn(cell)


class RayExecutor(Executor):
    """Each cell a Ray task on a local or existing cluster.

    Args:
        address: an existing cluster (``ray start --head`` prints it); ``None``: a local one.
        max_retries: extra attempts of a cell whose function raised.
        num_cpus: CPUs of a local cluster started here (``None``: all).
        task_cpus: CPUs one cell reserves (Ray schedules at most ``CPUs / task_cpus`` at once).
        task_gpus: GPUs one cell reserves (0: none; 0.5: two cells share a GPU; see
            :func:`gpu_share`). Ray then runs at most ``GPUs / task_gpus`` cells at once too.
        worker_retries: re-runs Ray itself makes when a worker process or node dies.

    Raises:
        ValueError: ``task_gpus`` is asked for but the cluster has no GPU (a task would wait
            forever), or it is above 1 or negative.
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        max_retries: int = 2,
        *,
        num_cpus: int | None = None,
        task_cpus: float = 1.0,
        task_gpus: float = 0.0,
        worker_retries: int = 3,
    ) -> None:
        super().__init__(max_retries)
        if not 0.0 <= task_gpus <= 1.0:
            raise ValueError(
                f"task_gpus must be in [0, 1] (a fraction when runs share a GPU), got {task_gpus}"
            )
        self.ray = ensure_ray(address, num_cpus)
        if task_gpus and not self.ray.cluster_resources().get("GPU", 0.0):
            raise ValueError(
                "--device cuda asks Ray for a GPU per run, but the Ray cluster has no GPU "
                f"({address or 'a local cluster'}); use --device cpu, --device auto, or a "
                "cluster whose nodes have GPUs (`ray start --head --num-gpus N`; "
                "docs/scale-out.md)"
            )
        self.task_cpus = task_cpus
        self.task_gpus = task_gpus
        self.worker_retries = worker_retries
        self._remote = self.ray.remote(_call).options(**self.task_options())

    def task_options(self) -> dict[str, Any]:
        """The ``ray.remote(...).options`` of every cell's task (resources and retries)."""
        return {
            "num_cpus": self.task_cpus,
            "num_gpus": self.task_gpus,
            "max_retries": self.worker_retries,
            "retry_exceptions": False,
        }

    def map(self, fn, cells, *, on_result=None, on_failure=None):
        ray = self.ray
        fn_ref = ray.put(fn)
        grid = _Grid(cells)
        pending: dict[Any, tuple[int, int, float]] = {}

        def submit(index: int, attempt: int) -> None:
            pending[self._remote.remote(fn_ref, grid.cells[index])] = (
                index,
                attempt,
                time.perf_counter(),
            )

        # At most one cell in flight per slot of the cluster, the rest waiting here, so that a
        # follow-up (returned by ``on_result``) takes the next free slot instead of queueing in
        # Ray behind every cell already submitted.
        def top_up() -> None:
            for _ in range(max(self.slots() - len(pending), 0)):
                if not grid:
                    return
                submit(grid.pop(), 1)

        top_up()
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            ref = ready[0]
            index, attempt, started = pending.pop(ref)
            cell = grid.cells[index]
            try:
                value = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - RayTaskError, WorkerCrashedError, ...
                error = _describe(getattr(exc, "cause", None) or exc)
                if on_failure is not None:
                    on_failure(cell, attempt, error)
                if attempt <= self.max_retries:
                    submit(index, attempt + 1)
                    continue
                outcome = CellOutcome(
                    cell, False, None, error, attempt, time.perf_counter() - started
                )
            else:
                outcome = CellOutcome(cell, True, value, "", attempt, time.perf_counter() - started)
            grid.finish(index, outcome, on_result(outcome) if on_result is not None else None)
            top_up()
        return grid.results()

    def slots(self) -> int:
        """Cells the cluster runs at once: its CPUs / ``task_cpus``, and with ``task_gpus`` at
        most its GPUs / ``task_gpus`` (at least 1)."""
        resources = self.ray.cluster_resources()
        slots = resources.get("CPU", 1.0) / self.task_cpus
        if self.task_gpus:
            slots = min(slots, resources.get("GPU", 0.0) / self.task_gpus)
        # 1e-6: a third of a GPU, three times over, is one GPU (not 0.999... of one)
        return max(int(slots + 1e-6), 1)


def gpu_share(device: str | None, runs_per_gpu: int = 1, cluster_gpus: float = 0.0) -> float:
    """The GPUs one run asks Ray for: ``1 / runs_per_gpu`` for a CUDA device, 0 otherwise.

    ``"auto"`` asks for a GPU share when the cluster has GPUs (``cluster_gpus``), so that Ray
    places the run beside a free GPU and sets its ``CUDA_VISIBLE_DEVICES``, and for none when it
    has none; ``None`` (the run's config, CPU by default) and ``"cpu"`` ask for none.

    Args:
        device: the study's ``--device``.
        runs_per_gpu: runs that share one GPU (a spec's ``[study] runs_per_gpu``); small models
            leave most of a GPU idle, so several runs on one GPU finish a grid sooner.
        cluster_gpus: the cluster's GPU count (``ray.cluster_resources()["GPU"]``).
    """
    if not isinstance(runs_per_gpu, int) or isinstance(runs_per_gpu, bool) or runs_per_gpu < 1:
        raise ValueError(f"runs_per_gpu must be an int >= 1, got {runs_per_gpu!r}")
    if device is None:
        return 0.0
    kind = str(device).split(":", 1)[0]
    if kind == "cuda" or (kind == "auto" and cluster_gpus > 0):
        return 1.0 / runs_per_gpu
    return 0.0


def get_executor(
    name: str = "local",
    *,
    address: str | None = None,
    max_retries: int = 2,
    device: str | None = None,
    runs_per_gpu: int = 1,
) -> Executor:
    """An executor by name (``"local"`` or ``"ray"``); ``address`` only for Ray.

    With Ray, each cell asks for :func:`gpu_share` ``(device, runs_per_gpu)`` of a GPU; the
    local executor runs one cell at a time on ``device`` as it is.
    """
    if name == "local":
        if address is not None:
            raise ValueError("--address names a Ray cluster; use it with --executor ray")
        return LocalExecutor(max_retries)
    if name == "ray":
        gpu_share(device, runs_per_gpu)  # a bad runs_per_gpu fails before Ray starts
        cluster_gpus = 0.0
        if device is not None and str(device).startswith("auto"):
            cluster_gpus = ensure_ray(address).cluster_resources().get("GPU", 0.0)
        return RayExecutor(
            address, max_retries, task_gpus=gpu_share(device, runs_per_gpu, cluster_gpus)
        )
    raise ValueError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}")
