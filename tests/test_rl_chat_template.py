"""``chat_template=True``: prompts as one chat user turn, code taken from the reply's code block.

Checked against plain references written here: the rendered text of a template written in the
test, a plain forward of the rendered prompt's ids, and a hand-written fence scan.
"""

from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from agentbench_poad.rl.policy import GenerationSettings, LMPolicy, reply_code  # noqa: E402
from agentbench_poad.rl.run_dir import RunDirectory  # noqa: E402
from tests.fixtures_rl import tiny_model_dir  # noqa: E402, F401

TEMPLATE = (
    "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant] {% endif %}"
)
PROMPT = "Write code that trains a classifier."
ACTIONS = ["pick up the tomato", "chop", "serve"]


@pytest.fixture(scope="module")
def chat_model_dir(tiny_model_dir, tmp_path_factory):  # noqa: F811
    """The tiny model with a chat template in its tokenizer config."""
    path = tmp_path_factory.mktemp("chat") / "tiny-chat"
    shutil.copytree(tiny_model_dir, path)
    config_path = path / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = TEMPLATE
    config_path.write_text(json.dumps(config))
    return path


def _perturb(policy: LMPolicy) -> None:
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in policy.trainable_parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.2)


def _reference_log_probs(policy: LMPolicy, prompt_ids: list[int], ids: list[int]) -> list[float]:
    with torch.no_grad():
        logits = policy.model(input_ids=torch.tensor([prompt_ids + ids])).logits.float()
    log_probs = torch.log_softmax(logits[0], dim=-1)
    return [log_probs[len(prompt_ids) - 1 + j, t].item() for j, t in enumerate(ids)]


def test_prompt_is_one_user_turn_and_the_assistant_header(chat_model_dir):
    policy = LMPolicy(chat_model_dir, chat_template=True)
    plain = LMPolicy(chat_model_dir)
    rendered = f"[user] {PROMPT}\n[assistant] "
    assert policy.prompt_text(PROMPT) == rendered
    assert plain.prompt_text(PROMPT) == PROMPT
    # the template writes its own special tokens: no BOS is added on top
    expected = list(policy.tokenizer(rendered, add_special_tokens=False)["input_ids"])
    assert policy.encode_prompt(PROMPT) == expected
    assert plain.encode_prompt(PROMPT) != expected


def test_restricted_scores_are_those_of_the_rendered_prompt(chat_model_dir):
    policy = LMPolicy(chat_model_dir, chat_template=True)
    _perturb(policy)
    (sample,) = policy.act([PROMPT], [ACTIONS], greedy=True)
    prompt_ids = list(
        policy.tokenizer(policy.prompt_text(PROMPT), add_special_tokens=False)["input_ids"]
    )
    assert sample.token_ids == policy.encode_action(PROMPT, sample.text)
    assert sample.token_log_probs == pytest.approx(
        _reference_log_probs(policy, prompt_ids, sample.token_ids), abs=1e-4
    )


def test_open_action_is_the_replys_code_and_keeps_every_token(chat_model_dir):
    settings_ = GenerationSettings(max_new_tokens=16, stop_strings=(), stop_patterns=())
    policy = LMPolicy(chat_model_dir, chat_template=True, generation=settings_)
    _perturb(policy)
    prompt_ids = policy.encode_prompt(PROMPT)
    samples = policy.act([PROMPT] * 4, [None] * 4, generator=torch.Generator().manual_seed(1))
    for sample in samples:
        reply = policy.tokenizer.decode(sample.token_ids, skip_special_tokens=True)
        assert sample.text == reply_code(reply)
        assert sample.token_log_probs == pytest.approx(
            _reference_log_probs(policy, prompt_ids, sample.token_ids), abs=1e-4
        )
    rescored = policy.token_log_probs([PROMPT], [samples[0].token_ids]).log_probs
    n = len(samples[0].token_ids)
    assert rescored[0, :n].tolist() == pytest.approx(samples[0].token_log_probs, abs=1e-4)


