"""Datasets of the DataSciCoding tasks: the table, the loaders, the pruning and the disk cache.

Every task is one row of :data:`DATASETS`, a :class:`DatasetSpec` that names

* a **source**: OpenML (through the ``openml`` package), Kaggle (through the ``kaggle`` API),
  or scikit-learn's bundled datasets (offline, never cached);
* a **pruning**: how the raw table becomes the numeric ``X``/``y`` the task uses. The
  prunings reproduce REFERENCE_SPEC.md §3.2: CAAFE's pipeline for the OpenML datasets, the
  reference's per-file recipes for the Kaggle CSVs.

The same pruning runs whether the raw table came from the network (``agentbench-poad data
fetch NAME``) or from a local file (``agentbench-poad data import NAME FILE.csv``).

Reproducibility. The reference shuffles twice while pruning the OpenML datasets: first with
NumPy's global RNG freshly seeded with 13 (CAAFE), then with ``DataFrame.sample(frac=1)``
*unseeded*, so its rows depend on everything that touched the global RNG before. Here both
shuffles use their own generators: the first ``RandomState(13)`` (the same permutation CAAFE
draws), the second ``RandomState(0)`` (:data:`SECOND_SHUFFLE_SEED`, our choice). The global
RNG is never touched. The resulting rows therefore differ from any one reference run, but the
sizes, columns, encodings and class sets are the reference's and every machine gets the same
rows.

Cache. Pruned datasets are stored under :func:`default_cache_dir` (``AGENTBENCH_POAD_CACHE``
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
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agentbench_poad.errors import AgentBenchError

if TYPE_CHECKING:  # pandas is imported where it is used: registration reads this table
    import pandas as pd

#: Seed of the first OpenML shuffle (CAAFE seeds NumPy with 13 before shuffling).
FIRST_SHUFFLE_SEED = 13
#: Seed of the second OpenML shuffle (unseeded in the reference; fixed here).
SECOND_SHUFFLE_SEED = 0
#: Version of the cache layout; a manifest with another version is refetched.
CACHE_FORMAT = 1
CACHE_ENV_VAR = "AGENTBENCH_POAD_CACHE"


class DatasetUnavailable(AgentBenchError, RuntimeError):
    """A dataset is neither cached nor fetchable; the message names the command that fixes it.

    ``args[0]`` is the message; ``args[1]``, when present, the bare reason (for re-wording).
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class CacheCorrupt(AgentBenchError, RuntimeError):
    """A cached dataset file does not match its manifest (or cannot be read)."""


# -- the dataset object ---------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Dataset:
    """A pruned, purely numeric classification dataset.

    Attributes:
        name: the table name (``"airlines"``).
        description: the name used in the prompt (``"Airlines"``).
        X: features, ``float64``, shape ``(rows, features)``, no NaN.
        y: labels ``0..n_classes-1``, ``int64``, shape ``(rows,)``.
        feature_names: one name per column of ``X``.
        source: where it came from, e.g. ``"openml:1169"`` or ``"csv:/path/file.csv"``.
    """

    name: str
    description: str
    X: np.ndarray = field(repr=False)
    y: np.ndarray = field(repr=False)
    feature_names: tuple[str, ...] = field(repr=False)
    source: str

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.X.shape[0]), int(self.X.shape[1]))

    @property
    def n_classes(self) -> int:
        return int(self.y.max()) + 1 if self.y.size else 0

    @property
    def class_counts(self) -> list[int]:
        return np.bincount(self.y, minlength=self.n_classes).tolist()


# -- sources -------------------------------------------------------------------------------


def _kaggle_api() -> Any:
    """An authenticated Kaggle API client (the network boundary of the Kaggle source).

    The ``kaggle`` package authenticates when ``kaggle`` itself is imported, so it is imported
    here, lazily, from its submodule; credentials come from ``~/.kaggle/kaggle.json`` or
    ``KAGGLE_USERNAME``/``KAGGLE_KEY``, handled by the package.
    """
    from kaggle.api.kaggle_api_extended import KaggleApi

    api = KaggleApi()
    try:
        api.authenticate()
    except SystemExit as exc:  # the client prints help and calls exit(1) without credentials
        raise PermissionError(
            "no Kaggle credentials (put kaggle.json in ~/.kaggle/, or set KAGGLE_USERNAME and "
            "KAGGLE_KEY, or KAGGLE_API_TOKEN)"
        ) from exc
    return api


