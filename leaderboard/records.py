"""Run records on disk: atomic writes, validated reads, the results store and provenance.

The store is a folder of ``<record_id>.json`` files (by default the package's own
``leaderboard/results/``, which is committed and built into the published board). Reading the
store never fails on one bad file: corrupt or foreign records are named in a warning and skipped.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import re
import sys
import tempfile
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentbench_poad.leaderboard.config_source import check_config_source
from agentbench_poad.leaderboard.record_names import (
    EXECUTION_ENV_KWARGS,
    LABEL_ENV_KWARGS,
    check_env_id,
    check_record_names,
)
from agentbench_poad.leaderboard.schema import (
    RecordError,
    check_formats,
    validate_record,
)
from agentbench_poad.software import git_commit, software_info  # noqa: F401 - re-exported

#: The committed results folder of this checkout / installation.
DEFAULT_STORE = Path(__file__).resolve().parent / "results"


class RecordWarning(UserWarning):
    """A record in the store was skipped (corrupt, foreign or schema mismatch)."""


# -- statistics --------------------------------------------------------------------------------
def mean_stderr(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (sample std / sqrt(n); 0 for a single value)."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("mean_stderr needs at least one value")
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def seed_discounted_mean(episodes: Sequence[Mapping[str, Any]]) -> float | None:
    """One seed's mean discounted return over its episodes; None when any episode logs none."""
    values = [e.get("discounted_return") for e in episodes]
    if not values or any(v is None for v in values):
        return None
    return float(sum(values) / len(values))


