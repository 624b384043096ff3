"""Every id the package registers passes gymnasium's checker and the text-env contract."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import pytest

from agentbench_poad import check_text_env
from agentbench_poad.environments import describe, registered_ids

# DataSciCoding ids run code in a sandbox and some need a dataset cache; their conformance test
# (test_datascicoding_env.py) covers every one of them with a cache the test creates.
RESTRICTED_IDS = [i for i in registered_ids() if not i.startswith("DataSciCoding-")]


def test_registry_is_not_empty():
    assert "Overcooked-TomatoSalad-v0" in registered_ids()
    assert all(describe(i) for i in registered_ids()), "every id needs a one-line description"


@pytest.mark.parametrize("env_id", RESTRICTED_IDS)
def test_check_text_env(env_id):
    env = gym.make(env_id)
    try:
        check_text_env(env)
    finally:
        env.close()


def test_gym_make_needs_no_other_import():
    """`import gymnasium; gym.make(id)` works in a fresh interpreter (registration hook)."""
    code = (
        "import gymnasium as gym, sys\n"
        "env = gym.make('Overcooked-TomatoSalad-v0')\n"
        "obs, info = env.reset(seed=0)\n"
        "assert isinstance(obs, str) and info['available_actions']\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


@pytest.mark.parametrize(
    "first_import",
    [
        "agentbench_poad.environments.datascicoding.datasets",
        "agentbench_poad.environments.overcooked.env",
        "agentbench_poad.core",
    ],
)
def test_registration_survives_any_import_order(first_import):
    """Importing one of our modules before gymnasium must not break (or warn about) registration."""
    code = (
        f"import {first_import}\n"
        "import gymnasium as gym\n"
        "print(gym.make('VirtualHome-Cheese-v0').spec.id)\n"
    )
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "VirtualHome-Cheese-v0"
