"""Prompts of the DataSciCoding tasks and the turning of an action into a Python module.

The agent fills the body of::

    import numpy as np


    def build_model(x_train: np.ndarray, y_train: np.ndarray):
        \"\"\"...\"\"\"
        <the action>
        return model

An action is the body (first line indented or not: the template indents it) or a whole
``def build_model(...)`` with optional imports before it. Before assembly, **one trailing
``return model`` or bare ``return`` is removed** from the body, because the template supplies
``return model``. This is a deliberate fix of docs/reference.md#deviation-return-stop: the reference's
generation stops on the token ``return`` and keeps it, so a body ending in ``return`` made
``build_model`` return ``None`` and failed; here that body runs as its author meant. Any other
``return`` (``return clf``, or one inside an ``if``) is kept.

Plain-text prompts are the default; ``prompt_format="codellama-infill"`` writes the
prefix/suffix infilling layout the reference fed to CodeLlama, with the ASCII markers
``<PRE>``, ``<SUF>``, ``<MID>`` (the tokenizer's fill-in-the-middle special tokens are an
agent concern; observations stay printable ASCII).

Prompt styles (:data:`PROMPT_STYLES`; what the prompt gives the model, docs/envs/datascicoding.md
"Prompt styles"):

* ``"paper"`` (default): the reference's task statement and an empty template (above).
* ``"worked_example"``: a Python module to continue. It opens with one complete, working
  ``build_model`` for *another* dataset (a :class:`WorkedExample`, never the task's own), then
  states the task in comments and ends inside the task's ``build_model``, after its docstring,
  with the body's indentation (the prompt's last line is ``"    "``, as the paper's infilling
  prompt ends), so the action is the continuation: the body, its first line already indented by
  the prompt. The action ends at the end of the function body (:data:`END_OF_BODY`, declared
  to agents as ``info["action_stop"]`` and applied by the env itself, :func:`cut_at_stop`), and
  :func:`parse_continuation` turns what is kept into the body.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any

from agentbench_poad.errors import AgentBenchError
from agentbench_poad.stops import find_stop

INDENT = "    "
PROMPT_FORMATS = ("plain", "codellama-infill")
#: Prompt styles: the paper's task statement (default) and a worked example to continue.
PROMPT_STYLES = ("paper", "worked_example")

_DEF_LINE = re.compile(r"^\s*def\s+build_model\s*\(")
_TRAILING_RETURN = re.compile(r"^return(\s+model)?\s*(#.*)?$")


@dataclass(frozen=True)
class Submission:
    """An action split into the parts of the module it becomes.

    Attributes:
        prelude: module-level code before ``def build_model`` (a full-def action), dedented.
        body: the function body, dedented, trailing ``return``/``return model`` removed.
        postlude: module-level code after the function (a full-def action).
    """

    prelude: str
    body: str
    postlude: str

    @property
    def empty(self) -> bool:
        return not self.body.strip() and not self.prelude.strip() and not self.postlude.strip()


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _dedent_body(text: str) -> str:
    """Dedent a body whose first line may sit at column 0 and the rest one level deeper."""
    lines = text.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return ""
    whole = textwrap.dedent("\n".join(lines))
    if _parses(whole) or len(lines) == 1:
        return whole
    # the completion style: the prompt already indented the first line
    rest = textwrap.dedent("\n".join(lines[1:]))
    joined = lines[0].strip() + "\n" + rest
    return joined if _parses(joined) else whole


def _strip_trailing_return(body: str) -> str:
    lines = body.rstrip().split("\n")
    if lines and _TRAILING_RETURN.match(lines[-1]):
        lines.pop()
    return "\n".join(lines).rstrip()


def parse_action(action: str) -> Submission:
    """Split an action into prelude, body and postlude (see the module docstring)."""
    text = action.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    def_at = next((i for i, line in enumerate(lines) if _DEF_LINE.match(line)), None)
    if def_at is None:
        return Submission("", _strip_trailing_return(_dedent_body(text)), "")

    prelude = textwrap.dedent("\n".join(lines[:def_at])).strip("\n")
    # the signature ends at the first line ending in ':' (comments aside)
    end = def_at
    while end < len(lines) and not lines[end].split("#")[0].rstrip().endswith(":"):
        end += 1
    rest = lines[end + 1 :]
    def_indent = len(lines[def_at]) - len(lines[def_at].lstrip())
    body_lines: list[str] = []
    postlude_lines: list[str] = []
    for j, line in enumerate(rest):
        indent = len(line) - len(line.lstrip())
        if line.strip() and indent <= def_indent:
            postlude_lines = rest[j:]
            break
        body_lines.append(line)
    body = _strip_trailing_return(textwrap.dedent("\n".join(body_lines)).strip("\n"))
    postlude = textwrap.dedent("\n".join(postlude_lines)).strip("\n")
    return Submission(prelude, body, postlude)


def function_source(body: str, n_features: int | None = None) -> str:
    """``build_model`` with ``body`` filled in (what the prompt shows and the sandbox runs)."""
    shape = f"(n, {n_features})" if n_features is not None else "(n, features)"
    indented = textwrap.indent(body, INDENT) if body.strip() else INDENT + "pass"
    return (
        "def build_model(x_train: np.ndarray, y_train: np.ndarray):\n"
        f'{INDENT}"""Return a classifier fitted on x_train {shape} and y_train (n,)."""\n'
        f"{indented}\n"
        f"{INDENT}return model\n"
    )


def module_source(submission: Submission, n_features: int | None = None) -> str:
    """The module the sandbox imports: numpy import, prelude, ``build_model``, postlude."""
    parts = ["import numpy as np\n"]
    if submission.prelude.strip():
        parts.append(submission.prelude.rstrip() + "\n")
    parts.append("\n" + function_source(submission.body, n_features))
    if submission.postlude.strip():
        parts.append("\n" + submission.postlude.rstrip() + "\n")
    return "\n".join(parts)


def submitted_code(submission: Submission, n_features: int | None = None) -> str:
    """The previous attempt as the reflection prompt quotes it."""
    text = ""
    if submission.prelude.strip():
        text += submission.prelude.rstrip() + "\n\n"
    text += function_source(submission.body, n_features)
    if submission.postlude.strip():
        text += "\n" + submission.postlude.rstrip() + "\n"
    return text


_STORE_BUILTINS = frozenset({"exec", "eval", "globals", "locals", "vars", "setattr", "__import__"})


def may_define_model(source: str) -> bool:
    """False only when the module certainly never binds ``model`` and returns nothing else.

    A cheap host-side check (parsing only, nothing runs) that spares a sandbox run for bodies
    like ``pass``. Anything dynamic (``exec``, ``globals()``...) or an early ``return`` counts
    as "may define".
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return True
    returns = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "model" and isinstance(node.ctx, ast.Store):
            return True
        if isinstance(node, ast.Name) and node.id in _STORE_BUILTINS:
            return True
        if isinstance(node, ast.alias) and (node.asname or node.name).split(".")[0] == "model":
            return True
        if isinstance(node, ast.Global | ast.Nonlocal) and "model" in node.names:
            return True
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == "model":
                return True
        if isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar):
            if node.name == "model":
                return True
        if isinstance(node, ast.Return) and node.value is not None:
            returns += 1
    # the template's own `return model` is one return
    return returns > 1


