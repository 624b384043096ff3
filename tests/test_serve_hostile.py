"""The OpenEnv server shrugs off hostile clients (issue 47, item 5).

Real uvicorn servers on free localhost ports (``ServerThread``: uvicorn in a thread of this
process, its log read from uvicorn's logger; the ``serve`` command for its start-up check) and
raw clients (``websockets``' sync client, ``httpx``, client processes killed mid-session);
nothing is mocked. Each test states the hostile act and what must still hold.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("openenv.core", reason="the openenv extra is not installed")

import httpx  # noqa: E402
from websockets.exceptions import ConnectionClosed, InvalidStatus  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from agentbench_poad.serve.app import ServerThread  # noqa: E402
from agentbench_poad.serve.client import RemoteTextEnv  # noqa: E402

OVERCOOKED = "Overcooked-TomatoSalad-v0"
RESET = json.dumps({"type": "reset", "data": {"seed": 0}})
STATE = json.dumps({"type": "state"})
# Longest echo of a client's input an error may carry: guard.ECHO_PREFIX_CHARS (64) plus the
# "... (N characters)" note; the tests use it as a bound, not the constant, so they fail on
# servers that echo whole inputs.
ECHO_BOUND = 120


def wait_until(predicate, what: str, limit: float = 60.0) -> None:
    """Poll ``predicate`` (a liveness guard, not a timing assertion)."""
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.05)


def ws_url(server: ServerThread) -> str:
    return server.base_url.replace("http", "ws") + "/ws"


def ask(ws, text: str | bytes) -> dict:
    """Send one frame, return the server's reply."""
    ws.send(text)
    return json.loads(ws.recv(timeout=60))


def error_code(reply: dict) -> str | None:
    return reply["data"]["code"] if reply["type"] == "error" else None


@pytest.fixture(scope="module")
def server():
    with ServerThread(OVERCOOKED) as running:
        yield running


# -- messages that are JSON but not objects -------------------------------------------------
NOT_OBJECTS = ("[]", "null", '"x"', "5", "true", "[1, 2, 3]")


def test_non_object_messages_get_an_error_and_the_session_lives(server):
    with connect(ws_url(server)) as ws:
        for text in NOT_OBJECTS[:2]:  # before the session exists
            assert error_code(ask(ws, text)) == "VALIDATION_ERROR"
        assert ask(ws, RESET)["type"] == "observation"
        step = json.dumps({"type": "step", "data": {"text": "take the bowl"}})
        assert ask(ws, step)["type"] == "observation"
        for text in NOT_OBJECTS:  # in the session
            reply = ask(ws, text)
            assert error_code(reply) == "VALIDATION_ERROR", (text, reply)
            assert "JSON object" in reply["data"]["message"]
        assert error_code(ask(ws, b"\xff\xfe")) == "INVALID_JSON"  # binary, not UTF-8
        state = ask(ws, STATE.encode())  # a binary frame of UTF-8 JSON is read as text
        assert state["type"] == "state" and state["data"]["step_count"] == 1  # same session
        assert ask(ws, step)["type"] == "observation"


# -- session slots ------------------------------------------------------------------------
def test_silent_sockets_hold_no_session_slot():
    with ServerThread(OVERCOOKED, max_sessions=2) as server:
        with contextlib.ExitStack() as stack:
            # six sockets that connect and never send
            silent = [stack.enter_context(connect(ws_url(server))) for _ in range(6)]
            with RemoteTextEnv(server.base_url) as a, RemoteTextEnv(server.base_url) as b:
                assert a.reset(seed=0)[1]["available_actions"]  # both slots are free
                assert b.reset(seed=1)[1]["available_actions"]
                # now the two slots are held: a silent socket that speaks is refused
                assert error_code(ask(silent[0], RESET)) == "CAPACITY_REACHED"
            for ws in silent[1:3]:  # the slots came back when a and b closed
                assert ask(ws, RESET)["type"] == "observation"


