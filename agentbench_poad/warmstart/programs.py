"""Working ``build_model`` bodies for supervised warm starts: estimators x preprocessing x
hyper-parameters, drawn deterministically.

A small model that writes no runnable DataSciCoding program gets reward -1 on every attempt and
has nothing to learn from (``studies/fair-cpu-v2-datascicoding.md``). A warm start first shows
it what a working body looks like, by supervised fine-tuning on bodies like these, written for
datasets that are *not* evaluation datasets (:mod:`agentbench_poad.warmstart.examples`).

The grid (:data:`ESTIMATORS`, :data:`PREPROCESSING`) is data: each estimator names its import,
its class and the values each hyper-parameter may take; each preprocessing names the steps put
before the estimator in a scikit-learn pipeline. :func:`draw_programs` draws ``n`` distinct
(estimator, preprocessing, hyper-parameters) triples from a seeded :class:`random.Random`, so a
warm start's training set is a pure function of its seed. Every body uses only scikit-learn and
NumPy (what the sandbox image has), stays inside the env's default banned list
(``GridSearchCV(``, ``SVC(``) and gives a classifier with ``predict_proba``;
``tests/test_warmstart.py`` runs a sample of them in the sandbox.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

#: name -> (module, class, {hyper-parameter: values}); every estimator has ``predict_proba``.
ESTIMATORS: dict[str, tuple[str, str, dict[str, tuple[Any, ...]]]] = {
    "logistic": (
        "sklearn.linear_model",
        "LogisticRegression",
        {"C": (0.1, 1.0, 10.0), "max_iter": (1000,)},
    ),
    "random_forest": (
        "sklearn.ensemble",
        "RandomForestClassifier",
        {"n_estimators": (100, 200, 400), "max_depth": (None, 6, 12), "random_state": (0,)},
    ),
    "extra_trees": (
        "sklearn.ensemble",
        "ExtraTreesClassifier",
        {"n_estimators": (100, 300), "min_samples_leaf": (1, 3), "random_state": (0,)},
    ),
    "gradient_boosting": (
        "sklearn.ensemble",
        "GradientBoostingClassifier",
        {"n_estimators": (100, 200), "learning_rate": (0.05, 0.1), "max_depth": (2, 3)},
    ),
    "hist_gradient_boosting": (
        "sklearn.ensemble",
        "HistGradientBoostingClassifier",
        {"learning_rate": (0.05, 0.1), "max_iter": (100, 200), "random_state": (0,)},
    ),
    "knn": (
        "sklearn.neighbors",
        "KNeighborsClassifier",
        {"n_neighbors": (5, 10, 20), "weights": ("uniform", "distance")},
    ),
    "decision_tree": (
        "sklearn.tree",
        "DecisionTreeClassifier",
        {"max_depth": (3, 5, 8), "random_state": (0,)},
    ),
    "naive_bayes": ("sklearn.naive_bayes", "GaussianNB", {}),
    "mlp": (
        "sklearn.neural_network",
        "MLPClassifier",
        {"hidden_layer_sizes": ((32,), (64, 32)), "alpha": (1e-4, 1e-2), "max_iter": (500,)},
    ),
    "qda": (
        "sklearn.discriminant_analysis",
        "QuadraticDiscriminantAnalysis",
        {"reg_param": (0.0, 0.1)},
    ),
    "adaboost": (
        "sklearn.ensemble",
        "AdaBoostClassifier",
        {"n_estimators": (50, 100), "learning_rate": (0.5, 1.0)},
    ),
}

#: name -> [(module, class, keyword text)] put before the estimator (``[]``: the estimator alone).
PREPROCESSING: dict[str, list[tuple[str, str, str]]] = {
    "none": [],
    "standard": [("sklearn.preprocessing", "StandardScaler", "")],
    "minmax": [("sklearn.preprocessing", "MinMaxScaler", "")],
    "poly2": [
        ("sklearn.preprocessing", "StandardScaler", ""),
        ("sklearn.preprocessing", "PolynomialFeatures", "degree=2, include_bias=False"),
    ],
}


@dataclass(frozen=True)
class Program:
    """One drawn body and what it was drawn from."""

    estimator: str
    preprocessing: str
    params: tuple[tuple[str, Any], ...]
    body: str
    """The function body, four-space indented, ending with ``model.fit(x_train, y_train)``
    (no ``return``: each prompt style adds its own ending)."""


def _literal(value: Any) -> str:
    return repr(value)


def render(estimator: str, preprocessing: str, params: dict[str, Any]) -> str:
    """The body for one grid point (four-space indented; the imports first, each once)."""
    if estimator not in ESTIMATORS:
        raise KeyError(f"unknown estimator {estimator!r}; known: {', '.join(ESTIMATORS)}")
    if preprocessing not in PREPROCESSING:
        raise KeyError(
            f"unknown preprocessing {preprocessing!r}; known: {', '.join(PREPROCESSING)}"
        )
    module, cls, grid = ESTIMATORS[estimator]
    unknown = sorted(set(params) - set(grid))
    if unknown:
        raise KeyError(f"{estimator} takes no {', '.join(unknown)}; it takes {', '.join(grid)}")
    steps = PREPROCESSING[preprocessing]
    # One fixed order (estimator, its preprocessing steps, the pipeline), each import once: a
    # small model copies a regular block and ends it; an alphabetical one interleaved the three
    # and taught the first warm start to repeat import lines (docs/warmstart.md).
    imports = [f"from {module} import {cls}"]
    for m, c, _ in steps:
        if f"from {m} import {c}" not in imports:
            imports.append(f"from {m} import {c}")
    if steps:
        imports.append("from sklearn.pipeline import make_pipeline")
    args = ", ".join(f"{key}={_literal(value)}" for key, value in params.items())
    final = f"{cls}({args})"
    if steps:
        parts = [f"{c}({kw})" for _, c, kw in steps] + [final]
        construct = f"make_pipeline({', '.join(parts)})"
    else:
        construct = final
    lines = [f"    {line}" for line in imports]
    lines += ["", f"    model = {construct}", "    model.fit(x_train, y_train)"]
    return "\n".join(lines)


def grid_size() -> int:
    """How many distinct programs the grid holds."""
    total = 0
    for _, _, grid in ESTIMATORS.values():
        points = 1
        for values in grid.values():
            points *= len(values)
        total += points
    return total * len(PREPROCESSING)


def draw_programs(n: int, seed: int = 0) -> list[Program]:
    """``n`` distinct programs, drawn uniformly over estimators, then preprocessing and values.

    Deterministic in ``seed``. Raises ``ValueError`` when ``n`` exceeds :func:`grid_size`.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if n > grid_size():
        raise ValueError(f"the grid holds {grid_size()} distinct programs; asked for {n}")
    rng = random.Random(seed)
    seen: set[tuple[str, str, tuple[tuple[str, Any], ...]]] = set()
    programs: list[Program] = []
    names = sorted(ESTIMATORS)
    while len(programs) < n:
        estimator = rng.choice(names)
        preprocessing = rng.choice(sorted(PREPROCESSING))
        grid = ESTIMATORS[estimator][2]
        params = tuple((key, rng.choice(values)) for key, values in grid.items())
        key = (estimator, preprocessing, params)
        if key in seen:
            continue
        seen.add(key)
        programs.append(
            Program(
                estimator, preprocessing, params, render(estimator, preprocessing, dict(params))
            )
        )
    return programs
