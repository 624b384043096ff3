"""Overcooked API conformance: gymnasium view, PettingZoo parallel env, bad input, rendering."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded
from pettingzoo.test import parallel_api_test

from agentbench_poad import check_text_env
from agentbench_poad.environments import registered_ids
from agentbench_poad.environments.overcooked import parallel_env
from agentbench_poad.environments.overcooked.registration import DESCRIPTIONS
from agentbench_poad.environments.overcooked.tasks import TASKS

OVERCOOKED_IDS = registered_ids("overcooked")


def test_every_task_is_registered_with_a_description():
    assert OVERCOOKED_IDS == sorted(f"Overcooked-{name}-v0" for name in TASKS)
    assert set(DESCRIPTIONS) == set(OVERCOOKED_IDS)
    assert {"Overcooked-TomatoSalad-v0", "Overcooked-TomatoLettuceSalad-v0"} <= set(OVERCOOKED_IDS)


def test_registration_does_not_import_the_engine():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import agentbench_poad.environments.overcooked.registration as r\n"
        "r.register_envs()\n"
        "print('agentbench_poad.environments.overcooked.engine' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("env_id", OVERCOOKED_IDS)
def test_check_text_env(env_id):
    env = gym.make(env_id)
    check_text_env(env, max_steps=40)


@pytest.mark.parametrize(
    ("task", "n_agents"), [("TomatoSalad", 1), ("TomatoSalad", 2), ("TomatoLettuceSalad", 2)]
)
def test_parallel_api(task, n_agents):
    env = parallel_env(task=task, n_agents=n_agents)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parallel_api_test(env, num_cycles=50)


def test_parallel_api_with_valid_actions_reaches_episode_end():
    env = parallel_env(task="TomatoSalad", n_agents=2)
    observations, infos = env.reset(seed=3)
    rng = np.random.default_rng(0)
    assert set(observations) == {"chef_0", "chef_1"}
    for _ in range(400):
        actions = {
            a: infos[a]["available_actions"][int(rng.integers(len(infos[a]["available_actions"])))]
            for a in env.agents
        }
        observations, rewards, terminations, truncations, infos = env.step(actions)
        assert rewards["chef_0"] == rewards["chef_1"]  # team reward
        for a in observations:
            assert env.observation_space(a).contains(observations[a])
        if not env.agents:
            break
    assert not env.agents, "a random team must end the episode within the tick limit"
    assert any(truncations.values()) or any(terminations.values())
    with pytest.raises(ResetNeeded):
        env.step({})


def test_two_chefs_joint_macro_runs_until_both_finish():
    env = parallel_env(task="TomatoSalad", n_agents=2)
    _, infos = env.reset(seed=0)
    # chef_0 fetches the tomato (2 ticks), chef_1 walks to the board (1 tick from (1,2)).
    _, _, _, _, infos = env.step(
        {"chef_0": "pick up the tomato", "chef_1": "walk to the cutting board"}
    )
    engine = env.engine
    assert infos["chef_0"]["macro_action_steps"] == 2
    assert engine.state.hand[0] == 0  # chef_0 holds the tomato
    assert engine.state.chef[1] == (1, 1)  # chef_1 stands in front of the board
    assert "carrying an unchopped tomato" in env._prompts[0]
    assert "standing in front of the cutting board" in env._prompts[1]


def test_single_agent_view_equals_parallel_env_with_one_chef():
    for task in ("TomatoSalad", "TomatoLettuceSalad"):
        single = gym.make(f"Overcooked-{task}-v0")
        par = parallel_env(task=task, n_agents=1)
        obs_s, info_s = single.reset(seed=1)
        obs_p, info_p = par.reset(seed=1)
        rng = np.random.default_rng(7)
        for _ in range(60):
            assert obs_s == obs_p["chef_0"]
            assert info_s == info_p["chef_0"]
            actions = info_s["available_actions"]
            label = actions[int(rng.integers(len(actions)))]
            obs_s, r_s, te_s, tr_s, info_s = single.step(label)
            obs_p, r_p, te_p, tr_p, info_p = par.step({"chef_0": label})
            assert (r_s, te_s, tr_s) == (r_p["chef_0"], te_p["chef_0"], tr_p["chef_0"])
            if te_s or tr_s:
                break


def test_unavailable_action_is_a_noop():
    env = gym.make("Overcooked-TomatoSalad-v0")
    obs, info = env.reset(seed=0)
    engine = env.unwrapped.engine
    env.step("pick up the tomato")
    before = engine.state.key(), engine.state.ticks
    obs, reward, terminated, truncated, info = env.step("juggle the tomato")
    assert (engine.state.key(), engine.state.ticks) == before
    assert info["action_valid"] is False and info["macro_action_steps"] == 0
    assert reward == env.unwrapped.invalid_action_penalty == -0.001
    assert "not available" in obs and "juggle the tomato" in obs
    assert not terminated and not truncated
    assert info["available_actions"][2] == "put the tomato on the cutting board"


def test_bad_input():
    env = gym.make("Overcooked-TomatoSalad-v0")
    with pytest.raises(ResetNeeded):
        env.unwrapped.step("pick up the tomato")
    env.reset(seed=0)
    for bad in (0, None, b"serve nothing", ["serve nothing"]):
        with pytest.raises(TypeError):
            env.step(bad)
    with pytest.raises(ValueError, match="TomatoLettuceSalad"):
        gym.make("Overcooked-TomatoSalad-v0", task="Pizza")
    with pytest.raises(ValueError, match="parallel_env"):
        gym.make("Overcooked-TomatoSalad-v0", n_agents=2)
    with pytest.raises(ValueError, match="n_agents"):
        parallel_env(task="TomatoSalad", n_agents=3)
    with pytest.raises(ValueError, match="n_agents"):
        parallel_env(task="TomatoSalad", n_agents=0)
    with pytest.raises(ValueError, match="render_mode"):
        parallel_env(task="TomatoSalad", render_mode="human")


def test_step_after_termination_raises():
    env = gym.make("Overcooked-TomatoSalad-v0")
    env.reset(seed=0)
    for label in (
        "pick up the tomato",
        "put the tomato on the cutting board",
        "chop the tomato",
        "pick up the tomato",
        "take the bowl",
    ):
        env.step(label)
    *_, terminated, _, _ = env.step("serve the dish")
    assert terminated
    with pytest.raises(ResetNeeded):
        env.step("serve nothing")
    env.reset(seed=0)
    env.step("serve nothing")


def test_reset_seeds_np_random_but_not_the_kitchen():
    env = gym.make("Overcooked-TomatoLettuceSalad-v0")
    obs_a, _ = env.reset(seed=1)
    draw_a = env.unwrapped.np_random.integers(1 << 30)
    obs_b, _ = env.reset(seed=2)
    draw_b = env.unwrapped.np_random.integers(1 << 30)
    env.reset(seed=1)
    assert env.unwrapped.np_random.integers(1 << 30) == draw_a != draw_b
    assert obs_a == obs_b


def test_render_modes():
    env = gym.make("Overcooked-TomatoLettuceSalad-v0", render_mode="ansi")
    env.reset(seed=0)
    grid = env.render()
    rows = grid.splitlines()
    assert rows[0] == "#####t#" and rows[1] == "K...1.l" and rows[2] == "K.....o"
    assert "chef 1 holds: nothing" in grid
    env.step("pick up the tomato")
    assert "chef 1 holds: tomato (0/3 chopped)" in env.render()

    env = gym.make("Overcooked-TomatoSalad-v0", render_mode="rgb_array")
    env.reset(seed=0)
    image = env.render()
    assert isinstance(image, np.ndarray) and image.dtype == np.uint8
    assert image.shape == (84, 84, 3)
    before = image.copy()
    env.step("pick up the tomato")
    assert not np.array_equal(before, env.render())

    plain = gym.make("Overcooked-TomatoSalad-v0")
    plain.reset(seed=0)
    assert plain.render() is None
