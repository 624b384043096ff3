"""What a record may make this package load, and the refusal of everything else (issue 64).

A record is data someone else wrote. Reading it (``leaderboard list``, ``report``, ``show``),
adding it (``add``, ``add --run``) or backfilling it must run no code it names; only ``verify``
runs code, and only the agent file the record hashes. Everything a record could make the tools
load passes through this module:

* :func:`check_record_names` -- the checks that need no file and import nothing, run on every
  read of a record (:func:`~agentbench_poad.leaderboard.records.read_record`), so ``list`` and
  ``report`` skip a refused record with a warning:

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
  dataset against the digest the record states (``env.dataset``).

Every refusal is a :class:`NotLoadable` (a :class:`~agentbench_poad.leaderboard.schema.RecordError`)
naming the field, why and the fix.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentbench_poad.leaderboard.records import EXECUTION_ENV_KWARGS, LABEL_ENV_KWARGS
from agentbench_poad.leaderboard.schema import RecordError

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

#: Env kwargs that are part of a row's identity (see the module doc), with their value's check:
#: the label kwargs of every record's id and label, and the episode cap anchors are keyed by.
IDENTITY_ENV_KWARGS: Mapping[str, tuple[type, str]] = {
    "max_episode_steps": (int, "a positive integer"),
    **dict.fromkeys(LABEL_ENV_KWARGS, (str, "a string")),
}
#: The factory of records made from training runs
#: (:data:`agentbench_poad.leaderboard.provenance.RUN_AGENT_SPEC`).
RUN_AGENT_SPEC = "agentbench_poad.leaderboard.from_run:load_run_agent"
#: Package agent factories a record may name: a top-level name of a baselines module.
_BASELINE_SPEC = re.compile(r"^agentbench_poad\.baselines\.[a-z_][a-z0-9_]*:[A-Za-z][A-Za-z0-9_]*$")
#: The agent kwarg that names an adapter folder the agent loads (``lm:`` agents).
ADAPTER_KWARG = "adapter"


class NotLoadable(RecordError):
    """A record names something the tools may not load (or not as it names it)."""


# -- names: no file, no import ----------------------------------------------------------------
def check_env_id(env_id: Any, what: str = "env.id", *, registered: bool = False) -> str:
    """``env_id`` if it is a plain gymnasium id (registered here, with ``registered``).

    Raises:
        NotLoadable: it is not a string, it has gymnasium's ``module:`` prefix (making the env
            would import that module), or (``registered``) no env of that id is registered.
    """
    if not isinstance(env_id, str) or not env_id:
        raise NotLoadable(f"{what} must be an env id (a non-empty string), got {env_id!r}")
    if ":" in env_id:
        raise NotLoadable(
            f"{what} {env_id!r} names a module to import before the id ('module:Env-v0'); a "
            "record names a registered env id only (see `agentbench-poad envs`), so that no "
            "tool imports code a record names; make the record again with the plain id"
        )
    if registered:
        import gymnasium as gym

        import agentbench_poad  # noqa: F401 - registers the package's ids

        if gym.registry.get(env_id) is None:
            raise NotLoadable(
                f"{what} {env_id!r} is not a registered env id here (see `agentbench-poad "
                "envs`); the ids of another package are registered by importing it first"
            )
    return env_id


def check_env_kwargs(env_kwargs: Any, what: str = "config.env_kwargs") -> dict[str, Any]:
    """``env_kwargs`` if each is an execution kwarg or part of the row's identity.

    Raises:
        NotLoadable: naming the first kwarg that is neither, or a value of the wrong type.
    """
    if env_kwargs is None:
        return {}
    if not isinstance(env_kwargs, Mapping):
        raise NotLoadable(f"{what} must be an object, got {type(env_kwargs).__name__}")
    for key, value in env_kwargs.items():
        if key in EXECUTION_ENV_KWARGS:
            if not isinstance(value, str):
                raise NotLoadable(f"{what}.{key} must be a backend's name, got {value!r}")
            continue
        if key not in IDENTITY_ENV_KWARGS:
            allowed = sorted({*EXECUTION_ENV_KWARGS, *IDENTITY_ENV_KWARGS})
            raise NotLoadable(
                f"{what} sets {key!r}, which changes the task but is not part of the row's "
                f"identity (its id and label), so the row would show one task and replay "
                f"another; a record may set only {', '.join(allowed)}: register an env id "
                "whose task has that setting, and evaluate that id"
            )
        kind, text = IDENTITY_ENV_KWARGS[key]
        if isinstance(value, bool) or not isinstance(value, kind) or (kind is int and value < 1):
            raise NotLoadable(f"{what}.{key} must be {text}, got {value!r}")
    return dict(env_kwargs)


def is_package_agent(spec: str) -> bool:
    """Whether ``spec`` names this package's code (not a file): ``agentbench_poad.*``."""
    from agentbench_poad.leaderboard.agent_source import PACKAGE_PREFIXES, is_file_spec

    return spec.startswith(PACKAGE_PREFIXES) and not is_file_spec(spec)


