"""The base class of the PPO agents and the one KL guard they share.

An algorithm subclasses :class:`PPOAgent` and supplies its critic, rollout choices, credit
assignment and loss granularity; :meth:`PPOAgent.update` hands them to the shared loop
(:func:`~agentbench_poad.rl.ppo_loop.ppo_update`, built on the pure losses of
:mod:`agentbench_poad.rl.ppo_losses`).

The KL guard measures one quantity for every agent (docs/agents.md, "One KL guard"): in
restricted-action environments the exact KL between the old and the new categorical over the
offered actions, averaged over the minibatch's samples (:meth:`PPOAgent.guard_kl`, which no
subclass may override); in open-action environments the k3 estimate of the per-token KL of the LM
over the generated tokens. The logged ``approx_kl`` is the guard's number.

This is the public module of "Write your own algorithm" (docs/agents.md): it also re-exports the
loop's and the losses' public names, so ``from agentbench_poad.rl.ppo import PPOBatch`` works.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from agentbench_poad.rl.ppo_loop import (
    NonFiniteLossError,
    PolicyEvaluation,
    PPOBatch,
    PPOSettings,
    accumulate_policy_gradients,
    critic_step,
    make_adamw,
    pad_columns,
    pad_rows,
    policy_chunks,
    ppo_update,
)
from agentbench_poad.rl.ppo_losses import (
    approx_kl_k3,
    candidate_kl,
    clipped_surrogate_loss,
    clipped_value_loss,
    masked_mean,
    normalize_advantages,
    signal_free,
)

__all__ = [
    "PPOAgent",
    "SHARED_UPDATE_METHODS",
    "action_level_evaluation",
    "check_shared_update",
    "guard_kind",
    # re-exported public API (their homes: rl/ppo_loop.py and rl/ppo_losses.py)
    "NonFiniteLossError",
    "PPOBatch",
    "PPOSettings",
    "PolicyEvaluation",
    "accumulate_policy_gradients",
    "approx_kl_k3",
    "candidate_kl",
    "clipped_surrogate_loss",
    "clipped_value_loss",
    "critic_step",
    "make_adamw",
    "masked_mean",
    "normalize_advantages",
    "pad_columns",
    "pad_rows",
    "policy_chunks",
    "ppo_update",
    "signal_free",
]

#: Methods every agent shares with :class:`PPOAgent` so that the KL guard, the dual clip and the
#: rule for reward-free batches are the same for all of them; a subclass may not redefine them.
SHARED_UPDATE_METHODS = ("guard_kl", "update")


def action_level_evaluation(policy: Any, batch: PPOBatch) -> PolicyEvaluation:
    """An action-level loss's evaluation in a restricted-action env (TWOSOME, GRPO, GiGPO).

    Scores each sample's offered actions under the current policy (with grad) and reads the
    log-probability of the chosen one (``batch.extras["index"]``) and the entropy of the
    categorical; the categoricals ride along for the shared KL guard, which then need not score
    the candidates again.
    """
    categoricals = policy.candidate_log_probs(
        list(batch.extras["prompts"]), list(batch.extras["available_actions"])
    )
    chosen = torch.stack([c[i] for c, i in zip(categoricals, batch.extras["index"])])
    entropy = torch.stack([-(c.exp() * c).sum() for c in categoricals])
    return PolicyEvaluation(chosen[:, None], entropy[:, None], categoricals)


class PPOAgent:
    """Base of the PPO agents: an LM policy, a critic head, two optimisers and the update loop.

    An algorithm (``baselines/poad.py`` ...) subclasses it and supplies, top to bottom:

    * ``make_critic()`` -- its value head;
    * ``collect(prompts, available_actions, generator)`` -- choose actions and record values;
    * ``bootstrap_values(prompts)`` -- values of the observations after the rollout;
    * ``compute_advantages(buffer)`` -- its credit assignment;
    * ``make_batch(buffer)`` and ``evaluate_policy``/``evaluate_values`` -- its loss granularity.

    The trainer only calls these methods, never asks which algorithm it runs. The KL guard is
    not among them: :meth:`guard_kl` is defined here once, and a subclass that overrides it is a
    ``TypeError`` at class creation, so every agent's guard measures the same quantity.

    Args:
        config: the algorithm's config (a :class:`~agentbench_poad.rl.config.PPOConfig`).
        policy: the :class:`~agentbench_poad.rl.policy.LMPolicy` to train.
        seed: seeds the critic head's initial weights (a private generator).
    """

    #: Registry name ("poad" ...).
    name: str = "ppo"
    #: The config dataclass of the algorithm.
    config_class: type = object
    #: Whether open-action environments (available_actions None) are supported.
    supports_open_actions: bool = True

    #: Set by ``class MyAgent(PPOAgent, custom_guard=True)``: the class brings its own guard or
    #: update path; its runs and records say "custom guard" (docs/agents.md, "One KL guard").
    custom_guard: bool = False

    def __init_subclass__(cls, custom_guard: bool | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if custom_guard is not None:
            cls.custom_guard = bool(custom_guard)
        redefined = [name for name in SHARED_UPDATE_METHODS if name in vars(cls)]
        if redefined and not cls.custom_guard:
            raise TypeError(
                f"{cls.__name__} redefines {redefined}: the KL guard is shared by every agent so "
                "that their skipped policy steps mean the same thing (docs/agents.md, "
                "'One KL guard'); fill PolicyEvaluation instead of redefining it, or declare "
                "`class X(PPOAgent, custom_guard=True)` (its records then say 'custom guard')"
            )

    def __init__(self, config: Any, policy: Any, *, seed: int = 0) -> None:
        if not isinstance(config, self.config_class):
            raise TypeError(
                f"{type(self).__name__} takes a {self.config_class.__name__}, "
                f"got {type(config).__name__}"
            )
        self.config = config
        self.policy = policy
        critic = self.make_critic(torch.Generator().manual_seed(seed))
        self.policy_optimizer = make_adamw(policy.trainable_parameters(), config.lr)
        # make_critic() returning None makes a critic-free agent (GRPO, GiGPO): no critic step.
        self.critic = None if critic is None else critic.to(policy.device)
        self.critic_optimizer = (
            None if critic is None else make_adamw(list(critic.parameters()), config.critic_lr)
        )

    # -- to implement -------------------------------------------------------------------------
    def make_critic(self, generator: torch.Generator) -> torch.nn.Module:
        """The value head, its initial weights drawn from ``generator`` (None: no critic)."""
        raise NotImplementedError

    def collect(
        self,
        prompts: Sequence[str],
        available_actions: Sequence[Sequence[str] | None],
        generator: torch.Generator,
    ) -> list[Any]:
        """Choose one action per prompt; return one ``StepRecord`` each (reward/done unset)."""
        raise NotImplementedError

    def bootstrap_values(self, prompts: Sequence[str]) -> Any:
        raise NotImplementedError

    def compute_advantages(self, buffer: Any) -> None:
        raise NotImplementedError

    def make_batch(self, buffer: Any) -> PPOBatch:
        raise NotImplementedError

    def evaluate_policy(self, batch: PPOBatch) -> PolicyEvaluation:
        raise NotImplementedError

    def evaluate_values(self, batch: PPOBatch) -> torch.Tensor:
        raise NotImplementedError

    # -- shared -------------------------------------------------------------------------------
    def check_environment(self, env_id: str, open_actions: bool) -> None:
        """Raise a clear error when the algorithm cannot run in this environment."""
        if open_actions and not self.supports_open_actions:
            raise ValueError(
                f"{type(self).__name__} needs a list of offered actions, but {env_id} is an "
                "open-action environment (available_actions is None); train POAD or NTPO there"
            )

    def guard_kl(self, batch: PPOBatch, evaluation: PolicyEvaluation) -> torch.Tensor | None:
        """The KL guard's quantity for a (chunk of a) minibatch: the same for every agent.

        Restricted actions (every sample has offered actions): per sample, the exact
        ``KL(old‖new)`` of the categorical over the offered actions, the distribution the agent
        sampled from (:func:`candidate_kl`). The new categoricals come from the policy itself
        (``LMPolicy.guard_candidate_log_probs``: its record of the scores its own update pass
        computed under the current weights, or a fresh no-grad scoring), never from values the
        agent hands in. Open actions (or a batch without the stored categoricals): None, i.e.
        the k3 estimate of the per-token KL over the evaluation's log-probs.

        Returns:
            ``(b,)`` KLs, or None for the token-level guard.
        """
        old = batch.extras.get("old_candidate_log_probs")
        actions = batch.extras.get("available_actions")
        if old is None or actions is None or any(o is None for o in old):
            return None
        new = self.policy.guard_candidate_log_probs(
            list(batch.extras["prompts"]), [list(a) for a in actions]
        )
        return candidate_kl(old, new)

    def update(self, buffer: Any, generator: torch.Generator) -> dict[str, float]:
        """PPO epochs over the buffer (after :meth:`compute_advantages`); returns metrics."""
        settings = self.config.ppo_settings()
        batch = self.make_batch(buffer)
        # What the shared KL guard reads, whatever the algorithm's batch holds.
        batch.extras.setdefault("prompts", buffer.flat("prompt"))
        batch.extras.setdefault("available_actions", buffer.flat("available_actions"))
        batch.extras["old_candidate_log_probs"] = buffer.flat_samples("candidate_log_probs")
        if settings.max_chunk_tokens is not None and batch.sizes is None:
            batch.sizes = self.sample_sizes(batch)
        self.policy.model.train()
        try:
            return ppo_update(
                batch,
                evaluate_policy=self.evaluate_policy,
                evaluate_values=self.evaluate_values,
                policy_parameters=self.policy.trainable_parameters(),
                critic_parameters=[] if self.critic is None else list(self.critic.parameters()),
                policy_optimizer=self.policy_optimizer,
                critic_optimizer=self.critic_optimizer,
                settings=settings,
                generator=generator,
                update_policy=self.config.train_policy,
                guard_kl=self.guard_kl,
                signal_free_batch=signal_free(buffer.rewards()),
            )
        finally:
            self.policy.model.eval()

    def sample_sizes(self, batch: PPOBatch) -> torch.Tensor:
        """``(B,)`` tokens the policy pass runs per sample, for length-sorted chunking.

        Read from the batch's ``extras``: the prompt's tokens plus the action's (``token_ids``)
        or all offered candidates' (``available_actions``, scored after one shared prompt).
        """
        extras = batch.extras
        sizes = []
        for i, prompt in enumerate(extras["prompts"]):
            n = len(self.policy.encode_prompt(prompt))
            if "token_ids" in extras:
                n += len(extras["token_ids"][i])
            elif extras.get("available_actions") is not None:
                actions = extras["available_actions"][i] or []
                n += sum(len(self.policy.encode_action(prompt, a)) for a in actions)
            sizes.append(n)
        return torch.tensor(sizes, dtype=torch.long)

    def state_dict(self) -> dict[str, Any]:
        """Critic weights and both optimiser states (the adapter is saved by the policy)."""
        if self.critic is None:
            return {"policy_optimizer": self.policy_optimizer.state_dict()}
        return {
            "critic": self.critic.state_dict(),
            "policy_optimizer": self.policy_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        self.policy_optimizer.load_state_dict(state["policy_optimizer"])
        if self.critic is not None:
            self.critic.load_state_dict(state["critic"])
            self.critic_optimizer.load_state_dict(state["critic_optimizer"])


def guard_kind(algorithm: type) -> str:
    """``"shared"``, or ``"custom"`` for a class created with ``custom_guard=True``."""
    return "custom" if getattr(algorithm, "custom_guard", False) else "shared"


def check_shared_update(agent: Any) -> None:
    """Refuse an agent whose guard or update path is not the shared one.

    Checked on the object the run trains, through the whole method resolution order and the
    instance itself, so a mixin, a method assigned to the class after its creation or an
    attribute set on the instance are caught as well as a subclass that redefines the method
    (which :class:`PPOAgent` already refuses at class creation). A class
    made with ``custom_guard=True`` may bring its own; its runs and records say "custom guard".
    """
    if not isinstance(agent, PPOAgent) or guard_kind(type(agent)) == "custom":
        return
    changed = [
        name
        for name in SHARED_UPDATE_METHODS
        if name in vars(agent) or getattr(type(agent), name, None) is not getattr(PPOAgent, name)
    ]
    if changed:
        raise TypeError(
            f"{type(agent).__name__} replaces the shared {changed} (through its class, a base "
            "or mixin, or the instance): every agent's policy steps go through PPOAgent.update "
            "and its KL guard so that they are comparable (docs/agents.md, 'One KL guard'). "
            "Fill PolicyEvaluation instead; an algorithm that needs another guard is declared "
            "with `class MyAgent(PPOAgent, custom_guard=True)` and its records say 'custom guard'"
        )
