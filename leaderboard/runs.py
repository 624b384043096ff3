"""Where the training runs behind trained-agent records live: the *runs root*.

Run data (adapters, checkpoints, learning curves) is data, not code: it lives in the
repository's top-level ``runs/`` folder, which is not a package and is not in the wheel. A record
names each of its runs by a path *relative to the runs root* (``smollm2-cpu/runs/<env>/poad/seed0``),
so a record verifies from any checkout, or from any copy of the runs folder.

The runs root is, in this order:

1. an explicit folder (``agentbench-poad leaderboard --runs DIR ...``, or ``runs_root(DIR)``);
2. the environment variable ``AGENTBENCH_POAD_RUNS``;
3. the ``runs/`` folder of the git checkout the package is imported from (an editable install or
   a checkout on ``PYTHONPATH``).

An installed wheel has no runs folder: resolving a record's run then fails with
:class:`RunsNotFound`, whose message names the fix (clone the repository, or point
``AGENTBENCH_POAD_RUNS`` / ``--runs`` at a copy of its ``runs/`` folder).
"""

from __future__ import annotations

import os
from pathlib import Path

from agentbench_poad.leaderboard.schema import RecordError

#: The environment variable naming the runs root.
RUNS_ENV_VAR = "AGENTBENCH_POAD_RUNS"
#: The name of the runs folder at the top of a checkout.
RUNS_FOLDER = "runs"

#: Set by ``--runs`` (:func:`set_runs_root`) for the rest of the process.
_explicit_root: Path | None = None


class RunsNotFound(RecordError):
    """The runs root (or one run in it) does not exist; the message names the fix."""


def checkout_root() -> Path | None:
    """The git checkout this package is imported from, or None (an installed wheel).

    In a checkout, ``leaderboard/`` (this file's folder) sits at the top of the repository, next
    to ``pyproject.toml``; in an installed wheel it is ``agentbench_poad/leaderboard/`` inside
    site-packages, with no ``pyproject.toml`` above it.
    """
    top = Path(__file__).resolve().parent.parent
    return top if _is_checkout(top) else None


def _is_checkout(top: Path) -> bool:
    """Whether ``top`` is the top of an agentbench-poad checkout."""
    return (top / "pyproject.toml").is_file() and (top / "agentbench_poad").is_dir()


def set_runs_root(path: str | os.PathLike | None) -> None:
    """Use ``path`` as the runs root for the rest of the process (None: back to the default)."""
    global _explicit_root
    _explicit_root = None if path is None else Path(path).expanduser().resolve()


def runs_root(explicit: str | os.PathLike | None = None, *, must_exist: bool = True) -> Path:
    """The runs root (see the module doc for the order).

    Raises:
        RunsNotFound: with ``must_exist``, when the chosen folder does not exist.
    """
    if explicit is not None:
        root, source = Path(explicit).expanduser().resolve(), "the folder given (--runs)"
    elif _explicit_root is not None:
        root, source = _explicit_root, "the folder given (--runs)"
    elif os.environ.get(RUNS_ENV_VAR):
        root = Path(os.environ[RUNS_ENV_VAR]).expanduser().resolve()
        source = f"${RUNS_ENV_VAR}"
    else:
        checkout = checkout_root()
        if checkout is None:
            if not must_exist:
                return Path.cwd() / RUNS_FOLDER
            raise RunsNotFound(
                "this installation of agentbench-poad has no training runs (the wheel ships "
                "records, not runs); clone the repository and run from the checkout, or point "
                f"{RUNS_ENV_VAR} (or --runs DIR) at a copy of the repository's runs/ folder"
            )
        root, source = checkout / RUNS_FOLDER, "the checkout's runs/ folder"
    if must_exist and not root.is_dir():
        raise RunsNotFound(
            f"the runs root {root} ({source}) does not exist; point {RUNS_ENV_VAR} (or --runs "
            "DIR) at the repository's runs/ folder"
        )
    return root


class PathEscapes(RecordError):
    """A relative path a record names leaves its root (``..`` or a symlink pointing out)."""


def check_relative(path: str | os.PathLike, what: str) -> None:
    """Refuse a relative path whose ``..`` parts climb out of the folder it is relative to.

    A lexical check (no file system): it holds on a machine where the path does not exist yet
    (``leaderboard add`` of a record whose runs are elsewhere).

    Raises:
        PathEscapes: naming ``what`` and the path.
    """
    depth = 0
    for part in Path(path).parts:
        depth += -1 if part == ".." else (0 if part in (".", "") else 1)
        if depth < 0:
            raise PathEscapes(
                f"{what} {str(path)!r} climbs out of its root with '..'; a record names paths "
                "inside their roots only (a run inside the runs root, an adapter file inside "
                "its adapter folder, an agent file inside the record's checkout)"
            )


