"""The environment families of agentbench-poad (import name ``agentbench_poad.environments``).

Each family has one engine and one gymnasium entry point; its tasks are rows of a data table and
``register_envs`` turns every row into an id ``<Family>-<Task>-v<N>``. Registration imports only
the task tables, never an engine, so ``import gymnasium`` stays fast.
"""

from __future__ import annotations

# gymnasium is imported inside the functions: importing it here would fire the registration hook
# (_agentbench_poad_hook) while this module is half-initialised, before register_envs exists.

FAMILIES = ("overcooked", "virtualhome", "datascicoding")


def register_envs() -> None:
    """Register every family's ids with gymnasium (idempotent)."""
    import importlib

    for family in FAMILIES:
        module = importlib.import_module(f"agentbench_poad.environments.{family}.registration")
        module.register_envs()


def describe(env_id: str) -> str:
    """The one-line description of a registered id (``agentbench-poad envs`` prints it)."""
    import importlib

    for family in FAMILIES:
        module = importlib.import_module(f"agentbench_poad.environments.{family}.registration")
        line = getattr(module, "DESCRIPTIONS", {}).get(env_id)
        if line:
            return line
    return ""


def registered_ids(family: str | None = None) -> list[str]:
    """The ids this package registered, optionally of one family, sorted."""
    import gymnasium as gym

    register_envs()
    ids = []
    for env_id, spec in gym.registry.items():
        entry = spec.entry_point if isinstance(spec.entry_point, str) else ""
        if entry.startswith("agentbench_poad.environments."):
            if family is None or entry.startswith(f"agentbench_poad.environments.{family}"):
                ids.append(env_id)
    return sorted(ids)
