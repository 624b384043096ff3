"""The evaluation protocol: score any agent on any registered ids and produce run records.

Protocol (the paper's, see REFERENCE_SPEC §2.5 and §3.4):

* For every env id and every seed ``s`` in ``seeds``, ``episodes`` episodes are played; episode
  ``i`` resets the env (and the agent, when it has ``reset``) with ``reset_seed = s * 100000 + i``,
  so every episode is reproducible on its own.
* Restricted-action envs (Overcooked, VirtualHome): the score of an episode is its undiscounted
  return; success is ``info["success"]`` when the env reports it, else ``return > 0`` (the
  paper's VirtualHome rule). Table 1 of the paper uses 100 episodes with stochastic sampling.
* Open-action envs (DataSciCoding, ``available_actions is None``): the score is the ROC AUC of the
  final code, i.e. the last step's reward when that attempt ran (reward >= 0), else 0.0 -- an
  episode whose five attempts all failed scores 0. Success = the final code ran.
* A seed's score is the mean over its episodes; the record reports mean +- standard error over
  seeds.

Bad agents: every ``act`` call runs in a worker **thread** with a deadline (``action_timeout``;
one long-lived daemon worker per evaluating thread, so the deadline costs little). An agent that
raises, returns a non-string or misses the deadline ends the episode as *failed* with the reason
recorded; the evaluation goes on. A thread cannot be killed, so a hung call keeps running in the
background (its daemon worker is abandoned and a new one started) and the agent is rebuilt from
its factory for the next episode (an agent *instance* passed directly is reused as is). Use a
subprocess-backed agent if your agent can hang forever holding resources.

Resume: with ``out_dir``, finished episodes are appended to ``<record_id>.partial.jsonl`` next to
the output (``<name>.partial.jsonl`` when ``out_dir`` names a ``.json`` file); re-running the same evaluation skips them, and the partial file is removed once the
record is written.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import json
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym

from agentbench_poad.agents import reset_agent
from agentbench_poad.leaderboard.records import (
    make_record_id,
    mean_stderr,
    new_record,
    summarize_seeds,
    write_record,
)
from agentbench_poad.registration import env_facts
from agentbench_poad.version import __version__

#: Episode ``i`` of seed ``s`` resets with ``s * RESET_SEED_STRIDE + i``.
RESET_SEED_STRIDE = 100_000
RESET_SEED_RULE = "reset_seed = seed * 100000 + episode_index"


class AgentTimeout(Exception):
    """The agent did not answer within the per-action deadline."""


# -- agents ------------------------------------------------------------------------------------
def load_factory(spec: str) -> Callable[..., Any]:
    """Resolve ``"package.module:Factory"`` or ``"path/to/file.py:Factory"`` to the callable.

    ``"lm:MODEL"`` is the base-model agent of ``MODEL`` (a named model such as
    ``smollm2-135m``, a .gguf file, a model directory or a hub id; see
    :mod:`agentbench_poad.baselines.base_model`).

    Raises:
        ValueError: the spec is malformed, or the module / attribute does not exist.
    """
    if spec.startswith("lm:"):
        from agentbench_poad.baselines.base_model import BaseModelFactory

        return BaseModelFactory(spec[len("lm:"):])
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"agent spec {spec!r} must look like 'package.module:Factory' or "
                         "'path/to/my_agent.py:Factory'")
    if module_name.endswith(".py") or "/" in module_name:
        path = Path(module_name).expanduser().resolve()
        if not path.exists():
            raise ValueError(f"agent file {path} does not exist (from spec {spec!r})")
        mod_spec = importlib.util.spec_from_file_location(f"_agentbench_user_{path.stem}", path)
        if mod_spec is None or mod_spec.loader is None:
            raise ValueError(f"cannot import {path} (from spec {spec!r})")
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ValueError(f"cannot import {module_name!r} for agent spec {spec!r}: {exc}; "
                             "is the package installed / the name spelled right?") from exc
    try:
        target = module
        for part in attr.split("."):
            target = getattr(target, part)
    except AttributeError:
        raise ValueError(f"{module_name!r} has no attribute {attr!r} (agent spec {spec!r})") from None
    if not callable(target):
        raise ValueError(f"{spec!r} is not callable; name a class or a factory function")
    return target


def _call_factory(factory: Callable[..., Any], env: gym.Env, seed: int,
                  kwargs: dict[str, Any]) -> Any:
    """Call ``factory`` passing ``env`` / ``seed`` only if its signature takes them."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    call_kwargs = dict(kwargs)
    if "env" in params:
        call_kwargs.setdefault("env", env)
    if "seed" in params:
        call_kwargs.setdefault("seed", seed)
    return factory(**call_kwargs)


