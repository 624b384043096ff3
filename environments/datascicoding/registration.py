"""Registration of the DataSciCoding ids: one ``DataSciCoding-<dataset>-v0`` per table row.

Only the dataset table is imported here (no loader runs, nothing touches the network), so
``import gymnasium`` stays fast and ``gym.make`` never downloads anything: the dataset is
loaded at the first ``reset``.
"""

from __future__ import annotations

import gymnasium as gym

from agentbench_poad.environments.datascicoding.datasets import DATASETS

ENTRY_POINT = "agentbench_poad.environments.datascicoding.env:DataSciCodingEnv"
#: Attempts per episode (the reference's ``max_step``).
MAX_ATTEMPTS = 5


def _describe(spec) -> str:
    rows = spec.shape[0] if spec.shape[0] is not None else f"<={spec.max_rows}"
    return (
        f"write build_model for {spec.description} ({rows} x {spec.shape[1]}, "
        f"{spec.n_classes} classes; {spec.source.label}); reward = mean ROC AUC"
    )


#: One line per registered id, shown by `agentbench-poad envs`.
DESCRIPTIONS: dict[str, str] = {spec.env_id: _describe(spec) for spec in DATASETS.values()}


def register_envs() -> None:
    """Register this family's ids with gymnasium (idempotent)."""
    for spec in DATASETS.values():
        if spec.env_id in gym.registry:
            continue
        gym.register(
            id=spec.env_id,
            entry_point=ENTRY_POINT,
            kwargs={"dataset": spec.name},
            max_episode_steps=MAX_ATTEMPTS,
        )
