"""Your own RL algorithm, trained, tuned and compared like POAD: a worked example.

POAD credits every token of an action separately: the Bellman backup with action decomposition
(BAD, paper Section 4.2) gives each token its own advantage, ``V^{j+1} − V^j`` inside the action
plus GAE's λ-weighted tail. ``MyPOAD`` changes that one idea and keeps everything else: it
shares an action's credit among its tokens. Each token's advantage becomes a mix of its own BAD
advantage and the mean BAD advantage over the action's tokens::

    A'_j = (1 − credit_share) · A_j + credit_share · mean_k A_k

``credit_share = 0`` is POAD exactly; ``credit_share = 1`` gives every token of an action the
same advantage (the token-level critic still learns the BAD targets: only the policy's credit
changes). The value targets (``buffer.returns``) are POAD's.

Train it like a built-in algorithm::

    agentbench-poad train --agent examples/my_algorithm.py:MyPOAD \\
        --env CaseStudy-Microwave-v0 --model smollm2-135m --total-steps 256 --out runs/my \\
        --set credit_share=0.5

or list it in a study spec beside POAD (``agents = ["poad", "examples/my_algorithm.py:MyPOAD"]``)
to give it the same tuning search, seeds, budget and report row (docs/agents.md, "Write your own
algorithm").

``CentredPOAD`` shows an algorithm with state of its own: a moving reward baseline (reward
centring) that lives across updates, saved with every checkpoint by extending ``state_dict`` and
``load_state_dict`` so that ``--resume`` continues exactly (docs/agents.md, "Saving your
algorithm's own state").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from agentbench_poad.baselines.poad import POAD, POADConfig
from agentbench_poad.rl.advantages import token_level_gae
from agentbench_poad.rl.buffer import RolloutBuffer

#: Recorded with every run and record of the algorithm (``training.algorithm.package_version``).
__version__ = "0.1.0"


@dataclass
class MyPOADConfig(POADConfig):
    """POAD's hyper-parameters and presets, plus how much credit an action's tokens share."""

    credit_share: float = 1.0
    """0: POAD's per-token BAD credit; 1: every token of an action gets the action's mean."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.credit_share <= 1.0:
            raise ValueError(f"credit_share must be in [0, 1], got {self.credit_share!r}")


class MyPOAD(POAD):
    """POAD whose tokens share their action's credit (everything else is POAD's)."""

    name = "mypoad"
    config_class = MyPOADConfig

    def compute_advantages(self, buffer: RolloutBuffer) -> None:
        super().compute_advantages(buffer)  # BAD: buffer.advantages and .returns, (T, N, L)
        _, mask = buffer.value_grid()  # True at each action's tokens
        advantages = np.asarray(buffer.advantages, dtype=np.float64)
        tokens = np.maximum(mask.sum(axis=-1, keepdims=True), 1)
        mean = np.where(mask, advantages, 0.0).sum(axis=-1, keepdims=True) / tokens
        share = self.config.credit_share
        buffer.advantages = np.where(mask, (1.0 - share) * advantages + share * mean, 0.0)


@dataclass
class CentredPOADConfig(POADConfig):
    """POAD's hyper-parameters and presets, plus how fast the reward baseline moves."""

    baseline_rate: float = 0.5
    """Step of the moving reward baseline toward each rollout's mean reward, in (0, 1]."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < self.baseline_rate <= 1.0:
            raise ValueError(f"baseline_rate must be in (0, 1], got {self.baseline_rate!r}")


class CentredPOAD(POAD):
    """POAD on centred rewards: each reward minus a moving baseline of the rewards seen so far.

    The baseline is the algorithm's own state: it is not a weight of the policy or the critic,
    so :meth:`state_dict` and :meth:`load_state_dict` add it to what the trainer checkpoints.
    """

    name = "centredpoad"
    config_class = CentredPOADConfig

    def __init__(self, config: CentredPOADConfig, policy: Any, *, seed: int = 0) -> None:
        super().__init__(config, policy, seed=seed)
        self.reward_baseline = 0.0

    def compute_advantages(self, buffer: RolloutBuffer) -> None:
        rewards = buffer.rewards()  # (T, N)
        values, mask = buffer.value_grid()
        # POAD's BAD backup (POAD.compute_advantages) on the centred rewards.
        buffer.advantages, buffer.returns = token_level_gae(
            rewards - self.reward_baseline,
            values,
            mask,
            buffer.dones(),
            buffer.next_values,
            gamma=self.config.gamma,
            lam=self.config.lam,
            intra_gamma=self.intra_gamma(),
            truncated=buffer.truncations(),
            final_values=buffer.final_values(),
        )
        step = self.config.baseline_rate
        self.reward_baseline += step * (float(rewards.mean()) - self.reward_baseline)

    def state_dict(self) -> dict[str, Any]:
        """POAD's state (critic, optimisers) plus the reward baseline."""
        return {**super().state_dict(), "reward_baseline": self.reward_baseline}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        super().load_state_dict(state)
        self.reward_baseline = float(state["reward_baseline"])
