"""The versioned JSON schema of a leaderboard run record.

A record is one agent scored on one environment id under the evaluation protocol. It is plain
JSON so that it can be committed under ``leaderboard/results/`` and reviewed in a pull request.
:func:`validate_record` runs on every write and every read; a record whose ``schema_version`` is
newer than this package, or whose ``kind`` is not ours, is refused with a message naming the fix.

Version history:

* ``1`` -- first version. Added later as optional fields (records without them stay valid):
  ``protocol.discount`` (the γ of the discounted returns), each episode's ``discounted_return``
  and each seed's ``mean_discounted_return`` (null when not logged); ``scores.mean_discounted_return``
  and ``scores.discounted_return_stderr`` (the discounted return over seeds, beside the
  undiscounted ``scores.mean``); ``model.base_weights`` and ``model.adapters`` (content hashes,
  :mod:`agentbench_poad.leaderboard.provenance`); ``software.dirty_allowed`` (the record was
  added from a dirty tree with ``--allow-dirty``); ``agent.source`` (a user agent's source file
  and its sha256, :mod:`agentbench_poad.leaderboard.agent_source`); ``model.adapter_files`` (an
  ``adapter`` agent kwarg's files and their sha256) and ``env.dataset`` (the content digest of a
  DataSciCoding dataset), :mod:`agentbench_poad.leaderboard.loadable`.

:func:`check_formats` (run by ``leaderboard add``) also checks the formats of ``created_at`` (ISO
8601 date and time), ``software.python`` and ``software.package_version`` (version numbers);
reading a record does not, so a record written before the check still loads.
"""

from __future__ import annotations

import re
from typing import Any

from agentbench_poad.errors import AgentBenchError

#: The schema version written by this package.
SCHEMA_VERSION = 1
#: The value of every record's ``kind`` field (tells our records apart from foreign JSON).
RECORD_KIND = "agentbench-poad/run-record"

_NUMBER_OR_NULL = {"type": ["number", "null"]}
_STRING_OR_NULL = {"type": ["string", "null"]}

_EPISODE = {
    "type": "object",
    "required": ["index", "reset_seed", "return", "success", "length", "failed"],
    "properties": {
        "index": {"type": "integer", "minimum": 0},
        "reset_seed": {"type": "integer"},
        "return": {"type": "number"},
        "discounted_return": _NUMBER_OR_NULL,
        "score": {"type": "number"},
        "success": {"type": "boolean"},
        "length": {"type": "integer", "minimum": 0},
        "failed": {"type": "boolean"},
        "reason": _STRING_OR_NULL,
        "final_code": _STRING_OR_NULL,
    },
}

_SEED_SCORE = {
    "type": "object",
    "required": ["seed", "score", "mean_return", "success_rate", "episodes"],
    "properties": {
        "seed": {"type": "integer"},
        "score": {"type": "number"},
        "mean_return": {"type": "number"},
        "mean_discounted_return": _NUMBER_OR_NULL,
        "success_rate": {"type": "number", "minimum": 0, "maximum": 1},
        "failed_episodes": {"type": "integer", "minimum": 0},
        "episodes": {"type": "array", "items": _EPISODE},
    },
}

_SHA256 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}

#: ``model.base_weights``: the canonical digest of the base model's weights (leaderboard/provenance.py).
_BASE_WEIGHTS = {
    "type": ["object", "null"],
    "required": ["name", "digest", "sha256"],
    "properties": {
        "name": {"type": "string"},
        "digest": {"type": "string"},
        "sha256": _SHA256,
        "files": {"type": "array", "items": {"type": "string"}},
        "source_sha256": _SHA256,
        "warm_start": {
            "type": "object",
            "required": ["name", "adapter_sha256", "base_model"],
            "properties": {
                "name": {"type": "string"},
                "adapter_sha256": _SHA256,
                "base_model": {"type": "string"},
            },
        },
    },
}

#: ``model.adapters``: per seed, the run that resolves the adapter and its files' sha256.
_ADAPTERS = {
    "type": ["object", "null"],
    "additionalProperties": {
        "type": "object",
        "required": ["run", "checkpoint", "files"],
        "properties": {
            "run": {"type": "string"},
            "checkpoint": {"type": "string"},
            "files": {"type": "object", "additionalProperties": _SHA256, "minProperties": 1},
        },
    },
}

#: ``model.adapter_files``: the adapter folder an agent loads by its ``adapter`` kwarg (an ``lm:``
#: agent's), as the record names it, and the sha256 of each of its files.
_ADAPTER_FILES = {
    "type": ["object", "null"],
    "required": ["path", "files"],
    "properties": {
        "path": {"type": "string"},
        "files": {"type": "object", "additionalProperties": _SHA256, "minProperties": 1},
    },
}

