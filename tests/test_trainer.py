"""The trainer: run directory, logging, checkpoint/resume, evaluation, CLI."""

from __future__ import annotations

import json
import time

import pytest

torch = pytest.importorskip("torch")

from agentbench_poad.baselines import get_algorithm  # noqa: E402
from agentbench_poad.rl.run_dir import RunDirectory, TensorBoard  # noqa: E402
from agentbench_poad.rl.trainer import (  # noqa: E402
    TIMING_KEYS,
    evaluate_agent,
    latest_checkpoint,
    load_agent,
    train,
)
from tests.fixtures_rl import small_overrides  # noqa: E402

ENV = "CaseStudy-Microwave-v0"
SMALL = small_overrides(keep_checkpoints=2)


def lines(run_dir):
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        for key in TIMING_KEYS:
            record.pop(key)
        out.append(record)
    return out


def tensorboard_values(run_dir, tag):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tb"))
    events.Reload()
    return [(event.step, event.value) for event in events.Scalars(tag)]


def tensorboard_steps(run_dir, tag):
    return [step for step, _ in tensorboard_values(run_dir, tag)]


def weights(run_dir):
    ckpt = latest_checkpoint(run_dir)
    from safetensors.torch import load_file

    adapter = load_file(str(next((ckpt / "adapter").glob("*.safetensors"))))
    agent = torch.load(ckpt / "agent.pt", weights_only=True)
    return adapter, agent["critic"], agent["policy_optimizer"]["state"]


def test_resume_continues_exactly(tiny_model, tmp_path, monkeypatch):
    steps = 4 * 2 * 3  # 4 updates
    full = train(
        get_algorithm("poad"),
        ENV,
        tiny_model,
        total_steps=steps,
        seed=3,
        out=tmp_path / "full",
        overrides=SMALL,
        progress=False,
    )
    part = tmp_path / "part"
    save = RunDirectory.save_checkpoint

    def killed_before_third_checkpoint(run, update, *args, **kwargs):
        if update == 3:  # update 3 is logged (metrics, TensorBoard) but never checkpointed
            raise KeyboardInterrupt
        return save(run, update, *args, **kwargs)

    monkeypatch.setattr(RunDirectory, "save_checkpoint", killed_before_third_checkpoint)
    with pytest.raises(KeyboardInterrupt):
        train(
            get_algorithm("poad"),
            ENV,
            tiny_model,
            total_steps=steps,
            seed=3,
            out=part,
            overrides=SMALL,
            progress=False,
        )
    monkeypatch.undo()
    assert len(lines(part)) == 3 and latest_checkpoint(part).name == "update_000002"
    with open(part / "metrics.jsonl", "a") as handle:  # and a line cut short by the kill
        handle.write('{"update": 4, "env_')
    train(
        get_algorithm("poad"),
        ENV,
        tiny_model,
        total_steps=steps,
        seed=3,
        out=part,
        overrides=SMALL,
        progress=False,
        resume=True,
    )
    assert lines(part) == lines(full)
    assert [r["update"] for r in lines(full)] == [1, 2, 3, 4]
    assert tensorboard_steps(part, "value_loss") == [6, 12, 18, 24]  # no duplicates
    assert json.loads((part / "learning_curve.json").read_text()) == json.loads(
        (full / "learning_curve.json").read_text()
    )
    a_full, c_full, o_full = weights(full)
    a_part, c_part, o_part = weights(part)
    assert a_full.keys() == a_part.keys()
    for key in a_full:
        torch.testing.assert_close(a_full[key], a_part[key], rtol=0, atol=0)
    for key in c_full:
        torch.testing.assert_close(c_full[key], c_part[key], rtol=0, atol=0)
    assert o_full.keys() == o_part.keys()


