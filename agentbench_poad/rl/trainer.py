"""Train the reference agents (POAD, NTPO, TWOSOME) on any registered text environment.

:func:`train` runs the reference loop (docs/reference.md#training-loop-structure): roll out ``rollout_length`` steps in
``num_envs`` environments (episodes continue across updates, each env auto-resets), bootstrap the
last observations and those where a time limit truncated an episode (``terminated`` and
``truncated`` are kept apart, Gymnasium's way), let the algorithm assign credit and run its PPO epochs, log, evaluate greedily
now and then, checkpoint. The algorithm object does everything algorithm-specific; the trainer
never asks which one it runs.

The trainer receives the algorithm *class* (``POAD``, ``NTPO``, ``TWOSOME`` or your own
:class:`~agentbench_poad.rl.ppo.PPOAgent` subclass); looking an algorithm up by name is the CLI's
job (``agentbench_poad.baselines.get_algorithm``), so ``rl/`` never imports the agents.

:func:`train` reads as the loop it is; each stage is a named function: ``_start`` (checks, run
dir, policy, agent, generators, envs, restore), ``_rollout``, ``_bootstrap``, the agent's
``compute_advantages`` and ``update``, ``_update_metrics``, ``_evaluate_if_due``, ``_log`` and
``_checkpoint``.

What the run directory holds (config, metrics, learning curve, checkpoints) and its resume
bookkeeping live in :mod:`agentbench_poad.rl.run_dir`.

Learning-curve points are played by the core evaluation runner
(:func:`agentbench_poad.evaluation.evaluate_cell`) with the run's seed as evaluation seed: the
greedy policy on ``eval_episodes`` episodes, episode ``i`` reset with ``seed * 100000 + i``. A
board record of the same checkpoint (``leaderboard add --run``, same seed and episodes) therefore
shows the same numbers.

Resuming (``resume=True``) restores everything from the newest checkpoint, drops metric lines
logged after it (a killed run may have written some), purges TensorBoard events after it, and
rebuilds each environment's unfinished episode by replaying its actions from the same reset seed
(every environment is deterministic given its seed and actions), so the continued run logs exactly
the lines an uninterrupted run would have.

All randomness comes from ``seed`` through private generators: reset seeds of each env's episodes,
action sampling, minibatch shuffles, the critic's and the adapter's initial weights.

Why one file of over 600 lines: the loop and its named stages read top to bottom in one place,
as CleanRL's ``ppo.py`` does; run-directory bookkeeping already lives in its own module.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import agentbench_poad.rl.toy  # noqa: F401  (registers the case-study ids)
from agentbench_poad.evaluation import CellResult, EvaluationRequest, evaluate_cell
from agentbench_poad.rl.algorithm import algorithm_source
from agentbench_poad.rl.config import PPOConfig, preset_for
from agentbench_poad.rl.run_dir import RunDirectory, latest_checkpoint, load_run_config

__all__ = [
    "METRIC_KEYS",
    "build_policy",
    "curve_point",
    "evaluate_agent",
    "latest_checkpoint",
    "load_agent",
    "load_run_config",
    "train",
]

#: Keys of every metrics.jsonl line (plus ``eval_return``, ``eval_score`` and
#: ``eval_success_rate`` on evaluation updates).
METRIC_KEYS = (
    "update",
    "env_steps",
    "episode_return_mean",
    "episodes",
    "success_rate",
    "reward_mean",
    "policy_loss",
    "value_loss",
    "approx_kl",
    "entropy",
    "policy_steps_taken",
    "policy_steps_skipped",
    "signal_free",
    "critic_grad_norm",
    "policy_grad_norm",
    "policy_loss_max",
    "policy_grad_norm_max",
    "steps_per_second",
)
#: Metrics that depend on wall-clock time (they differ between otherwise identical runs).
TIMING_KEYS = ("steps_per_second",)


def _derived_seed(*entropy: int) -> int:
    """A 31-bit seed from a tuple of non-negative ints (independent streams per purpose)."""
    return int(np.random.SeedSequence([int(e) for e in entropy]).generate_state(1)[0] >> 1)


# Stream ids of _derived_seed(seed, STREAM, ...) (evaluation seeds follow the runner's rule).
_ACTIONS, _SHUFFLE, _CRITIC, _ADAPTER, _RESETS = range(5)


def algorithm_stream(seed: int, stream: int, algorithm_name: str) -> int:
    """Seed of an algorithm's own stream (action sampling, minibatch shuffles).

    Derived from (seed, stream, algorithm name), so two algorithms never share one: with a
    shared stream, a GRPO run and a GiGPO run of one seed sampled the same actions until their
    policies parted, and their discoveries of a rare reward coincided. Reset seeds, the critic's
    and the adapter's initial weights stay shared across algorithms (common random numbers:
    every agent meets the same episodes from the same start).
    """
    name = zlib.crc32(algorithm_name.encode("utf-8"))
    return _derived_seed(seed, stream, name)


def episode_seed(seed: int, env_index: int, episode: int) -> int:
    """Reset seed of episode ``episode`` of training env ``env_index``."""
    return _derived_seed(seed, _RESETS, env_index, episode)


# -- building blocks -----------------------------------------------------------------------------
def build_policy(config: PPOConfig, model: str | os.PathLike, *, seed: int = 0) -> Any:
    """The :class:`~agentbench_poad.rl.policy.LMPolicy` a config describes, adapter seeded.

    peft draws LoRA's ``A`` matrices from the global RNG; we redraw them (same distribution:
    kaiming-uniform, a = √5) from a private generator so runs are reproducible without touching
    the global RNG. ``B`` starts at zero, so the adapted model equals the base model.
    """
    import torch

    from agentbench_poad.models import LoraSettings
    from agentbench_poad.rl.policy import GenerationSettings, LMPolicy

    lora = LoraSettings(
        r=config.lora_r,
        alpha=config.lora_alpha,
        dropout=config.lora_dropout,
        target_modules=tuple(config.lora_target_modules),
    )
    generation = GenerationSettings(
        temperature=config.temperature, top_k=config.top_k, max_new_tokens=config.max_new_tokens
    )
    policy = LMPolicy(
        str(model),
        lora=lora,
        dtype=config.dtype,
        device=config.device,
        normalization=config.normalization,
        generation=generation,
        lora_layers=config.lora_layers,
        frozen_cache_tokens=config.frozen_cache_tokens,
        chat_template=config.chat_template,
    )
    generator = torch.Generator().manual_seed(_derived_seed(seed, _ADAPTER))
    with torch.no_grad():
        for name, param in sorted(policy.model.named_parameters()):
            if "lora_A" in name and param.requires_grad:
                fresh = torch.empty(param.shape, dtype=torch.float32)
                torch.nn.init.kaiming_uniform_(fresh, a=math.sqrt(5), generator=generator)
                param.copy_(fresh.to(param.device, param.dtype))
    return policy


def _make_env(env_id: str, env_kwargs: dict[str, Any]) -> Any:
    import gymnasium as gym

    return gym.make(env_id, **env_kwargs)  # `import agentbench_poad` registered every id


def evaluate_agent(
    agent: Any,
    env_id: str,
    *,
    episodes: int,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
) -> CellResult:
    """One learning-curve evaluation: ``episodes`` episodes of ``agent`` under seed ``seed``.

    This is :func:`agentbench_poad.evaluation.evaluate_cell` without a deadline (the agent runs
    in-process); episode ``i`` resets with ``seed * 100000 + i``, an agent with ``act_batch``
    plays all episodes in one batch.

    Args:
        agent: anything with ``act(observation, available_actions)``.
        env_id: a registered environment id.
        episodes: number of episodes.
        seed: the evaluation seed (the trainer passes the run's seed).
        env_kwargs: extra ``gym.make`` arguments.

    Returns:
        The runner's :class:`~agentbench_poad.evaluation.CellResult` (``mean_return``,
        ``score``, ``success_rate``, ``episodes``).
    """
    return evaluate_cell(
        EvaluationRequest(
            agent=agent,
            env_id=env_id,
            seed=seed,
            episodes=episodes,
            env_kwargs=env_kwargs or {},
            action_timeout=None,
        )
    )


def curve_point(env_steps: int, result: CellResult) -> dict[str, Any]:
    """A ``learning_curve.json`` point of an evaluation."""
    return {
        "env_steps": env_steps,
        "eval_return": result.mean_return,
        "eval_score": result.score,
        "eval_success_rate": result.success_rate,
    }


@dataclass
class _EnvSlot:
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


def _finite_or_none(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)


@dataclass
class _Progress:
    """What a checkpoint restores besides weights and generators."""

    update: int = 0
    env_steps: int = 0
    learning_curve: list[dict[str, Any]] = field(default_factory=list)
    best_code: dict[str, Any] | None = None


def _algorithm_config(
    algorithm: type, env_id: str, preset: str | None, overrides: dict[str, Any]
) -> tuple[PPOConfig, str | None]:
    """The algorithm's config (preset + overrides) and the name of the preset it used."""
    name = preset_for(algorithm.config_class, env_id, preset)
    return algorithm.config_class.preset(name, **overrides), name


