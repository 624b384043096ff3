"""Stable, symmetric policy updates (dual clip, no update from noise, equal budgets, independent
streams, a guard that cannot be bypassed): the math against plain loops, and every agent end to
end on the tiny model."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from agentbench_poad.baselines import ALGORITHMS, get_algorithm  # noqa: E402
from agentbench_poad.rl.ppo import (  # noqa: E402
    NonFiniteLossError,
    PolicyEvaluation,
    PPOAgent,
    accumulate_policy_gradients,
    check_shared_update,
    clipped_surrogate_loss,
    normalize_advantages,
    signal_free,
)
from agentbench_poad.rl.rollout import (  # noqa: E402
    ACTIONS,
    EnvSlot,
    Progress,
    algorithm_stream,
    bootstrap,
    rollout,
)
from agentbench_poad.rl.trainer import build_policy, train  # noqa: E402
from tests.fixtures_rl import small_overrides  # noqa: E402

ENV = "CaseStudy-Microwave-v0"  # offered actions, reward only when the task is done
AGENTS = sorted(ALGORITHMS)


# -- the math against plain loops ---------------------------------------------------------------
def _plain_loss(log_ratio: float, advantage: float, clip: float, dual: float | None) -> float:
    """The dual-clip PPO loss of one element, written out case by case."""
    log_ratio = min(max(log_ratio, -20.0), 20.0)
    ratio = math.exp(log_ratio)
    clipped_ratio = min(max(ratio, 1.0 - clip), 1.0 + clip)
    loss = max(-ratio * advantage, -clipped_ratio * advantage)
    if dual is not None and advantage < 0:
        loss = min(loss, -dual * advantage)
    return loss


finite = st.floats(-30.0, 30.0, allow_nan=False, width=32)


@settings(max_examples=200, deadline=None)
@given(
    log_ratios=st.lists(finite, min_size=1, max_size=24),
    advantages=st.lists(
        st.floats(-50.0, 50.0, allow_nan=False, width=32), min_size=24, max_size=24
    ),
    clip=st.floats(0.05, 0.5),
    dual=st.one_of(st.none(), st.floats(1.5, 10.0)),
)
def test_dual_clip_loss_equals_the_plain_formula(log_ratios, advantages, clip, dual):
    n = len(log_ratios)
    new = torch.tensor(log_ratios, dtype=torch.float64)
    old = torch.zeros(n, dtype=torch.float64)
    adv = torch.tensor(advantages[:n], dtype=torch.float64)
    loss = clipped_surrogate_loss(new, old, adv, clip=clip, dual_clip=dual)
    expected = [_plain_loss(lr, a, clip, dual) for lr, a in zip(log_ratios, advantages[:n])]
    assert torch.isfinite(loss).all()
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-9, atol=1e-9)
    if dual is not None:
        assert (loss <= dual * adv.abs() + 1e-9).all()


def test_an_exploding_ratio_gives_no_inf_or_nan():
    new = torch.tensor([1e4, -1e4, 80.0, 0.0])
    loss = clipped_surrogate_loss(
        new, torch.zeros(4), torch.tensor([-1.0, 1.0, -2.0, 1.0]), clip=0.2
    )
    assert torch.isfinite(loss).all()


@settings(max_examples=100, deadline=None)
@given(
    rows=st.integers(1, 6),
    cols=st.integers(1, 7),
    floor=st.floats(0.0, 2.0),
    data=st.data(),
)
def test_normalisation_with_a_floor_equals_a_plain_loop(rows, cols, floor, data):
    values = data.draw(
        st.lists(st.floats(-5, 5, allow_nan=False), min_size=rows * cols, max_size=rows * cols)
    )
    keep = data.draw(st.lists(st.booleans(), min_size=rows * cols, max_size=rows * cols))
    adv = torch.tensor(values, dtype=torch.float64).reshape(rows, cols)
    mask = torch.tensor(keep).reshape(rows, cols)
    got = normalize_advantages(adv, mask, std_floor=floor)
    real = [v for v, k in zip(values, keep) if k]
    mean = sum(real) / max(len(real), 1)
    std = math.sqrt(sum((v - mean) ** 2 for v in real) / max(len(real), 1))
    scale = max(std, floor) + 1e-8
    expected = [(v - mean) / scale if k else 0.0 for v, k in zip(values, keep)]
    np.testing.assert_allclose(got.reshape(-1).numpy(), expected, rtol=1e-7, atol=1e-7)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-3, 3, allow_nan=False), max_size=40))
def test_signal_free_means_all_rewards_equal(rewards):
    assert signal_free(np.array(rewards)) == (len(set(rewards)) <= 1)


# -- every agent end to end -----------------------------------------------------------------------
def _agent(name, tiny_model, **extra):
    algorithm = get_algorithm(name)
    overrides = small_overrides(**{"eval_every": 0, "num_envs": 2, "rollout_length": 5, **extra})
    if name in ("grpo", "gigpo"):
        overrides["group_size"] = 2
    config = algorithm.config_class.preset(None, **overrides)
    return algorithm(config, build_policy(config, tiny_model, seed=0), seed=0)


def _rollout_batch(agent, seed=0):
    slots = [EnvSlot(gym.make(ENV), i) for i in range(agent.config.num_envs)]
    for slot in slots:
        slot.start(seed)
    buffer, _ = rollout(
        agent, slots, agent.config, torch.Generator().manual_seed(seed), Progress(), seed, ENV
    )
    bootstrap(agent, buffer, slots)
    agent.compute_advantages(buffer)
    return buffer


@pytest.mark.parametrize("name", AGENTS)
@pytest.mark.parametrize("dual", [3.0, None])
def test_a_token_ratio_of_1e4_with_a_negative_advantage_is_bounded(name, dual, tiny_model):
    """The sampling-time log-probs are lowered by log(1e4): every ratio is 1e4. With a negative
    advantage the loss is at most c·|A| under dual clip; plain PPO's loss is ~1e4·|A|."""
    agent = _agent(name, tiny_model, dual_clip=dual)
    buffer = _rollout_batch(agent)
    batch = agent.make_batch(buffer)
    batch.extras.setdefault("prompts", buffer.flat("prompt"))
    batch.extras.setdefault("available_actions", buffer.flat("available_actions"))
    batch.old_log_probs = batch.old_log_probs - math.log(1e4)
    advantages = torch.where(batch.mask, torch.full_like(batch.advantages, -2.0), 0.0)
    agent.policy.model.train()
    stats = accumulate_policy_gradients(
        batch, advantages, agent.evaluate_policy, agent.config.ppo_settings()
    )
    if dual is None:
        assert stats["policy_loss"] > 1e3
    else:
        assert 0 < stats["policy_loss"] <= 3.0 * 2.0 + 1e-6


