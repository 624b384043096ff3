"""Training environments in Ray actors: a RemoteEnv replays the same episodes as a local env,
steps of several envs overlap, and the trainer's run is the same with env_executor="ray"."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

from agentbench_poad.rl.env_executors import RemoteEnv, make_envs, step_envs
from tests.fixtures_rl import small_overrides  # noqa: E402
from tests.test_datascicoding_env import BAD_CODE, GOOD_BODY, LIMITS

pytestmark = pytest.mark.usefixtures("ray_cluster")
VOLATILE = ("runtime_s",)


def episode(env: gym.Env, seed: int, actions=None, steps: int = 12) -> list:
    """Reset with ``seed`` and play ``actions`` (or seeded choices among the available ones)."""
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    out = [(obs, {k: v for k, v in info.items() if k not in VOLATILE})]
    for t in range(steps if actions is None else len(actions)):
        available = info.get("available_actions")
        action = actions[t] if actions is not None else available[rng.integers(len(available))]
        obs, reward, terminated, truncated, info = env.step(action)
        out.append(
            (
                obs,
                reward,
                terminated,
                truncated,
                {k: v for k, v in info.items() if k not in VOLATILE},
            )
        )
        if terminated or truncated:
            obs, info = env.reset(seed=seed + 1)
    return out


@pytest.mark.parametrize(
    "env_id,kwargs,actions",
    [
        ("Overcooked-TomatoSalad-v0", {}, None),
        ("VirtualHome-FoodPreparation-v0", {}, None),
        (
            "DataSciCoding-iris-v0",
            {"sandbox": "process", "limits": LIMITS},
            [BAD_CODE[2][1], GOOD_BODY],
        ),
    ],
)
def test_remote_env_replays_the_local_episode(env_id, kwargs, actions):
    local = gym.make(env_id, **kwargs)
    remote = RemoteEnv(env_id, kwargs)
    try:
        assert remote.observation_space == local.observation_space
        assert remote.spec.id == env_id
        for seed in (0, 7):
            assert episode(remote, seed, actions) == episode(local, seed, actions)
    finally:
        local.close()
        remote.close()


def test_step_envs_overlaps_remote_steps_with_the_same_results():
    remote = make_envs("Overcooked-TomatoSalad-v0", {}, 3, "ray")
    local = make_envs("Overcooked-TomatoSalad-v0", {}, 3, "local")
    try:
        assert all(isinstance(env, RemoteEnv) for env in remote)
        infos = []
        for i, (a, b) in enumerate(zip(remote, local)):
            ra, rb = a.reset(seed=i), b.reset(seed=i)
            assert ra == rb
            infos.append(rb[1])
        rng = np.random.default_rng(0)
        for _ in range(6):
            actions = [
                info["available_actions"][rng.integers(len(info["available_actions"]))]
                for info in infos
            ]
            got, want = step_envs(remote, actions), step_envs(local, actions)
            assert got == want
            infos = [result[4] for result in want]
            if any(r[2] or r[3] for r in want):
                break
    finally:
        for env in remote + local:
            env.close()


def test_env_errors_reach_the_caller():
    env = RemoteEnv("Overcooked-TomatoSalad-v0")
    try:
        env.reset(seed=0)
        with pytest.raises(TypeError):
            env.step(3)
        obs, _ = env.reset(seed=0)  # still usable
        assert isinstance(obs, str)
    finally:
        env.close()


def test_unknown_env_executor_is_refused():
    from agentbench_poad.rl.config import PPOConfig

    with pytest.raises(ValueError, match="env_executor must be 'local' or 'ray'"):
        PPOConfig(env_executor="dask")
    with pytest.raises(ValueError, match="unknown env executor"):
        make_envs("Overcooked-TomatoSalad-v0", {}, 1, "dask")


def test_trainer_with_envs_in_ray_actors_equals_local(tiny_model, tmp_path):
    pytest.importorskip("torch")
    from agentbench_poad.baselines import get_algorithm
    from agentbench_poad.rl.trainer import TIMING_KEYS, train

    poad = get_algorithm("poad")

    small = small_overrides(epochs=1)

    def lines(run_dir):
        rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows]

    local = train(
        poad,
        "CaseStudy-Microwave-v0",
        tiny_model,
        total_steps=18,
        seed=1,
        out=tmp_path / "local",
        overrides=small,
        progress=False,
    )
    remote = train(
        poad,
        "CaseStudy-Microwave-v0",
        tiny_model,
        total_steps=18,
        seed=1,
        out=tmp_path / "ray",
        overrides={**small, "env_executor": "ray"},
        progress=False,
    )
    assert lines(remote) == lines(local)
    assert len(lines(local)) == 3
    # a run may resume under the other executor: where envs live is not part of its identity
    train(
        poad,
        "CaseStudy-Microwave-v0",
        tiny_model,
        total_steps=24,
        seed=1,
        out=tmp_path / "local",
        overrides={**small, "env_executor": "ray"},
        progress=False,
        resume=True,
    )
    assert len(lines(tmp_path / "local")) == 4
