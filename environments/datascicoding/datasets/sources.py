"""Where a raw table comes from: OpenML, Kaggle, a local CSV file, or scikit-learn's bundles.

A source has ``fetch(workdir) -> pandas.DataFrame`` (the raw table, before pruning),
``describe()`` (recorded as the dataset's ``source``), a ``label`` for messages and ``cached``
(whether the pruned table is stored in the disk cache). The network clients are imported lazily
inside the two functions that are the network boundary (:func:`_openml_get_dataset`,
:func:`_kaggle_api`); tests fake those, nothing else.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentbench_poad.environments.datascicoding.datasets.dataset import DatasetUnavailable
from agentbench_poad.environments.datascicoding.datasets.generated import GeneratedSource

if TYPE_CHECKING:  # pandas is imported where it is used: registration reads the table
    import pandas as pd


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


@dataclass(frozen=True)
class CsvSource:
    """A raw table in a local CSV file (``agentbench-poad data import NAME FILE.csv``)."""

    path: Path
    label: str = "CSV"
    cached: bool = True

    def fetch(self, workdir: Path | None = None) -> pd.DataFrame:
        import pandas as pd

        return pd.read_csv(self.path)

    def describe(self) -> str:
        return f"csv:{Path(self.path).resolve()}"


#: The sources a row of the task table may name (a CSV is imported, never a table row).
Source = OpenMLSource | KaggleSource | SklearnSource | GeneratedSource
