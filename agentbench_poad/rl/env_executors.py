"""Where the trainer's environments live: in this process (``local``) or one per Ray actor (``ray``).

The trainer makes its ``num_envs`` environments with :func:`make_envs` and steps them all at once
with :func:`step_envs`. Locally that is a plain loop. With ``env_executor="ray"`` each environment
is a :class:`RemoteEnv`: a gymnasium-compatible proxy whose env lives in its own Ray actor, and
:func:`step_envs` sends every action before it waits for any result, so slow steps
(DataSciCoding's sandboxed grading) run in parallel while the policy stays in the trainer
process. An env is deterministic given its reset seed and actions wherever it runs, so a run's
trajectories are the same under both executors.

Ray is imported only when ``"ray"`` is asked for (``pip install "agentbench-poad[ray]"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym

__all__ = ["ENV_EXECUTORS", "RemoteEnv", "make_envs", "step_envs"]

#: Values of ``PPOConfig.env_executor``.
ENV_EXECUTORS = ("local", "ray")


def _make_local(env_id: str, env_kwargs: dict[str, Any]) -> gym.Env:
    import agentbench_poad.rl.toy  # noqa: F401  (registers the case-study ids)

    return gym.make(env_id, **env_kwargs)


class _EnvActor:
    """The Ray actor behind a :class:`RemoteEnv`: one environment."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any]) -> None:
        self.env = _make_local(env_id, env_kwargs)

    def describe(self) -> dict[str, Any]:
        return {
            "observation_space": self.env.observation_space,
            "action_space": self.env.action_space,
            "metadata": dict(self.env.metadata),
            "spec": self.env.spec,
        }

    def reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict]:
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        return self.env.step(action)

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


class RemoteEnv(gym.Env):
    """A gymnasium env whose real environment lives in a Ray actor (one env per actor).

    ``reset``/``step``/``render``/``close`` forward to the actor; ``step_async`` +
    ``step_wait`` let a caller overlap the steps of several envs (:func:`step_envs`).
    Errors raised by the env (e.g. ``TypeError`` for a non-``str`` action) are re-raised here.

    Args:
        env_id: a registered id (made in the actor with ``gym.make(env_id, **env_kwargs)``).
        env_kwargs: ``gym.make`` arguments (picklable).
        address: an existing Ray cluster; ``None``: ``RAY_ADDRESS`` or a local cluster.
        num_cpus: CPUs the actor reserves. 0 by default: the actor mostly waits on its
            sandbox, which the grader bounds per machine.
    """

    def __init__(
        self,
        env_id: str,
        env_kwargs: dict[str, Any] | None = None,
        *,
        address: str | None = None,
        num_cpus: float = 0,
    ) -> None:
        from agentbench_poad.executors import ensure_ray

        self._ray = ensure_ray(address)
        actor = self._ray.remote(_EnvActor).options(num_cpus=num_cpus, scheduling_strategy="SPREAD")
        self._actor = actor.remote(env_id, dict(env_kwargs or {}))
        facts = self._get(self._actor.describe.remote())
        self.observation_space = facts["observation_space"]
        self.action_space = facts["action_space"]
        self.metadata = facts["metadata"]
        self.spec = facts["spec"]
        self._pending: Any = None

    def _get(self, ref: Any) -> Any:
        try:
            return self._ray.get(ref)
        except self._ray.exceptions.RayTaskError as exc:
            cause = exc.cause if isinstance(exc.cause, Exception) else exc
            raise cause from None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict]:
        if self._pending is not None:
            self.step_wait()  # a step still in flight belongs to the old episode
        return self._get(self._actor.reset.remote(seed, options))

    def step_async(self, action: Any) -> None:
        """Send ``action``; collect the result with :meth:`step_wait`."""
        if self._pending is not None:
            raise RuntimeError("step_async called twice without step_wait")
        self._pending = self._actor.step.remote(action)

    def step_wait(self) -> tuple[Any, float, bool, bool, dict]:
        """The result of the action sent by :meth:`step_async`."""
        ref, self._pending = self._pending, None
        if ref is None:
            raise RuntimeError("step_wait called without step_async")
        return self._get(ref)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.step_async(action)
        return self.step_wait()

    def render(self) -> Any:
        return self._get(self._actor.render.remote())

    def close(self) -> None:
        actor, self._actor = getattr(self, "_actor", None), None
        if actor is None:
            return
        try:
            self._ray.get(actor.close.remote(), timeout=60)
        finally:
            self._ray.kill(actor)


def make_envs(
    env_id: str, env_kwargs: dict[str, Any], n: int, executor: str = "local"
) -> list[gym.Env]:
    """``n`` environments of ``env_id``: local ones, or :class:`RemoteEnv` proxies (``"ray"``)."""
    if executor == "local":
        return [_make_local(env_id, env_kwargs) for _ in range(n)]
    if executor == "ray":
        envs: list[gym.Env] = []
        try:
            for _ in range(n):
                envs.append(RemoteEnv(env_id, env_kwargs))
        except BaseException:
            for env in envs:
                env.close()
            raise
        return envs
    raise ValueError(f"unknown env executor {executor!r}; choose one of {ENV_EXECUTORS}")


def step_envs(envs: Sequence[gym.Env], actions: Sequence[Any]) -> list[tuple]:
    """Step every env with its action; remote envs all get their action before any is awaited."""
    if len(envs) != len(actions):
        raise ValueError(f"{len(envs)} envs but {len(actions)} actions")
    for env, action in zip(envs, actions):
        if isinstance(env, RemoteEnv):
            env.step_async(action)
    results: list[tuple] = []
    error: BaseException | None = None
    for env, action in zip(envs, actions):
        try:  # collect every pending step even when one fails, so no env is left mid-step
            results.append(env.step_wait() if isinstance(env, RemoteEnv) else env.step(action))
        except Exception as exc:  # noqa: BLE001 - re-raised below
            error = error or exc
    if error is not None:
        raise error
    return results
