"""ARCHER-ADRL end to end with the tiny model: its credit assignment on a real rollout buffer, an
update, an exact resume, learning the key token, open actions, and the command line."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from agentbench_poad.baselines import ALGORITHMS, get_algorithm  # noqa: E402
from agentbench_poad.rl.buffer import RolloutBuffer, StepRecord  # noqa: E402
from agentbench_poad.rl.trainer import build_policy, latest_checkpoint, load_agent, train  # noqa: E402
from tests.test_agents_learning import offered_action_rollout, prob_of_close, small  # noqa: E402
from tests.test_archer_adrl_advantages import loop_archer_gae  # noqa: E402

AGENT = "archer-adrl"
OVERCOOKED = "Overcooked-TomatoSalad-v0"


def make_agent(model, name=AGENT, **extra):
    algorithm_class = get_algorithm(name)
    config = algorithm_class.config_class.preset(None, **small(**extra))
    return algorithm_class(config, build_policy(config, model, seed=0), seed=0)


def test_registered_with_ntpo_presets():
    from agentbench_poad.baselines.archer_adrl import ArcherADRL, ArcherADRLConfig
    from agentbench_poad.baselines.ntpo import NTPO, NTPOConfig
    from agentbench_poad.rl.config import preset_names

    assert get_algorithm("ARCHER-ADRL") is ArcherADRL and AGENT in ALGORITHMS
    assert issubclass(ArcherADRL, NTPO) and ArcherADRL.supports_open_actions
    # Only the credit assignment is its own: everything else is NTPO's (and so POAD's) code.
    own = {k for k in vars(ArcherADRL) if not k.startswith("__")}
    assert own == {"name", "config_class", "boundary_bootstrap"}
    assert preset_names(ArcherADRLConfig) == preset_names(NTPOConfig)
    for name in preset_names(NTPOConfig):  # every family and its "-mini" CPU preset
        ours, ntpo = ArcherADRLConfig.preset(name), NTPOConfig.preset(name)
        assert {**vars(ours)} == {**vars(ntpo)}, name


def test_compute_advantages_is_the_loop_on_a_rollout_buffer(tiny_model):
    """A hand-made buffer with actions of 1-5 tokens, a terminal step, a time-limit truncation
    and unfinished episodes: the agent's advantages are the plain loop's, and differ from
    NTPO's exactly where the boundary bootstrap does."""
    agent = make_agent(tiny_model)
    ntpo = make_agent(tiny_model, "ntpo")
    rng = np.random.default_rng(3)
    lengths = np.array([[2, 3, 1], [4, 2, 5], [3, 1, 2], [1, 1, 4], [5, 1, 3]])
    steps, envs = lengths.shape
    terminated = np.zeros((steps, envs), dtype=bool)
    truncated = np.zeros((steps, envs), dtype=bool)
    terminated[1, 0] = True
    truncated[2, 2] = True
    buffer = RolloutBuffer(num_envs=envs)
    for t in range(steps):
        buffer.add(
            [
                StepRecord(
                    prompt="p",
                    available_actions=None,
                    sample=None,
                    values=rng.normal(size=lengths[t, i]).tolist(),
                    reward=float(rng.normal()),
                    terminated=bool(terminated[t, i]),
                    truncated=bool(truncated[t, i]),
                    final_value=float(rng.normal()) if truncated[t, i] else None,
                )
                for i in range(envs)
            ]
        )
    buffer.next_values = rng.normal(size=envs)
    agent.compute_advantages(buffer)
    values, mask = buffer.value_grid()
    gamma, lam = agent.config.gamma, agent.config.lam
    expected, expected_returns = loop_archer_gae(
        buffer.rewards().tolist(),
        values.tolist(),
        lengths.tolist(),
        terminated.tolist(),
        truncated.tolist(),
        buffer.final_values().tolist(),
        buffer.next_values.tolist(),
        gamma,
        lam,
        gamma,  # NTPO's intra-action discount
    )
    np.testing.assert_allclose(buffer.advantages, expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(buffer.returns, np.where(mask, expected_returns, 0.0), atol=1e-12)

    archer_advantages = buffer.advantages
    ntpo.compute_advantages(buffer)
    # Same as NTPO's: the last rollout step, the terminal step (env 0, step 1), the truncated one
    # (env 2, step 2) and steps whose every later action in the episode is one token (env 1 from
    # step 1 on); everywhere else a multi-token next action (or one later in the episode, through
    # the advantage carried back) changes every token's advantage.
    same = np.zeros((steps, envs), dtype=bool)
    same[-1] = True
    same[1, 0] = same[2, 2] = True
    same[1:, 1] = True
    for t in range(steps):
        for i in range(envs):
            equal = np.allclose(archer_advantages[t, i], buffer.advantages[t, i], atol=1e-12)
            assert equal == same[t, i], (t, i)


def test_one_update_on_overcooked_changes_policy_and_critic(tiny_model):
    env_id = OVERCOOKED if OVERCOOKED in gym.registry else "CaseStudy-Microwave-v0"
    agent = make_agent(tiny_model)
    config = agent.config
    lora_before = [p.detach().clone() for p in agent.policy.trainable_parameters()]
    critic_before = [p.detach().clone() for p in agent.critic.parameters()]
    buffer, observations = offered_action_rollout(agent, env_id)
    buffer.next_values = agent.bootstrap_values(observations)
    agent.compute_advantages(buffer)
    values, _ = buffer.value_grid()
    assert buffer.advantages.shape == values.shape and np.isfinite(buffer.advantages).all()
    metrics = agent.update(buffer, torch.Generator().manual_seed(1))
    assert metrics["policy_steps_taken"] == config.epochs * config.num_minibatches
    assert np.isfinite(metrics["value_loss"]) and np.isfinite(metrics["policy_loss"])
    after = agent.policy.trainable_parameters()
    assert any(not torch.equal(a, b) for a, b in zip(lora_before, after))
    assert any(not torch.equal(a, b) for a, b in zip(critic_before, agent.critic.parameters()))


def test_checkpoint_resume_gives_the_same_next_update(tiny_model, tmp_path):
    """Bit for bit, as for POAD and NTPO (tests/test_agents_learning.py)."""
    env_id = OVERCOOKED if OVERCOOKED in gym.registry else "CaseStudy-Microwave-v0"
    kwargs = dict(total_steps=2 * 6, seed=5, overrides=small(), progress=False)
    algorithm = get_algorithm(AGENT)
    straight = train(algorithm, env_id, tiny_model, out=tmp_path / "a", **kwargs)
    stopped = train(algorithm, env_id, tiny_model, out=tmp_path / "b", max_updates=1, **kwargs)
    train(algorithm, env_id, tiny_model, out=stopped, resume=True, **kwargs)

    def last_line(run):
        line = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
        line.pop("steps_per_second")
        return line

    assert last_line(straight) == last_line(stopped)
    assert json.loads((stopped / "config.json").read_text())["agent"] == AGENT
    a = torch.load(latest_checkpoint(straight) / "agent.pt", weights_only=True)["critic"]
    b = torch.load(latest_checkpoint(stopped) / "agent.pt", weights_only=True)["critic"]
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)