def agent_factory(agent: Any, kwargs: dict[str, Any] | None = None
                  ) -> tuple[Callable[[gym.Env, int], Any], bool]:
    """Normalise ``agent`` into ``factory(env, seed) -> agent``.

    ``agent`` is an agent (has ``act``), a class / factory callable, or a ``"module:Factory"``
    spec. Returns the factory and whether it builds a fresh agent per call.
    """
    kwargs = dict(kwargs or {})
    if isinstance(agent, str):
        agent = load_factory(agent)
    if hasattr(agent, "act") and not isinstance(agent, type):
        instance = agent
        return (lambda env, seed: instance), False
    if callable(agent):
        factory = agent
        return (lambda env, seed: _call_factory(factory, env, seed, kwargs)), True
    raise TypeError(f"{agent!r} is neither an agent (with act()) nor a factory of agents")


def agent_display_name(agent_obj: Any, factory: Any = None) -> str:
    name = getattr(agent_obj, "name", None)
    if isinstance(name, str) and name:
        return name
    if factory is not None and not isinstance(factory, type) and callable(factory):
        fname = getattr(factory, "__name__", "")
        if fname.startswith("make_"):
            fname = fname[len("make_"):]
            for tail in ("_agent", "_oracle"):
                if fname.endswith(tail) and len(fname) > len(tail):
                    fname = fname[: -len(tail)]
            return fname
    return type(agent_obj).__name__


def agent_version(agent_obj: Any) -> str:
    version = getattr(agent_obj, "version", None)
    if version is None:
        module = inspect.getmodule(type(agent_obj))
        version = getattr(module, "__version__", None)
    return str(version) if version is not None else f"agentbench-poad {__version__}"


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


# -- one episode -------------------------------------------------------------------------------
def run_episode(env: gym.Env, agent_obj: Any, reset_seed: int, index: int,
                action_timeout: float | None) -> dict[str, Any]:
    """Play one episode and return its entry for the record (never raises for agent faults)."""
    failed, reason = False, None
    try:
        call_with_deadline(lambda: reset_agent(agent_obj, seed=reset_seed), (), action_timeout)
    except AgentTimeout as exc:
        failed, reason = True, f"agent reset timed out: {exc}"
    except Exception as exc:  # noqa: BLE001 - a user agent may raise anything
        failed, reason = True, f"agent reset raised {type(exc).__name__}: {exc}"
    observation, info = env.reset(seed=reset_seed)
    open_action = info.get("available_actions") is None
    total, length, last_reward, last_action = 0.0, 0, None, None
    success_flag = None
    while not failed:
        available = info.get("available_actions")
        try:
            action = call_with_deadline(agent_obj.act, (observation, available), action_timeout)
        except AgentTimeout as exc:
            failed, reason = True, f"agent timed out at step {length}: {exc}"
            break
        except Exception as exc:  # noqa: BLE001 - recorded, the evaluation goes on
            failed, reason = True, f"agent raised {type(exc).__name__} at step {length}: {exc}"
            break
        if not isinstance(action, str):
            failed = True
            reason = (f"agent returned {type(action).__name__} at step {length}, "
                      "expected str")
            break
        try:
            observation, reward, terminated, truncated, info = env.step(action)
        except Exception as exc:  # noqa: BLE001
            failed, reason = True, f"environment raised {type(exc).__name__}: {exc}"
            break
        total += float(reward)
        length += 1
        last_reward, last_action = float(reward), action
        if "success" in info and info["success"] is not None:
            success_flag = bool(info["success"])
        if terminated or truncated:
            break
    entry: dict[str, Any] = {
        "index": index, "reset_seed": reset_seed, "return": total, "length": length,
        "failed": failed, "reason": reason,
    }
    if open_action:
        ran = (not failed) and last_reward is not None and last_reward >= 0
        entry["score"] = float(last_reward) if ran else 0.0
        entry["success"] = bool(ran)
        entry["final_code"] = last_action
    else:
        entry["score"] = total
        entry["success"] = (not failed) and (success_flag if success_flag is not None
                                             else total > 0)
    return entry


