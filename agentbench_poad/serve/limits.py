"""Connection limits below the ASGI app: handshakes, per-client sessions and numbers in JSON.

A *handshake* is a connection that has not yet said what it wants: from the TCP connect until
its whole HTTP request has arrived, or, for a WebSocket, until its first valid message
(:mod:`agentbench_poad.serve.guard`). Slow or silent handshakes (slowloris) cost the server a
file descriptor each and nothing to the client, so :class:`Handshakes` caps how many are open
at once, in all and per client address, and :func:`guarded_h11` makes uvicorn's HTTP/1.1
protocol enforce it: a connection over a cap gets ``503`` and is closed at once, one whose
request has not fully arrived within the handshake timeout gets ``408`` and is closed.

Numbers: Python turns a JSON integer of any length into an ``int`` (a 5,000-digit one raises
after quadratic work), and reads ``NaN``/``Infinity``; :func:`loads` refuses both before any
conversion, so a hostile number gets an error reply, never a traceback.
"""

from __future__ import annotations

import json
import logging
import math
import time
from typing import Any

#: Default cap on handshakes open at once, all clients together.
DEFAULT_MAX_HANDSHAKES = 64
#: Default cap on handshakes open at once from one client address.
DEFAULT_MAX_HANDSHAKES_PER_CLIENT = 16
#: Default cap on sessions one client address holds at once.
DEFAULT_MAX_SESSIONS_PER_CLIENT = 8
#: Most digits a JSON number (integer or fraction part) may have; seeds (< 2**64) have 20.
MAX_NUMBER_DIGITS = 32
#: Seeds a reset takes: integers in ``0 <= seed < MAX_SEED`` (numpy's SeedSequence takes any
#: non-negative int; 64 bits are plenty and keep the state small).
MAX_SEED = 2**64
# Seconds an entry of a connection handed from the HTTP protocol to the WebSocket guard may
# outlive its timeout before it is dropped (covers a WebSocket upgrade that failed before the
# guard saw it: no one else would remove the entry).
_STALE_GRACE_S = 5.0
# An entry without a timeout (handshake_timeout None) is dropped after this long for the same
# reason; a live handshake dropped this way only frees a place early.
_STALE_WITHOUT_TIMEOUT_S = 300.0
# Seconds a refused connection is read (and its data dropped) before it is closed.
_LINGER_S = 2.0

#: Seconds between two log lines about refused connections.
REFUSAL_LOG_INTERVAL_S = 10.0

_server_log = logging.getLogger("uvicorn.error")

Client = tuple[str, int]


class BadNumber(ValueError):
    """A JSON number this server does not read (too many digits, or not finite)."""


def _parse_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_NUMBER_DIGITS:
        raise BadNumber(
            f"a number with {digits:,} digits; numbers have at most {MAX_NUMBER_DIGITS} "
            f"(a seed is an integer in 0..{MAX_SEED - 1})"
        )
    return int(text)


def _parse_float(text: str) -> float:
    if len(text) > MAX_NUMBER_DIGITS + 8:  # digits, sign, point and exponent
        raise BadNumber(
            f"a number written with {len(text):,} characters; numbers have at most "
            f"{MAX_NUMBER_DIGITS} digits"
        )
    value = float(text)
    if not math.isfinite(value):
        raise BadNumber(f"a number out of range ({text[:20]}...); numbers must be finite")
    return value


def _parse_constant(name: str) -> float:
    raise BadNumber(f"{name} is not a JSON number; numbers must be finite")


def loads(text: str | bytes) -> Any:
    """``json.loads`` that refuses, before converting them, integers of over
    :data:`MAX_NUMBER_DIGITS` digits, non-finite numbers and ``NaN``/``Infinity``.

    Raises:
        BadNumber: such a number (the message says which and the limit).
        json.JSONDecodeError: malformed JSON.
        RecursionError: nesting too deep for the parser.
    """
    return json.loads(
        text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant
    )


def check_seed(seed: Any) -> int | None:
    """``seed`` when it is None or an integer in ``0 <= seed <`` :data:`MAX_SEED`.

    Raises:
        ValueError: anything else (booleans included: ``true`` is not a seed).
    """
    if seed is None or (type(seed) is int and 0 <= seed < MAX_SEED):
        return seed
    shown = repr(seed) if isinstance(seed, bool | int | float) else type(seed).__name__
    if len(shown) > 40:
        shown = f"{shown[:40]}... ({len(shown):,} characters)"
    raise ValueError(f"seed must be an integer in 0..{MAX_SEED - 1} (or left out), got {shown}")