def test_a_connection_silent_past_the_handshake_timeout_is_closed():
    with ServerThread(OVERCOOKED, max_sessions=1, handshake_timeout=0.5) as server:
        with connect(ws_url(server)) as ws:
            reply = json.loads(ws.recv(timeout=60))  # sent nothing: told why, then closed
            assert error_code(reply) == "SESSION_ERROR"
            assert "within 0.5 s of connecting" in reply["data"]["message"]
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=60)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        with connect(ws_url(server)) as ws:  # junk does not extend the handshake
            deadline = time.monotonic() + 60
            with pytest.raises(ConnectionClosed):
                while time.monotonic() < deadline:
                    ws.send("[]")
                    ws.recv(timeout=60)
        with connect(ws_url(server)) as ws:  # a client that speaks in time is served
            assert ask(ws, RESET)["type"] == "observation"
            time.sleep(1.0)  # past the handshake timeout: a session is not cut by it
            assert ask(ws, STATE)["type"] == "state"


def test_mcp_endpoints_cannot_open_sessions():
    with ServerThread(OVERCOOKED, max_sessions=1) as server:
        create = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}
        with httpx.Client(base_url=server.base_url, timeout=60) as http:
            assert http.post("/mcp", json=create).status_code == 404
        with pytest.raises(InvalidStatus) as refused:  # the WebSocket handshake is refused
            connect(server.base_url.replace("http", "ws") + "/mcp")
        assert refused.value.response.status_code == 403
        with connect(ws_url(server)) as ws:
            mcp = json.dumps({"type": "mcp", "data": create})
            assert error_code(ask(ws, mcp)) == "UNKNOWN_TYPE"
            assert ask(ws, RESET)["type"] == "observation"  # the one slot was still free


# -- HTTP bodies and echoes ---------------------------------------------------------------
def test_http_bodies_over_the_limit_get_413(server):
    huge = {"action": {"text": 5, "pad": "p" * (11 << 20)}}  # 11 MB, as the hostile user sent
    with httpx.Client(base_url=server.base_url, timeout=120) as http:
        response = http.post("/step", json=huge)
        assert response.status_code == 413
        assert len(response.content) < 1000 and "--max-message-bytes" in response.text

        def chunks():  # no Content-Length: the limit counts the bytes as they come
            yield b'{"action": {"text": "'
            for _ in range(40):
                yield b"x" * 65536
            yield b'"}}'

        response = http.post(
            "/step", content=chunks(), headers={"content-type": "application/json"}
        )
        assert response.status_code == 413
        # under the limit the endpoints answer as before
        assert http.post("/step", json={"action": {"text": "take the bowl"}}).status_code == 409
        assert http.post("/reset", json={"seed": 0}).status_code == 200


def test_http_validation_errors_echo_only_a_prefix(server):
    pad = "p" * 500_000  # under the body limit: this reaches validation
    with httpx.Client(base_url=server.base_url, timeout=120) as http:
        for body in (
            {"action": {"text": 5, "pad": pad}},  # OpenEnv's own 422 (action validation)
            {"action": pad},  # FastAPI's 422 (request validation)
            {"action": {"text": pad}},  # over MAX_ACTION_LENGTH
            {"action": {"text": "a", **{f"k{i}": i for i in range(5000)}}},  # 5000 errors
        ):
            response = http.post("/step", json=body)
            assert response.status_code == 422
            assert len(response.content) < 8000, len(response.content)
            assert "p" * ECHO_BOUND not in response.text
            assert response.json()["detail"]  # still says what is wrong


def test_websocket_errors_echo_only_a_prefix(server):
    pad = "y" * 200_000
    with connect(ws_url(server)) as ws:
        ws.send(RESET)
        ws.recv(timeout=60)
        for message, code in (
            ({"type": "step", "data": {"text": 5, "pad": pad}}, "VALIDATION_ERROR"),
            ({"type": "step", "data": {"text": pad}}, "VALIDATION_ERROR"),
            ({"type": pad}, "UNKNOWN_TYPE"),
            ({"type": "reset", "data": {pad: 1}}, "EXECUTION_ERROR"),
            ({"type": "step", "data": {f"k{i}": i for i in range(5000)}}, "VALIDATION_ERROR"),
        ):
            ws.send(json.dumps(message))
            raw = ws.recv(timeout=60)
            assert len(raw) < 8000, (code, len(raw))
            assert "y" * ECHO_BOUND not in raw
            assert error_code(json.loads(raw)) == code
        assert ask(ws, STATE)["type"] == "state"  # the session lives


