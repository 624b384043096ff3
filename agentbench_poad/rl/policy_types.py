"""What the LM policy takes and gives back: its settings and its results.

* :data:`NORMALIZATIONS` -- how a restricted action's summed token log-likelihood becomes its
  score (the paper's per-word normalisation and two others).
* :class:`GenerationSettings` -- how open actions (code) are sampled, and where they stop.
* :class:`ActionSample` -- one chosen action and what the learner stores about it.
* :class:`TokenLogProbs` -- per-token log-probs and entropies of action tokens, with gradients,
  for the token-level PPO update.

They live apart from :class:`~agentbench_poad.rl.policy.LMPolicy` so that its parts (model set-up,
action scoring, generation, update passes) can share them without importing each other.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import torch

from agentbench_poad.stops import find_stop

#: Restricted-action score normalisations (docs/reference.md#action-scoring). Each maps the summed token
#: log-likelihood, the action's token count and the action text to a score.
NORMALIZATIONS: dict[str, Callable[[torch.Tensor, int, str], torch.Tensor]] = {
    "word": lambda total, n_tokens, text: total / max(1, len(text.split())),
    "token": lambda total, n_tokens, text: total / max(1, n_tokens),
    "sum": lambda total, n_tokens, text: total,
}


@dataclass
class GenerationSettings:
    """How open actions (code) are generated. Defaults follow docs/reference.md#datascicoding-grading and #action-scoring."""

    temperature: float = 0.5
    """Softmax temperature of the sampling distribution (the reference's 0.5)."""
    top_k: int = 50
    """Sample among the ``top_k`` most likely tokens; 0 disables the cut."""
    top_p: float = 1.0
    """Nucleus sampling: the smallest set of tokens whose probability reaches ``top_p``."""
    max_new_tokens: int = 128
    """Longest action, in tokens."""
    stop_strings: tuple[str, ...] = ("\nreturn",)
    """Literal strings; generation stops *before* the first occurrence and drops it."""
    stop_patterns: tuple[str, ...] = (r"(?m)^[ \t]*return\b",)
    """Regular expressions; like ``stop_strings``. The default stops before any line that
    starts with ``return`` at any indentation: the env's template adds ``return model`` itself
    (docs/reference.md#deviation-return-stop; the reference stopped *after* the ``▁return`` token and kept it)."""

    def __post_init__(self) -> None:
        if isinstance(self.stop_strings, str):
            self.stop_strings = (self.stop_strings,)
        if isinstance(self.stop_patterns, str):
            self.stop_patterns = (self.stop_patterns,)
        self.stop_strings = tuple(self.stop_strings)
        self.stop_patterns = tuple(self.stop_patterns)
        if not self.temperature > 0:
            raise ValueError(
                f"GenerationSettings.temperature must be > 0, got {self.temperature!r} "
                "(use act(..., greedy=True) for argmax decoding)"
            )
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"GenerationSettings.top_k must be an int >= 0, got {self.top_k!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"GenerationSettings.top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(
                f"GenerationSettings.max_new_tokens must be an int >= 1, got {self.max_new_tokens!r}"
            )
        if any(not s for s in self.stop_strings):
            raise ValueError("GenerationSettings.stop_strings must not contain empty strings")
        for pattern in self.stop_patterns:
            re.compile(pattern)  # fail early on a bad pattern

    def find_stop(self, text: str, final: bool = False) -> int | None:
        """Index in ``text`` where the action must end (the start of a stop match), or None.

        A pattern match that reaches the end of ``text`` only counts when ``final`` is true:
        ``return\\b`` matches ``"...\\nreturn"`` but the next token could make it ``returned``.
        """
        return find_stop(text, self.stop_strings, self.stop_patterns, final=final)


@dataclass
class ActionSample:
    """One chosen action and what the learner needs to store about it."""

    text: str
    """The chosen action string (what is sent to the environment)."""
    index: int
    """Index in ``available_actions``; -1 for generated (open) actions."""
    token_ids: list[int]
    """The action's tokens, as appended after the prompt's tokens."""
    token_log_probs: list[float]
    """Per-token log-probs of ``token_ids`` under the untempered LM when the action was chosen."""
    log_prob: float
    """Log-prob of choosing this action: restricted = log-softmax of the normalised scores over
    the candidates; open = ``sum(token_log_probs)``."""
    candidate_log_probs: list[float] | None = None
    """Restricted actions: the whole categorical over ``available_actions`` (log-probs)."""
    sampling_log_probs: list[float] | None = None
    """Open actions: per-token log-probs under the distribution actually sampled from
    (temperature, top-k, top-p); None for greedy decoding."""


@dataclass
class TokenLogProbs:
    """Per-token log-probs of action tokens, with gradients (token-level PPO)."""

    log_probs: torch.Tensor
    """(B, L) float32: log p(token j | prompt, tokens < j); 0 at pads."""
    entropy: torch.Tensor
    """(B, L) float32: full-vocabulary entropy at each action position; 0 at pads."""
    mask: torch.Tensor
    """(B, L) bool: True at real action tokens."""
    candidate_log_probs: list[torch.Tensor] | None = None
    """Restricted actions scored in the same pass: per sample, the ``(K_i,)`` log-categorical
    over its offered actions (what the agent samples from); None when not computed."""


__all__ = ["NORMALIZATIONS", "ActionSample", "GenerationSettings", "TokenLogProbs"]
