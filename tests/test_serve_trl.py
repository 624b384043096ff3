"""Opt-in (``pytest -m trl``): TRL's GRPOTrainer trains SmolLM2 against a served Overcooked for
two steps (examples/trl_grpo_overcooked.py) and the adapter becomes a board record."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.trl]

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "trl_grpo_overcooked.py"


@pytest.fixture(scope="module")
def smollm2() -> str:
    pytest.importorskip("trl", reason="the openenv extra is not installed")
    pytest.importorskip("openenv.core", reason="the openenv extra is not installed")
    from agentbench_poad.models import ModelNotAvailable, resolve_model

    try:
        return resolve_model("smollm2-135m", download=False)
    except ModelNotAvailable as exc:
        pytest.skip(str(exc))


def _example():
    spec = importlib.util.spec_from_file_location("trl_grpo_overcooked", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_trl_trains_on_the_served_env_and_the_adapter_reaches_the_board(smollm2, tmp_path, capsys):
    from agentbench_poad.cli import main

    os.environ.setdefault("AGENTBENCH_POAD_OFFLINE", "1")
    out = tmp_path / "trl-run"
    assert _example().main(["--steps", "2", "--max-turns", "3", "--out", str(out)]) == 0
    adapter = out / "adapter"
    assert (adapter / "adapter_config.json").is_file()
    assert (adapter / "adapter_model.safetensors").is_file()
    manifest = json.loads((adapter / "agentbench_trainer.json").read_text())
    assert manifest["trainer"].startswith("trl.GRPOTrainer")
    assert manifest["steps"] == 2 and manifest["episodes"] == 4  # 2 steps x a group of 2
    assert 4 <= manifest["env_steps"] <= 4 * 3  # 4 episodes of 1 to 3 actions
    assert manifest["software"]["trl"] and manifest["software"]["openenv-core"]

    records = tmp_path / "records"
    code = main(
        [
            "evaluate",
            "--agent",
            "lm:smollm2-135m",
            "--adapter",
            str(adapter),
            "--env",
            "Overcooked-TomatoSalad-v0",
            "--seeds",
            "100",
            "--episodes",
            "1",
            "--env-kwargs",
            '{"max_episode_steps": 5}',
            "--out",
            str(records),
            "--no-progress",
        ]
    )
    assert code == 0, capsys.readouterr().err
    (path,) = [p for p in records.glob("*.json")]
    record = json.loads(path.read_text())
    assert record["agent"]["name"] == "trl-grpo"
    assert record["model"]["adapter"] == str(adapter)
    training = record["training"]
    assert training["trainer"] == manifest["trainer"]
    assert training["trainer_version"] == manifest["trainer_version"]
    assert training["trainer_config"] == manifest["config"]
    assert training["total_steps"] == manifest["env_steps"] and training["trainer_steps"] == 2
