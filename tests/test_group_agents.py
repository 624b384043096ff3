"""GRPO and GiGPO end to end with the tiny model: group rollouts, learning, budget, bad input."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from agentbench_poad.baselines import get_algorithm  # noqa: E402
from agentbench_poad.registration import env_facts, registered_ids  # noqa: E402
from agentbench_poad.rl.group_rollout import GroupBuffer, GroupEpisode, GroupStep  # noqa: E402
from agentbench_poad.rl.trainer import build_policy, latest_checkpoint, load_agent, train  # noqa: E402
from tests.fixtures_rl import small_overrides  # noqa: E402

GROUP_AGENTS = ("grpo", "gigpo")
BANDIT = "CaseStudy-MicrowaveClose-v0"  # one step: "close" +1, "open" -1
RESTRICTED = [i for i in registered_ids() if not env_facts(i).open_action]


def small(**extra):
    return small_overrides(**{"eval_every": 0, "group_size": 2, **extra})


def metrics(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("agent", GROUP_AGENTS)
def test_learns_the_key_token(agent, tiny_word_model, tmp_path):
    """Within 15 updates the greedy policy switches from "open" to "close" (bandit toy)."""
    from tests.test_agents_learning import prob_of_close

    overrides = small(
        num_envs=4,
        group_size=4,
        rollout_length=4,
        epochs=2,
        num_minibatches=2,
        lr=1e-1,
        eval_every=3,
        eval_episodes=1,
    )
    config = get_algorithm(agent).config_class(**overrides)
    before = prob_of_close(build_policy(config, tiny_word_model, seed=0))
    assert before < 0.5
    run = train(
        get_algorithm(agent),
        BANDIT,
        tiny_word_model,
        total_steps=15 * 16,
        seed=0,
        out=tmp_path / "run",
        overrides=overrides,
        progress=False,
    )
    curve = json.loads((run / "learning_curve.json").read_text())
    assert curve[-1]["eval_return"] == 1.0, curve
    assert prob_of_close(load_agent(run).policy) > before + 0.1
    lines = metrics(run)
    assert all(line["value_loss"] is None for line in lines)  # no critic
    assert [line["env_steps"] for line in lines] == [16 * u for u in range(1, 16)]


@pytest.mark.slow
@pytest.mark.parametrize("agent", GROUP_AGENTS)
def test_solves_the_case_study(agent, tiny_word_model, tmp_path):
    """The three-step microwave task (open, put the pancake in, close): greedy success."""
    overrides = small(
        num_envs=4,
        group_size=4,
        rollout_length=8,
        epochs=2,
        num_minibatches=2,
        lr=1e-1,
        gamma=0.95,
        eval_every=5,
        eval_episodes=1,
    )
    run = train(
        get_algorithm(agent),
        "CaseStudy-Microwave-v0",
        tiny_word_model,
        total_steps=40 * 32,
        seed=0,
        out=tmp_path / "run",
        overrides=overrides,
        progress=False,
    )
    curve = json.loads((run / "learning_curve.json").read_text())
    assert any(point["eval_success_rate"] == 1.0 for point in curve), curve


@pytest.mark.parametrize("agent", GROUP_AGENTS)
@pytest.mark.parametrize(
    "extra",
    [{}, {"lora_layers": 1, "eval_every": 1}],
    ids=["all-layers", "top-layer-cached-states-and-eval"],
)
def test_budget_counts_env_steps_and_resume_replays_the_same_groups(
    agent, extra, tiny_model, tmp_path
):
    """Whole groups: each update ends at or past u x batch_size steps, within one round; a
    resumed run (empty caches and score memo) repeats the uninterrupted one bit for bit."""
    import warnings

    # A round never exceeds an update here: no budget warning.
    warnings.filterwarnings("error", message="a round of")
    env_id = "CaseStudy-Microwave-v0"  # episodes of 1-5 steps
    kwargs = dict(
        total_steps=3 * 10, seed=3, overrides=small(rollout_length=5, **extra), progress=False
    )
    straight = train(get_algorithm(agent), env_id, tiny_model, out=tmp_path / "a", **kwargs)
    steps = [line["env_steps"] for line in metrics(straight)]
    assert len(steps) == 3
    for u, taken in enumerate(steps, start=1):
        assert 10 * u <= taken < 10 * u + 2 * 5  # one round: 2 copies x 5 steps at most
    stopped = train(
        get_algorithm(agent), env_id, tiny_model, out=tmp_path / "b", max_updates=1, **kwargs
    )
    train(get_algorithm(agent), env_id, tiny_model, out=stopped, resume=True, **kwargs)

    def last(run):
        line = metrics(run)[-1]
        line.pop("steps_per_second")
        return line

    assert last(straight) == last(stopped)
    assert "critic" not in torch.load(latest_checkpoint(straight) / "agent.pt", weights_only=True)


def test_gigpo_anchor_states_change_the_advantages(tiny_model):
    """Same buffer: GiGPO = GRPO + the anchor-state term; ω = 0 is GRPO exactly."""
    grpo_class, gigpo_class = get_algorithm("grpo"), get_algorithm("gigpo")
    config = grpo_class.config_class(**small())
    policy = build_policy(config, tiny_model, seed=0)

    def step(prompt, reward):
        return GroupStep(prompt=prompt, available_actions=["a", "b"], sample=None, reward=reward)

    # Group 0: both episodes visit "s" then "t" (the second loops in "s"); group 1: two one-step
    # episodes from "u" with equal returns.
    buffer = GroupBuffer(
        [
            GroupEpisode(0, 7, [step("s", 0.0), step("t", 1.0)]),
            GroupEpisode(0, 7, [step("s", 0.0), step("s", 0.0), step("t", 0.0)]),
            GroupEpisode(1, 9, [step("u", 1.0)]),
            GroupEpisode(1, 9, [step("u", 1.0)]),
        ]
    )
    grpo = grpo_class(config, policy)
    grpo.compute_advantages(buffer)
    episode = buffer.advantages.copy()
    # returns 1 and 0: mean 0.5, sample std sqrt(0.5)
    assert np.allclose(episode[:2], np.sqrt(0.5)) and np.allclose(episode[2:5], -np.sqrt(0.5))
    assert (episode[5:] == 0).all()  # equal returns in group 1
    gigpo = gigpo_class(gigpo_class.config_class(**small(gamma=0.5)), policy)
    gigpo.compute_advantages(buffer)
    step_part = buffer.advantages - episode
    # anchor "t": returns 1 and 0; anchor "s": 0.5, 0, 0 (γ = 0.5).
    assert step_part[1] > 0 > step_part[4] and step_part[0] > 0 > step_part[2]
    assert (step_part[5:] == 0).all()
    omega0 = gigpo_class(gigpo_class.config_class(**small(step_advantage_weight=0.0)), policy)
    omega0.compute_advantages(buffer)
    np.testing.assert_array_equal(buffer.advantages, episode)


# -- bad input, before any policy step ------------------------------------------------------------
@pytest.mark.parametrize("agent", GROUP_AGENTS)
def test_group_size_one_is_refused(agent):
    with pytest.raises(ValueError, match="group_size must be an int >= 2"):
        get_algorithm(agent).config_class(**small(group_size=1))
    with pytest.raises(ValueError, match="multiple of group_size"):
        get_algorithm(agent).config_class(**small(num_envs=3, group_size=2))


def test_a_group_reset_with_different_seeds_is_refused():
    buffer = GroupBuffer(
        [
            GroupEpisode(0, 1, [GroupStep("s", ["a"], None)]),
            GroupEpisode(0, 2, [GroupStep("s", ["a"], None)]),
        ]
    )
    with pytest.raises(ValueError, match="reset with different seeds"):
        buffer.check_groups()


class _NumericObservations(gym.Env):
    """Offers actions but observes numbers (not a text env)."""

    observation_space = gym.spaces.Discrete(3)
    action_space = gym.spaces.Text(16)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {"available_actions": ["left", "right"]}

    def step(self, action):
        return 1, 0.0, True, False, {"available_actions": ["left", "right"]}


class _SeedIgnoringEnv(_NumericObservations):
    """Text, but each reset starts somewhere else whatever the seed (not deterministic)."""

    observation_space = gym.spaces.Text(64)
    count = 0

    def reset(self, *, seed=None, options=None):
        _SeedIgnoringEnv.count += 1
        return f"room {_SeedIgnoringEnv.count}", {"available_actions": ["left", "right"]}

    def step(self, action):
        return "done", 0.0, True, False, {"available_actions": ["left", "right"]}


@pytest.mark.parametrize(
    ("env_class", "match"),
    [(_NumericObservations, "need text observations"), (_SeedIgnoringEnv, "not deterministic")],
)
def test_bad_environments_fail_before_the_first_update(env_class, match, tiny_model, tmp_path):
    env_id = f"GroupTest-{env_class.__name__.strip('_')}-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=env_class)
    with pytest.raises(ValueError, match=match):
        train(
            get_algorithm("gigpo"),
            env_id,
            tiny_model,
            total_steps=6,
            out=tmp_path / "run",
            overrides=small(),
            progress=False,
        )
    assert not (tmp_path / "run" / "metrics.jsonl").exists() or not metrics(tmp_path / "run")


@pytest.mark.parametrize("agent", GROUP_AGENTS)
def test_restricted_actions_keep_the_action_level_loss(agent, tiny_model):
    """Offered actions: one PPO term per decision, the chosen action's categorical log-prob (open
    actions take the token-level loss instead: tests/test_group_open_actions.py)."""
    algorithm_class = get_algorithm(agent)
    config = algorithm_class.config_class(**small())
    algorithm = algorithm_class(config, build_policy(config, tiny_model, seed=0), seed=0)
    prompts, actions = ["s", "t"], [["close", "open"], ["open", "close"]]
    samples = algorithm.policy.act(prompts, actions, generator=torch.Generator().manual_seed(0))
    steps = [GroupStep(p, a, s) for p, a, s in zip(prompts, actions, samples)]
    buffer = GroupBuffer([GroupEpisode(0, 1, steps[:1]), GroupEpisode(0, 1, steps[1:])])
    buffer.advantages = np.array([0.5, -0.5])
    batch = algorithm.make_batch(buffer)
    assert batch.mask.shape == (2, 1) and batch.mask.all() and not buffer.open_actions()
    assert batch.old_log_probs[:, 0].tolist() == pytest.approx([s.log_prob for s in samples])
    assert batch.advantages[:, 0].tolist() == [0.5, -0.5] and "token_ids" not in batch.extras
    evaluation = algorithm.evaluate_policy(batch)
    assert evaluation.log_probs.shape == (2, 1) and evaluation.candidate_log_probs is not None


# -- the CLI on every restricted-action id --------------------------------------------------------
@pytest.mark.parametrize("agent", GROUP_AGENTS)
@pytest.mark.parametrize("env_id", RESTRICTED)
def test_cli_trains_on_every_restricted_action_id(agent, env_id, tiny_model, tmp_path):
    """A tiny smoke: one update of one group of 2 episodes cut at 2 steps (a time limit)."""
    from agentbench_poad.cli import main

    out = tmp_path / "run"
    code = main(
        [
            "train",
            "--agent",
            agent,
            "--env",
            env_id,
            "--model",
            str(tiny_model),
            "--total-steps",
            "4",
            "--out",
            str(out),
            "--preset",
            "mini",
            "--env-arg",
            "max_episode_steps=2",
            "--no-progress",
            *("--set group_size=2 --set num_envs=2 --set rollout_length=2").split(),
            *("--set num_minibatches=1 --set eval_every=0 --set lora_layers=1").split(),
        ]
    )
    assert code == 0
    (line,) = metrics(out)
    assert line["episodes"] >= 2 and 4 <= line["env_steps"] <= 8 and line["value_loss"] is None


@pytest.mark.parametrize("agent", GROUP_AGENTS)
def test_a_round_plays_whole_groups_from_one_seed_and_keeps_truncations(agent, tiny_model):
    """Two groups of 2 side by side, cut by a 2-step time limit: whole, seeded, counted."""
    from types import SimpleNamespace

    from agentbench_poad.rl.group_rollout import collect_groups, group_seed

    algorithm_class = get_algorithm(agent)
    # skip_signal_free off: the update runs (and its loss is measured) whatever the rewards
    config = algorithm_class.config_class(
        **small(num_envs=4, rollout_length=2), skip_signal_free=False
    )
    algorithm = algorithm_class(config, build_policy(config, tiny_model, seed=0), seed=0)
    slots = [
        SimpleNamespace(env=gym.make("CaseStudy-Microwave-v0", max_episode_steps=2))
        for _ in range(4)
    ]
    state = SimpleNamespace(update=2, env_steps=100)
    buffer, finished = collect_groups(algorithm, slots, torch.Generator().manual_seed(0), state, 7)
    assert len(buffer.episodes) == 4 and buffer.episode_groups() == [0, 0, 1, 1]
    assert [e.reset_seed for e in buffer.episodes] == [group_seed(7, 3, g) for g in (0, 0, 1, 1)]
    assert state.env_steps == 100 + buffer.num_samples  # one round: the target (24) was passed
    for episode, (episode_return, success) in zip(buffer.episodes, finished):
        assert 1 <= len(episode.steps) <= 2 and episode_return == episode.episode_return
        assert episode.terminated or (episode.truncated and len(episode.steps) == 2)
        assert success is not None
    algorithm.compute_advantages(buffer)
    assert buffer.advantages.shape == (buffer.num_samples,)
    # A group's episodes start in the same state, so their first steps share an anchor state.
    assert buffer.episodes[0].steps[0].state_key() == buffer.episodes[1].steps[0].state_key()
    metrics = algorithm.update(buffer, torch.Generator().manual_seed(1))
    assert np.isnan(metrics["value_loss"]) and np.isfinite(metrics["policy_loss"])
