"""Datasets of the DataSciCoding tasks: the table, the sources, the pruning and the disk cache.

Every task is one row of :data:`DATASETS` (:mod:`.table`), a :class:`DatasetSpec` that names

* a **source** (:mod:`.sources`): OpenML (through the ``openml`` package), Kaggle (through the
  ``kaggle`` API), scikit-learn's bundled datasets or a generator of :mod:`.generated` (both
  offline, never cached); a local CSV
  (:class:`CsvSource`) stands in for a network source through ``data import``;
* a **pruning** (:mod:`.pruning`): how the raw table becomes the numeric ``X``/``y`` the task
  uses, reproducing docs/reference.md#datascicoding-datasets (CAAFE's pipeline for the OpenML datasets, the
  reference's per-file recipes for the Kaggle CSVs).

The same pruning runs whether the raw table came from the network (``agentbench-poad data
fetch NAME``) or from a local file (``agentbench-poad data import NAME FILE.csv``). Pruned
tables are kept in a checksummed disk cache (:mod:`.cache`); :mod:`.loaders` holds the entry
points (:func:`load_dataset`, :func:`fetch_dataset`, :func:`import_csv`).
"""

from __future__ import annotations

from agentbench_poad.environments.datascicoding.datasets.cache import (
    CACHE_ENV_VAR,
    CACHE_FORMAT,
    cache_paths,
    default_cache_dir,
    read_cache,
    read_manifest,
    write_cache,
)
from agentbench_poad.environments.datascicoding.datasets.dataset import (
    CacheCorrupt,
    Dataset,
    DatasetUnavailable,
)
from agentbench_poad.environments.datascicoding.datasets.generated import (
    GENERATORS,
    GeneratedSource,
)
from agentbench_poad.environments.datascicoding.datasets.loaders import (
    fetch_dataset,
    import_csv,
    load_dataset,
)
from agentbench_poad.environments.datascicoding.datasets.pruning import (
    FIRST_SHUFFLE_SEED,
    SECOND_SHUFFLE_SEED,
    CaafePruning,
    DropNaCsvPruning,
    IndexedCsvPruning,
    LabelEncodedCsvPruning,
    SklearnPruning,
    prune,
)
from agentbench_poad.environments.datascicoding.datasets.sources import (
    CsvSource,
    KaggleSource,
    OpenMLSource,
    SklearnSource,
    Source,
)
from agentbench_poad.environments.datascicoding.datasets.table import (
    DATASETS,
    DatasetSpec,
    get_spec,
)

__all__ = [
    "CACHE_ENV_VAR",
    "CACHE_FORMAT",
    "DATASETS",
    "FIRST_SHUFFLE_SEED",
    "GENERATORS",
    "SECOND_SHUFFLE_SEED",
    "CaafePruning",
    "CacheCorrupt",
    "CsvSource",
    "Dataset",
    "DatasetSpec",
    "DatasetUnavailable",
    "DropNaCsvPruning",
    "GeneratedSource",
    "IndexedCsvPruning",
    "KaggleSource",
    "LabelEncodedCsvPruning",
    "OpenMLSource",
    "SklearnPruning",
    "SklearnSource",
    "Source",
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