# -- stop rules and worked examples ----------------------------------------------------------


class PromptSpecError(AgentBenchError, ValueError):
    """A prompt style's settings contradict the task (e.g. an example of the task's own data)."""


@dataclass(frozen=True)
class ActionStop:
    """Where a generated action ends: the rule an env declares to the agents that write it.

    An agent's generation stops *before* the first match of any of ``stop_strings`` (literal)
    or ``stop_patterns`` (regular expressions) and drops the match; a pattern match that reaches
    the end of the text so far only counts once the text is final (the next token could extend
    it: ``return`` -> ``returned``). The same semantics as the LM policy's
    ``GenerationSettings.find_stop``, which honours the rule from ``info["action_stop"]``
    (:meth:`as_info`).

    Attributes:
        name: a short name of the rule (records and docs).
        stop_strings: literal strings.
        stop_patterns: regular expressions (Python ``re``).
    """

    name: str
    stop_strings: tuple[str, ...] = ()
    stop_patterns: tuple[str, ...] = field(default=())

    def find(self, text: str, final: bool = True) -> int | None:
        """Index in ``text`` where the action ends (start of the first match), or None."""
        return find_stop(text, self.stop_strings, self.stop_patterns, final=final)

    def as_info(self) -> dict[str, Any]:
        """The JSON form of ``info["action_stop"]``: name, stop_strings, stop_patterns."""
        return {
            "name": self.name,
            "stop_strings": list(self.stop_strings),
            "stop_patterns": list(self.stop_patterns),
        }


