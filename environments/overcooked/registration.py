"""Registration of the overcooked ids (filled in by the overcooked family)."""

from __future__ import annotations

#: One line per registered id, shown by `agentbench-poad envs`.
DESCRIPTIONS: dict[str, str] = {}


def register_envs() -> None:
    """Register this family's ids with gymnasium (idempotent)."""