def _lora(agent):
    return {n: p.detach().clone() for n, p in agent.policy.model.named_parameters() if "lora_" in n}


@pytest.mark.parametrize("name", AGENTS)
def test_a_reward_free_batch_leaves_the_policy_unchanged_under_skip(name, tiny_model):
    """Under the ``skip`` rule an update whose rewards are all equal takes no policy step: the
    adapter is bit-for-bit the same (the critic, where there is one, still learns)."""
    from agentbench_poad.rl.config import REWARD_FREE_RULES

    # the rule is set where the config is built (ArCHer re-reads its config on every update)
    agent = _agent(name, tiny_model, **REWARD_FREE_RULES["skip"])
    assert agent.config.skip_signal_free
    buffer = _rollout_batch(agent)
    records = buffer.steps() if callable(buffer.steps) else [r for t in buffer.steps for r in t]
    for record in records:
        record.reward = 0.0
    agent.compute_advantages(buffer)
    before = _lora(agent)
    critic_before = None if agent.critic is None else [p.clone() for p in agent.critic.parameters()]
    metrics = agent.update(buffer, torch.Generator().manual_seed(0))
    after = _lora(agent)
    assert metrics["signal_free"] == 1.0 and metrics["policy_steps_taken"] == 0
    assert np.isnan(metrics["policy_loss"])  # nothing of the policy was measured
    assert all(torch.equal(before[k], after[k]) for k in before)
    if critic_before is not None:
        assert any(not torch.equal(a, b) for a, b in zip(critic_before, agent.critic.parameters()))
    # the same batch without the rule moves the policy (the test can fail)
    agent.config = agent.config.replace(skip_signal_free=False, entropy_coef=0.1)
    agent.update(buffer, torch.Generator().manual_seed(0))
    assert any(not torch.equal(after[k], v) for k, v in _lora(agent).items())


@pytest.mark.parametrize("name", AGENTS)
def test_every_run_ends_at_its_budget_and_never_overshoots(name, tiny_model, tmp_path):
    """Group agents play whole episodes; their last round is cut at the budget (its groups
    dropped), so they end exactly at total_steps; the PPO agents end at the last whole batch."""
    overrides = small_overrides(eval_every=0, num_envs=2, rollout_length=3)
    if name in ("grpo", "gigpo"):  # a round of two 5-step episodes fits an update
        overrides.update(group_size=2, rollout_length=5)
    total = 17  # not a multiple of anything
    run = train(
        get_algorithm(name),
        ENV,
        tiny_model,
        total_steps=total,
        seed=3,
        out=tmp_path / name,
        overrides=overrides,
        progress=False,
    )
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    used = lines[-1]["env_steps"]
    assert used <= total
    batch = overrides["num_envs"] * overrides["rollout_length"]
    if name in ("grpo", "gigpo"):
        assert used == total
    else:
        assert used == total // batch * batch


