"""Registration of the datascicoding ids (filled in by the datascicoding family)."""

from __future__ import annotations

#: One line per registered id, shown by `agentbench-poad envs`.
DESCRIPTIONS: dict[str, str] = {}


def register_envs() -> None:
    """Register this family's ids with gymnasium (idempotent)."""
