"""GiGPO: Group-in-Group Policy Optimization (Feng et al., 2025, arXiv 2505.10978).

GRPO's episode-level advantage (baselines/grpo.py) gives every step of an episode the same
credit. GiGPO adds a step-level advantage without a critic: within a group of G episodes reset
with one seed, the same environment state recurs across (and within) the episodes, and the
actions taken in such an *anchor state* can be compared with each other. Read from the paper's
method section (§4; equation numbers as the authors' released code, verl-agent
``gigpo/core_gigpo.py``, cites them) and written here without its code:

* **Episode-level advantage** (Eq. 3): ``A^E(τ_i) = (R(τ_i) − mean_j R(τ_j)) / F_norm`` over the
  group's episodes, ``R`` the episode's total reward: exactly GRPO's advantage (we reuse it).
  ``F_norm`` is the group's std (``advantage_normalization = "mean_std"``, the default, as the
  authors' ALFWorld and WebShop scripts run it) or 1 (``"mean"``, their ``mean_norm``).
  The released code by default computes this mean over all *steps* of the group's episodes
  (each episode weighted by its length); we follow the paper's definition, over episodes.
* **Anchor-state groups** (Eq. 6): the steps of one episode group taken in the same state.
  Our key is the exact observation text together with the offered actions (the paper matches
  identical states; its code compares observation text); there is no similarity threshold.
  Overcooked tasks have a few dozen distinct observations, so anchors recur constantly.
* **Discounted step return** (Eq. 5): ``R_t = Σ_{k ≥ t} γ^{k−t} r_k`` to the episode's end, with
  the run's ``gamma`` (the paper uses γ = 0.95; our presets take the env family's protocol
  discount, and the CPU preset's 0.9 for Overcooked, as for every agent). A truncated episode's
  sum stops at the time limit (no critic to bootstrap with).
* **Step-level advantage** (Eq. 7): ``A^S = (R_t − mean_{anchor group} R) / F_norm``, with the
  same ``F_norm`` choice. An anchor group of size 1 (a state seen once in the group) gives
  ``A^S = 0``: the step keeps its episode advantage only (the mean of one return is itself; the
  authors' code sets its std to 1).
* **Combination** (Eq. 8): ``A = A^E + ω A^S`` with ``ω = step_advantage_weight = 1`` (the
  paper's setting for all its experiments).

**Open actions (DataSciCoding): the anchors apply, unchanged.** The key is the exact observation
(the offered actions are None), so nothing about it is specific to a list of actions. Every episode
of a group starts from the same prompt, so the first step's anchor group is the whole group: its
``A^S`` repeats the episodes' comparison on their discounted returns from the start (with
``"mean_std"`` close to ``A^E``), so the first attempt gets about twice its episode's credit and
the later attempts ``A^E`` only. A later observation holds the previous code and its error text, so
it anchors only with steps of the group that submitted the very same code (e.g. the same empty or
truncated action, a common failure) and got the same error; most later steps are anchor groups of
one and keep their episode advantage.

The loss is GRPO's: token-level PPO over a generated action's tokens, action-level PPO over the
offered categorical (baselines/grpo.py says why); the combined advantage multiplies the ratio of
the chosen action, or of each of its tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentbench_poad.baselines.grpo import GRPO, GroupConfig
from agentbench_poad.rl.advantages import (
    anchor_state_groups,
    discounted_step_returns,
    group_relative_advantages,
)
from agentbench_poad.rl.group_rollout import GroupBuffer

__all__ = ["GiGPO", "GiGPOConfig"]


@dataclass
class GiGPOConfig(GroupConfig):
    """GiGPO hyper-parameters (:class:`~agentbench_poad.baselines.grpo.GroupConfig`)."""

    step_advantage_weight: float = 1.0
    """ω of ``A = A^E + ω A^S`` (the paper's Eq. 8; 1 in all its experiments); 0 is GRPO."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.step_advantage_weight >= 0:
            raise ValueError(
                f"step_advantage_weight must be >= 0, got {self.step_advantage_weight!r}"
            )


class GiGPO(GRPO):
    """GRPO's episode advantage plus the anchor-state step advantage."""

    name = "gigpo"
    config_class = GiGPOConfig

    def step_advantages(self, buffer: GroupBuffer) -> np.ndarray:
        """``(num_samples,)``: each step's discounted return relative to its anchor-state group."""
        rewards, mask = buffer.padded_rewards()
        returns = discounted_step_returns(rewards, mask, self.config.gamma)[mask]  # row-major
        groups = anchor_state_groups(
            buffer.step_groups(), [step.state_key() for step in buffer.steps()]
        )
        return group_relative_advantages(
            groups, returns, normalization=self.config.advantage_normalization
        )

    def compute_advantages(self, buffer: GroupBuffer) -> None:
        episode, step = self.episode_advantages(buffer), self.step_advantages(buffer)
        buffer.advantages = episode + self.config.step_advantage_weight * step