def test_resumed_tensorboard_file_sorts_after_one_written_the_same_second(tmp_path):
    """TensorBoard reads event files in name order: second, host, pid, counter."""
    pytest.importorskip("tensorboard")
    killed = TensorBoard(tmp_path / "tb", purge_step=None)
    for step in (1, 2, 3):
        killed.log({"x": float(step)}, step)
    killed.close()
    (written,) = (tmp_path / "tb").iterdir()
    # as if another process (host "~" sorts after any name) had written it this very second
    written.rename(written.with_name(f"events.out.tfevents.{int(time.time()):010d}.~.1.1"))
    resumed = TensorBoard(tmp_path / "tb", purge_step=3)
    resumed.log({"x": 30.0}, 3)
    resumed.log({"x": 40.0}, 4)
    resumed.close()
    assert tensorboard_values(tmp_path, "x") == [(1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0)]


def test_run_directory_layout(tiny_model, tmp_path):
    run = train(
        get_algorithm("twosome"),
        ENV,
        tiny_model,
        total_steps=2 * 6,
        seed=0,
        out=tmp_path / "run",
        overrides=SMALL,
        progress=False,
    )
    config = json.loads((run / "config.json").read_text())
    assert config["agent"] == "twosome" and config["env_id"] == ENV and config["seed"] == 0
    assert config["algorithm"]["num_envs"] == 2 and config["preset"] is None
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["env_steps"] for r in records] == [6, 12]
    for key in (
        "episode_return_mean",
        "policy_loss",
        "value_loss",
        "approx_kl",
        "entropy",
        "policy_steps_taken",
        "policy_steps_skipped",
        "steps_per_second",
        "success_rate",
    ):
        assert key in records[0]
    assert "eval_return" in records[1] and "eval_return" not in records[0]
    curve = json.loads((run / "learning_curve.json").read_text())
    assert [c["env_steps"] for c in curve] == [12]
    assert list((run / "tb").glob("events.out.tfevents.*"))
    ckpt = latest_checkpoint(run)
    assert ckpt.name == "update_000002"
    assert {p.name for p in ckpt.iterdir()} == {"adapter", "agent.pt", "rng.pt", "state.json"}
    state = json.loads((ckpt / "state.json").read_text())
    assert state["update"] == 2 and len(state["envs"]) == 2


def test_existing_run_needs_resume_and_same_arguments(tiny_model, tmp_path):
    kwargs = dict(total_steps=6, seed=0, out=tmp_path / "run", progress=False)
    train(get_algorithm("poad"), ENV, tiny_model, overrides=SMALL, **kwargs)
    with pytest.raises(FileExistsError, match="resume"):
        train(get_algorithm("poad"), ENV, tiny_model, overrides=SMALL, **kwargs)
    with pytest.raises(ValueError, match="cannot resume"):
        train(
            get_algorithm("poad"),
            ENV,
            tiny_model,
            overrides={**SMALL, "lr": 1.0},
            resume=True,
            **kwargs,
        )


def test_plain_resume_keeps_a_study_runs_config_source(tiny_model, tmp_path):
    source = {"spec": "studies/some.toml", "group": "g", "chosen": "config1"}
    out = tmp_path / "run"
    kwargs = dict(seed=0, out=out, progress=False)
    train(get_algorithm("poad"), ENV, tiny_model, overrides=SMALL, total_steps=6,
          config_source=source, **kwargs)  # fmt: skip
    before = json.loads((out / "config.json").read_text())
    assert before["config_source"] == source
    # `train --resume` names no spec: the run keeps the one it was made with.
    train(get_algorithm("poad"), ENV, tiny_model, overrides=SMALL, total_steps=12, resume=True,
          **kwargs)  # fmt: skip
    after = json.loads((out / "config.json").read_text())
    assert after["config_source"] == source
    assert len(after["code_sessions"]) == len(before["code_sessions"]) + 1
    # Another source is refused before anything is rewritten.
    other = {**source, "spec": "elsewhere/some.toml"}
    with pytest.raises(ValueError, match="elsewhere/some.toml"):
        train(get_algorithm("poad"), ENV, tiny_model, overrides=SMALL, total_steps=18,
              resume=True, config_source=other, **kwargs)  # fmt: skip
    assert json.loads((out / "config.json").read_text()) == after


