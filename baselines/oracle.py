"""Oracles: ``make_oracle(env)`` returns the anchor agent of the env's family.

Overcooked and VirtualHome get exact optima (the best return the env admits, for every episode
seed: ``oracle_overcooked``, ``oracle_virtualhome``); DataSciCoding's best is not computable,
so its agent is a scripted known-good body named "scripted" on the board, not an upper bound.
An oracle reads the environment *state* (not only the prompt), so it is bound to one env
instance. Each family provides its oracle in ``oracle_<family>.py`` as ``make_<family>_oracle``;
this module only dispatches on the env's family (its registered facts,
:func:`agentbench_poad.registration.family_of_env`).
"""

from __future__ import annotations

import importlib

import gymnasium as gym

from agentbench_poad.agents import Agent
from agentbench_poad.registration import family_of_env

#: env family (``env_facts(env_id).family``) -> "module:factory"
ORACLE_FACTORIES = {
    "overcooked": "agentbench_poad.baselines.oracle_overcooked:make_overcooked_oracle",
    "virtualhome": "agentbench_poad.baselines.oracle_virtualhome:make_virtualhome_oracle",
    "datascicoding": "agentbench_poad.baselines.oracle_datascicoding:make_datascicoding_oracle",
}


def env_family(env: gym.Env) -> str:
    """The family name of an agentbench-poad env (``"overcooked"``, ...)."""
    family = family_of_env(env)
    if family is None:
        raise ValueError(f"{type(env.unwrapped).__name__} is not an agentbench-poad environment")
    return family


def make_oracle(env: gym.Env) -> Agent:
    """An oracle agent for ``env`` (any wrapper around an agentbench-poad env).

    The agent follows the protocol ``act(observation, available_actions) -> str`` and reads the
    state of ``env``: step the same env it was made for.
    """
    family = env_family(env)
    try:
        target = ORACLE_FACTORIES[family]
    except KeyError:
        raise ValueError(f"no oracle for the {family!r} family") from None
    module_name, factory = target.split(":")
    return getattr(importlib.import_module(module_name), factory)(env)
