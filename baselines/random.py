"""A uniformly random agent: the lower anchor of the leaderboard's normalised scores.

In open-action environments (DataSciCoding) "random" has two readings: :class:`RandomAgent`'s
default empty body, a failed attempt that scores 0, and :func:`make_random_program_agent`'s
chance-level program, a classifier that carries no information (ROC AUC exactly 0.5), the
anchor the board's below-random rule needs where a score is an AUC.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class RandomAgent:
    """Picks one of the available actions uniformly at random.

    In open-action environments (``available_actions is None``) it answers ``fallback_action``
    (by default an empty body, which DataSciCoding scores as a failed attempt).

    Args:
        seed: seed of the agent's own generator; ``reset(seed=...)`` reseeds it.
        fallback_action: the action for open-action environments.
    """

    name = "random"

    def __init__(self, seed: int | None = 0, fallback_action: str = "") -> None:
        self.fallback_action = fallback_action
        self._rng = np.random.default_rng(seed)

    def reset(self, seed: int | None = None) -> None:
        if seed is not None:
            self._rng = np.random.default_rng(seed)

    def act(self, observation: str, available_actions: Sequence[str] | None) -> str:
        if not available_actions:
            return self.fallback_action
        return available_actions[int(self._rng.integers(len(available_actions)))]


def make_random_agent(env=None, seed: int | None = 0) -> RandomAgent:  # noqa: ANN001
    """Factory with the same shape as ``make_oracle`` (the env is not needed)."""
    return RandomAgent(seed=seed)


#: A DataSciCoding body whose classifier predicts the same probability for every row: it runs
#: on any table (NaN included) and ranks nothing, so its ROC AUC is exactly 0.5 on every split.
CHANCE_PROGRAM = (
    "from sklearn.dummy import DummyClassifier\n"
    'model = DummyClassifier(strategy="uniform").fit(x_train, y_train)'
)


def make_random_program_agent(env=None, seed: int | None = 0) -> RandomAgent:  # noqa: ANN001
    """The random row of an open-action (DataSciCoding) task: :data:`CHANCE_PROGRAM` as every
    answer, so the board's score (the final AUC) is chance, 0.5; with offered actions it picks
    uniformly as :class:`RandomAgent` does."""
    return RandomAgent(seed=seed, fallback_action=CHANCE_PROGRAM)
