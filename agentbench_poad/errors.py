"""Exceptions shared across the package. Every message names the fix."""

from __future__ import annotations


class AgentBenchError(Exception):
    """Base class of the package's own errors."""


class DependencyNotInstalled(AgentBenchError, ImportError):
    """An optional dependency is missing; the message says which extra to install."""

    @classmethod
    def for_extra(cls, module: str, extra: str) -> DependencyNotInstalled:
        return cls(
            f"{module} is not installed; it is part of the '{extra}' extra: "
            f'pip install "agentbench-poad[{extra}]"'
        )


def require(module: str, extra: str):
    """Import ``module`` or raise :class:`DependencyNotInstalled` naming the extra."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise DependencyNotInstalled.for_extra(module, extra) from exc