def _check_algorithm(algorithm: Any) -> None:
    if isinstance(algorithm, str):
        raise TypeError(
            f"train() takes the algorithm class, not its name {algorithm!r}: pass "
            f"agentbench_poad.baselines.get_algorithm({algorithm!r}) (the CLI looks names up)"
        )
    if not (
        isinstance(algorithm, type)
        and hasattr(algorithm, "config_class")
        and hasattr(algorithm, "name")
    ):
        raise TypeError(
            f"{algorithm!r} is not an algorithm class (a PPOAgent subclass such as "
            "agentbench_poad.baselines.poad.POAD)"
        )


def train(
    algorithm: type,
    env_id: str,
    model: str | os.PathLike,
    *,
    total_steps: int,
    seed: int = 0,
    out: str | os.PathLike = "runs/run",
    resume: bool = False,
    overrides: dict[str, Any] | None = None,
    preset: str | None = "auto",
    env_kwargs: dict[str, Any] | None = None,
    progress: bool = True,
    max_updates: int | None = None,
    config_source: dict[str, Any] | None = None,
) -> Path:
    """Train ``algorithm`` on ``env_id`` for ``total_steps`` environment steps; returns the run dir.

    Args:
        algorithm: the algorithm class (a :class:`~agentbench_poad.rl.ppo.PPOAgent` subclass with
            ``name`` and ``config_class``), e.g. ``agentbench_poad.baselines.get_algorithm("poad")``.
        env_id: a registered environment id.
        model: hub id or local directory of a causal LM (``agentbench-poad model init tiny``
            writes a small one).
        total_steps: environment steps (decisions) to train for; updates =
            ``total_steps // (num_envs * rollout_length)``.
        seed: seed of every random choice of the run.
        out: run directory (created).
        resume: continue the run in ``out`` from its newest checkpoint (``total_steps`` may grow).
        overrides: config fields replacing the preset's (e.g. ``{"lr": 1e-4, "num_envs": 2}``).
        preset: "auto" (the env family's paper preset, Appendix J), "mini" (the family's CPU
            preset for small models, docs/agents.md), a preset name ("overcooked",
            "overcooked-mini", ...) or None (plain defaults). Ids outside the benchmark families
            get the plain defaults under "auto" and "mini".
        env_kwargs: extra ``gym.make`` arguments.
        progress: show a tqdm progress bar.
        max_updates: stop after this many updates in this call (the run stays resumable).
        config_source: where the config came from, when a study's tuning chose it (stored in
            ``config.json``; records made from the run carry it as
            ``training.config_source``, docs/study.md "Tuning").

    Returns:
        The run directory.
    """
    from tqdm.auto import tqdm

    session = _start(
        algorithm,
        env_id,
        model,
        total_steps=total_steps,
        seed=seed,
        out=out,
        resume=resume,
        overrides=dict(overrides or {}),
        preset=preset,
        env_kwargs=dict(env_kwargs or {}),
        config_source=config_source,
    )
    config, state, agent = session.config, session.state, session.agent
    last_update = (
        session.num_updates
        if max_updates is None
        else min(session.num_updates, state.update + max_updates)
    )
    bar = tqdm(
        total=session.num_updates,
        initial=state.update,
        disable=not progress,
        unit="update",
        desc=f"{algorithm.name} {env_id}",
    )
    try:
        for update in range(state.update + 1, last_update + 1):
            started = time.perf_counter()
            buffer, finished = _rollout(
                agent,
                session.slots,
                config,
                session.generators["actions"],
                state,
                seed,
                env_id,
                total_steps,
            )
            losses = _learn(agent, buffer, session, update)
            state.update = update
            metrics = _update_metrics(
                state,
                finished,
                buffer,
                losses,
                config.batch_size / max(time.perf_counter() - started, 1e-9),
            )
            _evaluate_if_due(session, metrics)
            _log(session, metrics)
            if update % config.checkpoint_every == 0 or update == last_update:
                _checkpoint(session)
            bar.update(1)
            bar.set_postfix(ret=metrics["episode_return_mean"], kl=metrics.get("approx_kl"))
    finally:
        bar.close()
        session.close()
    return session.run.path


