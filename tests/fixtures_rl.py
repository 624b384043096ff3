"""Session fixtures for the RL tests: a tiny random causal LM on disk.

Load it as a plugin (``pytest_plugins = ["tests.fixtures_rl"]`` in ``tests/conftest.py``) or
import the fixture into a test module.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-init Llama-style model with a byte-level tokenizer, built once per session.

    Under pytest-xdist each worker builds its own copy in its own temp dir.
    """
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    # The tiny model's matmuls are microseconds; on a small shared machine (and under xdist,
    # one process per core) intra-op threads only oversubscribe the cores: measured 35x slower
    # with 2 threads than with 1 under load. Tests that use the tiny model run single-threaded.
    torch.set_num_threads(1)
    from agentbench_poad.rl.models import init_tiny_model

    return init_tiny_model(tmp_path_factory.mktemp("tiny_model"), seed=0)
