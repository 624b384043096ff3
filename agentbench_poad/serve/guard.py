"""An ASGI guard in front of OpenEnv's app: what a hostile or careless client cannot do.

OpenEnv's ``/ws`` endpoint (``openenv.core.env_server.http_server``, 0.3.0) takes a session slot
the moment a socket connects, ends the session on a JSON message that is not an object, echoes
whole inputs in its validation errors, and logs a traceback when a client drops its connection;
its HTTP endpoints read bodies of any size. :class:`ClientGuard` wraps the app at the ASGI level,
so OpenEnv's code runs unchanged (no private attribute is touched) and sees only well-formed
traffic:

* **Handshake.** A ``/ws`` connection is accepted by the guard and handed to OpenEnv (which
  takes the session slot and makes the env) only with its first valid message: a JSON object
  whose ``type`` is ``reset``, ``step`` or ``state``. Messages before it get error replies; a
  connection that sends no valid message within ``handshake_timeout`` seconds gets an error
  reply and is closed (code 1008). Sockets that never speak hold no slot. Until its first valid
  message a connection counts against the handshake caps (:class:`~.limits.Handshakes`, shared
  with the HTTP protocol of :func:`~.limits.guarded_h11`): over one, it gets a
  ``CAPACITY_REACHED`` error and is closed (code 1013).
* **Sessions per client.** One client address holds at most ``max_sessions_per_client``
  sessions at once; its next first message gets ``CAPACITY_REACHED`` and the connection is
  closed (code 1008).
* **Numbers.** A message or JSON request body with an integer of over
  :data:`~.limits.MAX_NUMBER_DIGITS` digits, a non-finite number or ``NaN``/``Infinity`` gets
  an error reply (``VALIDATION_ERROR``; HTTP 400) before anything converts it; the session
  stays usable.
* **Messages.** Every frame is screened before OpenEnv reads it: malformed JSON
  (``INVALID_JSON``), JSON that is not an object (``VALIDATION_ERROR``), an unknown type and MCP
  messages (``UNKNOWN_TYPE``: this server does not serve MCP) get an error reply and the session
  stays usable; a binary frame is read as UTF-8 text; a frame over ``max_message_bytes`` closes
  the connection (1009), as uvicorn's own limit does under ``agentbench-poad serve``.
* **Echoes.** Every error reply (WebSocket ``error`` frames, HTTP responses with status >= 400)
  quotes at most :data:`ECHO_PREFIX_CHARS` characters of any input it names (pydantic's
  ``input``), holds no text over :data:`MAX_ERROR_TEXT_CHARS` characters and lists at most
  :data:`MAX_ERROR_ITEMS` errors.
* **HTTP bodies.** A request body over ``max_message_bytes`` is refused with 413 before the app
  sees it. OpenEnv's MCP endpoints (``/mcp``, HTTP and WebSocket), which open sessions of their
  own, are not served: HTTP 404, and the WebSocket handshake is refused (HTTP 403).
* **Disconnects.** Once a client is gone, OpenEnv's replies and its closing frame to it are
  dropped instead of raised, so a dropped connection ends its session without a traceback; the
  end of every ``/ws`` connection is one line on uvicorn's log (client, why, messages).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from agentbench_poad.serve.limits import (
    DEFAULT_MAX_SESSIONS_PER_CLIENT,
    BadNumber,
    Handshakes,
    Sessions,
    loads,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Characters of a client's input an error reply may quote.
ECHO_PREFIX_CHARS = 64
#: Longest text (message, detail) an error reply carries; messages that quote input quote
#: only :data:`ECHO_PREFIX_CHARS` of it, this is the backstop.
MAX_ERROR_TEXT_CHARS = 300
#: Most entries of one list (e.g. validation errors) an error reply carries.
MAX_ERROR_ITEMS = 10
#: Default seconds a new ``/ws`` connection may take to send its first valid message.
DEFAULT_HANDSHAKE_TIMEOUT = 30.0

#: Message types that open a session (``close`` before a session just closes the connection).
SESSION_TYPES = frozenset({"reset", "step", "state"})
_PROTOCOL = '{"type": "reset", "data": {"seed": 0}}, {"type": "step", "data": {"text": "..."}}'
_MCP_PATHS = frozenset({"/mcp", "/mcp/"})

# uvicorn's own server log: the end of a connection is logged beside its "[accepted]" line, at
# the server's --log-level, without a logging setup of our own.
_server_log = logging.getLogger("uvicorn.error")


# -- clipping echoes ------------------------------------------------------------------------
def _clip_text(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


def _prefix(value: Any) -> Any:
    """``value`` itself when short, else the first characters of its JSON text."""
    if isinstance(value, bool | int | float) or value is None:
        return value
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return value if len(text) <= ECHO_PREFIX_CHARS else _clip_text(text, ECHO_PREFIX_CHARS)


def clip_echo(value: Any, key: str | None = None) -> Any:
    """An error payload with every echo of the client's input cut short.

    ``input`` values (pydantic's echo of what failed validation) keep a prefix of
    :data:`ECHO_PREFIX_CHARS` characters; any other text keeps :data:`MAX_ERROR_TEXT_CHARS`;
    lists keep :data:`MAX_ERROR_ITEMS` entries and say how many were left out.
    """
    if key == "input":
        return _prefix(value)
    if isinstance(value, str):
        return _clip_text(value, MAX_ERROR_TEXT_CHARS)
    if isinstance(value, dict):
        return {str(k): clip_echo(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        kept = [clip_echo(v) for v in value[:MAX_ERROR_ITEMS]]
        if len(value) > MAX_ERROR_ITEMS:
            kept.append(f"... and {len(value) - MAX_ERROR_ITEMS:,} more")
        return kept
    return value


def error_frame(code: str, message: str) -> str:
    """An OpenEnv ``WSErrorResponse`` as JSON text."""
    return json.dumps({"type": "error", "data": {"message": message, "code": code}})


def screen(text: str) -> tuple[str | None, str | None]:
    """``(type, None)`` for a message OpenEnv may read (a JSON object of type ``reset``,
    ``step``, ``state`` or ``close``), or ``(None, error reply)``."""
    try:
        message = loads(text)
    except json.JSONDecodeError as exc:
        return None, error_frame(
            "INVALID_JSON", f"Invalid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})"
        )
    except RecursionError:
        return None, error_frame("INVALID_JSON", "Invalid JSON: nested too deeply")
    except BadNumber as exc:
        return None, error_frame("VALIDATION_ERROR", f"{exc}; send e.g. {_PROTOCOL}")
    except ValueError as exc:  # any other number Python will not convert
        return None, error_frame("VALIDATION_ERROR", _clip_text(str(exc), ECHO_PREFIX_CHARS))
    if not isinstance(message, dict):
        return None, error_frame(
            "VALIDATION_ERROR",
            f"a message is a JSON object, got {type(message).__name__} "
            f"({_prefix(message)!r}); send e.g. {_PROTOCOL}",
        )
    kind = message.get("type")
    if kind == "mcp":
        return None, error_frame(
            "UNKNOWN_TYPE", "this server does not serve MCP; send reset, step, state or close"
        )
    # OpenEnv would answer an unknown type too, but with the whole type in its message.
    if kind not in SESSION_TYPES and kind != "close":
        return None, error_frame(
            "UNKNOWN_TYPE",
            f"Unknown message type: {_prefix(kind)!r}; send reset, step, state or close",
        )
    return kind, None


# -- the guard ------------------------------------------------------------------------------
class ClientGuard:
    """ASGI middleware: the limits of the module docstring, in front of ``app``.

    Args:
        app: The ASGI app (OpenEnv's FastAPI app).
        max_message_bytes: Largest WebSocket message and HTTP request body.
        handshake_timeout: Seconds a new ``/ws`` connection may take to send its first valid
            message (None: no limit; such a connection still holds no session slot).
        ws_paths: WebSocket paths that get the handshake and message screening.
        handshakes: The handshake caps, shared with the server's HTTP protocol when it
            enforces them too (:func:`~.limits.guarded_h11`); default: the default caps.
        max_sessions_per_client: Most sessions one client address holds at once.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_message_bytes: int,
        handshake_timeout: float | None = DEFAULT_HANDSHAKE_TIMEOUT,
        ws_paths: frozenset[str] = frozenset({"/ws"}),
        handshakes: Handshakes | None = None,
        max_sessions_per_client: int = DEFAULT_MAX_SESSIONS_PER_CLIENT,
    ) -> None:
        if handshake_timeout is not None and not handshake_timeout > 0:
            raise ValueError(
                f"handshake_timeout must be > 0 seconds or None (no limit), got {handshake_timeout}"
            )
        if max_message_bytes < 1:
            raise ValueError(f"max_message_bytes must be >= 1, got {max_message_bytes}")
        self.app = app
        self.max_message_bytes = max_message_bytes
        self.handshake_timeout = handshake_timeout
        self.ws_paths = ws_paths
        self.handshakes = handshakes or Handshakes(timeout=handshake_timeout)
        self.sessions = Sessions(max_sessions_per_client)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http":
            if path in _MCP_PATHS:
                await _send_json(send, 404, {"detail": "this server does not serve MCP"})
                return
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket" and path in _MCP_PATHS:
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1008})  # before accept: HTTP 403
        elif scope["type"] == "websocket" and path in self.ws_paths:
            await _Connection(self, scope, receive, send).run()
        else:
            await self.app(scope, receive, send)

    # -- HTTP ---------------------------------------------------------------------------
    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.max_message_bytes
        too_large = {
            "detail": f"request body over {limit:,} bytes (the server's --max-message-bytes); "
            "play episodes over the WebSocket /ws"
        }
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _send_json(send, 413, too_large)
            return
        # Read the body here (it is at most `limit` bytes), so the app never reads more.
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            total += len(body)
            if total > limit:
                await _send_json(send, 413, too_large)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if body and _is_json(scope):
            refused = _bad_numbers(body)
            if refused is not None:
                await _send_json(send, 400, {"detail": refused})
                return
        replayed = False

        async def body_once() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, body_once, _ClippedResponse(send))


