"""The server's limits on slow, greedy and numeric hostility (issue 64, item 6).

Real uvicorn servers on free localhost ports (``ServerThread``) and raw clients: TCP sockets
that send half a request (slowloris), silent WebSockets, clients from two loopback addresses
(127.0.0.1 and 127.0.0.2: Linux routes all of 127/8 to lo, so the server sees two clients).
Nothing is mocked.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import time

import pytest

pytest.importorskip("openenv.core", reason="the openenv extra is not installed")

import httpx  # noqa: E402
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from websockets.exceptions import ConnectionClosed, InvalidStatus  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from agentbench_poad.serve.app import ServerThread  # noqa: E402
from agentbench_poad.serve.limits import (  # noqa: E402
    MAX_NUMBER_DIGITS,
    MAX_SEED,
    BadNumber,
    Handshakes,
    Sessions,
    check_seed,
    loads,
)

OVERCOOKED = "Overcooked-TomatoSalad-v0"
RESET = json.dumps({"type": "reset", "data": {"seed": 0}})
OTHER = "127.0.0.2"  # a second client address on the loopback


def ws_url(server: ServerThread) -> str:
    return server.base_url.replace("http", "ws") + "/ws"


def ask(ws, text: str) -> dict:
    ws.send(text)
    return json.loads(ws.recv(timeout=60))


def reset_with(seed: str) -> str:
    """A reset message whose seed is ``seed``, written as is (JSON text, not a Python value)."""
    return '{"type": "reset", "data": {"seed": ' + seed + "}}"


def error_code(reply: dict) -> str | None:
    return reply["data"]["code"] if reply["type"] == "error" else None


def half_request(port: int, source: str = "127.0.0.1") -> socket.socket:
    """A TCP connection that sends the start of an HTTP request and stops (slowloris)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60, source_address=(source, 0))
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    return sock


def answer(sock: socket.socket, wait: float) -> bytes | None:
    """What the server sent before closing, or None when it kept the socket open for ``wait``
    seconds (sent nothing and did not close)."""
    sock.settimeout(wait)
    data = b""
    try:
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                return data
            data += chunk
    except TimeoutError:
        return None if not data else data


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.extend(self.format(record).splitlines())


# -- numbers ------------------------------------------------------------------------------
HOSTILE_SEEDS = ("9" * 5000, "9" * 100, "-1", "1e400", "NaN", "-Infinity", "true", str(MAX_SEED))


def test_a_hostile_seed_gets_a_clean_error_and_the_session_lives():
    log = logging.getLogger("uvicorn.error")
    lines = Lines()
    with ServerThread(OVERCOOKED) as server:
        log.addHandler(lines)
        try:
            with connect(ws_url(server)) as ws:
                for seed in HOSTILE_SEEDS:  # before and after the session exists
                    reply = ask(ws, reset_with(seed))
                    assert error_code(reply) in ("VALIDATION_ERROR", "EXECUTION_ERROR"), seed
                    assert (
                        "seed" in reply["data"]["message"] or "number" in reply["data"]["message"]
                    )
                    assert len(json.dumps(reply)) < 1000
                assert ask(ws, reset_with(str(MAX_SEED - 1)))["type"] == "observation"
                assert ask(ws, RESET)["type"] == "observation"
                state = ask(ws, '{"type": "state"}')
                assert state["data"]["seed"] == 0
            with httpx.Client(base_url=server.base_url, timeout=60) as http:
                for seed in ("9" * 5000, "NaN", "Infinity", "-1e999"):
                    response = http.post(
                        "/reset",
                        content='{"seed": ' + seed + "}",
                        headers={"content-type": "application/json"},
                    )
                    assert response.status_code == 400, (seed, response.text)
                    assert "number" in response.json()["detail"]
                assert http.post("/reset", json={"seed": 3}).status_code == 200  # still serves
        finally:
            log.removeHandler(lines)
    text = "\n".join(lines.lines)
    assert "Traceback" not in text and "Exception in ASGI" not in text, text


@given(st.integers(min_value=-(10**40), max_value=10**40))
def test_loads_reads_short_integers_and_refuses_long_ones(value):
    text = json.dumps({"seed": value})
    digits = len(str(abs(value)))
    if digits <= MAX_NUMBER_DIGITS:
        assert loads(text) == json.loads(text)
    else:
        with pytest.raises(BadNumber, match=f"{digits} digits"):
            loads(text)


@given(st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.booleans(), st.floats()))
def test_check_seed_takes_exactly_the_non_negative_64_bit_integers(seed):
    ok = type(seed) is int and 0 <= seed < 2**64  # the rule, written out
    if ok:
        assert check_seed(seed) == seed
    else:
        with pytest.raises(ValueError, match="seed must be an integer"):
            check_seed(seed)


