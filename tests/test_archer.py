"""ArCHer (baselines/archer.py): TD targets against a plain loop, the replay buffer, the rollout's
transitions, the critic's fixed point, and exact resume (in-process and after a SIGKILL)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from agentbench_poad.baselines import get_algorithm  # noqa: E402
from agentbench_poad.baselines.archer import (  # noqa: E402
    Archer,
    ArcherConfig,
    ReplayBuffer,
    Transition,
    critic_targets,
)
from agentbench_poad.rl.buffer import RolloutBuffer, StepRecord  # noqa: E402
from agentbench_poad.rl.config import MINI_PRESETS  # noqa: E402
from agentbench_poad.rl.policy import ActionSample  # noqa: E402
from agentbench_poad.rl.run_dir import RunDirectory  # noqa: E402
from agentbench_poad.rl.trainer import TIMING_KEYS, build_policy, latest_checkpoint, train  # noqa: E402
from tests.fixtures_rl import small_overrides  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ENV = "CaseStudy-Microwave-v0"  # 5-step episodes: terminal successes and time-limit cuts
#: Small enough to overwrite the buffer within the run, one warm-up update, a fast target, two
#: critic passes (resume must hold with them).
SMALL = small_overrides(
    critic_updates=3,
    critic_batch_size=4,
    critic_passes=2,
    replay_capacity=8,
    warmup_updates=1,
    tau=0.5,
)


# -- TD targets ------------------------------------------------------------------------------------
@st.composite
def td_cases(draw):
    size = draw(st.integers(1, 12))
    value = st.floats(-5, 5, allow_nan=False, width=32)
    rewards = draw(st.lists(value, min_size=size, max_size=size))
    dones = draw(st.lists(st.booleans(), min_size=size, max_size=size))
    next_values = [draw(st.lists(value, min_size=size, max_size=size)) for _ in range(2)]
    counts = draw(st.lists(st.integers(1, 5), min_size=size, max_size=size))
    owners = [b for b, k in enumerate(counts) for _ in range(k)]
    order = draw(st.permutations(range(len(owners))))  # candidates in any order
    owners = [owners[i] for i in order]
    weights = draw(st.lists(st.floats(0.01, 1.0), min_size=len(owners), max_size=len(owners)))
    totals = [sum(w for w, o in zip(weights, owners) if o == b) for b in range(size)]
    probs = [w / totals[o] for w, o in zip(weights, owners)]
    candidate_q = [draw(st.lists(value, min_size=len(owners), max_size=len(owners))) for _ in "12"]
    gamma = draw(st.floats(0.0, 1.0))
    return rewards, dones, next_values, candidate_q, probs, owners, gamma


def loop_targets(rewards, dones, next_values, candidate_q, probs, owners, gamma):
    q_targets, v_targets = [], []
    for head in range(2):
        q_row, v_row = [], []
        for b in range(len(rewards)):
            q_row.append(rewards[b] + (0.0 if dones[b] else gamma * next_values[head][b]))
            total = 0.0
            for m in range(len(owners)):
                if owners[m] == b:
                    total += probs[m] * candidate_q[head][m]
            v_row.append(total)
        q_targets.append(q_row)
        v_targets.append(v_row)
    return q_targets, v_targets


@settings(max_examples=80, deadline=None)
@given(td_cases())
def test_critic_targets_match_a_plain_loop(case):
    rewards, dones, next_values, candidate_q, probs, owners, gamma = case
    next_t = torch.tensor(next_values, dtype=torch.float64)
    next_t[:, torch.tensor(dones)] = float("nan")  # never read after a terminal state
    q, v = critic_targets(
        torch.tensor(rewards, dtype=torch.float64),
        torch.tensor(dones, dtype=torch.float64),
        next_t,
        torch.tensor(candidate_q, dtype=torch.float64),
        torch.tensor(probs, dtype=torch.float64),
        torch.tensor(owners, dtype=torch.long),
        gamma,
    )
    expected_q, expected_v = loop_targets(*case)
    assert q.shape == v.shape == (2, len(rewards))
    torch.testing.assert_close(q, torch.tensor(expected_q, dtype=torch.float64))
    torch.testing.assert_close(v, torch.tensor(expected_v, dtype=torch.float64))


# -- replay buffer ---------------------------------------------------------------------------------
def transition(i: int, *, offered: bool = True, done: bool = False) -> Transition:
    return Transition(
        observation=f"obs {i % 3}",
        available_actions=(f"a{i}", "b") if offered else None,
        action=f"a{i}",
        action_ids=(i, i + 1),
        reward=0.25 * i,
        next_observation=None if done else f"obs {(i + 1) % 3}",
        done=done,
    )


def test_replay_buffer_keeps_the_newest_capacity_transitions():
    buffer = ReplayBuffer(capacity=4, seed=0)
    for i in range(10):
        buffer.add(transition(i))
        assert len(buffer) == min(i + 1, 4)
    assert sorted(t.action for t in buffer.items) == ["a6", "a7", "a8", "a9"]
    assert set(buffer.sample(50)) <= set(buffer.items)
    with pytest.raises(ValueError, match="empty"):
        ReplayBuffer(capacity=2, seed=0).sample(1)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 20), st.integers(1, 40))
def test_replay_sampling_is_determined_by_the_seed(seed, capacity, inserted):
    a, b = ReplayBuffer(capacity, seed), ReplayBuffer(capacity, seed)
    for i in range(inserted):
        a.add(transition(i))
        b.add(transition(i))
    draws = [a.sample_indices(7) for _ in range(3)]
    assert draws == [b.sample_indices(7) for _ in range(3)]
    assert all(0 <= i < min(capacity, inserted) for draw in draws for i in draw)


def test_replay_buffer_round_trips_through_a_checkpoint(tmp_path):
    buffer = ReplayBuffer(capacity=5, seed=11)
    for i in range(7):
        buffer.add(transition(i, offered=i % 2 == 0, done=i % 3 == 0))
    buffer.sample_indices(3)  # move the generator
    torch.save(buffer.state_dict(), tmp_path / "replay.pt")
    state = torch.load(tmp_path / "replay.pt", weights_only=True)
    restored = ReplayBuffer(capacity=5, seed=999)
    restored.load_state_dict(state)
    assert restored.items == buffer.items and restored.inserted == buffer.inserted
    assert restored.sample_indices(20) == buffer.sample_indices(20)
    restored.add(transition(7))  # the ring position survives too
    buffer.add(transition(7))
    assert restored.items == buffer.items
    with pytest.raises(ValueError, match="replay_capacity"):
        ReplayBuffer(capacity=6, seed=0).load_state_dict(state)


# -- the agent -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def policy(tiny_model):
    config = ArcherConfig.preset(None, **SMALL)
    return build_policy(config, tiny_model, seed=0)


def record(prompt, action, offered, reward=0.0, terminated=False, truncated=False, final=None):
    sample = ActionSample(
        text=action, index=0, token_ids=[1, 2], token_log_probs=[-1, -1], log_prob=-1
    )
    return StepRecord(
        prompt=prompt,
        available_actions=offered,
        sample=sample,
        values=[],
        reward=reward,
        terminated=terminated,
        truncated=truncated,
        final_observation=final,
    )


def test_rollout_steps_become_transitions(policy):
    agent = Archer(ArcherConfig.preset(None, **SMALL), policy, seed=0)
    offered = ["x", "y"]
    rollout = RolloutBuffer(num_envs=2)
    rollout.add([record("s0", "x", offered), record("t0", "y", None, reward=1.0, terminated=True)])
    rollout.add(
        [record("s1", "y", offered, truncated=True, final="s1-cut"), record("t1", "x", None)]
    )
    rollout.add([record("s2", "x", offered, terminated=True), record("t2", "y", None, reward=2.0)])
    agent._admit(rollout)
    got = [(t.observation, t.next_observation, t.done, t.reward) for t in agent.replay.items]
    assert got == [
        ("s0", "s1", False, 0.0),
        ("t0", None, True, 1.0),
        ("s1", "s1-cut", False, 0.0),  # a time limit: bootstrap from where it was cut
        ("t1", "t2", False, 0.0),
        ("s2", None, True, 0.0),
    ]
    assert list(agent.pending) == [1]  # env 1's last step waits for the next observation
    assert agent.replay.items[0].available_actions == ("x", "y")
    assert agent.replay.items[1].available_actions is None
    nxt = RolloutBuffer(num_envs=2)
    nxt.add([record("u0", "x", offered), record("v0", "x", None)])
    agent._admit(nxt)
    assert (agent.replay.items[5].observation, agent.replay.items[5].next_observation) == (
        "t2",
        "v0",
    )
    assert agent.replay.items[5].reward == 2.0


def test_critic_reaches_the_td_fixed_point_of_a_one_step_task(policy):
    """Terminal transitions only: Q(s, a) -> r(a), V(s) -> Σ_a π(a|s) r(a) (the current
    policy's categorical), and the advantage is their difference."""
    overrides = {**SMALL, "critic_updates": 500, "critic_batch_size": 16, "critic_lr": 3e-3}
    overrides.update(critic_hidden_sizes=(64,), max_grad_norm=10.0)
    agent = Archer(ArcherConfig.preset(None, **overrides), policy, seed=0)
    offered = ("close the microwave", "open the microwave")
    rewards = {offered[0]: 1.0, offered[1]: -0.5}
    scene = "The pancake is inside, the microwave is open."
    for action, reward in rewards.items():
        agent.replay.add(
            Transition(
                scene,
                offered,
                action,
                tuple(policy.encode_action(scene, action)),
                reward,
                None,
                True,
            )
        )
    agent.train_critic()
    with torch.no_grad():
        probs = policy.candidate_log_probs([scene], [list(offered)])[0].exp()
    states = agent._state_features([scene, scene])
    pairs = agent._pair_features([(scene, policy.encode_action(scene, a)) for a in offered])
    with torch.no_grad():
        q = agent.utterance_critic.q(states, pairs)
        v = agent.utterance_critic.v(states[:1])
    target_v = float(sum(p * rewards[a] for p, a in zip(probs.tolist(), offered)))
    torch.testing.assert_close(q, torch.tensor([[1.0, -0.5]] * 2), atol=0.05, rtol=0)
    torch.testing.assert_close(v, torch.full((2, 1), target_v), atol=0.05, rtol=0)


def test_critic_passes_repeat_the_phase_minibatches(policy):
    """``critic_passes`` replays the same drawn minibatches: the buffer's generator advances as
    for one pass, the optimiser takes passes × critic_updates steps."""
    offered = ("close the microwave", "open the microwave")
    scene = "The pancake is inside, the microwave is open."
    agents = {}
    for passes in (1, 3):
        overrides = {**SMALL, "critic_updates": 2, "critic_batch_size": 4, "critic_passes": passes}
        agent = Archer(ArcherConfig.preset(None, **overrides), policy, seed=0)
        for action in offered:
            ids = tuple(policy.encode_action(scene, action))
            agent.replay.add(Transition(scene, offered, action, ids, 1.0, None, True))
        agent.train_critic()
        agents[passes] = agent
    steps = {
        p: [int(s["step"]) for s in a.utterance_optimizer.state_dict()["state"].values()]
        for p, a in agents.items()
    }
    assert set(steps[1]) == {2} and set(steps[3]) == {6}
    assert torch.equal(
        agents[1].replay.generator.get_state(), agents[3].replay.generator.get_state()
    )
    with pytest.raises(ValueError, match="critic_passes"):
        ArcherConfig(critic_passes=0)


def test_presets_say_where_their_values_come_from():
    paper = ArcherConfig.preset("overcooked")
    assert (paper.tau, paper.replay_capacity, paper.critic_updates) == (0.1, 100_000, 50)
    assert paper.critic_batch_size == 256 and paper.warmup_updates == 20
    mini = ArcherConfig.preset("overcooked-mini")
    assert (mini.critic_updates, mini.critic_batch_size, mini.replay_capacity) == (16, 32, 4096)
    assert (mini.critic_passes, mini.warmup_updates) == (4, 4) and paper.critic_passes == 1
    assert mini.lr == 5e-4 and mini.tau == 0.1  # the shared CPU preset; the paper's tau
    # its own critic lr: the shared 1e-3 switched off every unit of a Q head (module docstring)
    assert mini.critic_lr == 1e-4 < MINI_PRESETS["overcooked"]["critic_lr"]
    assert ArcherConfig.preset("datascicoding-mini").critic_batch_size == 16
    for bad in ({"tau": 0.0}, {"replay_capacity": 0}, {"critic_updates": -1}):
        with pytest.raises(ValueError):
            ArcherConfig(**bad)


# -- training and exact resume ---------------------------------------------------------------------
def lines(run_dir):
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        for key in TIMING_KEYS:
            row.pop(key)
        out.append(row)
    return out


def archer_state(run_dir):
    state = torch.load(latest_checkpoint(run_dir) / "agent.pt", weights_only=True)
    return state["archer"]


def assert_same_state(a, b):
    for key in ("critic", "target_critic"):
        assert a[key].keys() == b[key].keys()
        for name in a[key]:
            torch.testing.assert_close(a[key][name], b[key][name], rtol=0, atol=0)
    assert a["replay"]["transitions"] == b["replay"]["transitions"]
    assert torch.equal(a["replay"]["generator"], b["replay"]["generator"])
    assert a["pending"] == b["pending"] and a["updates_seen"] == b["updates_seen"]


def run(tiny_model, out, algorithm=None, *, resume=False, steps=2 * 3 * 5):
    return train(
        algorithm or get_algorithm("archer"),
        ENV,
        tiny_model,
        total_steps=steps,
        seed=5,
        out=out,
        overrides=SMALL,
        progress=False,
        resume=resume,
    )


def test_trains_and_resumes_exactly(tiny_model, tmp_path, monkeypatch):
    full = run(tiny_model, tmp_path / "full")
    rows = lines(full)
    assert [r["update"] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[0]["policy_steps_taken"] == 0  # the warm-up update holds the actor
    assert any(r["policy_steps_taken"] > 0 for r in rows[1:])
    assert all(r["value_loss"] is not None and r["critic_grad_norm"] > 0 for r in rows)
    assert all(0.0 < r["critic_alive_units"] <= 1.0 for r in rows)
    saved = archer_state(full)
    assert len(saved["replay"]["transitions"]["reward"]) == 8  # the buffer filled and wrapped
    assert saved["replay"]["inserted"] > 8

    save = RunDirectory.save_checkpoint

    def killed_before_third_checkpoint(run_dir, update, *args, **kwargs):
        if update == 3:
            raise KeyboardInterrupt
        return save(run_dir, update, *args, **kwargs)

    monkeypatch.setattr(RunDirectory, "save_checkpoint", killed_before_third_checkpoint)
    with pytest.raises(KeyboardInterrupt):
        run(tiny_model, tmp_path / "part")
    monkeypatch.undo()
    run(tiny_model, tmp_path / "part", resume=True)
    assert lines(tmp_path / "part") == rows
    assert_same_state(archer_state(tmp_path / "part"), saved)

    class Forgetful(Archer):  # drops the replay buffer from its checkpoints
        name = "archer"

        def load_state_dict(self, state):
            super().load_state_dict(state)
            self.replay.items, self.replay.inserted = [], 0

    monkeypatch.setattr(RunDirectory, "save_checkpoint", killed_before_third_checkpoint)
    with pytest.raises(KeyboardInterrupt):
        run(tiny_model, tmp_path / "forgetful", Forgetful)
    monkeypatch.undo()
    run(tiny_model, tmp_path / "forgetful", Forgetful, resume=True)
    forgetful = lines(tmp_path / "forgetful")
    assert forgetful[:2] == rows[:2] and forgetful[2:] != rows[2:]


@pytest.mark.slow
def test_sigkilled_run_resumes_to_the_uninterrupted_run(tiny_model, tmp_path):
    """kill -9 a `train --agent archer` process mid-run, `--resume` it: the updates after the
    kill equal an uninterrupted run's (metrics, critics, target, replay buffer)."""
    updates = 10
    command = [sys.executable, "-m", "agentbench_poad.cli", "train", "--agent", "archer"]
    command += ["--env", ENV, "--model", str(tiny_model), "--seed", "5", "--no-progress"]
    command += ["--total-steps", str(2 * 3 * updates)]
    for key, value in SMALL.items():
        text = ",".join(map(str, value)) if isinstance(value, tuple) else value
        command += ["--set", f"{key}={text}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    killed, full = tmp_path / "killed", tmp_path / "full"
    proc = subprocess.Popen(
        [*command, "--out", str(killed)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    metrics = killed / "metrics.jsonl"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
            break
        time.sleep(0.01)
    assert proc.poll() is None, f"the run ended before it could be killed: {proc.stderr.read()}"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    assert 3 <= len(metrics.read_text().splitlines()) < updates
    for out, extra in ((killed, ["--resume"]), (full, [])):
        done = subprocess.run(
            [*command, "--out", str(out), *extra],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr
    assert [r["update"] for r in lines(killed)] == list(range(1, updates + 1))
    assert lines(killed) == lines(full)
    assert_same_state(archer_state(killed), archer_state(full))
