"""Issue 27 items 1 and 2 end to end with the tiny model: every agent's KL guard measures the
same quantity, and time-limit truncations bootstrap from the value of the final observation."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from agentbench_poad.baselines import ALGORITHMS, get_algorithm  # noqa: E402
from agentbench_poad.rl.ppo import PolicyEvaluation, PPOAgent, PPOBatch, candidate_kl  # noqa: E402
from agentbench_poad.rl.rollout import EnvSlot, Progress, bootstrap, rollout  # noqa: E402
from agentbench_poad.rl.trainer import build_policy  # noqa: E402
from tests.fixtures_rl import small_overrides  # noqa: E402

ENV = "CaseStudy-Microwave-v0"  # offered actions, 5 steps per episode unless cut


def test_an_agent_cannot_redefine_the_kl_guard():
    with pytest.raises(TypeError, match="redefines \\['guard_kl'\\]"):

        class Diverging(PPOAgent):  # noqa: F841
            def guard_kl(self, batch, evaluation):
                return None


def test_every_registered_agent_uses_the_shared_guard():
    for name in ALGORITHMS:
        assert get_algorithm(name).guard_kl is PPOAgent.guard_kl, name


def _agent(name, tiny_model, **extra):
    algorithm = get_algorithm(name)
    config = algorithm.config_class.preset(None, **small_overrides(eval_every=0, **extra))
    return algorithm(config, build_policy(config, tiny_model, seed=0), seed=0)


def test_token_and_action_level_agents_guard_the_same_kl(tiny_model):
    """POAD (token-level loss) and TWOSOME (action-level loss) on the same policy and samples:
    the guard's KL is the exact KL of the candidate categorical for both, not the LM's per-token
    KL for POAD."""
    poad = _agent("poad", tiny_model)
    twosome = _agent("twosome", tiny_model)
    twosome.policy = poad.policy  # one policy, two agents
    env = gym.make(ENV)
    prompts, actions = [], []
    for seed in range(4):
        observation, info = env.reset(seed=seed)
        prompts.append(observation)
        actions.append(list(info["available_actions"]))
    records = poad.collect(prompts, actions, torch.Generator().manual_seed(0))
    with torch.no_grad():  # move the policy away from the one that sampled
        for param in poad.policy.trainable_parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=torch.Generator().manual_seed(1)))
    size = len(records)
    batch = PPOBatch(
        old_log_probs=torch.zeros(size, 1),
        advantages=torch.zeros(size, 1),
        returns=torch.zeros(size, 1),
        old_values=torch.zeros(size, 1),
        mask=torch.ones(size, 1, dtype=torch.bool),
        extras={
            "prompts": prompts,
            "available_actions": actions,
            "index": [r.sample.index for r in records],
            "old_candidate_log_probs": [r.sample.candidate_log_probs for r in records],
        },
    )
    token_level = poad.guard_kl(batch, PolicyEvaluation(torch.zeros(size, 1), torch.zeros(size, 1)))
    action_level = twosome.guard_kl(batch, twosome.evaluate_policy(batch))
    expected = candidate_kl(
        batch.extras["old_candidate_log_probs"],
        poad.policy.candidate_log_probs(prompts, actions),
    )
    assert token_level is not None and action_level is not None
    np.testing.assert_allclose(token_level.numpy(), expected.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(action_level.numpy(), expected.numpy(), rtol=1e-5, atol=1e-7)
    assert float(expected.sum()) > 0
    # POAD's own update pass scores the offered actions too: the guard reads its categoricals.
    tokens = [r.sample.token_ids for r in records]
    width = max(len(t) for t in tokens)
    batch.extras["token_ids"] = tokens
    batch.mask = torch.arange(width)[None, :] < torch.tensor([len(t) for t in tokens])[:, None]
    evaluation = poad.evaluate_policy(batch)
    assert evaluation.candidate_log_probs is not None
    from_update = poad.guard_kl(batch, evaluation)
    assert from_update is not None
    np.testing.assert_allclose(from_update.numpy(), expected.numpy(), rtol=1e-5, atol=1e-7)


def test_open_actions_keep_the_token_level_guard(tiny_model):
    poad = _agent("poad", tiny_model)
    batch = PPOBatch(
        old_log_probs=torch.zeros(1, 1),
        advantages=torch.zeros(1, 1),
        returns=torch.zeros(1, 1),
        old_values=torch.zeros(1, 1),
        mask=torch.ones(1, 1, dtype=torch.bool),
        extras={"prompts": ["x"], "available_actions": [None], "old_candidate_log_probs": [None]},
    )
    assert poad.guard_kl(batch, PolicyEvaluation(torch.zeros(1, 1), torch.zeros(1, 1))) is None


@pytest.mark.parametrize("name", ["poad", "ntpo", "twosome"])
def test_a_time_limit_bootstraps_from_the_final_observation(name, tiny_model):
    """Episodes cut at 2 steps: the truncated step's target is r + gamma V(final observation)
    (the action's last token for token-level agents), the terminal ones are r alone."""
    agent = _agent(name, tiny_model, num_envs=2, rollout_length=5, lam=0.9)
    config = agent.config
    slots = [EnvSlot(gym.make(ENV, max_episode_steps=2), i) for i in range(2)]
    for slot in slots:
        slot.start(0)
    buffer, finished = rollout(
        agent, slots, config, torch.Generator().manual_seed(0), Progress(), 0, ENV
    )
    bootstrap(agent, buffer, slots)
    cut = buffer.truncated_records()
    assert cut and finished
    for record in cut:
        assert not record.terminated and record.final_observation is not None
        (value,) = agent.bootstrap_values([record.final_observation])
        assert record.final_value == pytest.approx(float(value))
    agent.compute_advantages(buffer)
    returns = np.asarray(buffer.returns)
    for t, step in enumerate(buffer.steps):
        for i, record in enumerate(step):
            last = returns[t, i] if returns.ndim == 2 else returns[t, i, len(record.values) - 1]
            if record.truncated:
                expected = record.reward + config.gamma * record.final_value
            elif record.terminated:
                expected = record.reward
            else:
                continue
            assert float(last) == pytest.approx(expected, rel=1e-5, abs=1e-6)
