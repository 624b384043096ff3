"""How a raw table becomes the numeric ``X``/``y`` of a task (docs/reference.md#datascicoding-datasets).

CAAFE's pipeline for the OpenML datasets, the reference's per-file recipes for the Kaggle CSVs,
and the plain split of scikit-learn's bundles. The same pruning runs whether the raw table came
from the network or from a local file.

Reproducibility. The reference shuffles twice while pruning the OpenML datasets: first with
NumPy's global RNG freshly seeded with 13 (CAAFE), then with ``DataFrame.sample(frac=1)``
*unseeded*, so its rows depend on everything that touched the global RNG before. Here both
shuffles use their own generators: the first ``RandomState(13)`` (the same permutation CAAFE
draws), the second ``RandomState(0)`` (:data:`SECOND_SHUFFLE_SEED`, our choice). The global
RNG is never touched. The resulting rows therefore differ from any one reference run, but the
sizes, columns, encodings and class sets are the reference's and every machine gets the same
rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from agentbench_poad.environments.datascicoding.datasets.dataset import Dataset

if TYPE_CHECKING:
    import pandas as pd

#: Seed of the first OpenML shuffle (CAAFE seeds NumPy with 13 before shuffling).
FIRST_SHUFFLE_SEED = 13
#: Seed of the second OpenML shuffle (unseeded in the reference; fixed here).
SECOND_SHUFFLE_SEED = 0

Pruned = tuple[np.ndarray, np.ndarray, tuple[str, ...]]


class PrunableSpec(Protocol):
    """What :func:`prune` reads of a task-table row (``table.DatasetSpec`` is one).

    Typed against this instead of the table, so the table can import the pruning classes
    without the pruning importing the table back.
    """

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def target(self) -> str: ...

    @property
    def prune(self) -> Callable[[pd.DataFrame, str], Pruned]: ...

    @property
    def missing_values(self) -> bool: ...


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
    """CAAFE's OpenML pipeline as run by the reference (docs/reference.md#datascicoding-datasets).

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
        if (
            len(names) > self.max_features
            or len(numeric) < self.min_rows
            or n_classes > self.max_classes
        ):
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


def prune(spec: PrunableSpec, frame: pd.DataFrame, source: str) -> Dataset:
    """Run ``spec``'s pruning on a raw table and encode the labels as ``0..K-1``."""
    X, labels, names = spec.prune(frame, spec.target)
    if X.ndim != 2 or len(X) != len(labels):
        raise ValueError(f"pruning {spec.name} gave X of shape {X.shape} and {len(labels)} labels")
    if np.isinf(X).any() or (not spec.missing_values and np.isnan(X).any()):
        raise ValueError(f"pruning {spec.name} left non-finite values in X")
    try:
        # numeric labels keep their numeric order (a string sort would put 10 before 2)
        _, y = np.unique(np.asarray(labels, dtype=np.float64), return_inverse=True)
    except (TypeError, ValueError):
        _, y = np.unique(np.asarray(labels, dtype=object).astype(str), return_inverse=True)
    return Dataset(
        spec.name,
        spec.description,
        np.ascontiguousarray(X, dtype=np.float64),
        y.astype(np.int64),
        tuple(names),
        source,
    )
