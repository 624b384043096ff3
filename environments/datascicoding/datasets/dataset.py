"""The pruned dataset object and the errors of the dataset layer."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from agentbench_poad.errors import AgentBenchError


class DatasetUnavailable(AgentBenchError, RuntimeError):
    """A dataset is neither cached nor fetchable; the message names the command that fixes it.

    ``args[0]`` is the message; ``args[1]``, when present, the bare reason (for re-wording).
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class CacheCorrupt(AgentBenchError, RuntimeError):
    """A cached dataset file does not match its manifest (or cannot be read)."""


@dataclass(frozen=True, eq=False)
class Dataset:
    """A pruned, purely numeric classification dataset.

    Attributes:
        name: the table name (``"airlines"``).
        description: the name used in the prompt (``"Airlines"``).
        X: features, ``float64``, shape ``(rows, features)``, no NaN.
        y: labels ``0..n_classes-1``, ``int64``, shape ``(rows,)``.
        feature_names: one name per column of ``X``.
        source: where it came from, e.g. ``"openml:1169"`` or ``"csv:/path/file.csv"``.
    """

    name: str
    description: str
    X: np.ndarray = field(repr=False)
    y: np.ndarray = field(repr=False)
    feature_names: tuple[str, ...] = field(repr=False)
    source: str

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.X.shape[0]), int(self.X.shape[1]))

    @property
    def n_classes(self) -> int:
        return int(self.y.max()) + 1 if self.y.size else 0

    @property
    def class_counts(self) -> list[int]:
        return np.bincount(self.y, minlength=self.n_classes).tolist()

    def digest(self) -> str:
        """sha256 of the content a task scores on: the name, feature names, and ``X`` and ``y``
        (dtype, shape, little-endian bytes). Independent of the cache file's bytes (an ``.npz``
        written twice differs in its zip timestamps), so a record states it and ``leaderboard
        verify`` compares it with the dataset at hand (docs/leaderboard.md)."""
        import hashlib

        digest = hashlib.sha256(b"agentbench-poad/dataset-v1\0")
        digest.update(self.name.encode() + b"\0")
        digest.update("\0".join(self.feature_names).encode() + b"\0")
        for array, dtype in ((self.X, "<f8"), (self.y, "<i8")):
            data = np.ascontiguousarray(array, dtype=dtype)
            digest.update(f"{dtype}{data.shape}\0".encode())
            digest.update(data.tobytes())
        return digest.hexdigest()