def _openml_get_dataset(dataset_id: int) -> Any:
    """``openml.datasets.get_dataset`` with the data (the network boundary of OpenML)."""
    import openml

    return openml.datasets.get_dataset(
        dataset_id,
        download_data=True,
        download_qualities=False,
        download_features_meta_data=False,
    )


@dataclass(frozen=True)
class OpenMLSource:
    """An OpenML dataset by id; the raw table is its default target plus all features."""

    dataset_id: int
    target: str
    label: str = "OpenML"
    cached: bool = True

    def fetch(self, workdir: Path) -> pd.DataFrame:
        dataset = _openml_get_dataset(self.dataset_id)
        target = dataset.default_target_attribute or self.target
        features, labels, _categorical, _names = dataset.get_data(
            target=target, dataset_format="dataframe"
        )
        import pandas as pd

        frame = features.copy()
        # a Series keeps a categorical target's declared class order (OpenML's label codes)
        frame[self.target] = pd.Series(labels).set_axis(frame.index)
        return frame

    def describe(self) -> str:
        return f"openml:{self.dataset_id}"


@dataclass(frozen=True)
class KaggleSource:
    """One CSV file of a Kaggle competition (``kind="competition"``) or dataset."""

    slug: str
    file: str
    kind: str = "competition"
    label: str = "Kaggle"
    cached: bool = True

    def fetch(self, workdir: Path) -> pd.DataFrame:
        api = _kaggle_api()
        if self.kind == "competition":
            api.competition_download_file(self.slug, self.file, path=str(workdir), quiet=True)
        else:
            api.dataset_download_file(self.slug, self.file, path=str(workdir), quiet=True)
        return _read_downloaded_csv(workdir, self.file)

    def describe(self) -> str:
        return f"kaggle:{self.kind}/{self.slug}/{self.file}"


def _read_downloaded_csv(workdir: Path, file: str) -> pd.DataFrame:
    """Read ``file`` from ``workdir``, unzipping ``file.zip`` (Kaggle zips large files)."""
    import pandas as pd

    plain, zipped = workdir / file, workdir / f"{file}.zip"
    if plain.exists() and zipfile.is_zipfile(plain):
        zipped, plain = plain, workdir / f"{file}.unzipped"
    if zipped.exists():
        with zipfile.ZipFile(zipped) as archive:
            member = next((m for m in archive.namelist() if m.endswith(file)), None)
            if member is None:
                raise DatasetUnavailable(f"{zipped} does not contain {file}")
            with archive.open(member) as handle:
                return pd.read_csv(handle)
    if not plain.exists():
        raise DatasetUnavailable(f"the Kaggle download did not produce {file} in {workdir}")
    return pd.read_csv(plain)


@dataclass(frozen=True)
class SklearnSource:
    """A dataset bundled with scikit-learn (``sklearn.datasets.load_<loader>``); offline."""

    loader: str
    label: str = "scikit-learn"
    cached: bool = False

    def fetch(self, workdir: Path | None = None) -> pd.DataFrame:
        import sklearn.datasets

        bunch = getattr(sklearn.datasets, f"load_{self.loader}")(as_frame=True)
        frame = bunch.frame.copy()
        return frame

    def describe(self) -> str:
        return f"sklearn:load_{self.loader}"


Source = OpenMLSource | KaggleSource | SklearnSource


# -- pruning -------------------------------------------------------------------------------

Pruned = tuple[np.ndarray, np.ndarray, tuple[str, ...]]


def _codes(column: pd.Series) -> pd.Series:
    """A column as float: categorical -> declared-order codes, text -> sorted codes, NaN kept."""
    import pandas as pd

    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = column.cat.codes.astype("float64")
        return codes.where(codes >= 0, np.nan)
    if pd.api.types.is_bool_dtype(column):
        return column.astype("float64")
    if pd.api.types.is_numeric_dtype(column):
        return column.astype("float64")
    # text (a CSV import of a nominal column): codes of the sorted distinct values
    present = column.dropna()
    values = sorted(present.astype(str).unique())
    mapping = {v: float(i) for i, v in enumerate(values)}
    return column.map(lambda v: np.nan if pd.isna(v) else mapping[str(v)]).astype("float64")


