"""The VirtualHome oracle: breadth-first search from the env's state over offered actions.

The planner expands only the actions the environment *offers* in each state and applies the
engine's own transition function, so its plans are exactly the shortest ones an agent choosing
from ``info["available_actions"]`` can achieve (6 steps for Food Preparation and its variants,
11 for Entertainment, REFERENCE_SPEC.md sections 2.2-2.3). It re-plans at every call from the
state of the env it was made for, so it recovers if something else stepped the env.

It is an exact optimum, not a script: the scene is deterministic (the reset seed changes
nothing), the reward is +1 on the completing step and 0 otherwise, and an action that is not
offered (or fails) leaves the state unchanged at no gain. So every successful episode returns
1, the undiscounted maximum, and a shortest plan of ``n`` steps maximises the discounted return
``γ**(n-1)`` too; the plans (6 and 11 steps) fit the 50-step limit.
``tests/test_oracle_bound.py`` checks the committed records against both bounds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import gymnasium as gym

from agentbench_poad.environments.virtualhome.engine import State
from agentbench_poad.environments.virtualhome.env import VirtualHomeEnv
from agentbench_poad.environments.virtualhome.scenarios import Scenario


def shortest_plan(scenario: Scenario, start: State) -> list[str] | None:
    """Labels of a shortest offered-action plan from ``start`` to the goal (``None``: none).

    Ties are broken by the order of the offered actions, so the plan is deterministic.
    """
    scene, goal = scenario.scene, scenario.goal
    if goal.achieved(scene, start):
        return []
    parents: dict[State, tuple[State, str] | None] = {start: None}
    frontier = deque([start])
    while frontier:
        state = frontier.popleft()
        for index in scenario.offered_indices(state):
            label, action = scenario.catalogue[index]
            nxt = scene.apply(state, action)
            if nxt is None or nxt in parents:
                continue
            parents[nxt] = (state, label)
            if goal.achieved(scene, nxt):
                plan = [label]
                link = parents[state]
                while link is not None:
                    plan.append(link[1])
                    link = parents[link[0]]
                return plan[::-1]
            frontier.append(nxt)
    return None


class VirtualHomeOracle:
    """Acts on the first step of a shortest plan from the bound env's current state.

    Args:
        env: the env (or a wrapper of it) the oracle will act in.
    """

    name = "oracle"

    def __init__(self, env: gym.Env) -> None:
        unwrapped = env.unwrapped
        if not isinstance(unwrapped, VirtualHomeEnv):
            raise TypeError(
                f"the VirtualHome oracle needs a VirtualHomeEnv, got {type(unwrapped).__name__}; "
                "use agentbench_poad.baselines.oracle.make_oracle(env) to dispatch by family"
            )
        self.env = unwrapped
        # state -> first action of a shortest plan from it (None: the goal is unreachable);
        # every state along a found plan is filled in, so an episode searches once.
        self._next: dict[State, str | None] = {}

    def plan(self) -> list[str] | None:
        """A shortest plan from the env's current state."""
        return shortest_plan(self.env.scenario, self.env.state)

    def act(self, observation: str, available_actions: Sequence[str] | None) -> str:
        state = self.env.state
        if state not in self._next:
            plan = self.plan()
            self._next[state] = plan[0] if plan else None
            scenario = self.env.scenario
            for label, following in zip(plan or [], (plan or [])[1:]):
                index = scenario.offered(state).index(label)
                state = scenario.scene.apply(
                    state, scenario.catalogue[scenario.offered_indices(state)[index]][1]
                )
                self._next[state] = following
        action = self._next[self.env.state]
        if action is not None:
            return action
        # Goal unreachable (e.g. the Entertainment dead end): any offered action will do.
        actions = list(available_actions or self.env.offered_actions())
        return actions[0]


def make_virtualhome_oracle(env: gym.Env) -> VirtualHomeOracle:
    """An oracle agent bound to ``env`` (see :class:`VirtualHomeOracle`)."""
    return VirtualHomeOracle(env)