#: The paper style's rule: the LM policy's default (stop before a line starting with
#: ``return``; docs/reference.md#deviation-return-stop). The env does not cut these actions
#: itself (v0 keeps the reference's parsing: one trailing return dropped).
BEFORE_RETURN = ActionStop(
    name="before_return", stop_strings=("\nreturn",), stop_patterns=(r"(?m)^[ \t]*return\b",)
)
#: A code line: after its spaces and tabs, something other than a comment.
_CODE = r"[^ \t#\n]"
#: The worked-example style's rule: the end of the function body. The action's first line
#: continues the prompt's indentation, so its own indentation says nothing. Blank lines (spaces
#: and tabs only) and comment lines never end the body. It ends
#:
#: 1. before a line whose code starts with ``return`` (the template returns ``model``);
#: 2. if the body is indented (its first code line after the first line is indented), before
#:    the next code line at column 0 (module code after the function);
#: 3. in any case, before a ``def``, ``async def``, ``class``, decorator or
#:    ``if __name__`` line at column 0 after the first line (a new function: what a model writes
#:    after a body that it wrote at column 0).
#:
#: Patterns 2 and 3 cut at their ``cut`` group (agentbench_poad.stops.find_stop), which drops
#: the newline that ends the body.
END_OF_BODY = ActionStop(
    name="end_of_function_body",
    stop_patterns=(
        r"(?m)^[ \t]*return\b",
        # the first line, blank or comment lines, an indented code line, then the body's lines
        # up to the newline before a column-0 code line
        rf"\A[^\n]*\n(?:[ \t]*(?:#[^\n]*)?\n)*[ \t]+{_CODE}"
        rf"[^\n]*(?:\n[^\n]*)*?(?P<cut>\n)(?={_CODE})",
        r"(?P<cut>\n)(?:(?:async[ \t]+)?def\b|class\b|@|if[ \t]+__name__\b)",
    ),
)
#: The rule each style declares.
STYLE_STOPS: dict[str, ActionStop] = {"paper": BEFORE_RETURN, "worked_example": END_OF_BODY}


def cut_at_stop(action: str, stop: ActionStop) -> str:
    """``action`` up to (not including) the first stop of ``stop``; the whole of it if none."""
    cut = stop.find(action, final=True)
    return action if cut is None else action[:cut]


def _is_code(line: str) -> bool:
    stripped = line.lstrip(" \t")
    return bool(stripped) and not stripped.startswith("#")


def parse_continuation(action: str) -> Submission:
    """The body of a worked-example continuation, already cut at :data:`END_OF_BODY`.

    The first line continues the prompt's indentation, so it is taken stripped; the other lines
    lose their common indentation, measured on code lines only (a comment's indentation means
    nothing to Python, so a comment at column 0 inside an indented body stays in it). A body
    whose first line opens a block (``for ...:``) and that this does not parse falls back to
    :func:`parse_action`'s reading.
    """
    lines = action.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    rest = lines[1:]
    codes = [line for line in rest if _is_code(line)]
    margin = ""
    if codes:
        widths = [len(line) - len(line.lstrip(" \t")) for line in codes]
        margin = codes[widths.index(min(widths))][: min(widths)]
        if not all(line.startswith(margin) for line in codes):  # mixed tabs and spaces
            margin = ""
    kept = [lines[0].strip()] + [
        line[len(margin) :] if line.startswith(margin) else line.lstrip(" \t") for line in rest
    ]
    body = _strip_trailing_return("\n".join(kept).strip("\n"))
    if not _parses(body):
        fallback = parse_action(action)
        if _parses(fallback.body):
            return fallback
    return Submission("", body, "")


@dataclass(frozen=True)
class WorkedExample:
    """One complete, working ``build_model`` for a dataset, shown in the worked-example style.

    Attributes:
        dataset: the dataset's table name (``"wine"``); it must not be the task's.
        description: its name in the prompt (``"Wine"``).
        shape: its ``(rows, features)``.
        n_classes: its number of classes.
        body: the function body, dedented, without the final ``return model``.
    """

    dataset: str
    description: str
    shape: tuple[int, int]
    n_classes: int
    body: str

    def names(self, dataset: str, description: str) -> bool:
        """Whether this example names the dataset ``dataset`` (its table name or description,
        as words anywhere in the example: ``load_iris`` names ``iris``)."""
        own = {_words(dataset), _words(description)} - {""}
        mine = {_words(self.dataset), _words(self.description)}
        text = f" {_words(self.description + ' ' + self.body)} "
        return bool(own & mine) or any(f" {word} " in text for word in own)


