"""Group rollouts for the critic-free agents (GRPO, GiGPO): G whole episodes per reset seed.

A group-relative advantage compares episodes that started in the same state, so a group agent
does not roll out like the PPO agents (``num_envs`` environments stepped for ``rollout_length``
steps, episodes carried across updates and bootstrapped by a critic). Instead, per update:

1. **A group** is ``G = group_size`` copies of the environment, all reset with one seed. The
   trainer's ``num_envs`` copies (a multiple of ``G``) play ``num_envs / G`` groups side by side
   as one vectorised env (a *round*): every step, one batched policy call chooses the actions of
   the copies whose episode is still running; a copy whose episode ended waits for the others.
   Every episode is played to its end (terminated, or truncated by a time limit), so every
   return is whole. Groups never cross an update.
2. **The budget counts env steps**: update ``u`` plays rounds until the run has taken at least
   ``u × batch_size`` env steps (``batch_size = num_envs × rollout_length``, as for the PPO
   agents), and at least one round, but never past the run's ``total_steps``: the round that
   reaches it is cut there, and the groups with a cut episode are dropped from that update
   (their steps are spent, their returns are not whole). So every run ends at exactly its
   budget, as the PPO agents' do, and the learning curve's x axis (env steps) charges a group
   what it cost. The trainer plans ``ceil(total_steps / batch_size)`` updates for a group
   agent; the presets take ``rollout_length`` >= the task's episode limit so that a round
   fits in an update.
3. **Reset seeds** come from the run's seed, the update and the group's index in it (their own
   stream, apart from the PPO agents' episode seeds), so a resumed run replays the same groups.
4. **Open actions** (``available_actions`` None: DataSciCoding's code) are generated; the best
   one so far (highest reward) is kept in the trainer's ``state.best_code``, as the PPO agents'
   rollout keeps it (the run's ``best_code.json``).

Bad input, found at the first group's reset, before any policy step: copies whose first
observation (text and offered actions) differ although they were reset with one seed (the
environment is not deterministic given its seed, so its episodes would not form a group), and
observations that are not text. A group of one episode (``group_size = 1``) is refused by the
agents' config, and :meth:`GroupBuffer.check_groups` refuses groups whose episodes were reset with
different seeds.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["GroupBuffer", "GroupEpisode", "GroupStep", "collect_groups", "group_seed"]

#: Stream id of :func:`group_seed` (the trainer's streams are 0-4).
GROUP_RESETS = 5


def group_seed(seed: int, update: int, group: int) -> int:
    """Reset seed of every episode of group ``group`` of update ``update`` (31 bits)."""
    state = np.random.SeedSequence([int(seed), GROUP_RESETS, int(update), int(group)])
    return int(state.generate_state(1)[0] >> 1)


@dataclass
class GroupStep:
    """One decision of one episode."""

    prompt: str
    """The observation the action was chosen on (the anchor-state key, with the actions)."""
    available_actions: list[str] | None
    """The offered actions; None for a generated (open) action."""
    sample: Any
    """The chosen :class:`~agentbench_poad.rl.policy.ActionSample`."""
    reward: float = 0.0
    """Environment reward of the step."""

    def state_key(self) -> tuple[str, tuple[str, ...] | None]:
        """GiGPO's anchor-state key: the exact observation text and the offered actions."""
        actions = None if self.available_actions is None else tuple(self.available_actions)
        return (self.prompt, actions)


@dataclass
class GroupEpisode:
    """One whole episode of a group."""

    group: int
    """The group's index in the update."""
    reset_seed: int
    """The seed the episode was reset with (one per group)."""
    steps: list[GroupStep] = field(default_factory=list)
    terminated: bool = False
    """The episode reached a terminal state."""
    truncated: bool = False
    """A time limit ended it (False when it also terminated)."""
    success: bool | None = None
    """``info["success"]`` of the last step, when the env reports it."""
    cut: bool = False
    """The run's env-step budget ran out before the episode ended (its group is dropped)."""

    @property
    def episode_return(self) -> float:
        """The undiscounted sum of the episode's rewards."""
        return float(sum(step.reward for step in self.steps))


