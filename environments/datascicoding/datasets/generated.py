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


#: Generators by name (``GeneratedSource.generator``).
GENERATORS: dict[str, Callable[[], Generated]] = {
    "circles": circles,
    "xor": xor,
    "moons": moons,
    "noisy": noisy,
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
