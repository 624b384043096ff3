"""The one evaluation runner (agentbench_poad.evaluation): rules, batches, pickling, agreement."""

from __future__ import annotations

import dataclasses
import pickle
import zlib

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbench_poad.core import TextEnv, text_space
from agentbench_poad.evaluation import (
    EpisodeResult,
    EvaluationRequest,
    evaluate_cell,
    reset_seed,
)
from agentbench_poad.leaderboard import evaluate, verify_record
from tests.test_leaderboard_toys import CODE_ID, CORRIDOR_ID, CodeAgent

HERE = "tests.test_evaluation"


# -- agents of these tests ---------------------------------------------------------------------
def _choice(observation: str, actions: list[str]) -> str:
    """A deterministic pick that depends on the observation (not always the right move)."""
    return actions[zlib.crc32(observation.encode()) % len(actions)]


class HashAgent:
    """Deterministic, one observation at a time."""

    def act(self, observation, available_actions):
        return _choice(observation, available_actions)


class BatchedHashAgent(HashAgent):
    """The same choices, batched (so batching must not change a single episode)."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def act_batch(self, observations, available_actions):
        self.calls.append(len(observations))
        return [_choice(o, a) for o, a in zip(observations, available_actions)]


class RandomBatchAgent:
    """Stochastic and batched: one generator shared by the batch, reseeded by reset()."""

    name = "random-batch"

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def reset(self, seed=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)

    def act(self, observation, available_actions):
        return self.act_batch([observation], [available_actions])[0]

    def act_batch(self, observations, available_actions):
        return [a[int(self.rng.integers(len(a)))] for a in available_actions]


class RaisingBatchAgent:
    def act(self, observation, available_actions):
        return available_actions[0]

    def act_batch(self, observations, available_actions):
        raise RuntimeError("batch boom")


class ShortBatchAgent:
    def act(self, observation, available_actions):
        return available_actions[0]

    def act_batch(self, observations, available_actions):
        return ["right"]


# -- the plain loop the runner must agree with --------------------------------------------------
def plain_episode(env_id: str, agent, seed: int, index: int) -> dict:
    """One episode written out by hand: the seed rule, the return, the success rule."""
    env = gym.make(env_id)
    observation, info = env.reset(seed=seed * 100000 + index)
    total, length, reported = 0.0, 0, None
    while True:
        action = agent.act(observation, info["available_actions"])
        observation, reward, terminated, truncated, info = env.step(action)
        total += reward
        length += 1
        if info.get("success") is not None:
            reported = bool(info["success"])
        if terminated or truncated:
            break
    env.close()
    return {
        "return": total,
        "length": length,
        "success": reported if reported is not None else total > 0,
    }


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 50),
    episodes=st.integers(1, 6),
    batch_size=st.one_of(st.none(), st.integers(1, 7)),
    batched=st.booleans(),
    env_id=st.sampled_from([CORRIDOR_ID, "CaseStudy-Microwave-v0"]),
)
def test_the_runner_agrees_with_a_plain_loop_for_any_batching(
    seed, episodes, batch_size, batched, env_id
):
    import agentbench_poad.rl.toy  # noqa: F401  (registers CaseStudy-*)

    agent = BatchedHashAgent() if batched else HashAgent()
    result = evaluate_cell(
        EvaluationRequest(
            agent=agent,
            env_id=env_id,
            seed=seed,
            episodes=episodes,
            batch_size=batch_size,
            action_timeout=None,
        )
    )
    assert [e.index for e in result.episodes] == list(range(episodes))
    assert result.batch_size == ((batch_size or episodes) if batched else 1)
    for episode in result.episodes:
        expected = plain_episode(env_id, HashAgent(), seed, episode.index)
        assert (
            episode.reset_seed == reset_seed(seed, episode.index) == seed * 100000 + episode.index
        )
        assert episode.episode_return == pytest.approx(expected["return"], abs=1e-12)
        assert episode.score == episode.episode_return  # restricted actions: the return
        assert episode.length == expected["length"]
        assert episode.success == expected["success"] and not episode.failed
    assert result.mean_return == pytest.approx(np.mean([e.episode_return for e in result.episodes]))
    assert result.success_rate == pytest.approx(np.mean([e.success for e in result.episodes]))
    if batched:  # lockstep: every call holds at most one batch
        assert max(agent.calls) <= result.batch_size


RANDOM_SPEC = "agentbench_poad.baselines.random:RandomAgent"


def emitted_rewards(env_id: str, seed: int, index: int) -> list[float]:
    """The rewards a real env emits to the random agent in episode ``index`` of seed ``seed``,
    played by hand: the agent reseeded with the episode's reset seed (a batch of one)."""
    from agentbench_poad.baselines.random import RandomAgent

    agent = RandomAgent(seed=seed)
    agent.reset(seed=seed * 100000 + index)
    env = gym.make(env_id)
    observation, info = env.reset(seed=seed * 100000 + index)
    rewards = []
    while True:
        action = agent.act(observation, info["available_actions"])
        observation, reward, terminated, truncated, info = env.step(action)
        rewards.append(float(reward))
        if terminated or truncated:
            break
    env.close()
    return rewards


