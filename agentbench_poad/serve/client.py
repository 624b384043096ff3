"""Our side of the wire: an OpenEnv ``EnvClient`` for the server, and a gymnasium-shaped wrapper.

* :class:`TextEnvClient` is OpenEnv's async ``EnvClient`` typed with our action, observation and
  state (``.sync()`` gives OpenEnv's synchronous wrapper). Errors the server reports raise
  :class:`ServerError` with the server's code (``EXECUTION_ERROR``, ``VALIDATION_ERROR``,
  ``CAPACITY_REACHED``, ...).
* :class:`RemoteTextEnv` plays a served id like ``gym.make(id)``: ``reset(seed=...)`` returns
  ``(prompt, info)`` and ``step(text)`` the five gymnasium values, with ``info`` rebuilt as the
  env wrote it (``available_actions`` included), so in-process agents run unchanged against a
  server.
"""

from __future__ import annotations

from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from agentbench_poad.serve.models import TextAction, TextEnvState, TextObservation


class ServerError(RuntimeError):
    """An error reply of the server (``code`` is OpenEnv's ``WSErrorCode`` value)."""

    def __init__(self, message: str, code: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(f"{message} (code: {code})")
        self.code = code
        self.data = data or {}


class TextEnvClient(EnvClient[TextAction, TextObservation, TextEnvState]):
    """OpenEnv client of an agentbench-poad server (``base_url`` ``http://host:port``)."""

    def _step_payload(self, action: TextAction | str) -> dict[str, Any]:
        if isinstance(action, str):
            action = TextAction(text=action)
        return action.model_dump(exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[TextObservation]:
        fields = dict(payload.get("observation", {}))
        observation = TextObservation(
            **fields, reward=payload.get("reward"), done=bool(payload.get("done", False))
        )
        return StepResult(
            observation=observation, reward=payload.get("reward"), done=observation.done
        )

    def _parse_state(self, payload: dict[str, Any]) -> TextEnvState:
        return TextEnvState(**payload)

    async def _send_and_receive(self, message: dict[str, Any]) -> dict[str, Any]:
        await self._send(message)
        response = await self._receive()
        if response.get("type") == "error":
            data = response.get("data", {})
            raise ServerError(
                str(data.get("message", "unknown error")), str(data.get("code", "UNKNOWN")), data
            )
        return response

    async def disconnect(self) -> None:
        """Send OpenEnv's close message and let the server close the connection (its session
        ends first); close from this side only if it does not within a few seconds."""
        import asyncio

        if self._ws is None:
            return
        try:
            await self._send({"type": "close"})
            await asyncio.wait_for(self._ws.wait_closed(), timeout=5.0)
        except Exception:  # noqa: BLE001 - best effort: the connection may already be gone
            pass
        try:
            await self._ws.close()
        except Exception:  # noqa: BLE001
            pass
        self._ws = None

    async def send_raw(self, text: str) -> dict[str, Any]:
        """Send ``text`` as it is (no JSON encoding) and return the server's reply, errors
        included (robustness tests, debugging)."""
        await self._ensure_connected()
        assert self._ws is not None
        await self._ws.send(text)
        return await self._receive()


def info_of(observation: TextObservation) -> dict[str, Any]:
    """The env's info dict as the env wrote it (``available_actions`` put back)."""
    return {**observation.info, "available_actions": observation.available_actions}


class RemoteTextEnv:
    """A served id with gymnasium's ``reset``/``step`` (synchronous; one session).

    Args:
        base_url: The server (``http://127.0.0.1:8000``).
        message_timeout: Seconds to wait for one reply (a DataSciCoding grading takes up to
            ~35 s).

    The connection opens at the first call (``reset``), not here: the server closes a
    connection that sends nothing within its handshake timeout, and a trainer may build this
    long before its first episode.
    """

    def __init__(self, base_url: str, *, message_timeout: float = 120.0) -> None:
        self.client = TextEnvClient(base_url, message_timeout_s=message_timeout).sync()
        self.last: TextObservation | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        kwargs: dict[str, Any] = {}
        if seed is not None:
            kwargs["seed"] = seed
        if options is not None:
            kwargs["options"] = options
        result = self.client.reset(**kwargs)
        self.last = result.observation
        return result.observation.prompt, info_of(result.observation)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        result = self.client.step(TextAction(text=action))
        obs = self.last = result.observation
        return obs.prompt, float(obs.reward or 0.0), obs.terminated, obs.truncated, info_of(obs)

    def state(self) -> TextEnvState:
        return self.client.state()

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> RemoteTextEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def error_reply(reply: dict[str, Any]) -> tuple[str, str] | None:
    """``(code, message)`` of an error reply of :meth:`TextEnvClient.send_raw`, else None."""
    if reply.get("type") != "error":
        return None
    data = reply.get("data", {})
    return str(data.get("code")), str(data.get("message"))


__all__ = ["RemoteTextEnv", "ServerError", "TextEnvClient", "error_reply", "info_of"]
