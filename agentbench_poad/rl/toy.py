"""The credit-assignment toy of the paper's case study (the paper's Figure 1; docs/reference.md#case-study).

A household robot holds a pancake next to a microwave. Heating the pancake takes three actions in
order -- open the microwave, put the pancake in, close it -- and the two key choices differ in one
word only: "open the microwave" versus "close the microwave". A token-level learner must credit
that one word; the rest of the action ("the microwave") is shared.

Registered ids (``import agentbench_poad`` registers them, family ``"casestudy"``):

* ``CaseStudy-Microwave-v0`` -- the case study: start at stage 0, 5 steps.
* ``CaseStudy-MicrowaveClose-v0`` -- a one-step bandit on stage 2 (pancake inside, door open):
  "close" wins (+1), "open" times out (-1). The fastest credit-assignment check.
* ``CaseStudy-OpenText-v0`` -- an open-action (generated text) version: one step, +1 when the
  text starts with "open". Exercises the DataSciCoding code path without a sandbox.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agentbench_poad.core import TextEnv, invalid_action_note, text_space
from agentbench_poad.registration import SUCCESS_OPEN, EnvFamily, TaskRow, register_family

__all__ = [
    "ACTIONS_BY_STAGE",
    "MicrowaveCaseStudyEnv",
    "OpenTextToyEnv",
    "microwave_transition",
    "register_envs",
]

OPEN = "open the microwave"
CLOSE = "close the microwave"
PUT = "put the pancake in the microwave"

#: Offered actions in each stage (stage 0: door closed, pancake in hand; 1: door open, pancake in
#: hand; 2: pancake inside, door open).
ACTIONS_BY_STAGE: dict[int, tuple[str, ...]] = {0: (OPEN, CLOSE), 1: (PUT,), 2: (OPEN, CLOSE)}

_SCENES = {
    0: "You are in the kitchen, holding a pancake, next to the microwave. The microwave is closed.",
    1: "You are in the kitchen, holding a pancake, next to the microwave. The microwave is open.",
    2: "You are in the kitchen, next to the microwave. The pancake is inside the microwave, "
    "and the microwave is open.",
}
_GOAL = "Your task is to heat up the pancake with the microwave."


def microwave_transition(stage: int, action: str) -> tuple[int, float, bool]:
    """One step of the task's rules, ignoring the time limit: ``(next_stage, reward, success)``."""
    if stage == 0 and action == OPEN:
        return 1, 0.0, False
    if stage == 1 and action == PUT:
        return 2, 0.0, False
    if stage == 2 and action == CLOSE:
        return 2, 1.0, True
    return stage, 0.0, False


