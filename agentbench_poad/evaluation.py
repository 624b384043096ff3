"""The one evaluation runner: play an agent's episodes on one environment under one seed.

Everything that scores an agent goes through :func:`evaluate_cell`: the trainer's learning curve
(``rl/trainer.py``), ``agentbench-poad evaluate --run`` and ``--agent``, the leaderboard protocol
(``leaderboard/protocol.py``) and ``leaderboard verify``. So a curve point and a board score of
the same checkpoint, on the same seed and episodes, are the same numbers.

A *cell* is one (agent, env id, seed) with ``episodes`` episodes. The rules:

* **Seeds.** Episode ``i`` of seed ``s`` resets the env with
  ``reset_seed = s * 100000 + i`` (:func:`reset_seed`), so every episode is reproducible on its
  own. The agent is reset (``agent.reset(seed=...)`` when it has one) before each *batch* with the
  reset seed of the batch's first episode.
* **Batches.** An agent with ``act_batch`` plays ``batch_size`` episodes in lockstep, one env each
  (default: all episodes of the cell in one batch); batch ``b`` holds episodes
  ``b * batch_size ...``. An agent without it plays one episode at a time on one env (batches of
  one), so agents bound to their env (the oracles) see only their own env. An agent that reads its
  env's state must therefore not define ``act_batch``.
* **Success.** ``info["success"]`` when the env reports it (its last reported value); else the
  env's rule: restricted-action envs ``return > 0`` (the paper's VirtualHome rule), open-action
  envs (``available_actions is None``, DataSciCoding) "the final code ran" (last reward >= 0).
  A failed episode (agent fault) never succeeds.
* **Score** (the board's metric). Restricted-action envs: the undiscounted return. Open-action
  envs: the reward of the final step when that attempt ran (reward >= 0; DataSciCoding's ROC AUC
  of the final code), else 0.0.
* **Discounted return** (logged beside the score, never scored). ``sum_t γ^t r_t`` over the
  episode's decisions ``t = 0, 1, 2, ...`` (one ``env.step`` per agent action), with ``γ`` the
  env's protocol discount (:attr:`agentbench_poad.registration.EnvFacts.discount`: the γ of the
  family's paper preset, e.g. 0.95 for VirtualHome, the discount of the paper's Table 1) unless
  the request names another. An env without a protocol discount logs none (None).
* **Deadline.** With ``action_timeout`` every ``act`` / ``act_batch`` / ``reset`` call runs in a
  worker thread with that deadline (one long-lived daemon worker per calling thread). An agent
  that raises, returns a non-string or misses the deadline ends its episode(s) as *failed* with the
  reason recorded; the evaluation goes on. A thread cannot be killed: a hung call keeps running in
  the background and the agent is rebuilt from its factory for the next batch (an agent instance
  is reused as is). ``None``: no thread, no deadline (the trainer's in-process curve).
* **Length.** An episode also ends after :data:`MAX_EPISODE_STEPS` steps (a safety cap for envs
  without a time limit; every registered id has a shorter one).

:class:`EvaluationRequest` is plain, frozen data: with a spec string as agent it pickles, so an
executor can send cells to other processes or machines.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from agentbench_poad.agents import (
    agent_display_name,
    agent_factory,
    agent_version,
    check_agent_name,
    load_factory,
    reset_agent,
)

__all__ = [
    "MAX_EPISODE_STEPS",
    "RESET_SEED_RULE",
    "RESET_SEED_STRIDE",
    "DEADLINE_REASONS",
    "AgentTimeout",
    "CellResult",
    "EpisodeResult",
    "EvaluationRequest",
    "call_with_deadline",
    "deadline_cuts",
    "env_discount",
    "env_rules",
    "evaluate_cell",
    "reset_seed",
]

#: How a failed episode's reason begins when the per-call deadline cut it (not the agent's own
#: fault: a loaded machine can cause it), e.g. "agent timed out at step 3: ...".
DEADLINE_REASONS = ("agent timed out", "agent reset timed out")
#: Episode ``i`` of seed ``s`` resets with ``s * RESET_SEED_STRIDE + i``.
RESET_SEED_STRIDE = 100_000
#: The seed rule as records state it.
RESET_SEED_RULE = "reset_seed = seed * 100000 + episode_index"
#: Safety cap on the steps of one episode (envs without a time limit).
MAX_EPISODE_STEPS = 10_000


def reset_seed(seed: int, index: int) -> int:
    """Reset seed of episode ``index`` of evaluation seed ``seed``."""
    return int(seed) * RESET_SEED_STRIDE + int(index)


def env_rules(env_id: str, open_action: bool) -> tuple[str, str]:
    """``(metric, success rule text)`` of an env, given whether its actions are open text.

    Ids registered by this package answer from :func:`agentbench_poad.env_facts`; ids it does not
    know (other packages' envs, test toys) fall back to the kind of actions the env offered.
    """
    from agentbench_poad.registration import env_facts

    try:
        facts = env_facts(env_id)
    except KeyError:
        facts = None
    if facts is not None and facts.metric and facts.success_rule:
        return facts.metric, facts.success_rule
    if open_action:
        return "final_auc", "final code ran (reward >= 0)"
    return "return", "info['success'] if reported, else return > 0"


def env_discount(env_id: str) -> float | None:
    """The evaluation protocol's discount γ of an env id, or None when it has none.

    Read from :func:`agentbench_poad.env_facts` (``EnvFacts.discount``, set per family at
    registration); ids of other packages and unregistered ids have none.
    """
    from agentbench_poad.registration import env_facts

    try:
        return env_facts(env_id).discount
    except KeyError:
        return None


class AgentTimeout(Exception):
    """The agent did not answer within the per-action deadline."""


# -- the deadline --------------------------------------------------------------------------------
def deadline_cuts(record: Mapping[str, Any]) -> int:
    """Episodes of a record (its ``scores.per_seed[*].episodes``) that the per-call deadline
    ended (:data:`DEADLINE_REASONS`): how many of its scores depend on the machine's load rather
    than on the agent. The tables do not compare such a record
    (``leaderboard.report.comparison.budget_difference``)."""
    return sum(
        1
        for seed in (record.get("scores") or {}).get("per_seed") or ()
        for e in seed.get("episodes") or ()
        if e.get("failed") and str(e.get("reason") or "").startswith(DEADLINE_REASONS)
    )


class _Worker:
    """One daemon thread that runs calls handed to it; reused while it never hangs.

    Starting a thread per action costs more than a scripted agent's whole step, so calls go to a
    long-lived worker (one call at a time: the caller always waits for the answer). A worker
    that misses a deadline is abandoned (a thread cannot be killed) and the next call starts a
    fresh one.
    """

    def __init__(self) -> None:
        self.request = threading.Event()
        self.done = threading.Event()
        self.job: tuple[Callable[..., Any], tuple] | None = None
        self.box: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._loop, name="agentbench-act", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            self.request.wait()
            self.request.clear()
            fn, args = self.job  # type: ignore[misc]
            try:
                self.box = {"value": fn(*args)}
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                self.box = {"error": exc}
            self.done.set()

    def call(self, fn: Callable[..., Any], args: tuple, timeout: float) -> Any:
        self.done.clear()
        self.job = (fn, args)
        self.request.set()
        if not self.done.wait(timeout):
            raise AgentTimeout(f"no action within {timeout:g}s")
        box = self.box
        if "error" in box:
            raise box["error"]
        return box["value"]


_local = threading.local()


def call_with_deadline(fn: Callable[..., Any], args: tuple, timeout: float | None) -> Any:
    """``fn(*args)`` in a worker thread; :class:`AgentTimeout` past ``timeout`` seconds."""
    if timeout is None:
        return fn(*args)
    worker = getattr(_local, "worker", None)
    if worker is None:
        worker = _local.worker = _Worker()
    try:
        return worker.call(fn, args, timeout)
    except AgentTimeout:
        _local.worker = None  # this worker is stuck in the agent; leave it behind
        raise


# -- requests and results ------------------------------------------------------------------------
@dataclass(frozen=True)
class EvaluationRequest:
    """One cell to evaluate: an agent on one env id under one seed.

    Attributes:
        agent: a spec (``"package.module:Factory"``, ``"path/file.py:Factory"``), a class or
            factory (called with ``env=`` / ``seed=`` when its signature takes them, plus
            ``agent_kwargs``), or an agent instance (reused as is). Only a spec pickles reliably.
        env_id: a registered environment id.
        seed: the evaluation seed (see :func:`reset_seed`).
        episodes: episodes of the cell (indices ``0 .. episodes - 1``).
        indices: play only these episodes (default: all). An agent that plays in batches plays
            every batch holding one of them whole, so the episodes come out as in a full run.
        agent_kwargs: keyword arguments of the factory.
        env_kwargs: extra ``gym.make`` arguments.
        action_timeout: per-call deadline in seconds (None: no thread, no deadline).
        batch_size: episodes an ``act_batch`` agent plays in lockstep (None: all of the cell's).
        discount: the γ of the logged discounted return (None: the env's protocol discount,
            :func:`env_discount`); it never changes what is played or scored.
    """

    agent: Any
    env_id: str
    seed: int = 0
    episodes: int = 1
    indices: tuple[int, ...] | None = None
    agent_kwargs: Mapping[str, Any] = field(default_factory=dict)
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    action_timeout: float | None = 60.0
    batch_size: int | None = None
    discount: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise TypeError(f"seed must be an int, got {self.seed!r}")
        if not isinstance(self.episodes, int) or self.episodes < 1:
            raise ValueError(f"episodes must be an int >= 1, got {self.episodes!r}")
        if self.episodes > RESET_SEED_STRIDE:
            raise ValueError(
                f"episodes must be <= {RESET_SEED_STRIDE} (the reset seed stride), "
                f"got {self.episodes}; use more seeds instead"
            )
        if self.indices is not None:
            object.__setattr__(self, "indices", tuple(int(i) for i in self.indices))
            bad = [i for i in self.indices if not 0 <= i < self.episodes]
            if bad:
                raise ValueError(f"episode indices {bad} are outside 0..{self.episodes - 1}")
        if self.batch_size is not None and (
            not isinstance(self.batch_size, int) or self.batch_size < 1
        ):
            raise ValueError(f"batch_size must be an int >= 1 or None, got {self.batch_size!r}")
        if self.action_timeout is not None and not self.action_timeout > 0:
            raise ValueError(
                f"action_timeout must be > 0 seconds or None, got {self.action_timeout!r}"
            )
        if self.discount is not None and (
            isinstance(self.discount, bool)
            or not isinstance(self.discount, int | float)
            or not 0.0 <= self.discount <= 1.0
        ):
            raise ValueError(f"discount must be a number in [0, 1] or None, got {self.discount!r}")
        object.__setattr__(self, "agent_kwargs", MappingProxyType(dict(self.agent_kwargs)))
        object.__setattr__(self, "env_kwargs", MappingProxyType(dict(self.env_kwargs)))

    def __reduce__(self) -> Any:  # MappingProxyType does not pickle; plain dicts do
        return (
            _rebuild_request,
            (
                self.agent,
                self.env_id,
                self.seed,
                self.episodes,
                self.indices,
                dict(self.agent_kwargs),
                dict(self.env_kwargs),
                self.action_timeout,
                self.batch_size,
                self.discount,
            ),
        )


def _rebuild_request(*args: Any) -> EvaluationRequest:
    return EvaluationRequest(*args)


@dataclass(frozen=True)
class EpisodeResult:
    """One played episode (its record entry is :meth:`to_entry`).

    ``discounted_return`` is ``sum_t γ^t r_t`` over its decisions (see the module doc), or None
    when no discount applied (an env without a protocol discount, or an entry of a record made
    before episodes logged it).
    """

    index: int
    reset_seed: int
    episode_return: float
    length: int
    score: float
    success: bool
    failed: bool = False
    reason: str | None = None
    final_code: str | None = None
    open_action: bool = False
    discounted_return: float | None = None

    def to_entry(self) -> dict[str, Any]:
        """The episode as a run record stores it."""
        entry: dict[str, Any] = {
            "index": self.index,
            "reset_seed": self.reset_seed,
            "return": self.episode_return,
            "discounted_return": self.discounted_return,
            "length": self.length,
            "failed": self.failed,
            "reason": self.reason,
            "score": self.score,
            "success": self.success,
        }
        if self.open_action:
            entry["final_code"] = self.final_code
        return entry

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> EpisodeResult:
        """Inverse of :meth:`to_entry`; an entry without ``discounted_return`` gives None."""
        discounted = entry.get("discounted_return")
        return cls(
            index=int(entry["index"]),
            reset_seed=int(entry["reset_seed"]),
            episode_return=float(entry["return"]),
            length=int(entry["length"]),
            score=float(entry.get("score", entry["return"])),
            success=bool(entry["success"]),
            failed=bool(entry["failed"]),
            reason=entry.get("reason"),
            final_code=entry.get("final_code"),
            open_action="final_code" in entry,
            discounted_return=None if discounted is None else float(discounted),
        )


@dataclass(frozen=True)
class CellResult:
    """The episodes of one cell, in index order, and what the board needs to name the agent.

    ``discount`` is the γ of the episodes' discounted returns (None: none was logged).
    """

    env_id: str
    seed: int
    episodes: tuple[EpisodeResult, ...]
    open_action: bool
    metric: str
    success_rule: str
    agent_name: str
    agent_version: str
    batch_size: int
    wall_time_s: float = 0.0
    discount: float | None = None

    @property
    def returns(self) -> list[float]:
        return [e.episode_return for e in self.episodes]

    @property
    def mean_return(self) -> float:
        return _mean(self.returns)

    @property
    def score(self) -> float:
        """Mean score (the board's metric) over the episodes."""
        return _mean([e.score for e in self.episodes])

    @property
    def success_rate(self) -> float:
        return _mean([float(e.success) for e in self.episodes])

    @property
    def mean_discounted_return(self) -> float | None:
        """Mean discounted return over the episodes; None if any episode lacks one."""
        values = [e.discounted_return for e in self.episodes]
        if not values or any(v is None for v in values):
            return None
        return _mean(values)

    @property
    def failed_episodes(self) -> int:
        return sum(e.failed for e in self.episodes)

    def seed_entry(self) -> dict[str, Any]:
        """The cell as one ``scores.per_seed`` entry of a run record."""
        return {
            "seed": self.seed,
            "score": self.score,
            "mean_return": self.mean_return,
            "mean_discounted_return": self.mean_discounted_return,
            "success_rate": self.success_rate,
            "failed_episodes": self.failed_episodes,
            "episodes": [e.to_entry() for e in self.episodes],
        }


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


# -- the runner ----------------------------------------------------------------------------------
def _make_env(env_id: str, env_kwargs: Mapping[str, Any]) -> Any:
    import gymnasium as gym

    return gym.make(env_id, **dict(env_kwargs))


def evaluate_cell(
    request: EvaluationRequest,
    *,
    done: Mapping[int, EpisodeResult] | None = None,
    on_episode: Callable[[EpisodeResult], None] | None = None,
) -> CellResult:
    """Play the episodes of one cell under the rules of this module.

    Args:
        request: the cell.
        done: episodes already played (by index), e.g. from an interrupted run's partial file;
            a batch whose episodes are all done is not played again.
        on_episode: called with each newly played episode once its batch has finished.

    Returns:
        The cell's episodes (the requested ones and the rest of their batches, plus ``done``
        ones that were asked for), in index order.
    """
    started = time.perf_counter()
    done = dict(done or {})
    source = load_factory(request.agent) if isinstance(request.agent, str) else request.agent
    factory, rebuildable = agent_factory(source, dict(request.agent_kwargs))
    discount = request.discount if request.discount is not None else env_discount(request.env_id)
    envs = [_make_env(request.env_id, request.env_kwargs)]
    results: dict[int, EpisodeResult] = {}
    try:
        agent = factory(envs[0], request.seed)
        check_agent_name(agent_display_name(agent, source))  # before any episode is played
        batched = callable(getattr(agent, "act_batch", None))
        size = (request.batch_size or request.episodes) if batched else 1
        wanted = request.indices if request.indices is not None else range(request.episodes)
        for batch in sorted({i // size for i in wanted}):
            indices = list(range(batch * size, min((batch + 1) * size, request.episodes)))
            if all(i in done for i in indices):
                results.update((i, done[i]) for i in indices)
                continue
            while len(envs) < len(indices):
                envs.append(_make_env(request.env_id, request.env_kwargs))
            played, hung = _play_batch(
                envs[: len(indices)],
                agent,
                request.seed,
                indices,
                batched,
                request.action_timeout,
                discount,
            )
            for episode in played:
                results[episode.index] = episode
                if on_episode is not None:
                    on_episode(episode)
            if hung and rebuildable:
                agent = factory(envs[0], request.seed)  # the hung call still owns the old one
    finally:
        for env in envs:
            env.close()
    episodes = tuple(results[i] for i in sorted(results))
    open_action = any(e.open_action for e in episodes)
    metric, success_rule = env_rules(request.env_id, open_action)
    return CellResult(
        env_id=request.env_id,
        seed=request.seed,
        episodes=episodes,
        open_action=open_action,
        metric=metric,
        success_rule=success_rule,
        agent_name=agent_display_name(agent, source),
        agent_version=agent_version(agent),
        batch_size=size,
        wall_time_s=time.perf_counter() - started,
        discount=discount,
    )


@dataclass
class _Running:
    """The state of one episode while its batch plays."""

    index: int
    reset_seed: int
    observation: str
    info: dict[str, Any]
    open_action: bool
    discount: float | None = None
    total: float = 0.0
    discounted: float = 0.0
    length: int = 0
    last_reward: float | None = None
    last_action: str | None = None
    reported_success: bool | None = None
    failed: bool = False
    reason: str | None = None
    over: bool = False

    def fail(self, reason: str) -> None:
        self.failed, self.reason, self.over = True, reason, True

    def result(self) -> EpisodeResult:
        if self.open_action:
            ran = not self.failed and self.last_reward is not None and self.last_reward >= 0
            score, rule_success = (self.last_reward if ran else 0.0), ran
        else:
            score, rule_success = self.total, self.total > 0
        success = not self.failed and (
            self.reported_success if self.reported_success is not None else rule_success
        )
        return EpisodeResult(
            index=self.index,
            reset_seed=self.reset_seed,
            episode_return=self.total,
            length=self.length,
            score=float(score),
            success=bool(success),
            failed=self.failed,
            reason=self.reason,
            final_code=self.last_action if self.open_action else None,
            open_action=self.open_action,
            discounted_return=None if self.discount is None else self.discounted,
        )


def _play_batch(
    envs: Sequence[Any],
    agent: Any,
    seed: int,
    indices: Sequence[int],
    batched: bool,
    timeout: float | None,
    discount: float | None = None,
) -> tuple[list[EpisodeResult], bool]:
    """Play episodes ``indices`` in lockstep, one env each; never raises for agent faults.

    ``discount``: the γ of each episode's discounted return (None: not logged).

    Returns the episodes and whether a call hung (missed its deadline).
    """
    seeds = [reset_seed(seed, i) for i in indices]
    hung = False
    reset_fault = None
    try:
        call_with_deadline(reset_agent, (agent, seeds[0]), timeout)
    except AgentTimeout as exc:
        reset_fault, hung = f"{DEADLINE_REASONS[1]}: {exc}", True
    except Exception as exc:  # noqa: BLE001 - a user agent may raise anything
        reset_fault = f"agent reset raised {type(exc).__name__}: {exc}"
    running = []
    for env, index, episode_seed in zip(envs, indices, seeds):
        observation, info = env.reset(seed=episode_seed)
        state = _Running(
            index,
            episode_seed,
            observation,
            info,
            open_action=info.get("available_actions") is None,
            discount=discount,
        )
        if reset_fault is not None:
            state.fail(reset_fault)
        running.append(state)
    act = agent.act_batch if batched else (lambda obs, avail: [agent.act(obs[0], avail[0])])
    while True:
        live = [k for k, s in enumerate(running) if not s.over]
        if not live:
            break
        step = running[live[0]].length  # lockstep: every live episode is at this step
        observations = [running[k].observation for k in live]
        available = [running[k].info.get("available_actions") for k in live]
        try:
            actions = call_with_deadline(act, (observations, available), timeout)
            if len(actions) != len(live):
                raise ValueError(f"returned {len(actions)} actions for {len(live)} observations")
        except AgentTimeout as exc:
            hung = True
            for k in live:
                running[k].fail(f"{DEADLINE_REASONS[0]} at step {step}: {exc}")
            break
        except Exception as exc:  # noqa: BLE001 - recorded, the evaluation goes on
            for k in live:
                running[k].fail(f"agent raised {type(exc).__name__} at step {step}: {exc}")
            break
        for k, action in zip(live, actions):
            state = running[k]
            if not isinstance(action, str):
                state.fail(f"agent returned {type(action).__name__} at step {step}, expected str")
                continue
            try:
                observation, reward, terminated, truncated, info = envs[k].step(action)
            except Exception as exc:  # noqa: BLE001
                state.fail(f"environment raised {type(exc).__name__}: {exc}")
                continue
            state.total += float(reward)
            if state.discount is not None:  # decision t = state.length: γ^t r_t
                state.discounted += state.discount**state.length * float(reward)
            state.length += 1
            state.last_reward, state.last_action = float(reward), action
            state.observation, state.info = observation, info
            if info.get("success") is not None:
                state.reported_success = bool(info["success"])
            state.over = bool(terminated or truncated) or state.length >= MAX_EPISODE_STEPS
    return [s.result() for s in running], hung
