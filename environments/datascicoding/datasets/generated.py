"""Generated DataSciCoding datasets: harder tasks that need no download.

The bundled scikit-learn tables (iris, wine, breast-cancer) are solved by almost any classifier
(mean ROC AUC about 0.99), so a reward there says little more than "the code ran". The tables
here are drawn from fixed formulas with fixed seeds, so every machine gets the same bytes, and
each is built so that the choice of model matters: a linear model stays near chance (0.5-0.7)
where trees or nearest neighbours reach 0.85 or more (the measured spread over 13 default
classifiers: docs/envs/datascicoding.md, ``studies/dsc_dataset_spread.py``).

Each generator takes no argument and returns ``(X, y, feature_names)``; all randomness comes from
its own ``numpy.random.RandomState`` (never the global RNG). :class:`GeneratedSource` wraps one as
a source of the task table (offline, never cached: drawing is cheaper than reading a cache).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

Generated = tuple[np.ndarray, np.ndarray, tuple[str, ...]]


def _with_noise_columns(
    X: np.ndarray, n_noise: int, rng: np.random.RandomState, scale: float = 1.0
) -> np.ndarray:
    """``X`` followed by ``n_noise`` irrelevant standard-normal columns (times ``scale``)."""
    return np.hstack([X, scale * rng.standard_normal((len(X), n_noise))])


def _names(informative: int, noise: int) -> tuple[str, ...]:
    return tuple(f"x{i}" for i in range(informative)) + tuple(f"noise{i}" for i in range(noise))


def circles() -> Generated:
    """Two noisy concentric circles (``make_circles``, 1000 rows) and 6 irrelevant columns.

    The class is the radius: no hyperplane separates it (a linear model scores about 0.5), a
    distance-based or tree model recovers it. The noise columns have the circles' scale, so an
    unscaled kNN still sees the radius.
    """
    from sklearn.datasets import make_circles

    X, y = make_circles(n_samples=1000, noise=0.12, factor=0.5, random_state=0)
    rng = np.random.RandomState(1)
    return _with_noise_columns(X, 6, rng, scale=0.7), y, _names(2, 6)


def xor() -> Generated:
    """An XOR of two uniform features, 6 % of labels flipped, and 6 irrelevant columns.

    ``x0, x1 ~ U(-1, 1)``, ``y = [x0 * x1 > 0]``, then each label flipped with probability
    0.06; ``noise0..5 ~ U(-1, 1)``; 1000 rows. Neither feature alone says anything about ``y``
    (a linear model scores about 0.5); their interaction says everything but the flips.
    """
    rng = np.random.RandomState(2)
    informative = rng.uniform(-1.0, 1.0, size=(1000, 2))
    y = (informative[:, 0] * informative[:, 1] > 0).astype(np.int64)
    flip = rng.uniform(size=1000) < 0.06
    y = np.where(flip, 1 - y, y)
    X = np.hstack([informative, rng.uniform(-1.0, 1.0, size=(1000, 6))])
    return X, y, _names(2, 6)


def moons() -> Generated:
    """Two pairs of interleaved half-moons (``make_moons``, noise 0.25, 500 rows each), the
    second pair point-reflected and shifted, and 4 irrelevant columns; 1000 rows.

    The reflected copy puts each class on both sides of the other: the two classes have the
    same mean, so a linear model scores about 0.5, while a flexible model traces the moons.
    The copy is ``(4, 0.5) + (c - x)`` for ``c = (0.5, 0.25)``, the moons' centre.
    """
    from sklearn.datasets import make_moons

    X, y = make_moons(n_samples=500, noise=0.25, random_state=3)
    centre, offset = np.array([0.5, 0.25]), np.array([4.0, 0.5])
    X = np.vstack([X, offset + (centre - X)])
    y = np.concatenate([y, y])
    rng = np.random.RandomState(3)
    order = rng.permutation(len(y))
    X, y = X[order], y[order]
    return _with_noise_columns(X, 4, rng, scale=0.8), y, _names(2, 4)


def noisy() -> Generated:
    """``make_classification``: 1000 rows, 20 features (5 informative, 15 irrelevant), 8
    clusters per class on the vertices of a 5-cube (class_sep 2.0), 10 % of labels flipped.

    Many clusters per class put each class on both sides of every hyperplane (a linear model
    scores about 0.65); the irrelevant columns dilute distances; label noise caps every model's
    AUC below 1.
    """
    from sklearn.datasets import make_classification

    X, y = make_classification(
        n_samples=1000,
        n_features=20,
        n_informative=5,
        n_redundant=0,
        n_repeated=0,
        n_classes=2,
        n_clusters_per_class=8,
        class_sep=2.0,
        flip_y=0.1,
        shuffle=False,  # informative columns first: the names say which is which
        random_state=4,
    )
    return X, y, _names(5, 15)


#: The loans table's columns: numeric, then categorical (integer codes), then irrelevant ones.
_LOANS_COLUMNS = (
    "income",
    "debt",
    "age",
    "credit_years",
    "utilization",
    "open_accounts",
    "region",
    "employment",
    "purpose",
    "noise0",
    "noise1",
    "noise2",
)


def loans() -> Generated:
    """A Kaggle-like loan-default table: 2,000 rows of mixed numeric and categorical columns
    with missing values, where feature engineering helps a forest.

    The default risk is a logistic function of the **debt-to-income ratio** (a ratio of two
    heavy-tailed columns: axis-aligned trees approximate it with many splits, one engineered
    column ``debt / income`` states it), a per-region effect (``region``: 12 integer codes, as
    a Kaggle import encodes a nominal column), the employment status (4 codes), young borrowers
    with a high card utilisation (an interaction), and the credit history's length. ``purpose``
    (6 codes) and three ``noise`` columns are irrelevant. ``credit_years`` is missing for 18 %
    of rows (more often for the young), ``utilization`` for 9 % and ``employment`` for 5 %, as
    NaN; a program must impute or use a model that accepts NaN. 4 % of labels are flipped.
    """
    rng = np.random.RandomState(5)
    n = 2000
    income = np.exp(rng.normal(10.6, 0.55, n))
    debt = income * np.exp(rng.normal(-1.0, 0.9, n))
    age = rng.randint(19, 76, n).astype(np.float64)
    credit_years = np.clip(age - 18 - rng.exponential(4.0, n), 0, None)
    utilization = rng.beta(2.0, 3.0, n)
    open_accounts = rng.poisson(4.0, n).astype(np.float64)
    region = rng.randint(0, 12, n)
    employment = rng.choice(4, n, p=[0.55, 0.2, 0.15, 0.1])
    purpose = rng.randint(0, 6, n).astype(np.float64)
    region_effect = rng.normal(0.0, 0.9, 12)
    employment_effect = np.array([-0.4, 0.3, 0.9, 0.2])
    ratio = debt / income
    logit = (
        10.0 * (ratio - 0.45)  # the engineered feature
        + region_effect[region]
        + employment_effect[employment]
        + 1.6 * ((age < 30) & (utilization > 0.55))
        - 0.05 * credit_years
        + 0.05 * (open_accounts - 4.0)
    )
    y = (rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int64)
    flip = rng.uniform(size=n) < 0.04
    y = np.where(flip, 1 - y, y)
    X = np.column_stack(
        [
            income,
            debt,
            age,
            credit_years,
            utilization,
            open_accounts,
            region.astype(np.float64),
            employment.astype(np.float64),
            purpose,
            rng.standard_normal((n, 3)),
        ]
    )
    missing_credit = rng.uniform(size=n) < np.where(age < 30, 0.35, 0.13)
    X[missing_credit, 3] = np.nan
    X[rng.uniform(size=n) < 0.09, 4] = np.nan
    X[rng.uniform(size=n) < 0.05, 7] = np.nan
    return X, y, _LOANS_COLUMNS


#: Generators by name (``GeneratedSource.generator``).
GENERATORS: dict[str, Callable[[], Generated]] = {
    "circles": circles,
    "xor": xor,
    "moons": moons,
    "noisy": noisy,
    "loans": loans,
}


@dataclass(frozen=True)
class GeneratedSource:
    """A table drawn by one of :data:`GENERATORS` (offline, never cached, deterministic)."""

    generator: str
    label: str = "generated"
    cached: bool = False

    def draw(self) -> Generated:
        """``(X, y, feature_names)`` of the generator (the same bytes on every call)."""
        try:
            make = GENERATORS[self.generator]
        except KeyError:
            raise KeyError(
                f"unknown generator {self.generator!r}; known: {', '.join(GENERATORS)}"
            ) from None
        X, y, names = make()
        return np.ascontiguousarray(X, dtype=np.float64), np.asarray(y, dtype=np.int64), names

    def fetch(self, workdir: Path | None = None) -> pd.DataFrame:
        """The drawn table as a frame: the features, then a ``target`` column."""
        import pandas as pd

        X, y, names = self.draw()
        frame = pd.DataFrame(X, columns=list(names))
        frame["target"] = y
        return frame

    def describe(self) -> str:
        return f"generated:{self.generator}"
