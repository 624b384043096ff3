"""DataSciCoding prompt styles: the worked-example style, its checks and its stop rule.

Code runs in the real sandbox (process backend), as in tests/test_datascicoding_env.py.
"""

from __future__ import annotations

import ast
import re

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbench_poad import check_text_env
from agentbench_poad.core import text_space
from agentbench_poad.environments.datascicoding import datasets as ds
from agentbench_poad.environments.datascicoding import prompts
from agentbench_poad.environments.datascicoding.datasets import load_dataset
from agentbench_poad.environments.datascicoding.env import DataSciCodingEnv
from agentbench_poad.environments.datascicoding.prompts import (
    END_OF_BODY,
    PROMPT_STYLES,
    WORKED_EXAMPLES,
    PromptSpecError,
    WorkedExample,
    choose_worked_example,
    cut_at_stop,
    parse_continuation,
)
from agentbench_poad.sandbox import Limits

LIMITS = Limits(wall_time_s=60.0, memory_mb=1024)
#: For the runs that only check that a program runs: room for a loaded machine.
SLOW_CPU = Limits(wall_time_s=300.0, memory_mb=1024)
#: A continuation as a base model writes it after the worked-example prompt: the body, the
#: template's return, then more module (a new task and def) that must not reach the grader.
CONTINUATION = (
    "    from sklearn.ensemble import RandomForestClassifier\n"
    "    model = RandomForestClassifier(n_estimators=50, random_state=0)\n"
    "    model.fit(x_train, y_train)\n"
    "    return model\n"
    "\n\n"
    '# The task: the same function for the "Wine" dataset\n'
    "def build_model(x_train, y_train):\n"
    "    raise RuntimeError('the second function ran')\n"
)


def make(name: str = "iris", **kwargs) -> gym.Env:
    kwargs.setdefault("sandbox", "process")
    kwargs.setdefault("limits", LIMITS)
    kwargs.setdefault("prompt_style", "worked_example")
    return gym.make(f"DataSciCoding-{name}-v0", **kwargs)


# -- construction: the style and the example are checked at gym.make ------------------------


def test_unknown_prompt_style_is_refused_with_the_list():
    with pytest.raises(ValueError, match="unknown prompt_style 'fancy'") as error:
        gym.make("DataSciCoding-iris-v0", prompt_style="fancy")
    for style in PROMPT_STYLES:
        assert style in str(error.value)


def test_paper_style_is_the_default_and_unchanged():
    default = gym.make("DataSciCoding-iris-v0", sandbox="process")
    paper = gym.make("DataSciCoding-iris-v0", sandbox="process", prompt_style="paper")
    observation, info = default.reset(seed=0)
    assert paper.reset(seed=0)[0] == observation
    assert info["prompt_style"] == "paper"
    assert info["action_stop"]["name"] == "before_return"
    data = load_dataset("iris")
    expected = prompts.initial_prompt(
        data.description, data.shape, data.n_classes, ("GridSearchCV(", "SVC(")
    )
    assert observation == expected


def test_example_naming_the_tasks_own_dataset_is_a_spec_error():
    with pytest.raises(PromptSpecError, match="names the task's own dataset 'wine'"):
        make("wine", worked_example="wine")
    own = WorkedExample(
        dataset="my-flowers",
        description="Flowers",
        shape=(150, 4),
        n_classes=3,
        body="from sklearn.datasets import load_iris\nmodel = None",
    )
    with pytest.raises(PromptSpecError, match="another dataset"):
        make("iris", worked_example=own)
    # a Dataset passed directly is checked by its own name and description
    with pytest.raises(PromptSpecError):
        DataSciCodingEnv(
            load_dataset("breast-cancer"),
            prompt_style="worked_example",
            worked_example="breast-cancer",
        )
    assert issubclass(PromptSpecError, ValueError)


def test_style_options_that_do_not_fit_are_refused():
    with pytest.raises(ValueError, match="prompt_format='codellama-infill'"):
        make("iris", prompt_format="codellama-infill")
    with pytest.raises(ValueError, match="worked_example is an option"):
        gym.make("DataSciCoding-iris-v0", worked_example="wine")
    with pytest.raises(KeyError, match="unknown worked example 'digits'"):
        make("iris", worked_example="digits")


@pytest.mark.parametrize("name", list(ds.DATASETS))
def test_the_default_example_is_never_the_tasks_own(name):
    spec = ds.DATASETS[name]
    example = choose_worked_example(spec.name, spec.description)
    assert not example.names(spec.name, spec.description)
    env = gym.make(spec.env_id, prompt_style="worked_example")  # nothing loads at make
    assert env.unwrapped.worked_example == example
    if name in WORKED_EXAMPLES:
        assert example.dataset != name


