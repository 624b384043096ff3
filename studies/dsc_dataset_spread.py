"""How much does the choice of classifier matter on each offline DataSciCoding dataset?

Issue 46 item 3: a reward says more than "the code ran" only where models differ. For each
dataset this runs common scikit-learn classifiers with their default hyper-parameters under the
environment's own protocol (the grader's 5 random 50/50 splits, :func:`make_splits`, and its
ROC AUC, :func:`roc_auc`: positive-class column if binary, one-vs-one macro otherwise) and
reports each classifier's mean AUC and the spread between the worst and the best.

The classifiers run here, in this process (no sandbox, no Docker): they are trusted code. The
only change to a default is ``random_state=0`` where an estimator draws random numbers (so the
table is reproducible) and ``probability=True`` for ``SVC`` (it has no ``predict_proba``
otherwise). Warnings (e.g. an MLP that stops at its default 200 iterations) are silenced: the
default is what is measured. Example::

    OMP_NUM_THREADS=1 python studies/dsc_dataset_spread.py \\
        --out studies/probes/dsc_dataset_spread.json --markdown
    python studies/dsc_dataset_spread.py --smoke   # 2 classifiers on 1 dataset
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

#: The generated datasets (the issue's harder tasks) and the bundled ones, for comparison.
DEFAULT_DATASETS = (
    "gen-circles",
    "gen-xor",
    "gen-moons",
    "gen-noisy",
    "iris",
    "wine",
    "breast-cancer",
)
#: The smoke run's dataset and classifiers (tests run it).
SMOKE_DATASETS = ("gen-xor",)
SMOKE_CLASSIFIERS = ("logistic_regression", "decision_tree")
#: Classifiers of the linear family (the "a linear model scores near chance" column).
LINEAR = ("logistic_regression", "lda")


def _classifiers() -> dict[str, Callable[[], Any]]:
    """Name -> a fresh estimator with its defaults (random_state fixed where it has one)."""
    from sklearn.discriminant_analysis import (
        LinearDiscriminantAnalysis,
        QuadraticDiscriminantAnalysis,
    )
    from sklearn.ensemble import (
        AdaBoostClassifier,
        ExtraTreesClassifier,
        GradientBoostingClassifier,
        HistGradientBoostingClassifier,
        RandomForestClassifier,
    )
    from sklearn.linear_model import LogisticRegression
    from sklearn.naive_bayes import GaussianNB
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.neural_network import MLPClassifier
    from sklearn.svm import SVC
    from sklearn.tree import DecisionTreeClassifier

    return {
        "logistic_regression": LogisticRegression,
        "lda": LinearDiscriminantAnalysis,
        "qda": QuadraticDiscriminantAnalysis,
        "gaussian_nb": GaussianNB,
        "knn": KNeighborsClassifier,
        "decision_tree": lambda: DecisionTreeClassifier(random_state=0),
        "random_forest": lambda: RandomForestClassifier(random_state=0),
        "extra_trees": lambda: ExtraTreesClassifier(random_state=0),
        "gradient_boosting": lambda: GradientBoostingClassifier(random_state=0),
        "hist_gradient_boosting": lambda: HistGradientBoostingClassifier(random_state=0),
        "adaboost": lambda: AdaBoostClassifier(random_state=0),
        "svc_rbf": lambda: SVC(probability=True, random_state=0),
        "mlp": lambda: MLPClassifier(random_state=0),
    }


CLASSIFIERS: tuple[str, ...] = (
    "logistic_regression",
    "lda",
    "qda",
    "gaussian_nb",
    "knn",
    "decision_tree",
    "random_forest",
    "extra_trees",
    "gradient_boosting",
    "hist_gradient_boosting",
    "adaboost",
    "svc_rbf",
    "mlp",
)


def score_classifier(make: Callable[[], Any], X: np.ndarray, y: np.ndarray) -> list[float]:
    """The env's per-split AUCs of one classifier: fit on each training half, score the test
    half (the grader's splits and AUC; a training half that lacks a class gets zero columns
    where the sandbox harness puts them)."""
    from agentbench_poad.environments.datascicoding.grader import make_splits, roc_auc

    n_classes = int(y.max()) + 1
    aucs = []
    for train, test in make_splits(len(y)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = make().fit(X[train], y[train])
            proba = np.asarray(model.predict_proba(X[test]), dtype=np.float64)
        if proba.shape[1] != n_classes:
            full = np.zeros((len(test), n_classes))
            full[:, np.asarray(model.classes_).astype(int)] = proba
            proba = full
        aucs.append(roc_auc(y[test], proba))
    return aucs


def measure(datasets: Sequence[str], classifiers: Sequence[str]) -> dict[str, Any]:
    """Every classifier on every dataset: per-split AUCs, means, the spread."""
    import sklearn

    from agentbench_poad.environments.datascicoding.datasets import load_dataset

    makers = _classifiers()
    results: dict[str, Any] = {
        "protocol": (
            "mean ROC AUC over the env's 5 splits train_test_split(test_size=0.5, "
            "random_state=i), i=0..4; binary: positive-class column, multiclass: ovo macro"
        ),
        "classifiers": list(classifiers),
        "sklearn_version": sklearn.__version__,
        "numpy_version": np.__version__,
        "datasets": {},
    }
    for name in datasets:
        data = load_dataset(name, download=False)
        entry: dict[str, Any] = {
            "env_id": f"DataSciCoding-{data.name}-v0",
            "shape": list(data.shape),
            "classes": data.n_classes,
            "class_counts": data.class_counts,
            "source": data.source,
            "classifiers": {},
        }
        for clf in classifiers:
            start = time.perf_counter()
            try:
                aucs = score_classifier(makers[clf], data.X, data.y)
            except Exception as exc:  # noqa: BLE001 - a default that fails is a result too
                entry["classifiers"][clf] = {"mean_auc": None, "error": f"{type(exc).__name__}"}
                print(f"{name:15s} {clf:24s} failed: {exc}", flush=True)
                continue
            entry["classifiers"][clf] = {
                "mean_auc": round(float(np.mean(aucs)), 4),
                "std_auc": round(float(np.std(aucs)), 4),
                "split_aucs": [round(a, 4) for a in aucs],
                "seconds": round(time.perf_counter() - start, 2),
            }
            print(f"{name:15s} {clf:24s} {np.mean(aucs):.3f}", flush=True)
        means = {
            c: v["mean_auc"] for c, v in entry["classifiers"].items() if v["mean_auc"] is not None
        }
        best = max(means, key=means.__getitem__)
        worst = min(means, key=means.__getitem__)
        entry["best"] = {"classifier": best, "mean_auc": means[best]}
        entry["worst"] = {"classifier": worst, "mean_auc": means[worst]}
        entry["spread"] = round(means[best] - means[worst], 4)
        linear = [means[c] for c in LINEAR if c in means]
        entry["best_linear_auc"] = max(linear) if linear else None
        results["datasets"][name] = entry
    return results


_SHORT = {
    "logistic_regression": "LogReg",
    "lda": "LDA",
    "qda": "QDA",
    "gaussian_nb": "GNB",
    "knn": "kNN",
    "decision_tree": "Tree",
    "random_forest": "RF",
    "extra_trees": "ET",
    "gradient_boosting": "GB",
    "hist_gradient_boosting": "HGB",
    "adaboost": "Ada",
    "svc_rbf": "SVC",
    "mlp": "MLP",
}


def markdown_table(results: dict[str, Any]) -> str:
    """The docs' table: one row per dataset, one column per classifier, then the spread."""
    classifiers = results["classifiers"]
    head = ["dataset", "shape", *(_SHORT.get(c, c) for c in classifiers), "spread"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, entry in results["datasets"].items():
        cells = [f"`{name}`", "x".join(str(s) for s in entry["shape"])]
        best = entry["best"]["mean_auc"]
        for clf in classifiers:
            value = entry["classifiers"][clf]["mean_auc"]
            if value is None:
                cells.append("fails")
            else:
                cells.append(f"**{value:.3f}**" if value == best else f"{value:.3f}")
        cells.append(f"{entry['spread']:.3f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default=",".join(DEFAULT_DATASETS), help="comma-separated")
    parser.add_argument("--classifiers", default=",".join(CLASSIFIERS), help="comma-separated")
    parser.add_argument(
        "--smoke", action="store_true", help="2 classifiers on 1 dataset (a quick check)"
    )
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    parser.add_argument("--markdown", action="store_true", help="print the docs' table")
    args = parser.parse_args(argv)
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    classifiers = [c.strip() for c in args.classifiers.split(",") if c.strip()]
    if args.smoke:
        datasets, classifiers = list(SMOKE_DATASETS), list(SMOKE_CLASSIFIERS)
    unknown = sorted(set(classifiers) - set(CLASSIFIERS))
    if unknown:
        parser.error(f"unknown classifier(s) {unknown}; choose from {list(CLASSIFIERS)}")
    from agentbench_poad.environments.datascicoding.datasets import get_spec

    for name in datasets:
        try:
            spec = get_spec(name)
        except KeyError as exc:
            parser.error(str(exc.args[0]))
        if not spec.offline:
            parser.error(f"{name} needs a download; this script measures offline datasets only")
    results = measure(datasets, classifiers)
    if args.out:
        from agentbench_poad.rl.run_dir import write_json

        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_json(args.out, results)
        print(f"wrote {args.out}")
    if args.markdown:
        print(markdown_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
