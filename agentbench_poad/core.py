"""The text-environment contract shared by every environment family.

Contract (see DESIGN.md):

* ``observation_space`` and ``action_space`` are :class:`gymnasium.spaces.Text` over
  :data:`CHARSET` (printable ASCII). Observations, and ``info`` texts that come from outside
  the env's code, are passed through :func:`to_text`, which escapes anything outside the
  charset and caps the length, so every observation is in the space whatever the agent wrote.
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

import re
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


#: What :func:`to_text` puts in place of the middle of an over-long text.
TRUNCATION_MARKER = "\n...[truncated]...\n"


def escape_char(c: str) -> str:
    """A visible, printable-ASCII spelling of one character: ``\\x00``, ``\\u202e``, ``\\U0001f600``.

    The Python escape of the code point, so a lone surrogate (``\\udc80``, what invalid UTF-8
    decodes to with ``surrogateescape``) is spelled too.
    """
    o = ord(c)
    if o < 0x100:
        return f"\\x{o:02x}"
    if o < 0x10000:
        return f"\\u{o:04x}"
    return f"\\U{o:08x}"


def to_text(text: str, max_length: int = MAX_OBSERVATION_LENGTH) -> str:
    """Make ``text`` a member of a :func:`text_space` of ``max_length``: the one sanitiser.

    Every text that reaches an observation or an ``info`` field from outside an env's own code
    (sandbox output, exception messages, echoed actions and code, dataset names and values)
    goes through here. Characters outside :data:`CHARSET` (NUL and other control characters,
    bidi overrides, lone surrogates, any non-ASCII) are written as escapes
    (:func:`escape_char`), and an over-long text keeps its head and tail around
    :data:`TRUNCATION_MARKER`, so nothing raises and the reader can still see what was there.
    Anything that is not a ``str`` is first turned into one with ``str()``.
    """
    if not isinstance(text, str):
        text = str(text)
    if max_length < 0:
        raise ValueError(f"max_length must be >= 0, got {max_length}")
    escaped = _escape(text)
    if len(escaped) <= max_length:
        return escaped
    marker = TRUNCATION_MARKER if max_length >= 4 * len(TRUNCATION_MARKER) else ""
    keep = max_length - len(marker)
    head, tail = keep // 2, keep - keep // 2
    # Every character escapes to at least one, so the ends of the escaped text are the escaped
    # ends of the text (a 1 MB line costs no more than its two ends).
    end = _escape(text[max(0, len(text) - tail) :])[-tail:] if tail else ""
    return _escape(text[:head])[:head] + marker + end


def _escape(text: str) -> str:
    if _CHARSET_SET.issuperset(text):
        return text
    return "".join(c if c in _CHARSET_SET else escape_char(c) for c in text)


#: Characters a reader of a record or report page should never get raw: C0/C1 controls (tab and
#: newlines aside), DEL, bidi controls, lone surrogates and the non-characters U+FFFE/U+FFFF.
_UNSAFE_FOR_DISPLAY = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
    "\u2066-\u2069\ud800-\udfff\ufffe\uffff]"
)


def display_text(text: str) -> str:
    """``text`` with the characters of :data:`_UNSAFE_FOR_DISPLAY` escaped like :func:`to_text`.

    For texts shown to people (report pages) rather than put in a Text space: printable
    Unicode (``±``, ``×``, accents) stays as it is; no length cap.
    """
    return _UNSAFE_FOR_DISPLAY.sub(lambda m: escape_char(m.group()), text)


def display_safe(value: Any) -> Any:
    """A copy of ``value`` (dicts, lists, tuples walked) with :func:`display_text` on every str."""
    if isinstance(value, str):
        return display_text(value)
    if isinstance(value, dict):
        return {display_safe(k): display_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [display_safe(v) for v in value]
    if isinstance(value, tuple):
        return tuple(display_safe(v) for v in value)
    return value


def check_action_type(action: object) -> str:
    """Raise :class:`TypeError` unless ``action`` is a ``str``."""
    if not isinstance(action, str):
        raise TypeError(
            f"text environments take actions of type str, got {type(action).__name__}: {action!r}"
        )
    return action


def invalid_action_note(action: str, available_actions: list[str] | None = None) -> str:
    """The line an observation carries after an unavailable action."""
    shown = _escape(action[:80])  # the agent's text: escaped, so the note fits any Text space
    if len(shown) > 80 or len(action) > 80:
        shown = shown[:77] + "..."
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