class MicrowaveCaseStudyEnv(TextEnv):
    """Heat a pancake in the microwave: open it, put the pancake in, close it.

    ## Description
    The case-study task of "Reinforcing LLM Agents via Policy Optimization with Action
    Decomposition" (Figure 1): actions that differ in a single key word.

    ## Observation
    A short scene, the goal and the offered actions, e.g.::

        You are in the kitchen, holding a pancake, next to the microwave. The microwave is closed.
        Your task is to heat up the pancake with the microwave. Your next action is to

    ## Actions
    Stage 0 and 2: "open the microwave", "close the microwave"; stage 1: "put the pancake in the
    microwave" (``info["available_actions"]``). Any other string is a no-op step.

    ## Reward
    +1 for closing the microwave with the pancake inside; -1 when the time limit ends the
    episode first; -1 for an action that is not offered (a no-op); 0 otherwise.

    ## Episode End
    Terminates on success or when the ``max_steps``-th step fails (the reference treats its time
    limit as a terminal failure with reward -1, so it is ``terminated``, not ``truncated``).

    ## Arguments
    ``start_stage`` (0, 1 or 2; default 0) and ``max_steps`` (default 5).

    ## Version History
    * v0: the reference case study (ADRL ``envs/case_study``), in our own wording.
    """

    #: An action that is not offered is a no-op costing as much as failing the task (the
    #: reference never takes one: its actions come from the offered list).
    invalid_action_penalty: float = -1.0

    def __init__(self, start_stage: int = 0, max_steps: int = 5):
        if start_stage not in ACTIONS_BY_STAGE:
            raise ValueError(f"start_stage must be 0, 1 or 2, got {start_stage!r}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps!r}")
        self.start_stage = start_stage
        self.max_steps = max_steps
        self.observation_space = text_space(1024)
        self.action_space = text_space(256)
        self._stage = start_stage
        self._steps = 0

    def _prompt(self, note: str | None = None) -> str:
        lines = [_SCENES[self._stage], _GOAL]
        if note:
            lines.append(note)
        lines.append("Your next action is to")
        return "\n".join(lines)

    def _info(self, valid: bool = True) -> dict[str, Any]:
        return {
            "available_actions": list(ACTIONS_BY_STAGE[self._stage]),
            "action_valid": valid,
            "stage": self._stage,
        }

    def _reset(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self._stage = self.start_stage
        self._steps = 0
        return self._prompt(), self._info()

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        available = list(ACTIONS_BY_STAGE[self._stage])
        valid = action in available
        self._steps += 1
        note = None
        if valid:
            self._stage, reward, success = microwave_transition(self._stage, action)
        else:
            reward, success = self.invalid_action_penalty, False
            note = invalid_action_note(action, available)
        terminated = success
        if not success and self._steps >= self.max_steps:
            reward, terminated = -1.0, True
        info = self._info(valid)
        info["success"] = success
        return self._prompt(note), reward, terminated, False, info

    def render(self) -> str:
        return self._prompt()


class OpenTextToyEnv(TextEnv):
    """Say what to do with the microwave, in free text.

    ## Description
    An open-action environment (``available_actions`` is None, like DataSciCoding) for tests
    and examples of the generation code path.

    ## Observation
    ``"The pancake is next to the closed microwave. Say what you do first:"``

    ## Actions
    Any string (generated by the policy).

    ## Reward
    +1 when the action, stripped of leading whitespace, starts with ``keyword`` (default
    "open"), else 0.

    ## Episode End
    Terminates after one step.

    ## Arguments
    ``keyword`` (default "open").

    ## Version History
    * v0: initial version.
    """

    def __init__(self, keyword: str = "open"):
        self.keyword = keyword
        self.observation_space = text_space(1024)
        self.action_space = text_space(4096)

    def _reset(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        prompt = "The pancake is next to the closed microwave. Say what you do first:"
        return prompt, {"available_actions": None, "action_valid": True}

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        success = action.lstrip().startswith(self.keyword)
        info = {"available_actions": None, "action_valid": True, "success": success}
        return "Done.", float(success), True, False, info


#: The case-study family (not a benchmark family: ``agentbench-poad envs`` leaves it out).
FAMILY = EnvFamily(
    name="casestudy",
    id_prefix="CaseStudy",
    entry_point=f"{__name__}:MicrowaveCaseStudyEnv",
    version=0,
    actions="restricted",
    metric="return",
)
#: The open-action toy: the same family's facts, another entry point.
OPEN_TEXT_FAMILY = dataclasses.replace(
    FAMILY,
    entry_point=f"{__name__}:OpenTextToyEnv",
    actions="open",
    metric="final_auc",
    success_rule=SUCCESS_OPEN,
)

ROWS: tuple[TaskRow, ...] = (
    TaskRow(
        "Microwave",
        {},
        "the case study: open the microwave, put the pancake in, close it",
        paper_name="case study (Figure 1)",
    ),
    TaskRow(
        "MicrowaveClose",
        {"start_stage": 2, "max_steps": 1},
        "one-step bandit on the case study's last stage: close (+1) or open (-1)",
    ),
)
OPEN_TEXT_ROWS: tuple[TaskRow, ...] = (
    TaskRow("OpenText", {}, "say what to do with the microwave in free text (+1 for 'open')"),
)


def register_envs() -> tuple[str, ...]:
    """Register the toy ids with gymnasium (idempotent; ``import agentbench_poad`` does it)."""
    return register_family(FAMILY, ROWS) + register_family(OPEN_TEXT_FAMILY, OPEN_TEXT_ROWS)