@dataclass(frozen=True)
class CaafePruning:
    """CAAFE's OpenML pipeline as run by the reference (REFERENCE_SPEC.md §3.2).

    Categorical features become integer codes (OpenML's declared order; sorted values for a CSV
    import), rows are shuffled (seed 13) and capped at 10 000, shuffled again (seed 0, fixed
    here), capped at ``min(rows, 2000)`` and multiplied by ``downsample``, reordered by a 75/25
    ``train_test_split(random_state=0)`` (train then test, as the reference concatenates them)
    and rows with any NaN are dropped.
    """

    downsample: float = 1.0
    max_rows: int = 10_000
    max_final_rows: int = 2_000
    max_features: int = 25
    min_rows: int = 100
    max_classes: int = 10

    def __call__(self, frame: pd.DataFrame, target: str) -> Pruned:
        import pandas as pd
        from sklearn.model_selection import train_test_split

        if target not in frame.columns:
            raise ValueError(
                f"the table has no target column {target!r} (columns: {list(frame.columns)})"
            )
        names = tuple(str(c) for c in frame.columns if c != target)
        numeric = pd.DataFrame({c: _codes(frame[c]) for c in frame.columns if c != target})
        numeric[target] = _codes(frame[target])
        numeric = numeric.reset_index(drop=True)

        order = np.random.RandomState(FIRST_SHUFFLE_SEED).permutation(len(numeric))
        numeric = numeric.iloc[order[: self.max_rows]].reset_index(drop=True)
        n_classes = numeric[target].nunique()
        if len(names) > self.max_features or len(numeric) < self.min_rows or n_classes > self.max_classes:
            raise ValueError(
                f"CAAFE keeps tables with <= {self.max_features} features, >= {self.min_rows} "
                f"rows and <= {self.max_classes} classes; this one has {len(names)} features, "
                f"{len(numeric)} rows, {n_classes} classes"
            )

        limit = min(len(numeric), self.max_final_rows)
        numeric = numeric.sample(frac=1.0, random_state=np.random.RandomState(SECOND_SHUFFLE_SEED))
        numeric = numeric.iloc[: int(self.downsample * limit)].reset_index(drop=True)

        train, test = train_test_split(numeric, test_size=0.25, random_state=0)
        numeric = pd.concat([train, test]).dropna()
        X = numeric[list(n for n in numeric.columns if n != target)].to_numpy(dtype=np.float64)
        return X, numeric[target].to_numpy(), names


@dataclass(frozen=True)
class IndexedCsvPruning:
    """kidney-stone: the first column is the index, X = the other columns but the last, y = last."""

    def __call__(self, frame: pd.DataFrame, target: str) -> Pruned:
        body = frame.iloc[:, 1:]
        names = tuple(str(c) for c in body.columns[:-1])
        return body.iloc[:, :-1].to_numpy(dtype=np.float64), body.iloc[:, -1].to_numpy(), names


@dataclass(frozen=True)
class DropNaCsvPruning:
    """pharyngitis: drop rows with any NaN; X = all columns except ``drop`` and the target."""

    drop: tuple[str, ...] = ()

    def __call__(self, frame: pd.DataFrame, target: str) -> Pruned:
        frame = frame.dropna()
        features = [c for c in frame.columns if c != target and c not in self.drop]
        X = frame[features].to_numpy(dtype=np.float64)
        return X, frame[target].to_numpy(), tuple(str(c) for c in features)


@dataclass(frozen=True)
class LabelEncodedCsvPruning:
    """health-insurance, spaceship-titanic: drop NaN rows, keep the first ``rows``, drop the
    first (ID) column and label-encode **every** column, numeric ones included (the reference
    encodes an object-dtype array, so numbers become their rank among the distinct values).
    y = the last column."""

    rows: int = 2_000

    def __call__(self, frame: pd.DataFrame, target: str) -> Pruned:
        frame = frame.dropna().iloc[: self.rows, 1:]
        encoded = np.empty(frame.shape, dtype=np.int64)
        for j, column in enumerate(frame.columns):
            values = frame[column].to_numpy(dtype=object)
            _, encoded[:, j] = np.unique(values, return_inverse=True)
        names = tuple(str(c) for c in frame.columns[:-1])
        return encoded[:, :-1].astype(np.float64), encoded[:, -1], names


