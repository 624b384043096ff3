"""``evaluate --agent lm:MODEL --adapter DIR``: an adapter trained elsewhere (TRL, ...) is loaded
onto MODEL and its trainer manifest goes into the record (docs/integrations.md)."""

from __future__ import annotations

import json

import pytest

from agentbench_poad.cli import main

ENV = "Overcooked-TomatoSalad-v0"


@pytest.fixture(scope="module")
def adapter(tiny_model_dir, tmp_path_factory):
    """A peft LoRA adapter (the paper's settings) with non-zero weights, and its manifest."""
    import torch

    from agentbench_poad.models import LoraSettings
    from agentbench_poad.rl.policy import LMPolicy

    policy = LMPolicy(str(tiny_model_dir), lora=LoraSettings())
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.fill_(0.05)
    folder = policy.save_adapter(tmp_path_factory.mktemp("outside") / "adapter")
    manifest = {
        "agent_name": "outside-grpo",
        "trainer": "some.Trainer",
        "trainer_version": "some 1.2.3",
        "config": {"lr": 1e-4, "group": 2},
        "env_id": ENV,
        "steps": 7,
        "env_steps": 448,
        "software": {"some": "1.2.3"},
        "command": "python train.py",
    }
    (folder / "agentbench_trainer.json").write_text(json.dumps(manifest))
    return folder, manifest


def _evaluate(model_dir, adapter_dir, out, *extra):
    return main(
        [
            "evaluate",
            "--agent",
            f"lm:{model_dir}",
            "--adapter",
            str(adapter_dir),
            "--env",
            ENV,
            "--seeds",
            "0",
            "--episodes",
            "1",
            "--env-kwargs",
            '{"max_episode_steps": 3}',
            "--out",
            str(out),
            "--no-progress",
            *extra,
        ]
    )


def test_the_record_states_the_outside_trainer(tiny_model_dir, adapter, tmp_path, capsys):
    folder, manifest = adapter
    assert _evaluate(tiny_model_dir, folder, tmp_path / "rec") == 0, capsys.readouterr().err
    (path,) = (tmp_path / "rec").glob("*.json")
    record = json.loads(path.read_text())
    assert record["agent"]["name"] == "outside-grpo"
    assert record["model"]["adapter"] == str(folder)
    training = record["training"]
    assert training["trainer"] == "some.Trainer"
    assert training["trainer_version"] == "some 1.2.3"
    assert training["trainer_config"] == manifest["config"]
    assert training["env_id"] == ENV
    assert training["total_steps"] == 448 and training["trainer_steps"] == 7
    assert record["config"]["agent_kwargs"]["adapter"] == str(folder)
    import hashlib

    weights = (folder / "adapter_model.safetensors").read_bytes()
    assert training["adapter_sha256"] == hashlib.sha256(weights).hexdigest()


def test_the_adapter_changes_the_policy(tiny_model_dir, adapter):
    from agentbench_poad.baselines.base_model import BaseModelFactory, _load_policy

    folder, _ = adapter
    _load_policy.cache_clear()
    factory = BaseModelFactory(str(tiny_model_dir))

    def scores(agent) -> list[float]:
        import torch

        with torch.no_grad():
            (logp,) = agent.policy.policy.candidate_log_probs(
                ["You see a bowl."], [["take the bowl", "serve"]]
            )
        return logp.tolist()

    plain = scores(factory(greedy=True))
    trained = factory(greedy=True, adapter=str(folder))
    assert trained.name == "lm-adapter-greedy"
    assert scores(trained) != plain
    _load_policy.cache_clear()


def test_a_folder_that_is_no_adapter_or_a_manifest_that_omits_the_trainer(
    tiny_model_dir, adapter, tmp_path, capsys
):
    assert _evaluate(tiny_model_dir, tmp_path, tmp_path / "rec") == 2
    assert "not a peft adapter folder" in capsys.readouterr().err
    folder, manifest = adapter
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in folder.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    (broken / "agentbench_trainer.json").write_text(json.dumps({"trainer": "x"}))
    assert _evaluate(tiny_model_dir, broken, tmp_path / "rec") == 2
    err = capsys.readouterr().err
    assert "trainer_version" in err and "config" in err and len(err.strip().splitlines()) == 1
    for bad in (-1, 2.5, "100", True):
        (broken / "agentbench_trainer.json").write_text(json.dumps({**manifest, "env_steps": bad}))
        assert _evaluate(tiny_model_dir, broken, tmp_path / "rec") == 2
        err = capsys.readouterr().err
        assert "'env_steps' must be a non-negative integer" in err
    assert not (tmp_path / "rec").exists() or not list((tmp_path / "rec").glob("*.json"))


def test_the_report_labels_an_outside_trainer():
    from agentbench_poad.leaderboard.report.common import agent_label

    record = {
        "agent": {"name": "trl-grpo"},
        "model": {"base": "smollm2-135m", "adapter": "runs/x/adapter"},
        "env": {"id": ENV},
        "training": {"env_id": ENV, "runs": [], "trainer_version": "trl 1.16.0"},
    }
    assert agent_label(record) == "trl-grpo (smollm2-135m) [trainer: trl 1.16.0]"
    record["training"] = None
    assert agent_label(record) == "trl-grpo (smollm2-135m)"


def test_an_outside_trainer_states_env_steps_and_its_own_steps_apart():
    """The board compares env steps; an outside trainer's optimiser steps are shown beside them,
    and a record written before `trainer_steps` existed (its total_steps held the trainer's
    count) has unknown env steps, so it is never compared on steps it does not state."""
    from agentbench_poad.leaderboard.report.common import budget_text, env_steps
    from agentbench_poad.leaderboard.report.comparison import budget_difference

    def record(training):
        return {
            "agent": {"name": "x"},
            "model": {"base": "m"},
            "env": {"id": ENV},
            "protocol": {"seeds": [0, 1], "episodes_per_seed": 10, "greedy": True},
            "training": training,
        }

    ours = record({"runs": ["r"], "total_steps": 3072})
    outside = record({"runs": [], "trainer": "t", "total_steps": 3072, "trainer_steps": 24})
    legacy = record({"runs": [], "trainer": "t", "total_steps": 2})
    assert (env_steps(ours), budget_text(ours)) == (3072, "3,072 steps")
    assert (env_steps(outside), budget_text(outside)) == (3072, "3,072 steps (24 trainer steps)")
    assert (env_steps(legacy), budget_text(legacy)) == (None, "2 trainer steps")
    assert budget_difference(outside, ours) is None
    assert budget_difference(legacy, ours) == "2 trainer steps against 3,072 steps"
    assert budget_text(record(None)) is None and env_steps(record(None)) is None
