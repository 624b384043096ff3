"""Which agent code a record replays: one spec, its source file hashed, its path confined.

``verify`` imports and runs the agent code a record names, so what it runs must be what the record
shows. A record names its agent once: ``agent.spec`` (shown by ``leaderboard show`` and the
report) and ``config.agent_spec`` (the factory's spec) must be equal. When a record is made
(:func:`agent_source`), the file that defines a user's agent is hashed into ``agent.source``:

* a file spec (``path/to/my_agent.py:Factory``): that file;
* a module spec (``my_package.agents:Factory``) outside this package: the module's file, found
  on ``sys.path`` without running any code (:func:`module_file`).

The package's own agents (``agentbench_poad.*``, the built-in baselines and trained runs) and
``lm:MODEL`` agents have no user source: the record's ``software.git_commit`` names their code
and ``model.base_weights`` / ``model.adapters`` their weights.

Before anything is imported, :func:`replay_spec` checks the record:

1. the two specs are equal (else a :class:`~agentbench_poad.leaderboard.schema.RecordError`
   naming both);
2. a relative file spec resolves inside the *agent root* (the record's checkout: the nearest
   folder above the record file holding ``.git`` or ``pyproject.toml``; else the record's own
   folder; for a record given as a dict, the current directory), with ``..`` and symlinks that
   leave it refused; an absolute file spec, and a module spec's file, must lie inside the agent
   root too (a module found anywhere on ``sys.path`` -- the standard library -- is refused);
3. the file's sha256 equals ``agent.source.sha256`` (else a ``RecordError`` naming both
   digests). A user agent whose record has no hash (made before records carried one) is
   refused unless ``trust_unhashed`` (``leaderboard verify --trust-unhashed``): the reviewer
   then vouches for the file as it is.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentbench_poad.leaderboard.runs import PathEscapes, confine
from agentbench_poad.leaderboard.schema import RecordError

#: Module specs under these prefixes are the package's own code (named by ``git_commit``).
PACKAGE_PREFIXES = ("agentbench_poad.", "agentbench_poad:")
#: ``lm:MODEL``: the untrained model as an agent (no user code).
LM_PREFIX = "lm:"


class AgentSourceMismatch(RecordError):
    """The agent a record would replay is not the one it shows (spec, path or content)."""


def is_file_spec(spec: str) -> bool:
    """Whether ``spec`` names a file (``path/to/x.py:Factory``), as ``load_factory`` reads it."""
    module, sep, _ = spec.rpartition(":")
    return bool(sep) and (module.endswith(".py") or "/" in module)


def is_user_spec(spec: str | None) -> bool:
    """Whether ``spec`` is user code: any file spec, or a module outside this package (an
    ``lm:`` spec names a model, not code)."""
    if not spec or spec.startswith(LM_PREFIX):
        return False
    return is_file_spec(spec) or not spec.startswith(PACKAGE_PREFIXES)


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def module_file(module: str) -> Path | None:
    """The source file of an importable module, found on ``sys.path`` without importing it
    (nor its parent packages); None for a built-in, frozen or namespace module, or one not
    found."""
    parts = module.split(".")
    search: list[str] | None = None
    spec = None
    for i, part in enumerate(parts):
        name = ".".join(parts[: i + 1])
        loaded = sys.modules.get(name)
        if loaded is not None and getattr(loaded, "__spec__", None) is not None:
            spec = loaded.__spec__
        else:
            spec = importlib.machinery.PathFinder.find_spec(part if i == 0 else name, search)
        if spec is None:
            return None
        search = list(spec.submodule_search_locations or [])
    origin = getattr(spec, "origin", None)
    if not origin or origin in ("built-in", "frozen") or not Path(origin).is_file():
        return None
    return Path(origin)


def agent_source(spec: str | None) -> dict[str, Any] | None:
    """``agent.source`` of a new record: the user agent's file and its sha256 (see the module
    doc), or None for this package's agents, ``lm:`` models and a module with no source file."""
    if not is_user_spec(spec):
        return None
    assert spec is not None
    module, _, _ = spec.rpartition(":")
    if is_file_spec(spec):
        path = Path(module).expanduser().resolve()
        return {"file": module, "sha256": sha256_file(path)} if path.is_file() else None
    path = module_file(module)
    return {"file": str(path), "sha256": sha256_file(path)} if path is not None else None