#: ``env.dataset``: the content digest of the dataset a DataSciCoding record scored on
#: (leaderboard/loadable.py), checked before verify replays it.
_DATASET = {
    "type": "object",
    "required": ["name", "sha256"],
    "properties": {
        "name": {"type": "string"},
        "sha256": _SHA256,
        "cached": {"type": "boolean"},
    },
}

#: ``agent.source``: the user agent's source file and its sha256, checked before ``verify``
#: imports it (leaderboard/agent_source.py).
_AGENT_SOURCE = {
    "type": ["object", "null"],
    "required": ["file", "sha256"],
    "properties": {"file": {"type": "string"}, "sha256": _SHA256},
}

_CURVE_POINT = {
    "type": "object",
    "required": ["step", "mean"],
    "properties": {
        "step": {"type": "number"},
        "mean": {"type": "number"},
        "low": {"type": "number"},
        "high": {"type": "number"},
        "n": {"type": "integer", "minimum": 1},
    },
}

#: JSON Schema (draft 2020-12) of a run record.
RECORD_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://agentbench-poad.invalid/schemas/run-record-v1.json",
    "title": "agentbench-poad run record",
    "type": "object",
    "required": [
        "schema_version",
        "kind",
        "record_id",
        "created_at",
        "env",
        "agent",
        "model",
        "protocol",
        "scores",
        "learning_curve",
        "training",
        "wall_time_s",
        "hardware",
        "software",
        "config",
        "command",
    ],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "kind": {"const": RECORD_KIND},
        "record_id": {"type": "string", "pattern": "^[A-Za-z0-9._-]+$", "minLength": 1},
        "created_at": {"type": "string"},
        "env": {
            "type": "object",
            "required": ["id", "version", "family"],
            "properties": {
                "id": {"type": "string", "minLength": 1},
                "version": {"type": "integer", "minimum": 0},
                "family": {"type": "string"},
                "open_action": {"type": "boolean"},
                "dataset": _DATASET,
            },
        },
        "agent": {
            "type": "object",
            "required": ["name", "version", "spec"],
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "version": {"type": "string"},
                "spec": _STRING_OR_NULL,
                "kwargs": {"type": "object"},
                "source": _AGENT_SOURCE,
            },
        },
        "model": {
            "type": "object",
            "required": ["base", "adapter"],
            "properties": {
                "base": _STRING_OR_NULL,
                "adapter": _STRING_OR_NULL,
                "base_weights": _BASE_WEIGHTS,
                "adapters": _ADAPTERS,
                "adapter_files": _ADAPTER_FILES,
            },
        },
        "protocol": {
            "type": "object",
            "required": ["seeds", "episodes_per_seed", "metric", "success", "action_timeout_s"],
            "properties": {
                "seeds": {"type": "array", "items": {"type": "integer"}, "minItems": 1},
                "episodes_per_seed": {"type": "integer", "minimum": 1},
                "metric": {"enum": ["return", "final_auc"]},
                "success": {"type": "string"},
                "action_timeout_s": _NUMBER_OR_NULL,
                "greedy": {"type": ["boolean", "null"]},
                "reset_seed_rule": {"type": "string"},
                "batch_size": {"type": "integer", "minimum": 1},
                "discount": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
            },
        },
        "scores": {
            "type": "object",
            "required": [
                "metric",
                "mean",
                "stderr",
                "success_rate",
                "success_rate_stderr",
                "per_seed",
            ],
            "properties": {
                "metric": {"enum": ["return", "final_auc"]},
                "mean": {"type": "number"},
                "stderr": {"type": "number", "minimum": 0},
                "success_rate": {"type": "number", "minimum": 0, "maximum": 1},
                "success_rate_stderr": {"type": "number", "minimum": 0},
                "mean_discounted_return": _NUMBER_OR_NULL,
                "discounted_return_stderr": {"type": ["number", "null"], "minimum": 0},
                "per_seed": {"type": "array", "items": _SEED_SCORE, "minItems": 1},
            },
        },
        "learning_curve": {
            "oneOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "required": ["x", "y", "points"],
                    "properties": {
                        "x": {"type": "string"},
                        "y": {"type": "string"},
                        "spread": {"type": "string"},
                        "points": {"type": "array", "items": _CURVE_POINT},
                    },
                },
            ]
        },
        "training": {
            "oneOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "required": ["runs"],
                    "properties": {
                        "env_id": _STRING_OR_NULL,
                        "runs": {"type": "array", "items": {"type": "string"}},
                        "total_steps": {"type": ["integer", "null"]},
                        # an outside trainer's own step count (optimiser steps), beside the
                        # env steps of total_steps (docs/integrations.md)
                        "trainer_steps": {"type": ["integer", "null"]},
                        "best_code": {
                            "type": ["object", "null"],
                            "required": ["label", "reward", "code"],
                            "properties": {
                                "label": {"type": "string"},
                                "reward": {"type": "number"},
                                "code": {"type": "string"},
                                "seed": {"type": ["integer", "null"]},
                            },
                        },
                    },
                },
            ]
        },
        "wall_time_s": {"type": "number", "minimum": 0},
        "hardware": {"type": "object", "required": ["platform", "cpu_count"]},
        "software": {
            "type": "object",
            "required": ["package_version", "git_commit", "python"],
            "properties": {
                "package_version": {"type": "string"},
                "git_commit": _STRING_OR_NULL,
                "git_dirty": {"type": ["boolean", "null"]},
                "dirty_allowed": {"type": "boolean"},
                "python": {"type": "string"},
            },
        },
        "config": {"type": "object"},
        "command": {"type": "string"},
        "notes": {"type": "string"},
    },
}


