"""Fixtures shared by the whole test-suite (keep them generic; add yours below).

Docker: tests marked ``@pytest.mark.docker`` get the sandbox image built once per machine (a file
lock shared by all xdist workers) when a Docker engine answers, and are skipped with the reason
when none does.
"""

from __future__ import annotations

import os
import tempfile

# One intra-op thread per xdist worker: with two torch threads per worker on a 2-core machine the
# tiny-model tests run ~35x slower (oversubscription). Must be set before torch is imported.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import pytest  # noqa: E402

from tests.fixtures_ray import ray_cluster  # noqa: E402,F401  (module fixture)
from tests.fixtures_rl import tiny_model, tiny_model_dir, tiny_word_model  # noqa: E402,F401

_IMAGE_LOCK = os.path.join(tempfile.gettempdir(), "agentbench-poad-sandbox-image.lock")


def _docker_client():
    """A client to a Docker engine that answers, or the reason there is none."""
    try:
        import docker

        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means "no engine"
        return None, f"{type(exc).__name__}: {str(exc)[:200]}"
    return client, ""


@pytest.fixture(scope="session")
def sandbox_image() -> str:
    """Tag of the sandbox image, built offline/online on first use (once across workers)."""
    client, why = _docker_client()
    if client is None:
        pytest.skip(f"no Docker engine answers ({why}); start dockerd to run the docker tests")
    from filelock import FileLock

    from agentbench_poad.sandbox import SandboxUnavailable
    from agentbench_poad.sandbox.image import build_image, image_exists, image_tag

    tag = image_tag()
    if not image_exists(tag, client):
        # The first worker builds (about two minutes offline); the others wait on the lock.
        with FileLock(_IMAGE_LOCK, timeout=1800):
            if not image_exists(tag, client):
                try:
                    build_image("auto", tag=tag, progress=lambda line: None)
                except SandboxUnavailable as exc:
                    pytest.skip(f"cannot build the sandbox image here: {exc}")
    client.close()
    return tag


@pytest.fixture(autouse=True)
def _docker_marker(request: pytest.FixtureRequest) -> None:
    """Give every ``@pytest.mark.docker`` test the image (or its skip reason)."""
    if request.node.get_closest_marker("docker") is not None:
        request.getfixturevalue("sandbox_image")
