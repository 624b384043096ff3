"""Agents of agentbench-poad (import name ``agentbench_poad.baselines``).

* :mod:`.oracle` -- scripted agents that solve every task from the environment state;
* :mod:`.random` -- a uniformly random agent over the available actions;
* :mod:`.poad`, :mod:`.ntpo`, :mod:`.twosome` -- the reference RL agents (need the ``train`` extra);
* :mod:`.grpo`, :mod:`.gigpo` -- critic-free group baselines (GRPO, GiGPO) on the same protocol.
* :mod:`.archer_adrl` -- the paper's "ARCHER" as its code ran it (NTPO with another
  action-boundary bootstrap).
* :mod:`.archer` -- the published ArCHer: an off-policy utterance-level critic (Q, V, target
  network, replay buffer) and a token-level actor.

:func:`get_algorithm` finds them by name and users' own algorithms by spec.
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
    "archer-adrl": "agentbench_poad.baselines.archer_adrl:ArcherADRL",
    "archer": "agentbench_poad.baselines.archer:Archer",
}


def get_algorithm(name: str) -> Any:
    """The algorithm class registered as ``name`` (case-insensitive), e.g. ``"poad"``, or the
    user's algorithm class a spec names: ``"mypkg.algos:MyAlgo"`` or
    ``"path/to/my_algorithm.py:MyAlgo"`` (read by :func:`agentbench_poad.agents.load_factory`,
    checked by :func:`agentbench_poad.rl.algorithm.check_algorithm`; docs/agents.md, "Write your
    own algorithm").

    Raises:
        KeyError: for an unknown name, listing the known ones.
        agentbench_poad.rl.algorithm.AlgorithmError: (a ValueError) for a spec that does not
            import or does not name an algorithm, saying what is missing.
    """
    key = name.lower()
    if key not in ALGORITHMS:
        from agentbench_poad.rl.algorithm import is_algorithm_spec, load_algorithm

        if is_algorithm_spec(name):
            return load_algorithm(name, reserved=ALGORITHMS)
        raise KeyError(
            f"unknown agent {name!r}; choose one of {sorted(ALGORITHMS)} or name your own "
            "algorithm class as 'package.module:Class' or 'path/to/file.py:Class'"
        )
    module_name, _, attribute = ALGORITHMS[key].partition(":")
    return getattr(importlib.import_module(module_name), attribute)
