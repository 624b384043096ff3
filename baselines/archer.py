"""ArCHer: the published off-policy hierarchical actor-critic (Zhou et al., ICML 2024).

"ArCHer: Training Language Model Agents via Hierarchical Multi-Turn RL" trains two levels at once:
an **utterance-level critic** learned off-policy by temporal differences from a replay buffer, and
a **token-level actor** whose every token is credited with that critic's advantage of the whole
utterance. This is the published method; ``archer-adrl`` (baselines/archer_adrl.py) is what the
POAD paper's code ran under the name "ARCHER", an on-policy token-level PPO variant.

**One update** (``make_critic`` returns None: the shared update takes no on-policy critic
step; ``compute_advantages`` trains the critic below):

1. *Replay.* Every rollout step becomes a transition (observation, its offered actions, action
   text and tokens, reward, next observation, done) in a :class:`ReplayBuffer` of
   ``replay_capacity`` transitions (oldest overwritten first). ``done`` is a terminal state only
   (a time limit bootstraps from the observation it cut at, as every agent here). A rollout's
   last step waits for the next rollout's first observation (``pending``).
2. *Critic.* ``critic_updates`` steps, each on ``critic_batch_size`` transitions drawn uniformly
   with replacement from the buffer (the buffer's own seeded generator). Twin heads Q1, Q2 read
   the frozen model's features ``[h(s); h(s, a)]`` (``h(s)`` at the observation's last token,
   ``h(s, a)`` after the action's last token: the project's ``critic_features``), twin heads V1,
   V2 read ``h(s)``. Targets come from a Polyak-averaged copy (``tau``, after every step)::

       Q_i(s, a) <- r + γ (1 − done) V̄_i(s')
       V_i(s)    <- Σ_a π(a | s) Q̄_i(s, a)     (offered actions, current policy)

   Loss: the sum of the four heads' mean squared errors (targets: :func:`critic_targets`).
3. *Actor.* Each sample of the rollout gets ``A = min(Q1, Q2)(s, a) − min(V1, V2)(s)`` from the
   trained online critic, on every token of its action, for the shared token-level PPO loss
   (token ratios, clip, dual clip, log-ratio clamp, KL guard, budgets). The first
   ``warmup_updates`` updates hold the actor (the shared ``train_policy`` switch).

**From the paper and its code** (github.com/YifeiZhou02/ArCHer): the utterance-level Q and V
with TD targets ``r + γ(1 − d)V̄(s')`` and ``Q̄(s, a)``; twin Q and V heads with the minimum of
each pair in the advantage; a target network soft-updated after every critic step with τ = 0.1;
a replay buffer of 100,000 transitions sampled uniformly; 50 critic steps of 256 transitions per
iteration; critic lr 2e-5 (1e-5 in some of its configs); 3 actor steps per iteration; 10-20
warm-up iterations of critic-only training; the advantage given to every token of the utterance;
no entropy bonus. **Changed here, and why:**

* *V target: the expectation over the offered actions* instead of one action sampled from the
  current policy: the same quantity without its sampling noise (and no generator to checkpoint).
  With open actions (DataSciCoding) the target is ``Q̄(s, a)`` of the replayed action: sampling
  a fresh program for every replayed observation costs a generation per critic sample.
* *Features:* the frozen policy model's last-layer features (the project's critic path, cached
  per (observation, action)) instead of a separately fine-tuned RoBERTa encoder; the heads are
  the project's bias-free MLPs (``critic_hidden_sizes``).
* *Actor data:* the latest rollout's observations and actions (sampled by the current policy,
  so on-policy as in the paper) instead of buffer observations with freshly sampled actions,
  and the shared PPO loss (the paper's plain policy gradient is its first step at ratio 1) with
  advantages normalised per minibatch, like every agent here.
* *Shared safeguards:* AdamW (eps 1e-5), grad-norm clip ``max_grad_norm`` for both networks
  (the paper clips at 1.0), the family's protocol discount ``gamma`` (the paper's 0.95).
* *Scale:* an "iteration" of the paper plays 128 episodes (~2,000 transitions); an update here
  plays ``num_envs × rollout_length`` steps. The paper-scale presets keep the paper's per-
  iteration numbers (50 × 256 critic samples per update, 20 warm-up updates), which replays each
  transition more often than the paper did. The CPU preset (``--preset mini``) keeps the paper's
  replay ratio instead, in as many critic steps per update as the PPO agents' CPU preset takes
  (4 epochs × 4 minibatches): 16 steps × 32 = 512 samples per 128 new transitions (~4×; the
  paper's 12,800 per ~2,000 is ~6×; DataSciCoding: 4 × 16 per 16 programs, its 2 × 2 steps), a
  buffer of 4,096 transitions (32 updates; the paper's holds ~50 iterations), each update's
  minibatches taken 4 times (``critic_passes``: 64 TD steps per update), 4 warm-up updates and
  a critic lr of 1e-4; the rest is the shared CPU preset (rl/config.py).
* *TD steps on CPU:* a TD(0) critic moves a reward one step back per target-network lag, and
  the paper's critic takes ~1,000 steps (20 warm-up iterations × 50) before the actor's first
  step and ~100,000 in a run; 16 per update with one warm-up update gave 16 and 384. With one
  pass and one warm-up update the first board run's policy locked onto chopping (the nearest
  reward) before the delivery's value reached the first steps. Chosen on tuning seed 1000
  (Tomato Salad, 3,072 steps; mean of the last three sampled curve points, at lr 5e-4 and
  2.5e-4): 4 warm-up updates with one pass 0.41 and 0.52, with 4 passes 1.07 and 0.86 (training
  success 0.9-1.0 at the end). Passes alone, without the longer warm-up, were not tried.
* *Critic lr on CPU:* the shared CPU preset's 1e-3 (the PPO agents' value heads) kills this
  critic. Its targets are ~0 on almost every transition (Tomato Salad pays at a delivery), and
  bias-free ReLU heads fit 0 fastest by switching units off; a unit off on every input gets no
  gradient again. Measured on the first Tomato Salad board run (seed 0, 24 updates at 1e-3):
  Q1 ended with 0 of 256 units alive and Q2 with 6, so ``min(Q1, Q2) − min(V1, V2)`` was close
  to a state-only constant (std 0.0015) and the actor followed noise (20 sampled episodes:
  0.097, the base model 0.179). Fresh heads trained on that run's replay buffer as it grew (16 ×
  32 samples per update; studies/archer_critic_probe.py): at 1e-3 the units died again and the
  advantage correlated at -0.17 with the Monte Carlo return's; at 3e-4 and 1e-4 ~80-125 of 256
  units stayed alive per head and the correlation was 0.41 and 0.43, the within-observation
  ranking of actions 0.40 and 0.42. 1e-4 is the closer to the paper's 1e-5-2e-5 (which also
  fine-tuned its RoBERTa encoder). Each update logs ``critic_alive_units`` (the four heads'
  share of units positive on at least one of the phase's samples), so a dying critic shows in
  metrics.jsonl.

``lam``, ``value_coef`` and the value clip are unused. **Exact resume:** the checkpoint holds
both critics, their optimiser, the buffer with its generator and the pending transitions
(:meth:`Archer.state_dict`; tests/test_archer.py resumes a SIGKILLed run exactly).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from agentbench_poad.baselines.poad import _COMMON, _GAMMA
from agentbench_poad.rl.buffer import RolloutBuffer, StepRecord
from agentbench_poad.rl.config import MINI_SUFFIX, PPOConfig
from agentbench_poad.rl.critic import TargetCritic, ValueHead
from agentbench_poad.rl.ppo import PolicyEvaluation, PPOAgent, PPOBatch, make_adamw
from agentbench_poad.rl.replay import (
    ReplayBuffer,
    Transition,
    pack_transitions,
    unpack_transitions,
)
from agentbench_poad.rl.token_level import step_advantage_batch, token_level_evaluation

__all__ = [
    "Archer",
    "ArcherConfig",
    "ArcherCritic",
    "ReplayBuffer",
    "Transition",
    "critic_targets",
    "td_step",
]

#: ArCHer's own values at paper scale (see the module docstring for their sources).
_PAPER: dict[str, Any] = {
    "replay_capacity": 100_000,
    "tau": 0.1,
    "critic_updates": 50,
    "critic_batch_size": 256,
    "warmup_updates": 20,
    "critic_lr": 2e-5,
    "entropy_coef": 0.0,
    "epochs": 3,
    "num_minibatches": 1,
}
_ACTOR_LR = {"overcooked": 5e-7, "virtualhome": 1e-6, "datascicoding": 1e-6}

#: On top of the shared CPU preset (rl/config.py MINI_PRESETS): the paper's replay ratio (~4
#: samples per new transition) in the PPO agents' number of critic steps per update (epochs ×
#: minibatches: 16 of 128 steps; DataSciCoding 4 of 16 programs).
_MINI: dict[str, dict[str, Any]] = {
    family: {
        "replay_capacity": 4096,
        "critic_updates": 16 if family != "datascicoding" else 4,
        "critic_batch_size": 32 if family != "datascicoding" else 16,
        "warmup_updates": 4,
        "critic_passes": 4,
        "critic_lr": 1e-4,
    }
    for family in _ACTOR_LR
}


@dataclass
class ArcherConfig(PPOConfig):
    """ArCHer hyper-parameters; the rest as :class:`PPOConfig` (``lam``, ``value_coef`` unused).

    Presets: ``overcooked``, ``virtualhome``, ``datascicoding`` (paper scale: the shared
    Appendix J values of the PPO agents for rollouts, clip and KL guard, POAD's actor lr for the
    family, ArCHer's own values for the rest) and their ``-mini`` CPU presets (module docstring).
    """

    replay_capacity: int = 100_000
    """Transitions the replay buffer keeps (oldest overwritten first); the paper's 100,000."""
    tau: float = 0.1
    """Polyak weight of the online critic in each target update, after every critic step
    (``target <- (1 − tau) target + tau online``); the paper's 0.1."""
    critic_updates: int = 50
    """Critic gradient steps per update, each on a fresh minibatch from the buffer; the paper's
    50 per iteration."""
    critic_batch_size: int = 256
    """Transitions per critic step (drawn with replacement); the paper's 8 × 32 accumulation."""
    critic_passes: int = 1
    """Passes over an update's ``critic_updates`` minibatches (each step followed by the target
    update): ``critic_passes × critic_updates`` TD steps on the features computed once. The
    paper's 1; more passes propagate a reward further back per update at almost no cost (the
    frozen features of the drawn transitions, not the heads' steps, are an update's price)."""
    warmup_updates: int = 0
    """The first updates train the critic only (the actor is held); the paper's 10-20."""

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        family: {
            **_COMMON,
            **_PAPER,
            "lr": lr,
            "gamma": _GAMMA[family],
            **({"max_new_tokens": 128} if family == "datascicoding" else {}),
        }
        for family, lr in _ACTOR_LR.items()
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("replay_capacity", "critic_batch_size", "critic_passes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        for name in ("critic_updates", "warmup_updates"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(
                f"tau must be in (0, 1] (1 copies the online critic), got {self.tau!r}"
            )

    @classmethod
    def preset(cls, name: str | None, **overrides: Any) -> PPOConfig:
        """As :meth:`PPOConfig.preset`; a ``-mini`` preset also takes ArCHer's CPU values."""
        if name is not None and name.endswith(MINI_SUFFIX):
            overrides = {**_MINI.get(name[: -len(MINI_SUFFIX)], {}), **overrides}
        return super().preset(name, **overrides)


# -- critic ----------------------------------------------------------------------------------------
class ArcherCritic(nn.Module):
    """Twin utterance-level heads: Q1, Q2 on ``[h(s); h(s, a)]`` and V1, V2 on ``h(s)``.

    Args:
        hidden_size: the LM's hidden size H (features are H wide; Q reads 2H).
        hidden_sizes: hidden widths of each head.
        generator: draws the initial weights.
    """

    def __init__(
        self,
        hidden_size: int,
        hidden_sizes: Sequence[int],
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.q1 = ValueHead(2 * hidden_size, hidden_sizes, generator=generator)
        self.q2 = ValueHead(2 * hidden_size, hidden_sizes, generator=generator)
        self.v1 = ValueHead(hidden_size, hidden_sizes, generator=generator)
        self.v2 = ValueHead(hidden_size, hidden_sizes, generator=generator)

    def q(self, state: torch.Tensor, pair: torch.Tensor) -> torch.Tensor:
        """``(2, B)``: both Q heads on state features ``(B, H)`` and pair features ``(B, H)``."""
        joint = torch.cat([state, pair], dim=-1)
        return torch.stack([self.q1(joint), self.q2(joint)])

    def v(self, state: torch.Tensor) -> torch.Tensor:
        """``(2, B)``: both V heads on state features ``(B, H)``."""
        return torch.stack([self.v1(state), self.v2(state)])

    def alive_fraction(self, batch: dict[str, torch.Tensor]) -> float:
        """The share of the four heads' hidden units positive on at least one row of ``batch``
        (its ``states`` and ``pairs``): ~0 means the heads output a constant and ``Q − V``
        carries no credit (:class:`~agentbench_poad.rl.critic.ValueHead.active_units`)."""
        joint = torch.cat([batch["states"], batch["pairs"]], dim=-1)
        counts = [
            head.active_units(features)
            for head, features in (
                (self.q1, joint),
                (self.q2, joint),
                (self.v1, batch["states"]),
                (self.v2, batch["states"]),
            )
        ]
        total = sum(t for _, t in counts)
        return sum(a for a, _ in counts) / total if total else 1.0


def critic_targets(
    rewards: torch.Tensor,
    dones: torch.Tensor,
    next_values: torch.Tensor,
    candidate_q: torch.Tensor,
    candidate_probs: torch.Tensor,
    candidate_owner: torch.Tensor,
    gamma: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ArCHer's TD targets for a minibatch of ``B`` transitions, per twin head.

    Args:
        rewards: ``(B,)`` rewards.
        dones: ``(B,)`` 1.0 after a terminal state.
        next_values: ``(2, B)`` target V of each next observation (never read where done).
        candidate_q: ``(2, M)`` target Q of each (observation, candidate action) pair.
        candidate_probs: ``(M,)`` the current policy's probability of each candidate.
        candidate_owner: ``(M,)`` long, the transition (0..B-1) each candidate belongs to.
        gamma: the discount.

    Returns:
        ``(q_targets, v_targets)``, each ``(2, B)``: ``r + γ(1 − done)V̄(s')`` and
        ``Σ_a π(a|s) Q̄(s, a)`` over each transition's candidates.
    """
    live = dones <= 0
    bootstrap = torch.where(live, next_values, torch.zeros_like(next_values))
    q_targets = rewards + gamma * bootstrap
    v_targets = torch.zeros(
        (candidate_q.shape[0], rewards.shape[0]), dtype=candidate_q.dtype, device=candidate_q.device
    )
    v_targets.index_add_(1, candidate_owner, candidate_q * candidate_probs)
    return q_targets, v_targets


def td_step(
    critic: ArcherCritic,
    target: TargetCritic,
    optimizer: torch.optim.Optimizer,
    batch: dict[str, torch.Tensor],
    *,
    gamma: float,
    max_grad_norm: float,
) -> tuple[float, float]:
    """One critic step on a minibatch (:meth:`_FeatureTables.batch`): the four heads' summed MSE
    against :func:`critic_targets` from ``target``, a grad-norm clip, the optimiser step and the
    target's Polyak update. Returns the loss and the pre-clip grad norm."""
    with torch.no_grad():
        q_targets, v_targets = critic_targets(
            batch["rewards"],
            batch["dones"],
            target.target.v(batch["next_states"]),
            target.target.q(batch["candidate_states"], batch["candidate_pairs"]),
            batch["candidate_probs"],
            batch["candidate_owner"],
            gamma,
        )
    q = critic.q(batch["states"], batch["pairs"])
    v = critic.v(batch["states"])
    loss = ((q - q_targets) ** 2).mean(dim=1).sum() + ((v - v_targets) ** 2).mean(dim=1).sum()
    if not torch.isfinite(loss):
        from agentbench_poad.rl.ppo import NonFiniteLossError

        raise NonFiniteLossError(
            f"non-finite ArCHer critic loss {float(loss)}: lower critic_lr, or resume from the "
            "last checkpoint"
        )
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(list(critic.parameters()), max_grad_norm)
    optimizer.step()
    target.update()
    return float(loss.detach()), float(norm)


# -- the agent -------------------------------------------------------------------------------------
class Archer(PPOAgent):
    """Off-policy utterance-level critic (Q, V, target network), token-level PPO actor."""

    name = "archer"
    config_class = ArcherConfig
    supports_open_actions = True

    #: Feature rows computed per ``critic_features`` call (its padded batch is rows × tokens).
    FEATURE_CHUNK = 32

    def __init__(self, config: ArcherConfig, policy: Any, *, seed: int = 0) -> None:
        super().__init__(config, policy, seed=seed)
        critic = ArcherCritic(
            policy.hidden_size,
            config.critic_hidden_sizes,
            generator=torch.Generator().manual_seed(seed),
        )
        self.utterance_critic = critic.to(policy.device)
        self.target_critic = TargetCritic(self.utterance_critic, tau=config.tau)
        self.utterance_optimizer = make_adamw(
            list(self.utterance_critic.parameters()), config.critic_lr
        )
        replay_seed = int(np.random.SeedSequence([seed, 0xA4C3]).generate_state(1)[0] >> 1)
        self.replay = ReplayBuffer(config.replay_capacity, replay_seed)
        #: Per env, the rollout's last step while it waits for its next observation.
        self.pending: dict[int, Transition] = {}
        self.updates_seen = 0
        #: The last critic phase's ``value_loss`` (mean of the four heads' MSE) and
        #: ``critic_grad_norm``: the trainer logs them in place of the shared update's nulls.
        self.update_metrics: dict[str, float] = {}
        self._actor_config = config
        self._held_config = dataclasses.replace(config, train_policy=False)

    def make_critic(self, generator: torch.Generator) -> None:
        """None: the shared update takes no on-policy critic step (the critic trains off-policy
        in :meth:`compute_advantages`)."""
        return None

    # -- rollout --------------------------------------------------------------------------------
    @torch.no_grad()
    def collect(
        self,
        prompts: Sequence[str],
        available_actions: Sequence[Sequence[str] | None],
        generator: torch.Generator,
    ) -> list[StepRecord]:
        """Sample from the categorical over the offered actions, or generate (open actions)."""
        samples = self.policy.act(list(prompts), list(available_actions), generator=generator)
        return [
            StepRecord(
                prompt=p,
                available_actions=None if a is None else list(a),
                sample=s,
                values=[],  # the advantages come from the critic after its TD steps
            )
            for p, a, s in zip(prompts, available_actions, samples)
        ]

    @torch.no_grad()
    def bootstrap_values(self, prompts: Sequence[str]) -> np.ndarray:
        """``min(V1, V2)`` of the online critic (the TD targets read the target network and the
        replay buffer; the trainer keeps these for its truncation bookkeeping)."""
        states = self._state_features(list(prompts))
        return self.utterance_critic.v(states).min(dim=0).values.double().cpu().numpy()

    # -- credit assignment ----------------------------------------------------------------------
    def compute_advantages(self, buffer: RolloutBuffer) -> None:
        """Replay the rollout, train the critic, and give each sample ``min Q − min V``."""
        self._admit(buffer)
        self.update_metrics = self.train_critic()
        prompts = buffer.flat("prompt")
        states = self._state_features(prompts)
        pairs = self._pair_features(list(zip(prompts, buffer.flat_samples("token_ids"))))
        with torch.no_grad():
            q = self.utterance_critic.q(states, pairs).min(dim=0).values
            v = self.utterance_critic.v(states).min(dim=0).values
        shape = (len(buffer.steps), buffer.num_envs)
        buffer.advantages = (q - v).double().cpu().numpy().reshape(shape)
        buffer.returns = q.double().cpu().numpy().reshape(shape)
        self.updates_seen += 1
        self._hold_actor_in_warmup()

    def _hold_actor_in_warmup(self) -> None:
        """The actor is held during the warm-up through the shared update's own switch."""
        warm = self.updates_seen <= self._actor_config.warmup_updates
        self.config = self._held_config if warm else self._actor_config

    def _admit(self, buffer: RolloutBuffer) -> None:
        """The rollout's transitions into the replay buffer (the last step of each env waits for
        the next rollout's first observation, unless its episode ended)."""
        steps = buffer.steps
        for env, waiting in sorted(self.pending.items()):
            self.replay.add(dataclasses.replace(waiting, next_observation=steps[0][env].prompt))
        self.pending = {}
        for t, step in enumerate(steps):
            for env, record in enumerate(step):
                if record.terminated:
                    following = None
                elif record.truncated:
                    following = record.final_observation
                elif t + 1 < len(steps):
                    following = steps[t + 1][env].prompt
                else:
                    self.pending[env] = _transition(record, None)
                    continue
                self.replay.add(_transition(record, following))

    def train_critic(self) -> dict[str, float]:
        """``critic_updates`` TD steps on minibatches of the replay buffer (``critic_passes``
        times over the same minibatches), each followed by the target network's Polyak update;
        returns the mean loss and pre-clip grad norm."""
        config = self._actor_config
        if not len(self.replay) or not config.critic_updates:
            return {}
        draws = [
            [self.replay.items[i] for i in self.replay.sample_indices(config.critic_batch_size)]
            for _ in range(config.critic_updates)
        ]
        tables = _FeatureTables(self, [t for draw in draws for t in draw])
        losses, norms = [], []
        for draw in [draw for _ in range(config.critic_passes) for draw in draws]:
            loss, norm = td_step(
                self.utterance_critic,
                self.target_critic,
                self.utterance_optimizer,
                tables.batch(draw),
                gamma=config.gamma,
                max_grad_norm=config.max_grad_norm,
            )
            losses.append(loss / 4.0)  # the mean of the four heads' MSEs
            norms.append(norm)
        return {
            "value_loss": float(np.mean(losses)),
            "critic_grad_norm": float(np.mean(norms)),
            "critic_alive_units": self.utterance_critic.alive_fraction(
                tables.batch([t for draw in draws for t in draw])
            ),
        }

    # -- features -------------------------------------------------------------------------------
    @torch.no_grad()
    def _state_features(self, observations: Sequence[str]) -> torch.Tensor:
        """``(B, H)``: the frozen features at each observation's last token."""
        rows = []
        for start in range(0, len(observations), self.FEATURE_CHUNK):
            chunk = list(observations[start : start + self.FEATURE_CHUNK])
            features, _ = self.policy.critic_features(chunk)
            rows.append(features[:, 0])
        return torch.cat(rows) if rows else torch.zeros(0, self.policy.hidden_size)

    @torch.no_grad()
    def _pair_features(self, pairs: Sequence[tuple[str, Sequence[int]]]) -> torch.Tensor:
        """``(B, H)``: the frozen features after each action's last token (the observation's own
        features for an empty action)."""
        rows = []
        for start in range(0, len(pairs), self.FEATURE_CHUNK):
            chunk = pairs[start : start + self.FEATURE_CHUNK]
            features, _ = self.policy.critic_features(
                [p for p, _ in chunk], [list(ids) for _, ids in chunk]
            )
            last = torch.tensor([len(ids) for _, ids in chunk], device=features.device)
            rows.append(features[torch.arange(len(chunk), device=features.device), last])
        return torch.cat(rows) if rows else torch.zeros(0, self.policy.hidden_size)

    # -- loss granularity: one PPO term per action token ----------------------------------------
    def make_batch(self, buffer: RolloutBuffer) -> PPOBatch:
        """One column per action token; every token carries its action's ``Q − V`` (the
        ``(T, N)`` advantages read time-major,
        :func:`~agentbench_poad.rl.token_level.step_advantage_batch`)."""
        return step_advantage_batch(buffer)

    def evaluate_policy(self, batch: PPOBatch) -> PolicyEvaluation:
        """Per-token log-probs and full-vocabulary entropies of the stored action tokens (with
        offered actions, the categoricals ride along for the shared KL guard)."""
        return token_level_evaluation(self.policy, batch)

    # -- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The base's (policy optimiser) plus both critics, their optimiser, the replay buffer
        with its generator, the pending transitions and the update count."""
        envs = sorted(self.pending)
        return {
            **super().state_dict(),
            "archer": {
                "critic": self.utterance_critic.state_dict(),
                "target_critic": self.target_critic.target.state_dict(),
                "critic_optimizer": self.utterance_optimizer.state_dict(),
                "replay": self.replay.state_dict(),
                "pending_envs": envs,
                "pending": pack_transitions([self.pending[e] for e in envs]),
                "updates_seen": self.updates_seen,
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        own = state["archer"]
        self.utterance_critic.load_state_dict(own["critic"])
        self.target_critic.target.load_state_dict(own["target_critic"])
        self.utterance_optimizer.load_state_dict(own["critic_optimizer"])
        self.replay.load_state_dict(own["replay"])
        self.pending = dict(zip(own["pending_envs"], unpack_transitions(own["pending"])))
        self.updates_seen = int(own["updates_seen"])
        self._hold_actor_in_warmup()


def _transition(record: StepRecord, following: str | None) -> Transition:
    offered = record.available_actions
    return Transition(
        observation=record.prompt,
        available_actions=None if offered is None else tuple(offered),
        action=record.sample.text,
        action_ids=tuple(int(x) for x in record.sample.token_ids),
        reward=float(record.reward),
        next_observation=following,
        done=bool(record.terminated),
    )


class _FeatureTables:
    """The frozen features and current-policy probabilities one critic phase needs, each
    distinct observation and (observation, action) computed once; :meth:`batch` gathers a
    minibatch's rows.

    The policy does not change during the critic phase, so ``π(a | s)`` over each observation's
    offered actions is computed once here (no gradient).
    """

    def __init__(self, agent: Archer, transitions: Sequence[Transition]) -> None:
        self.agent = agent
        policy = agent.policy
        states: dict[str, int] = {}
        pairs: dict[tuple[str, tuple[int, ...]], int] = {}
        offered: dict[tuple[str, tuple[str, ...]], None] = {}
        for t in transitions:
            states.setdefault(t.observation, len(states))
            pairs.setdefault((t.observation, t.action_ids), len(pairs))
            if not t.done and t.next_observation is not None:
                states.setdefault(t.next_observation, len(states))
            if t.available_actions is not None:
                offered.setdefault((t.observation, t.available_actions), None)
        #: per (observation, offered actions): the pair rows of the candidates and their probs
        self.candidates: dict[tuple[str, tuple[str, ...]], tuple[list[int], torch.Tensor]] = {}
        keys = list(offered)
        if keys:
            with torch.no_grad():
                log_probs = policy.candidate_log_probs(
                    [o for o, _ in keys], [list(a) for _, a in keys]
                )
            for (observation, actions), lp in zip(keys, log_probs):
                rows = []
                for action in actions:
                    ids = tuple(policy.encode_action(observation, action))
                    rows.append(pairs.setdefault((observation, ids), len(pairs)))
                self.candidates[(observation, actions)] = (rows, lp.detach().exp().float())
        self.state_rows = states
        self.pair_rows = pairs
        self.states = agent._state_features(list(states))
        self.pairs = agent._pair_features(list(pairs))

    def batch(self, transitions: Sequence[Transition]) -> dict[str, torch.Tensor]:
        """Rows, rewards, dones and the V target's candidates of a minibatch."""
        device = self.states.device
        state_index = [self.state_rows[t.observation] for t in transitions]
        pair_index = [self.pair_rows[(t.observation, t.action_ids)] for t in transitions]
        next_index = [
            0 if t.done or t.next_observation is None else self.state_rows[t.next_observation]
            for t in transitions
        ]
        owner: list[int] = []
        candidate_pairs: list[int] = []
        probs: list[torch.Tensor] = []
        for b, (t, pair) in enumerate(zip(transitions, pair_index)):
            if t.available_actions is None:  # open actions: the replayed action (module doc)
                rows, p = [pair], torch.ones(1)
            else:
                rows, p = self.candidates[(t.observation, t.available_actions)]
            owner += [b] * len(rows)
            candidate_pairs += rows
            probs.append(p.cpu())

        def index(rows: list[int]) -> torch.Tensor:
            return torch.tensor(rows, dtype=torch.long, device=device)

        owner_t = index(owner)
        return {
            "states": self.states[index(state_index)],
            "pairs": self.pairs[index(pair_index)],
            "next_states": self.states[index(next_index)],
            "rewards": torch.tensor([t.reward for t in transitions], device=device),
            "dones": torch.tensor([float(t.done) for t in transitions], device=device),
            "candidate_states": self.states[index(state_index)][owner_t],
            "candidate_pairs": self.pairs[index(candidate_pairs)],
            "candidate_probs": torch.cat(probs).to(device),
            "candidate_owner": owner_t,
        }
