"""``agentbench-poad data list | fetch | import | info``."""

from __future__ import annotations

import re

import pytest

from agentbench_poad.cli import main
from agentbench_poad.environments.datascicoding import datasets as ds
from tests.test_datascicoding_datasets import (
    fake_kaggle,
    fake_openml,
    kaggle_standin,
    offline_openml,
)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv(ds.CACHE_ENV_VAR, str(path))
    return path


def test_list_shows_every_dataset_and_its_cache_state(cache, tmp_path, capsys):
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert set(lines) == set(ds.DATASETS)
    assert "bundled" in lines["iris"] and "missing" in lines["airlines"]
    assert "OpenML" in lines["airlines"] and "2000x7" in lines["airlines"]
    assert "Kaggle" in lines["kidney-stone"]

    csv = tmp_path / "train.csv"
    kaggle_standin("kidney-stone").to_csv(csv, index=False)
    assert main(["data", "import", "kidney-stone", str(csv)]) == 0
    ds.cache_paths("pc1")[0].parent.mkdir(parents=True, exist_ok=True)
    ds.cache_paths("pc1")[0].write_bytes(b"junk")
    ds.cache_paths("pc1")[1].write_text('{"format": 1, "sha256": "0"}')
    capsys.readouterr()
    assert main(["data", "list"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert "cached" in lines["kidney-stone"] and "corrupt" in lines["pc1"]


def test_import_then_info(cache, tmp_path, capsys):
    csv = tmp_path / "train.csv"
    kaggle_standin("kidney-stone").to_csv(csv, index=False)
    assert main(["data", "import", "kidney_stone", str(csv)]) == 0
    out = capsys.readouterr().out
    assert "414 rows x 6 features, 2 classes" in out and str(cache) in out

    assert main(["data", "info", "kidney-stone"]) == 0
    info = dict(
        re.split(r"\s{2,}", line, maxsplit=1) for line in capsys.readouterr().out.splitlines()
    )
    assert info["rows"] == "414" and info["features"] == "6" and info["classes"] == "2"
    assert "0: 230 (55.6%), 1: 184 (44.4%)" in info["class balance"]
    assert "Kaggle" in info["source"] and "playground-series-s3e12" in info["source"]
    assert info["cache path"].endswith("kidney-stone.npz") and str(cache) in info["cache path"]
    assert info["loaded from"].startswith("csv:")


def test_fetch_through_the_openml_client(cache, monkeypatch, capsys):
    fake_openml(monkeypatch)
    assert main(["data", "fetch", "balance-scale"]) == 0
    assert "125 rows x 4 features, 3 classes" in capsys.readouterr().out
    assert main(["data", "info", "balance-scale", "--cache-dir", str(cache)]) == 0
    assert "openml:11" in capsys.readouterr().out


def test_fetch_offline_and_info_uncached_name_the_fix(cache, monkeypatch, capsys):
    offline_openml(monkeypatch)
    assert main(["data", "fetch", "airlines"]) == 1
    err = capsys.readouterr().err
    assert "OpenML is unreachable" in err and "agentbench-poad data import airlines FILE.csv" in err
    assert main(["data", "info", "airlines"]) == 1
    err = capsys.readouterr().err
    assert "dataset 'airlines' is not cached" in err and "data fetch airlines" in err


def test_bad_names_and_files(cache, tmp_path, capsys):
    assert main(["data", "info", "mnist"]) == 2
    assert "unknown dataset 'mnist'" in capsys.readouterr().err
    assert main(["data", "import", "diabetes", str(tmp_path / "missing.csv")]) == 1
    assert "no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    assert main(["data", "import", "diabetes", str(bad)]) == 1
    assert "could not import" in capsys.readouterr().err


def test_bundled_datasets_need_no_cache(cache, capsys):
    assert main(["data", "fetch", "wine"]) == 0
    assert "bundled with scikit-learn" in capsys.readouterr().out
    assert main(["data", "info", "iris"]) == 0
    assert "0: 50 (33.3%)" in capsys.readouterr().out
    assert not cache.exists()


def test_fetch_all_fetches_every_network_dataset(cache, monkeypatch, capsys):
    fake_openml(monkeypatch)
    calls: list = []
    fake_kaggle(monkeypatch, calls)
    assert main(["data", "fetch", "all"]) == 0
    out = capsys.readouterr().out
    network = [s.name for s in ds.DATASETS.values() if not s.offline]
    assert all(f"{name}:" in out for name in network) and "iris" not in out
    assert sorted(p.stem for p in cache.glob("*.npz")) == sorted(network)
    assert len(calls) == 4
    offline_openml(monkeypatch)
    assert main(["data", "fetch", "all", "--cache-dir", str(cache / "second")]) == 1
