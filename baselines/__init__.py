"""Agents of agentbench-poad (import name ``agentbench_poad.baselines``).

* :mod:`.oracle` -- scripted agents that solve every task from the environment state;
* :mod:`.random` -- a uniformly random agent over the available actions;
* :mod:`.poad`, :mod:`.ntpo`, :mod:`.twosome` -- the reference RL agents (need the ``train`` extra);
* :mod:`.grpo`, :mod:`.gigpo` -- critic-free group baselines (GRPO, GiGPO) on the same protocol.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Trainable agents by name, as ``module:Class`` (imported on demand: they need torch).
ALGORITHMS: dict[str, str] = {
    "poad": "agentbench_poad.baselines.poad:POAD",
    "ntpo": "agentbench_poad.baselines.ntpo:NTPO",
    "twosome": "agentbench_poad.baselines.twosome:TWOSOME",
    "grpo": "agentbench_poad.baselines.grpo:GRPO",
    "gigpo": "agentbench_poad.baselines.gigpo:GiGPO",
}


def get_algorithm(name: str) -> Any:
    """The algorithm class registered as ``name`` (case-insensitive), e.g. ``"poad"``.

    Raises:
        KeyError: for an unknown name, listing the known ones.
    """
    key = name.lower()
    if key not in ALGORITHMS:
        raise KeyError(f"unknown agent {name!r}; choose one of {sorted(ALGORITHMS)}")
    module_name, _, attribute = ALGORITHMS[key].partition(":")
    return getattr(importlib.import_module(module_name), attribute)
