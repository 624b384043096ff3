"""An OpenEnv server for every registered id, and our client of it.

``agentbench-poad serve ID`` serves one id; trainers that speak OpenEnv (TRL's GRPOTrainer,
anything built on ``openenv.core.EnvClient``) connect to it. Needs the ``openenv`` extra
(``pip install "agentbench-poad[openenv]"``). See docs/integrations.md.

* :mod:`~agentbench_poad.serve.models` -- the wire types (action text; observation with prompt,
  offered actions, reward, terminated, truncated, success, action validity and info).
* :mod:`~agentbench_poad.serve.environment` -- :class:`ServedEnv`, one gymnasium env per session.
* :mod:`~agentbench_poad.serve.app` -- :func:`make_app`, :func:`serve`, :class:`ServerThread`.
* :mod:`~agentbench_poad.serve.client` -- :class:`TextEnvClient` (OpenEnv ``EnvClient``) and
  :class:`RemoteTextEnv` (gymnasium-shaped).

Importing this package imports nothing heavy; the names below load their module on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "TextAction": "models",
    "TextObservation": "models",
    "TextEnvState": "models",
    "ServedEnv": "environment",
    "SessionClosed": "environment",
    "live_envs": "environment",
    "ServerThread": "app",
    "UnknownEnvId": "app",
    "check_env_id": "app",
    "make_app": "app",
    "serve": "app",
    "RemoteTextEnv": "client",
    "ServerError": "client",
    "TextEnvClient": "client",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agentbench_poad.serve' has no attribute {name!r}")
    return getattr(importlib.import_module(f"agentbench_poad.serve.{module}"), name)


__all__ = sorted(_EXPORTS)
