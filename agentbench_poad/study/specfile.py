"""A study spec as a file: reading it (TOML or JSON), the error that reports what is wrong with
it, and the slug that turns its names (study, env, agent, label) into folder names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentbench_poad.study import tomlcompat

__all__ = ["StudyError", "read_spec", "slug"]


class StudyError(ValueError):
    """The spec is wrong; the message lists every problem found."""


def read_spec(path: Path) -> dict[str, Any]:
    """The spec at ``path`` as read (a ``.json`` file as JSON, anything else as TOML).

    Raises:
        StudyError: the file does not parse.
    """
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise StudyError(f"{path}: not valid JSON ({exc})") from None
    try:
        return tomlcompat.loads(text)
    except tomlcompat.TOMLDecodeError as exc:
        raise StudyError(f"{path}: not valid TOML ({exc})") from None


def slug(text: str) -> str:
    """``text`` as one folder name: letters, digits and ``-._`` kept, anything else ``-``."""
    return "".join(c if c.isalnum() or c in "-._" else "-" for c in text)
