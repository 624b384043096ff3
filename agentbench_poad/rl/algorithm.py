"""What makes a class an algorithm the trainer can run, and where an algorithm came from.

An *algorithm* is a subclass of :class:`~agentbench_poad.rl.ppo.PPOAgent` (docs/agents.md,
"Write your own algorithm"). Users name theirs by a spec, as evaluation agents are named
(:func:`agentbench_poad.agents.load_factory` reads both): ``"mypkg.algos:MyAlgo"`` or
``"path/to/my_algorithm.py:MyAlgo"``.

* :func:`check_algorithm` says everything a class lacks to be one (one :class:`AlgorithmError`
  naming each missing piece), so that a wrong class fails before any model loads;
* :func:`load_algorithm` reads a spec and checks the class;
* :func:`algorithm_source` is what a run's ``config.json`` (and so its records) keeps about the
  class: its spec, the package that provides it and that package's installed version (for a
  file: the file's sha256).

This module imports no algorithm (``rl/`` never imports ``baselines/``): the names the built-in
algorithms reserve are passed in by :func:`agentbench_poad.baselines.get_algorithm`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import os
import re
import sys
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "REQUIRED_METHODS",
    "AlgorithmError",
    "NotAnAlgorithm",
    "algorithm_source",
    "check_algorithm",
    "is_algorithm_spec",
    "load_algorithm",
    "loaded_spec",
    "normalize_spec",
]

#: The methods every algorithm defines (PPOAgent declares them and raises NotImplementedError).
#: ``evaluate_values`` is needed too unless ``make_critic`` returns None (a critic-free
#: algorithm, such as GRPO): that is only known once the class runs, so it is not checked here.
REQUIRED_METHODS = (
    "make_critic",
    "collect",
    "bootstrap_values",
    "compute_advantages",
    "make_batch",
    "evaluate_policy",
)
#: An algorithm's ``name`` names its run directories and board rows: keep it file-name safe.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

#: The spec each class was loaded from (filled by :func:`load_algorithm`).
_LOADED: weakref.WeakKeyDictionary[type, str] = weakref.WeakKeyDictionary()


class AlgorithmError(ValueError):
    """A spec that does not name a usable algorithm; the message says what is missing."""


class NotAnAlgorithm(AlgorithmError):
    """The spec names something that is no PPOAgent subclass at all (e.g. a prompted agent's
    factory, which a study evaluates without training)."""


def is_algorithm_spec(text: str) -> bool:
    """Whether ``text`` looks like a class spec (``module:Class`` / ``file.py:Class``), not a
    built-in name or an ``lm:MODEL`` evaluation agent."""
    return ":" in text and not text.startswith("lm:")


def normalize_spec(spec: str, base: str | os.PathLike | None = None) -> str:
    """``spec`` with a file path made absolute (against ``base``, default the current directory),
    so the same class is found from any working directory (Ray workers, a resumed study).
    Module specs are returned unchanged."""
    module, sep, attr = spec.rpartition(":")
    if not sep or not (module.endswith(".py") or "/" in module):
        return spec
    path = Path(module).expanduser()
    if not path.is_absolute():
        path = Path(base or Path.cwd()) / path
    return f"{path.resolve()}:{attr}"


def check_algorithm(target: Any, spec: str | None = None, *, reserved: Iterable[str] = ()) -> type:
    """Return ``target`` if it is an algorithm class, else raise naming everything it lacks.

    An algorithm is a subclass of :class:`~agentbench_poad.rl.ppo.PPOAgent` that

    * sets its own ``name`` (letters, digits, ``.``, ``_``, ``-``; not a built-in's name, which
      it would otherwise share run directories and board rows with);
    * has a ``config_class`` that is a dataclass subclassing
      :class:`~agentbench_poad.rl.config.PPOConfig` (its presets and ``--set`` fields);
    * defines every method of :data:`REQUIRED_METHODS` (inherited from a built-in is fine), and
      ``evaluate_values`` when it has a critic.

    Args:
        target: what the spec resolved to.
        spec: the spec, for the message.
        reserved: names of the built-in algorithms (a user class may not take one).

    Raises:
        AlgorithmError: listing every missing piece.
    """
    from agentbench_poad.rl.config import PPOConfig
    from agentbench_poad.rl.ppo import PPOAgent

    what = f"{spec!r}" if spec else repr(target)
    if not isinstance(target, type) or not issubclass(target, PPOAgent):
        kind = "a class" if isinstance(target, type) else f"a {type(target).__name__}"
        raise NotAnAlgorithm(
            f"{what} is not an algorithm: it is {kind} but not a subclass of "
            "agentbench_poad.rl.ppo.PPOAgent (see docs/agents.md, 'Write your own algorithm'; "
            "examples/my_algorithm.py is a worked example)"
        )
    problems = []
    name = target.__dict__.get("name")
    builtin = f"{target.__module__}".startswith("agentbench_poad.")
    if name is None and not builtin:
        inherited = getattr(target, "name", None)
        problems.append(
            f"no `name` of its own (it inherits {inherited!r}); set a class attribute "
            'name = "my-algo": it names its runs and its row on the board'
        )
    elif not isinstance(name, str) or not _NAME.match(name or ""):
        problems.append(
            f"`name` must be a non-empty string of letters, digits, '.', '_' or '-', got {name!r}"
        )
    elif not builtin and name.lower() in {r.lower() for r in reserved}:
        problems.append(f"`name` {name!r} is a built-in algorithm's; choose another")
    config_class = getattr(target, "config_class", None)
    if not (
        isinstance(config_class, type)
        and dataclasses.is_dataclass(config_class)
        and issubclass(config_class, PPOConfig)
    ):
        problems.append(
            f"no `config_class` dataclass (got {config_class!r}); set config_class to a "
            "@dataclass subclass of agentbench_poad.rl.config.PPOConfig (or a built-in's, "
            "e.g. POADConfig)"
        )
    missing = [m for m in REQUIRED_METHODS if getattr(target, m) is getattr(PPOAgent, m)]
    if missing:
        problems.append(f"missing methods {missing} (PPOAgent only declares them)")
    if problems:
        raise AlgorithmError(
            f"{what} ({target.__qualname__}) is not a usable algorithm: " + "; ".join(problems)
        )
    return target


def load_algorithm(spec: str, *, reserved: Iterable[str] = ()) -> type:
    """The algorithm class a spec names, checked (:func:`check_algorithm`).

    Raises:
        AlgorithmError: the spec does not import, names nothing, or names no algorithm.
    """
    from agentbench_poad.agents import load_factory

    try:
        target = load_factory(spec)
    except ValueError as exc:
        raise AlgorithmError(str(exc)) from None
    except Exception as exc:  # the user's module failed while importing
        raise AlgorithmError(
            f"algorithm spec {spec!r} does not import: {type(exc).__name__}: {exc}"
        ) from exc
    cls = check_algorithm(target, spec, reserved=reserved)
    _LOADED[cls] = spec
    return cls


def loaded_spec(algorithm: type) -> str | None:
    """The spec :func:`load_algorithm` read ``algorithm`` from (None for a class it did not
    load, such as a built-in looked up by name)."""
    return _LOADED.get(algorithm)


def _display_spec(spec: str) -> str:
    """A file spec relative to the current directory when the file lies under it."""
    module, _, attr = spec.rpartition(":")
    if not (module.endswith(".py") or "/" in module):
        return spec
    try:
        return f"{Path(module).resolve().relative_to(Path.cwd().resolve()).as_posix()}:{attr}"
    except ValueError:
        return spec


@functools.lru_cache(maxsize=1)
def _distributions() -> dict[str, list[str]]:
    """Top-level import name -> the installed distributions providing it (read once)."""
    return dict(importlib.metadata.packages_distributions())


def _file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def algorithm_source(algorithm: type) -> dict[str, Any]:
    """Where ``algorithm`` comes from, for the run's ``config.json`` and its records.

    Returns:
        ``{"name", "spec", "package", "package_version"}`` and, for a class read from a file,
        ``"source_sha256"`` of that file. ``spec`` loads the class again
        (:func:`agentbench_poad.baselines.get_algorithm`); a file spec is written relative to
        the current directory when the file lies under it. ``package`` is the installed
        distribution providing the module (None for a file or an uninstalled module) and
        ``package_version`` its version (else the module's ``__version__``, else None).
    """
    spec = _LOADED.get(algorithm) or f"{algorithm.__module__}:{algorithm.__qualname__}"
    module_name, _, _ = spec.rpartition(":")
    source: dict[str, Any] = {
        "name": getattr(algorithm, "name", None),
        "spec": _display_spec(spec),
        "package": None,
        "package_version": None,
    }
    module = sys.modules.get(algorithm.__module__)
    namespace = vars(module) if module is not None else {}
    if module_name.endswith(".py") or "/" in module_name:
        source["source_sha256"] = _file_sha256(Path(module_name).expanduser())
    else:
        top = algorithm.__module__.split(".")[0]
        dists = _distributions().get(top) or []
        if dists:
            source["package"] = dists[0]
            try:
                source["package_version"] = importlib.metadata.version(dists[0])
            except importlib.metadata.PackageNotFoundError:
                pass
    if source["package_version"] is None and namespace.get("__version__") is not None:
        source["package_version"] = str(namespace["__version__"])
    return source
