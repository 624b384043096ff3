"""GRPO and GiGPO on generated (open) actions: token-level PPO, group advantages per token.

The loss identity is checked against a plain loop (Python floats, no tensors); the end-to-end runs
use the tiny model on a two-step open-action env defined here (rewards vary with the generated
text, so the update takes real policy steps) and on DataSciCoding with the process sandbox.
"""

from __future__ import annotations

import json
import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from agentbench_poad.baselines import get_algorithm  # noqa: E402
from agentbench_poad.core import TextEnv, text_space  # noqa: E402
from agentbench_poad.rl.group_rollout import GroupBuffer, GroupEpisode, GroupStep  # noqa: E402
from agentbench_poad.rl.policy_types import ActionSample  # noqa: E402
from agentbench_poad.rl.ppo import (  # noqa: E402
    PolicyEvaluation,
    PPOSettings,
    accumulate_policy_gradients,
)
from agentbench_poad.rl.trainer import build_policy, train  # noqa: E402
from tests.fixtures_rl import small_overrides  # noqa: E402

GROUP_AGENTS = ("grpo", "gigpo")
SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def small(**extra: Any) -> dict[str, Any]:
    return small_overrides(**{"eval_every": 0, "group_size": 2, "max_new_tokens": 4, **extra})


def metrics(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


class _ParityEnv(TextEnv):
    """Two steps of free text; +1 when the text's first character has an even code point.

    The same observation at each step index, so a group's steps anchor (GiGPO) at both steps;
    a random tiny model earns both rewards, so groups differ and the policy really steps.
    """

    def __init__(self) -> None:
        self.observation_space = text_space(256)
        self.action_space = text_space(4096)
        self._step_index = 0

    def _prompt(self) -> str:
        return f"Say anything ({self._step_index + 1} of 2):"

    def _reset(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self._step_index = 0
        return self._prompt(), {"available_actions": None, "action_valid": True}

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        reward = float(bool(action) and ord(action[0]) % 2 == 0)
        self._step_index += 1
        info = {"available_actions": None, "action_valid": True}
        return self._prompt(), reward, self._step_index == 2, False, info


PARITY = "GroupOpenTest-Parity-v0"
if PARITY not in gym.registry:
    gym.register(PARITY, entry_point=_ParityEnv)


def open_step(prompt: str, token_log_probs: list[float], reward: float = 0.0) -> GroupStep:
    ids = list(range(3, 3 + len(token_log_probs)))
    sample = ActionSample("x" * len(ids), -1, ids, token_log_probs, float(sum(token_log_probs)))
    return GroupStep(prompt=prompt, available_actions=None, sample=sample, reward=reward)


@pytest.fixture(scope="module")
def agents(tiny_model):
    """A GRPO and a GiGPO on the tiny model (their batches and advantages need no forward)."""
    made = {}
    for name in GROUP_AGENTS:
        algorithm = get_algorithm(name)
        config = algorithm.config_class(**small())
        made[name] = algorithm(config, build_policy(config, tiny_model, seed=0), seed=0)
    return made


# -- the loss: token-level clipped PPO, each token with its step's advantage ----------------------
def loop_clipped_loss(old, new, advantage, clip, dual_clip):
    """PPO's clipped loss of one token, with Python floats."""
    ratio = math.exp(new - old)
    loss = max(-ratio * advantage, -min(max(ratio, 1 - clip), 1 + clip) * advantage)
    if dual_clip is not None and advantage < 0:
        loss = min(loss, -dual_clip * advantage)
    return loss


log_prob_st = st.floats(-6, -0.01, allow_nan=False).map(lambda x: round(x, 3))


@st.composite
def open_steps(draw):
    """Steps of generated actions (some empty): old and new per-token log-probs."""
    n = draw(st.integers(1, 6))
    old = [draw(st.lists(log_prob_st, min_size=0, max_size=5)) for _ in range(n)]
    new = [[o + draw(st.floats(-0.5, 0.5).map(lambda x: round(x, 3))) for o in row] for row in old]
    return old, new


@SETTINGS
@given(
    steps=open_steps(),
    advantage=st.floats(-3, 3, allow_nan=False).map(lambda x: round(x, 3)),
    per_step=st.booleans(),
    clip=st.sampled_from([0.1, 0.2, 0.3]),
    dual_clip=st.sampled_from([None, 3.0]),
    agent=st.sampled_from(GROUP_AGENTS),
)
def test_token_level_group_loss_is_ppo_per_token(
    agents, steps, advantage, per_step, clip, dual_clip, agent
):
    """All advantages A: the loss is PPO's clipped loss of every generated token, averaged over
    the tokens; per-step advantages: each token carries its own step's."""
    old, new = steps
    advantages = [advantage + (0.5 * i if per_step else 0.0) for i in range(len(old))]
    buffer = GroupBuffer([GroupEpisode(0, 1, [open_step("s", row) for row in old])])
    buffer.advantages = np.array(advantages)
    batch = agents[agent].make_batch(buffer)
    width = batch.mask.shape[1]
    new_grid = torch.zeros(len(old), width, requires_grad=False)
    for i, row in enumerate(new):
        new_grid[i, : len(row)] = torch.tensor(row)
    new_grid.requires_grad_(True)

    def evaluate(chunk):
        assert chunk.extras["token_ids"] == batch.extras["token_ids"]  # one chunk, same order
        return PolicyEvaluation(new_grid, torch.zeros_like(new_grid))

    ppo = PPOSettings(clip=clip, dual_clip=dual_clip, entropy_coef=0.0)
    stats = accumulate_policy_gradients(batch, batch.advantages, evaluate, ppo)

    terms = [
        loop_clipped_loss(o, n, a, clip, dual_clip)
        for old_row, new_row, a in zip(old, new, advantages)
        for o, n in zip(old_row, new_row)
    ]
    expected = sum(terms) / max(len(terms), 1)
    assert stats["policy_loss"] == pytest.approx(expected, rel=1e-4, abs=1e-5)
    # the guard of open actions: the k3 estimate over the same tokens
    k3 = [math.exp(n - o) - 1 - (n - o) for r, s in zip(old, new) for o, n in zip(r, s)]
    assert stats["approx_kl"] == pytest.approx(sum(k3) / max(len(k3), 1), rel=1e-4, abs=1e-6)


@SETTINGS
@given(
    size=st.integers(2, 5),
    lengths=st.lists(st.integers(1, 5), min_size=1, max_size=5),
    reward=st.floats(-1, 1, allow_nan=False).map(lambda x: round(x, 3)),
    agent=st.sampled_from(GROUP_AGENTS),
    normalization=st.sampled_from(["mean_std", "mean"]),
)
def test_an_all_equal_group_gives_every_token_zero(
    agents, size, lengths, reward, agent, normalization
):
    """A group whose episodes earn the same rewards (DataSciCoding: every attempt fails) gives 0
    to every token of every step, GiGPO's first-step anchor (the whole group) included; a second
    group with different returns beside it still gets a signal."""
    episodes = []
    for e in range(size):  # the first prompt is shared, later ones (the error text) differ
        steps = [open_step("task", [-1.0] * lengths[0], reward)]
        steps += [
            open_step(f"error {e}.{t}", [-1.0] * n, reward) for t, n in enumerate(lengths[1:])
        ]
        episodes.append(GroupEpisode(0, 5, steps))
    episodes += [
        GroupEpisode(1, 6, [open_step("other", [-1.0, -2.0], 1.0)]),
        GroupEpisode(1, 6, [open_step("other", [-1.0], 0.0)]),
    ]
    buffer = GroupBuffer(episodes)
    algorithm = agents[agent]
    algorithm.config.advantage_normalization = normalization
    try:
        algorithm.compute_advantages(buffer)
    finally:
        algorithm.config.advantage_normalization = "mean_std"
    batch = algorithm.make_batch(buffer)
    first_group = sum(len(e.steps) for e in episodes[:size])
    assert (batch.advantages[:first_group] == 0).all()
    assert (batch.advantages[first_group:][batch.mask[first_group:]] != 0).all()
    assert (batch.advantages[~batch.mask] == 0).all()


def test_a_buffer_mixing_open_and_offered_actions_is_refused(agents):
    offered = GroupStep("s", ["a", "b"], ActionSample("a", 0, [3], [-0.1], -0.7, [-0.7, -0.7]))
    buffer = GroupBuffer([GroupEpisode(0, 1, [open_step("s", [-1.0]), offered])])
    buffer.advantages = np.zeros(2)
    with pytest.raises(ValueError, match="mixes generated"):
        agents["grpo"].make_batch(buffer)


def test_a_minibatch_of_empty_actions_moves_no_weight(tiny_model):
    """A generation that stops at once is an empty action: a minibatch of only such actions has
    no token to score, so its loss is 0 and no weight moves (the update does not crash); next to
    a real action, that one's minibatch still steps."""
    algorithm = get_algorithm("grpo")
    config = algorithm.config_class(**small(num_minibatches=2, epochs=1), skip_signal_free=False)
    grpo = algorithm(config, build_policy(config, tiny_model, seed=0), seed=0)
    ids = grpo.policy.encode_action("p", "hi")

    def update(*token_ids):
        steps = [open_step("p", [-1.0] * len(t), reward=float(i)) for i, t in enumerate(token_ids)]
        for step, t in zip(steps, token_ids):
            step.sample.token_ids = list(t)
        buffer = GroupBuffer([GroupEpisode(0, 1, [step]) for step in steps])
        grpo.compute_advantages(buffer)
        before = [p.detach().clone() for p in grpo.policy.trainable_parameters()]
        result = grpo.update(buffer, torch.Generator().manual_seed(0))
        after = list(grpo.policy.trainable_parameters())
        return result, any(not torch.equal(a, b) for a, b in zip(before, after))

    result, moved = update([], [])
    assert result["policy_steps_taken"] == 2 and result["policy_loss"] == 0.0 and not moved
    result, moved = update([], ids)
    assert result["policy_steps_taken"] == 2 and result["policy_grad_norm"] > 0 and moved


# -- end to end --------------------------------------------------------------------------------
@pytest.mark.parametrize("agent", GROUP_AGENTS)
def test_trains_on_generated_actions(agent, tiny_model, tmp_path):
    """Two updates of two groups of 2 episodes of 2 steps: token-level policy steps with the
    k3 guard, no critic, the best generated action kept, the same run twice bit for bit."""
    overrides = small(num_envs=4, rollout_length=2, num_minibatches=2, epochs=1)
    kwargs = dict(total_steps=16, seed=0, overrides=overrides, progress=False)
    run = train(get_algorithm(agent), PARITY, tiny_model, out=tmp_path / "a", **kwargs)
    lines = metrics(run)
    assert [line["env_steps"] for line in lines] == [8, 16]
    assert all(line["value_loss"] is None for line in lines)
    assert all(line["episodes"] == 4 for line in lines)
    taken = [line for line in lines if not line["signal_free"]]
    assert taken, lines  # a random model earns some rewards
    for line in taken:
        assert line["policy_steps_taken"] == 2 and line["policy_grad_norm"] > 0
        assert math.isfinite(line["approx_kl"]) and math.isfinite(line["policy_loss"])
    best = json.loads((run / "best_code.json").read_text())
    assert best["reward"] == 1.0 and best["env_id"] == PARITY and best["code"]
    again = train(get_algorithm(agent), PARITY, tiny_model, out=tmp_path / "b", **kwargs)
    for a, b in zip(lines, metrics(again)):
        a.pop("steps_per_second"), b.pop("steps_per_second")
        assert a == b


@pytest.mark.parametrize("agent", GROUP_AGENTS)
def test_cli_trains_one_update_on_datascicoding(agent, tiny_model, tmp_path):
    """`train --preset mini` on DataSciCoding-iris (offline dataset, process sandbox): one group
    of 2 episodes of at most 2 attempts; the token-level loss runs on the code prompts (the
    signal-free skip is off: a random model's code fails every attempt)."""
    from agentbench_poad.cli import main

    out = tmp_path / "run"
    sets = "group_size=2 num_envs=2 rollout_length=2 num_minibatches=1 epochs=1 eval_every=0"
    sets += " lora_layers=1 max_new_tokens=4 skip_signal_free=false"
    argv = ["train", "--agent", agent, "--env", "DataSciCoding-iris-v0", "--model"]
    argv += [str(tiny_model), "--total-steps", "4", "--out", str(out), "--preset", "mini"]
    argv += ["--env-arg", 'sandbox="process"', "--env-arg", "max_episode_steps=2", "--no-progress"]
    argv += [x for pair in sets.split() for x in ("--set", pair)]
    assert main(argv) == 0
    (line,) = metrics(out)
    assert line["episodes"] == 2 and line["env_steps"] == 4 and line["value_loss"] is None
    assert line["policy_steps_taken"] == 1 and math.isfinite(line["policy_loss"])
    best = json.loads((out / "best_code.json").read_text())
    assert best["env_id"] == "DataSciCoding-iris-v0" and isinstance(best["code"], str)


def test_gigpo_anchors_the_first_datascicoding_step_on_the_whole_group(agents):
    """Every episode of a group starts from the task prompt: one anchor state for the group's
    first steps, so GiGPO's first-step advantage is the group comparison of discounted returns."""
    from types import SimpleNamespace

    from agentbench_poad.rl.advantages import group_relative_advantages
    from agentbench_poad.rl.group_rollout import collect_groups

    gigpo = agents["gigpo"]
    envs = [
        gym.make("DataSciCoding-iris-v0", sandbox="process", max_episode_steps=2) for _ in range(2)
    ]
    try:
        state = SimpleNamespace(update=0, env_steps=0, best_code=None)
        slots = [SimpleNamespace(env=env) for env in envs]
        buffer, _ = collect_groups(gigpo, slots, torch.Generator().manual_seed(0), state, 0)
    finally:
        for env in envs:
            env.close()
    groups = buffer.episode_groups()
    first = [episode.steps[0] for episode in buffer.episodes]
    for group in set(groups):
        keys = {step.state_key() for step, g in zip(first, groups) if g == group}
        assert len(keys) == 1
    assert first[0].available_actions is None and state.best_code is not None
    gamma = gigpo.config.gamma
    starts = [
        sum(gamma**t * step.reward for t, step in enumerate(e.steps)) for e in buffer.episodes
    ]
    expected = group_relative_advantages(groups, starts, normalization="mean_std")
    step = gigpo.step_advantages(buffer)
    at_start = np.cumsum([0] + [len(e.steps) for e in buffer.episodes[:-1]])
    np.testing.assert_allclose(step[at_start], expected)


def test_presets_cover_datascicoding():
    """G = 4, a round of whole 5-attempt episodes fits in an update (paper and CPU presets)."""
    from agentbench_poad.rl.config import preset_for

    for agent in GROUP_AGENTS:
        config_class = get_algorithm(agent).config_class
        for preset in ("auto", "mini"):
            name = preset_for(config_class, "DataSciCoding-iris-v0", preset)
            config = config_class.preset(name)
            assert config.group_size == 4 and config.rollout_length >= 5
            assert config.num_envs % config.group_size == 0
        mini = config_class.preset("datascicoding-mini")
        assert (mini.num_envs, mini.rollout_length, mini.lr) == (4, 5, 5e-4)
        assert config_class.preset("datascicoding").max_new_tokens == 128
