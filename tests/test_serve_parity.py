"""The OpenEnv server plays exactly like gym.make, keeps sessions apart and survives bad clients.

A real server (``ServerThread``: uvicorn in a thread of this process, OpenEnv's ``create_app``)
on localhost and real OpenEnv clients (``TextEnvClient``, a raw ``websockets`` client, a client
process killed mid-episode); nothing is mocked. Leaks are counted with ``live_envs()``, the
number of served gymnasium envs open in this process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import gymnasium as gym
import pytest

pytest.importorskip("openenv.core", reason="the openenv extra is not installed")

import agentbench_poad  # noqa: E402,F401 - registers the ids
from agentbench_poad.baselines.oracle import make_oracle  # noqa: E402
from agentbench_poad.baselines.random import RandomAgent  # noqa: E402
from agentbench_poad.serve.app import ServerThread, UnknownEnvId, check_env_id  # noqa: E402
from agentbench_poad.serve.client import (  # noqa: E402
    RemoteTextEnv,
    ServerError,
    TextEnvClient,
    error_reply,
)
from agentbench_poad.serve.environment import json_safe, live_envs  # noqa: E402

OVERCOOKED = "Overcooked-TomatoSalad-v0"
PARITY_IDS = (OVERCOOKED, "Overcooked-TomatoLettuceSalad-v0", "VirtualHome-FoodPreparation-v0")


def wait_until(predicate, what: str, limit: float = 60.0) -> None:
    """Poll ``predicate`` (a liveness guard, not a timing assertion)."""
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def servers():
    running = {env_id: ServerThread(env_id).start() for env_id in PARITY_IDS}
    yield running
    for server in running.values():
        server.stop()
    wait_until(lambda: live_envs() == 0, "every env to close after the servers stopped")


def local_info(info: dict) -> dict:
    """The in-process info as it crosses the wire (JSON values)."""
    return json_safe(dict(info))


def play_both(env_id: str, remote: RemoteTextEnv, seed: int, agent_kind: str, max_steps=200):
    """Play one seeded episode in-process and through the server in lockstep; compare every
    value of every step. Returns the steps, the return, the last info and the invalid steps."""
    local = gym.make(env_id)
    try:
        obs, info = local.reset(seed=seed)
        r_obs, r_info = remote.reset(seed=seed)
        assert r_obs == obs
        assert r_info == local_info(info)
        if agent_kind == "oracle":
            agent = make_oracle(local)
        else:
            agent = RandomAgent(seed=seed)
        total, steps, invalid = 0.0, 0, 0
        for steps in range(1, max_steps + 1):
            action = agent.act(obs, info.get("available_actions"))
            if agent_kind == "random" and steps % 5 == 0:
                action = "dance on the table"  # not offered: a no-op step with a penalty
            obs, reward, terminated, truncated, info = local.step(action)
            r_obs, r_reward, r_term, r_trunc, r_info = remote.step(action)
            assert (r_obs, r_reward, r_term, r_trunc) == (obs, reward, terminated, truncated)
            assert r_info == local_info(info)
            total += reward
            invalid += info.get("action_valid") is False
            if terminated or truncated:
                break
        state = remote.state()
        assert state.env_id == env_id and state.seed == seed and state.step_count == steps
        assert state.episode_return == pytest.approx(total)
        assert state.episode_over == (terminated or truncated)
        return steps, total, info, invalid
    finally:
        local.close()


@pytest.mark.parametrize("env_id", PARITY_IDS)
def test_oracle_episodes_equal_in_process(servers, env_id):
    with RemoteTextEnv(servers[env_id].base_url) as remote:
        for seed in (0, 7):
            steps, total, info, _ = play_both(env_id, remote, seed, "oracle")
            assert info.get("success") is True, (env_id, seed, total)


@pytest.mark.parametrize("env_id", PARITY_IDS)
def test_random_episodes_equal_in_process(servers, env_id):
    with RemoteTextEnv(servers[env_id].base_url) as remote:
        invalid = sum(play_both(env_id, remote, s, "random", max_steps=40)[3] for s in (1, 2, 3))
        assert invalid > 0  # the unavailable actions crossed the wire as no-op steps


def test_invalid_action_is_a_typed_no_op(servers):
    with RemoteTextEnv(servers[OVERCOOKED].base_url) as remote:
        remote.reset(seed=0)
        _, reward, terminated, truncated, info = remote.step("dance on the table")
        assert info["action_valid"] is False and remote.last.action_valid is False
        assert remote.last.available_actions == info["available_actions"]
        assert not terminated and not truncated and remote.last.done is False


def test_two_concurrent_clients_keep_their_own_state(servers):
    url = servers[OVERCOOKED].base_url
    with RemoteTextEnv(url) as a, RemoteTextEnv(url) as b:
        envs = {seed: gym.make(OVERCOOKED) for seed in (11, 12)}
        pairs = {11: a, 12: b}
        obs = {}
        for seed, remote in pairs.items():
            o, info = envs[seed].reset(seed=seed)
            assert remote.reset(seed=seed) == (o, local_info(info))
            obs[seed] = (o, info)
        oracles = {seed: make_oracle(env) for seed, env in envs.items()}
        done = {11: False, 12: False}
        while not all(done.values()):  # interleave the two sessions step by step
            for seed, remote in pairs.items():
                if done[seed]:
                    continue
                o, info = obs[seed]
                action = oracles[seed].act(o, info["available_actions"])
                o, r, term, trunc, info = envs[seed].step(action)
                assert remote.step(action) == (o, r, term, trunc, local_info(info))
                obs[seed] = (o, info)
                done[seed] = term or trunc
        assert a.state().seed == 11 and b.state().seed == 12
        assert a.state().step_count != 0 and b.state().step_count != 0
        for env in envs.values():
            env.close()


def test_action_after_the_episode_ended_is_a_clear_error(servers):
    with RemoteTextEnv(servers[OVERCOOKED].base_url) as remote:
        with pytest.raises(ServerError, match=r"before (calling env\.)?reset") as exc:
            remote.step("take the bowl")
        assert exc.value.code == "EXECUTION_ERROR"
        play_both(OVERCOOKED, remote, 3, "oracle")
        with pytest.raises(ServerError, match="after the episode ended") as exc:
            remote.step("take the bowl")
        assert exc.value.code == "EXECUTION_ERROR"
        prompt, info = remote.reset(seed=3)  # the session is still usable
        assert info["available_actions"]


def test_malformed_messages_get_error_replies_and_the_session_lives(servers):
    async_client = TextEnvClient(servers[OVERCOOKED].base_url)
    client = async_client.sync()
    with client:
        raw = client._run  # OpenEnv's sync wrapper: run a coroutine on its loop

        assert error_reply(raw(async_client.send_raw("{not json")))[0] == "INVALID_JSON"
        assert error_reply(raw(async_client.send_raw('{"type": "fly"}')))[0] == "UNKNOWN_TYPE"
        step = {"type": "step", "data": {"text": 5}}
        assert error_reply(raw(async_client.send_raw(json.dumps(step))))[0] == "VALIDATION_ERROR"
        step = {"type": "step", "data": {"action": "take the bowl"}}
        assert error_reply(raw(async_client.send_raw(json.dumps(step))))[0] == "VALIDATION_ERROR"
        big = {"type": "step", "data": {"text": "x" * 100_000}}  # over MAX_ACTION_LENGTH
        code, message = error_reply(raw(async_client.send_raw(json.dumps(big))))
        assert code == "VALIDATION_ERROR"
        reset = {"type": "reset", "data": {"seed": 0, "colour": "red"}}
        code, message = error_reply(raw(async_client.send_raw(json.dumps(reset))))
        assert code == "EXECUTION_ERROR" and "colour" in message
        result = client.reset(seed=0)  # still the same, working session
        assert result.observation.available_actions


def test_huge_payload_drops_only_that_connection(servers):
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    url = servers[OVERCOOKED].base_url.replace("http", "ws") + "/ws"
    with RemoteTextEnv(servers[OVERCOOKED].base_url) as other:
        other.reset(seed=4)
        before = live_envs()
        with connect(url, max_size=None) as ws:
            ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
            assert json.loads(ws.recv())["type"] == "observation"
            wait_until(lambda: live_envs() == before + 1, "the new session's env")
            ws.send(json.dumps({"type": "step", "data": {"text": "x" * (4 << 20)}}))
            with pytest.raises(ConnectionClosed) as exc:
                ws.recv(timeout=60)
            assert exc.value.rcvd is not None and exc.value.rcvd.code == 1009
        wait_until(lambda: live_envs() == before, "the dropped session's env to close")
        other.step("take the bowl")  # the server keeps serving others


def test_dropped_client_process_frees_its_env(servers):
    url = servers[OVERCOOKED].base_url.replace("http", "ws") + "/ws"
    before = live_envs()
    script = (
        "import json, os\n"
        "from websockets.sync.client import connect\n"
        f"ws = connect({url!r})\n"
        "ws.send(json.dumps({'type': 'reset', 'data': {'seed': 5}}))\n"
        "assert json.loads(ws.recv())['type'] == 'observation'\n"
        "os._exit(0)  # dies mid-episode: no close message, no closing handshake\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    wait_until(lambda: live_envs() == before, "the dropped client's env to close")
    with RemoteTextEnv(servers[OVERCOOKED].base_url) as remote:
        assert remote.reset(seed=5)[1]["available_actions"]


def test_idle_session_is_closed_and_says_so():
    with ServerThread(OVERCOOKED, session_timeout=0.5) as server:
        before = live_envs()
        with RemoteTextEnv(server.base_url) as idle:
            idle.reset(seed=0)
            assert live_envs() == before + 1
            wait_until(lambda: live_envs() == before, "the idle session to be reaped")
            with pytest.raises(ServerError, match="session was closed") as exc:
                idle.step("take the bowl")
            assert exc.value.code == "EXECUTION_ERROR"
        with RemoteTextEnv(server.base_url) as fresh:  # the server keeps serving
            assert fresh.reset(seed=0)[1]["available_actions"]


def test_sessions_over_the_cap_are_refused():
    from websockets.sync.client import connect

    with ServerThread(OVERCOOKED, max_sessions=1) as server:
        with RemoteTextEnv(server.base_url) as first:
            first.reset(seed=0)
            with connect(server.base_url.replace("http", "ws") + "/ws") as second:
                # a connection takes a slot with its first message (tests/test_serve_hostile.py)
                second.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
                code, message = error_reply(json.loads(second.recv(timeout=60)))
            assert code == "CAPACITY_REACHED", message
            first.step("take the bowl")  # the first session is untouched


def test_unknown_id_is_refused_before_serving(capsys):
    from agentbench_poad.cli import main

    with pytest.raises(UnknownEnvId, match="Overcooked-TomatoSalad-v0"):
        check_env_id("Overcooked-TomatoSald-v0")
    assert main(["serve", "Overcooked-TomatoSald-v0", "--port", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown environment id" in err[0]
    with pytest.raises(UnknownEnvId):
        ServerThread("Nope-v0")


def test_stopping_the_server_closes_open_sessions():
    with ServerThread(OVERCOOKED) as server:
        before = live_envs()
        remote = RemoteTextEnv(server.base_url)
        remote.reset(seed=0)
        assert live_envs() == before + 1
    wait_until(lambda: live_envs() == before, "shutdown to close the open session")


# -- DataSciCoding: an open-action id with its sandbox behind the server -----------------------
def _datascicoding_parity(server: ServerThread, env_kwargs: dict) -> None:
    """The oracle's program and a program that fails, through the server and in-process."""
    local = gym.make("DataSciCoding-iris-v0", **env_kwargs)
    try:
        with RemoteTextEnv(server.base_url) as remote:
            obs, info = local.reset(seed=0)
            assert remote.reset(seed=0) == (obs, local_info(info))
            assert remote.last.available_actions is None
            for code in ("model = (", make_oracle(local).act(obs, None)):
                obs, reward, terminated, truncated, info = local.step(code)
                got = remote.step(code)
                assert got[:4] == (obs, reward, terminated, truncated)
                # the sandbox's timings differ between two runs of the same program
                timing = {"runtime_s"}
                assert {k: v for k, v in got[4].items() if k not in timing} == {
                    k: v for k, v in local_info(info).items() if k not in timing
                }
            assert terminated and reward > 0.5
    finally:
        local.close()


