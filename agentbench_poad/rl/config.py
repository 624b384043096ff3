"""The configuration shared by the PPO agents (POAD, NTPO, TWOSOME) and its presets.

Each algorithm has its own dataclass (``POADConfig`` in ``baselines/poad.py`` ...) that subclasses
:class:`PPOConfig` and declares the paper's best hyper-parameters (Appendix J, tables 10-17) per
environment family in ``PRESETS``. ``Config.preset("overcooked")`` returns those values; any field
can still be overridden (``Config.preset("overcooked", lr=1e-6)``).

Field docstrings follow each field (read them in the source or with ``help(PPOConfig)``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agentbench_poad.registration import BENCHMARK_FAMILIES, UnknownEnvError, env_facts

__all__ = [
    "IMPLIED_WHEN_ABSENT",
    "MINI_PRESETS",
    "REWARD_FREE_RULES",
    "PPOConfig",
    "family_of",
    "preset_for",
    "preset_names",
    "reward_free_rule",
]

#: The rules for an update whose rollout rewards are all equal (docs/agents.md, "Reward-free
#: updates"), by name: the config fields each sets. ``skip`` takes no policy step there, so its
#: entropy field does not matter; the normalisation fields matter only where advantages are
#: normalised (``normalize_advantages``: the group agents leave it off).
REWARD_FREE_RULES: dict[str, dict[str, Any]] = {
    "skip": {"skip_signal_free": True, "normalize_over": "minibatch", "advantage_std_floor": 0.0},
    "keep": {
        "skip_signal_free": False,
        "normalize_over": "batch",
        "advantage_std_floor": 0.1,
        "signal_free_entropy": True,
    },
    "keep-noent": {
        "skip_signal_free": False,
        "normalize_over": "batch",
        "advantage_std_floor": 0.1,
        "signal_free_entropy": False,
    },
}
_NORMALISATION_FIELDS = ("normalize_over", "advantage_std_floor")
#: Update-rule fields added after runs existed, with the value every earlier run used: a run
#: config or record that lacks one ran with that value.
IMPLIED_WHEN_ABSENT: dict[str, Any] = {"signal_free_entropy": True}


def reward_free_rule(settings: Mapping[str, Any]) -> str | None:
    """The name of the :data:`REWARD_FREE_RULES` entry ``settings`` follow, or None.

    ``settings``: a config's fields (``PPOConfig.to_dict()``, a run's ``config.json``
    ``algorithm``, a record's ``training.safeguards``). A field a rule reads but ``settings``
    lacks is not that rule's, except one of :data:`IMPLIED_WHEN_ABSENT`, read as the value
    every run made before it existed had; None: a combination no named rule has (e.g. no skip with per-minibatch
    normalisation, the reference's rule).
    """
    normalised = settings.get("normalize_advantages", True)
    for name, fields in REWARD_FREE_RULES.items():
        if all(
            settings.get(key, IMPLIED_WHEN_ABSENT.get(key)) == value
            for key, value in fields.items()
            if normalised or key not in _NORMALISATION_FIELDS
        ):
            return name
    return None


def family_of(env_id: str) -> str | None:
    """The preset family of an environment id (``"overcooked"`` ...), or None for other ids.

    Read from the id's registered facts (:func:`agentbench_poad.env_facts`): presets exist for
    the benchmark families only, so the case-study toys and other packages' ids give None.
    """
    try:
        family = env_facts(env_id).family
    except UnknownEnvError:
        return None  # gym.make names the problem when the run starts
    return family if family in BENCHMARK_FAMILIES else None


#: Suffix of the CPU presets' names (``"overcooked-mini"``); ``--preset mini`` picks the env's.
MINI_SUFFIX = "-mini"

#: CPU presets (``--preset mini``): applied on top of the paper's preset of the family, and the
#: same for POAD, NTPO and TWOSOME so the three are compared at one budget. Sized for
#: SmolLM2-135M on 2 CPU cores; docs/agents.md ("The CPU preset") gives the reasons and what
#: differs from the paper: a larger learning rate (measured on SmolLM2: lr 1e-4 moves the policy
#: by a KL of ~1e-4 per update, 1e-3 by ~0.02; 1e-3 with 64-sample batches locked 2 of 3 seeds
#: onto the chop-then-loop behaviour, 5e-4 with the paper's 128 samples learned on all three),
#: LoRA on the top 8 layers only (the frozen lower-layer states are cached: exact), a smaller
#: critic head, and stochastic evaluation (the paper's protocol) for the learning curve.
MINI_PRESETS: dict[str, dict[str, Any]] = {
    family: {
        "num_envs": 8,
        "rollout_length": 16,
        "epochs": 4,
        "num_minibatches": 4,
        "lr": 5e-4,
        "critic_lr": 1e-3,
        "entropy_coef": 1e-3,
        "target_kl": 0.05,
        "critic_hidden_sizes": (256,),
        "lora_layers": 8,
        # One policy chunk per minibatch: accumulation is exact (memory only, and a 135M model
        # needs none), and a chunk runs each distinct prompt once, so fewer chunks share more.
        # TWOSOME's VirtualHome preset takes the scripts' 8 chunks: on Food Preparation that
        # trained at 2.2-2.9 env steps/s, with 1 chunk at 6.0-9.0, the same metrics to 3 digits.
        "grad_accum_steps": 1,
        "eval_every": 4,
        "eval_episodes": 8,
        "eval_greedy": False,
    }
    for family in ("overcooked", "virtualhome", "datascicoding")
}
# Overcooked's macro-actions include no-ops that only cost a tick (e.g. "walk to the cutting
# board" while standing at it). With the paper's gamma of 0.99 such a detour costs ~1 % of the
# value, below the noise of a 64-sample batch, so SmolLM2's argmax settled on the no-op in one
# state and looped (greedy 0.159 while sampling finished the dish; docs/agents.md). gamma 0.9
# makes the detour cost ~10 %: greedy POAD then reached the oracle's 1.146 by 1,536 steps.
MINI_PRESETS["overcooked"] = {**MINI_PRESETS["overcooked"], "gamma": 0.9}
MINI_PRESETS["datascicoding"] = {
    **MINI_PRESETS["datascicoding"],
    # Generating code costs ~100x scoring an action: 16 programs per update.
    "num_envs": 4,
    "num_minibatches": 2,
    "rollout_length": 4,
    "epochs": 2,
    "eval_every": 8,
    "eval_episodes": 1,
}


def preset_for(config_class: type[PPOConfig], env_id: str, preset: str | None) -> str | None:
    """The preset name a run of ``env_id`` uses: ``"auto"`` is the env family's paper preset,
    ``"mini"`` its CPU preset (``"<family>-mini"``); ids outside the benchmark families get the
    plain defaults (None) under both, and so does ``"auto"`` for a class without a preset for
    the family; any other name is returned as given.

    Raises:
        ValueError: the algorithm cannot run the env's family (e.g. TWOSOME on open actions),
            or ``"mini"`` asks for a family preset the class does not have (the message names
            the presets it has).
    """
    if preset not in ("auto", "mini"):
        return preset
    family = family_of(env_id)
    if family is not None and family in config_class.UNSUPPORTED:
        raise ValueError(config_class.UNSUPPORTED[family])
    if family is None:
        return None
    if family not in config_class.PRESETS:
        if preset == "mini":
            name = config_class.__name__
            has = ", ".join(preset_names(config_class)) or "none"
            raise ValueError(
                f"--preset mini: {name} has no preset for the {family} family of {env_id} "
                f"(its presets: {has}); pass --preset none for the plain defaults (and --set "
                f"for CPU sizes), or give {name} PRESETS[{family!r}] (subclassing a built-in "
                f"config such as POADConfig inherits them)"
            )
        return None
    return family + (MINI_SUFFIX if preset == "mini" else "")


def preset_names(config_class: type[PPOConfig]) -> list[str]:
    """Every preset name a config class accepts (families and their ``-mini`` CPU presets)."""
    families = sorted(config_class.PRESETS)
    return families + [f + MINI_SUFFIX for f in families if f in MINI_PRESETS]


@dataclass
class PPOConfig:
    """Hyper-parameters of one PPO agent run (defaults: the reference's global defaults, docs/reference.md#presets)."""

    # -- optimisation --------------------------------------------------------------------------
    lr: float = 1e-6
    """Policy (LoRA) learning rate, AdamW eps 1e-5, no schedule."""
    critic_lr: float = 5e-5
    """Critic head learning rate, AdamW eps 1e-5, no schedule."""
    gamma: float = 0.95
    """Discount between environment steps."""
    lam: float = 0.95
    """GAE lambda (applied between steps and, for token-level backups, between tokens)."""
    epochs: int = 1
    """PPO epochs over each rollout batch."""
    num_minibatches: int = 4
    """Minibatches per epoch (drawn without replacement over the rollout's action samples)."""
    grad_accum_steps: int = 1
    """Policy chunks per minibatch with accumulated gradients (exact: memory only)."""
    clip: float = 0.2
    """PPO ratio clip, also used to clip the value update."""
    value_coef: float = 0.5
    """Weight of the value loss."""
    entropy_coef: float = 0.01
    """Weight of the entropy bonus."""
    max_grad_norm: float = 0.5
    """Grad-norm clip of each network."""
    target_kl: float | None = 0.02
    """Skip a minibatch's policy step when the shared guard's KL exceeds this (None: never).
    The KL is measured on the minibatch's gradient pass, *before* its step, so this is not a
    hard bound on the KL after the update: logged KLs above it happen (0.26 against 0.1 in the
    first fair study); docs/agents.md, "One KL guard"."""
    normalize_advantages: bool = True
    """Normalise advantages over real tokens (population std, over ``normalize_over``)."""
    normalize_over: str = "batch"
    """Where advantages are normalised: "batch" (once over the whole rollout batch, the
    default) or "minibatch" (per minibatch, the reference's rule)."""
    advantage_std_floor: float = 0.1
    """The standard deviation advantages are divided by is at least this (reward units), so a
    batch whose advantages are a critic's small noise is not scaled up to unit variance
    (0: no floor, the reference's rule). The default 0.1 is rule (b) ``keep`` of
    docs/agents.md, "Reward-free updates"."""
    skip_signal_free: bool = False
    """Take no policy step in an update whose rollout rewards are all equal (no reward signal):
    the critic still learns, the policy does not move on its noise. Applies to every agent
    (a group agent's advantages are then exactly 0; skipping also drops the entropy bonus).
    Off by default since the reward-free ablation chose rule (b) ``keep`` (batch normalisation
    with a std floor, a policy step with the entropy bonus on every update) over it
    (docs/agents.md, "Reward-free updates"); it was the default before, fair-cpu-v2's rule."""
    signal_free_entropy: bool = True
    """Keep the entropy bonus on an update whose rollout rewards are all equal (the paper's
    agents keep it on every update). False drops it there (the reward-free-update ablation's
    rule (c), docs/agents.md "Reward-free updates"); irrelevant under ``skip_signal_free``."""
    dual_clip: float | None = 3.0
    """Dual-clip PPO constant c > 1: a negative advantage's loss is at most ``c·|A|`` (the
    common large-scale RL frameworks' default 3). None: plain PPO (unbounded), the paper's
    rule; docs/reference.md lists it as a deviation. ``"none"`` (a study spec's TOML has no
    null) is read as None."""
    max_log_ratio: float = 20.0
    """The policy log-ratio is clamped to ±this before ``exp`` (no inf or NaN ratio)."""
    max_chunk_tokens: int | None = None
    """Speed, exact (not in the paper): split each minibatch's policy pass into length-sorted
    chunks of at most this many padded tokens (prompt + action) instead of ``grad_accum_steps``
    equal chunks. The gradient is the same (accumulation is exact), padding is smaller and so is
    peak memory. None: the paper's ``grad_accum_steps`` split."""
    compile_layers: bool = False
    """Speed, **not exact** (float rounding; not in the paper): run the decoder stack of the
    update's gradient passes (with ``lora_layers`` the adapted top layers, from the cached
    frozen states) through ``torch.compile(..., dynamic=True)`` (inductor, CPU or CUDA), made
    once per policy on the first pass; rollouts and evaluation stay eager. Log-probs, losses and
    gradients then differ from the eager run's by float rounding (SmolLM2, CPU preset: losses
    and KLs to ~1e-5 relative), so a run with it is not bit-identical to one without it; the
    first update pays the compile (~85 s for SmolLM2's top 8 layers on 2 busy CPU cores). A
    resumed run compiles afresh and continued bit for bit in the tests (tiny model, CPU). Needs a
    C++ compiler on CPU (triton on CUDA): checked at set-up (docs/speed.md)."""
    train_policy: bool = True
    """False trains the critic only (the critic-only case study of docs/reference.md#case-study)."""

    # -- rollouts ------------------------------------------------------------------------------
    num_envs: int = 4
    """Parallel environments ("rollout threads")."""
    rollout_length: int = 32
    """Steps per environment per update; batch = num_envs × rollout_length action samples."""
    env_executor: str = "local"
    """Where the training envs live: "local" (this process) or "ray" (one Ray actor per env,
    stepped in parallel; needs the ``ray`` extra). Trajectories are the same either way."""

    # -- model ---------------------------------------------------------------------------------
    dtype: str = "float32"
    """Dtype of the frozen base model weights ("float32", "bfloat16", "float16"); LoRA and the
    critic always train in fp32 (deviation from the reference's pure fp16, docs/reference.md#deviations)."""
    device: str = "cpu"
    """Torch device of the policy and critic."""
    lora_r: int = 8
    """LoRA rank."""
    lora_alpha: int = 16
    """LoRA alpha."""
    lora_dropout: float = 0.0
    """LoRA dropout."""
    lora_target_modules: tuple[str, ...] = ("q_proj", "v_proj")
    """Modules that get LoRA adapters."""
    lora_layers: int | None = None
    """Differs from the paper when set: adapters only on the top ``lora_layers`` decoder layers
    (the paper adapts every layer; None). Fewer parameters train. In exchange the layers below
    are frozen, so their hidden states are computed once and reused, exactly: per (observation,
    offered actions) by every later scoring pass, at rollout time and in every PPO epoch, which
    then runs (and backpropagates through) only the top layers, and per chosen sequence by the
    critic's frozen features (docs/speed.md)."""
    frozen_cache_tokens: int = 262_144
    """With ``lora_layers``: how many tokens of frozen lower-layer hidden states the policy keeps,
    once for chosen sequences and once for scoring trees (least recently used dropped first;
    each token costs hidden_size numbers of ``dtype``). An entry that fell out is recomputed, so
    this trades memory for time, never results."""
    critic_hidden_sizes: tuple[int, ...] = (1024, 512)
    """Hidden widths of the critic's MLP head on the frozen features."""
    normalization: str = "word"
    """Action-likelihood normalisation over candidates: "word", "token" or "sum"."""
    temperature: float = 0.5
    """Sampling temperature of open-action (generated) actions."""
    top_k: int = 50
    """Top-k of open-action sampling."""
    max_new_tokens: int = 128
    """Longest generated action (tokens)."""
    chat_template: bool = False
    """Show each observation to the model as one user turn of its tokenizer's chat template
    (instruct models such as SmolLM2-Instruct); a generated action is then the reply's first
    Markdown code block (the whole reply without one). False: the observation is the raw
    prompt, as in the paper."""

    # -- bookkeeping ---------------------------------------------------------------------------
    eval_every: int = 10
    """Greedy evaluation every this many updates (and after the last); 0 disables."""
    eval_episodes: int = 4
    """Episodes per evaluation."""
    eval_greedy: bool = True
    """Evaluate the greedy policy (argmax action); False samples, as the paper's evaluation
    protocol does (Table 1: stochastic, 100 episodes). Records of the run should say the same
    (``leaderboard add --run ... --stochastic``) so the curve and the board agree."""
    checkpoint_every: int = 1
    """Save a checkpoint every this many updates (and after the last)."""
    keep_checkpoints: int = 2
    """How many most recent checkpoints to keep."""

    #: Per-family overrides (the paper's Appendix J); set by each algorithm's subclass.
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {}
    #: Families the algorithm cannot run (family -> reason).
    UNSUPPORTED: ClassVar[dict[str, str]] = {}

    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form notes stored with the run (not used by the algorithms)."""

    def __post_init__(self) -> None:
        if isinstance(self.dual_clip, str) and self.dual_clip.lower() == "none":
            self.dual_clip = None  # study specs are TOML, which has no null: "none" turns it off
        self.lora_target_modules = tuple(self.lora_target_modules)
        self.critic_hidden_sizes = tuple(int(h) for h in self.critic_hidden_sizes)
        positive = {
            "lr": self.lr,
            "critic_lr": self.critic_lr,
            "clip": self.clip,
            "max_grad_norm": self.max_grad_norm,
            "temperature": self.temperature,
        }
        for name, value in positive.items():
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value!r}")
        for name in ("gamma", "lam"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value!r}")
        for name in (
            "epochs",
            "num_minibatches",
            "grad_accum_steps",
            "num_envs",
            "rollout_length",
            "lora_r",
            "lora_alpha",
            "top_k",
            "max_new_tokens",
            "checkpoint_every",
            "keep_checkpoints",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        for name in ("eval_every", "eval_episodes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        for name in ("value_coef", "entropy_coef", "lora_dropout"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if self.lora_layers is not None and (
            not isinstance(self.lora_layers, int) or self.lora_layers < 1
        ):
            raise ValueError(
                f"lora_layers must be an int >= 1 or None (every layer), got {self.lora_layers!r}"
            )
        if self.max_chunk_tokens is not None and (
            not isinstance(self.max_chunk_tokens, int) or self.max_chunk_tokens < 1
        ):
            raise ValueError(
                f"max_chunk_tokens must be an int >= 1 or None (the grad_accum_steps "
                f"split), got {self.max_chunk_tokens!r}"
            )
        if not isinstance(self.compile_layers, bool):
            raise ValueError(f"compile_layers must be true or false, got {self.compile_layers!r}")
        if not isinstance(self.frozen_cache_tokens, int) or self.frozen_cache_tokens < 0:
            raise ValueError(
                f"frozen_cache_tokens must be an int >= 0, got {self.frozen_cache_tokens!r}"
            )
        if self.normalize_over not in ("batch", "minibatch"):
            raise ValueError(
                f"normalize_over must be 'batch' or 'minibatch', got {self.normalize_over!r}"
            )
        if not self.advantage_std_floor >= 0:
            raise ValueError(f"advantage_std_floor must be >= 0, got {self.advantage_std_floor!r}")
        if self.dual_clip is not None and not self.dual_clip > 1:
            raise ValueError(
                f"dual_clip must be > 1 (3 is the usual choice) or None (off), got "
                f"{self.dual_clip!r}"
            )
        if not self.max_log_ratio > 0:
            raise ValueError(f"max_log_ratio must be > 0, got {self.max_log_ratio!r}")
        if self.target_kl is not None and not self.target_kl > 0:
            raise ValueError(f"target_kl must be > 0 or None, got {self.target_kl!r}")
        if self.normalization not in ("word", "token", "sum"):
            raise ValueError(
                f"normalization must be 'word', 'token' or 'sum', got {self.normalization!r}"
            )
        if self.env_executor not in ("local", "ray"):
            raise ValueError(f"env_executor must be 'local' or 'ray', got {self.env_executor!r}")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be float32, bfloat16 or float16, got {self.dtype!r}")
        if self.num_minibatches > self.num_envs * self.rollout_length:
            raise ValueError(
                f"num_minibatches={self.num_minibatches} exceeds the batch of "
                f"num_envs*rollout_length={self.num_envs * self.rollout_length} samples"
            )

    @property
    def batch_size(self) -> int:
        """Action samples per update."""
        return self.num_envs * self.rollout_length

    @classmethod
    def preset(cls, name: str | None, **overrides: Any) -> PPOConfig:
        """A preset's hyper-parameters, with ``overrides`` on top.

        Args:
            name: an env family (``"overcooked"``, ``"virtualhome"``, ``"datascicoding"``: the
                paper's values, Appendix J), the family's CPU preset (``"overcooked-mini"`` ...:
                the paper's values with :data:`MINI_PRESETS` on top, sized for a ~100M model on
                a laptop; see docs/agents.md), or None for the plain defaults.
            **overrides: field values that replace the preset's.
        """
        family, mini = name, False
        if name is not None and name.endswith(MINI_SUFFIX):
            family, mini = name[: -len(MINI_SUFFIX)], True
        if family is not None and family in cls.UNSUPPORTED:
            raise ValueError(f"{cls.__name__} has no {family!r} preset: {cls.UNSUPPORTED[family]}")
        if family is not None and family not in cls.PRESETS:
            raise ValueError(
                f"unknown preset {name!r} for {cls.__name__}; choose one of "
                f"{preset_names(cls)} (or None for the defaults)"
            )
        values = dict(cls.PRESETS.get(family, {})) if family is not None else {}
        if mini:
            values.update(MINI_PRESETS[family])
        values.update(overrides)
        return cls(**values)

    def replace(self, **overrides: Any) -> PPOConfig:
        """A copy with some fields replaced (validated again)."""
        return dataclasses.replace(self, **overrides)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready field values."""
        values = dataclasses.asdict(self)
        for key, value in values.items():
            if isinstance(value, tuple):
                values[key] = list(value)
        return values

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> PPOConfig:
        """Inverse of :meth:`to_dict`; unknown keys are an error naming them."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} fields {unknown}; valid: {sorted(names)}")
        return cls(**values)

    @classmethod
    def coerce_overrides(cls, pairs: dict[str, str]) -> dict[str, Any]:
        """Parse ``{"lr": "1e-5", ...}`` strings (from the CLI) into typed field values."""
        import json

        fields = {f.name: f for f in dataclasses.fields(cls)}
        parsed: dict[str, Any] = {}
        for key, text in pairs.items():
            if key not in fields:
                raise ValueError(f"unknown {cls.__name__} field {key!r}; valid: {sorted(fields)}")
            default = getattr(cls, key, None) if key != "extra" else {}
            if isinstance(default, bool):
                if text.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(f"{key} takes true/false, got {text!r}")
                parsed[key] = text.lower() in ("true", "1")
            elif isinstance(default, int):
                parsed[key] = int(text)
            elif default is None and str(fields[key].type).startswith("int"):
                parsed[key] = None if text.lower() == "none" else int(text)
            elif isinstance(default, float) or default is None:
                parsed[key] = None if text.lower() == "none" else float(text)
            elif isinstance(default, tuple):
                parsed[key] = tuple(type(default[0])(x) for x in text.split(",") if x)
            elif isinstance(default, str):
                parsed[key] = text
            else:
                parsed[key] = json.loads(text)
        return parsed

    def ppo_settings(self):  # -> PPOSettings (torch import kept lazy)
        """The :class:`~agentbench_poad.rl.ppo_loop.PPOSettings` of this config."""
        from agentbench_poad.rl.ppo_loop import PPOSettings

        # PPOSettings' fields are a subset of this config's: copy them by name.
        return PPOSettings(
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(PPOSettings)}
        )
