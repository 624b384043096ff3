"""The disk cache of pruned datasets.

Pruned datasets are stored under :func:`default_cache_dir` (``AGENTBENCH_POAD_CACHE``
overrides ``~/.cache/agentbench-poad/datasets``) as ``NAME.npz`` (``X``, ``y``,
``feature_names``; read with ``allow_pickle=False``) plus a ``NAME.json`` manifest holding the
file's SHA-256. Both are written atomically (temporary file + ``os.replace``), the manifest
last; a file whose checksum does not match is reported as corrupt and refetched when possible.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agentbench_poad.environments.datascicoding.datasets.dataset import CacheCorrupt, Dataset
from agentbench_poad.environments.datascicoding.datasets.table import get_spec

if TYPE_CHECKING:
    from agentbench_poad.environments.datascicoding.datasets.table import DatasetSpec

#: Version of the cache layout; a manifest with another version is refetched.
CACHE_FORMAT = 1
CACHE_ENV_VAR = "AGENTBENCH_POAD_CACHE"


def default_cache_dir() -> Path:
    """``$AGENTBENCH_POAD_CACHE`` or ``~/.cache/agentbench-poad/datasets``."""
    override = os.environ.get(CACHE_ENV_VAR)
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "agentbench-poad" / "datasets"


def cache_paths(name: str, cache_dir: Path | str | None = None) -> tuple[Path, Path]:
    """``(data file, manifest)`` of ``name`` in ``cache_dir``."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return root / f"{name}.npz", root / f"{name}.json"


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_cache(dataset: Dataset, cache_dir: Path | str | None = None) -> Path:
    """Store ``dataset`` (data file, then manifest, each atomically); returns the data path."""
    data_path, manifest_path = cache_paths(dataset.name, cache_dir)
    buffer = io.BytesIO()
    np.savez(
        buffer, X=dataset.X, y=dataset.y, feature_names=np.asarray(dataset.feature_names, dtype=str)
    )
    payload = buffer.getvalue()
    manifest = {
        "format": CACHE_FORMAT,
        "name": dataset.name,
        "file": data_path.name,
        "sha256": hashlib.sha256(payload).hexdigest(),
        "rows": dataset.shape[0],
        "features": dataset.shape[1],
        "classes": dataset.n_classes,
        "class_counts": dataset.class_counts,
        "source": dataset.source,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _atomic_write(data_path, payload)
    _atomic_write(manifest_path, (json.dumps(manifest, indent=2) + "\n").encode())
    return data_path


def read_cache(spec: DatasetSpec, cache_dir: Path | str | None = None) -> Dataset | None:
    """The cached copy of ``spec``'s dataset, ``None`` when there is none.

    Raises:
        CacheCorrupt: the data file or manifest is unreadable or does not match.
    """
    data_path, manifest_path = cache_paths(spec.name, cache_dir)
    if not data_path.exists() and not manifest_path.exists():
        return None
    try:
        manifest = json.loads(manifest_path.read_text())
        payload = data_path.read_bytes()
    except (OSError, ValueError) as exc:
        raise CacheCorrupt(f"{data_path}: unreadable cache entry ({exc})") from exc
    if manifest.get("format") != CACHE_FORMAT:
        raise CacheCorrupt(
            f"{manifest_path}: cache format {manifest.get('format')!r}, expected {CACHE_FORMAT}"
        )
    if hashlib.sha256(payload).hexdigest() != manifest.get("sha256"):
        raise CacheCorrupt(f"{data_path}: checksum does not match its manifest")
    try:
        with np.load(io.BytesIO(payload), allow_pickle=False) as archive:
            X, y = archive["X"], archive["y"]
            names = tuple(str(n) for n in archive["feature_names"])
    except (OSError, ValueError, KeyError) as exc:
        raise CacheCorrupt(f"{data_path}: not a dataset archive ({exc})") from exc
    if X.shape != (manifest.get("rows"), manifest.get("features")) or len(y) != len(X):
        raise CacheCorrupt(f"{data_path}: shape {X.shape} does not match its manifest")
    return Dataset(
        spec.name,
        spec.description,
        X.astype(np.float64),
        y.astype(np.int64),
        names,
        str(manifest.get("source", "")),
    )


def read_manifest(name: str, cache_dir: Path | str | None = None) -> dict[str, Any] | None:
    """The manifest of a cached dataset, ``None`` when absent or unreadable."""
    _, manifest_path = cache_paths(get_spec(name).name, cache_dir)
    try:
        return json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        return None
