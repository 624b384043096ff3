"""The env-declared stop rule (``info["action_stop"]``) honoured by the LM policy's generation.

Runs the tiny random model on CPU (tests/fixtures_rl.py); the env side is tested in
tests/test_datascicoding_prompt_styles.py.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from agentbench_poad.environments.datascicoding.prompts import (  # noqa: E402
    BEFORE_RETURN,
    END_OF_BODY,
    STYLE_STOPS,
)
from agentbench_poad.rl.policy import GenerationSettings, LMPolicy  # noqa: E402
from tests.fixtures_rl import tiny_model_dir  # noqa: E402, F401

PROMPT = "def build_model(x_train, y_train):\n"
FREE = GenerationSettings(max_new_tokens=24, stop_strings=(), stop_patterns=())


@pytest.fixture(scope="module")
def policy(tiny_model_dir):  # noqa: F811
    return LMPolicy(tiny_model_dir, generation=FREE)


def test_the_paper_rule_is_the_policys_default():
    """Declaring the paper style's rule changes nothing for a default policy."""
    default = GenerationSettings()
    assert BEFORE_RETURN.stop_strings == default.stop_strings
    assert BEFORE_RETURN.stop_patterns == default.stop_patterns


def test_end_of_body_rule_cuts_the_tokens_of_a_continuation(policy):
    text = "    model = f()\n    model.fit(x, y)\n\n\n# next task\ndef g():\n"
    tokens = policy.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert policy._finish_open(tokens, final=False) == (tokens, text, False)  # no rule: no cut
    settings = policy.settings_for(END_OF_BODY.as_info())
    kept, kept_text, stopped = policy._finish_open(tokens, final=False, settings=settings)
    # comment lines never end the body; the new ``def`` at column 0 does
    assert stopped and kept_text == "    model = f()\n    model.fit(x, y)\n\n\n# next task"
    assert policy.tokenizer.decode(kept) == kept_text


def test_act_honours_each_prompts_declared_rule(policy):
    """Two copies of one prompt in one batch: only the row that declares a rule is cut there."""
    free = policy.act([PROMPT], [None], greedy=True)[0]
    text = free.text
    start = next(
        i
        for i in range(4, len(text) - 3)
        if text[i : i + 2].isprintable() and text.find(text[i : i + 2]) == i
    )
    rule = {"name": "test", "stop_strings": [text[start : start + 2]], "stop_patterns": []}
    cut, untouched = policy.act(
        [PROMPT, PROMPT], [None, None], greedy=True, action_stops=[rule, None]
    )
    assert untouched.token_ids == free.token_ids
    assert text.startswith(cut.text) and len(cut.text) <= start
    assert cut.token_ids == free.token_ids[: len(cut.token_ids)]
    assert len(cut.token_ids) < len(free.token_ids)
    assert cut.token_log_probs == pytest.approx(
        free.token_log_probs[: len(cut.token_ids)], abs=1e-5
    )
    assert policy.generation == FREE  # the policy's own settings are left as they were


def test_bad_rules_and_lengths_are_refused(policy):
    with pytest.raises(ValueError, match="action_stops"):
        policy.act([PROMPT], [None], greedy=True, action_stops=[None, None])
    with pytest.raises(ValueError, match="empty"):
        policy.settings_for({"stop_strings": [""]})
    with pytest.raises(Exception, match="unterminated|missing"):
        policy.settings_for({"stop_patterns": ["(unclosed"]})


_LINES = st.lists(
    st.tuples(
        st.sampled_from(["", "  ", "    ", "\t", "        "]),
        st.sampled_from(
            [
                "model = f()",
                "return model",
                "return",
                "returned = 1",
                "# c",
                "",
                "x",
                "def g():",
                "class A:",
                "@d",
                "if __name__ == 1:",
                "define = 1",
            ]
        ),
    ),
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(lines=_LINES, final=st.booleans(), style=st.sampled_from(sorted(STYLE_STOPS)))
def test_env_rule_and_policy_settings_agree(lines, final, style):
    """The env's ActionStop.find and the policy's find_stop with the rule added cut the same."""
    text = "\n".join(indent + code for indent, code in lines)
    rule = STYLE_STOPS[style]
    settings_ = GenerationSettings(stop_strings=rule.stop_strings, stop_patterns=rule.stop_patterns)
    assert rule.find(text, final=final) == settings_.find_stop(text, final=final)


def test_training_takes_the_envs_stop_rule(tiny_model_dir, tmp_path):  # noqa: F811
    """The trainer gives the policy the env's declared stop rule, so rollouts and learning-curve
    evaluations stop at the end of the function body in the worked-example style."""
    import gymnasium as gym

    from agentbench_poad.baselines import get_algorithm
    from agentbench_poad.rl.trainer import _start
    from tests.fixtures_rl import small_overrides

    env_id = "DataSciCoding-iris-v0"
    kwargs = {"prompt_style": "worked_example", "sandbox": "process"}
    rule = gym.make(env_id, **kwargs).unwrapped.action_stop.as_info()
    session = _start(
        get_algorithm("poad"),
        env_id,
        tiny_model_dir,
        total_steps=6,
        seed=0,
        out=tmp_path / "run",
        resume=False,
        overrides=small_overrides(eval_every=0),
        preset=None,
        env_kwargs=kwargs,
    )
    try:
        settings = session.policy.generation
        for pattern in rule["stop_patterns"]:
            assert pattern in settings.stop_patterns
        for text in rule.get("stop_strings", ()):
            assert text in settings.stop_strings
        assert rule["stop_patterns"] or rule.get("stop_strings")
    finally:
        session.close()
