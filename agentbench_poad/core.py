"""The text-environment contract shared by every environment family.

Contract (see DESIGN.md):

* ``observation_space`` and ``action_space`` are :class:`gymnasium.spaces.Text` over
  :data:`CHARSET` (printable ASCII). Observations are passed through :func:`to_text`, which
  escapes anything outside the charset, so every observation is in the space.
* ``reset(seed=...)`` returns ``(prompt, info)``; all randomness flows from ``self.np_random``.
* ``info["available_actions"]`` is a list of strings in restricted-action environments and
  ``None`` in open-action ones; ``info["action_valid"]`` says whether the last action was taken.
* An action that is not available is a no-op step with the env's ``invalid_action_penalty``,
  ``info["action_valid"] = False`` and a line in the next observation saying why.
* A non-``str`` action raises :class:`TypeError`; ``step`` before ``reset`` or after the episode
  ended raises :class:`gymnasium.error.ResetNeeded`.

Families subclass :class:`TextEnv` and implement ``_reset`` and ``_step``; the base class owns the
bookkeeping so that the contract is enforced in one place.
"""

from __future__ import annotations

import string
from typing import Any, ClassVar

import gymnasium as gym
from gymnasium.error import ResetNeeded
from gymnasium.spaces import Text

#: Characters that may appear in observations and actions.
CHARSET: str = string.printable
_CHARSET_SET = frozenset(CHARSET)

#: Default maximum lengths of the text spaces (characters).
MAX_OBSERVATION_LENGTH = 65_536
MAX_ACTION_LENGTH = 16_384


def text_space(max_length: int, *, min_length: int = 0) -> Text:
    """A :class:`~gymnasium.spaces.Text` space over :data:`CHARSET`."""
    return Text(max_length=max_length, min_length=min_length, charset=CHARSET)


def to_text(text: str, max_length: int = MAX_OBSERVATION_LENGTH) -> str:
    """Make ``text`` a member of a :func:`text_space` of ``max_length``.

    Characters outside :data:`CHARSET` are written as Python escapes (``\\u2581``) and an
    over-long text keeps its head and tail around a marker, so nothing raises and the reader
    can still see what was there.
    """
    if not all(c in _CHARSET_SET for c in text):
        text = "".join(
            c if c in _CHARSET_SET else c.encode("ascii", "backslashreplace").decode("ascii")
            for c in text
        )
    if len(text) > max_length:
        marker = "\n...[truncated]...\n"
        keep = max_length - len(marker)
        head = keep // 2
        text = text[:head] + marker + text[len(text) - (keep - head) :]
    return text


def check_action_type(action: object) -> str:
    """Raise :class:`TypeError` unless ``action`` is a ``str``."""
    if not isinstance(action, str):
        raise TypeError(
            f"text environments take actions of type str, got {type(action).__name__}: {action!r}"
        )
    return action


def invalid_action_note(action: str, available_actions: list[str] | None = None) -> str:
    """The line an observation carries after an unavailable action."""
    shown = action if len(action) <= 80 else action[:77] + "..."
    note = f'The action "{shown}" is not available here, so nothing happened.'
    if available_actions:
        note += " Choose one of the listed actions."
    return note


class TextEnv(gym.Env[str, str]):
    """Base class of all text environments of the package.

    Subclasses set ``observation_space``/``action_space`` (via :func:`text_space`) and implement
    :meth:`_reset` and :meth:`_step`. ``_step`` receives an action that is already known to be a
    ``str`` and is only called while an episode is running.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}

    #: Reward of an unavailable action (a no-op step). Families override it.
    invalid_action_penalty: float = 0.0

    _episode_over: bool | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        observation, info = self._reset(options or {})
        self._episode_over = False
        return observation, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        check_action_type(action)
        if self._episode_over is None:
            raise ResetNeeded(f"{type(self).__name__}.step() called before reset(); call reset()")
        if self._episode_over:
            raise ResetNeeded(
                f"{type(self).__name__}.step() called after the episode ended; call reset()"
            )
        observation, reward, terminated, truncated, info = self._step(action)
        self._episode_over = bool(terminated or truncated)
        return observation, float(reward), bool(terminated), bool(truncated), info

    # -- to implement -----------------------------------------------------------------------
    def _reset(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        raise NotImplementedError