# -- episode ids --------------------------------------------------------------------------
def test_every_reset_sets_a_fresh_episode_id(server):
    with RemoteTextEnv(server.base_url) as remote:
        ids = []
        for seed in (0, 0, 1):
            remote.reset(seed=seed)
            ids.append(remote.state().episode_id)
        assert all(isinstance(i, str) and i for i in ids) and len(set(ids)) == 3
    with connect(ws_url(server)) as ws:  # a client may name its own (OpenEnv's tracking id)
        reset = {"type": "reset", "data": {"seed": 0, "episode_id": "run-7/episode-3"}}
        assert ask(ws, json.dumps(reset))["type"] == "observation"
        assert ask(ws, STATE)["data"]["episode_id"] == "run-7/episode-3"
        for bad in (123, "", "e" * 129):
            reset = {"type": "reset", "data": {"seed": 0, "episode_id": bad}}
            reply = ask(ws, json.dumps(reset))
            assert (
                error_code(reply) == "EXECUTION_ERROR" and "episode_id" in reply["data"]["message"]
            )
        assert ask(ws, STATE)["data"]["episode_id"] == "run-7/episode-3"  # nothing was reset


# -- env kwargs ---------------------------------------------------------------------------
def test_bad_env_kwargs_are_refused_before_serving(capsys):
    from agentbench_poad.cli import main

    with pytest.raises(ValueError, match="does not take 'bogus'; it takes .*task"):
        ServerThread(OVERCOOKED, env_kwargs={"bogus": 1})
    with pytest.raises(ValueError, match="max_episode_steps"):  # a bad value of a known key
        ServerThread(OVERCOOKED, env_kwargs={"max_episode_steps": "many"})
    # The CLI's port is taken, so a server that did not check first fails to bind (and the
    # test with it) instead of serving; the check must answer before binding.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        assert main(["serve", OVERCOOKED, "--port", port, "--env-kwargs", '{"bogus": 1}']) == 2
    out, err = capsys.readouterr()
    err = err.strip().splitlines()
    assert len(err) == 1 and "'bogus'" in err[0] and OVERCOOKED in err[0], err
    assert "serving" not in out


# -- the log ------------------------------------------------------------------------------
CLIENT = """
import json, os, sys
from websockets.sync.client import connect
mode, url = sys.argv[1], sys.argv[2]
ws = connect(url)
print("%s:%d" % ws.local_address[:2], flush=True)
if mode in ("after-reset", "mid-step", "polite"):
    ws.send(json.dumps({"type": "reset", "data": {"seed": 5}}))
    ws.recv(timeout=60)
if mode == "mid-step":
    ws.send(json.dumps({"type": "step", "data": {"text": "take the bowl"}}))
if mode == "polite":
    ws.close()
    sys.exit(0)
os._exit(0)  # dies: no close message, no closing handshake
"""


class Lines(logging.Handler):
    """The server's log lines (uvicorn's ``uvicorn.error`` logger), tracebacks included."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.extend(self.format(record).splitlines())


def test_a_disconnect_logs_one_line():
    log = logging.getLogger("uvicorn.error")
    lines = Lines()
    with ServerThread(OVERCOOKED, log_level="info") as server:
        log.addHandler(lines)
        try:
            clients = {}
            for mode in ("after-reset", "mid-step", "silent", "polite", "after-reset"):
                done = subprocess.run(
                    [sys.executable, "-c", CLIENT, mode, ws_url(server)],
                    capture_output=True,
                    text=True,
                    timeout=120,
                    check=True,
                )
                clients[done.stdout.strip()] = mode

            def settled() -> bool:  # every end logged, or a traceback to show
                ends = sum('"WebSocket /ws" ended' in line for line in lines.lines)
                return ends == len(clients) or any("Traceback" in line for line in lines.lines)

            wait_until(settled, "every connection's end to be logged")
        finally:
            log.removeHandler(lines)
    text = "\n".join(lines.lines)
    assert "Traceback" not in text and "Exception in ASGI" not in text, text
    for address, mode in clients.items():
        mine = [line for line in lines.lines if address in line]
        assert len(mine) == 2, (mode, mine)  # uvicorn's "[accepted]" and the end line
        assert "[accepted]" in mine[0] and "ended: client disconnected" in mine[1], mine
        assert ("no session" in mine[1]) == (mode == "silent"), mine
