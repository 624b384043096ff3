"""An :class:`~agentbench_poad.rl.policy.LMPolicy` as an agent of the evaluation protocol."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from agentbench_poad.rl.policy import LMPolicy


class LLMAgent:
    """The agent protocol (``act(observation, available_actions) -> str``) over an LMPolicy.

    Args:
        policy: The policy that chooses.
        greedy: Argmax actions (evaluation) instead of sampling.
        seed: Seed of the agent's own ``torch.Generator`` when sampling; ``reset(seed=...)``
            re-seeds it.
    """

    def __init__(self, policy: LMPolicy, *, greedy: bool = True, seed: int | None = None) -> None:
        self.policy = policy
        self.greedy = greedy
        self.generator = torch.Generator()
        if seed is not None:
            self.generator.manual_seed(seed)

    def reset(self, seed: int | None = None) -> None:
        """Re-seed the sampling generator (a no-op for ``seed=None``)."""
        if seed is not None:
            self.generator.manual_seed(seed)

    def act(self, observation: str, available_actions: Sequence[str] | None) -> str:
        """One action for one observation."""
        return self.act_batch([observation], [available_actions])[0]

    def act_batch(
        self, observations: Sequence[str], available_actions: Sequence[Sequence[str] | None]
    ) -> list[str]:
        """One action per observation."""
        samples = self.policy.act(
            list(observations),
            list(available_actions),
            generator=self.generator,
            greedy=self.greedy,
        )
        return [s.text for s in samples]


__all__ = ["LLMAgent"]
