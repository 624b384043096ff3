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
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass

INDENT = "    "
PROMPT_FORMATS = ("plain", "codellama-infill")

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
