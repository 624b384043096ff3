"""``compile_layers``: the opt-in ``torch.compile`` of the update's decoder stack.

Off by default, and then nothing is compiled. On, one POAD update gives the eager update's
log-probs, values, losses and LoRA gradients to float rounding (not bit for bit: the option is
labelled as such), and a run resumed from a checkpoint continues as the uninterrupted run does.
The compiled tests pay inductor's compile (tens of seconds on a busy 2-core machine): ``slow``.
"""

from __future__ import annotations

import copy
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")


from agentbench_poad.baselines import get_algorithm  # noqa: E402
from agentbench_poad.baselines.poad import POAD, POADConfig  # noqa: E402
from agentbench_poad.models import init_tiny_model  # noqa: E402
from agentbench_poad.rl import compiled_layers  # noqa: E402
from agentbench_poad.rl.buffer import RolloutBuffer  # noqa: E402
from agentbench_poad.rl.config import PPOConfig  # noqa: E402
from agentbench_poad.rl.policy import LMPolicy  # noqa: E402
from agentbench_poad.rl.trainer import build_policy, latest_checkpoint, train  # noqa: E402
from tests.fixtures_rl import play_rollout, small_overrides, tiny_model  # noqa: E402,F401

OVERCOOKED = "Overcooked-TomatoSalad-v0"


@pytest.fixture(scope="module")
def deep_model_dir(tmp_path_factory):
    """4 layers: LoRA on the top 2 leaves frozen layers below (the cached-states path)."""
    return init_tiny_model(tmp_path_factory.mktemp("deep"), seed=0, hidden_size=32, num_layers=4)


def _agent(model_dir, **options) -> POAD:
    config = POADConfig(
        num_envs=2,
        rollout_length=3,
        epochs=1,
        num_minibatches=1,  # one gradient pass: its gradients are compared before any step
        critic_hidden_sizes=(16,),
        target_kl=None,
        lr=1e-2,
        critic_lr=1e-2,
        lora_layers=2,
        **options,
    )
    policy = build_policy(config, model_dir, seed=0)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # non-zero adapters (B starts at zero)
        for param in policy.trainable_parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.1)
    return POAD(config, policy, seed=0)


def _rollout(agent: POAD) -> RolloutBuffer:
    buffer, observations = play_rollout(agent, OVERCOOKED)
    buffer.next_values = agent.bootstrap_values(observations)
    agent.compute_advantages(buffer)
    return buffer


def _recorded_update(agent: POAD, buffer: RolloutBuffer) -> dict:
    """One update; what it computed on the way: the policy's token log-probs and entropies, the
    critic's values and each backward's LoRA gradients."""
    # grads: parameter name -> its gradient after each backward
    seen: dict = {"log_probs": [], "entropy": [], "values": [], "grads": {}}
    policy, critic = agent.policy, agent.critic
    score = policy.token_log_probs

    def recording_score(*args, **kwargs):
        out = score(*args, **kwargs)
        seen["log_probs"].append(out.log_probs.detach().clone())
        seen["entropy"].append(out.entropy.detach().clone())
        return out

    def keep_values(_module, _inputs, output):
        values = output[0] if isinstance(output, tuple) else output
        seen["values"].append(values.detach().clone())

    def keep_grad(name):
        return lambda p: seen["grads"].setdefault(name, []).append(p.grad.clone())

    handles = [critic.register_forward_hook(keep_values)]
    handles += [
        p.register_post_accumulate_grad_hook(keep_grad(name))
        for name, p in policy.model.named_parameters()
        if p.requires_grad
    ]
    policy.token_log_probs = recording_score
    try:
        seen["metrics"] = agent.update(buffer, torch.Generator().manual_seed(5))
    finally:
        del policy.token_log_probs
        for handle in handles:
            handle.remove()
    return seen


# -- the config field and the set-up check (fast) ------------------------------------------------


def test_compile_layers_is_an_opt_in_field_stored_with_the_config():
    config = PPOConfig()
    assert config.compile_layers is False and config.to_dict()["compile_layers"] is False
    assert PPOConfig.coerce_overrides({"compile_layers": "true"}) == {"compile_layers": True}
    assert POADConfig.from_dict(POADConfig(compile_layers=True).to_dict()).compile_layers is True
    old = POADConfig().to_dict()
    del old["compile_layers"]  # a run made before the field existed ran eager
    assert POADConfig.from_dict(old).compile_layers is False
    with pytest.raises(ValueError, match="compile_layers must be true or false"):
        PPOConfig(compile_layers="yes")


def test_without_inductor_the_set_up_fails_naming_the_fix(monkeypatch, deep_model_dir):
    monkeypatch.setattr(compiled_layers, "_problem_on", lambda device: "no C++ compiler found")
    with pytest.raises(ValueError, match="compile_layers=false") as error:
        LMPolicy(deep_model_dir, lora_layers=2, compile_layers=True)
    assert "no C++ compiler found" in str(error.value) and "C++ compiler" in str(error.value)


