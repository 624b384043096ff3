"""The wheel lists every package by hand (pyproject.toml, [tool.setuptools] packages): a package
left out there works in an editable install and is missing from a built wheel."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")


def _package_dirs() -> dict[str, Path]:
    """Installed package name -> source folder, from the same package-dir mapping."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    mapping = config["tool"]["setuptools"]["package-dir"]
    found = {}
    for prefix, folder in mapping.items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            relative = init.parent.relative_to(ROOT / folder)
            name = ".".join([prefix, *relative.parts])
            if "__pycache__" not in relative.parts:
                found[name] = init.parent
    return found


def test_every_package_folder_is_listed_for_the_wheel():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    found = _package_dirs()
    assert "agentbench_poad.warmstart" in found
    missing = sorted(set(found) - listed)
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"
