"""The gymnasium entry point of the VirtualHome family: :class:`VirtualHomeEnv`."""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from agentbench_poad.core import TextEnv, invalid_action_note, text_space, to_text

from .engine import State
from .scenarios import Scenario, build_scenario
from .tasks import TASKS_BY_NAME, VirtualHomeTask

_SPACES = re.compile(r"\s+")


class _View(NamedTuple):
    """What an observer of one state gets (memoised per state)."""

    prompt: str
    offered: tuple[str, ...]
    #: offered label (as written and normalised) -> catalogue index
    index: dict[str, int]
    success: bool


def normalize_action(action: str) -> str:
    """Case, surrounding blanks, repeated blanks and a final full stop do not matter."""
    return _SPACES.sub(" ", action).strip().rstrip(".").strip().lower()


class VirtualHomeEnv(TextEnv):
    """Household chores in a four-room flat, as text (TWOSOME's VirtualHome tasks).

    ## Description

    A single agent moves between four rooms (kitchen, bathroom, bedroom, living room) and acts on
    the objects of a compact scene graph with macro-actions (walk to a room or an object, grab,
    put in/on, open, close, turn on/off, sit, stand up). It sees only the objects of its current
    room (and what it holds). Tasks are rows of :data:`~.tasks.TASKS`:

    * ``FoodPreparation``: put the pancake into the microwave and close it; variants ``Cheese``,
      ``Hamburger``, ``ApplePie``, ``Pizza`` (food swapped), ``WashingPlate`` (dishes,
      dishwasher) and ``Laundry`` (clothes, washing machine) keep its rules;
    * ``Entertainment``: bring the chips and the milk to the living room, turn the TV on and sit
      on the sofa.

    ``-v0`` reproduces the reference environments (REFERENCE_SPEC.md section 2): which actions
    are offered in which state, their effects, the Entertainment dead end (put one item on the
    coffee table first and the other can no longer be reached) and sitting trap (once seated
    only walks are offered and walks fail while seated), the 50-step limit and a reward of +1
    only on completion. The reset state is fixed: the seed changes nothing.

    ## Observation

    A text prompt (``gymnasium.spaces.Text``): the rooms and the agent's room, what it notices,
    what is close, what it holds, the state of the appliance / TV, the goal, and an open cue
    for the next step. The initial Food Preparation prompt::

        There are four rooms: the kitchen, the bathroom, the bedroom and the living room. You
        are in the kitchen. You notice the pancake and the microwave. Your hands are empty, and
        neither the pancake nor the microwave is close to you. The microwave is not open. Your
        goal is to heat up the pancake in the microwave. Your next step is to

    After an unavailable action the prompt starts with a sentence saying so.

    ## Actions

    A text action: one of ``info["available_actions"]`` (e.g. ``"walk to the pancake"``);
    case, extra blanks and a final full stop are ignored. Food Preparation has 10 macro-actions,
    Entertainment 17; each state offers a subset (3 to 7). An offered action can still fail
    (e.g. "put the pancake in the microwave" while it is shut): the step then changes nothing
    (``info["action_effective"] = False``), exactly as in the reference.

    ## Rewards

    +1 on the step that completes the task, 0 otherwise. An action that is not offered, or that
    names an unknown object, is a no-op with ``invalid_action_penalty = 0.0`` (the reference
    only ever offers valid choices and has no penalties; it still costs a step).

    ## Episode End

    Terminated when the task is completed. Truncated after 50 steps by the ``TimeLimit`` that
    registration adds (``max_episode_steps=50``, the reference's limit).

    ## Arguments

    ``gym.make("VirtualHome-<Task>-v0", render_mode="ansi")``; the registration passes
    ``task=<Task>``. ``task`` may also be a :class:`~.tasks.VirtualHomeTask` row of your own.

    ## Version History

    * v0: the reference behaviour of TWOSOME/ADRL (facts of the prompt unchanged, our wording).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    invalid_action_penalty: float = 0.0

    def __init__(
        self, task: str | VirtualHomeTask = "FoodPreparation", render_mode: str | None = None
    ) -> None:
        if isinstance(task, str):
            try:
                task = TASKS_BY_NAME[task]
            except KeyError:
                raise ValueError(
                    f"unknown VirtualHome task {task!r}; choose one of {sorted(TASKS_BY_NAME)}"
                ) from None
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.task = task
        self.render_mode = render_mode
        self.scenario: Scenario = build_scenario(task)
        self.observation_space = text_space(4096)
        self.action_space = text_space(256)
        self.state: State = self.scenario.scene.initial_state()
        self._observation = ""
        # Prompt, offered actions and transitions are functions of the state, and at most a few
        # hundred states are reachable: memoise them (rollouts revisit the same few states).
        self._views: dict[State, _View] = {}
        self._transitions: dict[tuple[State, int], State | None] = {}

    # -- TextEnv hooks ----------------------------------------------------------------------
    def _reset(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.state = self.scenario.scene.initial_state()
        self._observation = self._view(self.state).prompt
        return self._observation, self._info(action_valid=True, action_effective=True)

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        view = self._view(self.state)
        index = view.index.get(action)
        if index is None:
            index = view.index.get(normalize_action(action))
        if index is None:
            note = invalid_action_note(action, list(view.offered))
            self._observation = to_text(f"{note} {view.prompt}", self.observation_space.max_length)
            info = self._info(action_valid=False, action_effective=False)
            return self._observation, self.invalid_action_penalty, False, False, info
        key = (self.state, index)
        if key not in self._transitions:
            action_ = self.scenario.catalogue[index][1]
            self._transitions[key] = self.scenario.scene.apply(self.state, action_)
        new_state = self._transitions[key]
        if new_state is not None:
            self.state = new_state  # one assignment: the state is never half-updated
        view = self._view(self.state)
        self._observation = view.prompt
        info = self._info(action_valid=True, action_effective=new_state is not None)
        return self._observation, 1.0 if view.success else 0.0, view.success, False, info

    # -- public helpers -----------------------------------------------------------------------
    def offered_actions(self, state: State | None = None) -> list[str]:
        """Labels of the actions offered in ``state`` (default: the current state)."""
        return list(self._view(self.state if state is None else state).offered)

    def _view(self, state: State) -> _View:
        view = self._views.get(state)
        if view is None:
            scenario = self.scenario
            indices = scenario.offered_indices(state)
            labels = tuple(scenario.catalogue[i][0] for i in indices)
            index = {label: i for label, i in zip(labels, indices)}
            index.update({normalize_action(label): i for label, i in zip(labels, indices)})
            view = _View(
                prompt=to_text(scenario.prompt(state), self.observation_space.max_length),
                offered=labels,
                index=index,
                success=scenario.goal.achieved(scenario.scene, state),
            )
            self._views[state] = view
        return view

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        lines = [self._observation, "", "Available actions:"]
        lines += [f"  - {a}" for a in self.offered_actions()]
        return "\n".join(lines)

    def _info(self, *, action_valid: bool, action_effective: bool) -> dict[str, Any]:
        return {
            "available_actions": self.offered_actions(),
            "action_valid": action_valid,
            "action_effective": action_effective,
            "success": self._view(self.state).success,
            "task": self.task.name,
        }
