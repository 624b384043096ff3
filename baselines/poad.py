"""POAD: Policy Optimization with Action Decomposition (the paper's method).

An action (a sentence of tokens) is decomposed into a sequence of token decisions. A token-level
critic gives the value before every action token, and the Bellman backup with action
decomposition (BAD) assigns credit to each token:

* inside an action there is **no discount and no reward**: the TD error of an inner token is
  ``V^{j+1} − V^j`` (``γ_intra = 1``), so every token is credited with the action's return;
* at the action's last token the environment reward and the discounted value of the next
  observation enter: ``r_t + γ m_{t+1} V_{t+1}^1 − V_t^n``;
* GAE's λ applies between tokens too (docs/reference.md#advantages).

With exact values, the token values BAD backs up are consistent with the action-level values
(tests/test_rl_advantages.py checks it on the case-study MDP). The policy loss is PPO's clipped
surrogate per token, over the log-probabilities of the action's tokens under the LM, averaged over
real tokens; the critic loss is the clipped value loss per token.

Deviations from the reference (docs/reference.md#deviations), all shared with NTPO: the critic's first
value is read at the prompt's last real token; advantages are normalised with the token mask;
LoRA trains in fp32; checkpoints hold adapter, critic and optimisers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from agentbench_poad.environments.datascicoding.registration import FAMILY as DATASCICODING
from agentbench_poad.environments.overcooked.registration import FAMILY as OVERCOOKED
from agentbench_poad.environments.virtualhome.registration import FAMILY as VIRTUALHOME
from agentbench_poad.rl.advantages import token_level_gae
from agentbench_poad.rl.buffer import RolloutBuffer, StepRecord
from agentbench_poad.rl.config import PPOConfig
from agentbench_poad.rl.critic import TokenCritic
from agentbench_poad.rl.ppo import PPOAgent
from agentbench_poad.rl.ppo_loop import PolicyEvaluation, PPOBatch, pad_rows
from agentbench_poad.rl.token_level import token_grid, token_level_evaluation

__all__ = ["POAD", "POADConfig"]

# Appendix J: shared by every table.
_COMMON = {
    "num_envs": 4,
    "rollout_length": 32,
    "max_grad_norm": 0.5,
    "clip": 0.2,
    "value_coef": 0.5,
    "target_kl": 0.02,
    "lam": 0.95,
}
#: γ per family: the env facts' protocol discount (EnvFamily.discount), which is the paper
#: preset's γ, so that the presets and the evaluation's discounted return share one number.
_GAMMA = {family.name: family.discount for family in (OVERCOOKED, VIRTUALHOME, DATASCICODING)}


@dataclass
class POADConfig(PPOConfig):
    """POAD hyper-parameters (every field documented on :class:`PPOConfig`).

    Presets (``POADConfig.preset(family)``): Appendix J tables 10 (Overcooked), 13 (VirtualHome)
    and 16 (DataSciCoding).
    """

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "overcooked": {
            **_COMMON,
            "lr": 5e-7,
            "critic_lr": 1e-5,
            "gamma": _GAMMA["overcooked"],
            "entropy_coef": 0.01,
            "epochs": 5,
            "num_minibatches": 2,
        },
        "virtualhome": {
            **_COMMON,
            "lr": 1e-6,
            "critic_lr": 5e-5,
            "gamma": _GAMMA["virtualhome"],
            "entropy_coef": 1e-4,
            "epochs": 5,
            "num_minibatches": 2,
        },
        "datascicoding": {
            **_COMMON,
            "lr": 1e-6,
            "critic_lr": 5e-5,
            "gamma": _GAMMA["datascicoding"],
            "entropy_coef": 0.01,
            "epochs": 1,
            "num_minibatches": 4,
            "max_new_tokens": 128,
        },
    }


class POAD(PPOAgent):
    """Token-level critic, BAD credit assignment, token-level PPO."""

    name = "poad"
    config_class = POADConfig
    supports_open_actions = True

    def intra_gamma(self) -> float:
        """Discount between the tokens of one action: 1 is BAD (no discount inside actions)."""
        return 1.0

    def boundary_bootstrap(self) -> str:
        """Which value of the next action an action's last token bootstraps from: ``"first"``,
        the value before its first token, ``V_{t+1}^1`` (``token_level_gae``'s ``boundary``)."""
        return "first"

    # -- critic ---------------------------------------------------------------------------------
    def make_critic(self, generator: torch.Generator) -> torch.nn.Module:
        return TokenCritic(
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
        """Sample actions and record the value before each of their tokens."""
        samples = self.policy.act(list(prompts), list(available_actions), generator=generator)
        # The offered actions let the features come from the scoring tree act() just used: one
        # frozen pass gives every offered action's features (exact; LMPolicy.critic_features).
        features, _ = self.policy.critic_features(
            list(prompts), [s.token_ids for s in samples], available_actions=list(available_actions)
        )
        values = self.critic(features)  # (B, L + 1): [:, j] is the value before token j + 1
        records = []
        for i, sample in enumerate(samples):
            # An empty generated action still has the state value before it (one entry).
            n = max(len(sample.token_ids), 1)
            records.append(
                StepRecord(
                    prompt=prompts[i],
                    available_actions=None
                    if available_actions[i] is None
                    else list(available_actions[i]),
                    sample=sample,
                    values=values[i, :n].tolist(),
                    features=features[i, :n].clone(),
                )
            )
        return records

    @torch.no_grad()
    def bootstrap_values(self, prompts: Sequence[str]) -> np.ndarray:
        """The value before the first token of the next action: the prompt's own value."""
        features, _ = self.policy.critic_features(list(prompts))
        return self.critic(features)[:, 0].double().cpu().numpy()

    # -- credit assignment ----------------------------------------------------------------------
    def compute_advantages(self, buffer: RolloutBuffer) -> None:
        """Token-level GAE with the BAD backup (``intra_gamma = 1``).

        At a time-limit truncation the last token's target bootstraps from the value before the
        first token of the observation the episode was cut at (``buffer.final_values()``).
        """
        values, mask = buffer.value_grid()
        buffer.advantages, buffer.returns = token_level_gae(
            buffer.rewards(),
            values,
            mask,
            buffer.dones(),
            buffer.next_values,
            gamma=self.config.gamma,
            lam=self.config.lam,
            intra_gamma=self.intra_gamma(),
            truncated=buffer.truncations(),
            final_values=buffer.final_values(),
            boundary=self.boundary_bootstrap(),
        )

    # -- loss granularity: one PPO term per action token ----------------------------------------
    def make_batch(self, buffer: RolloutBuffer) -> PPOBatch:
        values, value_mask = buffer.value_grid()
        width = values.shape[-1]
        size = buffer.num_samples
        token_ids = buffer.flat_samples("token_ids")
        old_log_probs, mask = token_grid(buffer.flat_samples("token_log_probs"), width)

        def flat(x: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(np.asarray(x).reshape(size, width), dtype=torch.float32)

        return PPOBatch(
            old_log_probs=old_log_probs,
            advantages=flat(buffer.advantages) * mask,
            returns=flat(buffer.returns),
            old_values=flat(values),
            mask=mask,
            value_mask=torch.as_tensor(value_mask.reshape(size, width)),
            extras={
                "prompts": buffer.flat("prompt"),
                "token_ids": token_ids,
                "features": buffer.flat("features"),
            },
        )

    def evaluate_policy(self, batch: PPOBatch) -> PolicyEvaluation:
        """Per-token log-probs and full-vocabulary entropies of the stored action tokens.

        With restricted actions the same pass scores every offered action, and the categoricals
        ride along for the shared KL guard (exact; one forward instead of two).
        """
        return token_level_evaluation(self.policy, batch)

    def evaluate_values(self, batch: PPOBatch) -> torch.Tensor:
        """The critic on the cached frozen features: one value per action token."""
        features = pad_rows(list(batch.extras["features"]), batch.mask.shape[1])
        return self.critic(features.to(self.policy.device))