def test_train_cli_refuses_compile_layers_without_inductor_before_the_model_loads(
    monkeypatch, capsys, tmp_path
):
    from agentbench_poad.cli import main

    monkeypatch.setattr(compiled_layers, "_problem_on", lambda device: "no C++ compiler found")
    argv = ["train", "--agent", "poad", "--env", OVERCOOKED, "--model", "no/such-model"]
    argv += ["--total-steps", "2", "--out", str(tmp_path / "run"), "--no-progress"]
    assert main([*argv, "--set", "compile_layers=true"]) != 0
    assert "--set compile_layers=false" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_the_default_update_compiles_nothing(monkeypatch, deep_model_dir):
    def no_compile(*args, **kwargs):
        raise AssertionError("torch.compile called on the default path")

    monkeypatch.setattr(torch, "compile", no_compile)
    agent = _agent(deep_model_dir)
    agent.update(_rollout(agent), torch.Generator().manual_seed(5))
    assert agent.policy.compile_layers is False and agent.policy._compiled_stack is None


def test_a_compiled_runs_agent_loads_without_a_compiler(monkeypatch, tiny_model, tmp_path):  # noqa: F811
    """Acting never compiles (no gradients): evaluating a compile_layers run needs no inductor."""
    from agentbench_poad.rl.trainer import load_agent
    from tests.fixtures_rl import train_tiny_poad_run

    run = train_tiny_poad_run(tiny_model, tmp_path / "run")
    config = json.loads((run / "config.json").read_text())
    config["algorithm"]["compile_layers"] = True
    (run / "config.json").write_text(json.dumps(config))
    monkeypatch.setattr(compiled_layers, "_problem_on", lambda device: "no C++ compiler found")
    agent = load_agent(run)
    assert agent.policy.compile_layers is False


# -- compiled (slow: inductor compiles) ---------------------------------------------------------


@pytest.mark.slow
def test_compiled_update_equals_the_eager_update_to_float_rounding(deep_model_dir):
    eager, compiled = _agent(deep_model_dir), _agent(deep_model_dir, compile_layers=True)
    buffer = _rollout(eager)
    got = _recorded_update(compiled, copy.deepcopy(buffer))
    expected = _recorded_update(eager, buffer)
    assert compiled.policy._compiled_stack is not None and eager.policy._compiled_stack is None
    assert got["grads"].keys() == expected["grads"].keys() and expected["grads"]
    for key in ("log_probs", "entropy", "values", *expected["grads"]):
        a_list = got[key] if key in got else got["grads"][key]
        b_list = expected[key] if key in expected else expected["grads"][key]
        assert len(a_list) == len(b_list) > 0, key
        for a, b in zip(a_list, b_list):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m, k=key: f"{k}: {m}")
    for key in ("policy_loss", "value_loss", "entropy", "approx_kl"):
        assert got["metrics"][key] == pytest.approx(expected["metrics"][key], rel=1e-5, abs=1e-6)


@pytest.mark.slow
def test_compiled_run_resumes_bit_for_bit(monkeypatch, tiny_model, tmp_path):  # noqa: F811
    """2 updates, a checkpoint, a third in a fresh compile state (as a new process has: no
    compiled graphs, no on-disk kernel cache) equals the third of an uninterrupted run."""
    import torch._dynamo
    import torch._functorch.config
    import torch._inductor.config

    monkeypatch.setattr(torch._inductor.config, "fx_graph_cache", False)
    monkeypatch.setattr(torch._functorch.config, "enable_autograd_cache", False)
    env_id = OVERCOOKED
    overrides = small_overrides(eval_every=0, lora_layers=1, compile_layers=True)
    kwargs = dict(total_steps=3 * 6, seed=5, overrides=overrides, progress=False)
    runs = []
    for name, steps in (("straight", None), ("stopped", 2)):
        torch._dynamo.reset()
        runs.append(
            train(
                get_algorithm("poad"),
                env_id,
                tiny_model,
                out=tmp_path / name,
                max_updates=steps,
                **kwargs,
            )
        )
    straight, stopped = runs
    torch._dynamo.reset()
    train(get_algorithm("poad"), env_id, tiny_model, out=stopped, resume=True, **kwargs)
    assert json.loads((stopped / "config.json").read_text())["algorithm"]["compile_layers"]

    def lines(run):
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        for row in rows:
            row.pop("steps_per_second")
        return rows

    assert len(lines(straight)) == 3 and lines(straight) == lines(stopped)
    for name in ("agent.pt",):
        a = torch.load(latest_checkpoint(straight) / name, weights_only=True)["critic"]
        b = torch.load(latest_checkpoint(stopped) / name, weights_only=True)["critic"]
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)
    from safetensors.torch import load_file

    a = load_file(latest_checkpoint(straight) / "adapter" / "adapter_model.safetensors")
    b = load_file(latest_checkpoint(stopped) / "adapter" / "adapter_model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)
