"""Overcooked engine golden tests (docs/reference.md#overcooked-rewards, #overcooked-text and #verification)."""

from __future__ import annotations

from collections import deque

import gymnasium as gym
import pytest

from agentbench_poad.environments.overcooked.engine import CHEF, KitchenEngine
from agentbench_poad.environments.overcooked.tasks import TASKS
from agentbench_poad.environments.overcooked.text import PromptBuilder

TS_START_ACTIONS = [
    "pick up the tomato",
    "take the bowl",
    "walk to the cutting board",
    "serve nothing",
    "chop nothing",
]
TL_START_ACTIONS = [
    "pick up the tomato",
    "pick up the lettuce",
    "pick up the onion",
    "take the empty bowl",
    "walk to the first cutting board",
    "walk to the second cutting board",
    "serve nothing",
    "chop nothing",
]
# docs/reference.md#overcooked-rewards: the shortest plans, written as the labels the env shows at each step.
TS_PLAN = [
    "pick up the tomato",
    "put the tomato on the cutting board",
    "chop the tomato",
    "pick up the tomato",
    "take the bowl",
    "serve the dish",
]
TL_PLAN = [
    "pick up the tomato",
    "put the tomato on the first cutting board",
    "chop the tomato",
    "pick up the lettuce",
    "put the lettuce on the second cutting board",
    "chop the lettuce",
    "pick up the tomato",
    "take the empty bowl",  # label quirk: the macro drops the tomato into the bowl, then takes it
    "put the lettuce in the bowl",
    "serve the dish",
]


def make(task: str):
    return gym.make(f"Overcooked-{task}-v0")


def discounted(rewards: list[float]) -> float:
    return sum(0.99**k * r for k, r in enumerate(rewards))


def test_initial_state_tomato_salad():
    env = make("TomatoSalad")
    obs, info = env.reset(seed=0)
    assert info["available_actions"] == TS_START_ACTIONS
    assert "tomato" in obs and "bowl" not in obs.split(" To serve")[0]  # bowl out of view
    assert "nothing in hand" in obs
    assert obs.endswith("you should first")


def test_initial_state_tomato_lettuce_salad():
    env = make("TomatoLettuceSalad")
    obs, info = env.reset(seed=0)
    assert info["available_actions"] == TL_START_ACTIONS
    facts = obs.split(" To serve")[0]
    assert "two fixed cutting boards" in facts
    assert "a tomato, a lettuce and an onion" in facts
    assert "bowl" not in facts
    assert "nothing in hand" in facts


@pytest.mark.parametrize(
    ("task", "plan", "ticks"), [("TomatoSalad", TS_PLAN, 28), ("TomatoLettuceSalad", TL_PLAN, 46)]
)
def test_shortest_plan(task, plan, ticks):
    env = make(task)
    _, info = env.reset(seed=0)
    total_ticks = 0
    for t, label in enumerate(plan):
        assert label in info["available_actions"], (t, label, info["available_actions"])
        _, reward, terminated, truncated, info = env.step(label)
        total_ticks += info["macro_action_steps"]
        assert info["action_valid"]
        assert terminated == (t == len(plan) - 1)
        assert not truncated
    assert total_ticks == ticks == info["ticks"]
    assert reward > 0.9  # +1 discounted over the serving walk


def test_chop_reward_is_discounted_inside_the_macro():
    env = make("TomatoSalad")
    env.reset(seed=0)
    env.step("pick up the tomato")
    env.step("put the tomato on the cutting board")
    _, reward, _, _, info = env.step("chop the tomato")
    assert info["macro_action_steps"] == 3
    expected = -0.001 * (1 + 0.99 + 0.99**2) + 0.2 * 0.99**2
    assert reward == pytest.approx(expected, abs=1e-12)


def test_onion_is_a_distractor_without_chop_reward():
    env = make("TomatoLettuceSalad")
    env.reset(seed=0)
    env.step("pick up the onion")
    env.step("put the onion on the second cutting board")
    _, reward, _, _, info = env.step("chop the onion")
    assert info["macro_action_steps"] == 3
    assert reward == pytest.approx(-0.001 * (1 + 0.99 + 0.99**2), abs=1e-12)


def test_wrong_delivery_refreshes_the_food():
    env = make("TomatoSalad")
    env.reset(seed=0)
    env.step("pick up the tomato")
    obs, reward, terminated, truncated, info = env.step("serve the dish")  # a raw tomato
    n = info["macro_action_steps"]
    expected = discounted([-0.001] * (n - 1) + [-0.001 - 0.1])
    assert reward == pytest.approx(expected, abs=1e-12)
    assert not terminated and not truncated
    engine = env.unwrapped.engine
    assert engine.state.pos[0] == (0, 5) and engine.state.chops[0] == 0
    assert engine.state.hand == [-1]
    assert "serve nothing" in info["available_actions"]


def test_tick_limit_truncates_at_macro_end():
    env = make("TomatoSalad")
    env.reset(seed=0)
    # Walking back and forth between the board and the delivery costs ticks and nothing else.
    truncated = False
    steps = 0
    while not truncated:
        label = "walk to the cutting board" if steps % 2 == 0 else "serve nothing"
        _, _, terminated, truncated, info = env.step(label)
        steps += 1
        assert not terminated
        if not truncated:
            assert info["ticks"] < 200
    assert info["ticks"] >= 200


