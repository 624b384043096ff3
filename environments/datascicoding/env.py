"""The DataSciCoding environment: write ``build_model`` for a tabular dataset, get its ROC AUC."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentbench_poad.core import (
    MAX_ACTION_LENGTH,
    MAX_OBSERVATION_LENGTH,
    TextEnv,
    text_space,
    to_text,
)
from agentbench_poad.environments.datascicoding.datasets import Dataset, get_spec, load_dataset
from agentbench_poad.environments.datascicoding.grader import Grade, Grader
from agentbench_poad.environments.datascicoding.prompts import (
    PROMPT_FORMATS,
    PROMPT_STYLES,
    STYLE_STOPS,
    ActionStop,
    Submission,
    WorkedExample,
    choose_worked_example,
    cut_at_stop,
    initial_prompt,
    parse_action,
    parse_continuation,
    reflection_prompt,
    submitted_code,
    success_text,
    worked_example_prompt,
)

if TYPE_CHECKING:
    from agentbench_poad.sandbox import Backend, Limits

#: The reference's banned substrings (grid search and SVMs were too slow for its timeout).
DEFAULT_BANNED: tuple[str, ...] = ("GridSearchCV(", "SVC(")
#: Wall-clock limit of one attempt: the reference's 30 s for the 5 splits plus sandbox start-up.
DEFAULT_WALL_TIME_S = 35.0


class DataSciCodingEnv(TextEnv):
    """Write the body of ``build_model(x_train, y_train)`` for a tabular classification dataset.

    ## Description

    The DataSciCoding task of "Reinforcing LLM Agents via Policy Optimization with Action
    Decomposition" (POAD, NeurIPS 2024), after CAAFE's benchmark. The agent writes Python code
    that builds and fits a scikit-learn classifier; the code runs in a sandbox
    (:mod:`agentbench_poad.sandbox`, never in this process) on 5 random 50/50 splits of the
    dataset, and the reward is the mean ROC AUC. Failed code is fed back with its error.

    ## Observation

    A printable-ASCII prompt. The first one (``prompt_format="plain"``)::

        Task: write Python code that trains a classifier on the "Iris" dataset (a tabular
        classification task).
        The dataset has shape (150, 4): 150 rows of 4 numeric features, labels 0..2 (3 classes).
        Your model is fitted on a random half of the rows and scored on the other half by ROC
        AUC; the reward is the mean over 5 such splits.

        Complete the body of this function:

        import numpy as np


        def build_model(x_train: np.ndarray, y_train: np.ndarray):
            \"\"\"Import what you need (e.g. scikit-learn), build a classifier, fit it on
            x_train (shape (n, 4)) and y_train, and store it in `model`.
            The classifier must have predict_proba. Do not use `GridSearchCV(`, `SVC(` ...\"\"\"
            ...
            return model

        Answer with the function body only, without the final `return model`.

    After a failure: the same task lines, the failure category and message, the previous code
    and a request to fix it. After a success: a one-line status (the episode is over).

    ## Actions

    Free text (``info["available_actions"] is None``): the body of ``build_model``, indented or
    not, or a whole ``def build_model(...)`` with imports before it. One trailing
    ``return model`` / bare ``return`` is dropped (the template returns ``model``; see
    :mod:`~agentbench_poad.environments.datascicoding.prompts`). Every string is a valid action
    (``info["action_valid"]`` is always True); bad code is a failed attempt.

    ## Reward

    On success, the mean ROC AUC over the splits (binary: positive-class column; multiclass:
    one-vs-one macro), in [0, 1]. On failure, -1: empty code, a syntax error, a banned construct
    (``GridSearchCV(``, ``SVC(`` by default), no ``model``, an exception, a timeout, too much
    memory, or output that is not a ``(rows, classes)`` probability array.

    ## Episode End

    Terminated at the first successful attempt. Truncated after 5 attempts (the
    ``max_episode_steps=5`` of the registration; ``gym.make(..., max_episode_steps=N)`` changes
    it).

    ## Info

    ``split_aucs``, ``auc_std``, ``failure_category``, ``failure_message``, ``runtime_s``,
    ``sandbox_backend``, ``attempt``, ``holdout_auc`` (holdout protocol), ``available_actions``
    (None), ``action_valid``, ``prompt_style`` and ``action_stop``: where a generated action
    should end (``{"name", "stop_strings", "stop_patterns"}``; the LM policy honours it when
    given, ``LMPolicy.act(..., action_stops=...)``).

    ## Arguments

    * ``dataset``: a name of the table (``agentbench-poad data list``) or a
      :class:`~agentbench_poad.environments.datascicoding.datasets.Dataset`. Loaded at the
      first ``reset`` (never at construction), from the cache or its source.
    * ``sandbox``: ``"auto"`` (docker if usable, else process), ``"docker"``, ``"process"``,
      ``"ray"`` (grading on a pool of Ray actors, docs/scale-out.md) or a sandbox ``Backend``
      instance (e.g. a warm docker pool).
    * ``limits``: a sandbox ``Limits`` for one attempt; default 35 s wall time, 2 GiB, 1 CPU.
    * ``banned``: substrings that fail an attempt; default ``("GridSearchCV(", "SVC(")``.
    * ``protocol``: ``"paper"`` (default) or ``"holdout"`` (held-out rows scored only at the end,
      ``info["holdout_auc"]``); ``holdout_fraction`` (0.2) and ``holdout_seed`` (0).
    * ``prompt_format``: ``"plain"`` or ``"codellama-infill"`` (the paper style's layout).
    * ``prompt_style``: ``"paper"`` (default, the reference's prompt) or ``"worked_example"``: a
      module to continue that opens with a complete, working ``build_model`` for another
      dataset; the action is the body, cut by the env at the end of the function body
      (``info["action_stop"]``). Any other value is refused with the list of styles.
    * ``worked_example``: the worked-example style's example: a name of
      ``prompts.WORKED_EXAMPLES`` or a ``prompts.WorkedExample``; default the first that does not
      name the task's dataset. One that names it raises ``PromptSpecError`` here.
    * ``cache_dir``, ``download``: where cached datasets live, and whether a missing one is
      fetched at reset (otherwise reset raises ``DatasetUnavailable``).

    ## Version History

    * v0: the reference task (docs/reference.md#datascicoding), code run in a sandbox, a trailing
      ``return`` dropped, seeded dataset shuffles.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        dataset: str | Dataset = "iris",
        *,
        sandbox: str | Backend = "auto",
        limits: Limits | None = None,
        banned: tuple[str, ...] | list[str] = DEFAULT_BANNED,
        protocol: str = "paper",
        holdout_fraction: float = 0.2,
        holdout_seed: int = 0,
        prompt_format: str = "plain",
        prompt_style: str = "paper",
        worked_example: str | WorkedExample | None = None,
        cache_dir: str | None = None,
        download: bool = True,
        render_mode: str | None = None,
    ) -> None:
        if prompt_format not in PROMPT_FORMATS:
            raise ValueError(
                f"prompt_format must be one of {PROMPT_FORMATS}, got {prompt_format!r}"
            )
        if prompt_style not in PROMPT_STYLES:
            raise ValueError(
                f"unknown prompt_style {prompt_style!r}; the styles are {', '.join(PROMPT_STYLES)}"
            )
        if prompt_style != "paper" and prompt_format != "plain":
            raise ValueError(
                f"prompt_format={prompt_format!r} is a layout of the paper style; "
                f"prompt_style={prompt_style!r} writes its own (leave prompt_format unset)"
            )
        if worked_example is not None and prompt_style != "worked_example":
            raise ValueError(
                "worked_example is an option of prompt_style='worked_example'; "
                f"pass that style too (got prompt_style={prompt_style!r})"
            )
        if protocol not in ("paper", "holdout"):
            raise ValueError(f"protocol must be 'paper' or 'holdout', got {protocol!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        if isinstance(dataset, Dataset):
            self._dataset: Dataset | None = dataset
            self.dataset_name = dataset.name
        else:
            self._dataset = None
            self.dataset_name = get_spec(dataset).name  # fails fast on an unknown name
        description = (
            dataset.description if isinstance(dataset, Dataset) else get_spec(dataset).description
        )
        self.prompt_style = prompt_style
        #: The worked example shown (worked-example style), checked against the task here.
        self.worked_example: WorkedExample | None = (
            choose_worked_example(self.dataset_name, description, worked_example)
            if prompt_style == "worked_example"
            else None
        )
        self.sandbox = sandbox
        self.limits = limits
        self.banned = tuple(banned)
        self.protocol = protocol
        self.holdout_fraction = holdout_fraction
        self.holdout_seed = holdout_seed
        self.prompt_format = prompt_format
        self.cache_dir = cache_dir
        self.download = download
        self.render_mode = render_mode
        self.observation_space = text_space(MAX_OBSERVATION_LENGTH)
        self.action_space = text_space(MAX_ACTION_LENGTH)
        self._grader: Grader | None = None
        self._observation = ""
        self._attempt = 0

    # -- lazy set-up -----------------------------------------------------------------------
    @property
    def dataset(self) -> Dataset:
        """The dataset (loaded on first use: cache, or its source when ``download``)."""
        if self._dataset is None:
            self._dataset = load_dataset(
                self.dataset_name, cache_dir=self.cache_dir, download=self.download
            )
        return self._dataset

    @property
    def grader(self) -> Grader:
        if self._grader is None:
            data = self.dataset
            self._grader = Grader(
                data.X,
                data.y,
                data.n_classes,
                sandbox=self.sandbox,
                limits=self.limits if self.limits is not None else _default_limits(),
                banned=self.banned,
                protocol=self.protocol,
                holdout_fraction=self.holdout_fraction,
                holdout_seed=self.holdout_seed,
            )
        return self._grader

    @property
    def action_stop(self) -> ActionStop:
        """Where a generated action ends in this prompt style (``info["action_stop"]``)."""
        return STYLE_STOPS[self.prompt_style]

    def _parse(self, action: str) -> Submission:
        """The action as a submission; the worked-example style first cuts it at the end of the
        function body (a whole ``def build_model`` keeps its body, and nothing after it)."""
        if self.prompt_style == "paper":
            return parse_action(action)
        action = action.replace("\r\n", "\n")  # a CR would make a blank line a code line
        if _whole_def(action):
            submission = parse_action(action)
            return Submission(submission.prelude, submission.body, "")
        return parse_continuation(cut_at_stop(action, self.action_stop))

    def _prompt(self, previous: str | None = None, category: str = "", message: str = "") -> str:
        """The observation of this style: first prompt, or the reflection after a failure."""
        if self.worked_example is not None:
            return worked_example_prompt(
                self.worked_example, *self._task(), previous, category, message
            )
        if previous is None:
            return initial_prompt(*self._task(), self.prompt_format)
        return reflection_prompt(*self._task(), previous, category, message, self.prompt_format)

    def _task(self) -> tuple[str, tuple[int, int], int, tuple[str, ...]]:
        data = self.dataset
        return data.description, data.shape, data.n_classes, self.banned

    # -- TextEnv ---------------------------------------------------------------------------
    def _reset(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.grader  # noqa: B018 - loads the dataset here, so a missing one fails at reset
        self._attempt = 0
        self._observation = to_text(self._prompt())
        info = {
            "available_actions": None,
            "action_valid": True,
            "attempt": 0,
            "dataset_shape": self.dataset.shape,
            "prompt_style": self.prompt_style,
            "action_stop": self.action_stop.as_info(),
        }
        return self._observation, info

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._attempt += 1
        submission = self._parse(action)
        grade = self.grader.grade(submission)
        info = _info(grade, self._attempt)
        info["prompt_style"] = self.prompt_style
        info["action_stop"] = self.action_stop.as_info()
        if grade.ok:
            self._observation = to_text(success_text(grade.reward, grade.auc_std))
            return self._observation, grade.reward, True, False, info
        previous = submitted_code(submission, self.dataset.shape[1])
        self._observation = to_text(
            self._prompt(previous, grade.category or "error", grade.message)
        )
        return self._observation, grade.reward, False, False, info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._observation
        return None


def _whole_def(action: str) -> bool:
    """Whether an action is a whole ``def build_model`` (with only imports or comments before
    it at column 0), not the continuation of a body that the worked-example style expects."""
    for line in action.replace("\r\n", "\n").split("\n"):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.startswith("def build_model") or line.startswith("async def build_model"):
            return True
        if line[0].isspace() or not line.startswith(("import ", "from ")):
            return False
    return False


def _default_limits() -> Limits:
    from agentbench_poad.sandbox import Limits

    return Limits(wall_time_s=DEFAULT_WALL_TIME_S)


def _info(grade: Grade, attempt: int) -> dict[str, Any]:
    return {
        "available_actions": None,
        "action_valid": True,
        "attempt": attempt,
        "split_aucs": list(grade.split_aucs),
        "auc_std": grade.auc_std,
        "failure_category": grade.category,
        "failure_message": grade.message,
        "runtime_s": grade.runtime_s,
        "sandbox_backend": grade.backend,
        "holdout_auc": grade.holdout_auc,
    }
