"""The evaluation protocol: score any agent on registered ids and produce run records.

Protocol (the paper's, see docs/reference.md#evaluation-protocol and #datascicoding-grading). Every (env id, seed) is one *cell*
played by the core runner, :func:`agentbench_poad.evaluation.evaluate_cell`, whose docstring
states the rules the board shares with the trainer's learning curves:

* episode ``i`` of seed ``s`` resets the env (and the agent, when it has ``reset``) with
  ``reset_seed = s * 100000 + i``, so every episode is reproducible on its own (agents with
  ``act_batch`` play their episodes in batches, reset per batch: see the runner);
* restricted-action envs (Overcooked, VirtualHome): the score of an episode is its undiscounted
  return; open-action envs (DataSciCoding, ``available_actions is None``): the ROC AUC of the final
  code, i.e. the last step's reward when that attempt ran (reward >= 0), else 0.0;
* success is ``info["success"]`` when the env reports it (Overcooked: the right dish delivered;
  VirtualHome: the task completed), else ``return > 0`` (restricted; the paper's VirtualHome
  rule) or "the final code ran" (open);
* every episode also logs its discounted return ``sum_t γ^t r_t`` over decisions, with ``γ`` the
  env's protocol discount (``env_facts(id).discount``: 0.95 for VirtualHome, the discount of the
  paper's Table 1); the record states it as ``protocol.discount`` (null: the env has none) and
  each seed's ``mean_discounted_return``. It is reported, never scored;
* agents that raise, return a non-string or miss the per-action deadline (``action_timeout``)
  fail their episode with the reason recorded; the evaluation goes on.

A seed's score is the mean over its episodes; the record reports mean +- standard error over
seeds. Table 1 of the paper uses 100 episodes with stochastic sampling.

What to score is an :class:`EvaluationPlan` (typed, validated); where the agent came from
(names, base model, training curve, command) is a :class:`Provenance`, stored in the record and
never used to score. :func:`evaluate` is the short form that builds the plan.

Resume: with ``out_dir``, finished episodes are appended to ``<record_id>.partial.jsonl`` next to
the output (``<name>.partial.jsonl`` when ``out_dir`` names a ``.json`` file); re-running the same
evaluation skips them, and the partial file is removed once the record is written.
"""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import gymnasium as gym

from agentbench_poad.agents import agent_display_name, agent_factory, load_factory
from agentbench_poad.evaluation import (
    RESET_SEED_RULE,
    CellResult,
    EpisodeResult,
    EvaluationRequest,
    evaluate_cell,
)
from agentbench_poad.leaderboard.agent_source import agent_source
from agentbench_poad.leaderboard.records import (
    RecordWarning,
    hardware_info,
    make_record_id,
    now_iso,
    record_id_suffix,
    summarize_seeds,
    write_record,
)
from agentbench_poad.leaderboard.schema import RECORD_KIND, SCHEMA_VERSION
from agentbench_poad.registration import env_facts
from agentbench_poad.software import software_info

__all__ = [
    "EvaluationPlan",
    "Provenance",
    "build_record",
    "evaluate",
    "evaluate_plan",
    "output_path",
]


# -- what to score, and where it came from -------------------------------------------------------
@dataclass(frozen=True)
class EvaluationPlan:
    """One agent scored on env ids x seeds x episodes under the protocol.

    Attributes:
        agent: an agent (``act(observation, available_actions) -> str``), a class or factory
            (called with ``env=``/``seed=`` when its signature takes them, plus
            ``agent_kwargs``), or a ``"module:Factory"`` spec (the only form ``verify`` can
            rebuild).
        env_ids: registered ids (one record each).
        seeds: evaluation seeds; each gives one per-seed score.
        episodes: episodes per seed (the paper's Table 1 uses 100).
        agent_kwargs: keyword arguments of the factory (recorded in the config).
        env_kwargs: ``gym.make`` arguments.
        action_timeout: per-call deadline in seconds (None: no thread, no deadline).
        batch_size: episodes an ``act_batch`` agent plays in lockstep (None: all of a seed's).
    """

    agent: Any
    env_ids: tuple[str, ...]
    seeds: tuple[int, ...] = (0, 1, 2)
    episodes: int = 100
    agent_kwargs: Mapping[str, Any] = field(default_factory=dict)
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    action_timeout: float | None = 60.0
    batch_size: int | None = None

    def __post_init__(self) -> None:
        env_ids = (self.env_ids,) if isinstance(self.env_ids, str) else tuple(self.env_ids)
        if not env_ids:
            raise ValueError("an evaluation plan needs at least one env id")
        object.__setattr__(self, "env_ids", env_ids)
        object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        if not self.seeds:
            raise ValueError("evaluate() needs at least one seed")
        if not isinstance(self.episodes, int) or self.episodes < 1:
            raise ValueError(f"episodes must be an int >= 1, got {self.episodes!r}")
        object.__setattr__(self, "agent_kwargs", MappingProxyType(dict(self.agent_kwargs)))
        object.__setattr__(self, "env_kwargs", MappingProxyType(dict(self.env_kwargs)))
        for env_id in self.env_ids:  # the runner's checks, before any cell runs
            self.cell(env_id, self.seeds[0])

    @property
    def spec(self) -> str | None:
        """The agent's spec, when it was given as one."""
        return self.agent if isinstance(self.agent, str) else None

    def cell(self, env_id: str, seed: int) -> EvaluationRequest:
        """The runner's request for one (env id, seed) cell of this plan."""
        return EvaluationRequest(
            agent=self.agent,
            env_id=env_id,
            seed=seed,
            episodes=self.episodes,
            agent_kwargs=self.agent_kwargs,
            env_kwargs=self.env_kwargs,
            action_timeout=self.action_timeout,
            batch_size=self.batch_size,
        )


