"""``leaderboard add``'s check of a tuned record: was it trained with the config its spec chose?

A study with a tuning protocol (docs/study.md, "Tuning") writes each agent's chosen configuration
into its spec (``[tuning.chosen]``) and, into every record of a tuned group,
``training.config_source = {"spec": ..., "tuning": {...}, "chosen": {...}}``. Such a record is
refused when the spec cannot be read, when the spec chose another configuration for the agent
(or none), or when the configuration the runs actually trained with
(``config.training_config.algorithm``) differs from the chosen one in any chosen field.
Records without ``config_source`` are not tuned records and pass.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from agentbench_poad.leaderboard.schema import RecordError

__all__ = ["check_config_source", "without_spec_path"]


def without_spec_path(source: dict[str, Any] | None) -> dict[str, Any]:
    """A ``config_source`` less the spelling of its spec's path: two runs trained with the same
    choice of the same spec compare equal even when their study named the spec differently."""
    return {**(source or {}), "spec": None}


def _read_spec(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return json.loads(text)
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    return tomllib.loads(text)


def _spec_path(spec: str, root: Path | None) -> Path:
    """Where the spec a record names is on this machine.

    A relative path is looked up under ``root``, ``AGENTBENCH_POAD_ROOT`` (default: the current
    directory) and the checkout. An absolute path that is not here names a file of the machine
    that trained the runs (``/home/me/agentbench-poad/studies/fair.toml``): its trailing parts
    that keep the file's folder, longest first (``agentbench-poad/studies/fair.toml``, then
    ``studies/fair.toml``), are looked up under the same folders, so a clone elsewhere checks the
    record against its own copy of the spec.
    """
    path = Path(spec)
    if path.exists():
        return path
    parts = path.parts[1:] if path.is_absolute() else path.parts
    tails = [Path(*parts[i:]) for i in range(max(1, len(parts) - 1))] if parts else []
    bases = (root, Path(os.environ.get("AGENTBENCH_POAD_ROOT", ".")), _checkout())
    for tail in tails:
        for base in bases:
            if base is not None and (base / tail).is_file():
                return base / tail
    return path


def _checkout() -> Path:
    return Path(__file__).resolve().parents[1]


def check_config_source(record: dict[str, Any], *, root: Path | None = None) -> None:
    """Raise ``RecordError`` when a tuned record's config is not the one its spec chose.

    Args:
        record: the record to add.
        root: where relative spec paths are found (default: the current directory, then
            ``AGENTBENCH_POAD_ROOT``, then the checkout the package runs from).
    """
    source = (record.get("training") or {}).get("config_source")
    if source is None:
        return
    name = record.get("record_id")
    if not isinstance(source, dict) or not isinstance(source.get("chosen"), dict):
        raise RecordError(f"record {name!r}: training.config_source must name spec and chosen")
    spec_name = str(source.get("spec") or "")
    path = _spec_path(spec_name, root)
    try:
        spec = _read_spec(path)
    except (OSError, ValueError) as exc:
        raise RecordError(
            f"record {name!r} was trained with a tuned config from {spec_name}, which cannot be "
            f"read ({exc}); add it from the checkout that holds the spec"
        ) from None
    config = (record.get("config") or {}).get("training_config") or {}
    agent = str(config.get("agent") or "")
    tuning = spec.get("tuning") or {}
    if isinstance(tuning, list):  # [[tuning]] entries: the choice is in [tuning_chosen.<name>]
        protocol = str((source.get("tuning") or {}).get("name") or "")
        chosen_table = (spec.get("tuning_chosen") or {}).get(protocol) or {}
    else:
        chosen_table = tuning.get("chosen") or {}
    chosen_by_spec = chosen_table.get(agent)
    if chosen_by_spec is None:
        raise RecordError(
            f"record {name!r}: its spec {spec_name} chose no configuration for {agent!r}; run "
            "`agentbench-poad study SPEC --select` after the tuning runs, then train with it"
        )
    if chosen_by_spec != source["chosen"]:
        raise RecordError(
            f"record {name!r} was trained with {source['chosen']}, but its spec {spec_name} "
            f"chose {chosen_by_spec} for {agent}; retrain it with the chosen config"
        )
    trained = config.get("algorithm") or {}
    differs = {k: (trained.get(k), v) for k, v in chosen_by_spec.items() if trained.get(k) != v}
    if differs:
        raise RecordError(
            f"record {name!r}: its runs trained with "
            + ", ".join(f"{k} = {got!r}" for k, (got, _) in differs.items())
            + f" but its spec {spec_name} chose "
            + ", ".join(f"{k} = {want!r}" for k, (_, want) in differs.items())
            + f" for {agent}; retrain it with the chosen config"
        )
