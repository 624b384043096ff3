"""Train the reference agents (POAD, NTPO, TWOSOME) on any registered text environment.

:func:`train` runs the reference loop (REFERENCE_SPEC §4.1): roll out ``rollout_length`` steps in
``num_envs`` environments (episodes continue across updates, each env auto-resets), bootstrap the
last observations, let the algorithm assign credit and run its PPO epochs, log, evaluate greedily
now and then, checkpoint. The algorithm object does everything algorithm-specific; the trainer
never asks which one it runs.

Run directory::

    config.json          agent, env, model, seed, preset, total_steps and the full algorithm config
    metrics.jsonl        one JSON object per update (see METRIC_KEYS)
    learning_curve.json  [{"env_steps", "eval_return", "eval_success_rate"}, ...] (greedy evals)
    best_code.json       open-action envs: the best-reward action seen in training, with its reward
    tb/                  TensorBoard event files (the same scalars, by env step)
    checkpoints/latest   name of the newest checkpoint directory
    checkpoints/update_NNNNNN/
        adapter/         the LoRA adapter (peft format)
        agent.pt         critic weights and both optimiser states
        rng.pt           generator states (action sampling, minibatch shuffles)
        state.json       update, env steps, each env's episode (seed index + actions so far), curve

Resuming (``resume=True``) restores everything from the newest checkpoint, drops metric lines
logged after it (a killed run may have written some), purges TensorBoard events after it, and
rebuilds each environment's unfinished episode by replaying its actions from the same reset seed
(every environment is deterministic given its seed and actions), so the continued run logs exactly
the lines an uninterrupted run would have.

All randomness comes from ``seed`` through private generators: reset seeds of each env's episodes,
action sampling, minibatch shuffles, the critic's and the adapter's initial weights.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agentbench_poad.rl.config import PPOConfig, family_of

__all__ = [
    "METRIC_KEYS",
    "build_policy",
    "evaluate_agent",
    "latest_checkpoint",
    "load_agent",
    "load_run_config",
    "train",
]

#: Keys of every metrics.jsonl line (``eval_*`` only on evaluation updates).
METRIC_KEYS = (
    "update", "env_steps", "episode_return_mean", "episodes", "success_rate", "reward_mean",
    "policy_loss", "value_loss", "approx_kl", "entropy", "skipped_kl", "policy_steps",
    "critic_grad_norm", "policy_grad_norm", "steps_per_second",
)
#: Metrics that depend on wall-clock time (they differ between otherwise identical runs).
TIMING_KEYS = ("steps_per_second",)


def _derived_seed(*entropy: int) -> int:
    """A 31-bit seed from a tuple of non-negative ints (independent streams per purpose)."""
    return int(np.random.SeedSequence([int(e) for e in entropy]).generate_state(1)[0] >> 1)


# Stream ids of _derived_seed(seed, STREAM, ...).
_ACTIONS, _SHUFFLE, _CRITIC, _ADAPTER, _RESETS, _EVAL = range(6)


def episode_seed(seed: int, env_index: int, episode: int) -> int:
    """Reset seed of episode ``episode`` of training env ``env_index``."""
    return _derived_seed(seed, _RESETS, env_index, episode)


def eval_seed(seed: int, episode: int) -> int:
    """Reset seed of greedy evaluation episode ``episode`` (the same at every evaluation)."""
    return _derived_seed(seed, _EVAL, episode)


# -- building blocks -----------------------------------------------------------------------------
def build_policy(config: PPOConfig, model: str | os.PathLike, *, seed: int = 0) -> Any:
    """The :class:`~agentbench_poad.rl.policy.LMPolicy` a config describes, adapter seeded.

    peft draws LoRA's ``A`` matrices from the global RNG; we redraw them (same distribution:
    kaiming-uniform, a = √5) from a private generator so runs are reproducible without touching
    the global RNG. ``B`` starts at zero, so the adapted model equals the base model.
    """
    import torch

    from agentbench_poad.rl.models import LoraSettings
    from agentbench_poad.rl.policy import GenerationSettings, LMPolicy

    lora = LoraSettings(r=config.lora_r, alpha=config.lora_alpha, dropout=config.lora_dropout,
                        target_modules=tuple(config.lora_target_modules))
    generation = GenerationSettings(temperature=config.temperature, top_k=config.top_k,
                                    max_new_tokens=config.max_new_tokens)
    policy = LMPolicy(str(model), lora=lora, dtype=config.dtype, device=config.device,
                      normalization=config.normalization, generation=generation)
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

    import agentbench_poad.rl.toy  # noqa: F401  (registers the case-study ids)

    return gym.make(env_id, **env_kwargs)


def evaluate_agent(
    agent: Any,
    env_id: str,
    *,
    episodes: int,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    max_steps: int = 10_000,
) -> dict[str, Any]:
    """Run ``episodes`` episodes of a protocol agent, all envs in lockstep (batched acting).

    Args:
        agent: anything with ``act(observation, available_actions)`` (``act_batch`` is used when
            present).
        env_id: a registered environment id.
        episodes: number of episodes (episode ``k`` resets with :func:`eval_seed`).
        seed: the run's seed.
        env_kwargs: extra ``gym.make`` arguments.
        max_steps: safety cap on steps per episode for envs without a time limit.

    Returns:
        ``{"returns", "lengths", "successes", "mean_return", "success_rate"}``; success comes
        from ``info["success"]`` of the last step when the env reports it, else None.
    """
    from agentbench_poad.agents import act_batch, reset_agent

    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    envs = [_make_env(env_id, env_kwargs or {}) for _ in range(episodes)]
    try:
        reset_agent(agent, seed=seed)
        observations, infos = zip(*(env.reset(seed=eval_seed(seed, k)) for k, env in enumerate(envs)))
        observations, infos = list(observations), list(infos)
        returns = [0.0] * episodes
        lengths = [0] * episodes
        successes: list[bool | None] = [None] * episodes
        running = list(range(episodes))
        while running:
            actions = act_batch(agent, [observations[k] for k in running],
                                [infos[k].get("available_actions") for k in running])
            still = []
            for k, action in zip(running, actions):
                obs, reward, terminated, truncated, info = envs[k].step(action)
                returns[k] += float(reward)
                lengths[k] += 1
                observations[k], infos[k] = obs, info
                if terminated or truncated or lengths[k] >= max_steps:
                    successes[k] = info.get("success")
                else:
                    still.append(k)
            running = still
    finally:
        for env in envs:
            env.close()
    known = [bool(s) for s in successes if s is not None]
    return {
        "returns": returns,
        "lengths": lengths,
        "successes": successes,
        "mean_return": float(np.mean(returns)),
        "success_rate": float(np.mean(known)) if len(known) == episodes else None,
    }


# -- run directory -------------------------------------------------------------------------------
def load_run_config(run_dir: str | os.PathLike) -> dict[str, Any]:
    """The run's ``config.json``."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; is {run_dir} a run directory of `train`?")
    return json.loads(path.read_text())


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint directory of a run, or None."""
    pointer = Path(run_dir) / "checkpoints" / "latest"
    if not pointer.is_file():
        return None
    path = pointer.parent / pointer.read_text().strip()
    return path if path.is_dir() else None


def _write_json(path: Path, value: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


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
        self.observation, self.info = self.env.reset(seed=episode_seed(seed, self.index,
                                                                       self.episode))
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
        return {"episode": self.episode, "actions": list(self.actions),
                "episode_return": self.episode_return}


def _finite_or_none(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)


class _TensorBoard:
    """SummaryWriter when tensorboard is installed, else nothing (with one warning)."""

    def __init__(self, log_dir: Path, purge_step: int | None) -> None:
        self.writer = None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # pragma: no cover - tensorboard is in the train extra
            warnings.warn("tensorboard is not installed (pip install 'agentbench-poad[train]'); "
                          "tb/ stays empty", stacklevel=3)
            return
        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if self.writer is None:
            return
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "update":
                self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


# -- training ------------------------------------------------------------------------------------
def train(
    agent: str,
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
) -> Path:
    """Train ``agent`` on ``env_id`` for ``total_steps`` environment steps; returns the run dir.

    Args:
        agent: a name in :data:`agentbench_poad.baselines.ALGORITHMS` ("poad", "ntpo", "twosome").
        env_id: a registered environment id.
        model: hub id or local directory of a causal LM (``agentbench-poad model init tiny``
            writes a small one).
        total_steps: environment steps (decisions) to train for; updates =
            ``total_steps // (num_envs * rollout_length)``.
        seed: seed of every random choice of the run.
        out: run directory (created).
        resume: continue the run in ``out`` from its newest checkpoint (``total_steps`` may grow).
        overrides: config fields replacing the preset's (e.g. ``{"lr": 1e-4, "num_envs": 2}``).
        preset: an env family ("overcooked", "virtualhome", "datascicoding"), "auto" (from the
            env id; plain defaults for other ids) or None (plain defaults).
        env_kwargs: extra ``gym.make`` arguments.
        progress: show a tqdm progress bar.
        max_updates: stop after this many updates in this call (the run stays resumable).

    Returns:
        The run directory.
    """
    import torch

    from agentbench_poad.baselines import get_algorithm
    from agentbench_poad.rl.buffer import RolloutBuffer
    from agentbench_poad.version import __version__

    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    run_dir = Path(out)
    algorithm_class = get_algorithm(agent)
    config_class = algorithm_class.config_class
    overrides = dict(overrides or {})
    env_kwargs = dict(env_kwargs or {})
    family = family_of(env_id) if preset == "auto" else preset
    if family is not None and family not in config_class.PRESETS and preset == "auto":
        if family in config_class.UNSUPPORTED:
            raise ValueError(config_class.UNSUPPORTED[family])
        family = None
    config = config_class.preset(family, **overrides)
    spec = {
        "agent": algorithm_class.name,
        "env_id": env_id,
        "env_kwargs": env_kwargs,
        "model": str(model),
        "seed": int(seed),
        "preset": family,
        "total_steps": int(total_steps),
        "algorithm": config.to_dict(),
        "package_version": __version__,
    }

    num_updates = total_steps // config.batch_size
    if num_updates < 1:
        raise ValueError(
            f"total_steps={total_steps} is less than one update of num_envs*rollout_length="
            f"{config.batch_size} steps; raise total_steps or lower num_envs/rollout_length"
        )

    checkpoint = None
    if resume and (run_dir / "config.json").exists():
        previous = load_run_config(run_dir)
        for key in ("agent", "env_id", "env_kwargs", "model", "seed", "algorithm"):
            if _identity(previous.get(key)) != _identity(spec[key]):
                raise ValueError(
                    f"cannot resume {run_dir}: its {key} is {previous.get(key)!r}, this call "
                    f"asks for {spec[key]!r}; pass the same arguments or a new --out"
                )
        checkpoint = latest_checkpoint(run_dir)
    elif (run_dir / "metrics.jsonl").exists():
        raise FileExistsError(
            f"{run_dir} already holds a run; pass resume=True (--resume) to continue it or "
            "choose another output directory"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "checkpoints").mkdir(exist_ok=True)
    _write_json(run_dir / "config.json", spec)

    policy = build_policy(config, model, seed=seed)
    algorithm = algorithm_class(config, policy, seed=_derived_seed(seed, _CRITIC))
    action_generator = torch.Generator().manual_seed(_derived_seed(seed, _ACTIONS))
    shuffle_generator = torch.Generator().manual_seed(_derived_seed(seed, _SHUFFLE))
    from agentbench_poad.rl.env_executors import make_envs, step_envs

    envs = make_envs(env_id, env_kwargs, config.num_envs, config.env_executor)
    slots = [_EnvSlot(env, i) for i, env in enumerate(envs)]

    start_update, env_steps = 0, 0
    learning_curve: list[dict[str, Any]] = []
    best_code: dict[str, Any] | None = None
    if checkpoint is not None:
        state = json.loads((checkpoint / "state.json").read_text())
        policy.load_adapter(checkpoint / "adapter")
        algorithm.load_state_dict(torch.load(checkpoint / "agent.pt", map_location=policy.device,
                                             weights_only=True))
        generators = torch.load(checkpoint / "rng.pt", weights_only=True)
        action_generator.set_state(generators["actions"])
        shuffle_generator.set_state(generators["shuffle"])
        start_update, env_steps = state["update"], state["env_steps"]
        learning_curve = state["learning_curve"]
        best_code = state["best_code"]
        for slot, saved in zip(slots, state["envs"]):
            slot.episode = saved["episode"]
            slot.replay(seed, saved["actions"])
    else:
        for slot in slots:
            slot.start(seed)
        (run_dir / "best_code.json").unlink(missing_ok=True)  # from a run killed before a checkpoint
    _truncate_metrics(run_dir / "metrics.jsonl", start_update)
    _write_json(run_dir / "learning_curve.json", learning_curve)

    try:
        algorithm.check_environment(env_id, slots[0].info.get("available_actions") is None)
    except ValueError:
        for slot in slots:
            slot.env.close()
        raise
    # On resume, drop events logged after the checkpoint (all of them when there was none).
    tensorboard = _TensorBoard(run_dir / "tb", purge_step=env_steps + 1 if resume else None)
    last_update = num_updates if max_updates is None else min(num_updates,
                                                               start_update + max_updates)
    from tqdm.auto import tqdm

    bar = tqdm(total=num_updates, initial=start_update, disable=not progress, unit="update",
               desc=f"{algorithm_class.name} {env_id}")
    try:
        for update in range(start_update + 1, last_update + 1):
            started = time.perf_counter()
            buffer = RolloutBuffer(num_envs=config.num_envs)
            finished_returns: list[float] = []
            finished_success: list[bool] = []
            for _ in range(config.rollout_length):
                records = algorithm.collect([s.observation for s in slots],
                                            [s.info.get("available_actions") for s in slots],
                                            action_generator)
                results = step_envs([s.env for s in slots], [r.sample.text for r in records])
                for slot, record, result in zip(slots, records, results):
                    action = record.sample.text
                    obs, reward, terminated, truncated, info = result
                    env_steps += 1
                    slot.actions.append(action)
                    slot.episode_return += float(reward)
                    record.reward, record.done = float(reward), bool(terminated or truncated)
                    if record.available_actions is None and (
                        best_code is None or reward > best_code["reward"]
                    ):
                        best_code = {"reward": float(reward), "code": action,
                                     "env_steps": env_steps, "env_id": env_id}
                    if record.done:
                        finished_returns.append(slot.episode_return)
                        if "success" in info:
                            finished_success.append(bool(info["success"]))
                        slot.episode += 1
                        slot.start(seed)
                    else:
                        slot.observation, slot.info = obs, info
                buffer.add(records)
            # Time-outs are treated as terminal, like the reference (no bootstrap past them).
            buffer.next_values = algorithm.bootstrap_values([s.observation for s in slots])
            algorithm.compute_advantages(buffer)
            losses = algorithm.update(buffer, shuffle_generator)

            elapsed = time.perf_counter() - started
            metrics: dict[str, Any] = {
                "update": update,
                "env_steps": env_steps,
                "episode_return_mean": (float(np.mean(finished_returns)) if finished_returns
                                        else None),
                "episodes": len(finished_returns),
                "success_rate": (float(np.mean(finished_success)) if finished_success else None),
                "reward_mean": float(buffer.rewards().mean()),
                **{k: _finite_or_none(v) for k, v in losses.items()},
                "steps_per_second": config.batch_size / max(elapsed, 1e-9),
            }
            if config.eval_every and (update % config.eval_every == 0 or update == num_updates):
                result = evaluate_agent(policy.as_agent(greedy=True), env_id,
                                        episodes=max(config.eval_episodes, 1), seed=seed,
                                        env_kwargs=env_kwargs)
                metrics["eval_return"] = result["mean_return"]
                metrics["eval_success_rate"] = result["success_rate"]
                learning_curve.append({"env_steps": env_steps,
                                       "eval_return": result["mean_return"],
                                       "eval_success_rate": result["success_rate"]})
                _write_json(run_dir / "learning_curve.json", learning_curve)
            with open(run_dir / "metrics.jsonl", "a") as handle:
                handle.write(json.dumps(metrics, sort_keys=True) + "\n")
            tensorboard.log(metrics, env_steps)
            if best_code is not None:
                _write_json(run_dir / "best_code.json", best_code)
            if update % config.checkpoint_every == 0 or update == last_update:
                _save_checkpoint(run_dir, update, policy, algorithm,
                                 {"actions": action_generator.get_state(),
                                  "shuffle": shuffle_generator.get_state()},
                                 {"update": update, "env_steps": env_steps,
                                  "envs": [s.state() for s in slots],
                                  "learning_curve": learning_curve, "best_code": best_code},
                                 keep=config.keep_checkpoints)
            bar.update(1)
            bar.set_postfix(ret=metrics["episode_return_mean"], kl=metrics.get("approx_kl"))
    finally:
        bar.close()
        tensorboard.close()
        for slot in slots:
            slot.env.close()
    return run_dir


def _identity(value: Any) -> Any:
    """What must match to resume a run: everything but where it runs (``device``, envs)."""
    if isinstance(value, dict) and "device" in value:
        return {k: v for k, v in value.items() if k not in ("device", "env_executor")}
    return value


def _truncate_metrics(path: Path, updates: int) -> None:
    """Keep the metric lines of updates ``<= updates`` (a killed run may have logged more)."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            if json.loads(line)["update"] <= updates:
                kept.append(line)
        except (json.JSONDecodeError, KeyError, TypeError):
            continue  # a line cut short by the kill
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    os.replace(tmp, path)