@dataclass(frozen=True)
class Provenance:
    """Where the agent came from: stored in the record, never used to score.

    Attributes:
        agent_name: the board's name for the agent (default: its ``name`` attribute or class).
        base_model: base model of an LLM agent.
        adapter: adapter of an LLM agent.
        greedy: whether the agent acts greedily (LLM agents).
        learning_curve: the training curve, for records of trained agents.
        training: training facts (runs, steps, best code), for records of trained agents.
        config: extra configuration stored in the record.
        command: the command line that made the record.
        record_suffix: appended to the record id (e.g. ``"trainedon-FoodPreparation"``).
    """

    agent_name: str | None = None
    base_model: str | None = None
    adapter: str | None = None
    greedy: bool | None = None
    learning_curve: dict[str, Any] | None = None
    training: dict[str, Any] | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    command: str | None = None
    record_suffix: str | None = None


def _declared(plan: EvaluationPlan, provenance: Provenance) -> Provenance:
    """``provenance`` with the base model and decoding an agent factory declares filled in.

    A factory with ``declared_provenance(agent_kwargs) -> {"base_model", "greedy"}`` (the
    ``lm:MODEL`` agent's) names them itself; values given in ``provenance`` win.
    """
    source = load_factory(plan.agent) if isinstance(plan.agent, str) else plan.agent
    declare = getattr(source, "declared_provenance", None)
    if not callable(declare):
        return provenance
    declared = declare(dict(plan.agent_kwargs))
    return replace(
        provenance,
        base_model=provenance.base_model or declared.get("base_model"),
        greedy=provenance.greedy if provenance.greedy is not None else declared.get("greedy"),
    )


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
                warnings.warn(
                    f"{path} belongs to a different evaluation; starting over", stacklevel=3
                )
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
    env_kwargs: dict[str, Any] | None = None,
    action_timeout: float | None = 60.0,
    batch_size: int | None = None,
    provenance: Provenance | None = None,
    out_dir: Path | str | None = None,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Score ``agent`` on ``env_ids`` under the protocol; one validated run record per env id.

    The arguments up to ``batch_size`` are those of :class:`EvaluationPlan`; this is
    ``evaluate_plan(EvaluationPlan(...), provenance, out_dir=..., progress=...)``.

    Returns:
        One record dict per env id, validated against the schema.
    """
    plan = EvaluationPlan(
        agent=agent,
        env_ids=(env_ids,) if isinstance(env_ids, str) else tuple(env_ids),
        seeds=tuple(seeds),
        episodes=episodes,
        agent_kwargs=agent_kwargs or {},
        env_kwargs=env_kwargs or {},
        action_timeout=action_timeout,
        batch_size=batch_size,
    )
    return evaluate_plan(plan, provenance, out_dir=out_dir, progress=progress)


def evaluate_plan(
    plan: EvaluationPlan,
    provenance: Provenance | None = None,
    *,
    out_dir: Path | str | None = None,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Score a plan; one validated run record per env id.

    Args:
        plan: what to score.
        provenance: where the agent came from (default: nothing known).
        out_dir: write each record there as ``<record_id>.json`` (or, for one env id, to this
            ``.json`` file) and checkpoint finished episodes to ``<record_id>.partial.jsonl`` so
            that an interrupted run resumes.
        progress: show a tqdm progress bar.

    Returns:
        One record dict per env id, validated against the schema.
    """
    from tqdm.auto import tqdm

    provenance = _declared(plan, provenance or Provenance())
    if out_dir is not None and Path(out_dir).suffix == ".json" and len(plan.env_ids) > 1:
        raise ValueError(
            f"out_dir {out_dir} names one file but {len(plan.env_ids)} env ids were "
            "given; pass a folder"
        )
    if isinstance(plan.agent, str):
        load_factory(plan.agent)  # a bad spec fails before any env is made
    records = []
    bar = tqdm(
        total=len(plan.env_ids) * len(plan.seeds) * plan.episodes,
        disable=not progress,
        desc="evaluate",
        unit="ep",
    )
    try:
        for env_id in plan.env_ids:
            records.append(_record_env(plan, env_id, provenance, out_dir, bar))
    finally:
        bar.close()
    return records


