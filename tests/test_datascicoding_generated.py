"""The generated DataSciCoding datasets: determinism, shapes, registration, the spread script.

No AUC is asserted here: how hard each table is was measured once by
``studies/dsc_dataset_spread.py`` (committed under ``studies/probes/``), not in a unit test.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from agentbench_poad import check_text_env, env_facts
from agentbench_poad.environments import registered_ids
from agentbench_poad.environments.datascicoding import datasets as ds
from agentbench_poad.environments.datascicoding.datasets import GENERATORS, GeneratedSource
from agentbench_poad.sandbox import Limits

ROOT = Path(__file__).resolve().parents[1]
GENERATED = [s for s in ds.DATASETS.values() if isinstance(s.source, GeneratedSource)]
NAMES = [s.name for s in GENERATED]


def _digest(X: np.ndarray, y: np.ndarray) -> str:
    return hashlib.sha256(X.tobytes() + y.tobytes()).hexdigest()


def _load_script():
    spec = importlib.util.spec_from_file_location(
        "dsc_dataset_spread", ROOT / "studies" / "dsc_dataset_spread.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_there_are_at_least_three_generated_tasks():
    assert len(GENERATED) >= 3
    assert {"gen-circles", "gen-xor", "gen-moons", "gen-noisy", "gen-loans"} <= set(NAMES)
    assert {s.source.generator for s in GENERATED} <= set(GENERATORS)


@pytest.mark.parametrize("name", NAMES)
def test_same_bytes_twice_and_the_global_rng_untouched(name):
    spec = ds.get_spec(name)
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    first = ds.load_dataset(name)
    np.random.seed(999)  # a different global state must not change the table
    second = ds.load_dataset(name)
    np.random.seed(123)
    assert np.array_equal(np.random.get_state()[1], before)  # drawing leaves it alone
    assert _digest(first.X, first.y) == _digest(second.X, second.y)
    assert first.X.tobytes() == second.X.tobytes() and first.y.tobytes() == second.y.tobytes()
    assert first.feature_names == second.feature_names
    assert first.source == f"generated:{spec.source.generator}"


def test_a_fresh_interpreter_draws_the_same_bytes():
    code = (
        "import hashlib, agentbench_poad\n"
        "from agentbench_poad.environments.datascicoding.datasets import load_dataset\n"
        f"for n in {NAMES!r}:\n"
        "    d = load_dataset(n)\n"
        "    print(n, hashlib.sha256(d.X.tobytes() + d.y.tobytes()).hexdigest())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.split()
    here = []
    for name in NAMES:
        data = ds.load_dataset(name)
        here += [name, _digest(data.X, data.y)]
    assert out == here


@pytest.mark.parametrize("name", NAMES)
def test_shapes_rows_and_classes(name):
    spec = ds.get_spec(name)
    data = ds.load_dataset(name)
    assert data.shape == spec.shape
    assert 300 <= data.shape[0] <= 2000
    assert data.n_classes == spec.n_classes == 2
    assert min(data.class_counts) >= 0.3 * data.shape[0]  # both classes well represented
    assert data.X.dtype == np.float64 and not np.isinf(data.X).any()
    # NaN only where the table declares missing values (the Kaggle-like gen-loans)
    assert np.isnan(data.X).any() == spec.missing_values
    assert len(data.feature_names) == data.shape[1]
    assert any(n.startswith("noise") for n in data.feature_names)  # irrelevant columns


def test_an_unknown_generator_names_the_known_ones():
    with pytest.raises(KeyError, match="unknown generator 'spiral'.*circles"):
        GeneratedSource("spiral").draw()


@pytest.mark.parametrize("name", NAMES)
def test_registered_with_facts_and_conformant(name):
    env_id = f"DataSciCoding-{name}-v0"
    assert env_id in registered_ids("datascicoding")
    facts = env_facts(env_id)
    assert (facts.family, facts.task, facts.actions, facts.metric) == (
        "datascicoding",
        name,
        "open",
        "final_auc",
    )
    assert facts.max_episode_steps == 5 and not facts.in_paper
    assert "generated" in facts.description
    env = gym.make(env_id, sandbox="process", limits=Limits(wall_time_s=60.0, memory_mb=1024))
    try:
        check_text_env(env)
        observation, _ = env.reset(seed=0)
        assert ds.get_spec(name).description in observation
    finally:
        env.close()


# -- the spread script ------------------------------------------------------------------------


def test_spread_script_smoke_mode(tmp_path, capsys):
    script = _load_script()
    out = tmp_path / "spread.json"
    assert script.main(["--smoke", "--out", str(out), "--markdown"]) == 0
    results = json.loads(out.read_text())
    assert list(results["datasets"]) == list(script.SMOKE_DATASETS)
    assert (
        results["classifiers"] == list(script.SMOKE_CLASSIFIERS)
        and len(script.SMOKE_CLASSIFIERS) == 2
    )
    entry = results["datasets"]["gen-xor"]
    assert entry["shape"] == [1000, 8]
    for clf in script.SMOKE_CLASSIFIERS:
        aucs = entry["classifiers"][clf]["split_aucs"]
        assert len(aucs) == 5 and all(0.0 <= a <= 1.0 for a in aucs)
    assert entry["spread"] >= 0.0
    assert "| `gen-xor` |" in capsys.readouterr().out


def test_spread_script_uses_the_graders_splits():
    """Same splits and AUC as the env: a classifier's per-split AUCs equal the env's reward."""
    from sklearn.naive_bayes import GaussianNB

    script = _load_script()
    data = ds.load_dataset("gen-circles")
    aucs = script.score_classifier(GaussianNB, data.X, data.y)
    env = gym.make(
        "DataSciCoding-gen-circles-v0",
        sandbox="process",
        limits=Limits(wall_time_s=60.0, memory_mb=1024),
    )
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(
        "from sklearn.naive_bayes import GaussianNB\nmodel = GaussianNB().fit(x_train, y_train)"
    )
    assert terminated, info["failure_message"]
    assert info["split_aucs"] == pytest.approx(aucs, abs=1e-12)


def test_spread_script_refuses_unknown_names():
    script = _load_script()
    with pytest.raises(SystemExit):
        script.main(["--classifiers", "xgboost"])
    with pytest.raises(SystemExit):
        script.main(["--datasets", "airlines"])  # a download, not offline


def test_committed_spread_covers_every_generated_task():
    results = json.loads((ROOT / "studies" / "probes" / "dsc_dataset_spread.json").read_text())
    assert len(results["classifiers"]) >= 10
    for name in NAMES:
        entry = results["datasets"][name]
        assert entry["shape"] == list(ds.get_spec(name).shape)
        assert set(entry["classifiers"]) == set(results["classifiers"])


def test_loans_is_kaggle_like_missing_values_categorical_codes_and_a_ratio():
    """gen-loans: NaN in three columns only, integer codes in the categorical ones, and the
    debt-to-income ratio separates the classes better than either of its columns."""
    data = ds.load_dataset("gen-loans")
    names = list(data.feature_names)
    missing = {names[j] for j in np.flatnonzero(np.isnan(data.X).any(axis=0))}
    assert missing == {"credit_years", "utilization", "employment"}
    for column in ("region", "employment", "purpose"):
        values = data.X[:, names.index(column)]
        values = values[~np.isnan(values)]
        assert np.array_equal(values, np.round(values)) and len(np.unique(values)) <= 12
    ratio = data.X[:, names.index("debt")] / data.X[:, names.index("income")]

    def separation(x):  # |rank correlation| with the label, no model needed
        ranks = np.argsort(np.argsort(x))
        return abs(np.corrcoef(ranks, data.y)[0, 1])

    debt = separation(data.X[:, names.index("debt")])
    income = separation(data.X[:, names.index("income")])
    assert separation(ratio) > max(debt, income) + 0.05


def test_pruning_refuses_nan_where_a_table_declares_none():
    import dataclasses

    import pandas as pd

    from agentbench_poad.environments.datascicoding.datasets.pruning import prune

    spec = dataclasses.replace(ds.get_spec("gen-xor"))
    frame = pd.DataFrame({"a": [0.0, np.nan, 1.0, 2.0], "target": [0, 1, 0, 1]})
    with pytest.raises(ValueError, match="non-finite"):
        prune(spec, frame, "test")
    allowed = dataclasses.replace(spec, missing_values=True, shape=(4, 1))
    assert np.isnan(prune(allowed, frame, "test").X).sum() == 1
    infinite = pd.DataFrame({"a": [0.0, np.inf, 1.0, 2.0], "target": [0, 1, 0, 1]})
    with pytest.raises(ValueError, match="non-finite"):
        prune(allowed, infinite, "test")