@dataclass(frozen=True)
class SklearnPruning:
    """scikit-learn bundles: the frame's ``target`` column is y, every other column is X."""

    def __call__(self, frame: pd.DataFrame, target: str) -> Pruned:
        features = [c for c in frame.columns if c != target]
        X = frame[features].to_numpy(dtype=np.float64)
        return X, frame[target].to_numpy(), tuple(str(c) for c in features)


# -- the table -----------------------------------------------------------------------------


@dataclass(frozen=True)
class DatasetSpec:
    """One row of the task table.

    Attributes:
        name: table name, lowercase with hyphens; the env id is ``DataSciCoding-<name>-v0``.
        description: the dataset's name in the prompt (the reference's description string).
        source: where the raw table comes from.
        target: the label column of the raw table.
        prune: raw table -> ``(X, y, feature_names)``.
        shape: the expected pruned ``X`` shape (``None`` rows where it depends on NaNs).
        n_classes: the expected number of classes.
        note: a remark shown by ``agentbench-poad data info``.
        max_rows: rows before the final NaN drop, where ``shape`` has no row count.
    """

    name: str
    description: str
    source: Source
    target: str
    prune: Callable[[pd.DataFrame, str], Pruned]
    shape: tuple[int | None, int]
    n_classes: int
    note: str = ""
    max_rows: int | None = None

    @property
    def env_id(self) -> str:
        return f"DataSciCoding-{self.name}-v0"

    @property
    def offline(self) -> bool:
        return not self.source.cached


def _openml(name, did, desc, target, shape, classes, downsample=1.0, note="", max_rows=None):
    return DatasetSpec(name, desc, OpenMLSource(did, target), target,
                       CaafePruning(downsample=downsample), shape, classes, note, max_rows)


#: The task table. Kaggle slugs are the best-known homes of the reference's CSVs; any copy of
#: the same file works through ``agentbench-poad data import NAME FILE.csv``.
DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec(
            "pharyngitis", "Pharyngitis",
            KaggleSource("yoshifumimiyagi/pharyngitis", "pharyngitis.csv", kind="dataset"),
            "radt", DropNaCsvPruning(drop=("number",)), (512, 18), 2,
            note="676 raw rows; rows with NaN dropped; the 'number' column dropped",
        ),
        DatasetSpec(
            "health-insurance", "Health Insurance",
            KaggleSource("imsparsh/jobathon-analytics-vidhya", "train.csv", kind="dataset"),
            "Response", LabelEncodedCsvPruning(), (2000, 12), 2,
            note="JOB-A-THON health insurance lead prediction; first 2000 complete rows",
        ),
        DatasetSpec(
            "spaceship-titanic", "Spaceship Titanic",
            KaggleSource("spaceship-titanic", "train.csv"),
            "Transported", LabelEncodedCsvPruning(), (2000, 12), 2,
            note="first 2000 complete rows, every column label-encoded",
        ),
        DatasetSpec(
            "kidney-stone", "Kidney Stone",
            KaggleSource("playground-series-s3e12", "train.csv"),
            "target", IndexedCsvPruning(), (414, 6), 2,
        ),
        _openml("balance-scale", 11, "Balance Scale Weight & Distance", "class", (125, 4), 3, 0.2),
        _openml("breast-w", 15, "Breast Cancer Wisconsin", "Class", (None, 9), 2, 0.1,
                note="69 rows before the NaN drop (Bare_Nuclei has missing values)", max_rows=69),
        _openml("cmc", 23, "National Indonesia Contraceptive Prevalence",
                "Contraceptive_method_used", (1473, 9), 3),
        _openml("credit-g", 31, "German Credit", "class", (1000, 20), 2),
        _openml("diabetes", 37, "Diabetes", "class", (768, 8), 2),
        _openml("tic-tac-toe", 50, "Tic-Tac-Toe Endgame", "Class", (95, 9), 2, 0.1),
        _openml("eucalyptus", 188, "Eucalyptus Soil Conservation", "Utility", (None, 19), 5,
                note="736 rows before the NaN drop", max_rows=736),
        _openml("pc1", 1068, "PC1 Software Defect", "defects", (1109, 21), 2),
        _openml("airlines", 1169, "Airlines", "Delay", (2000, 7), 2),
        _openml("jungle-chess", 41027, "Jungle Chess", "class", (2000, 6), 3),
        DatasetSpec("breast-cancer", "Breast Cancer Wisconsin (Diagnostic)",
                    SklearnSource("breast_cancer"), "target", SklearnPruning(), (569, 30), 2),
        DatasetSpec("iris", "Iris", SklearnSource("iris"), "target", SklearnPruning(),
                    (150, 4), 3),
        DatasetSpec("wine", "Wine", SklearnSource("wine"), "target", SklearnPruning(),
                    (178, 13), 3),
    )
}