def _probe_name(plan: EvaluationPlan, env_id: str) -> str:
    """The agent's own board name, from one agent built only to ask it."""
    source = load_factory(plan.agent) if isinstance(plan.agent, str) else plan.agent
    factory, _ = agent_factory(source, dict(plan.agent_kwargs))
    env = gym.make(env_id, **dict(plan.env_kwargs))
    try:
        return agent_display_name(factory(env, plan.seeds[0]), source)
    finally:
        env.close()


def _record_env(
    plan: EvaluationPlan, env_id: str, provenance: Provenance, out_dir: Path | str | None, bar: Any
) -> dict[str, Any]:
    """Play every seed's cell of one env id (resuming from the partial file) and write the record."""
    start = time.perf_counter()
    name = provenance.agent_name
    if name is None and out_dir is not None and Path(out_dir).suffix != ".json":
        name = _probe_name(plan, env_id)  # the partial file is named after the record id
    # For a ``.json`` out_dir the path does not depend on the record id (nor on the name).
    record_path = output_path(
        out_dir,
        make_record_id(
            env_id,
            name or "agent",
            provenance.base_model,
            record_id_suffix(name or "agent", plan.env_kwargs, provenance.record_suffix),
        ),
    )
    fingerprint = _fingerprint(
        {
            "env": env_id,
            "env_kwargs": dict(plan.env_kwargs),
            "agent": plan.spec or name or _qualname(plan.agent),
            "agent_kwargs": dict(plan.agent_kwargs),
            "seeds": list(plan.seeds),
            "episodes": plan.episodes,
            "timeout": plan.action_timeout,
            "batch_size": plan.batch_size,
        }
    )
    partial = _Partial(
        record_path.with_suffix(".partial.jsonl") if record_path else None, fingerprint
    )
    cells: list[CellResult] = []
    for seed in plan.seeds:
        done = {
            index: EpisodeResult.from_entry(entry)
            for (s, index), entry in partial.done.items()
            if s == seed
        }
        bar.update(len(done))

        def finished(
            episode: EpisodeResult, seed: int = seed, counted: frozenset[int] = frozenset(done)
        ) -> None:
            partial.add(seed, episode.to_entry())
            if episode.index not in counted:  # a replayed batch may hold counted episodes
                bar.update(1)

        cells.append(evaluate_cell(plan.cell(env_id, seed), done=done, on_episode=finished))
    record = build_record(
        plan, env_id, cells, provenance, wall_time_s=time.perf_counter() - start, agent_name=name
    )
    if record_path is not None:
        write_record(record_path, record)
        partial.remove()
    else:
        from agentbench_poad.leaderboard.schema import validate_record

        validate_record(record, source=f"record {record['record_id']}")
    return record


def new_record(**fields: Any) -> dict[str, Any]:
    """A record dict with the fixed header fields filled in; the caller supplies the rest.

    With a ``model`` field, the content hashes of its weights and adapters are attached
    (:func:`~agentbench_poad.leaderboard.provenance.attach_hashes`).
    """
    record: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": RECORD_KIND,
        "created_at": now_iso(),
        "hardware": hardware_info(),
        "software": software_info(),
    }
    record.update(fields)
    if isinstance(record.get("model"), dict):
        _attach_hashes(record)
    return record