def _words(text: str) -> str:
    """Lower-case alphanumeric words of ``text`` joined by single spaces."""
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


#: The worked examples, in the order they are chosen: the first that does not name the task's
#: dataset. Both run under the env's protocol (tests/test_datascicoding_prompt_styles.py).
WORKED_EXAMPLES: dict[str, WorkedExample] = {
    "wine": WorkedExample(
        dataset="wine",
        description="Wine",
        shape=(178, 13),
        n_classes=3,
        body=(
            "from sklearn.linear_model import LogisticRegression\n"
            "from sklearn.pipeline import make_pipeline\n"
            "from sklearn.preprocessing import StandardScaler\n"
            "\n"
            "model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))\n"
            "model.fit(x_train, y_train)"
        ),
    ),
    "breast-cancer": WorkedExample(
        dataset="breast-cancer",
        description="Breast Cancer Wisconsin (Diagnostic)",
        shape=(569, 30),
        n_classes=2,
        body=(
            "from sklearn.ensemble import RandomForestClassifier\n"
            "\n"
            "model = RandomForestClassifier(n_estimators=200, random_state=0)\n"
            "model.fit(x_train, y_train)"
        ),
    ),
}


def choose_worked_example(
    dataset: str, description: str, example: str | WorkedExample | None = None
) -> WorkedExample:
    """The worked example for a task: ``example`` (a name of :data:`WORKED_EXAMPLES` or an
    instance), or by default the first of :data:`WORKED_EXAMPLES` that does not name the task.

    Raises:
        PromptSpecError: ``example`` names the task's own dataset.
        KeyError: ``example`` is a name that :data:`WORKED_EXAMPLES` does not have.
    """
    if example is None:
        for candidate in WORKED_EXAMPLES.values():
            if not candidate.names(dataset, description):
                return candidate
        raise PromptSpecError(  # pragma: no cover - the two examples never both match
            f"every worked example names the dataset {dataset!r}; pass worked_example="
        )
    if isinstance(example, str):
        try:
            example = WORKED_EXAMPLES[example.strip().lower().replace("_", "-")]
        except KeyError:
            raise KeyError(
                f"unknown worked example {example!r}; known: {', '.join(WORKED_EXAMPLES)} "
                "(or pass a WorkedExample)"
            ) from None
    if example.names(dataset, description):
        others = [n for n, e in WORKED_EXAMPLES.items() if not e.names(dataset, description)]
        raise PromptSpecError(
            f"the worked example is for {example.description!r}, which names the task's own "
            f"dataset {dataset!r}: the example must show another dataset (choose one of "
            f"{others}, or leave worked_example unset to pick one)"
        )
    return example


def _comment(text: str) -> str:
    """Every line of ``text`` as a Python comment."""
    return "\n".join(f"# {line}".rstrip() for line in text.split("\n"))


def _signature(features: int) -> str:
    return (
        "def build_model(x_train: np.ndarray, y_train: np.ndarray):\n"
        f'{INDENT}"""Return a classifier fitted on x_train (shape (n, {features})) and '
        'y_train."""\n'
    )


def _example_block(example: WorkedExample) -> str:
    rows, features = example.shape
    body = textwrap.indent(example.body, INDENT, lambda line: bool(line.strip()))
    return (
        "# A complete, working example for another dataset:\n"
        f'# the "{example.description}" dataset, {rows} rows of {features} numeric features, '
        f"labels 0..{example.n_classes - 1} ({example.n_classes} classes).\n"
        "import numpy as np\n\n\n" + _signature(features) + f"{body}\n{INDENT}return model\n\n\n"
    )


def _example_task(
    description: str, shape: tuple[int, int], n_classes: int, banned: tuple[str, ...]
) -> str:
    rows, features = shape
    return _comment(
        f'The task: the same function for the "{description}" dataset, {rows} rows of '
        f"{features} numeric features,\nlabels 0..{n_classes - 1} ({n_classes} classes). "
        "The model is fitted on a random half of the rows and\nscored on the other half by "
        f"ROC AUC (mean over 5 splits).\n{_rules(banned)}"
    )


