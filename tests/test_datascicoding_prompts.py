"""Turning actions into modules, and the prompts (pure functions: nothing runs here)."""

from __future__ import annotations

import ast

import pytest

from agentbench_poad.environments.datascicoding.prompts import (
    initial_prompt,
    may_define_model,
    module_source,
    parse_action,
    reflection_prompt,
)


def _function_body(action: str) -> list[str]:
    source = module_source(parse_action(action), 4)
    tree = ast.parse(source)
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    return [ast.unparse(stmt) for stmt in func.body]


def test_completion_style_body_with_dangling_return():
    # what the reference's generation produced: first line at column 0, stop token `return`
    body = _function_body(
        "from x import A\n    model = A()\n    model.fit(x_train, y_train)\n    return"
    )
    assert body[-1] == "return model" and body.count("return model") == 1
    assert "return" not in body[:-1]
    assert body[1:4] == ["from x import A", "model = A()", "model.fit(x_train, y_train)"]


@pytest.mark.parametrize("tail", ["return model", "return model  # done", "return", "return\n\n"])
def test_one_trailing_return_is_dropped(tail):
    body = _function_body(f"model = 1\n{tail}")
    assert body[-2:] == ["model = 1", "return model"]


def test_other_returns_are_kept():
    assert _function_body("clf = 1\nreturn clf")[-2:] == ["return clf", "return model"]
    body = _function_body("model = 1\nif model:\n    return model")
    assert "if model:\n    return model" in body


def test_full_definition_with_prelude_and_postlude():
    action = (
        "import math\n\ndef build_model(x_train,\n                y_train):  # two lines\n"
        "    model = math.pi\n    return model\n\nHELPER = 3\n"
    )
    submission = parse_action(action)
    assert submission.prelude == "import math"
    assert submission.body == "model = math.pi"
    assert submission.postlude == "HELPER = 3"
    source = module_source(submission, 4)
    ast.parse(source)
    assert source.index("import math") < source.index("def build_model") < source.index("HELPER")


def test_indented_body_is_dedented():
    assert parse_action("        model = 1\n        model += 1").body == "model = 1\nmodel += 1"
    assert parse_action("\r\n    a = 1\r\n    model = a\r\n").body == "a = 1\nmodel = a"


def test_empty_and_broken_actions():
    assert parse_action("").empty and parse_action("  \n\t\n").empty
    assert not parse_action("pass").empty
    with pytest.raises(SyntaxError):
        ast.parse(module_source(parse_action("model = ("), 4))


@pytest.mark.parametrize(
    "code,defines",
    [
        ("pass", False),
        ("x = 1\nprint(model)", False),
        ("model = 1", True),
        ("for model in [1]:\n    pass", True),
        ("from sklearn.tree import DecisionTreeClassifier as model", True),
        ("with open('f') as model:\n    pass", True),
        ("globals()['model'] = 1", True),
        ("exec('model = 1')", True),
        ("clf = 1\nreturn clf", True),
        ("(model := 3)", True),
    ],
)
def test_may_define_model(code, defines):
    assert may_define_model(module_source(parse_action(code), 4)) is defines


def test_prompts_state_the_task_facts():
    text = initial_prompt("Airlines", (2000, 7), 2, ("GridSearchCV(", "SVC("))
    assert '"Airlines"' in text and "(2000, 7)" in text and "2 classes" in text
    assert "x_train (shape (n, 7))" in text and "return model" in text
    assert "<PRE>" not in text and text.isascii()
    unbanned = initial_prompt("Airlines", (2000, 7), 2, ())
    assert "SVC(" not in unbanned
    again = reflection_prompt(
        "Airlines",
        (2000, 7),
        2,
        ("SVC(",),
        "def build_model(): ...\n",
        "exception",
        "ValueError: " + "x" * 5000,
    )
    assert "exception" in again and "def build_model(): ..." in again
    assert len(again) < 4000  # a huge message is shortened
    infill = initial_prompt("Airlines", (2000, 7), 2, (), "codellama-infill")
    assert infill.startswith("<PRE> ") and infill.endswith(" <MID>") and "<SUF>" in infill