class _ClippedResponse:
    """``send`` for one HTTP response: an error response (status >= 400) with a JSON body is
    buffered and re-sent with its echoes clipped (:func:`clip_echo`)."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.start: Message | None = None
        self.chunks: list[bytes] = []

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = dict(message.get("headers") or [])
            json_body = headers.get(b"content-type", b"").startswith(b"application/json")
            if message["status"] >= 400 and json_body:
                self.start = message
                return
        elif message["type"] == "http.response.body" and self.start is not None:
            self.chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = b"".join(self.chunks)
            try:
                body = json.dumps(clip_echo(json.loads(body))).encode()
            except ValueError:
                body = body[:MAX_ERROR_TEXT_CHARS]
            headers = [
                (k, v) for k, v in self.start.get("headers") or [] if k.lower() != b"content-length"
            ]
            headers.append((b"content-length", str(len(body)).encode()))
            await self.send({**self.start, "headers": headers})
            await self.send({"type": "http.response.body", "body": body, "more_body": False})
            return
        await self.send(message)


class _Connection:
    """One ``/ws`` connection: handshake, then OpenEnv's endpoint behind a screened channel.

    Its end is logged as one line (who, why, how many messages) on uvicorn's server log.
    """

    def __init__(self, guard: ClientGuard, scope: Scope, receive: Receive, send: Send) -> None:
        self.guard = guard
        self.scope = scope
        self.receive = receive
        self._send = send
        self.gone = False  # the client disconnected: nothing more can be sent to it
        self.messages = 0
        self.ended = "closed by the server"
        self.session = False

    # -- the channel to the client ------------------------------------------------------
    async def send(self, message: Message) -> None:
        """Send to the client, or drop the message if it is gone (never raise for that)."""
        if self.gone:
            return
        try:
            await self._send(message)
        except OSError:  # uvicorn's ClientDisconnected is one
            self.client_gone(None)

    async def reply(self, text: str) -> None:
        await self.send({"type": "websocket.send", "text": text})

    def client_gone(self, code: int | None) -> None:
        if not self.gone:
            self.gone = True
            self.ended = "client disconnected" + ("" if code is None else f", code {code}")

    async def next_frame(self, deadline: float | None) -> tuple[str | None, Message | None]:
        """``(text, None)`` for the next frame, ``(None, message)`` when the connection ends
        (a disconnect message, or ``(None, None)`` at the deadline)."""
        while True:
            if deadline is None:
                message = await self.receive()
            else:
                try:
                    message = await asyncio.wait_for(
                        self.receive(), max(deadline - time.monotonic(), 0.0)
                    )
                except TimeoutError:
                    return None, None
            if message["type"] == "websocket.disconnect":
                self.client_gone(message.get("code"))
                return None, message
            if message["type"] != "websocket.receive":
                continue
            self.messages += 1
            text = message.get("text")
            if text is None:  # a binary frame: read it as UTF-8 text
                try:
                    text = (message.get("bytes") or b"").decode("utf-8")
                except UnicodeDecodeError:
                    await self.reply(error_frame("INVALID_JSON", "a binary frame must be UTF-8"))
                    continue
            limit = self.guard.max_message_bytes
            if len(text) > limit or len(text.encode("utf-8")) > limit:
                # uvicorn's ws_max_size does this first under `serve`; this covers other hosts.
                await self.send({"type": "websocket.close", "code": 1009})
                self.gone = True
                self.ended = f"message over {limit:,} bytes, code 1009"
                return None, {"type": "websocket.disconnect", "code": 1009}
            return text, None

    # -- the connection -----------------------------------------------------------------
    async def run(self) -> None:
        connect = await self.receive()
        if connect["type"] != "websocket.connect":
            return
        client = self.scope.get("client")
        key = (str(client[0]), int(client[1])) if client else ("unknown", id(self))
        handshakes = self.guard.handshakes
        await self.send({"type": "websocket.accept"})
        try:
            refused = handshakes.enter(key)
            if refused is not None:
                handshakes.log_refusal(key, refused)
                await self.refuse(refused, 1013, "too many handshakes")
                return
            first = await self.handshake()
            handshakes.leave(key)
            if first is None:
                return
            refused = self.guard.sessions.open(key[0])
            if refused is not None:
                await self.refuse(refused, 1008, "too many sessions")
                return
            try:
                self.session = True
                await self.serve(connect, first)
            finally:
                self.guard.sessions.close(key[0])
        finally:
            handshakes.leave(key)
            where = f"{client[0]}:{client[1]}" if client else "a client"
            _server_log.info(
                '%s - "WebSocket %s" ended: %s; %d messages%s',
                where,
                self.scope.get("path", ""),
                self.ended,
                self.messages,
                "" if self.session else ", no session",
            )

    async def refuse(self, why: str, code: int, reason: str) -> None:
        """Tell the client ``why`` (``CAPACITY_REACHED``) and close with ``code``."""
        await self.reply(error_frame("CAPACITY_REACHED", why))
        await self.send({"type": "websocket.close", "code": code, "reason": reason})
        self.ended = f"refused: {why}"

    async def handshake(self) -> str | None:
        """The first valid message's text, or None when the connection ended before it."""
        timeout = self.guard.handshake_timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            text, ended = await self.next_frame(deadline)
            if ended is not None:
                return None
            if text is None:  # the deadline passed
                await self.reply(
                    error_frame(
                        "SESSION_ERROR",
                        f"no message within {timeout:g} s of connecting; connect when ready "
                        f"to reset, then send e.g. {_PROTOCOL}",
                    )
                )
                await self.send(
                    {"type": "websocket.close", "code": 1008, "reason": "handshake timeout"}
                )
                self.ended = f"no message within the {timeout:g} s handshake timeout"
                return None
            kind, error = screen(text)
            if error is not None:
                await self.reply(error)
                continue
            if kind == "close":
                await self.send({"type": "websocket.close", "code": 1000})
                self.ended = "client sent close"
                return None
            return text

    async def serve(self, connect: Message, first: str) -> None:
        """Run OpenEnv's endpoint (which takes the session slot) from the first message on."""
        pending: deque[Message] = deque([connect, {"type": "websocket.receive", "text": first}])

        async def receive() -> Message:
            if pending:
                return pending.popleft()
            while True:
                text, ended = await self.next_frame(None)
                if ended is not None:
                    return ended
                kind, error = screen(text)
                if error is None:
                    if kind == "close":
                        self.ended = "client sent close"
                    return {"type": "websocket.receive", "text": text}
                await self.reply(error)

        async def send(message: Message) -> None:
            if message["type"] == "websocket.accept":
                return  # accepted before the handshake
            text = message.get("text") if message["type"] == "websocket.send" else None
            if text and text.startswith('{"type":"error"'):
                reply = json.loads(text)
                code = reply.get("data", {}).get("code")
                if code in ("CAPACITY_REACHED", "FACTORY_ERROR", "SESSION_ERROR"):
                    self.ended = f"refused by the server ({code})"
                message = {**message, "text": json.dumps(clip_echo(reply))}
            await self.send(message)

        try:
            await self.guard.app(self.scope, receive, send)
        except Exception as exc:
            if not self.gone:
                raise
            # OpenEnv stumbled on its way out of a session whose client is gone: the end line
            # says what happened; a traceback would repeat it 60 lines long.
            self.ended += f", then {type(exc).__name__} in OpenEnv's cleanup"


def _is_json(scope: Scope) -> bool:
    for key, value in scope.get("headers") or []:
        if key.lower() == b"content-type":
            return b"json" in value.lower()
    return False


def _bad_numbers(body: bytes) -> str | None:
    """Why a JSON body is refused for its numbers (:func:`~.limits.loads`), or None (malformed
    JSON is left to the app, which answers it as before)."""
    try:
        loads(body)
    except BadNumber as exc:
        return str(exc)
    except (ValueError, RecursionError):
        return None
    return None


def _content_length(scope: Scope) -> int | None:
    for key, value in scope.get("headers") or []:
        if key.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _send_json(send: Send, status: int, content: dict[str, Any]) -> None:
    body = json.dumps(content).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


__all__ = [
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "ECHO_PREFIX_CHARS",
    "MAX_ERROR_ITEMS",
    "MAX_ERROR_TEXT_CHARS",
    "ClientGuard",
    "clip_echo",
    "error_frame",
    "screen",
]
