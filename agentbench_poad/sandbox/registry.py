"""Backend selection (``get_backend``), the one-call entry point ``run_code`` and ``sandbox_status``."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from agentbench_poad.sandbox.api import (
    Backend,
    Limits,
    OutputShapes,
    SandboxResult,
    SandboxUnavailable,
)

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

logger = logging.getLogger(__name__)


def _docker(pool_size: int = 0, **kwargs: Any) -> Backend:
    from agentbench_poad.sandbox.docker_backend import DockerBackend, DockerPool

    if pool_size:
        return DockerPool(pool_size, **kwargs)
    kwargs.pop("limits", None)  # only meaningful for a pool (the limits its containers get)
    return DockerBackend(**kwargs)


def _process(pool_size: int = 0, **kwargs: Any) -> Backend:
    from agentbench_poad.sandbox.process_backend import ProcessBackend

    if pool_size:
        raise ValueError(
            "the process backend has no warm pool; use pool_size=0 or backend='docker'"
        )
    kwargs.pop("limits", None)
    return ProcessBackend(**kwargs)


_ANNOUNCED: set[tuple[int, str]] = set()


def _announce_once(choice: str, why: str) -> None:
    key = (os.getpid(), choice)
    if key in _ANNOUNCED:
        return
    _ANNOUNCED.add(key)
    if choice == "docker":
        logger.info("sandbox backend 'auto' -> docker")
    else:
        logger.warning("sandbox backend 'auto' -> process (weaker isolation): %s", why)


def _auto(pool_size: int = 0, **kwargs: Any) -> Backend:
    from agentbench_poad.sandbox.docker_backend import docker_usable

    usable, why = docker_usable(kwargs.get("image"))
    if usable:
        _announce_once("docker", why)
        return _docker(pool_size, **kwargs)
    _announce_once("process", why)
    kwargs.pop("image", None)
    return _process(0, **kwargs)


#: Backend factories by name; ``auto`` picks docker when the engine answers and the image exists.
BACKENDS: dict[str, Callable[..., Backend]] = {
    "auto": _auto,
    "docker": _docker,
    "process": _process,
}


def get_backend(name: str = "auto", pool_size: int = 0, **kwargs: Any) -> Backend:
    """Create a backend.

    Args:
        name: ``"auto"``, ``"docker"`` or ``"process"``.
        pool_size: Docker only: keep this many pre-started, single-use containers ready.
        **kwargs: Passed to the backend (e.g. ``image=`` for docker, ``limits=`` for a pool,
            ``python=`` for process).

    Returns:
        A :class:`Backend`; call ``close()`` (or use it as a context manager) when done.

    Raises:
        SandboxUnavailable: The backend cannot run here; the message names the fix.
    """
    try:
        factory = BACKENDS[name]
    except KeyError:
        raise ValueError(
            f"unknown sandbox backend {name!r}; choose one of {sorted(BACKENDS)}"
        ) from None
    if pool_size < 0:
        raise ValueError(f"pool_size must be >= 0, got {pool_size}")
    return factory(pool_size, **kwargs)


_DEFAULTS: dict[tuple[int, str], Backend] = {}
_DEFAULTS_LOCK = threading.Lock()


def _default_backend(name: str) -> Backend:
    # One shared instance per process and name: creating a docker backend pings the engine and
    # sweeps stale containers, which is not per-call work. Keyed by pid so forked workers
    # (gymnasium AsyncVectorEnv) build their own client.
    key = (os.getpid(), name)
    with _DEFAULTS_LOCK:
        backend = _DEFAULTS.get(key)
        if backend is None:
            backend = _DEFAULTS[key] = get_backend(name)
        return backend


def run_code(
    source: str,
    entry: str,
    inputs: Mapping[str, np.ndarray],
    *,
    limits: Limits | None = None,
    backend: str | Backend = "auto",
    output_shapes: OutputShapes | None = None,
) -> SandboxResult:
    """Run ``entry(**inputs)`` from the untrusted module ``source`` in a sandbox.

    Args:
        source: A Python module's source.
        entry: Name of a function defined in ``source``.
        inputs: Numeric arrays passed to the entry as keyword arguments (read-only ``.npy``).
        limits: Resource limits (defaults: :class:`Limits`).
        backend: ``"auto"``, ``"docker"``, ``"process"`` or a :class:`Backend` (e.g. a pool).
        output_shapes: Expected shape per output name (``None`` = any size on that axis). When
            given, the entry must return exactly these outputs.

    Returns:
        A :class:`SandboxResult`; failures of the code are results, never exceptions.

    Raises:
        TypeError, ValueError: The call itself is wrong (non-numeric inputs, bad names).
        SandboxUnavailable: The named backend cannot run here.
    """
    chosen = backend if isinstance(backend, Backend) else _default_backend(backend)
    return chosen.run(source, entry, inputs, limits=limits, output_shapes=output_shapes)


class SandboxStatus(dict):
    """``sandbox_status()``'s answer: a dict that prints as a short report."""

    def __str__(self) -> str:
        lines = []
        for name in ("docker", "process"):
            info = self[name]
            mark = "usable" if info["usable"] else "NOT usable"
            lines.append(f"{name:<8} {mark}: {info['why']}")
            if info.get("isolation"):
                lines.append(f"{'':<8} isolation: {info['isolation']}")
        lines.append(f"auto     -> {self['auto']}")
        return "\n".join(lines)


def sandbox_status(image: str | None = None) -> SandboxStatus:
    """Which backends are usable here and why not.

    Returns:
        ``{"docker": {"usable", "why", "image"}, "process": {"usable", "why", "isolation"},
        "auto": "docker" | "process"}``; ``print()`` it for a readable report.
    """
    from agentbench_poad.sandbox.docker_backend import docker_usable
    from agentbench_poad.sandbox.image import image_tag

    tag = image or image_tag()
    usable, why = docker_usable(tag)
    status = SandboxStatus(docker={"usable": usable, "why": why, "image": tag})
    try:
        process = _process()
        status["process"] = {
            "usable": True,
            "why": f"namespaces: {process.mode}",
            "isolation": process.isolation,
        }
    except SandboxUnavailable as exc:  # pragma: no cover - depends on the machine
        status["process"] = {"usable": False, "why": str(exc), "isolation": ""}
    status["auto"] = "docker" if usable else "process"
    return status
