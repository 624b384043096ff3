"""Train the reference agents (POAD, NTPO, TWOSOME) on any registered text environment.

:func:`train` runs the reference loop (docs/reference.md#training-loop-structure) and reads as
the loop it is: per update, the rollout (:mod:`agentbench_poad.rl.rollout`, or a group agent's
:mod:`~agentbench_poad.rl.group_rollout`), the agent's ``compute_advantages`` and ``update``, the
metrics line, ``_evaluate_if_due`` and ``_commit_update`` (log, checkpoint). It receives the
algorithm *class* and never asks which one it runs; looking one up by name is the CLI's job, so
``rl/`` never imports the agents. The run directory's files and resume bookkeeping live in
:mod:`agentbench_poad.rl.run_dir`; exact resume is described in docs/agents.md ("Run directory").
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import agentbench_poad.rl.toy  # noqa: F401  (registers the case-study ids)
from agentbench_poad.evaluation import CellResult, EvaluationRequest, evaluate_cell
from agentbench_poad.rl.algorithm import algorithm_source
from agentbench_poad.rl.config import PPOConfig, preset_for
from agentbench_poad.rl.rollout import (
    ACTIONS,
    ADAPTER,
    CRITIC,
    SHUFFLE,
    EnvSlot,
    Progress,
    algorithm_stream,
    bootstrap,
    derived_seed,
    rollout,
)
from agentbench_poad.rl.run_dir import (
    RunDirectory,
    commit_step,
    latest_checkpoint,
    load_run_config,
)

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


# -- building blocks -----------------------------------------------------------------------------
def build_policy(config: PPOConfig, model: str | os.PathLike, *, seed: int = 0) -> Any:
    """The :class:`~agentbench_poad.rl.policy.LMPolicy` a config describes, adapter seeded.

    peft draws LoRA's ``A`` matrices from the global RNG; we redraw them (same distribution:
    kaiming-uniform, a = √5) from a private generator so runs are reproducible without touching
    the global RNG. ``B`` starts at zero, so the adapted model equals the base model.
    """
    import torch

    from agentbench_poad.models import LoraSettings
    from agentbench_poad.rl.policy import LMPolicy
    from agentbench_poad.rl.policy_types import GenerationSettings

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
        compile_layers=config.compile_layers,
    )
    generator = torch.Generator().manual_seed(derived_seed(seed, ADAPTER))
    with torch.no_grad():
        for name, param in sorted(policy.model.named_parameters()):
            if "lora_A" in name and param.requires_grad:
                fresh = torch.empty(param.shape, dtype=torch.float32)
                torch.nn.init.kaiming_uniform_(fresh, a=math.sqrt(5), generator=generator)
                param.copy_(fresh.to(param.device, param.dtype))
    return policy


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


def _finite_or_none(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)


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
            buffer, finished = rollout(
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
            _commit_update(session, metrics, last_update)
            bar.update(1)
            bar.set_postfix(ret=metrics["episode_return_mean"], kl=metrics.get("approx_kl"))
    finally:
        bar.close()
        session.close()
    return session.run.path


def _learn(agent: Any, buffer: Any, session: _Session, update: int) -> dict[str, float]:
    """Credit assignment and the PPO epochs of one update; a NaN or inf stops the run here."""
    from agentbench_poad.rl.ppo_loop import NonFiniteLossError

    if buffer.num_samples < session.config.num_minibatches:
        # A group agent's last update can end with every episode cut by the budget (its groups
        # are dropped): the steps were spent, there is nothing whole to learn from.
        return {"policy_steps_taken": 0.0, "policy_steps_skipped": 0.0}
    try:
        bootstrap(agent, buffer, session.slots)
        agent.compute_advantages(buffer)
        losses = agent.update(buffer, session.generators["shuffle"])
    except NonFiniteLossError as exc:
        raise NonFiniteLossError(
            f"update {update} of {session.run.path}: {exc}; the run's last checkpoint is "
            f"update {session.state.update}"
        ) from exc
    # An algorithm that trains a network outside the shared update (ArCHer's off-policy critic,
    # in compute_advantages) reports it in ``agent.update_metrics``; its keys replace the shared
    # update's (whose value_loss is null when it took no critic step).
    return {**losses, **(getattr(agent, "update_metrics", None) or {})}


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
    slots: list[EnvSlot]
    state: Progress
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
    from agentbench_poad.rl.ppo import check_shared_update, guard_kind
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
    agent = algorithm(config, policy, seed=derived_seed(seed, CRITIC))
    check_shared_update(agent)
    generators = {
        "actions": torch.Generator().manual_seed(algorithm_stream(seed, ACTIONS, algorithm.name)),
        "shuffle": torch.Generator().manual_seed(algorithm_stream(seed, SHUFFLE, algorithm.name)),
    }
    envs = make_envs(env_id, env_kwargs, config.num_envs, config.env_executor)
    slots = [EnvSlot(env, i) for i, env in enumerate(envs)]
    state = _restore(run, checkpoint, policy, agent, generators, slots, seed)
    # An open-action env may declare where a generated action ends (DataSciCoding's
    # worked-example style: the end of the function body); the policy then stops there in
    # training rollouts and in the learning-curve evaluations alike.
    policy.generation = policy.settings_for(slots[0].info.get("action_stop"))
    # A killed run may have logged updates after its last commit: drop them.
    run.truncate_metrics(state.update)
    run.write_learning_curve(state.learning_curve)
    run.write_best_code(state.best_code)
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


def _commit_update(session: _Session, metrics: dict[str, Any], last_update: int) -> None:
    """Log the update, then, every ``checkpoint_every`` updates and after this call's last,
    checkpoint it (weights, optimisers, generators, every env's unfinished episode).

    The order is what makes a kill at any moment resumable exactly: first everything that a
    resume drops or rewrites when it is newer than the checkpoint it resumes from (the metrics
    line, on disk; TensorBoard scalars; the learning curve and best code, rewritten from the
    checkpoint's state), then the checkpoint, whose ``latest`` pointer is the commit point
    (:meth:`~agentbench_poad.rl.run_dir.RunDirectory.save_checkpoint`).
    """
    state = session.state
    session.run.append_metrics(metrics)
    session.tensorboard.log(metrics, state.env_steps)
    session.run.write_learning_curve(state.learning_curve)
    session.run.write_best_code(state.best_code)
    commit_step("logged")
    if not (state.update % session.config.checkpoint_every == 0 or state.update == last_update):
        return
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
    slots: list[EnvSlot],
    seed: int,
) -> Progress:
    """Load a checkpoint (weights, generators, unfinished episodes) or start every env afresh."""
    if checkpoint is None:
        for slot in slots:
            slot.start(seed)
        return Progress()
    saved_generators, saved = run.load_checkpoint(checkpoint, policy, agent)
    for key, generator in generators.items():
        generator.set_state(saved_generators[key])
    for slot, saved_env in zip(slots, saved["envs"]):
        slot.episode = saved_env["episode"]
        slot.replay(seed, saved_env["actions"])
    return Progress(
        saved["update"], saved["env_steps"], saved["learning_curve"], saved["best_code"]
    )


def _update_metrics(
    state: Progress,
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
    # Acting runs without gradients, which compile_layers never compiles: no compiler needed.
    values["compile_layers"] = False
    config = PPOConfig.from_dict(values)
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise FileNotFoundError(
            f"{run_dir} has no checkpoint yet; train it (agentbench-poad train ... --out {run_dir})"
        )
    policy = build_policy(config, spec["model"], seed=spec["seed"])
    policy.load_adapter(checkpoint / "adapter")
    return policy.as_agent(greedy=greedy, seed=spec["seed"])
