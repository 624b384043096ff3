"""The DataSciCoding grading as it was before issue 64: one sandbox call holding every split.

A plain reference for tests and ``benchmarks/datascicoding_step.py``: the grader then handed one
sandbox call all five splits (``x_train_i``, ``y_train_i``, ``x_test_i``) and read ``proba_i``
back; that call could read, as other splits' training labels, most of the labels each split is
scored on. The grader now runs one call per split holding only that split's data; honest
programs must get the very same grade, and this module is what "the same" is measured against.
Never use it to grade anything.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentbench_poad.environments.datascicoding.grader import ENTRY, Grader, roc_auc
from agentbench_poad.environments.datascicoding.prompts import module_source, parse_action

#: The harness of the one-call grading (verbatim from the grader of commit 9b20f95).
ONE_CALL_HARNESS = '''

def {entry}(**arrays):
    """Fit build_model on each split's training half and return predict_proba of its test half."""
    import random as _random

    import numpy as _np

    outputs = {{}}
    for i in range({n_splits}):
        # the global random state of split i is fixed, so a model left without a random_state
        # (RandomForestClassifier(), MLPClassifier(), ...) scores the same every time it runs
        _random.seed(i)
        _np.random.seed(i)
        fitted = build_model(arrays["x_train_%d" % i], arrays["y_train_%d" % i])
        if fitted is None:
            raise TypeError("build_model returned None; store the fitted classifier in `model`")
        predict_proba = getattr(fitted, "predict_proba", None)
        if predict_proba is None:
            raise TypeError(
                "build_model returned a %s, which has no predict_proba; return a fitted "
                "classifier (e.g. RandomForestClassifier)" % type(fitted).__name__
            )
        proba = _np.asarray(predict_proba(arrays["x_test_%d" % i]), dtype=_np.float64)
        classes = getattr(fitted, "classes_", None)
        if (proba.ndim == 2 and classes is not None and len(classes) == proba.shape[1]
                and proba.shape[1] != {n_classes}):
            # a training half that lacks a class: put the columns where the labels say
            full = _np.zeros((proba.shape[0], {n_classes}))
            full[:, _np.asarray(classes).astype(int)] = proba
            proba = full
        outputs["proba_%d" % i] = proba
    return outputs
'''


@dataclass
class OneCallGrade:
    """What the one-call grading gave: the reward (or -1), split AUCs, category and message."""

    reward: float
    split_aucs: list[float]
    category: str | None
    message: str
    runtime_s: float


def one_call_grade(grader: Grader, action: str) -> OneCallGrade:
    """Grade ``action`` the old way: one sandbox call with every split, AUC on the host.

    Uses the grader's own data, splits, limits and sandbox; only code that reaches the sandbox
    (no static failure) is supported.
    """
    from agentbench_poad.sandbox import run_code

    submission = parse_action(action)
    source = module_source(submission, grader.X.shape[1])
    if grader._static_failure(submission, source) is not None:
        raise ValueError("one_call_grade only grades code that reaches the sandbox")
    inputs: dict[str, np.ndarray] = {}
    shapes: dict[str, tuple[int | None, ...]] = {}
    for i, (train, test) in enumerate(grader.splits):
        inputs[f"x_train_{i}"] = grader.X[train]
        inputs[f"y_train_{i}"] = grader.y[train]
        inputs[f"x_test_{i}"] = grader.X[test]
        shapes[f"proba_{i}"] = (len(test), grader.n_classes)
    harness = ONE_CALL_HARNESS.format(
        entry=ENTRY, n_splits=len(grader.splits), n_classes=grader.n_classes
    )
    result = run_code(
        source + harness,
        ENTRY,
        inputs,
        limits=grader.limits,
        backend=grader.sandbox,
        output_shapes=shapes,
    )
    if not result.ok:
        category = getattr(result.category, "value", result.category)
        return OneCallGrade(-1.0, [], str(category), result.message, result.duration_s)
    try:
        aucs = [
            roc_auc(grader.y[test], result.outputs[f"proba_{i}"])
            for i, (_, test) in enumerate(grader.splits)
        ]
    except (ValueError, KeyError, IndexError) as exc:
        return OneCallGrade(
            -1.0,
            [],
            "output_invalid",
            f"predict_proba output cannot be scored: {exc}",
            result.duration_s,
        )
    return OneCallGrade(float(np.mean(aucs)), aucs, None, "", result.duration_s)