def _learn(agent: Any, buffer: Any, session: _Session, update: int) -> dict[str, float]:
    """Credit assignment and the PPO epochs of one update; a NaN or inf stops the run here."""
    from agentbench_poad.rl.ppo import NonFiniteLossError

    if buffer.num_samples < session.config.num_minibatches:
        # A group agent's last update can end with every episode cut by the budget (its groups
        # are dropped): the steps were spent, there is nothing whole to learn from.
        return {"policy_steps_taken": 0.0, "policy_steps_skipped": 0.0}
    try:
        _bootstrap(agent, buffer, session.slots)
        agent.compute_advantages(buffer)
        return agent.update(buffer, session.generators["shuffle"])
    except NonFiniteLossError as exc:
        raise NonFiniteLossError(
            f"update {update} of {session.run.path}: {exc}; the run's last checkpoint is "
            f"update {session.state.update}"
        ) from exc


#: Methods every agent shares with :class:`~agentbench_poad.rl.ppo.PPOAgent` so that the KL
#: guard, the dual clip and the rule for reward-free batches are the same for all of them.
SHARED_UPDATE_METHODS = ("guard_kl", "update")


def guard_kind(algorithm: type) -> str:
    """``"shared"``, or ``"custom"`` for a class created with ``custom_guard=True``."""
    return "custom" if getattr(algorithm, "custom_guard", False) else "shared"


