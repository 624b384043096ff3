"""The task table: one :class:`DatasetSpec` row per DataSciCoding dataset."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentbench_poad.environments.datascicoding.datasets.generated import GeneratedSource
from agentbench_poad.environments.datascicoding.datasets.pruning import (
    CaafePruning,
    DropNaCsvPruning,
    IndexedCsvPruning,
    LabelEncodedCsvPruning,
    Pruned,
    SklearnPruning,
)
from agentbench_poad.environments.datascicoding.datasets.sources import (
    KaggleSource,
    OpenMLSource,
    SklearnSource,
    Source,
)

if TYPE_CHECKING:
    import pandas as pd


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
        missing_values: X keeps NaN where a value is missing (the program must impute or use
            a model that accepts NaN); otherwise a NaN left by the pruning is an error.
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
    missing_values: bool = False

    @property
    def env_id(self) -> str:
        return f"DataSciCoding-{self.name}-v0"

    @property
    def offline(self) -> bool:
        return not self.source.cached


def _openml(
    *,
    name: str,
    dataset_id: int,
    description: str,
    target: str,
    shape: tuple[int | None, int],
    n_classes: int,
    downsample: float = 1.0,
    note: str = "",
    max_rows: int | None = None,
) -> DatasetSpec:
    """A row for an OpenML dataset pruned by CAAFE's pipeline."""
    return DatasetSpec(
        name=name,
        description=description,
        source=OpenMLSource(dataset_id=dataset_id, target=target),
        target=target,
        prune=CaafePruning(downsample=downsample),
        shape=shape,
        n_classes=n_classes,
        note=note,
        max_rows=max_rows,
    )


def _sklearn(
    *, name: str, description: str, loader: str, shape: tuple[int, int], n_classes: int
) -> DatasetSpec:
    """A row for a dataset bundled with scikit-learn (offline, never cached)."""
    return DatasetSpec(
        name=name,
        description=description,
        source=SklearnSource(loader=loader),
        target="target",
        prune=SklearnPruning(),
        shape=shape,
        n_classes=n_classes,
    )


def _generated(
    *,
    name: str,
    description: str,
    generator: str,
    shape: tuple[int, int],
    note: str,
    missing_values: bool = False,
) -> DatasetSpec:
    """A row for a generated table (:mod:`.generated`: offline, deterministic, never cached)."""
    return DatasetSpec(
        name=name,
        description=description,
        source=GeneratedSource(generator=generator),
        target="target",
        prune=SklearnPruning(),
        shape=shape,
        n_classes=2,
        note=note,
        missing_values=missing_values,
    )


