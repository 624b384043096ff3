"""Scoring a ``build_model`` body: one sandbox run per split, ROC AUC on the host.

The splits follow the reference (docs/reference.md#datascicoding-grading): split ``i`` is
``train_test_split(X, y, test_size=0.5, random_state=i, shuffle=True)``, ``i = 0..4``, no
stratification. **Each split runs in a sandbox call of its own** that holds that split's training
features and labels and its test *features* only (``x_train``, ``y_train``, ``x_test``) and
returns one float array, ``predict_proba`` of the test features. No label of a row the program
is scored on is ever handed to the code: not the split's own test labels, and not another
split's training labels either (a test row of one split is a training row of another with
probability 1 - 1/2**4, so one call holding all splits would hold, as training labels, about
94 % of the labels each split is scored on). The calls run one after the other; the sandbox
gives each a fresh process (a fresh container on docker) and shares nothing writable between
them (docs/sandbox.md, "What a run cannot reach").

Before ``build_model`` the sandbox seeds Python's and NumPy's global random state with the
split's index ``i``, so a program is scored the same way every time it runs, also when its
estimator has no ``random_state`` (the grade is a function of the code and the dataset). The
host checks the shapes and computes the AUC: the positive-class column for binary tasks,
one-vs-one macro AUC for multiclass tasks (the reference's ``multi_class="ovo"``). The same
arrays (rows in the same order, float64 features, int64 labels) and the same seeding as when
one call carried every split, so an honest program's grade is bit for bit what it was. One
thing a fresh process per split changes is kept as it was: that process ran split 0's
``build_model`` imports after split 0's seed and found them done for the later splits (an
import may draw from the global random state), so from split 1 on the imports made inside
functions are run before the seed (:func:`function_imports`).

The wall-clock limit (``limits.wall_time_s``) is the attempt's: the five runs share it, each
getting what the earlier ones left, so a program times out exactly when the five runs together
take longer than the limit (start-ups included).

Protocols (docs/envs/datascicoding.md, "Protocols"):

* ``"paper"`` (default): the 5 splits cover the whole dataset, as in the paper. An agent that
  gets this reward after every attempt sees a score on data it is later judged on, so over many
  attempts and episodes it can overfit the splits adaptively (the label-oracle problem).
* ``"holdout"``: a stratified ``holdout_fraction`` of the rows (seeded by ``holdout_seed``, the
  same for every episode) is set aside; the per-step reward uses 5 splits of the rest and the
  held-out rows are scored once, when an attempt succeeds, by fitting on all the other rows. The
  result is ``info["holdout_auc"]``: a number no per-step reward ever depended on.

Nothing here imports or executes the agent's code: it is parsed on the host (``ast.parse``, for
syntax errors and trivially empty bodies) and run only in :mod:`agentbench_poad.sandbox`.
"""

from __future__ import annotations

import ast
import dataclasses
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from agentbench_poad.core import to_text
from agentbench_poad.environments.datascicoding.prompts import (
    Submission,
    may_define_model,
    module_source,
)

if TYPE_CHECKING:
    from agentbench_poad.sandbox import Backend, Limits, SandboxResult

#: The entry the grader appends to the agent's module (run inside the sandbox only).
ENTRY = "_agentbench_evaluate"
#: Longest failure message / stdout tail a :class:`Grade` keeps (after escaping).
MAX_MESSAGE_LENGTH = 4000

#: Failure categories of the grader itself (the sandbox adds its own ``FailureCategory`` values).
EMPTY_CODE = "empty_code"
NO_MODEL = "no_model"
BANNED_CONSTRUCT = "banned_construct"
SYNTAX_ERROR = "syntax_error"
OUTPUT_INVALID = "output_invalid"

_HARNESS = '''

def {entry}(x_train, y_train, x_test):
    """Fit build_model on one split's training half and return predict_proba of its test half."""
    import random as _random

    import numpy as _np

    # When one process ran every split, split 0 imported what build_model imports after its
    # seed (an import may draw from the global random state: scikit-learn 1.9's optional rich
    # does) and the later splits found it imported; so from split 1 on it is imported first.
    for _name, _fromlist in {warm!r}:
        try:
            __import__(_name, fromlist=list(_fromlist))
        except BaseException:
            pass  # build_model meets the same failure where it imports, as it did
    # the global random state of split {seed} is fixed, so a model left without a random_state
    # (RandomForestClassifier(), MLPClassifier(), ...) scores the same every time it runs
    _random.seed({seed})
    _np.random.seed({seed})
    fitted = build_model(x_train, y_train)
    if fitted is None:
        raise TypeError("build_model returned None; store the fitted classifier in `model`")
    predict_proba = getattr(fitted, "predict_proba", None)
    if predict_proba is None:
        raise TypeError(
            "build_model returned a %s, which has no predict_proba; return a fitted "
            "classifier (e.g. RandomForestClassifier)" % type(fitted).__name__
        )
    proba = _np.asarray(predict_proba(x_test), dtype=_np.float64)
    classes = getattr(fitted, "classes_", None)
    if (proba.ndim == 2 and classes is not None and len(classes) == proba.shape[1]
            and proba.shape[1] != {n_classes}):
        # a training half that lacks a class: put the columns where the labels say
        full = _np.zeros((proba.shape[0], {n_classes}))
        full[:, _np.asarray(classes).astype(int)] = proba
        proba = full
    return {{"proba_{seed}": proba}}
'''


