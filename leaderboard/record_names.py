"""What a record names, checked with no file opened and nothing it names imported (issue 64).

:func:`check_record_names` runs on every read of a record
(:func:`~agentbench_poad.leaderboard.records.read_record`) and on every add, so ``list`` and
``report`` skip a refused record with a warning. What it refuses, and why, is described in
:mod:`agentbench_poad.leaderboard.loadable` (which re-exports these names and adds the checks
that open files: the replay's resolver and the content hashes).

The module sits below :mod:`~agentbench_poad.leaderboard.records` (the record schema module
everyone reads) and imports none of the leaderboard modules above it, so reading a record
pulls in no part of the replay machinery.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agentbench_poad.leaderboard.schema import RecordError

__all__ = [
    "ADAPTER_KWARG",
    "EXECUTION_ENV_KWARGS",
    "IDENTITY_ENV_KWARGS",
    "LABEL_ENV_KWARGS",
    "NotLoadable",
    "RUN_AGENT_SPEC",
    "check_agent_spec",
    "check_env_id",
    "check_env_kwargs",
    "check_record_names",
    "is_package_agent",
]

#: Env kwargs that choose how an env runs, not what it scores (DataSciCoding's code sandbox):
#: they neither name an anchor record nor keep a row from its anchors.
EXECUTION_ENV_KWARGS = frozenset({"sandbox"})
#: Task env kwargs that every record's id and board label name, whatever the agent: the prompt an
#: agent saw changes what its score means (DataSciCoding's ``prompt_style``).
LABEL_ENV_KWARGS = frozenset({"prompt_style"})

#: Env kwargs that are part of a row's identity (see :mod:`~agentbench_poad.leaderboard.loadable`),
#: with their value's check: the label kwargs of every record's id and label, and the episode cap anchors are keyed by.
IDENTITY_ENV_KWARGS: Mapping[str, tuple[type, str]] = {
    "max_episode_steps": (int, "a positive integer"),
    **dict.fromkeys(LABEL_ENV_KWARGS, (str, "a string")),
}
#: The factory of records made from training runs
#: (:data:`agentbench_poad.leaderboard.provenance.RUN_AGENT_SPEC`).
RUN_AGENT_SPEC = "agentbench_poad.leaderboard.from_run:load_run_agent"
#: Package agent factories a record may name: a top-level name of a baselines module.
_BASELINE_SPEC = re.compile(r"^agentbench_poad\.baselines\.[a-z_][a-z0-9_]*:[A-Za-z][A-Za-z0-9_]*$")
#: The agent kwarg that names an adapter folder the agent loads (``lm:`` agents).
ADAPTER_KWARG = "adapter"


class NotLoadable(RecordError):
    """A record names something the tools may not load (or not as it names it)."""


def check_env_id(env_id: Any, what: str = "env.id", *, registered: bool = False) -> str:
    """``env_id`` if it is a plain gymnasium id (registered here, with ``registered``).

    Raises:
        NotLoadable: it is not a string, it has gymnasium's ``module:`` prefix (making the env
            would import that module), or (``registered``) no env of that id is registered.
    """
    if not isinstance(env_id, str) or not env_id:
        raise NotLoadable(f"{what} must be an env id (a non-empty string), got {env_id!r}")
    if ":" in env_id:
        raise NotLoadable(
            f"{what} {env_id!r} names a module to import before the id ('module:Env-v0'); a "
            "record names a registered env id only (see `agentbench-poad envs`), so that no "
            "tool imports code a record names; make the record again with the plain id"
        )
    if registered:
        import gymnasium as gym

        import agentbench_poad  # noqa: F401 - registers the package's ids

        if gym.registry.get(env_id) is None:
            raise NotLoadable(
                f"{what} {env_id!r} is not a registered env id here (see `agentbench-poad "
                "envs`); the ids of another package are registered by importing it first"
            )
    return env_id


def check_env_kwargs(env_kwargs: Any, what: str = "config.env_kwargs") -> dict[str, Any]:
    """``env_kwargs`` if each is an execution kwarg or part of the row's identity.

    Raises:
        NotLoadable: naming the first kwarg that is neither, or a value of the wrong type.
    """
    if env_kwargs is None:
        return {}
    if not isinstance(env_kwargs, Mapping):
        raise NotLoadable(f"{what} must be an object, got {type(env_kwargs).__name__}")
    for key, value in env_kwargs.items():
        if key in EXECUTION_ENV_KWARGS:
            if not isinstance(value, str):
                raise NotLoadable(f"{what}.{key} must be a backend's name, got {value!r}")
            continue
        if key not in IDENTITY_ENV_KWARGS:
            allowed = sorted({*EXECUTION_ENV_KWARGS, *IDENTITY_ENV_KWARGS})
            raise NotLoadable(
                f"{what} sets {key!r}, which changes the task but is not part of the row's "
                f"identity (its id and label), so the row would show one task and replay "
                f"another; a record may set only {', '.join(allowed)}: register an env id "
                "whose task has that setting, and evaluate that id"
            )
        kind, text = IDENTITY_ENV_KWARGS[key]
        if isinstance(value, bool) or not isinstance(value, kind) or (kind is int and value < 1):
            raise NotLoadable(f"{what}.{key} must be {text}, got {value!r}")
    return dict(env_kwargs)


def is_package_agent(spec: str) -> bool:
    """Whether ``spec`` names this package's code (not a file): ``agentbench_poad.*``."""
    from agentbench_poad.leaderboard.agent_source import PACKAGE_PREFIXES, is_file_spec

    return spec.startswith(PACKAGE_PREFIXES) and not is_file_spec(spec)


