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
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    # Tests run with one intra-op thread (OMP_NUM_THREADS=1, set in tests/conftest.py): the tiny
    # model's matmuls are microseconds and extra threads only oversubscribe a small machine.
    from agentbench_poad.rl.models import init_tiny_model

    return init_tiny_model(tmp_path_factory.mktemp("tiny_model"), seed=0)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An even smaller model (hidden size 32) for the trainer and learning tests."""
    pytest.importorskip("torch")
    from agentbench_poad.rl.models import init_tiny_model

    return init_tiny_model(tmp_path_factory.mktemp("model") / "tiny", hidden_size=32)
