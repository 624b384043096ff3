"""Entry points: fetch a dataset from its source, import a local CSV, load (cache first)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from agentbench_poad.environments.datascicoding.datasets.cache import (
    default_cache_dir,
    read_cache,
    write_cache,
)
from agentbench_poad.environments.datascicoding.datasets.dataset import (
    CacheCorrupt,
    Dataset,
    DatasetUnavailable,
)
from agentbench_poad.environments.datascicoding.datasets.pruning import prune
from agentbench_poad.environments.datascicoding.datasets.sources import CsvSource
from agentbench_poad.environments.datascicoding.datasets.table import DatasetSpec, get_spec


def _fix_command(spec: DatasetSpec) -> str:
    return (
        f"run `agentbench-poad data fetch {spec.name}` on a connected machine or "
        f"`agentbench-poad data import {spec.name} FILE.csv`"
    )


def fetch_dataset(name: str, *, cache_dir: Path | str | None = None) -> Dataset:
    """Download ``name`` from its source, prune it and store it in the cache.

    Raises:
        DatasetUnavailable: the source is unreachable (offline, no credentials); the message
            names the commands that fix it.
    """
    spec = get_spec(name)
    if spec.offline:
        return prune(spec, spec.source.fetch(None), spec.source.describe())
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(dir=root, prefix=f".download-{spec.name}-") as work:
            frame = spec.source.fetch(Path(work))
    except DatasetUnavailable:
        raise
    except ImportError as exc:
        reason = (
            f"the {spec.source.label} client cannot be imported ({exc}; "
            f"`pip install agentbench-poad` installs it)"
        )
        raise DatasetUnavailable(
            f"could not fetch dataset {spec.name!r}: {reason}; {_fix_command(spec)}", reason
        ) from exc
    except PermissionError as exc:
        reason = f"{spec.source.label} refused access ({exc})"
        raise DatasetUnavailable(
            f"could not fetch dataset {spec.name!r}: {reason}; {_fix_command(spec)}", reason
        ) from exc
    except Exception as exc:  # noqa: BLE001 - any failure of the client means "unreachable"
        reason = f"{spec.source.label} is unreachable ({type(exc).__name__}: {exc})"
        raise DatasetUnavailable(
            f"could not fetch dataset {spec.name!r}: {reason}; {_fix_command(spec)}", reason
        ) from exc
    dataset = prune(spec, frame, spec.source.describe())
    write_cache(dataset, root)
    return dataset


def import_csv(
    name: str, path: Path | str, *, cache_dir: Path | str | None = None, target: str | None = None
) -> Dataset:
    """Prune a local CSV with ``name``'s recipe and store it in the cache.

    The CSV is the raw table the source would have given: for OpenML datasets the features and
    the target column (named as on OpenML, e.g. ``Delay`` for airlines; else pass ``target``,
    or the last column is taken); for Kaggle datasets the competition's ``train.csv`` (or the
    dataset's CSV) as downloaded.
    """
    spec = get_spec(name)
    csv = CsvSource(Path(path))
    frame = csv.fetch()
    column = target or spec.target
    if column not in frame.columns:
        if target is not None:
            raise ValueError(f"{path} has no column {target!r} (columns: {list(frame.columns)})")
        frame = frame.rename(columns={frame.columns[-1]: spec.target})
    elif column != spec.target:
        frame = frame.rename(columns={column: spec.target})
    dataset = prune(spec, frame, csv.describe())
    if spec.offline:
        return dataset
    write_cache(dataset, cache_dir)
    return dataset


def load_dataset(
    name: str, *, cache_dir: Path | str | None = None, download: bool = True
) -> Dataset:
    """The pruned dataset ``name``: from scikit-learn, the cache, or (``download``) its source.

    A corrupt cache entry is refetched; if that fails too the error says the cache is corrupt.

    Raises:
        DatasetUnavailable: not cached and not fetchable; the message names the fix.
    """
    spec = get_spec(name)
    if spec.offline:
        return fetch_dataset(spec.name)
    problem = "is not cached"
    try:
        cached = read_cache(spec, cache_dir)
    except CacheCorrupt as exc:
        cached, problem = None, f"has a corrupt cache entry ({exc})"
    if cached is not None:
        return cached
    if not download:
        raise DatasetUnavailable(f"dataset {spec.name!r} {problem}; {_fix_command(spec)}")
    try:
        return fetch_dataset(spec.name, cache_dir=cache_dir)
    except DatasetUnavailable as exc:
        reason = exc.args[1] if len(exc.args) > 1 else str(exc)
        raise DatasetUnavailable(
            f"dataset {spec.name!r} {problem} and {reason}; {_fix_command(spec)}"
        ) from exc
