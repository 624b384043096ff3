"""The server: OpenEnv's ``create_app`` over :class:`~agentbench_poad.serve.environment.ServedEnv`.

OpenEnv's HTTP server gives every WebSocket connection (``/ws``, what ``EnvClient`` speaks) its
own environment and closes it when the connection ends; :func:`make_app` only chooses the id,
the session cap and the idle timeout. :func:`serve` runs it under uvicorn (``agentbench-poad
serve ID``); :class:`ServerThread` runs it in a background thread of this process (tests,
examples, notebooks).

Limits on bad clients:

* a WebSocket frame over ``max_message_bytes`` (default 1 MiB) closes that connection (close
  code 1009) and ends its session; an action over ``MAX_ACTION_LENGTH`` characters, a
  non-string action, a malformed JSON message or an unknown message type get an error reply and
  the session stays open;
* a session idle for ``session_timeout`` seconds is closed by OpenEnv's reaper (which looks
  every ``max(timeout / 4, 5)`` seconds): its env is closed and its next call gets an error;
* at most ``max_sessions`` sessions at once: the next connection gets a ``CAPACITY_REACHED``
  error.

OpenEnv's stateless HTTP ``/reset`` and ``/step`` build a fresh env per request (a ``/step``
there always answers 409: the env was never reset); episodes are played over ``/ws``.
"""

from __future__ import annotations

import asyncio
import difflib
import threading
import time
from collections.abc import Mapping
from typing import Any

#: Default cap on concurrent sessions of one server.
DEFAULT_MAX_SESSIONS = 16
#: Default idle time (seconds) after which a session is closed.
DEFAULT_SESSION_TIMEOUT = 600.0
#: Default largest WebSocket message the server reads (bytes).
DEFAULT_MAX_MESSAGE_BYTES = 1 << 20


class UnknownEnvId(ValueError):
    """An id that is not registered (the message lists close ids)."""


def check_env_id(env_id: str) -> str:
    """``env_id`` if it is registered, else :class:`UnknownEnvId` with close matches."""
    import gymnasium as gym

    import agentbench_poad  # noqa: F401 - registers the ids

    if env_id in gym.registry:
        return env_id
    from agentbench_poad.registration import registered_ids

    close = difflib.get_close_matches(env_id, registered_ids(), n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    raise UnknownEnvId(
        f"unknown environment id {env_id!r}{hint} (see `agentbench-poad envs` for the ids)"
    )


def make_app(
    env_id: str,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    session_timeout: float | None = DEFAULT_SESSION_TIMEOUT,
):
    """The FastAPI app that serves ``env_id`` (OpenEnv's ``create_app``).

    Args:
        env_id: A registered id; checked here (:class:`UnknownEnvId`).
        env_kwargs: Keyword arguments for ``gym.make`` of every session's env.
        max_sessions: Concurrent sessions (one env each).
        session_timeout: Seconds of inactivity after which a session is closed (None: never).
    """
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.types import ConcurrencyConfig

    from agentbench_poad.serve.environment import env_factory
    from agentbench_poad.serve.models import TextAction, TextObservation

    check_env_id(env_id)
    app = create_app(
        env_factory(env_id, env_kwargs),
        TextAction,
        TextObservation,
        env_name=env_id,
        concurrency_config=ConcurrencyConfig(
            max_concurrent_envs=max_sessions, session_timeout=session_timeout
        ),
    )
    from fastapi.responses import JSONResponse

    from agentbench_poad.serve.environment import NotReset

    async def not_reset(request, exc: NotReset):  # noqa: ANN001 - a starlette Request
        return JSONResponse(status_code=409, content={"detail": str(exc)})

    app.add_exception_handler(NotReset, not_reset)  # HTTP /step: a 409 that says why
    return app


def _uvicorn_config(app, host: str, port: int, max_message_bytes: int, log_level: str):
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        ws_max_size=max_message_bytes,
        log_level=log_level,
        lifespan="on",  # OpenEnv starts its idle-session reaper on startup
    )


def serve(
    env_id: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    env_kwargs: Mapping[str, Any] | None = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    session_timeout: float | None = DEFAULT_SESSION_TIMEOUT,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    log_level: str = "info",
) -> None:
    """Serve ``env_id`` until interrupted (``agentbench-poad serve``)."""
    import uvicorn

    app = make_app(
        env_id, env_kwargs=env_kwargs, max_sessions=max_sessions, session_timeout=session_timeout
    )
    uvicorn.Server(_uvicorn_config(app, host, port, max_message_bytes, log_level)).run()


class ServerThread:
    """The server in a background thread of this process (``with ServerThread(id) as s:``).

    ``port=0`` picks a free port; :attr:`base_url` is where clients connect. Leaving the
    ``with`` block stops the server, which closes every open session's env.
    """

    def __init__(
        self,
        env_id: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        env_kwargs: Mapping[str, Any] | None = None,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        session_timeout: float | None = DEFAULT_SESSION_TIMEOUT,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        log_level: str = "warning",
        start_timeout: float = 60.0,
    ) -> None:
        import uvicorn

        self.env_id = env_id
        self.app = make_app(
            env_id,
            env_kwargs=env_kwargs,
            max_sessions=max_sessions,
            session_timeout=session_timeout,
        )
        self._server = uvicorn.Server(
            _uvicorn_config(self.app, host, port, max_message_bytes, log_level)
        )
        self._server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
        self._host = host
        self._start_timeout = start_timeout
        self._thread: threading.Thread | None = None
        self.port: int | None = None

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("the server is not running; call start() or use `with`")
        return f"http://{self._host}:{self.port}"

    def start(self) -> ServerThread:
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._server.serve()), name="agentbench-serve", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + self._start_timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"the {self.env_id} server did not start (see its log)")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"the {self.env_id} server did not start in time")
            time.sleep(0.02)
        (sock,) = {s for server in self._server.servers for s in server.sockets}
        self.port = sock.getsockname()[1]
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_SESSION_TIMEOUT",
    "ServerThread",
    "UnknownEnvId",
    "check_env_id",
    "make_app",
    "serve",
]
