"""Gymnasium single-chef Overcooked env: a thin view of the PettingZoo env with one chef."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from agentbench_poad.core import TextEnv, text_space
from agentbench_poad.environments.overcooked.parallel import (
    INVALID_ACTION_PENALTY,
    MAX_ACTION_LENGTH,
    MAX_PROMPT_LENGTH,
    OvercookedParallelEnv,
)


class OvercookedEnv(TextEnv):
    """A chef in the TWOSOME salad kitchen, told in text, acting with macro-actions.

    ## Description

    A 7x7 kitchen seen by one chef through a 5x5 window. The chef must chop the recipe's foods on
    a cutting board, gather them in the bowl and serve the bowl at the delivery square. Ids:
    ``Overcooked-TomatoSalad-v0`` and ``Overcooked-TomatoLettuceSalad-v0`` (the paper's tasks)
    plus the other recipes of the reference's task list on the two-board kitchen. ``-v0``
    reproduces the reference (docs/reference.md#overcooked), including its quirks: objects away from their
    initial square and from boards/hands are not mentioned, "chop the X" is offered for a
    chopped X, some labels do not describe what the macro-action does.

    ## Observation

    A prompt ending in an open cue that the chosen label completes. Tomato Salad at reset::

        There is a fixed cutting board in the room. You notice a tomato on the table. You have
        nothing in hand. To serve the dish, a bowl containing only chopped tomato, you should
        first

    After an unavailable action the prompt starts with a sentence saying so.

    ## Actions

    One label of ``info["available_actions"]`` (always one per macro slot: 5 in the one-board
    kitchen, 8 in the two-board one). Tomato Salad at reset: ``pick up the tomato``,
    ``take the bowl``, ``walk to the cutting board``, ``serve nothing``, ``chop nothing``. A label
    runs a macro-action: walk (A*) to the object and interact; "chop" chops three times.

    ## Reward

    Sum over the macro-action's primitive ticks of ``0.99**k * r_k``: -0.001 per tick, +0.2 when a
    recipe food becomes chopped, +1 for serving the right dish, -0.1 for serving anything else
    (the served items return to their initial squares). An unavailable action:
    ``invalid_action_penalty`` (default -0.001), no tick, the state is unchanged.

    ## Episode End

    ``terminated`` when the right dish is served. ``truncated`` when a macro-action ends with the
    tick counter at 200 or more (the reference's limit is only checked at macro end, so an
    episode can run a few ticks past 200). There is no other step limit.

    ## Info

    ``available_actions`` (the labels to choose from), ``action_valid`` (whether the last label
    was available), ``macro_action_steps`` (primitive ticks of the last step), ``ticks`` (ticks
    of the episode) and ``success``: True from the step on which the right dish is served (the
    step that terminates the episode), False before; the leaderboard's success rule reads it.
    Chopping (+0.2) or a wrong delivery never makes it True, so a positive return is not a
    success.

    ## Arguments

    * ``task``: a task name (``"TomatoSalad"``, ``"TomatoLettuceSalad"``, ...).
    * ``render_mode``: ``"ansi"`` (text grid) or ``"rgb_array"`` (84x84 uint8 image).
    * ``invalid_action_penalty``: reward of an unavailable action (default -0.001).
    * ``n_agents``: must be 1 (several chefs: the PettingZoo ``parallel_env``).

    ``reset(seed=...)`` seeds ``self.np_random``; the kitchen itself is deterministic.

    ## Version History

    * v0: the reference behaviour (TWOSOME ``Overcooked-LLMA-v3/v4`` as used by POAD).
      ``info["success"]`` was added later (an info key only: rewards, observations and
      termination are unchanged).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}

    def __init__(
        self,
        task: str = "TomatoSalad",
        render_mode: str | None = None,
        invalid_action_penalty: float = INVALID_ACTION_PENALTY,
        n_agents: int = 1,
    ) -> None:
        if n_agents != 1:
            raise ValueError(
                f"the gymnasium Overcooked env has exactly one chef (n_agents=1), got {n_agents!r}; "
                "for several chefs use agentbench_poad.environments.overcooked.parallel_env"
            )
        self.parallel = OvercookedParallelEnv(
            task=task,
            n_agents=1,
            render_mode=render_mode,
            invalid_action_penalty=invalid_action_penalty,
        )
        self.render_mode = render_mode
        self.invalid_action_penalty = self.parallel.invalid_action_penalty
        self.observation_space = text_space(MAX_PROMPT_LENGTH)
        self.action_space = text_space(MAX_ACTION_LENGTH)
        self._agent = self.parallel.possible_agents[0]

    @property
    def engine(self):  # noqa: ANN201 - KitchenEngine, imported lazily by readers
        """The kitchen engine (state, rules); the oracle reads it."""
        return self.parallel.engine

    @property
    def task(self) -> str:
        """The task name."""
        return self.parallel.task.name

    def _reset(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        observations, infos = self.parallel.reset(options=options)
        return observations[self._agent], infos[self._agent]

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        observations, rewards, terminations, truncations, infos = self.parallel.step(
            {self._agent: action}
        )
        a = self._agent
        return observations[a], rewards[a], terminations[a], truncations[a], infos[a]

    def render(self) -> str | np.ndarray | None:
        return self.parallel.render()
