"""The base-model agent: an untrained language model acting on its own (``lm:MODEL``).

Every board can show what a pre-trained model does before any RL: ``agentbench-poad evaluate
--agent lm:smollm2-135m --env Overcooked-TomatoSalad-v0`` evaluates SmolLM2 with no user code.
The agent is :class:`~agentbench_poad.rl.policy.LMPolicy` with no training: in restricted-action
environments it samples from the softmax of the offered actions' word-normalised
log-likelihoods (docs/reference.md#action-scoring); in open-action environments it generates code with the
reference's sampling settings. It samples by default, like the paper's evaluation protocol
(stochastic, 100 episodes); ``greedy=True`` takes the most likely action instead.

``MODEL`` is anything ``load_causal_lm`` takes: a named model (``smollm2-135m``, fetched on first
use), a ``.gguf`` file, a local directory or a hub id. On the board the agent is called ``base``
(``base-greedy`` when greedy; ``-chat`` is appended with ``chat_template=True``) and the
record's ``model.base`` is ``MODEL``, so the row reads
``base (smollm2-135m)`` next to ``poad (smollm2-135m)``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from agentbench_poad.version import __version__

#: The agent-spec prefix handled by :func:`agentbench_poad.leaderboard.protocol.load_factory`.
SPEC_PREFIX = "lm:"


class BaseModelFactory:
    """Builds base-model agents for one model, loading the model once and sharing it.

    The leaderboard protocol builds a fresh agent per evaluation seed (and after a timed-out
    action); each gets its own sampling generator, all share one loaded policy. The factory
    declares the record's base model (``MODEL``) and decoding (:meth:`declared_provenance`).

    Args:
        model: Named model, ``.gguf`` file, local directory or hub id.
    """

    def __init__(self, model: str) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError(
                "the lm: agent spec needs a model, e.g. 'lm:smollm2-135m' or 'lm:path/to/model_dir'"
            )
        self.model = model.strip()
        self.__name__ = f"{SPEC_PREFIX}{self.model}"

    def __repr__(self) -> str:
        return f"BaseModelFactory({self.model!r})"

    def declared_provenance(self, agent_kwargs: dict[str, Any]) -> dict[str, Any]:
        """What the leaderboard protocol records: the base model and whether it is greedy."""
        declared = {"base_model": self.model, "greedy": bool(agent_kwargs.get("greedy", False))}
        if agent_kwargs.get("adapter"):
            declared["adapter"] = str(agent_kwargs["adapter"])
        return declared

    def __call__(
        self,
        seed: int | None = 0,
        *,
        greedy: bool = False,
        dtype: str = "float32",
        device: str = "cpu",
        normalization: str = "word",
        chat_template: bool = False,
        adapter: str | None = None,
    ) -> BaseModelAgent:
        """A base-model agent (the keyword arguments are ``--agent-kwargs``).

        Args:
            seed: Seed of the agent's sampling generator (the protocol re-seeds it per episode).
            greedy: Take the most likely action instead of sampling.
            dtype: Base-model dtype (``"float32"``, ``"bfloat16"``, ``"float16"``, ``"auto"``).
            device: ``"cpu"``, ``"cuda"``, ... or ``"auto"``.
            normalization: Restricted-action score normalisation (``"word"``, the paper's;
                ``"token"``; ``"sum"``).
            chat_template: Show each observation as a user turn of the model's chat template;
                generated code is the reply's first code block (``LMPolicy(chat_template=...)``).
            adapter: A LoRA adapter folder (peft format, the paper's settings: r 8, alpha 16,
                ``q_proj``/``v_proj``) loaded onto the model, e.g. one trained elsewhere (TRL;
                ``evaluate --adapter DIR`` sets it). The agent is then called ``lm-adapter``.
        """
        policy = _load_policy(
            self.model,
            dtype=dtype,
            device=device,
            normalization=normalization,
            chat_template=chat_template,
            adapter=adapter,
        )
        return BaseModelAgent(policy, self.model, greedy=greedy, seed=seed, adapter=adapter)


@functools.lru_cache(maxsize=1)
def _load_policy(
    model: str,
    *,
    dtype: str,
    device: str,
    normalization: str,
    chat_template: bool = False,
    adapter: str | None = None,
) -> Any:
    """The policy for ``model``; the last one loaded is kept, so every factory built from the
    same spec (the protocol builds one per cell) shares it. ``_load_policy.cache_clear()``
    frees it."""
    from agentbench_poad.models import LoraSettings
    from agentbench_poad.rl.policy import LMPolicy

    # A freshly added LoRA adapter has B = 0, so its output is exactly the base model's.
    # (``lora=None`` would also keep a second, frozen copy of all weights for a critic this
    # agent never uses.)
    policy = LMPolicy(
        model,
        lora=LoraSettings(),
        dtype=dtype,
        device=device,
        normalization=normalization,
        chat_template=chat_template,
    )
    if adapter is not None:
        policy.load_adapter(adapter)
    return policy


class BaseModelAgent:
    """An untrained LM as an agent (``act(observation, available_actions) -> str``).

    Args:
        policy: The loaded :class:`~agentbench_poad.rl.policy.LMPolicy`.
        model: The model reference it was loaded from (recorded as the base model).
        greedy: Argmax instead of sampling.
        seed: Seed of the sampling generator; ``reset(seed=...)`` re-seeds it.
    """

    def __init__(
        self,
        policy: Any,
        model: str,
        *,
        greedy: bool = False,
        seed: int | None = 0,
        adapter: str | None = None,
    ) -> None:
        self.policy = policy.as_agent(greedy=greedy, seed=seed)
        self.base_model = model
        self.greedy = greedy
        self.adapter = adapter
        # the board's row name: "base" ("lm-adapter" with an adapter), plus "-greedy" /
        # "-chat" for those settings
        self.name = (
            ("lm-adapter" if adapter else "base")
            + ("-greedy" if greedy else "")
            + ("-chat" if policy.chat_template else "")
        )
        self.version = _version(model, policy.normalization, policy.chat_template)

    def reset(self, seed: int | None = None) -> None:
        """Re-seed the sampling generator (a no-op for ``seed=None``)."""
        self.policy.reset(seed=seed)

    def act(self, observation: str, available_actions: Sequence[str] | None) -> str:
        """One action for one observation."""
        return self.policy.act(observation, available_actions)

    def act_batch(
        self, observations: Sequence[str], available_actions: Sequence[Sequence[str] | None]
    ) -> list[str]:
        """One action per observation (one batched scoring pass)."""
        return self.policy.act_batch(observations, available_actions)


def _version(model: str, normalization: str, chat_template: bool = False) -> str:
    """The package version, the scoring rule, the prompt layout and, for a named model, its
    pinned source."""
    from agentbench_poad.models import NAMED_MODELS

    text = f"agentbench-poad {__version__}, LMPolicy {normalization}-normalised"
    if chat_template:
        text += ", chat template"
    entry = NAMED_MODELS.get(model)
    if entry is not None:
        # a model joined from chunk wheels is named by its GGUF's digest, not the assembler's
        digest = entry.gguf_sha256 if entry.chunks and entry.gguf_sha256 else entry.sha256
        text += f", {entry.source_text} (sha256 {digest[:12]})"
    return text


def make_base_model_agent(
    model: str = "smollm2-135m",
    seed: int | None = 0,
    *,
    greedy: bool = False,
    dtype: str = "float32",
    device: str = "cpu",
    normalization: str = "word",
    chat_template: bool = False,
) -> BaseModelAgent:
    """A base-model agent for ``model`` (the factory behind ``lm:MODEL``)."""
    return BaseModelFactory(model)(
        seed,
        greedy=greedy,
        dtype=dtype,
        device=device,
        normalization=normalization,
        chat_template=chat_template,
    )


__all__ = ["SPEC_PREFIX", "BaseModelAgent", "BaseModelFactory", "make_base_model_agent"]
