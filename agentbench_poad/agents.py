"""The one protocol for everything that acts in a text environment.

An agent maps the current observation (the prompt) and, in restricted-action environments, the
list of available actions to one action string. Open-action environments (DataSciCoding) pass
``available_actions=None``. Scripted agents (oracle, random), LLM policies and users' own agents
all implement this protocol; the leaderboard and the trainer only ever call it.

Agents are named on the command line and in run records by a *spec*: ``"package.module:Factory"``
or ``"path/to/my_agent.py:Factory"``. :func:`load_factory` is the one place that reads a spec;
:func:`agent_factory` turns a spec, a class/factory or an agent instance into
``factory(env, seed) -> agent``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agentbench_poad.version import __version__


@runtime_checkable
class Agent(Protocol):
    """Anything with ``act(observation, available_actions) -> str``.

    Optional extensions, used when present:

    * ``act_batch(observations, available_actions) -> list[str]`` for vectorised environments;
    * ``reset(seed: int | None = None)`` called at the start of every episode.
    """

    def act(self, observation: str, available_actions: Sequence[str] | None) -> str: ...


def act_batch(
    agent: Agent,
    observations: Sequence[str],
    available_actions: Sequence[Sequence[str] | None],
) -> list[str]:
    """Act on a batch, using the agent's own ``act_batch`` when it has one."""
    if len(observations) != len(available_actions):
        raise ValueError(
            f"got {len(observations)} observations but {len(available_actions)} action lists"
        )
    batched = getattr(agent, "act_batch", None)
    if callable(batched):
        actions = list(batched(list(observations), list(available_actions)))
    else:
        actions = [agent.act(o, a) for o, a in zip(observations, available_actions)]
    if len(actions) != len(observations):
        raise ValueError(
            f"agent returned {len(actions)} actions for {len(observations)} observations"
        )
    return actions


def reset_agent(agent: object, seed: int | None = None) -> None:
    """Call ``agent.reset(seed=...)`` when the agent defines it."""
    reset = getattr(agent, "reset", None)
    if callable(reset):
        reset(seed=seed)


# -- agents from specs ---------------------------------------------------------------------------
def load_factory(spec: str) -> Callable[..., Any]:
    """Resolve an agent spec to its class or factory callable.

    Specs: ``"package.module:Factory"`` (an importable module) or ``"path/to/file.py:Factory"``
    (a file, imported under a private module name). ``Factory`` may be dotted
    (``"module:Class.create"``). ``"lm:MODEL"`` is the untrained model ``MODEL`` as an agent
    (a named model such as ``smollm2-135m``, a .gguf file, a model directory or a hub id; see
    :mod:`agentbench_poad.baselines.base_model`).

    Raises:
        ValueError: the spec is malformed, or the module / attribute does not exist.
    """
    if spec.startswith("lm:"):
        from agentbench_poad.baselines.base_model import BaseModelFactory

        return BaseModelFactory(spec[len("lm:") :])
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError(
            f"agent spec {spec!r} must look like 'package.module:Factory' or "
            "'path/to/my_agent.py:Factory'"
        )
    if module_name.endswith(".py") or "/" in module_name:
        path = Path(module_name).expanduser().resolve()
        if not path.exists():
            raise ValueError(f"agent file {path} does not exist (from spec {spec!r})")
        # One private module name per file, registered in sys.modules as an import would be
        # (dataclasses and pickle look a class's module up there).
        digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
        name = f"_agentbench_user_{_identifier(path.stem)}_{digest}"
        mod_spec = importlib.util.spec_from_file_location(name, path)
        if mod_spec is None or mod_spec.loader is None:
            raise ValueError(f"cannot import {path} (from spec {spec!r})")
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[name] = module
        try:
            mod_spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ValueError(
                f"cannot import {module_name!r} for agent spec {spec!r}: {exc}; "
                "is the package installed / the name spelled right?"
            ) from exc
    try:
        target = module
        for part in attr.split("."):
            target = getattr(target, part)
    except AttributeError:
        raise ValueError(
            f"{module_name!r} has no attribute {attr!r} (agent spec {spec!r})"
        ) from None
    if not callable(target):
        raise ValueError(f"{spec!r} is not callable; name a class or a factory function")
    return target


def _identifier(text: str) -> str:
    return re.sub(r"\W", "_", text)


def _call_factory(factory: Callable[..., Any], env: Any, seed: int, kwargs: dict[str, Any]) -> Any:
    """Call ``factory`` passing ``env`` / ``seed`` only if its signature takes them."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    call_kwargs = dict(kwargs)
    if "env" in params:
        call_kwargs.setdefault("env", env)
    if "seed" in params:
        call_kwargs.setdefault("seed", seed)
    return factory(**call_kwargs)


def agent_factory(
    agent: Any, kwargs: dict[str, Any] | None = None
) -> tuple[Callable[[Any, int], Any], bool]:
    """Normalise ``agent`` into ``factory(env, seed) -> agent``.

    Args:
        agent: an agent (has ``act``), a class / factory callable (called with ``env=`` and/or
            ``seed=`` when its signature takes them, plus ``kwargs``), or a spec for
            :func:`load_factory`.
        kwargs: keyword arguments for the factory.

    Returns:
        The factory and whether it builds a fresh agent per call (False for an instance, which
        is reused as is).
    """
    kwargs = dict(kwargs or {})
    if isinstance(agent, str):
        agent = load_factory(agent)
    if hasattr(agent, "act") and not isinstance(agent, type):
        instance = agent
        return (lambda env, seed: instance), False
    if callable(agent):
        factory = agent
        return (lambda env, seed: _call_factory(factory, env, seed, kwargs)), True
    raise TypeError(f"{agent!r} is neither an agent (with act()) nor a factory of agents")


#: Names that reach file names, pages and terminals (a record's agent name, env id and record id):
#: a letter or digit, then letters, digits, ``.``, ``_`` or ``-``; at most 200 characters.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def check_agent_name(name: str) -> str:
    """``name`` if the board can store it (:data:`SAFE_NAME`), else a ``ValueError`` naming the
    fix, raised before any episode runs (the store refuses such a record only after the work)."""
    if not SAFE_NAME.fullmatch(name):
        raise ValueError(
            f"agent name {name!r} cannot name a board row: use letters, digits, '.', '_' or '-' "
            "(starting with a letter or digit, at most 200 characters); set the agent's `name` "
            "attribute"
        )
    return name


def agent_display_name(agent_obj: Any, factory: Any = None) -> str:
    """The board's name of an agent: its ``name`` attribute, else its factory's or class name."""
    name = getattr(agent_obj, "name", None)
    if isinstance(name, str) and name:
        return name
    if factory is not None and not isinstance(factory, type) and callable(factory):
        fname = getattr(factory, "__name__", "")
        if fname.startswith("make_"):
            fname = fname[len("make_") :]
            for tail in ("_agent", "_oracle"):
                if fname.endswith(tail) and len(fname) > len(tail):
                    fname = fname[: -len(tail)]
            return fname
    return type(agent_obj).__name__


def agent_version(agent_obj: Any) -> str:
    """The agent's ``version`` attribute, else its module's ``__version__``, else ours."""
    version = getattr(agent_obj, "version", None)
    if version is None:
        module = inspect.getmodule(type(agent_obj))
        version = getattr(module, "__version__", None)
    return str(version) if version is not None else f"agentbench-poad {__version__}"
