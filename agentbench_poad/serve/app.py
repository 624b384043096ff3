"""The server: OpenEnv's ``create_app`` over :class:`~agentbench_poad.serve.environment.ServedEnv`.

OpenEnv's HTTP server gives every WebSocket session (``/ws``, what ``EnvClient`` speaks) its own
environment and closes it when the connection ends; :func:`make_app` chooses the id, checks its
``env_kwargs`` by making the env once, sets the session cap and the idle timeout, and puts
:class:`~agentbench_poad.serve.guard.ClientGuard` in front of it. :func:`serve` runs it under
uvicorn (``agentbench-poad serve ID``); :class:`ServerThread` runs it in a background thread of
this process (tests, examples, notebooks).

Limits on bad clients (``tests/test_serve_hostile.py``, ``tests/test_serve_parity.py``):

* a connection holds a session slot only from its first valid message (a JSON object of type
  ``reset``, ``step`` or ``state``); one that sends none within ``handshake_timeout`` seconds
  (default 30) is told so and closed (code 1008);
* a WebSocket frame over ``max_message_bytes`` (default 1 MiB) closes that connection (close
  code 1009) and ends its session; an HTTP body over it gets 413; an action over
  ``MAX_ACTION_LENGTH`` characters, a non-string action, malformed JSON, JSON that is not an
  object or an unknown message type get an error reply and the session stays open;
* no error reply quotes more than a short prefix of the input (``guard.ECHO_PREFIX_CHARS``);
* a client that drops its connection ends its session without a traceback in the log;
* a session idle for ``session_timeout`` seconds is closed by OpenEnv's reaper (which looks
  every ``max(timeout / 4, 5)`` seconds): its env is closed and its next call gets an error;
* at most ``max_sessions`` sessions at once, and ``max_sessions_per_client`` from one client
  address: the next connection's first message gets a ``CAPACITY_REACHED`` error;
* at most ``max_handshakes`` connections (``max_handshakes_per_client`` from one address) that
  have not yet sent their whole HTTP request or their first valid WebSocket message (slowloris):
  one over a cap gets ``503`` (HTTP) or ``CAPACITY_REACHED`` (WebSocket) and is closed; under
  :func:`serve` and :class:`ServerThread` an HTTP request that has not fully arrived within
  ``handshake_timeout`` gets ``408`` and is closed (:mod:`agentbench_poad.serve.limits`);
* a seed outside ``0..2**64-1``, a number of over 32 digits or ``NaN``/``Infinity`` get an error
  reply before anything converts them, and the session stays usable.

OpenEnv's stateless HTTP ``/reset`` and ``/step`` build a fresh env per request (a ``/step``
there always answers 409: the env was never reset); episodes are played over ``/ws``.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import threading
import time
from collections.abc import Mapping
from typing import Any

from agentbench_poad.serve.guard import DEFAULT_HANDSHAKE_TIMEOUT, ClientGuard
from agentbench_poad.serve.limits import (
    DEFAULT_MAX_HANDSHAKES,
    DEFAULT_MAX_HANDSHAKES_PER_CLIENT,
    DEFAULT_MAX_SESSIONS_PER_CLIENT,
    Handshakes,
    guarded_h11,
)

#: Default cap on concurrent sessions of one server.
DEFAULT_MAX_SESSIONS = 16
#: Default idle time (seconds) after which a session is closed.
DEFAULT_SESSION_TIMEOUT = 600.0
#: Default largest WebSocket message the server reads (bytes).
DEFAULT_MAX_MESSAGE_BYTES = 1 << 20


class UnknownEnvId(ValueError):
    """An id that is not registered (the message lists close ids)."""


class BadEnvKwargs(ValueError):
    """``env_kwargs`` the id's env does not take (the message names the keys and the fix)."""


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


# gym.make's own keyword arguments (the rest go to the env's constructor).
_MAKE_KWARGS = frozenset({"max_episode_steps", "disable_env_checker"})


def check_env_kwargs(env_id: str, env_kwargs: Mapping[str, Any] | None) -> None:
    """Make ``env_id``'s env once with ``env_kwargs`` and close it, or raise
    :class:`BadEnvKwargs` naming the keys it does not take (or why making it failed).

    Making an env is cheap (sandboxes and data load on its first reset), so a server checks
    its kwargs here rather than failing every session's first reset.
    """
    import inspect

    import gymnasium as gym

    import agentbench_poad  # noqa: F401 - registers the ids

    kwargs = dict(env_kwargs or {})
    spec = gym.spec(env_id)
    creator = spec.entry_point
    if isinstance(creator, str):
        creator = gym.envs.registration.load_env_creator(creator)
    try:
        params = inspect.signature(creator).parameters
    except (TypeError, ValueError):  # a creator without a signature: making it will tell
        params = {}
    takes_any = not params or any(p.kind is p.VAR_KEYWORD for p in params.values())
    accepted = {name for name in params if name != "self"} | _MAKE_KWARGS
    unknown = sorted(set(kwargs) - accepted)
    if unknown and not takes_any:
        raise BadEnvKwargs(
            f"--env-kwargs: {env_id} does not take {', '.join(map(repr, unknown))}; "
            f"it takes {', '.join(sorted(accepted))}"
        )
    try:
        env = gym.make(env_id, **kwargs)
    except Exception as exc:  # noqa: BLE001 - any failure here is a bad kwarg value
        raise BadEnvKwargs(
            f"--env-kwargs {json.dumps(kwargs, default=repr)}: gym.make({env_id!r}) failed "
            f"({type(exc).__name__}: {exc})"
        ) from exc
    env.close()