@settings(max_examples=20, deadline=None)
@given(
    env_id=st.sampled_from(["Overcooked-TomatoSalad-v0", "VirtualHome-Cheese-v0"]),
    seed=st.integers(0, 30),
    episodes=st.integers(1, 3),
    gamma=st.one_of(st.none(), st.floats(0.0, 1.0, allow_nan=False)),
)
def test_the_discounted_return_is_a_plain_loop_over_the_emitted_rewards(
    env_id, seed, episodes, gamma
):
    """sum_t γ^t r_t over decisions, γ the request's or else the env facts' protocol discount."""
    from agentbench_poad.registration import env_facts

    result = evaluate_cell(
        EvaluationRequest(
            agent=RANDOM_SPEC,
            env_id=env_id,
            seed=seed,
            episodes=episodes,
            action_timeout=None,
            discount=gamma,
        )
    )
    used = env_facts(env_id).discount if gamma is None else gamma
    assert used is not None and result.discount == used
    for episode in result.episodes:
        rewards = emitted_rewards(env_id, seed, episode.index)
        total, discounted = 0.0, 0.0
        for t, reward in enumerate(rewards):
            total += reward
            discounted += used**t * reward
        assert episode.length == len(rewards)  # the runner played the same episode
        assert episode.episode_return == total
        assert episode.discounted_return == pytest.approx(discounted, rel=1e-12, abs=1e-12)
        entry = episode.to_entry()
        assert entry["discounted_return"] == episode.discounted_return
        assert EpisodeResult.from_entry(entry) == episode
    values = [e.discounted_return for e in result.episodes]
    seed_entry = result.seed_entry()
    assert seed_entry["mean_discounted_return"] == pytest.approx(sum(values) / len(values))


def test_an_env_without_a_protocol_discount_logs_none():
    """The corridor is registered without a family: no γ, so no discounted return."""
    result = evaluate_cell(
        EvaluationRequest(agent=HashAgent(), env_id=CORRIDOR_ID, episodes=2, action_timeout=None)
    )
    assert result.discount is None
    assert [e.discounted_return for e in result.episodes] == [None, None]
    assert result.seed_entry()["mean_discounted_return"] is None
    with_gamma = evaluate_cell(
        EvaluationRequest(
            agent=HashAgent(), env_id=CORRIDOR_ID, episodes=2, action_timeout=None, discount=0.5
        )
    )
    assert all(e.discounted_return is not None for e in with_gamma.episodes)
    assert [e.episode_return for e in with_gamma.episodes] == result.returns  # never scored


def test_old_episode_entries_load_without_a_discounted_return():
    result = evaluate_cell(
        EvaluationRequest(agent=RANDOM_SPEC, env_id="VirtualHome-Cheese-v0", episodes=2)
    )
    assert result.seed_entry()["mean_discounted_return"] is not None
    old_entries = []
    for episode in result.episodes:
        entry = episode.to_entry()
        del entry["discounted_return"]  # as records made before it was logged
        old = EpisodeResult.from_entry(entry)
        assert old.discounted_return is None
        assert old == dataclasses.replace(episode, discounted_return=None)
        old_entries.append(old)
    mixed = dataclasses.replace(result, episodes=(old_entries[0], *result.episodes[1:]))
    assert mixed.seed_entry()["mean_discounted_return"] is None  # one episode lacks it