def check_shared_update(agent: Any) -> None:
    """Refuse an agent whose guard or update path is not the shared one.

    Checked on the object the run trains, through the whole method resolution order and the
    instance itself, so a mixin, a method assigned to the class after its creation or an
    attribute set on the instance are caught as well as a subclass that redefines the method
    (which :class:`~agentbench_poad.rl.ppo.PPOAgent` already refuses at class creation). A class
    made with ``custom_guard=True`` may bring its own; its runs and records say "custom guard".
    """
    from agentbench_poad.rl.ppo import PPOAgent

    if not isinstance(agent, PPOAgent) or guard_kind(type(agent)) == "custom":
        return
    changed = [
        name
        for name in SHARED_UPDATE_METHODS
        if name in vars(agent) or getattr(type(agent), name, None) is not getattr(PPOAgent, name)
    ]
    if changed:
        raise TypeError(
            f"{type(agent).__name__} replaces the shared {changed} (through its class, a base "
            "or mixin, or the instance): every agent's policy steps go through PPOAgent.update "
            "and its KL guard so that they are comparable (docs/agents.md, 'One KL guard'). "
            "Fill PolicyEvaluation instead; an algorithm that needs another guard is declared "
            "with `class MyAgent(PPOAgent, custom_guard=True)` and its records say 'custom guard'"
        )


