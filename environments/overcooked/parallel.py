"""PettingZoo ``ParallelEnv``: the native form of the Overcooked kitchen.

Each chef (``chef_0``, ``chef_1``, ...) gets its own text observation and its own list of action
labels; a step takes one label per live chef. The joint macro step runs tick by tick until EVERY
chef's macro-action has finished (see :mod:`.engine` for the multi-chef rules); the reward is the
team's (0.99-per-tick discounted over the step) and every chef gets it.

An unavailable label makes that chef idle for the step (it stays put), adds
``invalid_action_penalty`` to its reward and puts a sentence in front of its next prompt. If no
chef gave an available label, no tick runs: the kitchen is unchanged.

Each chef's info (at reset and after every step) carries ``available_actions`` (its labels),
``action_valid`` (whether its label was available), ``macro_action_steps`` (ticks of the step),
``ticks`` (ticks of the episode) and ``success``: True from the step on which the right dish is
served (the team's success; that step also terminates the episode), False before. A wrong
delivery or the tick limit never makes it True.

Example::

    from agentbench_poad.environments.overcooked import parallel_env

    env = parallel_env(task="TomatoSalad", n_agents=2)
    observations, infos = env.reset(seed=0)
    actions = {a: infos[a]["available_actions"][0] for a in env.agents}
    observations, rewards, terminations, truncations, infos = env.step(actions)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.error import ResetNeeded
from gymnasium.spaces import Text
from gymnasium.utils import seeding
from pettingzoo import ParallelEnv

from agentbench_poad.core import check_action_type, invalid_action_note, text_space, to_text
from agentbench_poad.environments.overcooked.engine import KitchenEngine
from agentbench_poad.environments.overcooked.render import render_ansi, render_rgb
from agentbench_poad.environments.overcooked.tasks import get_task
from agentbench_poad.environments.overcooked.text import PromptBuilder

#: Reward of an unavailable action: the cost of one tick, although no tick runs (deterministic).
INVALID_ACTION_PENALTY = -0.001
MAX_PROMPT_LENGTH = 2048
MAX_ACTION_LENGTH = 256


class OvercookedParallelEnv(ParallelEnv):
    """The Overcooked kitchen for ``n_agents`` chefs (PettingZoo parallel API).

    Args:
        task: a task name of :data:`~agentbench_poad.environments.overcooked.tasks.TASKS`.
        n_agents: number of chefs (1 or 2; the second chef starts at (1, 2)).
        render_mode: ``"ansi"``, ``"rgb_array"`` or None.
        invalid_action_penalty: reward of an unavailable action.
    """

    metadata = {
        "name": "overcooked_v0",
        "render_modes": ["ansi", "rgb_array"],
        "render_fps": 4,
        "is_parallelizable": True,
    }

    def __init__(
        self,
        task: str = "TomatoSalad",
        n_agents: int = 1,
        render_mode: str | None = None,
        invalid_action_penalty: float = INVALID_ACTION_PENALTY,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be one of {self.metadata['render_modes']} or None, "
                f"got {render_mode!r}"
            )
        self.task = get_task(task)
        self.engine = KitchenEngine(self.task, n_agents=n_agents)
        self.text = PromptBuilder(self.engine)
        self.render_mode = render_mode
        self.invalid_action_penalty = float(invalid_action_penalty)
        self.possible_agents = [f"chef_{i}" for i in range(n_agents)]
        self.agents: list[str] = []
        self._observation_spaces = {a: text_space(MAX_PROMPT_LENGTH) for a in self.possible_agents}
        self._action_spaces = {a: text_space(MAX_ACTION_LENGTH) for a in self.possible_agents}
        self._labels: list[tuple[str, ...]] = []
        self._prompts: list[str] = []
        self.np_random, _ = seeding.np_random(None)

    def observation_space(self, agent: str) -> Text:
        # The same object on every call (PettingZoo's API test checks identity).
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> Text:
        return self._action_spaces[agent]

    # -- API ------------------------------------------------------------------------------
    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
        # The kitchen has no randomness; the generator is seeded for API uniformity only.
        if seed is not None or not hasattr(self, "np_random"):
            self.np_random, _ = seeding.np_random(seed)
        self.engine.reset()
        self.agents = list(self.possible_agents)
        self._refresh_text()
        observations = {a: self._prompts[i] for i, a in enumerate(self.possible_agents)}
        infos = {a: self._info(i, valid=True, ticks=0) for i, a in enumerate(self.possible_agents)}
        return observations, infos

    def step(
        self, actions: dict[str, str]
    ) -> tuple[
        dict[str, str],
        dict[str, float],
        dict[str, bool],
        dict[str, bool],
        dict[str, dict[str, Any]],
    ]:
        if not self.agents:
            raise ResetNeeded("OvercookedParallelEnv.step() called with no live chef; call reset()")
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise ValueError(f"actions are missing for live chefs {missing}; give one label each")
        indices: list[int | None] = []
        notes: list[str] = []
        for i, agent in enumerate(self.possible_agents):
            action = check_action_type(actions[agent])
            labels = self._labels[i]
            if action in labels:
                indices.append(labels.index(action))
                notes.append("")
            else:
                indices.append(None)
                notes.append(invalid_action_note(action, list(labels)))
        if all(m is None for m in indices):
            reward, ticks, terminated, truncated = 0.0, 0, False, False
        else:
            result = self.engine.run_macros(indices)
            reward, ticks = result.reward, result.ticks
            terminated, truncated = result.terminated, result.truncated
            self._refresh_text()
        observations, rewards, terminations, truncations, infos = {}, {}, {}, {}, {}
        for i, agent in enumerate(self.possible_agents):
            valid = indices[i] is not None
            prompt = self._prompts[i]
            if not valid:
                prompt = to_text(f"{notes[i]} {prompt}", MAX_PROMPT_LENGTH)
            observations[agent] = prompt
            rewards[agent] = reward + (0.0 if valid else self.invalid_action_penalty)
            terminations[agent] = terminated
            truncations[agent] = truncated
            infos[agent] = self._info(i, valid=valid, ticks=ticks)
        if terminated or truncated:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def render(self) -> str | np.ndarray | None:
        if self.render_mode == "ansi":
            return render_ansi(self.engine)
        if self.render_mode == "rgb_array":
            return render_rgb(self.engine)
        return None

    def close(self) -> None:
        pass

    # -- helpers --------------------------------------------------------------------------
    def _refresh_text(self) -> None:
        built = [self.text.build(obs) for obs in self.engine.macro_obs]
        self._prompts = [to_text(p, MAX_PROMPT_LENGTH) for p, _ in built]
        self._labels = [labels for _, labels in built]

    def _info(self, i: int, valid: bool, ticks: int) -> dict[str, Any]:
        """Chef ``i``'s info dict (keys listed in the module docstring)."""
        return {
            "available_actions": list(self._labels[i]),
            "action_valid": valid,
            "macro_action_steps": ticks,
            "ticks": self.engine.state.ticks,
            "success": self.engine.success,
        }


def parallel_env(
    task: str = "TomatoSalad",
    n_agents: int = 1,
    render_mode: str | None = None,
    invalid_action_penalty: float = INVALID_ACTION_PENALTY,
) -> OvercookedParallelEnv:
    """Make the PettingZoo parallel Overcooked env (see :class:`OvercookedParallelEnv`)."""
    return OvercookedParallelEnv(
        task=task,
        n_agents=n_agents,
        render_mode=render_mode,
        invalid_action_penalty=invalid_action_penalty,
    )
