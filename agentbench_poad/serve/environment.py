"""One registered id as an OpenEnv ``Environment``: a gymnasium env behind each session.

OpenEnv's server builds one :class:`ServedEnv` per WebSocket session (the factory made by
:func:`env_factory`) and calls its ``reset``/``step``/``close`` in that session's own worker
thread. The gymnasium env is made on the first ``reset`` (so the server's stateless endpoints,
which build and close a throwaway instance, never start a sandbox) and closed when the session
ends: the client closes it, drops its connection, or stays idle past the server's session
timeout. A closed instance refuses further calls with a message that says why. Every reset
starts a new ``state.episode_id`` (a fresh uuid, or the id the client names).

Every observation carries gymnasium's values unchanged (prompt, reward, terminated, truncated,
available actions, info), so an episode played through the server equals the same seeded episode
played in-process (``tests/test_serve_parity.py``).
"""

from __future__ import annotations

import functools
import math
import threading
import uuid
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

from agentbench_poad.serve.limits import check_seed
from agentbench_poad.serve.models import TextAction, TextEnvState, TextObservation
from agentbench_poad.version import __version__

#: Longest ``episode_id`` a client may name at reset.
MAX_EPISODE_ID_LENGTH = 128

_live_lock = threading.Lock()
_live: set[int] = set()


def live_envs() -> int:
    """How many served gymnasium envs are open in this process (made and not yet closed)."""
    with _live_lock:
        return len(_live)


class SessionClosed(RuntimeError):
    """A call on a session whose env was already closed (idle timeout or server shutdown)."""


class NotReset(RuntimeError):
    """``step`` on a session that was never reset (the HTTP ``/step`` endpoint always is one)."""


def json_safe(value: Any) -> Any:
    """``value`` as JSON data: numbers, strings, booleans, None, lists and string-keyed dicts.

    numpy scalars become Python numbers, tuples lists, non-finite floats strings (JSON has no
    NaN) and anything else its ``repr``, so an env's info always crosses the wire.
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item) and getattr(value, "shape", None) == ():
        return json_safe(item())
    return repr(value)


def to_observation(
    prompt: str,
    info: Mapping[str, Any],
    *,
    reward: float | None = None,
    terminated: bool = False,
    truncated: bool = False,
) -> TextObservation:
    """The wire observation of one gymnasium ``reset``/``step`` result."""
    actions = info.get("available_actions")
    rest = {k: v for k, v in info.items() if k != "available_actions"}
    success = info.get("success")
    valid = info.get("action_valid")
    return TextObservation(
        prompt=prompt,
        available_actions=None if actions is None else [str(a) for a in actions],
        reward=reward,
        done=bool(terminated or truncated),
        terminated=bool(terminated),
        truncated=bool(truncated),
        success=None if success is None else bool(success),
        action_valid=None if valid is None else bool(valid),
        info=json_safe(rest),
    )


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


class ServedEnv(Environment[TextAction, TextObservation, TextEnvState]):
    """A registered id behind one OpenEnv session.

    Args:
        env_id: A registered id (``agentbench-poad envs``).
        env_kwargs: Keyword arguments for ``gym.make``.
    """

    # Each session owns its own gymnasium env and nothing is shared between instances.
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self._env: gym.Env | None = None
        self._closed = False
        self._env_reset = False
        self._state = TextEnvState(env_id=env_id)

    # -- the gymnasium env ----------------------------------------------------------------
    def _gym_env(self) -> gym.Env:
        if self._closed:
            raise SessionClosed(
                f"this {self.env_id} session was closed (idle past the server's session "
                "timeout, or the server is shutting down); open a new connection"
            )
        if self._env is None:
            import agentbench_poad  # noqa: F401 - registers the ids

            self._env = gym.make(self.env_id, **self.env_kwargs)
            with _live_lock:
                _live.add(id(self))
        return self._env

    # -- OpenEnv Environment ----------------------------------------------------------------
    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> TextObservation:
        if kwargs:  # names cut short: a client's keys are its input, not ours to echo whole
            names = sorted(kwargs)
            shown = ", ".join(_short(name) for name in names[:5])
            more = f" and {len(names) - 5} more" if len(names) > 5 else ""
            raise ValueError(f"reset takes seed, episode_id and options; unknown: {shown}{more}")
        if episode_id is not None and not (
            isinstance(episode_id, str) and 0 < len(episode_id) <= MAX_EPISODE_ID_LENGTH
        ):
            raise ValueError(
                f"episode_id must be a string of 1 to {MAX_EPISODE_ID_LENGTH} characters "
                "(or left out: the server makes a fresh one)"
            )
        seed = check_seed(seed)  # before gymnasium converts it (a 5,000-digit seed, `true`)
        env = self._gym_env()
        prompt, info = env.reset(seed=seed, options=options)
        self._env_reset = True
        # A fresh id for every episode unless the client names its own (OpenEnv's tracking id).
        self._state = TextEnvState(
            env_id=self.env_id, seed=seed, episode_id=episode_id or uuid.uuid4().hex
        )
        return to_observation(prompt, info)

    def step(
        self, action: TextAction, timeout_s: float | None = None, **kwargs: Any
    ) -> TextObservation:
        if not self._env_reset and not self._closed:
            raise NotReset(
                "step before reset: reset the session first (OpenEnv's HTTP /step gets a fresh "
                "env on every request; play episodes over the WebSocket /ws)"
            )
        env = self._gym_env()
        # gymnasium raises ResetNeeded after the episode ended, with a message the client
        # receives as the error.
        prompt, reward, terminated, truncated, info = env.step(action.text)
        state = self._state
        state.step_count += 1
        state.episode_return += float(reward)
        state.episode_over = bool(terminated or truncated)
        return to_observation(
            prompt, info, reward=float(reward), terminated=terminated, truncated=truncated
        )

    @property
    def state(self) -> TextEnvState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        from agentbench_poad.registration import env_facts

        facts = env_facts(self.env_id)
        return EnvironmentMetadata(
            name=self.env_id,
            description=facts.description or f"agentbench-poad {self.env_id}",
            version=f"agentbench-poad {__version__}",
            author="agentbench-poad developers",
        )

    def close(self) -> None:
        """Close the gymnasium env (its sandbox too); later calls raise :class:`SessionClosed`."""
        self._closed = True
        env, self._env = self._env, None
        if env is not None:
            try:
                env.close()
            finally:
                with _live_lock:
                    _live.discard(id(self))


def env_factory(env_id: str, env_kwargs: Mapping[str, Any] | None = None):
    """The per-session factory OpenEnv's server calls (a ``functools.partial`` of the class,
    which is how OpenEnv recognises a concurrency-safe environment)."""
    return functools.partial(ServedEnv, env_id, dict(env_kwargs or {}))


__all__ = [
    "NotReset",
    "ServedEnv",
    "SessionClosed",
    "env_factory",
    "json_safe",
    "live_envs",
    "to_observation",
]