class RecordError(AgentBenchError, ValueError):
    """A run record is corrupt, foreign or does not match the schema."""


def validate_record(record: Any, source: str = "record") -> dict[str, Any]:
    """Validate ``record`` against :data:`RECORD_SCHEMA` and return it.

    Args:
        record: the decoded JSON.
        source: where it came from (a path), named in the error.

    Raises:
        RecordError: naming the source, the first offending field and the fix.
    """
    import jsonschema

    if not isinstance(record, dict):
        raise RecordError(
            f"{source}: not a run record (a JSON object is expected, got {type(record).__name__})"
        )
    if record.get("kind") != RECORD_KIND:
        raise RecordError(
            f"{source}: not an agentbench-poad run record (kind={record.get('kind')!r}, "
            f"expected {RECORD_KIND!r}); remove it from the results folder"
        )
    version = record.get("schema_version")
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise RecordError(
            f"{source}: schema_version {version} is newer than this package understands "
            f"({SCHEMA_VERSION}); upgrade agentbench-poad"
        )
    validator = jsonschema.Draft202012Validator(RECORD_SCHEMA)
    errors = sorted(validator.iter_errors(record), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(top level)"
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        raise RecordError(
            f"{source}: does not match the run-record schema v{SCHEMA_VERSION} at {where}: "
            f"{first.message}{more}; re-create it with `agentbench-poad evaluate` or "
            "`agentbench-poad leaderboard add --run RUN_DIR`"
        )
    return record


#: ``created_at``: an ISO 8601 date and time (``2026-01-31T12:00:00+00:00``), seconds and zone
#: optional.
ISO_TIMESTAMP = re.compile(
    r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:?\d{2})?$"
)
#: ``software.python``: ``platform.python_version()`` (``3.11.7``, ``3.13.0rc1``, ``3.14.0a1+``).
PYTHON_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?((a|b|rc)\d+)?\+?$")

#: ``software.package_version``: a PEP 440 version (the pattern of PEP 440's appendix, without
#: the optional leading ``v`` and surrounding spaces), e.g. ``0.1.0``, ``0.2.0.dev3+g1a2b3c``.
PEP440_VERSION = re.compile(
    r"^(\d+!)?\d+(\.\d+)*([-_.]?(a|b|c|rc|alpha|beta|pre|preview)[-_.]?\d*)?"
    r"(-\d+|[-_.]?(post|rev|r)[-_.]?\d*)?([-_.]?dev[-_.]?\d*)?"
    r"(\+[a-z0-9]+([-_.][a-z0-9]+)*)?$",
    re.IGNORECASE,
)


def check_formats(record: dict[str, Any], source: str = "record") -> None:
    """Check the free-text fields that have a format: ``created_at`` (:data:`ISO_TIMESTAMP`, a
    real date), ``software.python`` (:data:`PYTHON_VERSION`), ``software.package_version`` (a
    PEP 440 version).

    Raises:
        RecordError: naming the field, its value and the expected format.
    """
    import datetime as dt

    def bad(field: str, value: Any, expected: str) -> RecordError:
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        return RecordError(
            f"{source}: {field} is {shown}, not {expected}; re-create the record with "
            "`agentbench-poad evaluate` or `agentbench-poad leaderboard add --run RUN_DIR`"
        )

    created = record.get("created_at")
    try:
        ok = isinstance(created, str) and bool(ISO_TIMESTAMP.match(created))
        ok = ok and dt.datetime.fromisoformat(created.replace("Z", "+00:00")) is not None
    except ValueError:
        ok = False
    if not ok:
        raise bad("created_at", created, "an ISO 8601 date and time (2026-01-31T12:00:00+00:00)")
    software = record.get("software") or {}
    python = software.get("python")
    if not isinstance(python, str) or not PYTHON_VERSION.match(python):
        raise bad("software.python", python, "a Python version (3.11.7)")
    version = software.get("package_version")
    if not isinstance(version, str) or not PEP440_VERSION.match(version):
        raise bad("software.package_version", version, "a PEP 440 version (0.1.0)")