# -- checkpoint --------------------------------------------------------------------------------
def _fingerprint(data: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


class _Partial:
    """Append-only JSONL of finished episodes, keyed by a fingerprint of the evaluation."""

    def __init__(self, path: Path | None, fingerprint: str) -> None:
        self.path, self.fingerprint = path, fingerprint
        self.done: dict[tuple[int, int], dict[str, Any]] = {}
        if path is None:
            return
        if path.exists():
            lines = path.read_text(encoding="utf-8").splitlines()
            header = json.loads(lines[0]) if lines else {}
            if header.get("fingerprint") != fingerprint:
                warnings.warn(f"{path} belongs to a different evaluation; starting over",
                              stacklevel=3)
                path.unlink()
            else:
                for line in lines[1:]:
                    try:
                        item = json.loads(line)
                    except json.JSONDecodeError:
                        break  # a torn last line from an interrupted write
                    self.done[(item["seed"], item["episode"]["index"])] = item["episode"]
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"fingerprint": fingerprint}) + "\n", encoding="utf-8")

    def add(self, seed: int, episode: dict[str, Any]) -> None:
        self.done[(seed, episode["index"])] = episode
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({"seed": seed, "episode": episode}) + "\n")
                fh.flush()

    def remove(self) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)


# -- the protocol ------------------------------------------------------------------------------
def evaluate(
    agent: Any,
    env_ids: str | Sequence[str],
    seeds: Sequence[int] = (0, 1, 2),
    episodes: int = 100,
    *,
    agent_kwargs: dict[str, Any] | None = None,
    agent_name: str | None = None,
    action_timeout: float | None = 60.0,
    out_dir: Path | str | None = None,
    env_kwargs: dict[str, Any] | None = None,
    base_model: str | None = None,
    adapter: str | None = None,
    greedy: bool | None = None,
    learning_curve: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    command: str | None = None,
    record_suffix: str | None = None,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Score ``agent`` on ``env_ids`` under the protocol; one validated run record per env id.

    Args:
        agent: an agent (``act(observation, available_actions) -> str``), a class or factory
            (called with ``env=``/``seed=`` when its signature takes them, plus
            ``agent_kwargs``), or a ``"module:Factory"`` spec.
        env_ids: registered ids.
        seeds: evaluation seeds; each gives one per-seed score.
        episodes: episodes per seed (the paper's Table 1 uses 100).
        agent_kwargs: keyword arguments for the factory (recorded in the config).
        agent_name: the board's name for the agent (default: its ``name`` attribute or class).
        action_timeout: per-``act`` deadline in seconds (``None``: no thread, no deadline).
        out_dir: write each record there as ``<record_id>.json`` (or, for one env id, to this
            ``.json`` file) and checkpoint finished episodes
            to ``<record_id>.partial.jsonl`` so that an interrupted run resumes.
        env_kwargs: passed to ``gym.make``.
        base_model, adapter, greedy: provenance of LLM agents.
        learning_curve, training: for records of trained agents.
        config: extra configuration stored in the record.
        command: the command line that made the record.
        record_suffix: appended to the record id (e.g. ``"trainedon-FoodPreparation"``).
        progress: show a tqdm progress bar.

    Returns:
        One record dict per env id, validated against the schema.
    """
    from tqdm.auto import tqdm

    if isinstance(env_ids, str):
        env_ids = [env_ids]
    if out_dir is not None and Path(out_dir).suffix == ".json" and len(env_ids) > 1:
        raise ValueError(f"out_dir {out_dir} names one file but {len(env_ids)} env ids were "
                         "given; pass a folder")
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("evaluate() needs at least one seed")
    if episodes < 1:
        raise ValueError("episodes must be >= 1")
    agent_kwargs = dict(agent_kwargs or {})
    env_kwargs = dict(env_kwargs or {})
    spec = agent if isinstance(agent, str) else None
    factory_obj = load_factory(agent) if isinstance(agent, str) else agent
    factory, rebuildable = agent_factory(factory_obj, agent_kwargs)
    records = []
    bar = tqdm(total=len(env_ids) * len(seeds) * episodes, disable=not progress,
               desc="evaluate", unit="ep")
    try:
        for env_id in env_ids:
            records.append(_evaluate_env(
                env_id, factory, factory_obj, rebuildable, seeds, episodes,
                spec=spec, agent_kwargs=agent_kwargs, agent_name=agent_name,
                action_timeout=action_timeout, out_dir=out_dir, env_kwargs=env_kwargs,
                base_model=base_model, adapter=adapter, greedy=greedy,
                learning_curve=learning_curve, training=training, config=config,
                command=command, record_suffix=record_suffix, bar=bar,
            ))
    finally:
        bar.close()
    return records


def output_path(out: Path | str | None, record_id: str) -> Path | None:
    """Where a record goes: ``out`` itself if it names a ``.json`` file, else ``out/<id>.json``."""
    if out is None:
        return None
    out = Path(out)
    return out if out.suffix == ".json" else out / f"{record_id}.json"


def _evaluate_env(env_id, factory, factory_obj, rebuildable, seeds, episodes, *, spec,
                  agent_kwargs, agent_name, action_timeout, out_dir, env_kwargs, base_model,
                  adapter, greedy, learning_curve, training, config, command, record_suffix,
                  bar) -> dict[str, Any]:
    start = time.perf_counter()
    env = gym.make(env_id, **env_kwargs)
    try:
        agent_obj = factory(env, seeds[0])
        name = agent_name or agent_display_name(agent_obj, factory_obj)
        # LLM agents may name their own base model and decoding (the lm:MODEL agent does).
        own_base, own_greedy = getattr(agent_obj, "base_model", None), getattr(agent_obj, "greedy", None)
        base_model = base_model or (own_base if isinstance(own_base, str) else None)
        greedy = greedy if greedy is not None else (own_greedy if isinstance(own_greedy, bool) else None)
        record_id = make_record_id(env_id, name, base_model, record_suffix)
        fingerprint = _fingerprint({
            "env": env_id, "env_kwargs": env_kwargs, "agent": spec or name,
            "agent_kwargs": agent_kwargs, "seeds": seeds, "episodes": episodes,
            "timeout": action_timeout,
        })
        record_path = output_path(out_dir, record_id)
        partial = _Partial(record_path.with_suffix(".partial.jsonl") if record_path else None,
                           fingerprint)
        per_seed, open_action = [], False
        for seed in seeds:
            if seed != seeds[0] and rebuildable:
                agent_obj = factory(env, seed)
            entries = []
            for index in range(episodes):
                if (seed, index) in partial.done:
                    entries.append(partial.done[(seed, index)])
                    bar.update(1)
                    continue
                entry = run_episode(env, agent_obj, seed * RESET_SEED_STRIDE + index, index,
                                    action_timeout)
                open_action = open_action or "final_code" in entry
                if entry["failed"] and rebuildable and "timed out" in (entry["reason"] or ""):
                    agent_obj = factory(env, seed)  # the hung call still owns the old one
                partial.add(seed, entry)
                entries.append(entry)
                bar.update(1)
            open_action = open_action or any("final_code" in e for e in entries)
            mean_return, _ = mean_stderr([e["return"] for e in entries])
            score, _ = mean_stderr([e["score"] for e in entries])
            per_seed.append({
                "seed": seed, "score": score, "mean_return": mean_return,
                "success_rate": sum(e["success"] for e in entries) / len(entries),
                "failed_episodes": sum(e["failed"] for e in entries),
                "episodes": entries,
            })
    finally:
        env.close()
    metric = "final_auc" if open_action else "return"
    summary = summarize_seeds(per_seed)
    facts = env_facts(env_id)
    record = new_record(
        record_id=record_id,
        env={"id": env_id, "version": facts.version, "family": facts.family,
             "open_action": open_action},
        agent={"name": name, "version": agent_version(agent_obj), "spec": spec,
               "kwargs": _jsonable(agent_kwargs)},
        model={"base": base_model, "adapter": adapter},
        protocol={
            "seeds": seeds, "episodes_per_seed": episodes, "metric": metric,
            "success": ("final code ran (reward >= 0)" if open_action
                        else "info['success'] if reported, else return > 0"),
            "action_timeout_s": action_timeout, "greedy": greedy,
            "reset_seed_rule": RESET_SEED_RULE,
        },
        scores={"metric": metric, **summary, "per_seed": per_seed},
        learning_curve=learning_curve,
        training=training,
        wall_time_s=time.perf_counter() - start,
        config={
            "env_id": env_id, "env_kwargs": _jsonable(env_kwargs), "agent_spec": spec,
            "agent_kwargs": _jsonable(agent_kwargs), "seeds": seeds, "episodes": episodes,
            "action_timeout_s": action_timeout, **_jsonable(config or {}),
        },
        command=command or "agentbench_poad.leaderboard.evaluate(...)",
    )
    if record_path is not None:
        write_record(record_path, record)
        partial.remove()
    else:
        from agentbench_poad.leaderboard.schema import validate_record

        validate_record(record, source=f"record {record_id}")
    return record


def _jsonable(value: Any) -> Any:
    """A JSON-safe copy (unknown objects become their repr)."""
    return json.loads(json.dumps(value, default=repr))