# -- half-open handshakes (slowloris) -------------------------------------------------------
def test_half_sent_requests_are_capped_per_client_and_timed_out():
    with ServerThread(
        OVERCOOKED, max_handshakes=6, max_handshakes_per_client=3, handshake_timeout=1.5
    ) as server:
        held = [half_request(server.port) for _ in range(3)]
        time.sleep(0.2)  # let the server count them
        for _ in range(4):  # over this client's cap: told so and closed at once
            refused = answer(half_request(server.port), wait=10)
            assert refused is not None and refused.startswith(b"HTTP/1.1 503"), refused
            assert b"--max-handshakes-per-client" in refused
        # another client is served meanwhile
        with httpx.Client(
            base_url=server.base_url, transport=httpx.HTTPTransport(local_address=OTHER)
        ) as http:
            assert http.get("/health").status_code == 200
        with connect(ws_url(server), source_address=(OTHER, 0)) as ws:
            assert ask(ws, RESET)["type"] == "observation"
        # the held ones are closed after the handshake timeout, with a 408
        for sock in held:
            closed = answer(sock, wait=30)
            assert closed is not None and closed.startswith(b"HTTP/1.1 408"), closed
        # and the client is welcome again
        with httpx.Client(base_url=server.base_url) as http:
            assert http.get("/health").status_code == 200


def test_the_total_handshake_cap_holds_across_clients():
    with ServerThread(
        OVERCOOKED, max_handshakes=4, max_handshakes_per_client=3, handshake_timeout=60
    ) as server:
        held = [half_request(server.port) for _ in range(3)]
        held.append(half_request(server.port, OTHER))
        time.sleep(0.2)
        for source in ("127.0.0.1", OTHER, "127.0.0.3"):
            refused = answer(half_request(server.port, source), wait=10)
            assert refused is not None and b"--max-handshakes" in refused, (source, refused)
        for sock in held[:2]:  # two finish their request: their places come back
            sock.sendall(b"\r\n")
            assert answer(sock, wait=30).startswith(b"HTTP/1.1 200")
        with httpx.Client(
            base_url=server.base_url, transport=httpx.HTTPTransport(local_address="127.0.0.3")
        ) as http:
            assert http.get("/health").status_code == 200
        for sock in held:
            sock.close()


def test_silent_websockets_count_as_handshakes_until_they_speak():
    with ServerThread(
        OVERCOOKED, max_handshakes=8, max_handshakes_per_client=2, handshake_timeout=60
    ) as server, contextlib.ExitStack() as stack:  # fmt: skip
        silent = [stack.enter_context(connect(ws_url(server))) for _ in range(2)]
        with pytest.raises(InvalidStatus) as refused:
            connect(ws_url(server))
        assert refused.value.response.status_code == 503
        with connect(ws_url(server), source_address=(OTHER, 0)) as ws:  # another client
            assert ask(ws, RESET)["type"] == "observation"
        assert ask(silent[0], RESET)["type"] == "observation"  # speaks: its place comes back
        with connect(ws_url(server)) as ws:
            assert ask(ws, RESET)["type"] == "observation"


# -- sessions per client ------------------------------------------------------------------
def test_one_client_cannot_take_every_session():
    with (
        ServerThread(OVERCOOKED, max_sessions=4, max_sessions_per_client=2) as server,
        contextlib.ExitStack() as stack,
    ):
        mine = [stack.enter_context(connect(ws_url(server))) for _ in range(3)]
        assert ask(mine[0], RESET)["type"] == "observation"
        assert ask(mine[1], RESET)["type"] == "observation"
        reply = ask(mine[2], RESET)
        assert error_code(reply) == "CAPACITY_REACHED"
        assert "--max-sessions-per-client" in reply["data"]["message"]
        with pytest.raises(ConnectionClosed):
            mine[2].recv(timeout=60)
        with connect(ws_url(server), source_address=(OTHER, 0)) as ws:
            assert ask(ws, RESET)["type"] == "observation"  # others still get sessions
        mine[0].close()
        deadline = time.monotonic() + 60  # the closed session's place comes back
        while True:
            with connect(ws_url(server)) as ws:
                reply = ask(ws, RESET)
            if reply["type"] == "observation" or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert reply["type"] == "observation", reply


# -- the bookkeeping, against a plain count ----------------------------------------------
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["enter", "leave"]), st.sampled_from(["a", "b", "c"]), st.integers(0, 4)
        ),
        max_size=60,
    )
)
def test_handshakes_admit_exactly_up_to_the_caps(ops):
    caps = Handshakes(max_total=5, max_per_client=2, timeout=None)
    open_: set[tuple[str, int]] = set()
    for op, host, port in ops:
        key = (host, port)
        if op == "leave":
            caps.leave(key)
            open_.discard(key)
            continue
        mine = sum(1 for h, _ in open_ if h == host)
        expect = key in open_ or (len(open_) < 5 and mine < 2)
        assert (caps.enter(key) is None) == expect
        if expect:
            open_.add(key)
        assert caps.waiting() == len(open_)


@given(st.lists(st.tuples(st.booleans(), st.sampled_from(["a", "b"])), max_size=40))
def test_sessions_per_client_match_a_plain_count(ops):
    caps = Sessions(max_per_client=3)
    held = {"a": 0, "b": 0}
    for take, host in ops:
        if take:
            expect = held[host] < 3
            assert (caps.open(host) is None) == expect
            held[host] += expect
        elif held[host]:
            caps.close(host)
            held[host] -= 1
        assert caps.held(host) == held[host]
