"""The wire types of the OpenEnv server: one action, one observation, one state for every id.

They are pydantic models on OpenEnv's bases (``openenv.core.env_server.types``), so the server's
``/schema`` endpoint describes them and OpenEnv clients validate against them. One set of types
serves every registered id: restricted-action ids fill ``available_actions``, open-action ids
(DataSciCoding) leave it ``None``.
"""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

from agentbench_poad.core import MAX_ACTION_LENGTH


class TextAction(Action):
    """One action: the text the agent sends (an offered action, or code in open-action ids)."""

    text: str = Field(
        ...,
        max_length=MAX_ACTION_LENGTH,
        description="the action text; in restricted-action ids one of available_actions",
    )


class TextObservation(Observation):
    """What ``reset`` and ``step`` return: gymnasium's five values, typed.

    ``done`` (OpenEnv's field) is ``terminated or truncated``; ``reward`` is ``None`` after a
    reset, like OpenEnv's convention, and the step's reward after a step.
    """

    prompt: str = Field(..., description="the text observation")
    available_actions: list[str] | None = Field(
        default=None, description="the offered actions (restricted-action ids); None when open"
    )
    terminated: bool = Field(default=False, description="the episode ended (success or failure)")
    truncated: bool = Field(default=False, description="the episode hit its time limit")
    success: bool | None = Field(default=None, description="info['success'], when the env says")
    action_valid: bool | None = Field(
        default=None, description="info['action_valid']: the last action was taken (not a no-op)"
    )
    info: dict[str, Any] = Field(
        default_factory=dict,
        description="the env's info dict (JSON values; available_actions moved to its own field)",
    )


class TextEnvState(State):
    """``state``: which id the session serves and where its episode stands."""

    env_id: str = Field(..., description="the registered id this server serves")
    seed: int | None = Field(default=None, description="the seed of the last reset")
    episode_return: float = Field(default=0.0, description="sum of rewards since the last reset")
    episode_over: bool = Field(default=False, description="terminated or truncated")


__all__ = ["TextAction", "TextEnvState", "TextObservation"]