def _bfs(task: str, max_depth: int):
    engine = KitchenEngine(TASKS[task])
    engine.reset()
    builder = PromptBuilder(engine)
    start = engine.state.copy()
    seen = {start.key(): start}
    frontier = deque([(start, 0)])
    prompts, action_lists = set(), set()
    prompt, labels = builder.build(engine.macro_obs[0])
    prompts.add(prompt)
    action_lists.add(labels)
    transitions = 0
    while frontier:
        state, depth = frontier.popleft()
        if depth >= max_depth:
            continue
        for m in range(len(engine.macros)):
            engine.state = state.copy()
            result = engine.run_macros([m])
            transitions += 1
            prompt, labels = builder.build(engine.macro_obs[0])
            prompts.add(prompt)
            action_lists.add(labels)
            if result.terminated or result.truncated:
                continue
            key = engine.state.key()
            if key not in seen:
                seen[key] = engine.state
                frontier.append((engine.state, depth + 1))
    return len(seen), transitions, prompts, action_lists


def test_exhaustive_bfs_tomato_salad():
    states, transitions, prompts, action_lists = _bfs("TomatoSalad", max_depth=10**6)
    # docs/reference.md#verification: 21 distinct prompts, 6 distinct action lists.
    assert len(prompts) == 21
    assert len(action_lists) == 6
    assert all(len(labels) == 5 for labels in action_lists)
    # Our state (items, hands, belief positions, cell map, chop counter; no tick counter, no
    # belief chop fractions) differs from docs/reference.md#verification's 1 175, so its count is our own regression value.
    assert transitions == 5 * states
    assert states == 24


def test_bfs_tomato_lettuce_salad_40_macro_steps():
    # docs/reference.md#verification: within 40 macro steps the reference shows 787 prompts and 39 action lists.
    states, transitions, prompts, action_lists = _bfs("TomatoLettuceSalad", max_depth=40)
    assert len(prompts) == 787
    assert len(action_lists) == 39
    assert transitions <= 8 * states


def test_every_task_has_full_length_action_lists():
    for name, task in TASKS.items():
        env = make(name)
        _, info = env.reset(seed=0)
        n_slots = 5 if task.layout == "tomato" else 8
        assert len(info["available_actions"]) == n_slots
        assert len(set(info["available_actions"])) == n_slots


def _two_chefs_side_by_side() -> KitchenEngine:
    engine = KitchenEngine(TASKS["TomatoSalad"], n_agents=2)
    engine.reset()
    # Walk chef 2 from (1,2) to (1,3), next to chef 1 at (1,4).
    engine.tick([4, 0])
    assert engine.state.chef == [(1, 4), (1, 3)]
    return engine


def test_chefs_walking_into_each_other_swap():
    engine = _two_chefs_side_by_side()
    _, _, blocked = engine.tick([2, 0])  # chef 1 left, chef 2 right
    assert engine.state.chef == [(1, 3), (1, 4)]
    assert blocked == [False, False]


def test_chef_walking_into_a_standing_chef_is_blocked():
    engine = _two_chefs_side_by_side()
    _, _, blocked = engine.tick([2, 4])  # chef 1 left into chef 2, who stays
    assert engine.state.chef == [(1, 4), (1, 3)]
    assert blocked == [True, False]


def test_chef_waits_for_the_chef_in_front_to_move_away():
    engine = _two_chefs_side_by_side()
    _, _, blocked = engine.tick([2, 1])  # chef 1 left, chef 2 steps down out of the way
    assert engine.state.chef == [(1, 3), (2, 3)]
    assert blocked == [False, False]


def test_team_reward_is_one_step_penalty_per_tick():
    engine = KitchenEngine(TASKS["TomatoSalad"], n_agents=2)
    engine.reset()
    reward, _, _ = engine.tick([1, 1])
    assert reward == pytest.approx(-0.001)


def _check_invariants(engine: KitchenEngine) -> None:
    s = engine.state
    held = {h for h in s.hand if h >= 0}
    in_plate = set(s.contents)
    on_board = {b for b in s.board if b >= 0}
    for k, p in enumerate(s.pos):
        if k in held:
            assert p == s.chef[s.hand.index(k)]
        elif k in in_plate:
            assert p == s.pos[engine.plate]
        elif k in on_board:
            assert p == engine.boards[s.board.index(k)]
        elif k == engine.plate and s.delivered:
            assert p == engine.delivery
        else:  # on a plain counter: the cell says which item lies there
            assert s.cells[p[0] * engine.width + p[1]] == engine.item_codes[k]
    for p in s.chef:
        assert p in engine._interior
        assert s.cells[p[0] * engine.width + p[1]] == CHEF
    assert len(set(s.chef)) == len(s.chef)
    assert all(0 <= c <= 3 for c in s.chops)


@pytest.mark.parametrize(
    ("task", "n_agents"),
    [("TomatoSalad", 1), ("TomatoLettuceSalad", 1), ("TomatoSalad", 2), ("TomatoLettuceSalad", 2)],
)
def test_random_rollouts_keep_the_kitchen_consistent(task, n_agents):
    import numpy as np

    rng = np.random.default_rng(0)
    engine = KitchenEngine(TASKS[task], n_agents=n_agents)
    for _ in range(5):
        engine.reset()
        ticks = 0
        for _ in range(300):
            result = engine.run_macros(
                [int(rng.integers(len(engine.macros))) for _ in range(n_agents)]
            )
            assert result.ticks >= 1
            ticks += result.ticks
            assert engine.state.ticks == ticks
            _check_invariants(engine)
            if result.terminated or result.truncated:
                break
        assert result.terminated or result.truncated