def planned_updates(algorithm: type, total_steps: int, batch_size: int) -> int:
    """Updates of a run: the PPO agents play ``batch_size`` steps each and stop at the last
    whole batch within the budget; a group agent (whole episodes) plays until the budget is
    spent exactly, its last round cut at ``total_steps`` (rl/group_rollout.py)."""
    if hasattr(algorithm, "collect_groups"):
        return -(-int(total_steps) // int(batch_size))
    return int(total_steps) // int(batch_size)


@dataclass
class _Session:
    """One call of :func:`train`: what its stages share."""

    config: PPOConfig
    run: RunDirectory
    policy: Any
    agent: Any
    generators: dict[str, Any]
    slots: list[_EnvSlot]
    state: _Progress
    tensorboard: Any
    env_id: str
    env_kwargs: dict[str, Any]
    seed: int
    num_updates: int

    def close(self) -> None:
        self.tensorboard.close()
        for slot in self.slots:
            slot.env.close()


def _start(
    algorithm: type,
    env_id: str,
    model: str | os.PathLike,
    *,
    total_steps: int,
    seed: int,
    out: str | os.PathLike,
    resume: bool,
    overrides: dict[str, Any],
    preset: str | None,
    env_kwargs: dict[str, Any],
    config_source: dict[str, Any] | None = None,
) -> _Session:
    """Check the arguments, open the run dir, build policy, agent, generators and envs, and
    restore the newest checkpoint (or start every env afresh)."""
    import torch

    from agentbench_poad.models.reference import model_reference
    from agentbench_poad.rl.env_executors import make_envs
    from agentbench_poad.version import __version__

    _check_algorithm(algorithm)
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    config, family = _algorithm_config(algorithm, env_id, preset, overrides)
    spec = {
        "agent": algorithm.name,
        "algorithm_source": algorithm_source(algorithm),  # class spec, package, version
        "env_id": env_id,
        "env_kwargs": env_kwargs,
        "model": model_reference(model),  # a path made absolute (issue 47)
        "seed": int(seed),
        "preset": family,
        "total_steps": int(total_steps),
        "algorithm": config.to_dict(),
        "guard": guard_kind(algorithm),
        "package_version": __version__,
    }
    if config_source is not None:
        spec["config_source"] = config_source
    num_updates = planned_updates(algorithm, total_steps, config.batch_size)
    if num_updates < 1:
        raise ValueError(
            f"total_steps={total_steps} is less than one update of num_envs*rollout_length="
            f"{config.batch_size} steps; raise total_steps or lower num_envs/rollout_length"
        )
    run = RunDirectory(out)
    checkpoint = run.open(spec, resume=resume, algorithm_defaults=type(config)().to_dict())

    policy = build_policy(config, model, seed=seed)
    agent = algorithm(config, policy, seed=_derived_seed(seed, _CRITIC))
    check_shared_update(agent)
    generators = {
        "actions": torch.Generator().manual_seed(algorithm_stream(seed, _ACTIONS, algorithm.name)),
        "shuffle": torch.Generator().manual_seed(algorithm_stream(seed, _SHUFFLE, algorithm.name)),
    }
    envs = make_envs(env_id, env_kwargs, config.num_envs, config.env_executor)
    slots = [_EnvSlot(env, i) for i, env in enumerate(envs)]
    state = _restore(run, checkpoint, policy, agent, generators, slots, seed)
    # An open-action env may declare where a generated action ends (DataSciCoding's
    # worked-example style: the end of the function body); the policy then stops there in
    # training rollouts and in the learning-curve evaluations alike.
    policy.generation = policy.settings_for(slots[0].info.get("action_stop"))
    run.truncate_metrics(state.update)
    run.write_learning_curve(state.learning_curve)
    try:
        agent.check_environment(env_id, slots[0].info.get("available_actions") is None)
    except ValueError:
        for slot in slots:
            slot.env.close()
        raise
    # On resume, drop events logged after the checkpoint (all of them when there was none).
    tensorboard = run.tensorboard(purge_step=state.env_steps + 1 if resume else None)
    return _Session(
        config,
        run,
        policy,
        agent,
        generators,
        slots,
        state,
        tensorboard,
        env_id,
        env_kwargs,
        seed,
        num_updates,
    )


def _evaluate_if_due(session: _Session, metrics: dict[str, Any]) -> None:
    """Every ``eval_every`` updates and after the last: a learning-curve point, into ``metrics``
    and ``learning_curve.json``."""
    config, state = session.config, session.state
    update = state.update
    if not (
        config.eval_every and (update % config.eval_every == 0 or update == session.num_updates)
    ):
        return
    point = curve_point(
        state.env_steps,
        evaluate_agent(
            session.policy.as_agent(greedy=config.eval_greedy),
            session.env_id,
            episodes=max(config.eval_episodes, 1),
            seed=session.seed,
            env_kwargs=session.env_kwargs,
        ),
    )
    metrics.update({k: v for k, v in point.items() if k != "env_steps"})
    state.learning_curve.append(point)
    session.run.write_learning_curve(state.learning_curve)


def _log(session: _Session, metrics: dict[str, Any]) -> None:
    """The update's metrics line, TensorBoard scalars and the best code so far."""
    session.run.append_metrics(metrics)
    session.tensorboard.log(metrics, session.state.env_steps)
    if session.state.best_code is not None:
        session.run.write_best_code(session.state.best_code)


def _checkpoint(session: _Session) -> None:
    """Weights, optimisers, generators and every env's unfinished episode (exact resume)."""
    state = session.state
    session.run.save_checkpoint(
        state.update,
        session.policy,
        session.agent,
        {k: g.get_state() for k, g in session.generators.items()},
        {**dataclasses.asdict(state), "envs": [s.state() for s in session.slots]},
        keep=session.config.keep_checkpoints,
    )


def _restore(
    run: RunDirectory,
    checkpoint: Path | None,
    policy: Any,
    agent: Any,
    generators: dict[str, Any],
    slots: list[_EnvSlot],
    seed: int,
) -> _Progress:
    """Load a checkpoint (weights, generators, unfinished episodes) or start every env afresh."""
    if checkpoint is None:
        for slot in slots:
            slot.start(seed)
        return _Progress()
    saved_generators, saved = run.load_checkpoint(checkpoint, policy, agent)
    for key, generator in generators.items():
        generator.set_state(saved_generators[key])
    for slot, saved_env in zip(slots, saved["envs"]):
        slot.episode = saved_env["episode"]
        slot.replay(seed, saved_env["actions"])
    return _Progress(
        saved["update"], saved["env_steps"], saved["learning_curve"], saved["best_code"]
    )


def _update_metrics(
    state: _Progress,
    finished: list[tuple[float, bool | None]],
    buffer: Any,
    losses: dict[str, float],
    steps_per_second: float,
) -> dict[str, Any]:
    """The metrics.jsonl line of an update (before any evaluation)."""
    returns = [r for r, _ in finished]
    successes = [s for _, s in finished if s is not None]
    return {
        "update": state.update,
        "env_steps": state.env_steps,
        "episode_return_mean": float(np.mean(returns)) if returns else None,
        "episodes": len(returns),
        "success_rate": float(np.mean(successes)) if successes else None,
        "reward_mean": float(buffer.rewards().mean()) if buffer.num_samples else None,
        **{k: _finite_or_none(v) for k, v in losses.items()},
        "steps_per_second": steps_per_second,
    }


def _rollout(
    agent: Any,
    slots: list[_EnvSlot],
    config: PPOConfig,
    generator: Any,
    state: _Progress,
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
            # is bootstrapped after the rollout (_bootstrap).
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


def _bootstrap(agent: Any, buffer: Any, slots: list[_EnvSlot]) -> None:
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


def load_agent(
    run_dir: str | os.PathLike, *, greedy: bool = True, device: str | None = None
) -> Any:
    """The trained policy of a run (newest checkpoint) as a protocol agent.

    Only the policy is rebuilt (base model, LoRA adapter, generation settings), so this needs no
    algorithm class: the fields of :class:`~agentbench_poad.rl.config.PPOConfig` in the run's
    config are all it reads.

    Args:
        run_dir: a run directory written by :func:`train`.
        greedy: take the most likely action (evaluation) instead of sampling.
        device: load on this device instead of the run's.

    Returns:
        An :class:`~agentbench_poad.rl.policy.LLMAgent` (``act(observation, available_actions)``).
    """
    spec = load_run_config(run_dir)
    shared = {f.name for f in dataclasses.fields(PPOConfig)}
    values = {k: v for k, v in spec["algorithm"].items() if k in shared}
    if device is not None:
        values["device"] = device
    config = PPOConfig.from_dict(values)
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise FileNotFoundError(
            f"{run_dir} has no checkpoint yet; train it (agentbench-poad train ... --out {run_dir})"
        )
    policy = build_policy(config, spec["model"], seed=spec["seed"])
    policy.load_adapter(checkpoint / "adapter")
    return policy.as_agent(greedy=greedy, seed=spec["seed"])