def test_learns_the_key_token(tiny_word_model, tmp_path):
    """Within 15 updates the greedy policy switches from "open" to "close" on the one-step toy
    (the setting of tests/test_agents_learning.py::test_learns_the_key_token)."""
    overrides = small(
        num_envs=4, rollout_length=4, epochs=2, num_minibatches=2, lr=1e-1, eval_every=3,
        eval_episodes=1,
    )  # fmt: skip
    config = get_algorithm(AGENT).config_class(**overrides)
    before = prob_of_close(build_policy(config, tiny_word_model, seed=0))
    assert before < 0.5  # the untrained greedy policy opens the microwave
    run = train(
        get_algorithm(AGENT),
        "CaseStudy-MicrowaveClose-v0",
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


def test_open_action_env_trains(tiny_model, tmp_path):
    """Generated actions (the reference fell through to NTPO there): the boundary bootstrap runs."""
    run = train(
        get_algorithm(AGENT),
        "CaseStudy-OpenText-v0",
        tiny_model,
        total_steps=2 * 6,
        seed=0,
        out=tmp_path / "run",
        overrides=small(max_new_tokens=6),
        progress=False,
    )
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(np.isfinite(r["value_loss"]) for r in records)
    assert (run / "best_code.json").exists()


def test_cli_lists_and_trains_it(tiny_model, tmp_path, capsys):
    from agentbench_poad.cli import main

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert AGENT in capsys.readouterr().out
    out = tmp_path / "cli"
    argv = ["train", "--agent", AGENT, "--env", OVERCOOKED, "--model", str(tiny_model)]
    argv += ["--total-steps", "6", "--seed", "0", "--out", str(out), "--no-progress"]
    for setting in ("num_envs=2", "rollout_length=3", "critic_hidden_sizes=16", "lora_layers=1"):
        argv += ["--set", setting]
    assert main(argv) == 0
    assert json.loads((out / "config.json").read_text())["agent"] == AGENT
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 1