def confine(root: str | os.PathLike, path: str | os.PathLike, what: str) -> Path:
    """``root / path`` with symlinks resolved, refused unless it stays inside ``root``.

    Args:
        root: the folder ``path`` is relative to.
        path: a relative path from a record.
        what: what the path is, for the message (``"training run"``, ``"agent file"``).

    Raises:
        PathEscapes: ``path`` is absolute, climbs out with ``..`` or resolves (through a
            symlink) outside ``root``.
    """
    if Path(path).is_absolute():
        raise PathEscapes(f"{what} {str(path)!r} must be a path relative to {root}")
    check_relative(path, what)
    base = Path(root).resolve()
    target = (base / path).resolve()
    if not target.is_relative_to(base):
        raise PathEscapes(
            f"{what} {str(path)!r} resolves to {target}, outside its root {base} (a symlink "
            "points out of it); copy the files into the root instead of linking them"
        )
    return target


def resolve_run(run: str | os.PathLike, root: str | os.PathLike | None = None) -> Path:
    """The run folder a record names: absolute as written, else relative to the runs root and
    confined to it (:func:`confine`: no ``..`` escape, no symlink out of the root).

    Raises:
        RunsNotFound: the runs root or the run folder does not exist (naming the fix).
        PathEscapes: a relative run path leaves the runs root.
    """
    path = Path(run)
    if not path.is_absolute():
        path = confine(runs_root(root), path, "training run")
    if not path.is_dir():
        raise RunsNotFound(
            f"training run {str(run)!r} is not in the runs root ({path} does not exist); point "
            f"{RUNS_ENV_VAR} (or --runs DIR) at the folder that holds it"
        )
    return path


def stored_run_path(run_dir: str | os.PathLike, root: str | os.PathLike | None = None) -> str:
    """How a record names a run: relative to the runs root when it lies under it, else absolute."""
    run_dir = Path(run_dir).resolve()
    try:
        base = runs_root(root, must_exist=False).resolve()
    except RunsNotFound:  # pragma: no cover - must_exist=False never raises
        return str(run_dir)
    try:
        return run_dir.relative_to(base).as_posix()
    except ValueError:
        return str(run_dir)


def board_checkout(records_dir: str | os.PathLike) -> Path | None:
    """The checkout whose board ``records_dir`` is (``<checkout>/leaderboard/results``), or None.

    Records on a checkout's board name their runs relative to that checkout's ``runs/`` folder
    (:func:`check_board_runs`), so that they verify from any clone.
    """
    folder = Path(records_dir).expanduser().resolve()
    top = folder.parent.parent
    on_board = folder.name == "results" and folder.parent.name == "leaderboard"
    return top if on_board and _is_checkout(top) else None


def check_board_runs(records_dir: str | os.PathLike, run_dirs: list[str | os.PathLike]) -> None:
    """Check, before any run starts, that records written into ``records_dir`` will name the runs
    ``run_dirs`` relative to the runs root a clone of the board resolves them against.

    Nothing to check unless ``records_dir`` is a checkout's board (:func:`board_checkout`). Then
    the runs root in effect must be that checkout's ``runs/`` folder and every run must lie under
    it; otherwise the records would name their runs by absolute path, valid only on this machine
    (for instance a study run from a second worktree whose ``--out`` points into the first).

    Raises:
        RunsNotFound: naming the folder to use.
    """
    checkout = board_checkout(records_dir)
    if checkout is None:
        return
    expected = (checkout / RUNS_FOLDER).resolve()
    root = runs_root(must_exist=False).resolve()
    outside = [
        str(r) for r in run_dirs if not Path(r).expanduser().resolve().is_relative_to(expected)
    ]
    if root == expected and not outside:
        return
    problems = []
    if root != expected:
        problems.append(f"the runs root in effect is {root}")
    if outside:
        shown = ", ".join(outside[:2]) + (
            f" and {len(outside) - 2} more" if len(outside) > 2 else ""
        )
        problems.append(f"the runs {shown} lie outside {expected}")
    raise RunsNotFound(
        f"records written into {records_dir} (the board of {checkout}) must name their runs "
        f"relative to {expected}, so that they verify from any clone; but {'; '.join(problems)}. "
        f"Put --out under {expected} and run from that checkout, or set {RUNS_ENV_VAR}={expected}"
    )


