"""Scripted oracles: ``make_oracle(env)`` returns an agent that solves the env's task.

An oracle reads the environment *state* (not only the prompt), so it is bound to one env
instance. Each family provides its oracle in ``oracle_<family>.py`` as ``make_<family>_oracle``;
this module only dispatches on the family of ``env.unwrapped``.
"""

from __future__ import annotations

import importlib

import gymnasium as gym

from agentbench_poad.agents import Agent

#: env family (the package under agentbench_poad.environments) -> "module:factory"
ORACLE_FACTORIES = {
    "overcooked": "agentbench_poad.baselines.oracle_overcooked:make_overcooked_oracle",
    "virtualhome": "agentbench_poad.baselines.oracle_virtualhome:make_virtualhome_oracle",
    "datascicoding": "agentbench_poad.baselines.oracle_datascicoding:make_datascicoding_oracle",
}


def env_family(env: gym.Env) -> str:
    """The family name of an agentbench-poad env (``"overcooked"``, ...)."""
    module = type(env.unwrapped).__module__
    prefix = "agentbench_poad.environments."
    if not module.startswith(prefix):
        raise ValueError(f"{type(env.unwrapped).__name__} is not an agentbench-poad environment")
    return module[len(prefix) :].split(".")[0]


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
