"""Every id the package registers passes gymnasium's checker and the text-env contract."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import pytest

from agentbench_poad import check_text_env, env_facts
from agentbench_poad.environments import describe, registered_ids

# DataSciCoding ids run code in a sandbox and some need a dataset cache; their conformance test
# (test_datascicoding_env.py) covers every one of them with a cache the test creates.
RESTRICTED_IDS = [i for i in registered_ids() if env_facts(i).actions == "restricted"]


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


def _fresh(code: str) -> str:
    """Run ``code`` in a fresh interpreter (warnings are errors); return its stdout."""
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_import_package_then_make_in_a_fresh_interpreter():
    """The documented form: `import agentbench_poad` registers every id."""
    code = (
        "import gymnasium as gym\n"
        "import agentbench_poad\n"
        "gym.register_envs(agentbench_poad)\n"
        "env = gym.make('DataSciCoding-airlines-v0')\n"  # no reset: nothing is downloaded
        "print(env.spec.id, type(env.unwrapped).__name__)\n"
        "env = gym.make('Overcooked-TomatoSalad-v0')\n"
        "obs, info = env.reset(seed=0)\n"
        "assert isinstance(obs, str) and info['available_actions']\n"
        "print('ok')\n"
    )
    assert _fresh(code).splitlines() == ["DataSciCoding-airlines-v0 DataSciCodingEnv", "ok"]


@pytest.mark.parametrize("env_id", ["DataSciCoding-airlines-v0", "VirtualHome-Cheese-v0"])
def test_module_prefix_form_needs_no_prior_import(env_id):
    """`gym.make("agentbench_poad:<id>")`: gymnasium imports the package, which registers."""
    code = (
        "import sys\n"
        "import gymnasium as gym\n"
        "assert 'agentbench_poad' not in sys.modules\n"
        f"env = gym.make('agentbench_poad:{env_id}')\n"
        "print(env.spec.id, 'agentbench_poad' in sys.modules)\n"
    )
    assert _fresh(code) == f"{env_id} True"


def test_import_gymnasium_alone_does_not_touch_the_package():
    """No .pth and no import hook: gymnasium knows nothing of us until we are imported."""
    code = (
        "import sys\n"
        "import gymnasium as gym\n"
        # (an editable install's own finder, __editable___agentbench_poad_*, is setuptools')
        "ours = sorted(m for m in sys.modules\n"
        "              if m.split('.')[0] in ('agentbench_poad', '_agentbench_poad_hook'))\n"
        "print(ours, 'Overcooked-TomatoSalad-v0' in gym.registry)\n"
    )
    assert _fresh(code) == "[] False"


def test_importing_the_package_is_cheap():
    """Registration reads task tables only: no torch, docker, pandas or engine is imported."""
    code = (
        "import sys\n"
        "import agentbench_poad\n"
        "heavy = ['torch', 'transformers', 'docker', 'pandas', 'sklearn',\n"
        "         'agentbench_poad.environments.overcooked.engine',\n"
        "         'agentbench_poad.environments.virtualhome.engine',\n"
        "         'agentbench_poad.environments.datascicoding.env',\n"
        "         'agentbench_poad.sandbox']\n"
        "print([m for m in heavy if m in sys.modules])\n"
    )
    assert _fresh(code) == "[]"


def test_registration_is_idempotent():
    """Importing again, reloading or registering again neither warns (-W error) nor duplicates."""
    code = (
        "import importlib\n"
        "import gymnasium as gym\n"
        "import agentbench_poad\n"
        "before = dict(gym.registry)\n"
        "import agentbench_poad.environments\n"
        "agentbench_poad.register_envs()\n"
        "importlib.reload(agentbench_poad)\n"
        "import agentbench_poad.rl.toy as toy\n"
        "toy.register_envs()\n"
        "print(dict(gym.registry) == before, len(agentbench_poad.registered_ids()))\n"
    )
    assert _fresh(code) == f"True {len(registered_ids())}"


@pytest.mark.parametrize(
    "first_import",
    [
        "agentbench_poad.environments.datascicoding.datasets",
        "agentbench_poad.environments.overcooked.env",
        "agentbench_poad.core",
    ],
)
def test_registration_survives_any_import_order(first_import):
    """Importing any one of our modules (which imports the package) registers every id."""
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


def test_spawned_vector_workers_register_through_the_module_form():
    """`gym.make_vec` with the `module:` form, workers in fresh (spawned) interpreters."""
    code = (
        "import gymnasium as gym\n"
        "envs = gym.make_vec('agentbench_poad:Overcooked-TomatoSalad-v0', num_envs=2,\n"
        "                    vectorization_mode='async',\n"
        "                    vector_kwargs={'context': 'spawn', 'shared_memory': False})\n"
        "obs, infos = envs.reset(seed=0)\n"
        "envs.close()\n"
        "print(len(obs), all(isinstance(o, str) for o in obs))\n"
    )
    assert _fresh(code) == "2 True"