class PaidFailureEnv(TextEnv):
    """One step: reward +1 but ``info["success"] = False`` (the env's verdict beats the return)."""

    def __init__(self, render_mode=None) -> None:
        self.observation_space = text_space(64)
        self.action_space = text_space(16)
        self.render_mode = render_mode

    def _reset(self, options):
        return "go", {"available_actions": ["go"], "action_valid": True}

    def _step(self, action):
        return (
            "done",
            1.0,
            True,
            False,
            {"available_actions": ["go"], "action_valid": True, "success": False},
        )


PAID_FAILURE_ID = "EvaluationToy-PaidFailure-v0"
if PAID_FAILURE_ID not in gym.registry:
    gym.register(PAID_FAILURE_ID, entry_point=PaidFailureEnv)


def test_success_prefers_what_the_env_reports():
    result = evaluate_cell(
        EvaluationRequest(
            agent=HashAgent(), env_id=PAID_FAILURE_ID, episodes=2, action_timeout=None
        )
    )
    assert [e.episode_return for e in result.episodes] == [1.0, 1.0]
    assert [e.success for e in result.episodes] == [False, False]  # not "return > 0"
    record = evaluate(HashAgent, PAID_FAILURE_ID, seeds=[0], episodes=2)[0]
    assert record["scores"]["success_rate"] == 0.0 and record["scores"]["mean"] == 1.0


def test_open_action_cells_score_the_final_code():
    result = evaluate_cell(EvaluationRequest(agent=CodeAgent, env_id=CODE_ID, episodes=2))
    assert result.open_action and result.metric == "final_auc"
    assert [e.score for e in result.episodes] == [0.75, 0.75]
    assert [e.final_code for e in result.episodes] == ["0.75", "0.75"]
    assert "final code ran" in result.success_rule


def test_a_stochastic_batched_record_replays_exactly(tmp_path):
    """verify replays whole batches, so a batched sampling agent reproduces episode by episode."""
    record = evaluate(
        f"{HERE}:RandomBatchAgent", CORRIDOR_ID, seeds=[0, 1], episodes=5, batch_size=2
    )[0]
    assert record["protocol"]["batch_size"] == 2
    result = verify_record(record, episodes_per_seed=2)
    assert result.sampled == 4 and result.exact_matches == 4 and result.reproduced
    # the batch is part of the protocol: played one at a time, the episodes come out otherwise
    alone = evaluate(
        f"{HERE}:RandomBatchAgent", CORRIDOR_ID, seeds=[0, 1], episodes=5, batch_size=1
    )[0]
    returns = [[e["return"] for e in s["episodes"]] for s in record["scores"]["per_seed"]]
    alone_returns = [[e["return"] for e in s["episodes"]] for s in alone["scores"]["per_seed"]]
    assert returns != alone_returns


def test_indices_play_whole_batches_and_done_batches_are_skipped():
    request = EvaluationRequest(
        agent=f"{HERE}:RandomBatchAgent",
        env_id=CORRIDOR_ID,
        seed=3,
        episodes=5,
        batch_size=2,
        action_timeout=None,
    )
    full = evaluate_cell(request)
    part = evaluate_cell(EvaluationRequest(**{**_fields(request), "indices": (3,)}))
    assert [e.index for e in part.episodes] == [2, 3]  # the batch holding episode 3
    assert part.episodes == full.episodes[2:4]
    played = []
    resumed = evaluate_cell(
        request, done={i: full.episodes[i] for i in (0, 1, 2)}, on_episode=played.append
    )
    assert [e.index for e in played] == [2, 3, 4]  # batch {2, 3} was unfinished: played whole
    assert resumed.episodes == full.episodes