@dataclass
class GroupBuffer:
    """One update's groups: whole episodes, their steps flattened episode by episode."""

    episodes: list[GroupEpisode] = field(default_factory=list)
    advantages: np.ndarray | None = None
    """Set by the agent's ``compute_advantages``: ``(num_samples,)``, one per step."""
    returns: np.ndarray | None = None
    """Unused (no critic); kept so the trainer and the PPO agents' buffer look alike."""
    next_values: Any = None
    """Unused (whole episodes: nothing to bootstrap)."""

    def steps(self) -> list[GroupStep]:
        """Every step, episode by episode (the order of ``advantages``)."""
        return [step for episode in self.episodes for step in episode.steps]

    def __len__(self) -> int:
        return self.num_samples

    @property
    def num_samples(self) -> int:
        return sum(len(e.steps) for e in self.episodes)

    def flat(self, name: str) -> list[Any]:
        """One attribute of every step (``prompt``, ``available_actions`` ...)."""
        return [getattr(step, name) for step in self.steps()]

    def flat_samples(self, name: str) -> list[Any]:
        """One attribute of every step's action sample."""
        return [getattr(step.sample, name) for step in self.steps()]

    def open_actions(self) -> bool:
        """True when every step's action was generated (``available_actions`` None), False when
        every step's was offered; a buffer that mixes the two is an error (the loss granularity
        follows the action kind, and one update has one)."""
        kinds = {step.available_actions is None for step in self.steps()}
        if len(kinds) > 1:
            raise ValueError(
                "the buffer mixes generated (open) and offered actions: an environment either "
                "offers a list of actions at every step or at none (available_actions is None), "
                "and GRPO/GiGPO take their loss per token or per action accordingly"
            )
        return kinds == {True}

    def rewards(self) -> np.ndarray:
        """``(num_samples,)`` float64 rewards."""
        return np.array([step.reward for step in self.steps()], dtype=np.float64)

    def truncated_records(self) -> list[GroupStep]:
        """None: a critic bootstraps truncated steps, and a group agent has no critic."""
        return []

    def episode_groups(self) -> list[int]:
        """The group of each episode."""
        return [e.group for e in self.episodes]

    def step_groups(self) -> list[int]:
        """The episode group of each step."""
        return [e.group for e in self.episodes for _ in e.steps]

    def padded_rewards(self) -> tuple[np.ndarray, np.ndarray]:
        """``(rewards (E, T), mask (E, T))``: each episode's rewards right-padded with 0."""
        width = max((len(e.steps) for e in self.episodes), default=0)
        rewards = np.zeros((len(self.episodes), width), dtype=np.float64)
        mask = np.zeros(rewards.shape, dtype=bool)
        for i, episode in enumerate(self.episodes):
            n = len(episode.steps)
            rewards[i, :n] = [step.reward for step in episode.steps]
            mask[i, :n] = True
        return rewards, mask

    def check_groups(self) -> None:
        """Raise unless every group has >= 2 episodes, all reset with one seed, none empty."""
        seeds: dict[int, set[int]] = {}
        sizes: dict[int, int] = {}
        for episode in self.episodes:
            if not episode.steps:
                raise ValueError(f"an episode of group {episode.group} has no steps")
            seeds.setdefault(episode.group, set()).add(episode.reset_seed)
            sizes[episode.group] = sizes.get(episode.group, 0) + 1
        for group, group_seeds in seeds.items():
            if len(group_seeds) > 1:
                raise ValueError(
                    f"the episodes of group {group} were reset with different seeds "
                    f"{sorted(group_seeds)}: a group-relative advantage compares episodes that "
                    "start in the same state, so every episode of a group must share one seed"
                )
            if sizes[group] < 2:
                raise ValueError(
                    f"group {group} has {sizes[group]} episode: a group-relative advantage needs "
                    "at least 2 episodes per group (group_size >= 2)"
                )


def _first_observations(envs: Sequence[Any], reset_seed: int) -> tuple[list[str], list[dict]]:
    """Reset every copy with one seed; check that they start in one text state."""
    observations, infos = [], []
    for env in envs:
        observation, info = env.reset(seed=reset_seed)
        observations.append(observation)
        infos.append(info)
    first = observations[0]
    if not isinstance(first, str):
        raise ValueError(
            f"group rollouts need text observations (anchor states are grouped by the exact "
            f"observation text), but this environment returned a {type(first).__name__}"
        )
    actions = infos[0].get("available_actions")
    for k, (observation, info) in enumerate(zip(observations, infos)):
        if observation != first or info.get("available_actions") != actions:
            raise ValueError(
                f"copy {k} of a group started in a different state than copy 0 although both "
                f"were reset with seed {reset_seed}: the environment is not deterministic given "
                "its reset seed, so its episodes cannot form a group (GRPO/GiGPO need that)"
            )
    return observations, infos