def named_runs(record: dict) -> list[str]:
    """Every run path ``record`` names (``config.agent_kwargs.runs``, ``agent.kwargs.runs``,
    ``training.runs``, ``model.adapters.*.run``), as written."""
    named: list = []
    for kwargs in (
        (record.get("config") or {}).get("agent_kwargs"),
        (record.get("agent") or {}).get("kwargs"),
    ):
        runs = (kwargs or {}).get("runs") or {}
        named += list(runs.values() if isinstance(runs, dict) else runs)
    named += list((record.get("training") or {}).get("runs") or [])
    adapters = (record.get("model") or {}).get("adapters") or {}
    named += [a.get("run") for a in adapters.values() if isinstance(a, dict) and a.get("run")]
    return sorted({str(r) for r in named if r})


def absolute_runs(record: dict) -> list[str]:
    """The run paths ``record`` writes out in full (see :func:`named_runs`): valid on the
    machine that made the record only."""
    return [r for r in named_runs(record) if Path(r).is_absolute()]


def check_record_paths(record: dict, root: str | os.PathLike | None = None) -> None:
    """Refuse a record one of whose relative paths leaves its root: a run (``..``, or a symlink
    in the runs root that points out of it, where the run exists here), an adapter's checkpoint
    or file name (absolute, or ``..``). Absolute runs are left to :func:`check_board_runs` and
    ``check_portable_runs`` (a board refuses them; a private store keeps machine-local runs).

    Raises:
        PathEscapes: naming the path.
    """
    base = runs_root(root, must_exist=False)
    for run in named_runs(record):
        if Path(run).is_absolute():
            continue
        check_relative(run, "training run")
        if (base / run).exists():
            confine(base, run, "training run")
    for seed, adapter in ((record.get("model") or {}).get("adapters") or {}).items():
        if not isinstance(adapter, dict):
            continue
        what = f"seed {seed}'s adapter file"
        for name in [str(adapter.get("checkpoint") or "."), *map(str, adapter.get("files") or {})]:
            if Path(name).is_absolute():
                raise PathEscapes(f"{what} {name!r} must be relative to its adapter folder")
            check_relative(name, what)


# -- finished runs keep what verify and the report need ------------------------------------------
def is_finished(run_dir: str | os.PathLike) -> bool:
    """Whether a training run reached its ``total_steps`` (its newest checkpoint says so)."""
    import json

    from agentbench_poad.rl.run_dir import latest_checkpoint

    run_dir = Path(run_dir)
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        return False
    try:
        state = json.loads((checkpoint / "state.json").read_text(encoding="utf-8"))
        total = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))["total_steps"]
    except (OSError, ValueError, KeyError):
        return False
    return int(state.get("env_steps", 0)) >= int(total)


def resume_only_files(run_dir: str | os.PathLike) -> list[Path]:
    """What a *finished* run keeps only to resume or to inspect training, not to verify or report:
    the newest checkpoint's ``agent.pt`` (critic weights, optimiser states) and ``rng.pt``
    (generator states), every older checkpoint folder and TensorBoard events (``tb/``).

    Verify loads the newest checkpoint's adapter (and the report reads ``config.json``, the
    learning curve and ``metrics.jsonl``), so none of these is needed once the run is finished;
    an unfinished run keeps them all (``train --resume`` restores agent.pt and rng.pt). Empty
    for an unfinished run.
    """
    from agentbench_poad.rl.run_dir import latest_checkpoint

    run_dir = Path(run_dir)
    if not is_finished(run_dir):
        return []
    latest = latest_checkpoint(run_dir)
    assert latest is not None  # is_finished
    found = [latest / name for name in ("agent.pt", "rng.pt") if (latest / name).is_file()]
    found += sorted(
        p
        for p in (run_dir / "checkpoints").iterdir()
        if p.is_dir() and p.name.startswith("update_") and p != latest
    )
    if (run_dir / "tb").is_dir():
        found.append(run_dir / "tb")
    return found


def training_runs(root: str | os.PathLike) -> list[Path]:
    """Every training run folder (one with ``config.json`` and ``checkpoints/``) under ``root``."""
    return sorted(
        p.parent for p in Path(root).rglob("config.json") if (p.parent / "checkpoints").is_dir()
    )
