"""The PPO agents' rollout: ``num_envs`` environments stepped ``rollout_length`` steps per update.

Episodes continue across updates (each env auto-resets), as in the reference
(docs/reference.md#training-loop-structure); a time limit's cut (``truncated``) is kept apart
from a real end (``terminated``), Gymnasium's way, and bootstrapped after the rollout
(:func:`bootstrap`). Group agents (GRPO, GiGPO) roll out whole groups instead: the sibling
:mod:`agentbench_poad.rl.group_rollout`. The loop that calls both is
:func:`agentbench_poad.rl.trainer.train`.

Every random choice of a run comes from its seed through per-purpose streams
(:func:`derived_seed`): reset seeds of each env's episodes, action sampling, minibatch shuffles,
the critic's and the adapter's initial weights.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentbench_poad.rl.config import PPOConfig

__all__ = [
    "ACTIONS",
    "ADAPTER",
    "CRITIC",
    "RESETS",
    "SHUFFLE",
    "EnvSlot",
    "Progress",
    "algorithm_stream",
    "bootstrap",
    "derived_seed",
    "episode_seed",
    "rollout",
]


def derived_seed(*entropy: int) -> int:
    """A 31-bit seed from a tuple of non-negative ints (independent streams per purpose)."""
    return int(np.random.SeedSequence([int(e) for e in entropy]).generate_state(1)[0] >> 1)


#: Stream ids of ``derived_seed(seed, STREAM, ...)`` (evaluation seeds follow the runner's rule;
#: group_rollout's reset stream is 5).
ACTIONS, SHUFFLE, CRITIC, ADAPTER, RESETS = range(5)


def algorithm_stream(seed: int, stream: int, algorithm_name: str) -> int:
    """Seed of an algorithm's own stream (action sampling, minibatch shuffles).

    Derived from (seed, stream, algorithm name), so two algorithms never share one: with a
    shared stream, a GRPO run and a GiGPO run of one seed sampled the same actions until their
    policies parted, and their discoveries of a rare reward coincided. Reset seeds, the critic's
    and the adapter's initial weights stay shared across algorithms (common random numbers:
    every agent meets the same episodes from the same start).
    """
    name = zlib.crc32(algorithm_name.encode("utf-8"))
    return derived_seed(seed, stream, name)


def episode_seed(seed: int, env_index: int, episode: int) -> int:
    """Reset seed of episode ``episode`` of training env ``env_index``."""
    return derived_seed(seed, RESETS, env_index, episode)


@dataclass
class EnvSlot:
    """One training environment and its unfinished episode."""

    env: Any
    index: int
    episode: int = 0
    actions: list[str] = field(default_factory=list)
    episode_return: float = 0.0
    observation: str = ""
    info: dict[str, Any] = field(default_factory=dict)

    def start(self, seed: int) -> None:
        self.observation, self.info = self.env.reset(
            seed=episode_seed(seed, self.index, self.episode)
        )
        self.actions = []
        self.episode_return = 0.0

    def replay(self, seed: int, actions: Sequence[str]) -> None:
        """Rebuild the unfinished episode: same reset seed, same actions (envs are deterministic)."""
        self.start(seed)
        for action in actions:
            self.observation, reward, terminated, truncated, self.info = self.env.step(action)
            self.actions.append(action)
            self.episode_return += float(reward)
            if terminated or truncated:
                raise RuntimeError(
                    f"replaying env {self.index}'s episode ended early: the environment is not "
                    "deterministic given its reset seed and actions, so this run cannot resume"
                )

    def state(self) -> dict[str, Any]:
        return {
            "episode": self.episode,
            "actions": list(self.actions),
            "episode_return": self.episode_return,
        }


@dataclass
class Progress:
    """What a checkpoint restores besides weights and generators."""

    update: int = 0
    env_steps: int = 0
    learning_curve: list[dict[str, Any]] = field(default_factory=list)
    best_code: dict[str, Any] | None = None


def rollout(
    agent: Any,
    slots: list[EnvSlot],
    config: PPOConfig,
    generator: Any,
    state: Progress,
    seed: int,
    env_id: str,
    total_steps: int | None = None,
) -> tuple[Any, list[tuple[float, bool | None]]]:
    """Collect ``rollout_length`` steps in every env (auto-reset); count env steps, best code.

    Returns the rollout buffer and ``(return, info["success"] or None)`` of each finished episode.
    Group agents (GRPO, GiGPO) roll out whole groups of episodes instead (rl/group_rollout.py).
    """
    if hasattr(agent, "collect_groups"):
        return agent.collect_groups(slots, generator, state, seed, budget=total_steps)
    from agentbench_poad.rl.buffer import RolloutBuffer
    from agentbench_poad.rl.env_executors import step_envs

    buffer = RolloutBuffer(num_envs=config.num_envs)
    finished: list[tuple[float, bool | None]] = []
    for _ in range(config.rollout_length):
        records = agent.collect(
            [s.observation for s in slots],
            [s.info.get("available_actions") for s in slots],
            generator,
        )
        results = step_envs([s.env for s in slots], [r.sample.text for r in records])
        for slot, record, result in zip(slots, records, results):
            action = record.sample.text
            obs, reward, terminated, truncated, info = result
            state.env_steps += 1
            slot.actions.append(action)
            slot.episode_return += float(reward)
            record.reward = float(reward)
            # Kept apart (Gymnasium): a time limit cuts a state that has a future; its value
            # is bootstrapped after the rollout (bootstrap).
            record.terminated = bool(terminated)
            record.truncated = bool(truncated) and not record.terminated
            if record.truncated:
                record.final_observation = obs
            if record.available_actions is None and (
                state.best_code is None or reward > state.best_code["reward"]
            ):
                state.best_code = {
                    "reward": float(reward),
                    "code": action,
                    "env_steps": state.env_steps,
                    "env_id": env_id,
                }
            if record.done:
                finished.append(
                    (slot.episode_return, bool(info["success"]) if "success" in info else None)
                )
                slot.episode += 1
                slot.start(seed)
            else:
                slot.observation, slot.info = obs, info
        buffer.add(records)
    return buffer, finished


def bootstrap(agent: Any, buffer: Any, slots: list[EnvSlot]) -> None:
    """Values the targets bootstrap from: each env's observation after the rollout
    (``buffer.next_values``) and the observation of each time-limit truncation
    (``record.final_value``; Gymnasium's handling of ``truncated``, docs/agents.md)."""
    buffer.next_values = agent.bootstrap_values([s.observation for s in slots])
    # A buffer of whole episodes (group agents: GRPO, GiGPO) has nothing cut to bootstrap.
    truncated_records = getattr(buffer, "truncated_records", None)
    cut = truncated_records() if truncated_records is not None else []
    if cut:
        values = agent.bootstrap_values([r.final_observation for r in cut])
        for record, value in zip(cut, values):
            record.final_value = float(value)
