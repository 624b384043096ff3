"""The run directory of a training run: what :func:`~agentbench_poad.rl.trainer.train` writes.

Layout::

    config.json          agent, env, model, seed, preset, total_steps and the full algorithm
                         config; code_sessions: the package version and git commit of each
                         session that trained the run, from which update on
    metrics.jsonl        one JSON object per update (see trainer.METRIC_KEYS)
    learning_curve.json  [{"env_steps", "eval_return", "eval_score", "eval_success_rate"}, ...]
    best_code.json       open-action envs: the best-reward action seen in training, with its reward
    tb/                  TensorBoard event files (the same scalars, by env step)
    checkpoints/latest   name of the newest checkpoint directory
    checkpoints/update_NNNNNN/
        adapter/         the LoRA adapter (peft format)
        agent.pt         critic weights and both optimiser states
        rng.pt           generator states (action sampling, minibatch shuffles)
        state.json       update, env steps, each env's episode (seed index + actions so far), curve

Resume bookkeeping lives here too: a run resumes only with the same identity (everything in
config.json but the device); metric lines logged after the newest checkpoint (a killed run may
have written some) are dropped; TensorBoard events after it are purged. Every file is written
atomically (temp file or directory, fsynced, then ``os.replace``); the commit point of an update
is the replace of the ``latest`` pointer (:meth:`RunDirectory.save_checkpoint`), after its
metrics line and its checkpoint directory are on disk, so a run killed at any moment resumes
from a checkpoint whose metrics, weights and generators belong together.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from agentbench_poad.software import software_info

__all__ = [
    "RunDirectory",
    "TensorBoard",
    "latest_checkpoint",
    "load_run_config",
    "shareable_files",
    "write_json",
]

#: config.json keys that must match to resume a run.
IDENTITY_KEYS = ("agent", "env_id", "env_kwargs", "model", "seed", "algorithm")
#: config.json key of the code each session of the run trained with: a list of
#: ``{"from_update": N, "package_version", "git_commit", "git_dirty", "python", "compute"}``,
#: one per session, ``from_update`` the checkpoint it resumed from (0: the start), ``compute``
#: its device and dtype (``dtype_note`` when a GPU without bfloat16 made it float16), and
#: ``torch_threads`` torch's intra-op thread count (sessions since it was added).
CODE_SESSIONS = "code_sessions"
#: The session key of torch's intra-op thread count: the order of a CPU float reduction
#: follows it, so a run resumed under another count drifts by rounding from the run it continues.
THREADS_KEY = "torch_threads"


def _torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def warn_if_threads_differ(sessions: list[dict[str, Any]], threads: int, path: Path) -> None:
    """Warn when this session computes with another torch thread count than the last one that
    recorded it: exact resume holds for the same count only (float reductions then take the
    same order; a Ray task of one CPU runs one thread, a plain process all cores)."""
    recorded = [s[THREADS_KEY] for s in sessions if isinstance(s, dict) and THREADS_KEY in s]
    if recorded and recorded[-1] != threads:
        warnings.warn(
            f"resuming {path} with {threads} torch thread(s) where its last session used "
            f"{recorded[-1]}: float reductions change order, so the run drifts by rounding from "
            f"an uninterrupted one; set torch.set_num_threads({recorded[-1]}) (or "
            f"OMP_NUM_THREADS={recorded[-1]}) or resume it under the executor it ran on",
            RuntimeWarning,
            stacklevel=3,
        )


def _compute(algorithm: dict[str, Any]) -> dict[str, Any]:
    """Where this session computes: device, dtype, and a note when the dtype fell back
    (:func:`~agentbench_poad.models.loading.compute_summary`)."""
    from agentbench_poad.models.loading import compute_summary

    return compute_summary(algorithm.get("device", "cpu"), algorithm.get("dtype", "float32"))


#: Test-only (tests/test_resume_sigkill.py): seconds to pause after each step of an update's
#: commit sequence, each announced on stderr as ``commit-step: NAME``, so that a test can SIGKILL
#: a run inside any of them. Unset (always, outside that test): no pause, no output.
COMMIT_PAUSE_ENV = "AGENTBENCH_POAD_TEST_COMMIT_PAUSE"


def commit_step(name: str) -> None:
    """Mark a step of the commit sequence (a pause only under :data:`COMMIT_PAUSE_ENV`)."""
    pause = os.environ.get(COMMIT_PAUSE_ENV)
    if pause:
        print(f"commit-step: {name}", file=sys.stderr, flush=True)
        time.sleep(float(pause))


def _fsync(path: Path) -> None:
    """Flush a file, or a directory's entries, to disk (a directory where the OS allows it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # a directory on Windows cannot be opened; its renames are durable anyway
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory
    finally:
        os.close(fd)