#: The task table. Kaggle slugs are the best-known homes of the reference's CSVs; any copy of
#: the same file works through ``agentbench-poad data import NAME FILE.csv``.
DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec(
            name="pharyngitis",
            description="Pharyngitis",
            source=KaggleSource(
                slug="yoshifumimiyagi/pharyngitis", file="pharyngitis.csv", kind="dataset"
            ),
            target="radt",
            prune=DropNaCsvPruning(drop=("number",)),
            shape=(512, 18),
            n_classes=2,
            note="676 raw rows; rows with NaN dropped; the 'number' column dropped",
        ),
        DatasetSpec(
            name="health-insurance",
            description="Health Insurance",
            source=KaggleSource(
                slug="imsparsh/jobathon-analytics-vidhya", file="train.csv", kind="dataset"
            ),
            target="Response",
            prune=LabelEncodedCsvPruning(),
            shape=(2000, 12),
            n_classes=2,
            note="JOB-A-THON health insurance lead prediction; first 2000 complete rows",
        ),
        DatasetSpec(
            name="spaceship-titanic",
            description="Spaceship Titanic",
            source=KaggleSource(slug="spaceship-titanic", file="train.csv"),
            target="Transported",
            prune=LabelEncodedCsvPruning(),
            shape=(2000, 12),
            n_classes=2,
            note="first 2000 complete rows, every column label-encoded",
        ),
        DatasetSpec(
            name="kidney-stone",
            description="Kidney Stone",
            source=KaggleSource(slug="playground-series-s3e12", file="train.csv"),
            target="target",
            prune=IndexedCsvPruning(),
            shape=(414, 6),
            n_classes=2,
        ),
        _openml(
            name="balance-scale",
            dataset_id=11,
            description="Balance Scale Weight & Distance",
            target="class",
            shape=(125, 4),
            n_classes=3,
            downsample=0.2,
        ),
        _openml(
            name="breast-w",
            dataset_id=15,
            description="Breast Cancer Wisconsin",
            target="Class",
            shape=(None, 9),
            n_classes=2,
            downsample=0.1,
            note="69 rows before the NaN drop (Bare_Nuclei has missing values)",
            max_rows=69,
        ),
        _openml(
            name="cmc",
            dataset_id=23,
            description="National Indonesia Contraceptive Prevalence",
            target="Contraceptive_method_used",
            shape=(1473, 9),
            n_classes=3,
        ),
        _openml(
            name="credit-g",
            dataset_id=31,
            description="German Credit",
            target="class",
            shape=(1000, 20),
            n_classes=2,
        ),
        _openml(
            name="diabetes",
            dataset_id=37,
            description="Diabetes",
            target="class",
            shape=(768, 8),
            n_classes=2,
        ),
        _openml(
            name="tic-tac-toe",
            dataset_id=50,
            description="Tic-Tac-Toe Endgame",
            target="Class",
            shape=(95, 9),
            n_classes=2,
            downsample=0.1,
        ),
        _openml(
            name="eucalyptus",
            dataset_id=188,
            description="Eucalyptus Soil Conservation",
            target="Utility",
            shape=(None, 19),
            n_classes=5,
            note="736 rows before the NaN drop",
            max_rows=736,
        ),
        _openml(
            name="pc1",
            dataset_id=1068,
            description="PC1 Software Defect",
            target="defects",
            shape=(1109, 21),
            n_classes=2,
        ),
        _openml(
            name="airlines",
            dataset_id=1169,
            description="Airlines",
            target="Delay",
            shape=(2000, 7),
            n_classes=2,
        ),
        _openml(
            name="jungle-chess",
            dataset_id=41027,
            description="Jungle Chess",
            target="class",
            shape=(2000, 6),
            n_classes=3,
        ),
        _sklearn(
            name="breast-cancer",
            description="Breast Cancer Wisconsin (Diagnostic)",
            loader="breast_cancer",
            shape=(569, 30),
            n_classes=2,
        ),
        _sklearn(name="iris", description="Iris", loader="iris", shape=(150, 4), n_classes=3),
        _sklearn(name="wine", description="Wine", loader="wine", shape=(178, 13), n_classes=3),
        _generated(
            name="gen-circles",
            description="Synthetic Circles",
            generator="circles",
            shape=(1000, 8),
            note="two noisy concentric circles and 6 irrelevant columns (linear ~ chance)",
        ),
        _generated(
            name="gen-xor",
            description="Synthetic XOR",
            generator="xor",
            shape=(1000, 8),
            note="y = [x0 * x1 > 0], 6 % labels flipped, 6 irrelevant columns",
        ),
        _generated(
            name="gen-moons",
            description="Synthetic Moons",
            generator="moons",
            shape=(1000, 6),
            note="two pairs of half-moons, the second point-reflected; 4 irrelevant columns",
        ),
        _generated(
            name="gen-loans",
            description="Synthetic Loans",
            generator="loans",
            shape=(2000, 12),
            note="Kaggle-like: mixed numeric and categorical codes, NaN in 3 columns; the "
            "debt-to-income ratio drives the default risk",
            missing_values=True,
        ),
        _generated(
            name="gen-noisy",
            description="Synthetic Noisy Clusters",
            generator="noisy",
            shape=(1000, 20),
            note="make_classification: 8 clusters per class, 15 irrelevant columns, 10 % flipped",
        ),
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
