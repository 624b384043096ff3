"""Tests of agentbench_poad.models.loading: LoRA settings, the tiny model, loading, the CLI."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from agentbench_poad.models import (  # noqa: E402
    LoraSettings,
    ModelNotAvailable,
    init_tiny_model,
    load_causal_lm,
    resolve_device,
    resolve_dtype,
)
from tests.fixtures_rl import tiny_model_dir  # noqa: E402, F401


def _weights(directory):
    from safetensors.torch import load_file

    return load_file(str(directory / "model.safetensors"))


def test_lora_settings_defaults_are_the_papers():
    settings = LoraSettings()
    assert (settings.r, settings.alpha, settings.dropout) == (8, 16, 0.0)
    assert settings.target_modules == ("q_proj", "v_proj")
    config = settings.to_peft_config()
    assert config.r == 8 and config.lora_alpha == 16 and config.lora_dropout == 0.0
    assert set(config.target_modules) == {"q_proj", "v_proj"}
    assert config.bias == "none"


@pytest.mark.parametrize(
    "kwargs", [{"r": 0}, {"alpha": 0}, {"dropout": 1.0}, {"dropout": -0.1}, {"target_modules": ()}]
)
def test_lora_settings_validation(kwargs):
    with pytest.raises(ValueError, match="LoraSettings"):
        LoraSettings(**kwargs)


def test_lora_settings_accepts_a_single_module_name():
    assert LoraSettings(target_modules="q_proj").target_modules == ("q_proj",)


def test_tiny_model_loads_with_auto_classes(tiny_model_dir):  # noqa: F811
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_model_dir)
    assert model.config.model_type == "llama"
    assert len(tokenizer) == 259 == model.config.vocab_size
    text = "naïve café → ok\n\tdone"
    ids = tokenizer(text)["input_ids"]
    assert ids[0] == tokenizer.bos_token_id
    assert len(ids) == 1 + len(text.encode("utf-8"))  # one token per byte after BOS
    assert tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=True) == text
    # Byte tokens compose: tokens(a + b) == tokens(a) + tokens(b) without BOS.
    a, b = "You are in the kitchen.", " pick up the tomato"
    assert (
        tokenizer(a + b)["input_ids"]
        == tokenizer(a)["input_ids"] + tokenizer(b, add_special_tokens=False)["input_ids"]
    )
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    names = {name for name, _ in model.named_modules()}
    assert any(name.endswith("q_proj") for name in names)
    assert any(name.endswith("v_proj") for name in names)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), 259)
    assert torch.isfinite(logits).all()


def test_tiny_model_is_deterministic_and_leaves_global_rng_alone(tmp_path):
    state = torch.random.get_rng_state()
    first = init_tiny_model(tmp_path / "a", seed=3, hidden_size=32, num_layers=1, num_heads=2)
    assert torch.equal(torch.random.get_rng_state(), state)
    second = init_tiny_model(tmp_path / "b", seed=3, hidden_size=32, num_layers=1, num_heads=2)
    other = init_tiny_model(tmp_path / "c", seed=4, hidden_size=32, num_layers=1, num_heads=2)
    w1, w2, w3 = _weights(first), _weights(second), _weights(other)
    assert w1.keys() == w2.keys() == w3.keys()
    assert all(torch.equal(w1[k], w2[k]) for k in w1)
    assert any(not torch.equal(w1[k], w3[k]) for k in w1 if w1[k].ndim == 2)
    config = transformers.AutoConfig.from_pretrained(first)
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (32, 1, 2)


def test_tiny_model_rejects_bad_sizes(tmp_path):
    with pytest.raises(ValueError, match="divisible"):
        init_tiny_model(tmp_path, hidden_size=30, num_heads=4)
    with pytest.raises(ValueError, match="divisible"):
        init_tiny_model(tmp_path, hidden_size=32, num_heads=4, num_kv_heads=3)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_load_causal_lm_dtype_and_device(tiny_model_dir, dtype):  # noqa: F811
    model, tokenizer = load_causal_lm(tiny_model_dir, dtype=dtype, device="cpu")
    assert next(model.parameters()).dtype == getattr(torch, dtype)
    assert next(model.parameters()).device.type == "cpu"
    assert not model.training
    assert tokenizer.pad_token_id is not None


def test_load_causal_lm_unreachable_hub_names_the_fix(monkeypatch, tmp_path):
    # Fake only the network boundary: the hub client in offline mode fails at once instead of
    # retrying the (unreachable) network; our error handling is the real code.
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelNotAvailable, match="agentbench-poad model init tiny --out DIR"):
        load_causal_lm("no-such-org/no-such-model-agentbench")


def test_resolve_dtype_and_device():
    assert resolve_dtype("float16") is torch.float16
    assert resolve_dtype(torch.bfloat16) is torch.bfloat16
    assert resolve_dtype("auto", "cpu") is torch.float32
    with pytest.raises(ValueError, match="unknown dtype"):
        resolve_dtype("float8")
    assert resolve_device("cpu").type == "cpu"
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            resolve_device("cuda")


def test_cli_model_init_tiny(tmp_path, capsys):
    from agentbench_poad.cli import main

    out = tmp_path / "tiny"
    assert (
        main(
            [
                "model",
                "init",
                "tiny",
                "--out",
                str(out),
                "--seed",
                "1",
                "--hidden-size",
                "32",
                "--num-layers",
                "1",
                "--num-heads",
                "2",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert str(out) in printed and "parameters" in printed
    model, tokenizer = load_causal_lm(out)
    assert model.config.hidden_size == 32 and model.config.num_hidden_layers == 1
    reference = init_tiny_model(tmp_path / "ref", seed=1, hidden_size=32, num_layers=1, num_heads=2)
    w_cli, w_ref = _weights(out), _weights(reference)
    assert all(torch.equal(w_cli[k], w_ref[k]) for k in w_ref)


def test_cli_model_init_bad_size_is_an_error(tmp_path, capsys):
    from agentbench_poad.cli import main

    assert main(["model", "init", "tiny", "--out", str(tmp_path / "x"), "--hidden-size", "30"]) == 2
    assert "divisible" in capsys.readouterr().err