def make_app(
    env_id: str,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    session_timeout: float | None = DEFAULT_SESSION_TIMEOUT,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    handshake_timeout: float | None = DEFAULT_HANDSHAKE_TIMEOUT,
    max_sessions_per_client: int = DEFAULT_MAX_SESSIONS_PER_CLIENT,
    max_handshakes: int = DEFAULT_MAX_HANDSHAKES,
    max_handshakes_per_client: int = DEFAULT_MAX_HANDSHAKES_PER_CLIENT,
):
    """The FastAPI app that serves ``env_id`` (OpenEnv's ``create_app`` behind
    :class:`~agentbench_poad.serve.guard.ClientGuard`).

    Args:
        env_id: A registered id; checked here (:class:`UnknownEnvId`).
        env_kwargs: Keyword arguments for ``gym.make`` of every session's env; checked here by
            making the env once (:class:`BadEnvKwargs`).
        max_sessions: Concurrent sessions (one env each).
        session_timeout: Seconds of inactivity after which a session is closed (None: never).
        max_message_bytes: Largest WebSocket message and HTTP request body.
        handshake_timeout: Seconds a new connection may take to send its first valid message
            (None: no limit; it holds no session slot until then either way).
        max_sessions_per_client: Concurrent sessions of one client address.
        max_handshakes: Connections at once that have not yet sent their request (HTTP) or
            first valid message (WebSocket); ``app.state.handshakes`` holds the count, which
            :func:`serve` and :class:`ServerThread` share with their HTTP protocol.
        max_handshakes_per_client: The same, per client address.
    """
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.types import ConcurrencyConfig

    from agentbench_poad.serve.environment import env_factory
    from agentbench_poad.serve.models import TextAction, TextObservation

    check_env_id(env_id)
    check_env_kwargs(env_id, env_kwargs)
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
    handshakes = Handshakes(max_handshakes, max_handshakes_per_client, timeout=handshake_timeout)
    app.state.handshakes = handshakes
    app.add_middleware(
        ClientGuard,
        max_message_bytes=max_message_bytes,
        handshake_timeout=handshake_timeout,
        handshakes=handshakes,
        max_sessions_per_client=max_sessions_per_client,
    )
    return app


def _uvicorn_config(app, host: str, port: int, max_message_bytes: int, log_level: str):
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        # h11, made to count, cap and time out connections that have not sent their request
        http=guarded_h11(app.state.handshakes),
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
    handshake_timeout: float | None = DEFAULT_HANDSHAKE_TIMEOUT,
    max_sessions_per_client: int = DEFAULT_MAX_SESSIONS_PER_CLIENT,
    max_handshakes: int = DEFAULT_MAX_HANDSHAKES,
    max_handshakes_per_client: int = DEFAULT_MAX_HANDSHAKES_PER_CLIENT,
    log_level: str = "info",
) -> None:
    """Serve ``env_id`` until interrupted (``agentbench-poad serve``); the arguments are
    :func:`make_app`'s and uvicorn's."""
    import uvicorn

    app = make_app(
        env_id,
        env_kwargs=env_kwargs,
        max_sessions=max_sessions,
        session_timeout=session_timeout,
        max_message_bytes=max_message_bytes,
        handshake_timeout=handshake_timeout,
        max_sessions_per_client=max_sessions_per_client,
        max_handshakes=max_handshakes,
        max_handshakes_per_client=max_handshakes_per_client,
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
        handshake_timeout: float | None = DEFAULT_HANDSHAKE_TIMEOUT,
        max_sessions_per_client: int = DEFAULT_MAX_SESSIONS_PER_CLIENT,
        max_handshakes: int = DEFAULT_MAX_HANDSHAKES,
        max_handshakes_per_client: int = DEFAULT_MAX_HANDSHAKES_PER_CLIENT,
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
            max_message_bytes=max_message_bytes,
            handshake_timeout=handshake_timeout,
            max_sessions_per_client=max_sessions_per_client,
            max_handshakes=max_handshakes,
            max_handshakes_per_client=max_handshakes_per_client,
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
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "DEFAULT_MAX_HANDSHAKES",
    "DEFAULT_MAX_HANDSHAKES_PER_CLIENT",
    "DEFAULT_MAX_SESSIONS_PER_CLIENT",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_SESSION_TIMEOUT",
    "BadEnvKwargs",
    "ServerThread",
    "UnknownEnvId",
    "check_env_id",
    "check_env_kwargs",
    "make_app",
    "serve",
]
