"""Agents for the sweep tests (loaded by path spec, so Ray workers can import them too)."""

from __future__ import annotations

import os

from agentbench_poad.baselines.random import make_random_agent


def make_broken_on(env=None, seed=0, broken_env="", marker=""):  # noqa: ANN001
    """A random agent, except that building it fails on ``broken_env`` while ``marker`` exists."""
    if env is not None and env.spec.id == broken_env and marker and os.path.exists(marker):
        raise RuntimeError(f"agent cannot be built on {broken_env} (test fault)")
    return make_random_agent(env=env, seed=seed)