def _attach_hashes(record: dict[str, Any]) -> None:
    """Content hashes of the base model's weights and the adapters (provenance never breaks a
    run: a model that cannot be hashed here is named in a warning, and ``verify`` will refuse the
    record until ``leaderboard backfill`` adds them)."""
    from agentbench_poad.leaderboard.provenance import attach_hashes

    try:
        attach_hashes(record, download=False)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        warnings.warn(
            f"{record.get('record_id')}: content hashes not recorded ({exc})",
            RecordWarning,
            stacklevel=3,
        )


def build_record(
    plan: EvaluationPlan,
    env_id: str,
    cells: Sequence[CellResult],
    provenance: Provenance | None = None,
    *,
    wall_time_s: float = 0.0,
    agent_name: str | None = None,
) -> dict[str, Any]:
    """The run record of one env id from its cells (one per seed of the plan, in seed order).

    Executors that play the cells elsewhere (:meth:`EvaluationPlan.cell` gives each request)
    assemble the record with this; :func:`evaluate_plan` does both in-process.

    Args:
        plan: the plan the cells belong to.
        env_id: the env id of the cells.
        cells: the runner's results, one per seed of ``plan.seeds``.
        provenance: where the agent came from.
        wall_time_s: the evaluation's wall time.
        agent_name: the board's name (default: the provenance's, else the agent's own).
    """
    provenance = _declared(plan, provenance or Provenance())
    if [cell.seed for cell in cells] != list(plan.seeds) or any(c.env_id != env_id for c in cells):
        raise ValueError(
            f"the cells ({[(c.env_id, c.seed) for c in cells]}) are not the plan's "
            f"seeds {list(plan.seeds)} on {env_id}"
        )
    # A cell read back from before episodes logged a discounted return states none (its seed's
    # mean_discounted_return is then null); the others must agree on one γ.
    discounts = sorted({cell.discount for cell in cells if cell.discount is not None})
    if len(discounts) > 1:
        raise ValueError(
            f"the cells of {env_id} log discounted returns with different discounts "
            f"({discounts}); one record states one discount"
        )
    name = agent_name or provenance.agent_name or cells[0].agent_name
    first = next((cell for cell in cells if cell.open_action), cells[0])
    metric, spec = first.metric, plan.spec
    per_seed = [cell.seed_entry() for cell in cells]
    facts = env_facts(env_id)
    return new_record(
        record_id=make_record_id(
            env_id,
            name,
            provenance.base_model,
            record_id_suffix(name, plan.env_kwargs, provenance.record_suffix),
        ),
        env={
            "id": env_id,
            "version": facts.version,
            "family": facts.family,
            "open_action": first.open_action,
        },
        agent={
            "name": name,
            "version": first.agent_version,
            "spec": spec,
            "kwargs": _jsonable(dict(plan.agent_kwargs)),
            **({"source": source} if (source := agent_source(spec)) else {}),
        },
        model={"base": provenance.base_model, "adapter": provenance.adapter},
        protocol={
            "seeds": list(plan.seeds),
            "episodes_per_seed": plan.episodes,
            "metric": metric,
            "success": first.success_rule,
            "action_timeout_s": plan.action_timeout,
            "greedy": provenance.greedy,
            "reset_seed_rule": RESET_SEED_RULE,
            "batch_size": first.batch_size,
            "discount": discounts[0] if discounts else None,
        },
        scores={"metric": metric, **summarize_seeds(per_seed), "per_seed": per_seed},
        learning_curve=provenance.learning_curve,
        training=provenance.training,
        wall_time_s=wall_time_s,
        config={
            "env_id": env_id,
            "env_kwargs": _jsonable(dict(plan.env_kwargs)),
            "agent_spec": spec,
            "agent_kwargs": _jsonable(dict(plan.agent_kwargs)),
            "seeds": list(plan.seeds),
            "episodes": plan.episodes,
            "action_timeout_s": plan.action_timeout,
            **_jsonable(dict(provenance.config)),
        },
        command=provenance.command or "agentbench_poad.leaderboard.evaluate(...)",
    )


def _qualname(agent: Any) -> str:
    target = agent if callable(agent) and not hasattr(agent, "act") else type(agent)
    return f"{getattr(target, '__module__', '')}:{getattr(target, '__qualname__', repr(target))}"


def output_path(out: Path | str | None, record_id: str) -> Path | None:
    """Where a record goes: ``out`` itself if it names a ``.json`` file, else ``out/<id>.json``."""
    if out is None:
        return None
    out = Path(out)
    return out if out.suffix == ".json" else out / f"{record_id}.json"


def _jsonable(value: Any) -> Any:
    """A JSON-safe copy (unknown objects become their repr)."""
    return json.loads(json.dumps(value, default=repr))
