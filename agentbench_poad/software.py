"""Which code made something: the package version and the git commit of its checkout.

Records (:mod:`agentbench_poad.leaderboard.records`) and training runs
(:mod:`agentbench_poad.rl.run_dir`, ``config.json``'s ``code_sessions``) carry it.
"""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path
from typing import Any

from agentbench_poad.version import __version__


def git_commit(path: Path | None = None) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the git checkout holding ``path`` (the package); (None, None) if none.

    Dirty means uncommitted changes to tracked files outside ``runs/``: the runs folder is data
    (a study running in the background rewrites its tracked checkpoints), not the code that makes
    a record.
    """
    where = Path(path or Path(__file__).resolve().parent)
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10
        )
        if commit.returncode != 0:
            return None, None
        status = subprocess.run(
            [
                "git",
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ":/",
                ":(top,exclude)runs",
            ],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=10,
        )
        dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
        return commit.stdout.strip(), dirty
    except (OSError, subprocess.SubprocessError):
        return None, None


def software_info() -> dict[str, Any]:
    commit, dirty = git_commit()
    return {
        "package_version": __version__,
        "git_commit": commit,
        "git_dirty": dirty,
        "python": platform.python_version(),
    }


__all__ = ["git_commit", "software_info"]