def test_a_tokenizer_without_a_template_is_refused_with_the_fix(tiny_model_dir):  # noqa: F811
    with pytest.raises(ValueError, match="no chat template; use an instruct model"):
        LMPolicy(tiny_model_dir, chat_template=True)


def _plain_reply_code(reply: str) -> str:
    """Reference: scan lines for an opening fence, collect until a closing one."""
    lines = reply.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("```") and i + 1 <= len(lines) - 1:
            tag = line[3:].strip()
            if tag and not all(c.isalnum() or c in "+.-_" for c in tag):
                continue
            body = []
            for later in lines[i + 1 :]:
                if later.strip() == "```":
                    return "\n".join(body)
                body.append(later)
            return "\n".join(body)
    return reply


_text = st.text(alphabet=st.characters(blacklist_characters="`\r", codec="ascii"), max_size=40)


@settings(max_examples=200, deadline=None)
@given(
    prose=_text,
    code=_text,
    tail=_text,
    tag=st.sampled_from(["", "python", "py"]),
    closed=st.booleans(),
)
def test_reply_code_matches_a_plain_fence_scan(prose, code, tail, tag, closed):
    reply = f"{prose}\n```{tag}\n{code}" + (f"\n```\n{tail}" if closed else "")
    assert reply_code(reply) == _plain_reply_code(reply) == code
    assert reply_code(prose) == prose  # no fence: the whole reply


def test_runs_made_before_chat_template_existed_still_resume(tmp_path):
    """A config.json without ``chat_template`` was made with its default (False)."""
    from agentbench_poad.baselines.poad import POADConfig

    defaults = POADConfig().to_dict()
    old = {k: v for k, v in defaults.items() if k != "chat_template"}
    spec = {"agent": "poad", "env_id": "E", "env_kwargs": {}, "model": "m", "seed": 0}
    run = RunDirectory(tmp_path / "run")
    run.open({**spec, "algorithm": old}, resume=False)
    (tmp_path / "run" / "metrics.jsonl").write_text("")
    (tmp_path / "run" / "config.json").write_text(json.dumps({**spec, "algorithm": old}))
    RunDirectory(tmp_path / "run").open(
        {**spec, "algorithm": defaults}, resume=True, algorithm_defaults=defaults
    )
    for changed in ({**defaults, "chat_template": True}, {**defaults, "lr": 0.5}):
        (tmp_path / "run" / "config.json").write_text(json.dumps({**spec, "algorithm": old}))
        with pytest.raises(ValueError, match="cannot resume"):
            RunDirectory(tmp_path / "run").open(
                {**spec, "algorithm": changed}, resume=True, algorithm_defaults=defaults
            )
    # without the defaults a missing field is a difference
    (tmp_path / "run" / "config.json").write_text(json.dumps({**spec, "algorithm": old}))
    with pytest.raises(ValueError, match="cannot resume"):
        RunDirectory(tmp_path / "run").open({**spec, "algorithm": defaults}, resume=True)


def test_config_carries_chat_template_to_the_policy(chat_model_dir):
    from agentbench_poad.baselines.poad import POADConfig
    from agentbench_poad.rl.trainer import build_policy

    config = POADConfig.preset("datascicoding-mini", chat_template=True, lora_layers=1)
    assert config.chat_template is True
    assert build_policy(config, str(chat_model_dir), seed=0).chat_template is True
    assert POADConfig().chat_template is False


def test_base_model_agent_takes_chat_template(chat_model_dir):
    from agentbench_poad.baselines.base_model import BaseModelFactory, _load_policy

    _load_policy.cache_clear()
    agent = BaseModelFactory(str(chat_model_dir))(seed=0, greedy=True, chat_template=True)
    assert agent.policy.policy.chat_template is True
    assert ", chat template" in agent.version and agent.name == "base-greedy-chat"
    reference = LMPolicy(chat_model_dir, chat_template=True)  # B = 0: the base model
    (expected,) = reference.act([PROMPT], [ACTIONS], greedy=True)
    assert agent.act(PROMPT, ACTIONS) == expected.text
    plain = BaseModelFactory(str(chat_model_dir))(seed=0, greedy=True)
    assert "chat template" not in plain.version
    _load_policy.cache_clear()
