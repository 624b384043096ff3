"""GRPO for multi-turn episodes: a critic-free, group-relative episode advantage.

GRPO (Shao et al., 2024, "DeepSeekMath", §4.1.2, outcome supervision) samples a group of G
outputs for one prompt, normalises each output's reward by the group's mean and standard deviation
and gives every token of the output that advantage; there is no value network. For a multi-turn
agent the "output" is a whole episode, and the prompt is the episode's start: G episodes reset
with the same seed form a group (rl/group_rollout.py). Here:

* **Return** of an episode: the undiscounted sum of its rewards (the episode's outcome, as
  GiGPO's episode-level advantage uses it, arXiv 2505.10978 Eq. 3). A time-limit truncation ends
  the episode like termination: with no critic there is nothing to bootstrap from.
* **Advantage**: ``(R_i − mean_g) / (std_g + 1e-6)`` over the episodes of its group, with the
  sample std (``advantage_normalization = "mean_std"``, GRPO); ``"mean"`` only subtracts the
  mean (GiGPO's ``F_norm = 1``). A group whose returns are all equal gives 0 to all its steps.
  Every step of the episode gets the episode's advantage (GRPO gives it to every token).
* **Loss granularity follows the action.** *Generated (open) actions* (DataSciCoding): the LM
  samples the action token by token, so the product of its token probabilities *is* the
  sampling distribution, and the loss is token-level clipped PPO over the action's tokens, as
  in the GRPO and GiGPO papers: every token of an action gets its step's (group-relative)
  advantage, and the masked mean runs over the minibatch's real tokens (the grid and the
  re-scoring are POAD's, rl/token_level.py). *Offered (restricted) actions*: an action is
  sampled from the categorical over the offered actions (word-normalised LM likelihoods, as
  TWOSOME does), which is not the product of its token probabilities (the candidates are
  renormalised), and a token-level ratio would optimise a distribution the agent never samples
  from; the ratio is that categorical's ratio for the chosen action, one clipped term per
  decision. Which of the two applies is read from the samples (``available_actions`` None or
  not; an update never mixes them). The KL guard is the one every agent shares: the KL of the
  candidate categorical, or the k3 estimate over the generated tokens.
* **No per-minibatch re-normalisation** (``normalize_advantages = False``, unlike the PPO
  agents): the advantages are already normalised within their groups, and re-centering a
  minibatch would give the steps of an all-equal group (advantage 0, no signal) a non-zero
  advantage.
* **No KL penalty to a reference model** (GRPO's ``β`` term): none of our agents has one; the
  shared KL guard (``target_kl``) and the ratio clip bound each update instead.

Everything else is PPOAgent's: the LM policy and its LoRA, the update loop, checkpoints, the
evaluation runner and the record format.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from agentbench_poad.baselines.poad import _COMMON, _GAMMA
from agentbench_poad.rl.advantages import GROUP_NORMALIZATIONS, group_relative_advantages
from agentbench_poad.rl.config import MINI_SUFFIX, PPOConfig
from agentbench_poad.rl.group_rollout import GroupBuffer, GroupStep, collect_groups
from agentbench_poad.rl.ppo import PPOAgent, action_level_evaluation
from agentbench_poad.rl.ppo_loop import PolicyEvaluation, PPOBatch
from agentbench_poad.rl.token_level import step_advantage_batch, token_level_evaluation

__all__ = ["GRPO", "GRPOConfig", "GroupConfig"]

#: The group agents' paper-scale presets: the PPO agents' shared Appendix J values where a field
#: exists (TWOSOME's, the other action-level agent: one epoch, four minibatches; DataSciCoding's
#: are POAD's own table 16, one epoch and four minibatches as well, with its 128-token actions),
#: with groups of G = 4 episodes and ``rollout_length`` >= the family's episode limit
#: (Overcooked's 30-step study tasks, VirtualHome's 50, DataSciCoding's 5 attempts) so that a
#: round of whole episodes fits in an update. DataSciCoding keeps POAD's 4 x 32 = 128 programs
#: per update (at least 6 rounds of one group of 4 episodes of at most 5 attempts).
_GROUP_PRESETS: dict[str, dict[str, Any]] = {
    "overcooked": {
        **_COMMON,
        "lr": 5e-7,
        "gamma": _GAMMA["overcooked"],
        "entropy_coef": 0.01,
        "epochs": 1,
        "num_minibatches": 4,
        "group_size": 4,
        "num_envs": 4,
        "rollout_length": 32,
    },
    "virtualhome": {
        **_COMMON,
        "lr": 1e-6,
        "gamma": _GAMMA["virtualhome"],
        "entropy_coef": 0.01,
        "epochs": 1,
        "num_minibatches": 4,
        "group_size": 4,
        "num_envs": 4,
        "rollout_length": 50,
    },
    "datascicoding": {
        **_COMMON,
        "lr": 1e-6,
        "gamma": _GAMMA["datascicoding"],
        "entropy_coef": 0.01,
        "epochs": 1,
        "num_minibatches": 4,
        "max_new_tokens": 128,
        "group_size": 4,
        "num_envs": 4,
        "rollout_length": 32,
    },
}

#: On top of the shared CPU preset (rl/config.py MINI_PRESETS: lr, target_kl, epochs,
#: minibatches, entropy, LoRA layers and evaluation as POAD's): only the rollout shape. Overcooked
#: keeps POAD's 128 env steps per update (4 copies x 32 instead of 8 x 16: one group of 4 whole
#: episodes of at most 30 steps fits); VirtualHome takes 4 x 50 = 200 (its episodes run to 50);
#: DataSciCoding 4 x 5 = 20 programs (POAD's CPU preset generates 16: one group of 4 episodes of
#: at most 5 attempts is the smallest whole round).
_GROUP_MINI: dict[str, dict[str, Any]] = {
    "overcooked": {"group_size": 4, "num_envs": 4, "rollout_length": 32},
    "virtualhome": {"group_size": 4, "num_envs": 4, "rollout_length": 50},
    "datascicoding": {"group_size": 4, "num_envs": 4, "rollout_length": 5},
}


@dataclass
class GroupConfig(PPOConfig):
    """Hyper-parameters of the group agents (GRPO, GiGPO); the rest as :class:`PPOConfig`.

    ``num_envs`` is the number of environment copies: ``num_envs / group_size`` groups play side
    by side. ``batch_size = num_envs × rollout_length`` is the env steps an update plays at least
    (whole episodes: rl/group_rollout.py). The critic fields (``critic_lr``, ``value_coef``,
    ``critic_hidden_sizes``, ``lam``) are unused.
    """

    group_size: int = 4
    """G, the episodes of one group (reset with one seed); at least 2."""
    advantage_normalization: str = "mean_std"
    """How returns are compared within a group: "mean_std" ((R − mean) / (std + 1e-6), GRPO)
    or "mean" (R − mean, GiGPO's F_norm = 1)."""
    normalize_advantages: bool = False
    """Re-normalise advantages per minibatch: off, the group already normalised them (and
    re-centering would give all-equal groups a non-zero advantage)."""

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = _GROUP_PRESETS

    def __post_init__(self) -> None:
        if not isinstance(self.group_size, int) or self.group_size < 2:
            raise ValueError(
                f"group_size must be an int >= 2, got {self.group_size!r}: a group of one "
                "episode has no baseline (its advantage would always be 0)"
            )
        if self.advantage_normalization not in GROUP_NORMALIZATIONS:
            raise ValueError(
                f"advantage_normalization must be one of {GROUP_NORMALIZATIONS}, got "
                f"{self.advantage_normalization!r}"
            )
        super().__post_init__()
        if self.num_envs % self.group_size:
            raise ValueError(
                f"num_envs={self.num_envs} is not a multiple of group_size={self.group_size}: "
                "the environment copies play whole groups side by side"
            )

    @classmethod
    def preset(cls, name: str | None, **overrides: Any) -> PPOConfig:
        """As :meth:`PPOConfig.preset`; a ``-mini`` preset also takes the group rollout shape."""
        if name is not None and name.endswith(MINI_SUFFIX):
            overrides = {**_GROUP_MINI.get(name[: -len(MINI_SUFFIX)], {}), **overrides}
        return super().preset(name, **overrides)


@dataclass
class GRPOConfig(GroupConfig):
    """GRPO hyper-parameters (:class:`GroupConfig`)."""


class GRPO(PPOAgent):
    """Group-relative episode advantage, no critic; PPO per offered action or per generated token."""

    name = "grpo"
    config_class = GRPOConfig
    supports_open_actions = True

    def make_critic(self, generator: torch.Generator) -> None:
        """No critic: the group is the baseline."""
        return None

    # -- rollout: whole groups of episodes ------------------------------------------------------
    def collect_groups(
        self,
        slots: Sequence[Any],
        generator: torch.Generator,
        state: Any,
        seed: int,
        budget: int | None = None,
    ) -> tuple[GroupBuffer, list[tuple[float, bool | None]]]:
        """The trainer's rollout for this agent: rl/group_rollout.py."""
        return collect_groups(self, slots, generator, state, seed, budget)

    @torch.no_grad()
    def collect(
        self,
        prompts: Sequence[str],
        available_actions: Sequence[Sequence[str] | None],
        generator: torch.Generator,
    ) -> list[GroupStep]:
        """Sample from the categorical over the offered actions, or generate (open actions)."""
        samples = self.policy.act(list(prompts), list(available_actions), generator=generator)
        return [
            GroupStep(prompt=p, available_actions=None if a is None else list(a), sample=s)
            for p, a, s in zip(prompts, available_actions, samples)
        ]

    def bootstrap_values(self, prompts: Sequence[str]) -> None:
        """Nothing to bootstrap: every episode of a group is whole."""
        return None

    # -- credit assignment ----------------------------------------------------------------------
    def episode_advantages(self, buffer: GroupBuffer) -> np.ndarray:
        """``(num_samples,)``: each episode's group-relative return, on each of its steps."""
        buffer.check_groups()
        per_episode = group_relative_advantages(
            buffer.episode_groups(),
            [e.episode_return for e in buffer.episodes],
            normalization=self.config.advantage_normalization,
        )
        return np.repeat(per_episode, [len(e.steps) for e in buffer.episodes])

    def compute_advantages(self, buffer: GroupBuffer) -> None:
        buffer.advantages = self.episode_advantages(buffer)

    # -- loss granularity: per generated token, or per offered action --------------------------
    def make_batch(self, buffer: GroupBuffer) -> PPOBatch:
        """Token level for generated actions, action level for offered ones (see the module)."""
        if buffer.open_actions():
            return self.token_level_batch(buffer)
        return self.action_level_batch(buffer)

    def token_level_batch(self, buffer: GroupBuffer) -> PPOBatch:
        """One column per generated token; each token carries its step's advantage
        (:func:`~agentbench_poad.rl.token_level.step_advantage_batch`)."""
        return step_advantage_batch(buffer)

    def action_level_batch(self, buffer: GroupBuffer) -> PPOBatch:
        """One column per decision: the chosen action's log-prob in the offered categorical."""
        size = buffer.num_samples

        def column(x: Any) -> torch.Tensor:
            return torch.as_tensor(
                np.asarray(x, dtype=np.float64).reshape(size, 1), dtype=torch.float32
            )

        zeros = torch.zeros(size, 1)
        return PPOBatch(
            old_log_probs=column(buffer.flat_samples("log_prob")),
            advantages=column(buffer.advantages),
            returns=zeros,
            old_values=zeros,
            mask=torch.ones(size, 1, dtype=torch.bool),
            extras={
                "prompts": buffer.flat("prompt"),
                "available_actions": buffer.flat("available_actions"),
                "index": buffer.flat_samples("index"),
            },
        )

    def evaluate_policy(self, batch: PPOBatch) -> PolicyEvaluation:
        """The generated tokens' log-probs and full-vocabulary entropies, or the chosen offered
        action's log-prob and the candidate categorical's entropy."""
        if "token_ids" in batch.extras:
            return token_level_evaluation(self.policy, batch)
        # the categoricals ride along for the shared KL guard (PPOAgent.guard_kl)
        return action_level_evaluation(self.policy, batch)
