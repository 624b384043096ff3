"""The on-policy rollout buffer (REFERENCE_SPEC §4.1).

One buffer holds one update's rollout: ``T`` steps of ``N`` environments. Per step and env it
keeps the prompt, the offered actions, the chosen :class:`~agentbench_poad.rl.policy.ActionSample`
(its tokens and log-probs at sampling time), the critic's values for that step (one per action
token for token-level critics, one per action otherwise), the critic's frozen input features
(cached: the critic reads the frozen pre-trained model, so the features of a sample never change
during the update's epochs), the reward and how the episode ended with that step, if it did:
``terminated`` (a terminal state: nothing follows) and ``truncated`` (a time limit cut it: the
state had a future) are kept apart, as Gymnasium returns them.

Episodes are not cut at update boundaries: the trainer carries the last observation over to the
next rollout and the bootstrap value ``next_values`` covers the unfinished episodes. A truncated
step keeps the observation the time limit cut the episode at (``final_observation``); the trainer
stores its value in ``final_value``, and the step's target bootstraps from it (Gymnasium's
time-limit handling; :func:`~agentbench_poad.rl.advantages.action_level_gae`'s ``truncated``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["RolloutBuffer", "StepRecord"]


@dataclass
class StepRecord:
    """What one environment contributed at one rollout step."""

    prompt: str
    """The observation the action was chosen on."""
    available_actions: list[str] | None
    """The offered actions (None in open-action environments)."""
    sample: Any
    """The chosen :class:`~agentbench_poad.rl.policy.ActionSample`."""
    values: list[float]
    """Critic values at sampling time: one per action token (token-level) or one (action-level)."""
    features: Any = None
    """The critic's frozen input features for this sample (a tensor, one row per value)."""
    reward: float = 0.0
    """Environment reward of the step."""
    terminated: bool = False
    """The episode reached a terminal state with this step (nothing to bootstrap)."""
    truncated: bool = False
    """A time limit ended the episode with this step, in a state that is not terminal (False
    when the step also terminated)."""
    final_observation: str | None = None
    """The observation a truncated episode stopped at (the env was reset after it)."""
    final_value: float | None = None
    """The critic's value of ``final_observation`` (the value before its first token for
    token-level critics), set by the trainer after the rollout."""

    @property
    def done(self) -> bool:
        """Whether the episode ended with this step (the env was reset after it)."""
        return self.terminated or self.truncated

    @done.setter
    def done(self, value: bool) -> None:
        """Code that does not tell the two apart: an episode end without a time-limit
        bootstrap (``terminated``), as before the split."""
        self.terminated, self.truncated = bool(value), False


@dataclass
class RolloutBuffer:
    """``T × N`` step records plus the bootstrap values of the observations after the last step."""

    num_envs: int
    steps: list[list[StepRecord]] = field(default_factory=list)
    next_values: np.ndarray | None = None
    """``(N,)`` value of each env's observation after the last rollout step."""
    advantages: Any = None
    """Set by the algorithm's ``compute_advantages``: ``(T, N)`` or ``(T, N, L)``."""
    returns: Any = None
    """Set with ``advantages``: the value targets, same shape."""

    def add(self, records: Sequence[StepRecord]) -> None:
        """Append one step (one record per env, in env order)."""
        if len(records) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} records (one per env), got {len(records)}")
        self.steps.append(list(records))

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def num_samples(self) -> int:
        """``T × N`` action samples."""
        return len(self.steps) * self.num_envs

    def rewards(self) -> np.ndarray:
        """``(T, N)`` float64 rewards."""
        return np.array([[r.reward for r in step] for step in self.steps], dtype=np.float64)

    def dones(self) -> np.ndarray:
        """``(T, N)`` float64, 1.0 where the episode ended with the step (either way)."""
        return np.array([[float(r.done) for r in step] for step in self.steps], dtype=np.float64)

    def truncations(self) -> np.ndarray:
        """``(T, N)`` float64, 1.0 where a time limit (not a terminal state) ended the episode."""
        return np.array(
            [[float(r.truncated and not r.terminated) for r in step] for step in self.steps],
            dtype=np.float64,
        )

    def final_values(self) -> np.ndarray:
        """``(T, N)`` float64: the value of the final observation at truncated steps, else 0.

        Raises:
            ValueError: a truncated step whose ``final_value`` was never set.
        """
        out = np.zeros((len(self.steps), self.num_envs), dtype=np.float64)
        for t, step in enumerate(self.steps):
            for i, record in enumerate(step):
                if record.truncated and not record.terminated:
                    if record.final_value is None:
                        raise ValueError(
                            f"step {t} of env {i} was truncated but has no final_value; the "
                            "trainer sets it from agent.bootstrap_values(final observations)"
                        )
                    out[t, i] = record.final_value
        return out

    def truncated_records(self) -> list[StepRecord]:
        """The records whose episode a time limit cut (they need ``final_value``)."""
        return [r for step in self.steps for r in step if r.truncated and not r.terminated]

    def value_grid(self) -> tuple[np.ndarray, np.ndarray]:
        """``(values (T, N, L), mask (T, N, L))``: each record's values right-padded with 0."""
        width = max(len(r.values) for step in self.steps for r in step)
        values = np.zeros((len(self.steps), self.num_envs, width), dtype=np.float64)
        mask = np.zeros(values.shape, dtype=bool)
        for t, step in enumerate(self.steps):
            for i, record in enumerate(step):
                n = len(record.values)
                values[t, i, :n] = record.values
                mask[t, i, :n] = True
        return values, mask

    def flat(self, name: str) -> list[Any]:
        """One attribute of every record, flattened time-major (index ``t * N + i``)."""
        return [getattr(record, name) for step in self.steps for record in step]

    def flat_samples(self, name: str) -> list[Any]:
        """One attribute of every record's action sample, flattened time-major."""
        return [getattr(record.sample, name) for step in self.steps for record in step]
