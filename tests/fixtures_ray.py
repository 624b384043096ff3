"""A local Ray cluster for the tests that need one (skipped with the reason when Ray is absent).

Module-scoped: each test module that asks for it starts a 2-CPU cluster in this process and shuts
it down afterwards. The repository root goes on the workers' ``PYTHONPATH`` so that Ray can import
functions defined in ``tests/`` by reference.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ray_cluster():
    """``ray`` connected to a fresh local cluster with 2 CPUs."""
    ray = pytest.importorskip(
        "ray", reason="Ray is not installed (pip install 'agentbench-poad[ray]')"
    )
    if ray.is_initialized():
        ray.shutdown()
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    # Workers inherit the driver's environment: one BLAS thread each on a small machine.
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()