def test_errors_name_the_fix(tiny_model, tmp_path):
    with pytest.raises(ValueError, match="total_steps"):
        train(
            get_algorithm("poad"),
            ENV,
            tiny_model,
            total_steps=1,
            out=tmp_path / "a",
            overrides=SMALL,
            progress=False,
        )
    with pytest.raises(ValueError, match="POAD or NTPO"):
        train(
            get_algorithm("twosome"),
            "DataSciCoding-balance-scale-v0",
            tiny_model,
            total_steps=8,
            out=tmp_path / "b",
            progress=False,
        )
    with pytest.raises(TypeError, match=r"get_algorithm\('poad'\)"):
        train("poad", ENV, tiny_model, total_steps=8, out=tmp_path / "c", progress=False)
    with pytest.raises(TypeError, match="not an algorithm class"):
        train(object, ENV, tiny_model, total_steps=8, out=tmp_path / "c", progress=False)
    with pytest.raises(FileNotFoundError, match="no checkpoint|run directory"):
        load_agent(tmp_path / "nothing")


def test_load_agent_and_evaluate(tiny_model, tmp_path):
    run = train(
        get_algorithm("poad"),
        ENV,
        tiny_model,
        total_steps=6,
        seed=1,
        out=tmp_path / "run",
        overrides=SMALL,
        progress=False,
    )
    agent = load_agent(run)
    result = evaluate_agent(agent, ENV, episodes=2, seed=0)
    assert len(result.returns) == 2 and result.success_rate in (0.0, 0.5, 1.0)
    assert [e.reset_seed for e in result.episodes] == [0, 1]  # the runner's seed rule
    again = evaluate_agent(load_agent(run), ENV, episodes=2, seed=0)
    assert again.returns == result.returns  # greedy and seeded: reproducible


@pytest.mark.parametrize("agent", ["poad", "ntpo", "twosome"])
def test_cli_train_and_evaluate(agent, tiny_model, tmp_path, capsys):
    from agentbench_poad.cli import main

    out = tmp_path / "cli"
    code = main(
        [
            "train",
            "--agent",
            agent,
            "--env",
            ENV,
            "--model",
            str(tiny_model),
            "--total-steps",
            "6",
            "--seed",
            "0",
            "--out",
            str(out),
            "--no-progress",
            "--set",
            "num_envs=2",
            "--set",
            "rollout_length=3",
            "--set",
            "critic_hidden_sizes=16,16",
            "--set",
            "num_minibatches=2",
        ]
    )
    assert code == 0
    config = json.loads((out / "config.json").read_text())
    assert config["algorithm"]["critic_hidden_sizes"] == [16, 16]
    assert config["agent"] == agent
    code = main(["evaluate", "--run", str(out), "--episodes", "2"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "mean return" in printed and "success rate" in printed


def test_load_agent_carries_the_trained_adapter(tiny_model, tmp_path):
    """The evaluated policy is the trained one: its LoRA weights are the checkpoint's, not init."""
    run = train(
        get_algorithm("poad"),
        ENV,
        tiny_model,
        total_steps=6,
        seed=1,
        out=tmp_path / "run",
        overrides={**SMALL, "skip_signal_free": False},  # move the policy whatever the rewards
        progress=False,
    )
    saved, _, _ = weights(run)
    loaded = {
        name: p.detach()
        for name, p in load_agent(run).policy.model.named_parameters()
        if "lora_" in name
    }
    assert saved and len(loaded) == len(saved)
    trained_b = [t for name, t in saved.items() if "lora_B" in name]
    assert any(t.abs().sum() > 0 for t in trained_b), "training left LoRA B at its zero init"
    for name, tensor in saved.items():
        match = [
            p
            for n, p in loaded.items()
            if n.replace(".default", "").endswith(name.split("base_model.model.")[-1])
        ]
        assert len(match) == 1, name
        assert torch.equal(match[0].cpu(), tensor)
