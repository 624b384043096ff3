"""The one protocol for everything that acts in a text environment.

An agent maps the current observation (the prompt) and, in restricted-action environments, the
list of available actions to one action string. Open-action environments (DataSciCoding) pass
``available_actions=None``. Scripted agents (oracle, random), LLM policies and users' own agents
all implement this protocol; the leaderboard and the trainer only ever call it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class Agent(Protocol):
    """Anything with ``act(observation, available_actions) -> str``.

    Optional extensions, used when present:

    * ``act_batch(observations, available_actions) -> list[str]`` for vectorised environments;
    * ``reset(seed: int | None = None)`` called at the start of every episode.
    """

    def act(self, observation: str, available_actions: Sequence[str] | None) -> str: ...


def act_batch(
    agent: Agent,
    observations: Sequence[str],
    available_actions: Sequence[Sequence[str] | None],
) -> list[str]:
    """Act on a batch, using the agent's own ``act_batch`` when it has one."""
    if len(observations) != len(available_actions):
        raise ValueError(
            f"got {len(observations)} observations but {len(available_actions)} action lists"
        )
    batched = getattr(agent, "act_batch", None)
    if callable(batched):
        actions = list(batched(list(observations), list(available_actions)))
    else:
        actions = [agent.act(o, a) for o, a in zip(observations, available_actions)]
    if len(actions) != len(observations):
        raise ValueError(f"agent returned {len(actions)} actions for {len(observations)} observations")
    return actions


def reset_agent(agent: object, seed: int | None = None) -> None:
    """Call ``agent.reset(seed=...)`` when the agent defines it."""
    reset = getattr(agent, "reset", None)
    if callable(reset):
        reset(seed=seed)