def _play_round(
    agent: Any,
    envs: Sequence[Any],
    generator: Any,
    groups: Sequence[tuple[int, int]],
    state: Any,
    budget: int | None = None,
) -> list[GroupEpisode]:
    """Play groups side by side to the end of every episode (one vectorised env of all copies).

    ``groups`` are ``(group index, reset seed)``; group ``k`` plays in copies ``k*G .. k*G+G-1``.
    With ``budget`` the round stops when the run has taken that many env steps: the episodes
    still running are marked ``cut`` (the caller drops their groups).
    """
    from agentbench_poad.rl.env_executors import step_envs

    size = len(envs) // len(groups)
    observations: list[str] = []
    infos: list[dict] = []
    episodes: list[GroupEpisode] = []
    for k, (group, reset_seed) in enumerate(groups):
        first, first_infos = _first_observations(envs[k * size : (k + 1) * size], reset_seed)
        observations += first
        infos += first_infos
        episodes += [GroupEpisode(group=group, reset_seed=reset_seed) for _ in range(size)]
    active = list(range(len(envs)))
    while active:
        if budget is not None and state.env_steps + len(active) > budget:
            left = max(budget - state.env_steps, 0)
            for i in active[left:]:
                episodes[i].cut = True
            active = active[:left]
            if not active:
                break
        records = agent.collect(
            [observations[i] for i in active],
            [infos[i].get("available_actions") for i in active],
            generator,
        )
        results = step_envs([envs[i] for i in active], [r.sample.text for r in records])
        running = []
        for i, record, (observation, reward, terminated, truncated, info) in zip(
            active, records, results
        ):
            state.env_steps += 1
            record.reward = float(reward)
            if record.available_actions is None:
                _keep_best_code(state, envs[i], record)
            episode = episodes[i]
            episode.steps.append(record)
            if terminated or truncated:
                episode.terminated = bool(terminated)
                episode.truncated = bool(truncated) and not terminated
                episode.success = bool(info["success"]) if "success" in info else None
                continue
            if not isinstance(observation, str):
                raise ValueError(
                    "group rollouts need text observations, but this environment returned a "
                    f"{type(observation).__name__}"
                )
            observations[i], infos[i] = observation, info
            running.append(i)
        active = running
        if budget is not None and state.env_steps >= budget:
            for i in active:
                episodes[i].cut = True
            break
    return episodes


def _keep_best_code(state: Any, env: Any, record: GroupStep) -> None:
    """The trainer's best generated action so far (``best_code.json``), as its own rollout keeps
    it: the highest reward, the first one reached on ties."""
    best = getattr(state, "best_code", None)
    if best is not None and not record.reward > best["reward"]:
        return
    spec = getattr(env, "spec", None)
    state.best_code = {
        "reward": record.reward,
        "code": record.sample.text,
        "env_steps": state.env_steps,
        "env_id": getattr(spec, "id", None),
    }


def collect_groups(
    agent: Any,
    slots: Sequence[Any],
    generator: Any,
    state: Any,
    seed: int,
    budget: int | None = None,
) -> tuple[GroupBuffer, list[tuple[float, bool | None]]]:
    """One update's groups (the trainer's rollout for agents that define ``collect_groups``).

    Args:
        agent: the group agent (``collect``, ``config.group_size``, ``config.batch_size``).
        slots: the trainer's environment slots; their ``env`` are the group's copies.
        generator: the action-sampling generator.
        state: the trainer's progress (``update``: updates done; ``env_steps`` is advanced).
        seed: the run's seed.
        budget: the run's env-step budget (``total_steps``): no round plays past it; a group
            with an episode the budget cut is dropped from the update (its steps still count),
            so every run ends at exactly its budget and every return is whole.

    Returns:
        The :class:`GroupBuffer` and ``(return, success or None)`` of every episode played.
    """
    config = agent.config
    envs = [slot.env for slot in slots]
    if len(envs) % config.group_size:
        raise ValueError(
            f"num_envs={len(envs)} environment copies do not split into groups of "
            f"group_size={config.group_size}; make num_envs a multiple of group_size"
        )
    per_round = len(envs) // config.group_size
    update = state.update + 1
    target = update * config.batch_size
    buffer = GroupBuffer()
    group = 0
    if budget is not None:
        target = min(target, budget)
    while (group == 0 or state.env_steps < target) and (budget is None or state.env_steps < budget):
        groups = [(g, group_seed(seed, update, g)) for g in range(group, group + per_round)]
        before = state.env_steps
        buffer.episodes += _play_round(agent, envs, generator, groups, state, budget)
        if state.env_steps - before > config.batch_size:
            warnings.warn(
                f"a round of {len(envs)} whole episodes took {state.env_steps - before} env "
                f"steps, more than an update's {config.batch_size} (num_envs x rollout_length): "
                "if rounds stay this long the run spends more than total_steps; raise "
                "rollout_length or set the env's max_episode_steps",
                stacklevel=2,
            )
        group += per_round
    cut_groups = {e.group for e in buffer.episodes if e.cut}
    buffer.episodes = [e for e in buffer.episodes if e.group not in cut_groups]
    buffer.check_groups()
    finished = [(e.episode_return, e.success) for e in buffer.episodes]
    return buffer, finished
