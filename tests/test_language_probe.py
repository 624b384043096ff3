"""studies/language_probe.py: the identity-adapter shortcut is exact, and --resume keeps rows."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.fixtures_rl import tiny_model_dir, train_tiny_poad_run  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def lp():
    spec = importlib.util.spec_from_file_location(
        "language_probe", ROOT / "studies/language_probe.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def lora_model(tiny_model_dir):  # noqa: F811
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    return get_peft_model(model, config).eval(), AutoTokenizer.from_pretrained(tiny_model_dir)


TEXT = "def f(x):\n    return x + 1\n\nThe licence grants you the right to use the work. " * 4


def test_fresh_adapter_is_identity_and_scores_exactly_like_the_base(lp, lora_model):
    model, tokenizer = lora_model
    assert lp.adapter_is_identity(model)
    with model.disable_adapter():
        base = lp.mean_nll(model, tokenizer, TEXT, 16)
    assert lp.mean_nll(model, tokenizer, TEXT, 16) == base  # bit for bit, not approximately


def test_a_moved_adapter_is_not_identity(lp, lora_model):
    import torch

    model, tokenizer = lora_model
    name, weight = next((n, p) for n, p in model.named_parameters() if "lora_B" in n)
    with torch.no_grad():
        weight[0, 0] = 0.5
    try:
        assert not lp.adapter_is_identity(model), name
        with model.disable_adapter():
            base = lp.mean_nll(model, tokenizer, TEXT, 16)
        assert lp.mean_nll(model, tokenizer, TEXT, 16) != base
    finally:
        with torch.no_grad():
            weight.zero_()


def test_a_model_without_lora_is_not_called_identity(lp, tiny_model_dir):  # noqa: F811
    from transformers import AutoModelForCausalLM

    assert not lp.adapter_is_identity(AutoModelForCausalLM.from_pretrained(tiny_model_dir))


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, tiny_model_dir):  # noqa: F811
    return [
        train_tiny_poad_run(tiny_model_dir, tmp_path_factory.mktemp("lp-run") / "poad", seed=seed)
        for seed in (0, 1)
    ]


def test_resume_keeps_earlier_rows_and_measures_only_new_runs(lp, two_runs, tmp_path):
    first = tmp_path / "first.json"
    assert lp.main([str(two_runs[0]), "--window", "64", "--out", str(first)]) == 0
    earlier = json.loads(first.read_text())
    # mark the kept row so a re-measurement would be visible
    earlier["runs"][0]["marker"] = "kept"
    first.write_text(json.dumps(earlier))
    both = tmp_path / "both.json"
    argv = [str(r) for r in two_runs] + ["--window", "64", "--resume", str(first)]
    assert lp.main([*argv, "--out", str(both)]) == 0
    rows = json.loads(both.read_text())["runs"]
    assert [Path(r["run"]) for r in rows] == two_runs
    assert rows[0]["marker"] == "kept" and "marker" not in rows[1]
    assert rows[1]["english"]["perplexity"] > 0
    assert json.loads(both.read_text())["base"] == earlier["base"]


def test_resume_refuses_another_window(lp, two_runs, tmp_path):
    first = tmp_path / "first.json"
    assert lp.main([str(two_runs[0]), "--window", "64", "--out", str(first)]) == 0
    with pytest.raises(ValueError, match="windows of 64 tokens"):
        lp.main([str(two_runs[1]), "--window", "32", "--resume", str(first)])


def test_resume_refuses_a_file_that_is_not_a_probe_output(lp, two_runs, tmp_path, capsys):
    other = tmp_path / "other.json"
    other.write_text('{"runs": []}')
    with pytest.raises(SystemExit):
        lp.main([str(two_runs[0]), "--resume", str(other)])
    assert "is not this probe's output (no ['base', 'texts', 'window'])" in capsys.readouterr().err
    other.write_text("{not json")
    with pytest.raises(SystemExit):
        lp.main([str(two_runs[0]), "--resume", str(other)])
    assert f"--resume {other}:" in capsys.readouterr().err
