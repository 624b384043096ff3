"""An :class:`~agentbench_poad.rl.policy.LMPolicy` as an agent of the evaluation protocol.

Typed against :class:`ActingPolicy`, the one method it calls, so this module never imports the
policy (which imports it for :meth:`~agentbench_poad.rl.policy.LMPolicy.as_agent`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch


class _Sample(Protocol):
    text: str


class ActingPolicy(Protocol):
    """What :class:`LLMAgent` needs of a policy: ``LMPolicy.act``'s signature."""

    def act(
        self,
        prompts: Sequence[str],
        available_actions: Sequence[Sequence[str] | None],
        *,
        generator: torch.Generator | None = None,
        greedy: bool = False,
    ) -> Sequence[_Sample]: ...


class LLMAgent:
    """The agent protocol (``act(observation, available_actions) -> str``) over a policy.

    Args:
        policy: The policy that chooses.
        greedy: Argmax actions (evaluation) instead of sampling.
        seed: Seed of the agent's own ``torch.Generator`` when sampling; ``reset(seed=...)``
            re-seeds it.
    """

    def __init__(
        self, policy: ActingPolicy, *, greedy: bool = True, seed: int | None = None
    ) -> None:
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


__all__ = ["ActingPolicy", "LLMAgent"]