def check_agent_spec(spec: Any, what: str = "agent.spec") -> str | None:
    """``spec`` if a record may name it (see the module doc; no import).

    Raises:
        NotLoadable: package code that is not an agent factory, or not a string.
    """
    if spec is None:
        return None
    if not isinstance(spec, str) or not spec:
        raise NotLoadable(f"{what} must be an agent spec (a string), got {spec!r}")
    if spec.startswith("lm:") or spec == RUN_AGENT_SPEC or not is_package_agent(spec):
        return spec  # a model; the trained-run factory; user code (hashed, checked by verify)
    if not _BASELINE_SPEC.match(spec):
        raise NotLoadable(
            f"{what} {spec!r} names package code that is not an agent factory; a record's "
            "package agent is a factory of agentbench_poad.baselines (module:Name), "
            f"{RUN_AGENT_SPEC} or lm:MODEL; make the record again with the agent's own spec"
        )
    return spec


def check_record_names(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """The checks of a read (see the module doc): nothing is opened or imported.

    Returns:
        ``record``, unchanged.

    Raises:
        NotLoadable: naming the field, why, and the fix.
    """
    rid = record.get("record_id")
    config = record.get("config") or {}
    training = record.get("training") or {}
    try:
        check_env_id((record.get("env") or {}).get("id"), "env.id")
        for what, value in (
            ("config.env_id", config.get("env_id")),
            ("training.env_id", training.get("env_id") if isinstance(training, Mapping) else None),
        ):
            if value is not None:
                check_env_id(value, what)
        check_env_kwargs(config.get("env_kwargs"))
        check_agent_spec((record.get("agent") or {}).get("spec"))
        check_agent_spec(config.get("agent_spec"), "config.agent_spec")
        for what, kwargs in (
            ("config.agent_kwargs", config.get("agent_kwargs")),
            ("agent.kwargs", (record.get("agent") or {}).get("kwargs")),
        ):
            named = (kwargs or {}).get(ADAPTER_KWARG) if isinstance(kwargs, Mapping) else None
            if named is not None:
                _check_adapter_name(named, f"{what}.{ADAPTER_KWARG}")
    except NotLoadable as exc:
        raise NotLoadable(f"{rid}: {exc}") from None
    return record


def _check_adapter_name(named: Any, what: str) -> None:
    """An ``adapter`` kwarg names a folder; a relative one does not climb out with ``..``."""
    from agentbench_poad.leaderboard.runs import PathEscapes, check_relative

    if not isinstance(named, str) or not named:
        raise NotLoadable(f"{what} must name an adapter folder, got {named!r}")
    try:
        check_relative(named, what)
    except PathEscapes as exc:
        raise NotLoadable(str(exc)) from None


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


def adapter_folder(
    named: Any,
    root: str | os.PathLike,
    runs_root: str | os.PathLike | None = None,
    rid: str = "record",
) -> Path:
    """The adapter folder an ``adapter`` agent kwarg names, confined: a relative path inside the
    record's checkout (``root``), an absolute one inside it or inside the runs root.

    Raises:
        PathEscapes: the folder lies outside both; NotLoadable: it is not a string or a folder.
    """
    from agentbench_poad.leaderboard.runs import PathEscapes, confine
    from agentbench_poad.leaderboard.runs import runs_root as default_runs_root

    if not isinstance(named, str) or not named:
        raise NotLoadable(f"{rid}: agent kwarg {ADAPTER_KWARG!r} must be a folder, got {named!r}")
    base = Path(root).expanduser().resolve()
    written = Path(named).expanduser()
    if written.is_absolute():
        path = written.resolve()
        roots = [base, default_runs_root(runs_root, must_exist=False).resolve()]
        if not any(path.is_relative_to(r) for r in roots):
            raise PathEscapes(
                f"{rid}: adapter {named!r} lies outside the record's checkout {base} and the "
                f"runs root {roots[1]}; a record names its adapter inside them (pass "
                "--agent-root DIR to name another folder you have reviewed)"
            )
    else:
        path = confine(base, written, f"{rid}: adapter")
    if not path.is_dir():
        raise NotLoadable(
            f"{rid}: adapter {named!r} is not a folder at {path}; run from the checkout the "
            "record was made in, or pass --agent-root DIR (the folder its path is relative to)"
        )
    return path


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
def record_dataset(env_id: str) -> str | None:
    """The DataSciCoding dataset an env id scores on (its registered ``dataset`` kwarg), or None
    for any other env."""
    from agentbench_poad.registration import UnknownEnvError, env_facts

    if ":" in env_id:
        return None
    try:
        facts = env_facts(env_id)
    except UnknownEnvError:
        return None
    dataset = dict(facts.kwargs or {}).get("dataset")
    return dataset if facts.family.lower() == "datascicoding" and isinstance(dataset, str) else None


def dataset_entry(env_id: str, *, download: bool = False) -> dict[str, Any] | None:
    """``env.dataset`` of a new record: ``{name, sha256, cached}``, the content digest of the
    dataset the env scores on (None for other envs, or when it cannot be loaded here)."""
    from agentbench_poad.environments.datascicoding.datasets import (
        CacheCorrupt,
        DatasetUnavailable,
        load_dataset,
    )
    from agentbench_poad.environments.datascicoding.datasets.table import get_spec

    name = record_dataset(env_id)
    if name is None:
        return None
    try:
        dataset = load_dataset(name, download=download)
    except (CacheCorrupt, DatasetUnavailable):
        return None
    return {"name": name, "sha256": dataset.digest(), "cached": not get_spec(name).offline}


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