def check_agent_spec(spec: Any, what: str = "agent.spec") -> str | None:
    """``spec`` if a record may name it (see :mod:`~agentbench_poad.leaderboard.loadable`; no
    import).

    Raises:
        NotLoadable: package code that is not an agent factory, or not a string.
    """
    if spec is None:
        return None
    if not isinstance(spec, str) or not spec:
        raise NotLoadable(f"{what} must be an agent spec (a string), got {spec!r}")
    if spec.startswith("lm:") or spec == RUN_AGENT_SPEC or not is_package_agent(spec):
        return spec  # a model; the trained-run factory; user code (hashed, checked by verify)
    if not _BASELINE_SPEC.match(spec):
        raise NotLoadable(
            f"{what} {spec!r} names package code that is not an agent factory; a record's "
            "package agent is a factory of agentbench_poad.baselines (module:Name), "
            f"{RUN_AGENT_SPEC} or lm:MODEL; make the record again with the agent's own spec"
        )
    return spec


def check_record_names(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """The checks of a read (see :mod:`~agentbench_poad.leaderboard.loadable`): nothing is opened
    or imported.

    Returns:
        ``record``, unchanged.

    Raises:
        NotLoadable: naming the field, why, and the fix.
    """
    rid = record.get("record_id")
    config = record.get("config") or {}
    training = record.get("training") or {}
    try:
        check_env_id((record.get("env") or {}).get("id"), "env.id")
        for what, value in (
            ("config.env_id", config.get("env_id")),
            ("training.env_id", training.get("env_id") if isinstance(training, Mapping) else None),
        ):
            if value is not None:
                check_env_id(value, what)
        check_env_kwargs(config.get("env_kwargs"))
        check_agent_spec((record.get("agent") or {}).get("spec"))
        check_agent_spec(config.get("agent_spec"), "config.agent_spec")
        for what, kwargs in (
            ("config.agent_kwargs", config.get("agent_kwargs")),
            ("agent.kwargs", (record.get("agent") or {}).get("kwargs")),
        ):
            named = (kwargs or {}).get(ADAPTER_KWARG) if isinstance(kwargs, Mapping) else None
            if named is not None:
                _check_adapter_name(named, f"{what}.{ADAPTER_KWARG}")
    except NotLoadable as exc:
        raise NotLoadable(f"{rid}: {exc}") from None
    return record


def _check_adapter_name(named: Any, what: str) -> None:
    """An ``adapter`` kwarg names a folder; a relative one does not climb out with ``..``."""
    from agentbench_poad.leaderboard.runs import PathEscapes, check_relative

    if not isinstance(named, str) or not named:
        raise NotLoadable(f"{what} must name an adapter folder, got {named!r}")
    try:
        check_relative(named, what)
    except PathEscapes as exc:
        raise NotLoadable(str(exc)) from None