class Handshakes:
    """The connections still in their handshake, by client, with caps.

    Args:
        max_total: Most handshakes open at once.
        max_per_client: Most handshakes open at once from one client address (host).
        timeout: Seconds a handshake may last (None: no limit); used here only to drop stale
            entries (the protocol and the guard close the connections themselves).
    """

    def __init__(
        self,
        max_total: int = DEFAULT_MAX_HANDSHAKES,
        max_per_client: int = DEFAULT_MAX_HANDSHAKES_PER_CLIENT,
        timeout: float | None = None,
    ) -> None:
        if max_total < 1 or max_per_client < 1:
            raise ValueError(
                f"handshake caps must be >= 1, got {max_total} in all and {max_per_client} "
                "per client"
            )
        self.max_total = int(max_total)
        self.max_per_client = int(max_per_client)
        self.timeout = timeout
        self._open: dict[Client, float] = {}  # connection -> when its entry goes stale
        self.lingering = 0  # refused connections being closed politely (guarded_h11)
        self.refused = 0  # connections refused, in all
        self._refusals_logged = 0
        self._last_log = -math.inf

    def _stale_after(self) -> float:
        if self.timeout is None:
            return _STALE_WITHOUT_TIMEOUT_S
        return self.timeout + _STALE_GRACE_S

    def _purge(self, now: float) -> None:
        for key in [k for k, stale in self._open.items() if stale < now]:
            del self._open[key]

    def waiting(self, host: str | None = None) -> int:
        """Open handshakes, all or of one client address."""
        self._purge(time.monotonic())
        if host is None:
            return len(self._open)
        return sum(1 for h, _ in self._open if h == host)

    def enter(self, client: Client, *, force: bool = False) -> str | None:
        """Count ``client`` (host, port) as in its handshake: None when admitted (or already
        counted), else why not. ``force`` counts it whatever the caps (a kept-alive connection
        that is waiting for its next request: it was admitted once)."""
        now = time.monotonic()
        self._purge(now)
        if client in self._open:
            self._open[client] = now + self._stale_after()
            return None
        if not force:
            if len(self._open) >= self.max_total:
                return (
                    f"{len(self._open)} connections are already waiting to send their request "
                    f"(the server's --max-handshakes, {self.max_total}); try again shortly"
                )
            mine = sum(1 for h, _ in self._open if h == client[0])
            if mine >= self.max_per_client:
                return (
                    f"this client already has {mine} connections waiting to send their request "
                    f"(the server's --max-handshakes-per-client, {self.max_per_client}); send "
                    "on the open ones or close them"
                )
        self._open[client] = now + self._stale_after()
        return None

    def log_refusal(self, client: Client, why: str) -> None:
        """Count a refusal; log it, at most one line per :data:`REFUSAL_LOG_INTERVAL_S` with
        the count since the last line (a flood of refusals must not flood the log)."""
        self.refused += 1
        now = time.monotonic()
        if now - self._last_log < REFUSAL_LOG_INTERVAL_S:
            return
        more = self.refused - self._refusals_logged - 1
        since = f" ({more:,} more refused since the last line)" if more > 0 else ""
        _server_log.warning("%s:%s - refused: %s%s", client[0], client[1], why, since)
        self._last_log = now
        self._refusals_logged = self.refused

    def leave(self, client: Client) -> None:
        """``client``'s handshake is over (request arrived, first message, or gone)."""
        self._open.pop(client, None)


class Sessions:
    """Sessions held at once by each client address, with a cap."""

    def __init__(self, max_per_client: int = DEFAULT_MAX_SESSIONS_PER_CLIENT) -> None:
        if max_per_client < 1:
            raise ValueError(f"max sessions per client must be >= 1, got {max_per_client}")
        self.max_per_client = int(max_per_client)
        self._held: dict[str, int] = {}

    def held(self, host: str) -> int:
        return self._held.get(host, 0)

    def open(self, host: str) -> str | None:
        """Take a session for ``host``: None when taken, else why not."""
        held = self.held(host)
        if held >= self.max_per_client:
            return (
                f"this client already holds {held} sessions (the server's "
                f"--max-sessions-per-client, {self.max_per_client}); close one first"
            )
        self._held[host] = held + 1
        return None

    def close(self, host: str) -> None:
        held = self.held(host) - 1
        if held > 0:
            self._held[host] = held
        else:
            self._held.pop(host, None)