def _fields(request: EvaluationRequest) -> dict:
    return {name: getattr(request, name) for name in request.__dataclass_fields__}


@pytest.mark.parametrize(
    "agent, reason",
    [
        (RaisingBatchAgent, "agent raised RuntimeError at step 0: batch boom"),
        (
            ShortBatchAgent,
            "agent raised ValueError at step 0: returned 1 actions for 3 observations",
        ),
    ],
)
def test_a_faulty_batched_agent_fails_its_batch_and_the_cell_goes_on(agent, reason):
    result = evaluate_cell(EvaluationRequest(agent=agent, env_id=CORRIDOR_ID, episodes=3))
    assert [e.failed for e in result.episodes] == [True] * 3
    assert {e.reason for e in result.episodes} == {reason}
    assert not any(e.success for e in result.episodes)


def test_requests_and_results_pickle_and_replay_the_same():
    request = EvaluationRequest(
        agent="agentbench_poad.baselines.random:RandomAgent",
        env_id=CORRIDOR_ID,
        seed=2,
        episodes=3,
        env_kwargs={"max_episode_steps": 10},
        action_timeout=None,
    )
    copy = pickle.loads(pickle.dumps(request))
    assert copy == request and dict(copy.env_kwargs) == {"max_episode_steps": 10}
    result = evaluate_cell(request)
    assert pickle.loads(pickle.dumps(result)) == result
    assert evaluate_cell(copy).episodes == result.episodes
    assert all(e.length <= 10 for e in result.episodes)  # env_kwargs reached gym.make
    entry = result.episodes[0].to_entry()
    assert EpisodeResult.from_entry(entry) == result.episodes[0]


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"episodes": 0}, "episodes"),
        ({"indices": (5,)}, "outside"),
        ({"batch_size": 0}, "batch_size"),
        ({"action_timeout": 0}, "action_timeout"),
        ({"seed": 1.5}, "seed"),
        ({"discount": 1.01}, "discount"),
        ({"discount": -0.1}, "discount"),
    ],
)
def test_bad_requests_are_refused_with_the_field_named(bad, match):
    kwargs = {"agent": HashAgent(), "env_id": CORRIDOR_ID, "episodes": 2, **bad}
    with pytest.raises((ValueError, TypeError), match=match):
        EvaluationRequest(**kwargs)


# -- the acceptance test of issue 14 item 3 ----------------------------------------------------
def test_a_curve_point_and_a_board_score_of_the_same_checkpoint_agree(tiny_model, tmp_path, capsys):
    """The trainer's last curve point and a board record of its checkpoint: same numbers."""
    pytest.importorskip("torch")
    import json

    from agentbench_poad.baselines import get_algorithm
    from agentbench_poad.cli import main
    from agentbench_poad.leaderboard.from_run import record_from_runs
    from agentbench_poad.rl.trainer import train

    episodes = 3
    run = train(
        get_algorithm("poad"),
        "CaseStudy-Microwave-v0",
        tiny_model,
        total_steps=2 * 4,
        seed=4,
        out=tmp_path / "run",
        progress=False,
        overrides=dict(
            num_envs=2,
            rollout_length=2,
            epochs=1,
            num_minibatches=1,
            lr=5e-2,
            critic_hidden_sizes=(8,),
            eval_every=2,
            eval_episodes=episodes,
            target_kl=None,
        ),
    )
    point = json.loads((run / "learning_curve.json").read_text())[-1]
    assert point["env_steps"] == 8
    record = record_from_runs([run], episodes=episodes)
    (seed_score,) = record["scores"]["per_seed"]
    assert seed_score["seed"] == 4
    assert [e["reset_seed"] for e in seed_score["episodes"]] == [400000, 400001, 400002]
    assert seed_score["mean_return"] == point["eval_return"]
    assert seed_score["score"] == point["eval_score"]
    assert seed_score["success_rate"] == point["eval_success_rate"]
    assert record["protocol"]["batch_size"] == episodes  # the curve's batch: all episodes
    # the shared update rule and the budget actually used (docs/agents.md, "Stable updates")
    training = record["training"]
    assert training["guard"] == "shared" and training["safeguards_default"] is True
    assert training["safeguards"]["dual_clip"] == 3.0
    assert training["env_steps_used"] == {"4": 8}
    assert main(["evaluate", "--run", str(run), "--episodes", str(episodes), "--seed", "4"]) == 0
    printed = capsys.readouterr().out
    assert f"mean return: {point['eval_return']:.4f}" in printed
    assert f"success rate: {point['eval_success_rate']:.3f}" in printed