def _save_checkpoint(run_dir: Path, update: int, policy: Any, algorithm: Any,
                     generators: dict[str, Any], state: dict[str, Any], *, keep: int) -> Path:
    """Write a checkpoint atomically (temp dir, rename, then move the ``latest`` pointer)."""
    import torch

    root = run_dir / "checkpoints"
    name = f"update_{update:06d}"
    final = root / name
    tmp = root / f".{name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    policy.save_adapter(tmp / "adapter")
    torch.save(algorithm.state_dict(), tmp / "agent.pt")
    torch.save(generators, tmp / "rng.pt")
    _write_json(tmp / "state.json", state)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    pointer = root / "latest"
    pointer_tmp = root / "latest.tmp"
    pointer_tmp.write_text(name + "\n")
    os.replace(pointer_tmp, pointer)
    for old in sorted(root.glob("update_*"))[:-keep]:
        shutil.rmtree(old)
    return final


def load_agent(run_dir: str | os.PathLike, *, greedy: bool = True,
               device: str | None = None) -> Any:
    """The trained policy of a run (newest checkpoint) as a protocol agent.

    Args:
        run_dir: a run directory written by :func:`train`.
        greedy: take the most likely action (evaluation) instead of sampling.
        device: load on this device instead of the run's.

    Returns:
        An :class:`~agentbench_poad.rl.policy.LLMAgent` (``act(observation, available_actions)``).
    """
    from agentbench_poad.baselines import get_algorithm

    spec = load_run_config(run_dir)
    config_class = get_algorithm(spec["agent"]).config_class
    values = dict(spec["algorithm"])
    if device is not None:
        values["device"] = device
    config = config_class.from_dict(values)
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise FileNotFoundError(
            f"{run_dir} has no checkpoint yet; train it (agentbench-poad train ... --out {run_dir})"
        )
    policy = build_policy(config, spec["model"], seed=spec["seed"])
    policy.load_adapter(checkpoint / "adapter")
    return policy.as_agent(greedy=greedy, seed=spec["seed"])