def test_grpo_and_gigpo_sample_from_their_own_streams(tiny_model):
    """Same seed, same policy weights, same groups: the first rollouts differ because each
    algorithm draws its actions from (seed, algorithm name)."""
    assert algorithm_stream(5, ACTIONS, "grpo") != algorithm_stream(5, ACTIONS, "gigpo")
    chosen = {}
    for name in ("grpo", "gigpo"):
        agent = _agent(name, tiny_model, num_envs=4, rollout_length=5)
        slots = [EnvSlot(gym.make(ENV), i) for i in range(4)]
        generator = torch.Generator().manual_seed(algorithm_stream(5, ACTIONS, name))
        buffer, _ = agent.collect_groups(slots, generator, Progress(), 5)
        chosen[name] = [s.sample.text for s in buffer.steps()]
    assert chosen["grpo"] != chosen["gigpo"]


def test_the_trainer_gives_each_algorithm_its_own_sampling_stream(tiny_model, tmp_path):
    from agentbench_poad.rl.trainer import _start

    states = {}
    for name in ("grpo", "gigpo", "poad"):
        session = _start(
            get_algorithm(name),
            ENV,
            tiny_model,
            total_steps=20,
            seed=5,
            out=tmp_path / name,
            resume=False,
            overrides=small_overrides(eval_every=0, num_envs=2, group_size=2)
            if name != "poad"
            else small_overrides(eval_every=0),
            preset=None,
            env_kwargs={},
        )
        states[name] = {k: g.get_state() for k, g in session.generators.items()}
        session.close()
    for key in ("actions", "shuffle"):
        assert not torch.equal(states["grpo"][key], states["gigpo"][key])
        assert not torch.equal(states["grpo"][key], states["poad"][key])


# -- the guard cannot be bypassed ----------------------------------------------------------------
def _poad(tiny_model):
    return _agent("poad", tiny_model)


def test_a_mixin_guard_is_refused_at_the_start_of_training(tiny_model):
    class LooseGuard:
        def guard_kl(self, batch, evaluation):
            return None

    poad = get_algorithm("poad")
    Mixed = type("Mixed", (LooseGuard, poad), {})  # the mixin's guard_kl wins the MRO
    agent = _poad(tiny_model)
    agent.__class__ = Mixed
    with pytest.raises(TypeError, match="guard_kl"):
        check_shared_update(agent)


def test_a_guard_assigned_after_class_creation_or_on_the_instance_is_refused(tiny_model):
    agent = _poad(tiny_model)
    agent.update = lambda buffer, generator: {}
    with pytest.raises(TypeError, match="update"):
        check_shared_update(agent)

    class Sneaky(get_algorithm("poad")):
        pass

    Sneaky.guard_kl = lambda self, batch, evaluation: None
    agent = _poad(tiny_model)
    agent.__class__ = Sneaky
    with pytest.raises(TypeError, match="guard_kl"):
        check_shared_update(agent)


def test_an_update_override_is_refused_at_class_creation():
    with pytest.raises(TypeError, match="update"):

        class Own(PPOAgent):  # noqa: F841
            def update(self, buffer, generator):
                return {}


def test_a_declared_custom_guard_runs_and_says_so(tiny_model, tmp_path):
    class OwnGuard(get_algorithm("twosome"), custom_guard=True):
        name = "own-guard"

        def guard_kl(self, batch, evaluation):
            return None  # the token-level k3 estimate

    run = train(
        OwnGuard,
        ENV,
        tiny_model,
        total_steps=6,
        seed=0,
        out=tmp_path / "own",
        overrides=small_overrides(eval_every=0),
        progress=False,
    )
    assert json.loads((run / "config.json").read_text())["guard"] == "custom"
    plain = train(
        get_algorithm("twosome"),
        ENV,
        tiny_model,
        total_steps=6,
        seed=0,
        out=tmp_path / "plain",
        overrides=small_overrides(eval_every=0),
        progress=False,
    )
    assert json.loads((plain / "config.json").read_text())["guard"] == "shared"