def harness(seed: int, n_classes: int, warm: list[tuple[str, tuple[str, ...]]] = ()) -> str:
    """The entry appended to the agent's module for the split seeded with ``seed``.

    ``warm``: ``(module, fromlist)`` pairs imported before the seed (see
    :func:`function_imports`).
    """
    return _HARNESS.format(
        entry=ENTRY, seed=int(seed), n_classes=int(n_classes), warm=[tuple(w) for w in warm]
    )


def function_imports(source: str) -> list[tuple[str, tuple[str, ...]]]:
    """``(module, fromlist)`` of every absolute import inside a function of ``source``.

    What ``build_model`` (or a method it calls) imports when it runs, in order of appearance
    and without repeats; module-level imports run before any seed anyway.
    """
    found: list[tuple[str, tuple[str, ...]]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Import):
                found += [(alias.name, ()) for alias in inner.names]
            elif isinstance(inner, ast.ImportFrom) and inner.level == 0 and inner.module:
                names = tuple(alias.name for alias in inner.names if alias.name != "*")
                found.append((inner.module, names))
    return list(dict.fromkeys(found))


@dataclass
class Grade:
    """The outcome of one attempt.

    Attributes:
        ok: the attempt produced valid probabilities for every split.
        reward: mean AUC on success, ``-1.0`` on failure.
        split_aucs: per-split AUCs (empty on failure).
        auc_std: their (population) standard deviation, ``0.0`` on failure.
        category: failure category (``None`` on success).
        message: one readable line saying what went wrong (``""`` on success); made to fit the
            text spaces (:func:`~agentbench_poad.core.to_text`, at most
            :data:`MAX_MESSAGE_LENGTH` characters) since it carries the code's own words.
        runtime_s: sandbox wall time of the attempt (start-up included, waiting for a free
            slot excluded); 0.0 when the code never ran (empty, syntax error, banned
            construct, no ``model``).
        backend: the sandbox backend that ran it (``None`` when it never reached the sandbox).
        stdout_tail: the tail of the code's stdout (diagnostics only; never in an observation),
            sanitised like ``message``.
        holdout_auc: the held-out score (holdout protocol, successful attempt), else ``None``.
    """

    ok: bool
    reward: float
    split_aucs: list[float] = field(default_factory=list)
    auc_std: float = 0.0
    category: str | None = None
    message: str = ""
    runtime_s: float = 0.0
    backend: str | None = None
    stdout_tail: str = ""
    holdout_auc: float | None = None

    def __post_init__(self) -> None:
        # The sandbox's texts are the agent's: escape and cap them here, once, for every use.
        self.message = to_text(self.message, MAX_MESSAGE_LENGTH)
        self.stdout_tail = to_text(self.stdout_tail, MAX_MESSAGE_LENGTH)


def _failure(
    category: str,
    message: str,
    runtime_s: float = 0.0,
    backend: str | None = None,
    stdout_tail: str = "",
) -> Grade:
    # code that never reached the sandbox did not run: runtime 0.0 (which also keeps info
    # deterministic for gymnasium's checker)
    return Grade(
        False,
        -1.0,
        category=category,
        message=message,
        runtime_s=runtime_s,
        backend=backend,
        stdout_tail=stdout_tail,
    )


def roc_auc(y_true: np.ndarray, proba: np.ndarray) -> float:
    """The reference's AUC: positive-class column if binary, else one-vs-one macro."""
    from sklearn.metrics import roc_auc_score

    if proba.shape[1] > 2:
        return float(roc_auc_score(y_true, proba, multi_class="ovo"))
    return float(roc_auc_score(y_true, proba[:, 1]))


