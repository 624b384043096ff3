"""Helpers shared by the command modules."""

from __future__ import annotations

import argparse


def add_command(subparsers, name: str, help: str, description: str | None = None):  # noqa: A002
    """Add a sub-command whose ``--help`` shows defaults and keeps paragraph breaks."""
    from agentbench_poad.cli import _Formatter

    return subparsers.add_parser(
        name, help=help, description=description or help, formatter_class=_Formatter
    )


def die(message: str, code: int = 2) -> int:
    """Print an error to stderr and return the exit code (``return die(...)`` in a command)."""
    import sys

    print(f"agentbench-poad: error: {message}", file=sys.stderr)
    return code


# -- checks that run before any work (no model loaded, no env made, no container started) -------
# Each returns None when the value is fine, else the one-line message for ``die``; a command runs
# them all first (``first_error``) so a typo costs nothing.


def first_error(*messages: str | None) -> str | None:
    """The first message that is not None (the checks in the order the user typed them)."""
    return next((m for m in messages if m), None)


def check_env_id(env_id: str | None, flag: str = "--env") -> str | None:
    """An env id that gymnasium knows (ours are registered by importing the package)."""
    if env_id is None:
        return None
    import difflib

    import gymnasium as gym

    import agentbench_poad  # noqa: F401  (registers the ids)

    name = env_id.split(":", 1)[1] if ":" in env_id else env_id
    if ":" in env_id:
        import importlib

        try:
            importlib.import_module(env_id.split(":", 1)[0])
        except ImportError as exc:
            return f"{flag}: cannot import the module of {env_id!r} ({exc})"
    if name in gym.registry:
        return None
    close = difflib.get_close_matches(name, list(gym.registry), n=1, cutoff=0.75)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown environment id {env_id!r}{hint}; see `agentbench-poad envs`"


def check_agent_env(agent: str, env_id: str) -> str | None:
    """A reference agent that can act in ``env_id`` (TWOSOME needs offered actions)."""
    from agentbench_poad.baselines import get_algorithm
    from agentbench_poad.registration import env_facts

    try:
        algorithm = get_algorithm(agent)
    except KeyError as exc:
        return str(exc.args[0])
    except ValueError as exc:  # a user's spec that does not import or is not an algorithm
        return str(exc)
    if env_facts(env_id).actions == "open" and not getattr(
        algorithm, "supports_open_actions", True
    ):
        return (
            f"{algorithm.__name__} needs a list of offered actions, but {env_id} is an "
            "open-action environment; train POAD or NTPO there"
        )
    return None


def check_model(model: str | None, flag: str = "--model") -> str | None:
    """A model reference that can resolve, judged without loading or fetching anything.

    Accepted: an existing directory or ``.gguf`` file, a named model, or a string that can only
    be a hub id. A path that does not exist (absolute, ``./``, ``~``, ``.gguf``, or with more
    than one ``/``) is an error, and so is a bare name close to a named model (a typo).
    """
    if model is None:
        return None
    import difflib
    import os
    from pathlib import Path

    text = os.fspath(model)
    path = Path(text).expanduser()
    if path.exists():
        if text.lower().endswith(".gguf") and not path.is_file():
            return f"{flag}: {text!r} is not a .gguf file"
        return None
    from agentbench_poad.models.named import NAMED_MODELS

    if text in NAMED_MODELS:
        return None
    looks_like_path = (
        text.startswith(("/", "./", "../", "~"))
        or text.lower().endswith(".gguf")
        or text.count("/") > 1
        or (os.sep != "/" and os.sep in text)
    )
    if looks_like_path:
        return (
            f"{flag}: {text!r} does not exist; pass an existing model directory or .gguf file, "
            "a named model (`agentbench-poad model list`) or a hub id"
        )
    close = difflib.get_close_matches(text, list(NAMED_MODELS), n=2, cutoff=0.75)
    if "/" not in text and close:
        return (
            f"{flag}: {text!r} is not a named model; did you mean "
            f"{' or '.join(map(repr, close))}? (`agentbench-poad model list`)"
        )
    return None


def check_at_least(value: float | None, minimum: float, flag: str) -> str | None:
    """A number option that must be at least ``minimum`` (None: not given)."""
    if value is None or value >= minimum:
        return None
    return f"{flag} must be >= {minimum:g}, got {value:g}"


def check_file(path: str | None, flag: str) -> str | None:
    """A file that must exist and be readable."""
    if path is None:
        return None
    from pathlib import Path

    p = Path(path).expanduser()
    if not p.is_file():
        return f"{flag}: {path} is not a file" if p.exists() else f"{flag}: {path}: no such file"
    return None


def check_device(device: str | None, flag: str = "--device") -> str | None:
    """A torch device this machine has (``cuda`` needs a visible GPU), judged before any model
    loads (:func:`~agentbench_poad.models.loading.device_problem`)."""
    if device is None or device == "auto":
        return None
    from agentbench_poad.models.loading import device_problem

    problem = device_problem(device)
    return f"{flag}: {problem}" if problem else None


def check_run_device(run: str | None, device: str | None, flag: str = "--device") -> str | None:
    """The device a run's policy will load on: ``device``, else the run's own (its
    ``config.json``), which may name a GPU this machine does not have."""
    if device is not None or run is None:
        return check_device(device, flag)
    import json
    from pathlib import Path

    try:
        config = json.loads((Path(run).expanduser() / "config.json").read_text())
        run_device = config["algorithm"]["device"]
    except (OSError, ValueError, KeyError, TypeError):
        return None  # check_run_dir reports an unreadable run
    problem = check_device(run_device, flag)
    return f"{problem} (the run was trained on {run_device!r}; pass --device)" if problem else None


def check_run_dir(path: str | None, flag: str = "--run") -> str | None:
    """A training run directory (written by `agentbench-poad train`)."""
    if path is None:
        return None
    from pathlib import Path

    p = Path(path).expanduser()
    if not p.is_dir():
        return f"{flag}: {path}: no such directory"
    if not (p / "config.json").is_file():
        return (
            f"{flag}: {path} is not a run directory (no config.json; see `agentbench-poad train`)"
        )
    return None


__all__ = [
    "add_command",
    "argparse",
    "check_agent_env",
    "check_at_least",
    "check_device",
    "check_env_id",
    "check_file",
    "check_model",
    "check_run_device",
    "check_run_dir",
    "die",
    "first_error",
]