def record_spec(record: Mapping[str, Any]) -> str | None:
    """The one agent spec of a record.

    Raises:
        AgentSourceMismatch: ``config.agent_spec`` and ``agent.spec`` are both given and differ.
    """
    shown = (record.get("agent") or {}).get("spec")
    config = record.get("config") or {}
    replayed = config.get("agent_spec", shown)
    if replayed != shown:
        raise AgentSourceMismatch(
            f"{record.get('record_id')}: the record shows agent {shown!r} (agent.spec) but "
            f"names {replayed!r} for replay (config.agent_spec); a record names one agent, so "
            "this record was edited by hand: do not run it, ask its author to make it again"
        )
    return shown


def agent_root(record: Mapping[str, Any]) -> Path:
    """Where a record's agent files must lie (see the module doc, step 2)."""
    where = record.get("_path")
    if not where:
        return Path.cwd().resolve()
    folder = Path(where).expanduser().resolve().parent
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists() or (candidate / "pyproject.toml").is_file():
            return candidate
    return folder


def replay_spec(
    record: Mapping[str, Any],
    *,
    root: str | os.PathLike | None = None,
    trust_unhashed: bool = False,
) -> str:
    """The spec ``verify`` imports for ``record``, after the checks of the module doc.

    A file spec comes back as the absolute path of the checked file (``/abs/x.py:Factory``), so
    the import does not depend on the current directory.

    Args:
        record: a validated record (``_path``, when set, locates its checkout).
        root: the agent root (default: :func:`agent_root`).
        trust_unhashed: import a user agent whose record states no ``agent.source`` hash.

    Raises:
        RecordError: the record names no agent; :class:`AgentSourceMismatch`: the specs
            differ, the file's hash differs from the record's, or the record has no hash and
            ``trust_unhashed`` is false; :class:`~agentbench_poad.leaderboard.runs.PathEscapes`:
            the agent file lies outside the root.
    """
    rid = record.get("record_id")
    spec = record_spec(record)
    if not spec:
        raise RecordError(
            f"{rid}: the record names no agent factory (config.agent_spec), so its agent cannot "
            "be rebuilt; records made with `agentbench-poad evaluate --agent module:Factory` or "
            "`leaderboard add --run` can be verified"
        )
    if not is_user_spec(spec):
        return spec
    base = Path(root).expanduser().resolve() if root is not None else agent_root(record)
    module, _, attr = spec.rpartition(":")
    if is_file_spec(spec):
        written = Path(module).expanduser()
        if written.is_absolute():
            path = written.resolve()
            if not path.is_relative_to(base):
                raise PathEscapes(
                    f"{rid}: agent file {module!r} lies outside the record's agent root {base}; "
                    "a record names its agent file inside its checkout (pass --agent-root DIR "
                    "to name another folder you have reviewed)"
                )
        else:
            path = confine(base, written, f"{rid}: agent file")
        if not path.is_file():
            raise AgentSourceMismatch(
                f"{rid}: agent file {module!r} is not at {path}; run verify from the checkout "
                "the record was made in, or pass --agent-root DIR (the folder its path is "
                "relative to)"
            )
        replayed = f"{path}:{attr}"
    else:
        found = module_file(module)
        if found is None:
            raise AgentSourceMismatch(
                f"{rid}: the agent's module {module!r} is not importable here (no source file "
                "on sys.path); install the package that provides it"
            )
        path, replayed = found.resolve(), spec
        if not path.is_relative_to(base):
            # Any module on sys.path would do otherwise: a record naming a standard-library
            # function (its file's hash is public) would run it with the record's kwargs.
            raise PathEscapes(
                f"{rid}: the agent's module {module!r} is {path}, outside the record's agent "
                f"root {base}; a record's agent code lies inside its checkout (pass --agent-root "
                "DIR to name the folder of an installed package you have reviewed)"
            )
    stated = (record.get("agent") or {}).get("source") or {}
    expected = stated.get("sha256")
    actual = sha256_file(path)
    if not expected:
        if trust_unhashed:
            return replayed
        raise AgentSourceMismatch(
            f"{rid}: the record states no hash of its agent's source (agent.source.sha256), so "
            f"nothing says {path} is the code that made it; review {path} and pass "
            "--trust-unhashed (trust_unhashed=True) to run it anyway, or make the record again"
        )
    if actual != expected:
        raise AgentSourceMismatch(
            f"{rid}: the agent file {path} has sha256 {actual}, but the record was made with "
            f"agent.source.sha256 {expected}; this is not the code that made the record (check "
            "out the commit it was made at, or make the record again)"
        )
    return replayed