def worked_example_prompt(
    example: WorkedExample,
    description: str,
    shape: tuple[int, int],
    n_classes: int,
    banned: tuple[str, ...],
    previous_code: str | None = None,
    category: str = "",
    message: str = "",
) -> str:
    """The worked-example style's observation: the example, the task, and the task's
    ``build_model`` signature and docstring, ending with the body's indentation (the action is
    the body); after a failure, also the error and the previous code, both as comments."""
    failure = ""
    if previous_code is not None:
        if len(message) > 2000:
            message = message[:1000] + " ... " + message[-1000:]
        failure = (
            "\n"
            + _comment(
                f"The previous attempt failed ({category}):\n{message}\nPrevious code "
                f"(fix the error):\n\n{previous_code.rstrip()}"
            )
            + "\n"
        )
    return (
        _example_block(example)
        + _example_task(description, shape, n_classes, banned)
        + "\n"
        + failure
        + "\n\n"
        + _signature(shape[1])
        + INDENT  # the action continues inside the body (module docstring: first line indented)
    )


# -- prompts -------------------------------------------------------------------------------


def _task_lines(description: str, shape: tuple[int, int], n_classes: int) -> str:
    rows, features = shape
    return (
        f'Task: write Python code that trains a classifier on the "{description}" dataset '
        f"(a tabular classification task).\n"
        f"The dataset has shape ({rows}, {features}): {rows} rows of {features} numeric "
        f"features, labels 0..{n_classes - 1} ({n_classes} classes).\n"
        "Your model is fitted on a random half of the rows and scored on the other half by "
        "ROC AUC; the reward is the mean over 5 such splits.\n"
    )


def _rules(banned: tuple[str, ...]) -> str:
    rules = "The classifier must have predict_proba."
    if banned:
        rules += " Do not use " + ", ".join(f"`{b}`" for b in banned) + " (forbidden)."
    return rules


def _answer_line(fixed: bool) -> str:
    what = "the corrected function body" if fixed else "the function body"
    return f"Answer with {what} only, without the final `return model`."


def initial_prompt(
    description: str,
    shape: tuple[int, int],
    n_classes: int,
    banned: tuple[str, ...],
    prompt_format: str = "plain",
) -> str:
    """The first observation of an episode."""
    head = "import numpy as np\n\n\n"
    signature = (
        "def build_model(x_train: np.ndarray, y_train: np.ndarray):\n"
        f'{INDENT}"""Import what you need (e.g. scikit-learn), build a classifier, fit it on\n'
        f"{INDENT}x_train (shape (n, {shape[1]})) and y_train, and store it in `model`.\n"
        f'{INDENT}{_rules(banned)}"""\n'
    )
    if prompt_format == "codellama-infill":
        docstring = f'"""{_task_lines(description, shape, n_classes)}"""\n'
        return f"<PRE> {docstring}{head}{signature}{INDENT} <SUF>\n{INDENT}return model\n <MID>"
    return (
        _task_lines(description, shape, n_classes)
        + "\nComplete the body of this function:\n\n"
        + head
        + signature
        + f"{INDENT}...\n{INDENT}return model\n\n"
        + _answer_line(fixed=False)
    )


def reflection_prompt(
    description: str,
    shape: tuple[int, int],
    n_classes: int,
    banned: tuple[str, ...],
    previous_code: str,
    category: str,
    message: str,
    prompt_format: str = "plain",
) -> str:
    """The observation after a failed attempt: the error and the previous code."""
    if len(message) > 2000:
        message = message[:1000] + " ... " + message[-1000:]
    if prompt_format == "codellama-infill":
        docstring = f'"""{_task_lines(description, shape, n_classes)}"""\n'
        error = (
            f'"""The function below failed with this error ({category}):\n{message}\nFix it."""\n'
        )
        fixed = (
            f'"""Fixed version. {_rules(banned)}"""\n'
            "def build_model(x_train: np.ndarray, y_train: np.ndarray):\n"
        )
        return (
            f"<PRE> {docstring}import numpy as np\n\n{error}{previous_code}\n{fixed}{INDENT}"
            f" <SUF>\n{INDENT}return model\n <MID>"
        )
    return (
        _task_lines(description, shape, n_classes)
        + f"\nYour previous attempt failed ({category}):\n{message}\n\n"
        + "Previous code:\n\nimport numpy as np\n\n\n"
        + previous_code
        + f"\nFix the error. {_rules(banned)}\n"
        + _answer_line(fixed=True)
    )


def success_text(mean_auc: float, std_auc: float) -> str:
    """The observation after a successful attempt (the episode ends there)."""
    return (
        f"The code ran without error. Mean ROC AUC over the splits: {mean_auc:.4f} "
        f"(std {std_auc:.4f})."
    )