def discounted_summary(per_seed: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """``scores.mean_discounted_return`` and ``scores.discounted_return_stderr`` over seeds.

    Each seed's mean discounted return comes from its episodes; both are None when any episode
    logs no discounted return (a record made before episodes logged it).
    """
    means = [seed_discounted_mean(s["episodes"]) for s in per_seed]
    if not means or any(m is None for m in means):
        return {"mean_discounted_return": None, "discounted_return_stderr": None}
    mean, se = mean_stderr(means)
    return {"mean_discounted_return": mean, "discounted_return_stderr": se}


# -- provenance ----------------------------------------------------------------------------
def hardware_info() -> dict[str, Any]:
    """What the run ran on. Reads torch's device only if torch is already imported."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count() or 1,
        "accelerator": None,
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                info["accelerator"] = torch.cuda.get_device_name(0)
        except Exception:  # noqa: BLE001 - provenance must never break a run
            pass
    return info


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


# -- ids ---------------------------------------------------------------------------------------
def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "x"


def model_label(base_model: str) -> str:
    """How a record id names its base model: a named model or hub id by its last part, a merged
    warm start (``warmstarts/NAME/model``, docs/warmstart.md) by its warm start's name."""
    from agentbench_poad.warmstart.sft import warm_start_of

    path = Path(base_model.rstrip("/"))
    warm = warm_start_of(path) if path.is_dir() else None
    return str(warm["warm_start"]) if warm else path.name


def make_record_id(
    env_id: str, agent_name: str, base_model: str | None = None, suffix: str | None = None
) -> str:
    """``<env id>__<agent>[__<model>][__<suffix>]``: stable, so re-adding replaces, not duplicates."""
    parts = [env_id, agent_name]
    if base_model:
        parts.append(model_label(base_model))
    if suffix:
        parts.append(suffix)
    return "__".join(slug(p) for p in parts)


#: Agents whose records anchor the normalised score (0 and 1): the report looks them up by env
#: and env kwargs (:func:`agentbench_poad.leaderboard.report.common.anchors`), so several of one
#: env (uncapped and capped) live side by side and their ids carry the env kwargs.
ANCHOR_AGENTS = ("random", "oracle", "scripted")
#: The execution env kwargs (:data:`EXECUTION_ENV_KWARGS`: how an env runs, not what it scores)
#: and the label env kwargs (:data:`LABEL_ENV_KWARGS`: named by every record's id and label) are
#: defined in :mod:`~agentbench_poad.leaderboard.record_names` and imported here.
#: Short names of env kwargs in record ids (:func:`env_kwargs_suffix`).
ENV_KWARG_ABBREVIATIONS = {"max_episode_steps": "steps"}


def task_env_kwargs(env_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """The env kwargs that change the task (what a return means): all but the execution ones."""
    return {k: v for k, v in (env_kwargs or {}).items() if k not in EXECUTION_ENV_KWARGS}


def env_kwargs_suffix(env_kwargs: Mapping[str, Any] | None) -> str | None:
    """A stable, readable record-id part for the task's env kwargs; ``None`` when there are none.

    Each kwarg, sorted by name, is ``<short name><value>`` (``max_episode_steps=30`` ->
    ``steps30``; a kwarg without a short name is ``<name>-<value>``), joined by ``-``; values are
    written as JSON (strings bare). Execution kwargs (:data:`EXECUTION_ENV_KWARGS`) are left out.
    """
    parts = []
    for key, value in sorted(task_env_kwargs(env_kwargs).items()):
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        short = ENV_KWARG_ABBREVIATIONS.get(key)
        parts.append(f"{short}{text}" if short else f"{key}-{text}")
    return slug("-".join(parts)) if parts else None


def record_id_suffix(
    agent_name: str, env_kwargs: Mapping[str, Any] | None, suffix: str | None = None
) -> str | None:
    """The id suffix of a record: ``suffix``, and for an anchor agent (:data:`ANCHOR_AGENTS`)
    the env kwargs' part (:func:`env_kwargs_suffix`) after it.

    Only anchors carry their env kwargs in the id: the report reads the anchors of a row by env
    kwargs, so one env keeps several (``Overcooked-TomatoSalad-v0__oracle`` uncapped and
    ``Overcooked-TomatoSalad-v0__oracle__steps30`` with ``max_episode_steps=30``). Any other
    agent keeps one record, and one id, per env, model and training env: a record made before
    this rule keeps its id when it is made again. The exception: the kwargs of
    :data:`LABEL_ENV_KWARGS` (``prompt_style``) name every agent's record, so two prompt styles
    keep two records.
    """
    if agent_name.lower() in ANCHOR_AGENTS:
        kwargs_part = env_kwargs_suffix(env_kwargs)
    else:  # only the kwargs every label names (LABEL_ENV_KWARGS): old ids stay as they were
        shown = {k: v for k, v in (env_kwargs or {}).items() if k in LABEL_ENV_KWARGS}
        kwargs_part = env_kwargs_suffix(shown)
    return "__".join(p for p in (suffix, kwargs_part) if p) or None


# -- files -------------------------------------------------------------------------------------
def write_json_atomic(path: Path, data: Any) -> Path:
    """Write JSON to ``path`` through a temp file in the same folder and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, sort_keys=False, allow_nan=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp creates 0600; a record is meant to be shared (committed, served)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_record(path: Path, record: dict[str, Any]) -> Path:
    """Validate ``record`` and write it atomically to ``path``."""
    validate_record(record, source=str(path))
    return write_json_atomic(Path(path), record)


def read_record(path: Path) -> dict[str, Any]:
    """Read and validate one record file.

    Raises:
        RecordError: the file is not JSON, not ours, or does not match the schema.
    """
    path = Path(path)
    # a regular file of bounded size, depth and finite numbers; safe ids (issue 64)
    from agentbench_poad.leaderboard.record_file import check_ids, read_json_file

    record = validate_record(read_json_file(path), source=str(path))
    check_ids(record, source=str(path))
    check_record_names(record)  # names no code to import, no unlabelled task kwarg (issue 64)
    return record


def store_path(store: Path | str | None) -> Path:
    return Path(store) if store is not None else DEFAULT_STORE


def iter_record_files(store: Path | str | None = None) -> list[Path]:
    root = store_path(store)
    if not root.exists():
        return []
    return sorted(p for p in root.rglob("*.json") if not p.name.startswith("."))


def load_records(store: Path | str | None = None) -> list[dict[str, Any]]:
    """All valid records of the store; each bad file is named in a :class:`RecordWarning`."""
    records = []
    for path in iter_record_files(store):
        try:
            record = read_record(path)
        except RecordError as exc:
            warnings.warn(f"skipping {exc}", RecordWarning, stacklevel=2)
            continue
        record["_path"] = str(path)
        records.append(record)
    return records


class DirtyTree(RecordError):
    """A record made from a git tree with uncommitted changes, added without ``allow_dirty``."""


def add_record(
    record: dict[str, Any],
    store: Path | str | None = None,
    replace: bool = False,
    *,
    allow_dirty: bool | None = None,
) -> Path:
    """Validate and write ``record`` into the store as ``<record_id>.json``.

    A record made from a git tree with uncommitted changes (``software.git_dirty``) is refused
    unless ``allow_dirty``; with it, the record is marked ``software.dirty_allowed = true`` (the
    report flags the row). ``allow_dirty=None`` (the library default) refuses only on the
    package's own board (:data:`DEFAULT_STORE`); ``agentbench-poad leaderboard add`` refuses on
    every store unless ``--allow-dirty``.

    Besides the schema, the record must name one agent (``agent.spec`` equal to
    ``config.agent_spec``), state ``created_at`` and its versions in their formats
    (:func:`~agentbench_poad.leaderboard.schema.check_formats`) and name no run or adapter file
    outside its root (:func:`~agentbench_poad.leaderboard.runs.check_record_paths`).

    Raises:
        RecordError: invalid record, or one with the same id exists and ``replace`` is false.
        DirtyTree: the record comes from a dirty tree and dirty records are not allowed here.
    """
    record = {k: v for k, v in record.items() if not k.startswith("_")}
    validate_record(record, source=f"record {record.get('record_id')!r}")
    from agentbench_poad.leaderboard.record_file import check_ids

    check_ids(record, source=f"record {ascii(record.get('record_id'))[:80]}")  # issue 64
    software = record["software"]
    if software.get("git_dirty"):
        if allow_dirty is None:
            allow_dirty = store_path(store).resolve() != DEFAULT_STORE.resolve()
        if not allow_dirty:
            raise DirtyTree(
                f"record {record['record_id']!r} was made from a git tree with uncommitted "
                f"changes (software.git_dirty is true, commit {software.get('git_commit')}), so "
                "the code that made it cannot be recovered; commit, re-create the record and add "
                "it again, or add it marked as dirty with `agentbench-poad leaderboard add "
                "--allow-dirty`"
            )
        record = {**record, "software": {**software, "dirty_allowed": True}}
    check_config_source(record)  # a tuned record must use its spec's chosen config (issue 27)
    check_formats(record, source=f"record {record['record_id']!r}")
    check_record_paths(record)  # no run or adapter file outside its root (issue 47)
    check_loadable_names(record)  # registered env ids, identity env kwargs (issue 64)
    record_spec(record)  # one agent: agent.spec == config.agent_spec (issue 47)
    check_portable_runs(record, store)
    path = store_path(store) / f"{record['record_id']}.json"
    if path.exists() and not replace:
        raise RecordError(
            f"{path} already exists; pass --replace (replace=True) to overwrite it, or give the "
            "new record another name (--name)"
        )
    return write_record(path, record)


def check_record_paths(record: Mapping[str, Any]) -> None:
    """:func:`agentbench_poad.leaderboard.runs.check_record_paths` (imported late: runs imports
    this module's schema)."""
    from agentbench_poad.leaderboard.runs import check_record_paths as check

    check(dict(record))


def check_loadable_names(record: Mapping[str, Any]) -> None:
    """:func:`~agentbench_poad.leaderboard.record_names.check_record_names`, the env id
    registered here."""
    check_record_names(record)
    check_env_id(record["env"]["id"], f"{record.get('record_id')}: env.id", registered=True)


def record_spec(record: Mapping[str, Any]) -> str | None:
    """:func:`agentbench_poad.leaderboard.agent_source.record_spec` (the record's one spec)."""
    from agentbench_poad.leaderboard.agent_source import record_spec as spec

    return spec(record)


def check_portable_runs(record: Mapping[str, Any], store: Path | str | None = None) -> None:
    """Refuse, on a board (the package's own, or a checkout's ``leaderboard/results``), a record
    that names a training run by absolute path: it would verify on the machine that made it only.

    Raises:
        RecordError: naming the runs and the fix.
    """
    from agentbench_poad.leaderboard.runs import absolute_runs, board_checkout, runs_root

    folder = store_path(store).resolve()
    if folder != DEFAULT_STORE.resolve() and board_checkout(folder) is None:
        return
    named = absolute_runs(dict(record))
    if named:
        raise RecordError(
            f"record {record.get('record_id')!r} names {len(named)} training run(s) by absolute "
            f"path (e.g. {named[0]}), so it would verify on this machine only; put the runs under "
            f"the runs root ({runs_root(must_exist=False)}; see `agentbench-poad leaderboard "
            "--help` for --runs and AGENTBENCH_POAD_RUNS) and make the record again"
        )


#: Records taken off the board are kept, unchanged, in ``history/<study>/`` beside the store
#: (``leaderboard/history/`` for the package's board): out of the store, still verifiable by
#: path. ``unstudied`` holds those made outside any study.
HISTORY_DIR = "history"


def record_study(record: Mapping[str, Any]) -> str | None:
    """The name of the study that made ``record`` (``config.study.study``), or None."""
    study = (record.get("config") or {}).get("study")
    return study.get("study") if isinstance(study, Mapping) else None


def history_store(store: Path | str | None = None) -> Path:
    """The folder that holds the history of ``store`` (every study's superseded records, one
    sub-folder a study): ``history/`` beside the records folder; :func:`load_records` reads it
    whole."""
    return store_path(store).parent / HISTORY_DIR


def history_path(path: Path | str, study: str | None) -> Path:
    """Where the record file ``path`` of ``study`` goes in the history (see :data:`HISTORY_DIR`)."""
    path = Path(path)
    return path.parent.parent / HISTORY_DIR / slug(study or "unstudied") / path.name


def move_to_history(path: Path | str, study: str | None) -> Path:
    """Take the record file at ``path``, made by ``study`` (:func:`record_study`; None for an
    unreadable or study-less record), off the board: move it, unchanged, into the history.

    Raises:
        RecordError: the history already holds a record of that id and study.
    """
    path = Path(path)
    target = history_path(path, study)
    if target.exists():
        raise RecordError(
            f"cannot move {path} to the history: {target} already holds a record; move one of "
            "them away first"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(path, target)
    return target


def find_record(record_id: str, store: Path | str | None = None) -> dict[str, Any]:
    """The record with this id (or a path to a record file)."""
    candidate = Path(record_id)
    if candidate.suffix == ".json" and candidate.exists():
        record = read_record(candidate)
        record["_path"] = str(candidate)
        return record
    path = store_path(store) / f"{record_id}.json"
    if not path.exists():
        known = [p.stem for p in iter_record_files(store)]
        close = [k for k in known if record_id.lower() in k.lower()][:5]
        hint = f"; did you mean: {', '.join(close)}" if close else ""
        raise RecordError(
            f"no record {record_id!r} in {store_path(store)}{hint} "
            "(see `agentbench-poad leaderboard list`)"
        )
    record = read_record(path)
    record["_path"] = str(path)
    return record


def summarize_seeds(per_seed: Iterable[dict[str, Any]]) -> dict[str, float | None]:
    """The ``scores`` summary over seeds: score and success rate (mean, standard error) and,
    beside them, the discounted return (the paper's Table 1 metric; None when an episode logs
    none). :mod:`agentbench_poad.leaderboard.recompute` checks the same numbers."""
    per_seed = list(per_seed)
    mean, se = mean_stderr([s["score"] for s in per_seed])
    sr, sr_se = mean_stderr([s["success_rate"] for s in per_seed])
    return {
        "mean": mean,
        "stderr": se,
        "success_rate": sr,
        "success_rate_stderr": sr_se,
        **discounted_summary(per_seed),
    }