def make_splits(n_rows: int, n_splits: int = 5) -> list[tuple[np.ndarray, np.ndarray]]:
    """Index pairs of the reference's splits: ``train_test_split(test_size=0.5, random_state=i)``."""
    from sklearn.model_selection import train_test_split

    index = np.arange(n_rows)
    return [
        tuple(train_test_split(index, test_size=0.5, random_state=i, shuffle=True))
        for i in range(n_splits)
    ]


class Grader:
    """Scores bodies of ``build_model`` on one dataset.

    Args:
        X: features ``(rows, features)``.
        y: labels ``0..n_classes-1``.
        n_classes: number of classes (the width of ``predict_proba``).
        sandbox: ``"auto"``, ``"docker"``, ``"process"``, ``"ray"`` (a shared pool of Ray
            actors, each using its node's ``auto`` backend: :mod:`agentbench_poad.ray_sandbox`)
            or a sandbox ``Backend`` instance.
        limits: sandbox limits of one attempt; its wall time is shared by the splits' runs.
        banned: substrings of the assembled code that fail the attempt.
        protocol: ``"paper"`` or ``"holdout"`` (module docstring).
        holdout_fraction: share of rows held out (``"holdout"`` protocol).
        holdout_seed: seed of the held-out partition (fixed across episodes on purpose).
        n_splits: random 50/50 splits per attempt.

    The sandbox bounds how many runs execute at once, machine-wide
    (:mod:`agentbench_poad.sandbox.concurrency`); the grader holds no limit of its own.
    """

    def __init__(
        self,
        X: np.ndarray,
        y: np.ndarray,
        n_classes: int,
        *,
        sandbox: str | Backend = "auto",
        limits: Limits | None = None,
        banned: tuple[str, ...] = (),
        protocol: str = "paper",
        holdout_fraction: float = 0.2,
        holdout_seed: int = 0,
        n_splits: int = 5,
    ) -> None:
        if protocol not in ("paper", "holdout"):
            raise ValueError(f"protocol must be 'paper' or 'holdout', got {protocol!r}")
        if not 0.0 < holdout_fraction < 1.0:
            raise ValueError(f"holdout_fraction must be in (0, 1), got {holdout_fraction!r}")
        self.X = np.ascontiguousarray(X, dtype=np.float64)
        self.y = np.asarray(y, dtype=np.int64)
        self.n_classes = int(n_classes)
        if sandbox == "ray":
            from agentbench_poad.ray_sandbox import shared_pool

            sandbox = shared_pool()
        self.sandbox = sandbox
        self.limits = limits
        self.banned = tuple(banned)
        self.protocol = protocol
        self.n_splits = int(n_splits)
        rows = np.arange(len(self.y))
        self.holdout_rows: np.ndarray | None = None
        if protocol == "holdout":
            from sklearn.model_selection import train_test_split

            try:
                rows, self.holdout_rows = train_test_split(
                    rows,
                    test_size=holdout_fraction,
                    random_state=holdout_seed,
                    shuffle=True,
                    stratify=self.y,
                )
            except ValueError:  # a class too rare to stratify: a plain seeded split
                rows, self.holdout_rows = train_test_split(
                    rows,
                    test_size=holdout_fraction,
                    random_state=holdout_seed,
                    shuffle=True,
                )
        self.dev_rows = np.asarray(rows)
        self.splits = [
            (self.dev_rows[tr], self.dev_rows[te])
            for tr, te in make_splits(len(self.dev_rows), self.n_splits)
        ]

    # -- static checks (host side: parsing only) -----------------------------------------
    def _static_failure(self, submission: Submission, source: str) -> Grade | None:
        if submission.empty:
            return _failure(
                EMPTY_CODE,
                "the answer contains no code; write the body of "
                "build_model that fits a classifier and stores it in `model`",
            )
        try:
            ast.parse(source)
        except SyntaxError as exc:
            line = (exc.text or "").strip()
            where = f" (line {exc.lineno}: {line})" if line else f" (line {exc.lineno})"
            return _failure(SYNTAX_ERROR, f"{type(exc).__name__}: {exc.msg}{where}")
        except (ValueError, RecursionError, MemoryError) as exc:
            return _failure(SYNTAX_ERROR, f"the code cannot be parsed: {exc}")
        for pattern in self.banned:
            if pattern in source:
                return _failure(
                    BANNED_CONSTRUCT,
                    f"the code uses `{pattern}`, which this task forbids (no "
                    f"{', '.join(self.banned)}); use another model",
                )
        if not may_define_model(source):
            return _failure(
                NO_MODEL,
                "NameError: name 'model' is not defined; the body must "
                "store the fitted classifier in a variable named `model`",
            )
        return None

    # -- sandbox -------------------------------------------------------------------------
    def _run(
        self, source: str, splits: list[tuple[np.ndarray, np.ndarray]]
    ) -> tuple[list[np.ndarray], SandboxResult | None, float, str | None, str]:
        """Run the splits one by one, each in a sandbox call that holds only its own data.

        Which failure an attempt reports is what it was when one process ran every split: the
        first split whose code fails (an exception, a timeout, too much memory) ends the
        attempt, while a split whose *output* is invalid (shape, NaN) is remembered and the
        later splits still run, since the code would have gone on to them; it is reported
        when none of them fails. Outputs are named ``proba_<i>``, as they were.

        Returns:
            ``(probas, failure, seconds, backend, stdout)``: the validated ``predict_proba`` of
            every split, the failed run to report (``None`` when all succeeded), the sandbox
            time of all runs, the backend and the runs' stdout tails joined.
        """
        from agentbench_poad.sandbox import FailureCategory, Limits, SandboxResult, run_code

        limits = self.limits or Limits()
        warm = function_imports(source)
        probas: list[np.ndarray] = []
        invalid: SandboxResult | None = None
        spent, backend, stdout = 0.0, None, []
        for i, (train, test) in enumerate(splits):
            left = limits.wall_time_s - spent
            if left <= 0:  # the earlier splits used the attempt's whole budget
                failure = SandboxResult(ok=False, category=FailureCategory.TIMEOUT, backend=backend)
                failure.message = f"timed out after {limits.wall_time_s:g} s"
                return probas, failure, spent, backend, "".join(stdout)
            result = run_code(
                source + harness(i, self.n_classes, warm if i else []),
                ENTRY,
                {"x_train": self.X[train], "y_train": self.y[train], "x_test": self.X[test]},
                limits=dataclasses.replace(limits, wall_time_s=left),
                backend=self.sandbox,
                output_shapes={f"proba_{i}": (len(test), self.n_classes)},
            )
            spent += result.duration_s
            backend = backend or result.backend or None
            stdout.append(result.stdout_tail)
            if result.ok:
                probas.append(result.outputs[f"proba_{i}"])
            elif result.category is FailureCategory.OUTPUT_INVALID:
                invalid = invalid or result
            else:
                if result.category is FailureCategory.TIMEOUT and result.message.startswith(
                    "timed out after"
                ):
                    # the limit is the attempt's, whatever share of it this split had left
                    result.message = f"timed out after {limits.wall_time_s:g} s"
                return probas, result, spent, backend, "".join(stdout)
        return probas, invalid, spent, backend, "".join(stdout)

    def _score(self, probas: list[np.ndarray], splits) -> list[float]:
        return [roc_auc(self.y[test], proba) for proba, (_, test) in zip(probas, splits)]

    def grade(self, submission: Submission) -> Grade:
        """Score one attempt; every failure becomes a :class:`Grade` with reward -1."""
        started = time.perf_counter()
        source = module_source(submission, self.X.shape[1])
        static = self._static_failure(submission, source)
        if static is not None:
            return static
        try:
            probas, failed, seconds, backend, stdout = self._run(source, self.splits)
        except Exception as exc:  # noqa: BLE001 - a broken sandbox must not crash step()
            return _failure(
                "sandbox_error",
                f"the sandbox could not run the code: {type(exc).__name__}: {exc}",
                time.perf_counter() - started,
            )
        if failed is not None:
            category = getattr(failed.category, "value", failed.category) or "sandbox_error"
            return _failure(
                str(category), failed.message or str(category), seconds, backend, stdout
            )
        try:
            aucs = self._score(probas, self.splits)
        except (ValueError, KeyError, IndexError) as exc:
            return _failure(
                OUTPUT_INVALID,
                f"predict_proba output cannot be scored: {exc}",
                seconds,
                backend,
                stdout,
            )
        grade = Grade(
            True,
            float(np.mean(aucs)),
            split_aucs=aucs,
            auc_std=float(np.std(aucs)),
            runtime_s=seconds,
            backend=backend,
            stdout_tail=stdout,
        )
        if self.holdout_rows is not None:
            grade.holdout_auc, seconds = self._holdout(source)
            grade.runtime_s += seconds
        return grade

    def _holdout(self, source: str) -> tuple[float | None, float]:
        """Fit on every non-held-out row, score the held-out rows (``None`` if that fails)."""
        split = [(self.dev_rows, self.holdout_rows)]
        try:
            probas, failed, seconds, _, _ = self._run(source, split)
            if failed is not None:
                return None, seconds
            return self._score(probas, split)[0], seconds
        except Exception:  # noqa: BLE001 - the holdout score is reported, never raised
            return None, 0.0