@pytest.mark.parametrize("name", list(WORKED_EXAMPLES))
def test_every_worked_example_works_on_its_own_dataset(name):
    """The example is "complete and working": its body succeeds under the env's protocol."""
    example = WORKED_EXAMPLES[name]
    data = load_dataset(name)
    assert (data.shape, data.n_classes, data.description) == (
        example.shape,
        example.n_classes,
        example.description,
    )
    env = gym.make(f"DataSciCoding-{name}-v0", sandbox="process", limits=LIMITS)
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(example.body)
    assert terminated and reward > 0.9, info["failure_message"]


# -- the prompt ---------------------------------------------------------------------------------


def test_worked_example_prompt_is_a_module_to_continue():
    env = make("breast-cancer")
    observation, info = env.reset(seed=0)
    example = env.unwrapped.worked_example
    assert example.dataset == "wine"
    assert text_space(len(observation)).contains(observation)
    assert "Breast Cancer Wisconsin (Diagnostic)" in observation and '"Wine"' in observation
    assert "(shape (n, 30))" in observation and "GridSearchCV(" in observation
    # the example's whole function precedes the task, which ends after its signature
    assert "model = make_pipeline(StandardScaler()" in observation
    head, task = observation.split("# The task:")
    assert "Breast" not in head
    # it ends inside the body, indented: the action's first line is the body's first line
    assert observation.endswith('and y_train."""\n    ')
    module = ast.parse(observation + "pass\n")
    assert [n.name for n in module.body if isinstance(n, ast.FunctionDef)] == ["build_model"] * 2
    assert info["prompt_style"] == "worked_example"
    assert info["action_stop"] == END_OF_BODY.as_info()


def test_reflection_keeps_the_style_and_feeds_the_error_back():
    env = make("iris")
    env.reset(seed=0)
    observation, reward, terminated, _, info = env.step(
        "    import sklearn_extra_not_installed\n    model = None"
    )
    assert reward == -1.0 and not terminated
    assert info["failure_category"] == "exception"
    assert "ModuleNotFoundError" in info["failure_message"]
    assert "# ModuleNotFoundError" in observation and "#     import sklearn_extra" in observation
    assert observation.endswith('and y_train."""\n    ')
    ast.parse(observation + "pass\n")  # the error and old code are comments
    assert info["prompt_style"] == "worked_example" and info["action_stop"]["name"]


# -- the stop rule: the env cuts actions at the end of the function body ------------------------


def test_end_of_body_rule_cuts_before_return_and_before_a_column_zero_line():
    assert cut_at_stop(CONTINUATION, END_OF_BODY) == CONTINUATION.split("    return")[0]
    body = "    model = f()\n\n    model.fit(x, y)\nprint('done')\n"
    assert cut_at_stop(body, END_OF_BODY) == "    model = f()\n\n    model.fit(x, y)"
    # the first line may sit at column 0 (the completion form of the oracle's bodies)
    first = "model = f()\n    model.fit(x, y)\n"
    assert cut_at_stop(first, END_OF_BODY) == first
    # a match at the end of the text so far is pending until the text is final
    assert END_OF_BODY.find("    model = f()\n    return", final=False) is None
    assert END_OF_BODY.find("    model = f()\n    return", final=True) == len("    model = f()\n")
    assert END_OF_BODY.find("    x = 1\n    returned = 2\n") is None


#: What SmolLM2-135M wrote after the worked-example prompt (studies/fair-cpu-v2-datascicoding.md):
#: the module's pattern goes on with column-0 comments, then the body. The old rule cut at the
#: second line (a column-0 line), leaving an empty body (`no_model`).
TASK_COMMENT = (
    '# The task: the same function for the "Iris" dataset, 150 rows of 4 numeric features,\n'
    "# labels 0..2 (3 classes).\n"
)


@pytest.mark.parametrize("indent", ["    ", ""], ids=["indented-body", "column-0-body"])
def test_a_column_zero_comment_before_the_body_is_kept_and_runs(indent):
    body = (
        f"{indent}from sklearn.naive_bayes import GaussianNB\n"
        f"{indent}model = GaussianNB()\n"
        f"{indent}model.fit(x_train, y_train)\n"
    )
    action = TASK_COMMENT + body + f"{indent}return model\n\n\n# The task: another\n"
    assert cut_at_stop(action, END_OF_BODY) == TASK_COMMENT + body
    env = make("iris", limits=SLOW_CPU)
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(action)
    assert terminated and reward > 0.9, info["failure_message"]