def test_cells_played_apart_assemble_into_the_same_record():
    """An executor may play a plan's cells elsewhere and assemble the record with build_record."""
    from agentbench_poad.leaderboard.protocol import EvaluationPlan, build_record, evaluate_plan
    from agentbench_poad.leaderboard.schema import validate_record

    plan = EvaluationPlan(
        agent="agentbench_poad.baselines.random:RandomAgent",
        env_ids=(CORRIDOR_ID,),
        seeds=(0, 1),
        episodes=3,
    )
    cells = [
        evaluate_cell(pickle.loads(pickle.dumps(plan.cell(CORRIDOR_ID, seed))))
        for seed in plan.seeds
    ]
    apart = build_record(plan, CORRIDOR_ID, cells)
    (together,) = evaluate_plan(plan)
    validate_record(apart)
    assert apart["record_id"] == together["record_id"] == f"{CORRIDOR_ID}__random"
    assert apart["scores"] == together["scores"] and apart["protocol"] == together["protocol"]
    with pytest.raises(ValueError, match="not the plan's"):
        build_record(plan, CORRIDOR_ID, cells[::-1])


def test_the_record_states_the_discount_of_its_cells():
    from agentbench_poad.leaderboard.protocol import EvaluationPlan, build_record
    from agentbench_poad.registration import env_facts

    env_id = "VirtualHome-Cheese-v0"
    plan = EvaluationPlan(agent=RANDOM_SPEC, env_ids=(env_id,), seeds=(0, 1), episodes=2)
    cells = [evaluate_cell(plan.cell(env_id, seed)) for seed in plan.seeds]
    record = build_record(plan, env_id, cells)
    assert record["protocol"]["discount"] == env_facts(env_id).discount == cells[0].discount
    assert [s["mean_discounted_return"] for s in record["scores"]["per_seed"]] == [
        c.mean_discounted_return for c in cells
    ]
    # a cell read back from before episodes logged it states no discount: its seed's mean is null
    old = dataclasses.replace(
        cells[1],
        discount=None,
        episodes=tuple(dataclasses.replace(e, discounted_return=None) for e in cells[1].episodes),
    )
    mixed = build_record(plan, env_id, [cells[0], old])
    assert mixed["protocol"]["discount"] == cells[0].discount
    assert mixed["scores"]["per_seed"][1]["mean_discounted_return"] is None
    other = evaluate_cell(dataclasses.replace(plan.cell(env_id, 1), discount=0.5))
    with pytest.raises(ValueError, match="different discounts"):
        build_record(plan, env_id, [cells[0], other])


def test_evaluate_cli_batch_size_is_recorded_and_checked(tmp_path, capsys):
    from agentbench_poad.cli import main
    from agentbench_poad.leaderboard import read_record

    out = tmp_path / "r.json"
    assert (
        main(
            [
                "evaluate",
                "--agent",
                f"{HERE}:RandomBatchAgent",
                "--env",
                CORRIDOR_ID,
                "--episodes",
                "3",
                "--batch-size",
                "2",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    record = read_record(out)
    assert record["protocol"]["batch_size"] == 2
    assert record["command"].endswith("--batch-size 2")
    assert verify_record(record).exact_matches == 3
    assert (
        main(
            [
                "evaluate",
                "--agent",
                f"{HERE}:RandomBatchAgent",
                "--env",
                CORRIDOR_ID,
                "--batch-size",
                "0",
                "--out",
                str(tmp_path / "x.json"),
            ]
        )
        == 2
    )
    assert "--batch-size must be >= 1" in capsys.readouterr().err