def _raw_response(status: str, text: str) -> bytes:
    body = (text + "\n").encode()
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


def guarded_h11(handshakes: Handshakes) -> type:
    """uvicorn's h11 HTTP protocol, made to count every connection as a handshake in
    ``handshakes`` until its request has fully arrived (or it upgrades to a WebSocket, whose
    guard ends the handshake at the first valid message), refuse one over a cap (``503``) and
    close one that is still sending after ``handshakes.timeout`` seconds (``408``).

    A kept-alive connection is in its handshake again while it waits for its next request.
    """
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        def connection_made(self, transport) -> None:  # noqa: ANN001 - asyncio.Transport
            super().connection_made(transport)
            self._key: Client = self.client or ("unknown", id(self))
            self._waiting = False
            self._upgraded = False
            self._refused: bytes | None = None  # the 503 of a refused connection
            self._lingering = False
            self._timer = None
            self._await_request(force=False)

        # -- the handshake ---------------------------------------------------------------
        def _await_request(self, *, force: bool) -> None:
            refused = handshakes.enter(self._key, force=force)
            if refused is not None:
                handshakes.log_refusal(self._key, refused)
                self._refused = _raw_response("503 Service Unavailable", refused)
                if handshakes.lingering < handshakes.max_total and self.transport.can_write_eof():
                    # The 503 answers the request once it comes (a client that has not sent
                    # its request yet may not read an answer), and closing with the request
                    # unread would reset the connection and lose the 503: so this connection
                    # is read, and what it sends dropped, for a moment before it is closed.
                    # A few at a time: under a flood the rest are closed at once.
                    handshakes.lingering += 1
                    self._lingering = True
                    self._timer = self.loop.call_later(_LINGER_S, self.transport.close)
                else:
                    self.transport.write(self._refused)
                    self.transport.close()
                return
            self._waiting = True
            if handshakes.timeout is not None:
                self._timer = self.loop.call_later(handshakes.timeout, self._too_slow)

        def _end_handshake(self, *, keep_entry: bool = False) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._waiting and not keep_entry:
                handshakes.leave(self._key)
            self._waiting = False

        def _too_slow(self) -> None:
            self._timer = None
            if not self._waiting or self.transport.is_closing():
                return
            self._end_handshake()
            if self.cycle is not None and self.cycle.response_started:
                self.transport.close()  # answered already (before its body): just close
                return
            _server_log.info(
                "%s:%s - closed: request not complete within the %g s handshake timeout",
                *self._key,
                handshakes.timeout,
            )
            self.transport.write(
                _raw_response(
                    "408 Request Timeout",
                    f"the request did not arrive within {handshakes.timeout:g} s "
                    "(the server's --handshake-timeout)",
                )
            )
            self.transport.close()

        # -- uvicorn's hooks --------------------------------------------------------------
        def data_received(self, data: bytes) -> None:
            if self._refused is not None:  # refused: answer once, drop what it sends
                if self._refused and not self.transport.is_closing():
                    self.transport.write(self._refused)
                    self.transport.write_eof()
                    self._refused = b""
                return
            super().data_received(data)
            if self._waiting and not self._upgraded and self.conn.their_state is not h11.IDLE:
                if self.conn.their_state is not h11.SEND_BODY:  # whole request arrived
                    self._end_handshake()

        def handle_websocket_upgrade(self, event) -> None:  # noqa: ANN001 - h11.Request
            # The guard ends a WebSocket's handshake (first valid message) and times it out;
            # the entry stays for it to find.
            self._upgraded = True
            self._end_handshake(keep_entry=True)
            super().handle_websocket_upgrade(event)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.transport.is_closing() or self._waiting:
                return
            if self.conn.our_state is h11.IDLE and self.conn.their_state is h11.IDLE:
                self._await_request(force=True)  # kept alive: waiting for the next request

        def connection_lost(self, exc: Exception | None) -> None:
            if self._lingering:
                self._lingering = False
                handshakes.lingering -= 1
            self._end_handshake()
            super().connection_lost(exc)

    return GuardedH11Protocol


__all__ = [
    "DEFAULT_MAX_HANDSHAKES",
    "DEFAULT_MAX_HANDSHAKES_PER_CLIENT",
    "DEFAULT_MAX_SESSIONS_PER_CLIENT",
    "MAX_NUMBER_DIGITS",
    "MAX_SEED",
    "BadNumber",
    "Handshakes",
    "Sessions",
    "check_seed",
    "guarded_h11",
    "loads",
]