def test_blank_and_comment_lines_do_not_end_the_body():
    indented = (
        "from sklearn.naive_bayes import GaussianNB\n"
        "\n"
        "  \t\n"
        "# a comment at column 0 inside the body\n"
        "    model = GaussianNB()\n"
        "\n"
        "        # an indented comment\n"
        "    model.fit(x_train, y_train)\n"
    )
    assert cut_at_stop(indented + "print('after')\n", END_OF_BODY) == indented[:-1]
    unindented = indented.replace("    model", "model")
    after = "\n\ndef build_model(x_train, y_train):\n    raise RuntimeError('second def')\n"
    assert cut_at_stop(unindented + after, END_OF_BODY) == unindented + "\n"
    env = make("iris", limits=SLOW_CPU)  # the indented form runs in the test above
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(unindented + after)
    assert terminated and reward > 0.9, info["failure_message"]


def test_parse_continuation_dedents_by_the_code_lines():
    kept = "# first\n        x = 1\n# at column 0\n        model = x\n"
    assert parse_continuation(kept).body == "# first\nx = 1\n# at column 0\nmodel = x"
    # a first line that opens a block keeps its block (parse_action's reading)
    block = "for i in range(2):\n        x = i\n    model = x"
    assert parse_continuation(block).body == "for i in range(2):\n    x = i\nmodel = x"


_TOP_LEVEL = re.compile(r"(?:async[ \t]+)?def\b|class\b|@|if[ \t]+__name__\b")


def _reference_cut(text: str) -> int | None:
    """END_OF_BODY as a plain loop over lines (final text), as docs/envs/datascicoding.md says."""
    indented: bool | None = None
    start = 0
    for k, line in enumerate(text.split("\n")):
        stripped = line.lstrip(" \t")
        code = bool(stripped) and not stripped.startswith("#")
        if k >= 1 and code:
            column_0 = stripped == line
            if indented is None:
                indented = not column_0
            if column_0 and (indented or _TOP_LEVEL.match(line)):
                return start - 1  # the newline that ends the body goes too
        if re.match(r"return\b", stripped):
            return start
        start += len(line) + 1
    return None


_RULE_LINES = st.lists(
    st.tuples(
        st.sampled_from(["", "    ", "\t", "  "]),
        st.sampled_from(
            [
                "model = f()",
                "return model",
                "returned = 1",
                "# c",
                "",
                "  ",
                "x",
                "def g():",
                "class A:",
                "@d",
                "async def h():",
                "if __name__ == 1:",
                "define = 1",
                "#",
            ]
        ),
    ),
    max_size=7,
)


@settings(max_examples=300, deadline=None)
@given(lines=_RULE_LINES)
def test_end_of_body_rule_matches_a_plain_loop(lines):
    text = "\n".join(indent + code for indent, code in lines)
    assert END_OF_BODY.find(text, final=True) == _reference_cut(text)


def test_a_continuation_is_graded_without_what_follows_the_body():
    env = make("iris")
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(CONTINUATION)
    assert terminated and reward > 0.9, info["failure_message"]


def test_a_whole_def_answer_keeps_its_body_and_drops_what_follows():
    env = make("iris")
    env.reset(seed=0)
    whole = (
        "from sklearn.naive_bayes import GaussianNB\n\n\n"
        "def build_model(x_train, y_train):\n"
        "    model = GaussianNB().fit(x_train, y_train)\n"
        "    return model\n\n\n"
        "raise RuntimeError('module code after the function ran')\n"
    )
    _, reward, terminated, _, info = env.step(whole)
    assert terminated and reward > 0.9, info["failure_message"]


def test_the_paper_style_does_not_cut_actions():
    """v0's parsing is untouched: a column-0 statement after the body still runs (and fails)."""
    env = gym.make("DataSciCoding-iris-v0", sandbox="process", limits=LIMITS)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(
        "    from sklearn.naive_bayes import GaussianNB\n"
        "    model = GaussianNB().fit(x_train, y_train)\n"
        "raise RuntimeError('after the body')\n"
    )
    assert reward == -1.0


# -- bad code keeps its penalty in the new style --------------------------------------------------


def test_a_program_that_loops_forever_times_out():
    env = make("iris", limits=Limits(wall_time_s=3.0))
    env.reset(seed=0)
    observation, reward, terminated, _, info = env.step(
        "    model = None\n    while True:\n        pass\n"
    )
    assert info["failure_category"] == "timeout" and reward == -1.0 and not terminated
    assert "timed out" in observation


def test_printing_does_not_reach_the_observation():
    env = make("gen-xor")
    env.reset(seed=0)
    observation, reward, terminated, _, info = env.step(
        "    print('y' * 100_000)\n"
        "    from sklearn.tree import DecisionTreeClassifier\n"
        "    model = DecisionTreeClassifier(random_state=0).fit(x_train, y_train)\n"
    )
    assert terminated and 0.0 <= reward <= 1.0, info["failure_message"]
    assert "yyyy" not in observation


@pytest.mark.parametrize("name", ["iris", "gen-circles"])
def test_check_text_env_passes_in_the_worked_example_style(name):
    env = make(name)
    try:
        check_text_env(env)
    finally:
        env.close()