def test_the_guard_reads_the_policy_not_the_evaluation(tiny_model):
    """An agent that hands the guard a made-up categorical does not change the guard's KL."""
    agent = _agent("twosome", tiny_model)
    buffer = _rollout_batch(agent)
    batch = agent.make_batch(buffer)
    batch.extras.setdefault("prompts", buffer.flat("prompt"))
    batch.extras.setdefault("available_actions", buffer.flat("available_actions"))
    batch.extras["old_candidate_log_probs"] = buffer.flat_samples("candidate_log_probs")
    agent.policy.model.train()
    with torch.no_grad():
        for param in agent.policy.trainable_parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=torch.Generator().manual_seed(1)))
    evaluation = agent.evaluate_policy(batch)
    honest = agent.guard_kl(batch, evaluation)
    forged = PolicyEvaluation(
        evaluation.log_probs,
        evaluation.entropy,
        [torch.log_softmax(torch.zeros_like(c), 0) for c in evaluation.candidate_log_probs],
    )
    assert torch.equal(agent.guard_kl(batch, forged), honest)
    assert honest.sum() > 0


class _NaNEntropy(get_algorithm("twosome")):
    name = "nan-entropy"

    def evaluate_policy(self, batch):
        evaluation = super().evaluate_policy(batch)
        return PolicyEvaluation(
            evaluation.log_probs, evaluation.entropy * float("nan"), evaluation.candidate_log_probs
        )


def test_a_nan_loss_stops_the_run_naming_the_update(tiny_model, tmp_path):
    with pytest.raises(NonFiniteLossError, match="update 1 of .*entropy = nan"):
        train(
            _NaNEntropy,
            ENV,
            tiny_model,
            total_steps=12,
            seed=0,
            out=tmp_path / "nan",
            overrides=small_overrides(eval_every=0, skip_signal_free=False),
            progress=False,
        )


@pytest.mark.parametrize(
    "field, value",
    [
        ("dual_clip", 1.0),
        ("dual_clip", -3),
        ("normalize_over", "episode"),
        ("advantage_std_floor", -1),
    ],
)
def test_bad_safeguard_settings_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        get_algorithm("poad").config_class(**{field: value})


@settings(max_examples=40, deadline=None)
@given(
    advantages=st.lists(st.floats(-3, 3, allow_nan=False), min_size=5, max_size=5),
    over=st.sampled_from(["batch", "minibatch"]),
    floor=st.sampled_from([0.0, 0.5]),
)
def test_advantages_are_normalised_where_the_config_says(advantages, over, floor):
    """Ratio 1 everywhere: each minibatch's loss is −mean of its normalised advantages. The
    logged loss (mean over the 3+2 minibatches) against the same computed by a plain loop."""
    from agentbench_poad.rl.ppo import PPOBatch, PPOSettings, ppo_update

    size = len(advantages)
    adv = torch.tensor(advantages, dtype=torch.float64)[:, None]
    batch = PPOBatch(
        old_log_probs=torch.zeros(size, 1, dtype=torch.float64),
        advantages=adv,
        returns=torch.zeros(size, 1),
        old_values=torch.zeros(size, 1),
        mask=torch.ones(size, 1, dtype=torch.bool),
        extras={"i": list(range(size))},
    )
    weight = torch.zeros(1, dtype=torch.float64, requires_grad=True)

    def evaluate(chunk):
        log_probs = chunk.old_log_probs + 0.0 * weight
        return PolicyEvaluation(log_probs, torch.zeros_like(log_probs))

    settings_ = PPOSettings(
        epochs=1,
        num_minibatches=2,
        entropy_coef=0.0,
        target_kl=None,
        normalize_over=over,
        advantage_std_floor=floor,
        skip_signal_free=False,
        dual_clip=None,
    )
    generator = torch.Generator().manual_seed(0)
    order = torch.randperm(size, generator=torch.Generator().manual_seed(0))
    metrics = ppo_update(
        batch,
        evaluate_policy=evaluate,
        evaluate_values=lambda b: None,
        policy_parameters=[weight],
        critic_parameters=[],
        policy_optimizer=torch.optim.SGD([weight], lr=0.0),
        critic_optimizer=None,
        settings=settings_,
        generator=generator,
    )

    def plain_normalise(values):
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        return [(v - mean) / (max(std, floor) + 1e-8) for v in values]

    losses = []
    whole = plain_normalise(advantages)
    for index in order.tensor_split(2):
        ids = index.tolist()
        part = (
            plain_normalise([advantages[i] for i in ids])
            if over == "minibatch"
            else [whole[i] for i in ids]
        )
        losses.append(-sum(part) / len(part))
    assert metrics["policy_loss"] == pytest.approx(sum(losses) / 2, abs=1e-6)