def test_datascicoding_process_sandbox_episode_equals_in_process():
    kwargs = {"sandbox": "process"}
    with ServerThread("DataSciCoding-iris-v0", env_kwargs=kwargs) as server:
        before = live_envs()
        _datascicoding_parity(server, kwargs)
        wait_until(lambda: live_envs() == before, "the DataSciCoding session to close")


@pytest.mark.docker
def test_datascicoding_docker_sandbox_leaks_no_container(sandbox_image):
    import docker

    from agentbench_poad.sandbox.docker_backend import LABEL, OWNER_LABEL, owner_id

    client = docker.from_env(timeout=30)

    def ours() -> list:
        found = client.containers.list(all=True, filters={"label": LABEL})
        return [c for c in found if c.labels.get(OWNER_LABEL) == owner_id()]

    kwargs = {"sandbox": "docker"}
    with ServerThread("DataSciCoding-iris-v0", env_kwargs=kwargs) as server:
        before = live_envs()
        _datascicoding_parity(server, kwargs)
        # a client that drops while its program is being graded
        url = server.base_url.replace("http", "ws") + "/ws"
        script = (
            "import json, os\n"
            "from websockets.sync.client import connect\n"
            f"ws = connect({url!r})\n"
            "ws.send(json.dumps({'type': 'reset', 'data': {'seed': 1}}))\n"
            "ws.recv()\n"
            "ws.send(json.dumps({'type': 'step', 'data': {'text': 'import time\\ntime.sleep(20)'}}))\n"
            "os._exit(0)\n"
        )
        subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
        wait_until(lambda: live_envs() == before, "the dropped session to close", 180)
    wait_until(lambda: not ours(), "every sandbox container to be removed", 120)


def test_openenv_http_endpoints(servers):
    import httpx

    url = servers[OVERCOOKED].base_url
    before = live_envs()
    with httpx.Client(base_url=url, timeout=60) as http:
        assert http.get("/health").status_code == 200
        schema = http.get("/schema").json()
        assert "text" in schema["action"]["properties"]
        assert {"prompt", "available_actions", "terminated", "truncated"} <= set(
            schema["observation"]["properties"]
        )
        reset = http.post("/reset", json={"seed": 0}).json()  # stateless: a throwaway env
        local, info = gym.make(OVERCOOKED).reset(seed=0)
        assert reset["observation"]["prompt"] == local
        assert reset["observation"]["available_actions"] == info["available_actions"]
        step = http.post("/step", json={"action": {"text": "take the bowl"}})
        assert step.status_code == 409 and "/ws" in step.json()["detail"]
        bad = http.post("/step", json={"action": {"text": 5}})
        assert bad.status_code == 422
    assert live_envs() == before  # the throwaway envs were closed