def _replace_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically and durably: temp file, fsync, ``os.replace``,
    fsync of the directory (a kill or a crash leaves the old file or the new, never a mix)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    _fsync(path.parent)


def write_json(path: Path, value: Any) -> None:
    """Write ``value`` as indented JSON, atomically (temp file, fsync, ``os.replace``)."""
    _replace_text(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def load_run_config(run_dir: str | os.PathLike) -> dict[str, Any]:
    """The run's ``config.json``."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; is {run_dir} a run directory of `train`?")
    return json.loads(path.read_text())


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint directory of a run, or None."""
    pointer = Path(run_dir) / "checkpoints" / "latest"
    if not pointer.is_file():
        return None
    path = pointer.parent / pointer.read_text().strip()
    return path if path.is_dir() else None


def latest_update(run_dir: str | os.PathLike) -> int | None:
    """The update the run's newest complete checkpoint was written after (its ``state.json``);
    None without one."""
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        return None
    return int(json.loads((checkpoint / "state.json").read_text())["update"])


def _checkpoint_update(checkpoint: Path | None) -> int:
    """The update a checkpoint directory (``update_NNNNNN``) was written after; 0 for None."""
    if checkpoint is None:
        return 0
    digits = checkpoint.name.rpartition("_")[2]
    return int(digits) if digits.isdigit() else 0


def shareable_files(
    run_dir: str | os.PathLike, *, resumable: bool = False, extra: tuple[str, ...] = ()
) -> list[Path]:
    """The files of a run to ship (commit, upload) so that another machine can evaluate it, or,
    with ``resumable``, also continue it exactly.

    Evaluation needs the config, the logs, the learning curve, the best code (open-action envs)
    and the newest checkpoint's ``state.json`` and adapter; resuming needs that checkpoint's
    ``agent.pt`` and ``rng.pt`` too. Older checkpoints and TensorBoard events are left out.

    Args:
        run_dir: a run directory.
        resumable: include what an exact resume needs.
        extra: other file names in the run directory to include when present.
    """
    run_dir = Path(run_dir)
    names = ("config.json", "metrics.jsonl", "learning_curve.json", "best_code.json", *extra)
    files = [run_dir / name for name in names]
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is not None:
        files += [run_dir / "checkpoints" / "latest", checkpoint / "state.json"]
        files += sorted(p for p in (checkpoint / "adapter").rglob("*") if p.is_file())
        if resumable:
            files += [checkpoint / "agent.pt", checkpoint / "rng.pt"]
    return [f for f in files if f.is_file()]


def _identity(value: Any) -> Any:
    """What must match to resume a run: everything but where it runs (``device``, envs)."""
    if isinstance(value, dict) and "device" in value:
        return {k: v for k, v in value.items() if k not in ("device", "env_executor")}
    return value


def _kept_config_source(
    path: Path, previous: dict[str, Any], spec: dict[str, Any]
) -> dict[str, Any]:
    """The spec to write when resuming: a study's run keeps its ``config_source``.

    A run a study's tuning configured names that choice in ``config_source`` (the record's
    ``training.config_source``). Resuming it with a plain ``train --resume``, which has no
    spec to name, keeps the one the run was made with (the identity keys already showed it is
    the same configuration); resuming it with another one is refused: the runs of a record
    must name one.
    """
    before = previous.get("config_source")
    if before is None:
        return spec
    if "config_source" not in spec:
        return {**spec, "config_source": before}
    if spec["config_source"] != before:
        raise ValueError(
            f"cannot resume {path}: it was made from {before!r}, this call names "
            f"{spec['config_source']!r}; resume it through the same study spec path (or "
            "without one, as `train --resume` does), or train into a new --out"
        )
    return spec


class RunDirectory:
    """One run directory: its files, checkpoints and resume checks.

    Args:
        path: the directory (created by :meth:`open`).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    def open(
        self,
        spec: dict[str, Any],
        *,
        resume: bool,
        algorithm_defaults: dict[str, Any] | None = None,
    ) -> Path | None:
        """Create (or re-open, with ``resume``) the run and write its ``config.json``.

        Args:
            spec: the run's config (see the layout).
            resume: continue the run that is there.
            algorithm_defaults: the algorithm config's field defaults. A field the run's saved
                config lacks was added to the package after the run was made, so the run was
                made with its default: resuming compares it as that default.

        Returns:
            The checkpoint to resume from, or None to start from scratch.

        Raises:
            ValueError: resuming with another identity than the run's.
            FileExistsError: the directory holds a run and ``resume`` is False.
        """
        checkpoint = None
        sessions: list[dict[str, Any]] = []
        if resume and (self.path / "config.json").exists():
            previous = load_run_config(self.path)
            sessions = list(previous.get(CODE_SESSIONS) or [])
            if algorithm_defaults and isinstance(previous.get("algorithm"), dict):
                previous["algorithm"] = {**algorithm_defaults, **previous["algorithm"]}
            for key in IDENTITY_KEYS:
                if _identity(previous.get(key)) != _identity(spec[key]):
                    raise ValueError(
                        f"cannot resume {self.path}: its {key} is {previous.get(key)!r}, this "
                        f"call asks for {spec[key]!r}; pass the same arguments or a new --out"
                    )
            spec = _kept_config_source(self.path, previous, spec)
            checkpoint = latest_checkpoint(self.path)
            self._drop_uncommitted_checkpoints(checkpoint)
        elif self.metrics_path.exists():
            raise FileExistsError(
                f"{self.path} already holds a run; pass resume=True (--resume) to continue it or "
                "choose another output directory"
            )
        compute = _compute(spec.get("algorithm") or {})  # a missing GPU fails before mkdir
        threads = _torch_threads()
        if checkpoint is not None:
            warn_if_threads_differ(sessions, threads, self.path)
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "checkpoints").mkdir(exist_ok=True)
        session = {
            "from_update": _checkpoint_update(checkpoint),
            **software_info(),
            "compute": compute,
            THREADS_KEY: threads,
        }
        write_json(self.path / "config.json", {**spec, CODE_SESSIONS: [*sessions, session]})
        if checkpoint is None:
            (self.path / "best_code.json").unlink(missing_ok=True)  # a run killed before a ckpt
        return checkpoint

    # -- logs --------------------------------------------------------------------------------
    def truncate_metrics(self, updates: int) -> None:
        """Keep the metric lines of updates ``<= updates`` (a killed run may have logged more).

        Run on resume with the update of the checkpoint it resumes from: the lines of a killed
        run's uncommitted updates go, and so does a line cut short by the kill.
        """
        path = self.metrics_path
        if not path.exists():
            return
        kept = []
        for line in path.read_text().splitlines():
            try:
                if json.loads(line)["update"] <= updates:
                    kept.append(line)
            except (json.JSONDecodeError, KeyError, TypeError):
                continue  # a line cut short by the kill
        _replace_text(path, "".join(line + "\n" for line in kept))

    def read_metrics(self) -> list[dict[str, Any]]:
        """The logged update lines, in order, skipping a line cut short by a kill.

        Raises:
            FileNotFoundError: the directory holds no ``metrics.jsonl`` (not a training run).
        """
        if not self.metrics_path.is_file():
            raise FileNotFoundError(
                f"{self.metrics_path} does not exist: pass a training run directory"
            )
        rows = []
        for line in self.metrics_path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and "update" in row:
                rows.append(row)
        return rows

    def append_metrics(self, metrics: dict[str, Any]) -> None:
        """Append an update's line and flush it to disk (before its checkpoint is committed)."""
        with open(self.metrics_path, "a") as handle:
            handle.write(json.dumps(metrics, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def write_learning_curve(self, curve: list[dict[str, Any]]) -> None:
        write_json(self.path / "learning_curve.json", curve)

    def write_best_code(self, best_code: dict[str, Any] | None) -> None:
        """Write the best code so far (None: none yet, the file is removed)."""
        if best_code is None:
            (self.path / "best_code.json").unlink(missing_ok=True)
        else:
            write_json(self.path / "best_code.json", best_code)

    def tensorboard(self, *, purge_step: int | None) -> TensorBoard:
        """The run's TensorBoard writer (``purge_step``: drop events from that step on)."""
        return TensorBoard(self.path / "tb", purge_step=purge_step)

    # -- checkpoints -------------------------------------------------------------------------
    def save_checkpoint(
        self,
        update: int,
        policy: Any,
        algorithm: Any,
        generators: dict[str, Any],
        state: dict[str, Any],
        *,
        keep: int,
    ) -> Path:
        """Write a checkpoint and commit it.

        The files go to a temp directory, are flushed to disk and the directory is renamed to
        ``update_NNNNNN``; then the ``latest`` pointer is replaced: that replace is the commit
        point. A run killed before it resumes from the previous checkpoint (and drops the
        metrics lines after that one), after it from this one. Older checkpoints beyond ``keep``
        are removed last.
        """
        import torch

        root = self.path / "checkpoints"
        name = f"update_{update:06d}"
        final = root / name
        tmp = root / f".{name}.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        policy.save_adapter(tmp / "adapter")
        torch.save(algorithm.state_dict(), tmp / "agent.pt")
        torch.save(generators, tmp / "rng.pt")
        write_json(tmp / "state.json", state)
        for path in sorted(tmp.rglob("*"), reverse=True):  # files, then their directories
            _fsync(path)
        _fsync(tmp)
        commit_step("checkpoint-written")
        if final.exists():  # left by a run killed between its rename and its commit
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync(root)
        commit_step("checkpoint-renamed")
        _replace_text(root / "latest", name + "\n")  # the commit point
        commit_step("checkpoint-committed")
        kept = sorted(p for p in root.glob("update_*") if p.name <= name)[-keep:]
        for old in root.glob("update_*"):
            if old not in kept:
                shutil.rmtree(old)
        return final

    def _drop_uncommitted_checkpoints(self, checkpoint: Path | None) -> None:
        """Remove what a killed run left beyond its last commit: temp checkpoint directories and
        checkpoints the ``latest`` pointer never reached (resuming rewrites them)."""
        root = self.path / "checkpoints"
        if not root.is_dir():
            return
        newest = "" if checkpoint is None else checkpoint.name
        for path in root.iterdir():
            uncommitted = path.name.startswith("update_") and path.name > newest
            if path.is_dir() and (uncommitted or path.name.endswith(".tmp")):
                shutil.rmtree(path)

    @staticmethod
    def load_checkpoint(
        checkpoint: Path, policy: Any, algorithm: Any
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Restore the adapter and the algorithm's state; returns ``(generators, state)``."""
        import torch

        policy.load_adapter(checkpoint / "adapter")
        algorithm.load_state_dict(
            torch.load(checkpoint / "agent.pt", map_location=policy.device, weights_only=True)
        )
        generators = torch.load(checkpoint / "rng.pt", weights_only=True)
        state = json.loads((checkpoint / "state.json").read_text())
        return generators, state


class TensorBoard:
    """SummaryWriter when tensorboard is installed, else nothing (with one warning)."""

    def __init__(self, log_dir: Path, purge_step: int | None) -> None:
        self.writer = None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # pragma: no cover - tensorboard is in the train extra
            warnings.warn(
                "tensorboard is not installed (pip install 'agentbench-poad[train]'); "
                "tb/ stays empty",
                stacklevel=3,
            )
            return
        _wait_to_sort_after_event_files(Path(log_dir))
        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if self.writer is None:
            return
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "update":
                self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _wait_to_sort_after_event_files(log_dir: Path) -> None:
    """Make a new event file sort after the run's earlier ones.

    TensorBoard reads a directory's event files in name order, and a name is
    ``events.out.tfevents.<unix second>.<host>.<pid>.<counter>``: a writer opened in the same
    second as an earlier one (a resume straight after a kill, another process or host) can sort
    before it, and its purge of the killed session's steps then comes first and purges nothing.
    Waiting for the next second (at most 1 s; only then) keeps the order.
    """
    seconds = []
    for path in log_dir.glob("events.out.tfevents.*"):
        stamp = path.name.split(".")[3]
        if stamp.isdigit():
            seconds.append(int(stamp))
    if seconds:
        wait = max(seconds) + 1 - time.time()
        if 0 < wait <= 1:  # beyond 1 s a clock differs: waiting cannot help
            time.sleep(wait)
