"""DataSciCoding datasets: pruning of OpenML/Kaggle/CSV tables, the cache, offline errors.

OpenML and Kaggle are unreachable here, so the tests fake exactly the network call
(``openml.datasets.get_dataset`` and the authenticated Kaggle client) with stand-in tables that
have the real schemas: column names, nominal/numeric types, class sets, row counts and missing
values. Everything after the download (pruning, encoding, cache) is the real code.

The stand-in builders are imported by the other DataSciCoding test modules.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from agentbench_poad.environments.datascicoding import datasets as ds

# -- stand-ins with the real schemas --------------------------------------------------------

NUM = "numeric"


def _nominal(n_values: int, prefix: str = "v") -> list[str]:
    return [f"{prefix}{i:03d}" for i in range(n_values)]


#: OpenML id -> (name, rows, target, classes, [(column, NUM | list of categories)], NaN spec)
OPENML_SCHEMAS: dict[int, tuple] = {
    11: (
        "balance-scale",
        625,
        "class",
        ["B", "L", "R"],
        [(c, NUM) for c in ("left-weight", "left-distance", "right-weight", "right-distance")],
        None,
    ),
    15: (
        "breast-w",
        699,
        "Class",
        ["benign", "malignant"],
        [
            (c, NUM)
            for c in (
                "Clump_Thickness",
                "Cell_Size_Uniformity",
                "Cell_Shape_Uniformity",
                "Marginal_Adhesion",
                "Single_Epi_Cell_Size",
                "Bare_Nuclei",
                "Bland_Chromatin",
                "Normal_Nucleoli",
                "Mitoses",
            )
        ],
        ("Bare_Nuclei", 16),
    ),
    23: (
        "cmc",
        1473,
        "Contraceptive_method_used",
        ["1", "2", "3"],
        [
            ("Wifes_age", NUM),
            ("Wifes_education", _nominal(4)),
            ("Husbands_education", _nominal(4)),
            ("Number_of_children_ever_born", NUM),
            ("Wifes_religion", _nominal(2)),
            ("Wifes_now_working%3F", _nominal(2)),
            ("Husbands_occupation", _nominal(4)),
            ("Standard-of-living_index", _nominal(4)),
            ("Media_exposure", _nominal(2)),
        ],
        None,
    ),
    31: (
        "credit-g",
        1000,
        "class",
        ["bad", "good"],
        [
            ("checking_status", _nominal(4)),
            ("duration", NUM),
            ("credit_history", _nominal(5)),
            ("purpose", _nominal(10)),
            ("credit_amount", NUM),
            ("savings_status", _nominal(5)),
            ("employment", _nominal(5)),
            ("installment_commitment", NUM),
            ("personal_status", _nominal(4)),
            ("other_parties", _nominal(3)),
            ("residence_since", NUM),
            ("property_magnitude", _nominal(4)),
            ("age", NUM),
            ("other_payment_plans", _nominal(3)),
            ("housing", _nominal(3)),
            ("existing_credits", NUM),
            ("job", _nominal(4)),
            ("num_dependents", NUM),
            ("own_telephone", _nominal(2)),
            ("foreign_worker", _nominal(2)),
        ],
        None,
    ),
    37: (
        "diabetes",
        768,
        "class",
        ["tested_negative", "tested_positive"],
        [(c, NUM) for c in ("preg", "plas", "pres", "skin", "insu", "mass", "pedi", "age")],
        None,
    ),
    50: (
        "tic-tac-toe",
        958,
        "Class",
        ["negative", "positive"],
        [
            (f"{r}-{c}-square", ["b", "o", "x"])
            for r in ("top", "middle", "bottom")
            for c in ("left", "middle", "right")
        ],
        None,
    ),
    188: (
        "eucalyptus",
        736,
        "Utility",
        ["average", "best", "good", "low", "none"],
        [
            ("Abbrev", _nominal(16)),
            ("Rep", NUM),
            ("Locality", _nominal(8)),
            ("Map_Ref", _nominal(14)),
            ("Latitude", _nominal(13)),
            ("Altitude", NUM),
            ("Rainfall", NUM),
            ("Frosts", NUM),
            ("Year", NUM),
            ("Sp", _nominal(27)),
            ("PMCno", NUM),
            ("DBH", NUM),
            ("Ht", NUM),
            ("Surv", NUM),
            ("Vig", NUM),
            ("Ins_res", NUM),
            ("Stem_Fm", NUM),
            ("Crown_Fm", NUM),
            ("Brnch_Fm", NUM),
        ],
        ("Surv", 95),
    ),
    1068: (
        "pc1",
        1109,
        "defects",
        ["false", "true"],
        [
            (c, NUM)
            for c in (
                "loc",
                "v(g)",
                "ev(g)",
                "iv(G)",
                "N",
                "V",
                "L",
                "D",
                "I",
                "E",
                "B",
                "T",
                "lOCode",
                "lOComment",
                "locCodeAndComment",
                "lOBlank",
                "uniq_Op",
                "uniq_Opnd",
                "total_Op",
                "total_Opnd",
                "branchCount",
            )
        ],
        None,
    ),
    1169: (
        "airlines",
        539_383,
        "Delay",
        ["0", "1"],
        [
            ("Airline", _nominal(18)),
            ("Flight", NUM),
            ("AirportFrom", _nominal(293)),
            ("AirportTo", _nominal(293)),
            ("DayOfWeek", _nominal(7)),
            ("Time", NUM),
            ("Length", NUM),
        ],
        None,
    ),
    41027: (
        "jungle-chess",
        44_819,
        "class",
        ["b", "d", "w"],
        [
            (c, NUM)
            for c in (
                "white_piece0_strength",
                "white_piece0_file",
                "white_piece0_rank",
                "black_piece0_strength",
                "black_piece0_file",
                "black_piece0_rank",
            )
        ],
        None,
    ),
}
OPENML_IDS = {schema[0]: did for did, schema in OPENML_SCHEMAS.items()}


def openml_standin(
    dataset_id: int, seed: int = 0, nan: bool = True
) -> tuple[pd.DataFrame, pd.Series]:
    """Features (numeric float / pandas categorical) and the categorical target, as OpenML."""
    _, rows, target, classes, columns, nan_spec = OPENML_SCHEMAS[dataset_id]
    rng = np.random.default_rng(seed + dataset_id)
    labels = rng.integers(len(classes), size=rows)
    data = {}
    for j, (column, kind) in enumerate(columns):
        if kind == NUM:
            # weakly informative so a model can beat chance
            data[column] = np.round(rng.normal(size=rows) + 0.8 * labels * (j % 2), 3)
        else:
            codes = (rng.integers(len(kind), size=rows) + labels * (j % 2)) % len(kind)
            data[column] = pd.Categorical.from_codes(codes, categories=kind)
    features = pd.DataFrame(data)
    if nan and nan_spec is not None:
        column, count = nan_spec
        where = rng.choice(rows, size=count, replace=False)
        features.loc[where, column] = np.nan
    y = pd.Series(pd.Categorical.from_codes(labels, categories=classes), name=target)
    return features, y


class FakeOpenMLDataset:
    """What ``openml.datasets.get_dataset`` returns, for a stand-in table."""

    def __init__(self, dataset_id: int, nan: bool = True):
        self.dataset_id = dataset_id
        self.name = OPENML_SCHEMAS[dataset_id][0]
        self.default_target_attribute = OPENML_SCHEMAS[dataset_id][2]
        self._nan = nan

    def get_data(self, target=None, dataset_format="dataframe", **_):
        assert target == self.default_target_attribute
        assert dataset_format == "dataframe"
        X, y = openml_standin(self.dataset_id, nan=self._nan)
        categorical = [isinstance(X[c].dtype, pd.CategoricalDtype) for c in X.columns]
        return X, y, categorical, list(X.columns)


def fake_openml(monkeypatch, calls: list | None = None, nan: bool = True) -> None:
    """Route ``openml.datasets.get_dataset`` to the stand-ins (the only faked call)."""
    import openml

    def get_dataset(dataset_id, **kwargs):
        assert kwargs.get("download_data") is True
        if calls is not None:
            calls.append(dataset_id)
        return FakeOpenMLDataset(int(dataset_id), nan=nan)

    monkeypatch.setattr(openml.datasets, "get_dataset", get_dataset)


def offline_openml(monkeypatch) -> None:
    """OpenML unreachable: the client raises what requests raises without DNS."""
    import openml
    import requests

    def get_dataset(dataset_id, **kwargs):
        raise requests.exceptions.ConnectionError(
            "HTTPSConnectionPool(host='www.openml.org', port=443): Max retries exceeded"
        )

    monkeypatch.setattr(openml.datasets, "get_dataset", get_dataset)


PHARYNGITIS_COLUMNS = [
    "number",
    "age_y",
    "temperature",
    "swollenadp",
    "pain",
    "tender",
    "tonsillarswelling",
    "exudate",
    "sudden",
    "cough",
    "rhinorrhea",
    "conjunctivitis",
    "headache",
    "erythema",
    "petechiae",
    "abdopain",
    "diarrhea",
    "nauseavomit",
    "scarlet",
    "radt",
]


def kaggle_standin(name: str, seed: int = 0) -> pd.DataFrame:
    """The raw CSV table of a Kaggle dataset, with its real columns, rows and missing values."""
    rng = np.random.default_rng(seed)
    if name == "kidney-stone":
        y = np.array([0] * 230 + [1] * 184)
        rng.shuffle(y)
        frame = pd.DataFrame({"id": np.arange(414)})
        for j, c in enumerate(("gravity", "ph", "osmo", "cond", "urea", "calc")):
            frame[c] = np.round(rng.normal(size=414) + y * (j % 2), 3)
        frame["target"] = y
        return frame
    if name == "pharyngitis":
        n, complete = 676, 512
        y = np.array([0] * 281 + [1] * 231 + list(rng.integers(2, size=n - complete)))
        frame = pd.DataFrame({"number": np.arange(1, n + 1)})
        for j, c in enumerate(PHARYNGITIS_COLUMNS[1:-1]):
            frame[c] = (rng.integers(2, size=n) | (y * (j % 3 == 0))).astype(float)
        frame["age_y"] = rng.integers(1, 15, size=n).astype(float)
        frame["radt"] = y
        for i in range(complete, n):  # the incomplete rows: one missing symptom each
            frame.loc[i, PHARYNGITIS_COLUMNS[1 + i % 18]] = np.nan
        return frame.sample(frac=1.0, random_state=1).reset_index(drop=True)
    if name == "health-insurance":
        n = 50_882
        y = rng.integers(2, size=n)
        frame = pd.DataFrame(
            {
                "ID": np.arange(1, n + 1),
                "City_Code": [f"C{k}" for k in rng.integers(1, 37, size=n)],
                "Region_Code": rng.integers(1, 6000, size=n),
                "Accomodation_Type": rng.choice(["Owned", "Rented"], size=n),
                "Reco_Insurance_Type": rng.choice(["Individual", "Joint"], size=n),
                "Upper_Age": rng.integers(18, 76, size=n),
                "Lower_Age": rng.integers(16, 76, size=n),
                "Is_Spouse": rng.choice(["No", "Yes"], size=n),
                "Health Indicator": rng.choice([f"X{k}" for k in range(1, 10)] + [None], size=n),
                "Holding_Policy_Duration": rng.choice(
                    [f"{k}.0" for k in range(1, 15)] + ["14+", None], size=n
                ),
                "Holding_Policy_Type": rng.choice([1.0, 2.0, 3.0, 4.0, np.nan], size=n),
                "Reco_Policy_Cat": rng.integers(1, 23, size=n),
                "Reco_Policy_Premium": np.round(rng.uniform(2000, 40000, size=n), 1),
                "Response": y,
            }
        )
        return frame
    if name == "spaceship-titanic":
        n = 8693
        frame = pd.DataFrame(
            {
                "PassengerId": [f"{k:04d}_01" for k in range(n)],
                "HomePlanet": rng.choice(["Earth", "Europa", "Mars"], size=n),
                "CryoSleep": rng.choice([True, False], size=n).astype(object),
                "Cabin": [
                    f"{d}/{k}/{s}"
                    for d, k, s in zip(
                        rng.choice(list("ABCDEFG"), size=n),
                        rng.integers(0, 1900, size=n),
                        rng.choice(["P", "S"], size=n),
                    )
                ],
                "Destination": rng.choice(["TRAPPIST-1e", "55 Cancri e", "PSO J318.5-22"], size=n),
                "Age": rng.integers(0, 80, size=n).astype(float),
                "VIP": rng.choice([True, False], size=n).astype(object),
                "RoomService": rng.integers(0, 3000, size=n).astype(float),
                "FoodCourt": rng.integers(0, 3000, size=n).astype(float),
                "ShoppingMall": rng.integers(0, 3000, size=n).astype(float),
                "Spa": rng.integers(0, 3000, size=n).astype(float),
                "VRDeck": rng.integers(0, 3000, size=n).astype(float),
                "Name": [f"Person {k}" for k in range(n)],
                "Transported": rng.choice([True, False], size=n),
            }
        )
        for column in ("HomePlanet", "CryoSleep", "Cabin", "Age", "VIP", "Spa", "Name"):
            frame.loc[rng.choice(n, size=200, replace=False), column] = None
        return frame
    raise KeyError(name)


class FakeKaggleApi:
    """The authenticated Kaggle client: downloads write the stand-in CSV (zipped, as Kaggle
    does for big files, for the competitions)."""

    def __init__(self, calls: list | None = None):
        self.calls = calls if calls is not None else []

    def _write(self, slug: str, file: str, path: str, zipped: bool) -> None:
        name = next(
            s.name
            for s in ds.DATASETS.values()
            if isinstance(s.source, ds.KaggleSource) and s.source.slug == slug
        )
        self.calls.append((slug, file))
        frame = kaggle_standin(name)
        target = Path(path) / file
        if zipped:
            with zipfile.ZipFile(f"{target}.zip", "w") as archive:
                archive.writestr(file, frame.to_csv(index=False))
        else:
            frame.to_csv(target, index=False)

    def competition_download_file(self, competition, file_name, path=None, quiet=False, **_):
        self._write(competition, file_name, path, zipped=True)

    def dataset_download_file(self, dataset, file_name, path=None, quiet=False, **_):
        self._write(dataset, file_name, path, zipped=False)


def fake_kaggle(monkeypatch, calls: list | None = None) -> None:
    monkeypatch.setattr(ds.sources, "_kaggle_api", lambda: FakeKaggleApi(calls))


def populate_cache(cache: Path, monkeypatch, names=None) -> None:
    """Fetch every network dataset (or ``names``) into ``cache`` through the fakes."""
    fake_openml(monkeypatch)
    fake_kaggle(monkeypatch)
    for spec in ds.DATASETS.values():
        if not spec.offline and (names is None or spec.name in names):
            ds.fetch_dataset(spec.name, cache_dir=cache)


# -- tests ----------------------------------------------------------------------------------


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv(ds.CACHE_ENV_VAR, str(path))
    return path


def test_table_names_and_sources():
    assert list(ds.DATASETS) == [
        "pharyngitis",
        "health-insurance",
        "spaceship-titanic",
        "kidney-stone",
        "balance-scale",
        "breast-w",
        "cmc",
        "credit-g",
        "diabetes",
        "tic-tac-toe",
        "eucalyptus",
        "pc1",
        "airlines",
        "jungle-chess",
        "breast-cancer",
        "iris",
        "wine",
        "gen-circles",
        "gen-xor",
        "gen-moons",
        "gen-loans",
        "gen-noisy",
    ]
    ids = {
        s.name: s.source.dataset_id
        for s in ds.DATASETS.values()
        if isinstance(s.source, ds.OpenMLSource)
    }
    assert ids == {
        "balance-scale": 11,
        "breast-w": 15,
        "cmc": 23,
        "credit-g": 31,
        "diabetes": 37,
        "tic-tac-toe": 50,
        "eucalyptus": 188,
        "pc1": 1068,
        "airlines": 1169,
        "jungle-chess": 41027,
    }
    assert ds.get_spec("kidney_stone").name == "kidney-stone"
    with pytest.raises(KeyError, match="data list"):
        ds.get_spec("mnist")


@pytest.mark.parametrize("name", sorted(OPENML_IDS))
def test_openml_pruned_shapes_match_the_paper(name, cache, monkeypatch):
    calls: list = []
    fake_openml(monkeypatch, calls)
    dataset = ds.fetch_dataset(name)
    spec = ds.get_spec(name)
    assert calls == [OPENML_IDS[name]]
    expected = {
        "airlines": 2000,
        "balance-scale": 125,
        "cmc": 1473,
        "credit-g": 1000,
        "diabetes": 768,
        "tic-tac-toe": 95,
        "pc1": 1109,
        "jungle-chess": 2000,
        # 736 rows minus the 95 with a missing value
        "eucalyptus": 641,
    }
    if name == "breast-w":
        # 69 rows are kept, then those with a missing Bare_Nuclei are dropped
        X, y = openml_standin(15)
        assert 69 - 16 <= dataset.shape[0] <= 69
    else:
        assert dataset.shape[0] == expected[name]
    assert dataset.shape[1] == spec.shape[1] == len(OPENML_SCHEMAS[OPENML_IDS[name]][4])
    assert dataset.n_classes == spec.n_classes == len(OPENML_SCHEMAS[OPENML_IDS[name]][3])
    assert np.isfinite(dataset.X).all() and dataset.X.dtype == np.float64
    assert dataset.y.dtype == np.int64 and set(np.unique(dataset.y)) == set(range(spec.n_classes))
    assert dataset.feature_names == tuple(c for c, _ in OPENML_SCHEMAS[OPENML_IDS[name]][4])
    assert dataset.source == f"openml:{OPENML_IDS[name]}"
    data_path, manifest_path = ds.cache_paths(name)
    assert data_path.parent == cache and data_path.exists() and manifest_path.exists()


def test_breast_w_without_missing_values_keeps_69_rows(cache, monkeypatch):
    fake_openml(monkeypatch, nan=False)
    assert ds.fetch_dataset("breast-w").shape == (69, 9)


def test_openml_pruning_is_seeded_and_follows_caafe(cache, monkeypatch):
    fake_openml(monkeypatch)
    first = ds.fetch_dataset("diabetes")
    second = ds.fetch_dataset("diabetes", cache_dir=cache / "other")
    np.testing.assert_array_equal(first.X, second.X)
    np.testing.assert_array_equal(first.y, second.y)
    # the rows are the stand-in's rows, permuted as CAAFE's seeded shuffle, our seeded second
    # shuffle and the 75/25 train-then-test reordering say (recomputed independently here)
    from sklearn.model_selection import train_test_split

    X, y = openml_standin(37)
    order = np.random.RandomState(13).permutation(768)
    order = order[np.random.RandomState(0).permutation(768)]
    train, test = train_test_split(order, test_size=0.25, random_state=0)
    rows = np.concatenate([train, test])
    np.testing.assert_allclose(first.X, X.to_numpy(dtype=float)[rows])
    np.testing.assert_array_equal(first.y, y.cat.codes.to_numpy()[rows])


def test_openml_categoricals_become_declared_order_codes(cache, monkeypatch):
    fake_openml(monkeypatch)
    dataset = ds.fetch_dataset("tic-tac-toe")
    assert set(np.unique(dataset.X)) <= {0.0, 1.0, 2.0}
    X, _ = openml_standin(50)
    counts = np.bincount(X["top-left-square"].cat.codes, minlength=3) / len(X)
    got = np.bincount(dataset.X[:, 0].astype(int), minlength=3) / len(dataset.X)
    assert np.abs(counts - got).max() < 0.15  # a 95-row sample of the same coding


@pytest.mark.parametrize(
    "name,shape,counts",
    [
        ("kidney-stone", (414, 6), [230, 184]),
        ("pharyngitis", (512, 18), [281, 231]),
        ("health-insurance", (2000, 12), None),
        ("spaceship-titanic", (2000, 12), None),
    ],
)
def test_kaggle_pruned_shapes(name, shape, counts, cache, monkeypatch):
    calls: list = []
    fake_kaggle(monkeypatch, calls)
    dataset = ds.fetch_dataset(name)
    assert len(calls) == 1 and calls[0][0] == ds.get_spec(name).source.slug
    assert dataset.shape == shape and dataset.n_classes == 2
    if counts is not None:
        assert dataset.class_counts == counts
    assert np.isfinite(dataset.X).all()
    assert "PassengerId" not in dataset.feature_names and "ID" not in dataset.feature_names
    assert "number" not in dataset.feature_names and "id" not in dataset.feature_names


def test_label_encoding_ranks_numeric_columns_too(cache, monkeypatch):
    """health-insurance/spaceship-titanic encode every column (docs/reference.md#quirks)."""
    fake_kaggle(monkeypatch)
    dataset = ds.fetch_dataset("spaceship-titanic")
    raw = kaggle_standin("spaceship-titanic").dropna().iloc[:2000]
    age = raw["Age"].to_numpy()
    column = dataset.feature_names.index("Age")
    np.testing.assert_array_equal(dataset.X[:, column], np.unique(age, return_inverse=True)[1])
    planet = dataset.feature_names.index("HomePlanet")
    assert set(np.unique(dataset.X[:, planet])) == {0.0, 1.0, 2.0}
    np.testing.assert_array_equal(dataset.y, raw["Transported"].astype(int).to_numpy())


def test_csv_import_runs_the_same_pruning(cache, tmp_path, monkeypatch):
    fake_openml(monkeypatch)
    fetched = ds.fetch_dataset("cmc", cache_dir=tmp_path / "fetched")
    X, y = openml_standin(23)
    table = X.astype({c: str for c in X.columns if isinstance(X[c].dtype, pd.CategoricalDtype)})
    table["Contraceptive_method_used"] = y.astype(str)
    csv = tmp_path / "cmc.csv"
    table.to_csv(csv, index=False)
    imported = ds.import_csv("cmc", csv)
    # the stand-in's categories are declared in sorted order, so both codings agree
    np.testing.assert_array_equal(imported.X, fetched.X)
    np.testing.assert_array_equal(imported.y, fetched.y)
    assert imported.source.startswith("csv:")
    assert ds.read_cache(ds.get_spec("cmc")).shape == (1473, 9)


def test_csv_import_of_a_kaggle_file_and_a_renamed_target(cache, tmp_path):
    csv = tmp_path / "train.csv"
    kaggle_standin("kidney-stone").to_csv(csv, index=False)
    assert ds.import_csv("kidney-stone", csv).shape == (414, 6)
    X, y = openml_standin(37)
    table = X.assign(label=y.astype(str))
    table.to_csv(tmp_path / "diabetes.csv", index=False)
    assert ds.import_csv("diabetes", tmp_path / "diabetes.csv", target="label").shape == (768, 8)
    with pytest.raises(ValueError, match="no column 'nope'"):
        ds.import_csv("diabetes", tmp_path / "diabetes.csv", target="nope")


def test_cache_is_atomic_and_checksummed(cache, monkeypatch):
    fake_openml(monkeypatch)
    dataset = ds.fetch_dataset("balance-scale")
    data_path, manifest_path = ds.cache_paths("balance-scale")
    manifest = json.loads(manifest_path.read_text())
    assert (
        manifest["rows"] == 125 and manifest["classes"] == 3 and manifest["source"] == "openml:11"
    )
    assert sorted(p.name for p in cache.iterdir()) == ["balance-scale.json", "balance-scale.npz"]
    again = ds.read_cache(ds.get_spec("balance-scale"))
    np.testing.assert_array_equal(again.X, dataset.X)
    with np.load(data_path, allow_pickle=False) as archive:  # no pickled objects inside
        assert set(archive.files) == {"X", "y", "feature_names"}


def test_corrupt_cache_is_detected_and_refetched(cache, monkeypatch):
    calls: list = []
    fake_openml(monkeypatch, calls)
    good = ds.fetch_dataset("diabetes")
    data_path, _ = ds.cache_paths("diabetes")
    raw = bytearray(data_path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data_path.write_bytes(bytes(raw))
    with pytest.raises(ds.CacheCorrupt, match="checksum"):
        ds.read_cache(ds.get_spec("diabetes"))
    reloaded = ds.load_dataset("diabetes")
    assert calls == [37, 37]
    np.testing.assert_array_equal(reloaded.X, good.X)
    assert ds.read_cache(ds.get_spec("diabetes")) is not None  # repaired


def test_corrupt_cache_offline_is_reported(cache, monkeypatch):
    fake_openml(monkeypatch)
    ds.fetch_dataset("diabetes")
    ds.cache_paths("diabetes")[0].write_bytes(b"not an npz")
    offline_openml(monkeypatch)
    with pytest.raises(ds.DatasetUnavailable) as info:
        ds.load_dataset("diabetes")
    message = str(info.value)
    assert "corrupt cache entry" in message and "OpenML is unreachable" in message
    assert "agentbench-poad data fetch diabetes" in message
    # a truncated manifest is corrupt too
    ds.cache_paths("diabetes")[1].write_text("{")
    with pytest.raises(ds.CacheCorrupt):
        ds.read_cache(ds.get_spec("diabetes"))


def test_offline_without_cache_names_the_fix(cache, monkeypatch):
    offline_openml(monkeypatch)
    with pytest.raises(ds.DatasetUnavailable) as info:
        ds.load_dataset("airlines")
    message = str(info.value)
    assert message.startswith("dataset 'airlines' is not cached and OpenML is unreachable")
    assert (
        "run `agentbench-poad data fetch airlines` on a connected machine or "
        "`agentbench-poad data import airlines FILE.csv`"
    ) in message
    with pytest.raises(ds.DatasetUnavailable, match="is not cached; run `agentbench-poad data"):
        ds.load_dataset("airlines", download=False)
    assert not any(cache.glob("*.npz")) and not any(cache.glob(".download-*"))


def test_kaggle_without_credentials_names_the_fix(cache, monkeypatch):
    """The real client: without credentials it prints help and calls exit(1)."""
    pytest.importorskip("kaggle.api.kaggle_api_extended")
    monkeypatch.setenv("HOME", str(cache.parent / "home"))
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(cache.parent / "no-kaggle"))
    for var in ("KAGGLE_USERNAME", "KAGGLE_KEY", "KAGGLE_API_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ds.DatasetUnavailable) as info:
        ds.load_dataset("kidney-stone")
    message = str(info.value)
    assert "dataset 'kidney-stone' is not cached and Kaggle refused access" in message
    assert "KAGGLE_USERNAME" in message
    assert "agentbench-poad data import kidney-stone FILE.csv" in message


def test_kaggle_offline_names_the_fix(cache, monkeypatch):
    import requests

    class Offline(FakeKaggleApi):
        def competition_download_file(self, *args, **kwargs):
            raise requests.exceptions.ConnectionError("Failed to resolve 'www.kaggle.com'")

    monkeypatch.setattr(ds.sources, "_kaggle_api", Offline)
    with pytest.raises(ds.DatasetUnavailable) as info:
        ds.load_dataset("spaceship-titanic")
    assert str(info.value).startswith(
        "dataset 'spaceship-titanic' is not cached and Kaggle is unreachable"
    )


def test_sklearn_datasets_are_offline_and_uncached(cache):
    for name, shape, classes in (
        ("iris", (150, 4), 3),
        ("wine", (178, 13), 3),
        ("breast-cancer", (569, 30), 2),
    ):
        dataset = ds.load_dataset(name)
        assert dataset.shape == shape and dataset.n_classes == classes
    assert not cache.exists()


def test_cache_dir_default_and_override(monkeypatch, tmp_path):
    monkeypatch.delenv(ds.CACHE_ENV_VAR, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert ds.default_cache_dir() == tmp_path / ".cache" / "agentbench-poad" / "datasets"
    monkeypatch.setenv(ds.CACHE_ENV_VAR, str(tmp_path / "x"))
    assert ds.default_cache_dir() == tmp_path / "x"
