"""Import a script of ``studies/`` (not a package) as a module, for its tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

STUDIES = Path(__file__).resolve().parents[1] / "studies"


def load_study_script(name: str) -> ModuleType:
    """``studies/<name>.py`` as a freshly executed module."""
    spec = importlib.util.spec_from_file_location(name, STUDIES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