def get_spec(name: str) -> DatasetSpec:
    """The spec of ``name`` (underscores are accepted for hyphens: ``kidney_stone``)."""
    key = name.strip().lower().replace("_", "-")
    try:
        return DATASETS[key]
    except KeyError:
        raise KeyError(
            f"unknown dataset {name!r}; known: {', '.join(DATASETS)} "
            "(see `agentbench-poad data list`)"
        ) from None


def prune(spec: DatasetSpec, frame: pd.DataFrame, source: str) -> Dataset:
    """Run ``spec``'s pruning on a raw table and encode the labels as ``0..K-1``."""
    X, labels, names = spec.prune(frame, spec.target)
    if X.ndim != 2 or len(X) != len(labels):
        raise ValueError(f"pruning {spec.name} gave X of shape {X.shape} and {len(labels)} labels")
    if not np.isfinite(X).all():
        raise ValueError(f"pruning {spec.name} left non-finite values in X")
    try:
        # numeric labels keep their numeric order (a string sort would put 10 before 2)
        _, y = np.unique(np.asarray(labels, dtype=np.float64), return_inverse=True)
    except (TypeError, ValueError):
        _, y = np.unique(np.asarray(labels, dtype=object).astype(str), return_inverse=True)
    return Dataset(spec.name, spec.description, np.ascontiguousarray(X, dtype=np.float64),
                   y.astype(np.int64), tuple(names), source)


# -- cache ---------------------------------------------------------------------------------


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
    np.savez(buffer, X=dataset.X, y=dataset.y,
             feature_names=np.asarray(dataset.feature_names, dtype=str))
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
        raise CacheCorrupt(f"{manifest_path}: cache format {manifest.get('format')!r}, "
                           f"expected {CACHE_FORMAT}")
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
    return Dataset(spec.name, spec.description, X.astype(np.float64), y.astype(np.int64),
                   names, str(manifest.get("source", "")))


def read_manifest(name: str, cache_dir: Path | str | None = None) -> dict[str, Any] | None:
    """The manifest of a cached dataset, ``None`` when absent or unreadable."""
    _, manifest_path = cache_paths(get_spec(name).name, cache_dir)
    try:
        return json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        return None


# -- entry points --------------------------------------------------------------------------


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
        reason = (f"the {spec.source.label} client cannot be imported ({exc}; "
                  f"`pip install agentbench-poad` installs it)")
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
    import pandas as pd

    spec = get_spec(name)
    frame = pd.read_csv(path)
    column = target or spec.target
    if column not in frame.columns:
        if target is not None:
            raise ValueError(f"{path} has no column {target!r} (columns: {list(frame.columns)})")
        frame = frame.rename(columns={frame.columns[-1]: spec.target})
    elif column != spec.target:
        frame = frame.rename(columns={column: spec.target})
    dataset = prune(spec, frame, f"csv:{Path(path).resolve()}")
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


__all__ = [
    "DATASETS",
    "CacheCorrupt",
    "Dataset",
    "DatasetSpec",
    "DatasetUnavailable",
    "cache_paths",
    "default_cache_dir",
    "fetch_dataset",
    "get_spec",
    "import_csv",
    "load_dataset",
    "prune",
    "read_cache",
    "read_manifest",
    "write_cache",
]
