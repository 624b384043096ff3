"""What a record may make this package load, and the refusal of everything else (issue 64).

A record is data someone else wrote. Reading it (``leaderboard list``, ``report``, ``show``),
adding it (``add``, ``add --run``) or backfilling it must run no code it names; only ``verify``
runs code, and only the agent file the record hashes. Everything a record could make the tools
load passes through this module:

* :func:`check_record_names` -- the checks that need no file and import nothing, run on every
  read of a record (:func:`~agentbench_poad.leaderboard.records.read_record`), so ``list`` and
  ``report`` skip a refused record with a warning. They live in
  :mod:`~agentbench_poad.leaderboard.record_names` (below the records module, which runs them)
  and are re-exported here:

  - **env ids** (``env.id``, ``config.env_id``, ``training.env_id``) are plain registered ids:
    gymnasium's ``module:Env-v0`` form, which imports ``module``, is refused;
  - **env kwargs** (``config.env_kwargs``) are execution kwargs (:data:`EXECUTION_ENV_KWARGS`,
    the DataSciCoding sandbox: how code runs, not what is scored) or kwargs that are part of the
    row's identity (:data:`IDENTITY_ENV_KWARGS`: ``prompt_style``, named in every record's id and
    label; ``max_episode_steps``, named in an anchor's id and label, and a row is scored against
    the anchors of its own cap). Any other kwarg (a dataset, a cache folder, a split) could swap
    the task under an honest-looking row and is refused;
  - **the agent spec** is ``lm:MODEL``, the trained-run factory, a factory of
    ``agentbench_poad.baselines.<module>`` or user code (a file, or a module outside this
    package, whose source the record hashes): other package code named as an "agent" (any
    function, called with the record's kwargs) is refused.

* :func:`builtin_algorithm` -- the config class of a run's algorithm, for the built-in algorithms
  only (looked up in the package's own table, never by importing the spec a run names).

* :func:`record_loads` -- the one resolver for a replay (``verify``, ``backfill
  --replay-discounted``): the names above with every env id registered here, the agent
  (:func:`~agentbench_poad.leaderboard.agent_source.replay_spec`: one spec, its source hashed and
  inside the record's checkout), the runs (confined to the runs root), an ``adapter`` agent kwarg
  (confined to the record's checkout or the runs root). :meth:`RecordLoads.check_contents` then
  hashes what will be loaded: the base weights and run adapters
  (:func:`~agentbench_poad.leaderboard.provenance.check_hashes`), the model the agent actually
  loads (an ``lm:`` spec's model, each run's ``config.json`` model) against ``model.base``'s
  digest, the ``adapter`` folder's files against ``model.adapter_files``, and a DataSciCoding
  dataset against the digest the record states (``env.dataset``). The adapter folder's
  confinement (:func:`~agentbench_poad.leaderboard.provenance.adapter_folder`) and the dataset a
  record scores on (:func:`~agentbench_poad.leaderboard.provenance.record_dataset`) come from
  :mod:`~agentbench_poad.leaderboard.provenance`, which hashes them when a record is made.

Every refusal is a :class:`NotLoadable` (a :class:`~agentbench_poad.leaderboard.schema.RecordError`)
naming the field, why and the fix.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentbench_poad.leaderboard.provenance import (  # noqa: F401 - dataset_entry re-exported
    adapter_folder,
    dataset_entry,
    record_dataset,
)
from agentbench_poad.leaderboard.record_names import (  # noqa: F401 - re-exported
    ADAPTER_KWARG,
    EXECUTION_ENV_KWARGS,
    IDENTITY_ENV_KWARGS,
    RUN_AGENT_SPEC,
    NotLoadable,
    check_agent_spec,
    check_env_id,
    check_env_kwargs,
    check_record_names,
    is_package_agent,
)

__all__ = [
    "EXECUTION_ENV_KWARGS",
    "IDENTITY_ENV_KWARGS",
    "NotLoadable",
    "RecordLoads",
    "builtin_algorithm",
    "check_env_id",
    "check_record_names",
    "record_loads",
]


# -- algorithms: the package's table only -----------------------------------------------------
def builtin_algorithm(spec: Any) -> type | None:
    """The built-in algorithm class whose spec is ``spec`` (``ALGORITHMS`` of
    :mod:`agentbench_poad.baselines`), else None: a user's algorithm named by a run or record is
    never imported."""
    from agentbench_poad.baselines import ALGORITHMS, get_algorithm

    if not isinstance(spec, str):
        return None
    for name, builtin in ALGORITHMS.items():
        if spec == builtin:
            return get_algorithm(name)
    return None


# -- a replay: the one resolver -----------------------------------------------------------------
@dataclass(frozen=True)
class RecordLoads:
    """What a replay of a record loads, every path resolved and confined.

    Attributes:
        record_id: the record's id.
        env_id: a registered env id.
        env_kwargs: the record's env kwargs (execution and identity kwargs only).
        agent_spec: the spec to import (a user file's checked absolute path).
        agent_kwargs: the factory's kwargs, with ``runs`` and ``adapter`` replaced by the
            resolved folders that are hashed.
        runs: ``{seed: run folder}`` of a trained agent (empty for other agents).
        adapter: the resolved ``adapter`` agent kwarg's folder, or None.
        models: the models the agent loads (as the loader is given them): an ``lm:`` spec's
            model, each run's ``config.json`` model.
        user_code: whether the agent is user code (a hashed file) rather than the package's.
    """

    record_id: str
    env_id: str
    env_kwargs: dict[str, Any]
    agent_spec: str
    agent_kwargs: dict[str, Any]
    runs: dict[str, Path] = field(default_factory=dict)
    adapter: Path | None = None
    models: tuple[str, ...] = ()
    user_code: bool = False

    def check_contents(
        self,
        record: Mapping[str, Any],
        *,
        runs_root: str | os.PathLike | None = None,
        download: bool | None = None,
    ) -> None:
        """Hash what the replay will load and compare with what the record states.

        Raises:
            HashMismatch: a base weight, run adapter or ``adapter`` file differs, is missing or
                unhashed; the model the agent loads is not the record's ``model.base``.
            NotLoadable: a DataSciCoding dataset differs from the one the record was scored on.
        """
        from agentbench_poad.leaderboard.provenance import (
            check_adapter_files,
            check_hashes,
            check_loaded_models,
        )

        check_hashes(record, root=runs_root, download=download)
        check_loaded_models(record, self.models, download=download)
        check_adapter_files(record, self.adapter)
        check_dataset(record, download=download)


def record_loads(
    record: Mapping[str, Any],
    *,
    runs_root: str | os.PathLike | None = None,
    agent_root: str | os.PathLike | None = None,
    trust_unhashed: bool = False,
    user_code: bool = True,
) -> RecordLoads:
    """Resolve everything a replay of ``record`` loads, refusing what it may not (module doc).

    Args:
        record: a validated record (``_path`` locates its checkout).
        runs_root: the runs root (default: ``--runs`` / ``$AGENTBENCH_POAD_RUNS`` / the
            checkout's ``runs/``).
        agent_root: the folder user code and an ``adapter`` must lie in (default: the record's
            checkout, :func:`~agentbench_poad.leaderboard.agent_source.agent_root`).
        trust_unhashed: accept a user agent whose record states no source hash.
        user_code: whether the caller may run user code at all (``verify``: yes; ``backfill``:
            no, it runs the package's agents only).

    Raises:
        NotLoadable: a name is refused (:func:`check_record_names`), an env id is not
            registered, the agent's kwargs differ between ``agent.kwargs`` and
            ``config.agent_kwargs``, or user code where ``user_code`` is false;
            :class:`~agentbench_poad.leaderboard.agent_source.AgentSourceMismatch`,
            :class:`~agentbench_poad.leaderboard.runs.PathEscapes`,
            :class:`~agentbench_poad.leaderboard.runs.RunsNotFound`: see their modules.
    """
    from agentbench_poad.leaderboard.agent_source import (
        agent_root as default_agent_root,
    )
    from agentbench_poad.leaderboard.agent_source import (
        is_user_spec,
        record_spec,
        replay_spec,
    )
    from agentbench_poad.leaderboard.provenance import record_runs
    from agentbench_poad.leaderboard.runs import resolve_run

    check_record_names(record)
    rid = str(record.get("record_id"))
    config = record.get("config") or {}
    env_id = check_env_id(record["env"]["id"], f"{rid}: env.id", registered=True)
    spec = record_spec(record)
    if not user_code and is_user_spec(spec):
        raise NotLoadable(
            f"{rid}: its agent {spec!r} is user code, and this command runs only the package's "
            "agents; check it with `agentbench-poad leaderboard verify` (which hashes the file "
            "first) or make the record again"
        )
    replayed = replay_spec(record, root=agent_root, trust_unhashed=trust_unhashed)
    kwargs = dict(config.get("agent_kwargs") or {})
    shown = (record.get("agent") or {}).get("kwargs")
    if shown is not None and _canonical(shown) != _canonical(kwargs):
        raise NotLoadable(
            f"{rid}: the record shows agent kwargs {_short(shown)} (agent.kwargs) but replays "
            f"{_short(kwargs)} (config.agent_kwargs); a record names one agent, so this record "
            "was edited by hand: do not run it, ask its author to make it again"
        )
    runs = {seed: resolve_run(run, runs_root) for seed, run in (record_runs(record) or {}).items()}
    if runs:  # replay the very folders that are hashed
        kwargs["runs"] = {seed: str(path) for seed, path in runs.items()}
    adapter = None
    if kwargs.get(ADAPTER_KWARG) is not None:
        root = agent_root if agent_root is not None else default_agent_root(record)
        adapter = adapter_folder(kwargs[ADAPTER_KWARG], root, runs_root, rid)
        kwargs[ADAPTER_KWARG] = str(adapter)
    models: list[str] = []
    if spec and spec.startswith("lm:"):
        models.append(spec[len("lm:") :])
    for run in runs.values():
        models.append(_run_model(run, rid))
    return RecordLoads(
        record_id=rid,
        env_id=env_id,
        env_kwargs=check_env_kwargs(config.get("env_kwargs")),
        agent_spec=replayed,
        agent_kwargs=kwargs,
        runs=runs,
        adapter=adapter,
        models=tuple(models),
        user_code=is_user_spec(spec),
    )


def _run_model(run: Path, rid: str) -> str:
    try:
        model = json.loads((run / "config.json").read_text(encoding="utf-8")).get("model")
    except (OSError, ValueError) as exc:
        raise NotLoadable(f"{rid}: the run {run} has no readable config.json ({exc})") from None
    if not isinstance(model, str) or not model:
        raise NotLoadable(f"{rid}: the run {run} names no model in its config.json")
    return model


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _short(value: Any) -> str:
    text = _canonical(value)
    return text if len(text) <= 120 else text[:117] + "..."


# -- DataSciCoding datasets ---------------------------------------------------------------------
def check_dataset(record: Mapping[str, Any], *, download: bool | None = None) -> None:
    """Check the dataset a DataSciCoding record scores on before it is used.

    The dataset is loaded as the env will load it (the cache first, the source when the cache
    has none and ``download``) and its content digest compared with ``env.dataset.sha256``. A
    cached dataset (fetched or imported, not bundled) must have a stated digest: without it,
    nothing ties the cache file to the data the record was scored on. A bundled or generated
    dataset without one (records made before they stated it) is built by the package itself.

    Raises:
        NotLoadable: the digest differs, is absent for a cached dataset, or the dataset cannot
            be loaded (the message names the cache file and the fix).
    """
    from agentbench_poad.environments.datascicoding.datasets import (
        CacheCorrupt,
        DatasetUnavailable,
        cache_paths,
        load_dataset,
    )
    from agentbench_poad.environments.datascicoding.datasets.table import get_spec

    rid = record.get("record_id")
    name = record_dataset(record["env"]["id"])
    if name is None:
        return
    stated = (record.get("env") or {}).get("dataset") or {}
    spec = get_spec(name)
    file, _ = cache_paths(spec.name)
    if not stated.get("sha256"):
        if spec.offline:
            return
        raise NotLoadable(
            f"{rid}: the record states no digest of its dataset {name!r} (env.dataset), so "
            f"nothing says the cached {file} is the data it was scored on; add it with "
            "`agentbench-poad leaderboard backfill` where the record was made, or make the "
            "record again"
        )
    if stated.get("name") not in (None, name):
        raise NotLoadable(
            f"{rid}: env.dataset names {stated.get('name')!r}, but {record['env']['id']} scores "
            f"on {name!r}"
        )
    try:
        dataset = load_dataset(name, download=download is not False)
    except (CacheCorrupt, DatasetUnavailable) as exc:
        raise NotLoadable(f"{rid}: its dataset cannot be loaded: {exc}") from None
    actual = dataset.digest()
    if actual != stated["sha256"]:
        where = f"the cached {file}" if not spec.offline else f"the package's {name!r}"
        raise NotLoadable(
            f"{rid}: dataset {name!r} here ({where}) has digest {actual}, but the record was "
            f"scored on {stated['sha256']}; this is not the data the record was scored on -- "
            + (
                f"delete {file} and its manifest and run `agentbench-poad data fetch {name}`"
                if not spec.offline
                else "check out the package version the record was made with"
            )
        )
