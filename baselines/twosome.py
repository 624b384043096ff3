"""TWOSOME: action-level PPO over the offered actions (Tan et al., 2024), the paper's baseline.

The policy is the categorical over the environment's offered actions whose logits are the LM's
word-normalised action log-likelihoods (docs/reference.md#action-scoring). The critic values the observation
only (one value per step, read at the prompt's last real token -- deviation docs/reference.md#deviations, the reference
read a pad position). Credit assignment is ordinary action-level GAE, and PPO's ratio is the
ratio of that categorical, so the update optimises exactly the distribution the actions were
sampled from.

TWOSOME needs the list of offered actions: it cannot run in open-action environments
(DataSciCoding), where :meth:`check_environment` raises.

This is the paper's re-implementation (ADRL's "APPO" trainer), with our deviations: advantages
are normalised per minibatch (the reference did it per accumulation chunk, so accumulation
changed the update), no learning-rate annealing, and the KL guard skips one minibatch's policy
step (TWOSOME's own code stopped the iteration) on the exact KL of the candidate categorical, the
guard every agent shares (docs/agents.md; TWOSOME's code used the k3 estimate on the chosen
action).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from agentbench_poad.baselines.poad import _COMMON, _GAMMA
from agentbench_poad.rl.advantages import action_level_gae
from agentbench_poad.rl.buffer import RolloutBuffer, StepRecord
from agentbench_poad.rl.config import PPOConfig
from agentbench_poad.rl.critic import ActionCritic
from agentbench_poad.rl.ppo import PPOAgent, action_level_evaluation
from agentbench_poad.rl.ppo_loop import PolicyEvaluation, PPOBatch

__all__ = ["TWOSOME", "TWOSOMEConfig"]


@dataclass
class TWOSOMEConfig(PPOConfig):
    """TWOSOME hyper-parameters (every field documented on :class:`PPOConfig`).

    Presets (``TWOSOMEConfig.preset(family)``): Appendix J tables 12 (Overcooked) and 15
    (VirtualHome); VirtualHome also takes the scripts' 8 accumulation chunks (memory only).
    """

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "overcooked": {
            **_COMMON,
            "lr": 5e-7,
            "critic_lr": 1e-5,
            "gamma": _GAMMA["overcooked"],
            "entropy_coef": 0.01,
            "epochs": 1,
            "num_minibatches": 4,
        },
        "virtualhome": {
            **_COMMON,
            "lr": 1e-6,
            "critic_lr": 5e-5,
            "gamma": _GAMMA["virtualhome"],
            "entropy_coef": 0.01,
            "epochs": 1,
            "num_minibatches": 4,
            "grad_accum_steps": 8,
        },
    }
    UNSUPPORTED: ClassVar[dict[str, str]] = {
        "datascicoding": "TWOSOME scores a list of offered actions and DataSciCoding is an "
        "open-action environment; train POAD or NTPO there",
    }


class TWOSOME(PPOAgent):
    """Action-level critic, action-level GAE, PPO over the candidate categorical."""

    name = "twosome"
    config_class = TWOSOMEConfig
    supports_open_actions = False

    # -- critic ---------------------------------------------------------------------------------
    def make_critic(self, generator: torch.Generator) -> torch.nn.Module:
        return ActionCritic(
            self.policy.hidden_size, self.config.critic_hidden_sizes, generator=generator
        )

    # -- rollout --------------------------------------------------------------------------------
    @torch.no_grad()
    def collect(
        self,
        prompts: Sequence[str],
        available_actions: Sequence[Sequence[str] | None],
        generator: torch.Generator,
    ) -> list[StepRecord]:
        """Sample from the categorical over the offered actions; one value per observation."""
        if any(actions is None for actions in available_actions):
            self.check_environment("this environment", open_actions=True)
        samples = self.policy.act(list(prompts), list(available_actions), generator=generator)
        # (B, 1, H), read from the scoring tree act() just used (LMPolicy.critic_features)
        features, _ = self.policy.critic_features(
            list(prompts), available_actions=list(available_actions)
        )
        values = self.critic(features)  # (B,)
        return [
            StepRecord(
                prompt=prompts[i],
                available_actions=list(available_actions[i]),
                sample=sample,
                values=[float(values[i])],
                features=features[i].clone(),
            )
            for i, sample in enumerate(samples)
        ]

    @torch.no_grad()
    def bootstrap_values(self, prompts: Sequence[str]) -> np.ndarray:
        features, _ = self.policy.critic_features(list(prompts))
        return self.critic(features).double().cpu().numpy()

    # -- credit assignment ----------------------------------------------------------------------
    def compute_advantages(self, buffer: RolloutBuffer) -> None:
        """Action-level GAE: one advantage per action; a time-limit truncation bootstraps from
        the value of the observation the episode was cut at (``buffer.final_values()``)."""
        values, _ = buffer.value_grid()
        buffer.advantages, buffer.returns = action_level_gae(
            buffer.rewards(),
            values[..., 0],
            buffer.dones(),
            buffer.next_values,
            gamma=self.config.gamma,
            lam=self.config.lam,
            truncated=buffer.truncations(),
            final_values=buffer.final_values(),
        )

    # -- loss granularity: one PPO term per action ----------------------------------------------
    def make_batch(self, buffer: RolloutBuffer) -> PPOBatch:
        values, _ = buffer.value_grid()
        size = buffer.num_samples

        def column(x: Any) -> torch.Tensor:
            return torch.as_tensor(
                np.asarray(x, dtype=np.float64).reshape(size, 1), dtype=torch.float32
            )

        return PPOBatch(
            old_log_probs=column(buffer.flat_samples("log_prob")),
            advantages=column(buffer.advantages),
            returns=column(buffer.returns),
            old_values=column(values[..., 0]),
            mask=torch.ones(size, 1, dtype=torch.bool),
            extras={
                "prompts": buffer.flat("prompt"),
                "available_actions": buffer.flat("available_actions"),
                "index": buffer.flat_samples("index"),
                "features": buffer.flat("features"),
            },
        )

    def evaluate_policy(self, batch: PPOBatch) -> PolicyEvaluation:
        """Log-prob of the chosen action and the entropy of the candidate categorical."""
        # the categoricals ride along for the shared KL guard (PPOAgent.guard_kl)
        return action_level_evaluation(self.policy, batch)

    def evaluate_values(self, batch: PPOBatch) -> torch.Tensor:
        features = torch.stack(list(batch.extras["features"])).to(self.policy.device)
        return self.critic(features)[:, None]
