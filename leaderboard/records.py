"""Run records on disk: atomic writes, validated reads, the results store and provenance.

The store is a folder of ``<record_id>.json`` files (by default the package's own
``leaderboard/results/``, which is committed and built into the published board). Reading the
store never fails on one bad file: corrupt or foreign records are named in a warning and skipped.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from agentbench_poad.leaderboard.config_source import check_config_source
from agentbench_poad.leaderboard.schema import (
    RECORD_KIND,
    SCHEMA_VERSION,
    RecordError,
    validate_record,
)
from agentbench_poad.version import __version__

#: The committed results folder of this checkout / installation.
DEFAULT_STORE = Path(__file__).resolve().parent / "results"
#: Sub-folder of a store that holds committed training runs (what trained records evaluate).
RUNS_DIR = "runs"


class RecordWarning(UserWarning):
    """A record in the store was skipped (corrupt, foreign or schema mismatch)."""


# -- statistics --------------------------------------------------------------------------------
def mean_stderr(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (sample std / sqrt(n); 0 for a single value)."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("mean_stderr needs at least one value")
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


# -- provenance --------------------------------------------------------------------------------
def git_commit(path: Path | None = None) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the git checkout holding ``path`` (the package); (None, None) if none."""
    where = Path(path or Path(__file__).resolve().parent)
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10
        )
        if commit.returncode != 0:
            return None, None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=10,
        )
        dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
        return commit.stdout.strip(), dirty
    except (OSError, subprocess.SubprocessError):
        return None, None


def hardware_info() -> dict[str, Any]:
    """What the run ran on. Reads torch's device only if torch is already imported."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count() or 1,
        "accelerator": None,
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                info["accelerator"] = torch.cuda.get_device_name(0)
        except Exception:  # noqa: BLE001 - provenance must never break a run
            pass
    return info


def software_info() -> dict[str, Any]:
    commit, dirty = git_commit()
    return {
        "package_version": __version__,
        "git_commit": commit,
        "git_dirty": dirty,
        "python": platform.python_version(),
    }


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


# -- ids ---------------------------------------------------------------------------------------
def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "x"


def make_record_id(
    env_id: str, agent_name: str, base_model: str | None = None, suffix: str | None = None
) -> str:
    """``<env id>__<agent>[__<model>][__<suffix>]``: stable, so re-adding replaces, not duplicates."""
    parts = [env_id, agent_name]
    if base_model:
        parts.append(Path(base_model.rstrip("/")).name)
    if suffix:
        parts.append(suffix)
    return "__".join(slug(p) for p in parts)


# -- files -------------------------------------------------------------------------------------
def write_json_atomic(path: Path, data: Any) -> Path:
    """Write JSON to ``path`` through a temp file in the same folder and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, sort_keys=False, allow_nan=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp creates 0600; a record is meant to be shared (committed, served)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_record(path: Path, record: dict[str, Any]) -> Path:
    """Validate ``record`` and write it atomically to ``path``."""
    validate_record(record, source=str(path))
    return write_json_atomic(Path(path), record)


def read_record(path: Path) -> dict[str, Any]:
    """Read and validate one record file.

    Raises:
        RecordError: the file is not JSON, not ours, or does not match the schema.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RecordError(f"{path}: cannot be read ({exc})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError(
            f"{path}: is not valid JSON ({exc.msg} at line {exc.lineno}); the file is corrupt -- "
            "delete it and re-create the record"
        ) from exc
    return validate_record(data, source=str(path))


def store_path(store: Path | str | None) -> Path:
    return Path(store) if store is not None else DEFAULT_STORE


def iter_record_files(store: Path | str | None = None) -> list[Path]:
    root = store_path(store)
    if not root.exists():
        return []
    # runs/ holds committed training runs (config, checkpoints), not records
    return sorted(
        p
        for p in root.rglob("*.json")
        if not p.name.startswith(".") and p.relative_to(root).parts[0] != RUNS_DIR
    )


def load_records(store: Path | str | None = None) -> list[dict[str, Any]]:
    """All valid records of the store; each bad file is named in a :class:`RecordWarning`."""
    records = []
    for path in iter_record_files(store):
        try:
            record = read_record(path)
        except RecordError as exc:
            warnings.warn(f"skipping {exc}", RecordWarning, stacklevel=2)
            continue
        record["_path"] = str(path)
        records.append(record)
    return records


def add_record(
    record: dict[str, Any], store: Path | str | None = None, replace: bool = False
) -> Path:
    """Validate and write ``record`` into the store as ``<record_id>.json``.

    Raises:
        RecordError: invalid record, or one with the same id exists and ``replace`` is false.
    """
    record = {k: v for k, v in record.items() if not k.startswith("_")}
    validate_record(record, source=f"record {record.get('record_id')!r}")
    check_config_source(record)  # a tuned record must use its spec's chosen config (issue 27)
    path = store_path(store) / f"{record['record_id']}.json"
    if path.exists() and not replace:
        raise RecordError(
            f"{path} already exists; pass --replace (replace=True) to overwrite it, or give the "
            "new record another name (--name)"
        )
    return write_record(path, record)


def find_record(record_id: str, store: Path | str | None = None) -> dict[str, Any]:
    """The record with this id (or a path to a record file)."""
    candidate = Path(record_id)
    if candidate.suffix == ".json" and candidate.exists():
        return read_record(candidate)
    path = store_path(store) / f"{record_id}.json"
    if not path.exists():
        known = [p.stem for p in iter_record_files(store)]
        close = [k for k in known if record_id.lower() in k.lower()][:5]
        hint = f"; did you mean: {', '.join(close)}" if close else ""
        raise RecordError(
            f"no record {record_id!r} in {store_path(store)}{hint} "
            "(see `agentbench-poad leaderboard list`)"
        )
    record = read_record(path)
    record["_path"] = str(path)
    return record


def new_record(**fields: Any) -> dict[str, Any]:
    """A record dict with the fixed header fields filled in; the caller supplies the rest."""
    record: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": RECORD_KIND,
        "created_at": now_iso(),
        "hardware": hardware_info(),
        "software": software_info(),
    }
    record.update(fields)
    return record


def summarize_seeds(per_seed: Iterable[dict[str, Any]]) -> dict[str, float]:
    per_seed = list(per_seed)
    mean, se = mean_stderr([s["score"] for s in per_seed])
    sr, sr_se = mean_stderr([s["success_rate"] for s in per_seed])
    return {"mean": mean, "stderr": se, "success_rate": sr, "success_rate_stderr": sr_se}
