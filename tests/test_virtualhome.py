"""VirtualHome: registration, the text-env contract, prompts, quirks and bad input."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import pytest
from gymnasium.error import ResetNeeded

from agentbench_poad import check_text_env
from agentbench_poad.baselines.oracle_virtualhome import shortest_plan
from agentbench_poad.environments import registered_ids
from agentbench_poad.environments.virtualhome.engine import (
    CONTAINER,
    GRABBABLE,
    IN_ROOM,
    INSIDE,
    OPENABLE,
    Action,
    Scene,
    SceneObject,
)
from agentbench_poad.environments.virtualhome.env import VirtualHomeEnv
from agentbench_poad.environments.virtualhome.registration import DESCRIPTIONS
from agentbench_poad.environments.virtualhome.tasks import TASKS, VirtualHomeTask

EXPECTED_IDS = {
    f"VirtualHome-{name}-v0"
    for name in (
        "FoodPreparation", "Entertainment", "Cheese", "Hamburger", "ApplePie", "Pizza",
        "WashingPlate", "Laundry",
    )
}  # fmt: skip
IDS = sorted(EXPECTED_IDS)
ROOM_WALKS = ["walk to the living room", "walk to the kitchen", "walk to the bathroom",
              "walk to the bedroom"]  # fmt: skip


def make(task: str = "FoodPreparation", **kwargs) -> gym.Env:
    return gym.make(f"VirtualHome-{task}-v0", **kwargs)


def run(env: gym.Env, actions: list[str]) -> tuple[str, float, bool, bool, dict]:
    """Reset, take ``actions`` (each must be offered) and return the last step's result."""
    obs, info = env.reset(seed=0)
    result = (obs, 0.0, False, False, info)
    for action in actions:
        assert action in result[4]["available_actions"], (action, result[4]["available_actions"])
        result = env.step(action)
    return result


# -- registration ---------------------------------------------------------------------------------
def test_ids_and_descriptions() -> None:
    assert set(registered_ids("virtualhome")) == EXPECTED_IDS
    assert set(DESCRIPTIONS) == EXPECTED_IDS
    assert all(DESCRIPTIONS[i].strip() for i in EXPECTED_IDS)
    for env_id in EXPECTED_IDS:
        assert gym.spec(env_id).max_episode_steps == 50  # the reference's episode limit


def test_registration_imports_only_the_task_table() -> None:
    code = (
        "import sys, gymnasium, agentbench_poad\n"
        "assert 'VirtualHome-Cheese-v0' in gymnasium.registry\n"
        "bad = [m for m in sys.modules if m.startswith('agentbench_poad.environments.virtualhome.')"
        " and not m.endswith(('.registration', '.tasks'))]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("env_id", IDS)
def test_check_text_env(env_id: str) -> None:
    env = gym.make(env_id, render_mode="ansi")
    check_text_env(env, seeds=(0, 1, 2), max_steps=60)
    assert "Available actions:" in env.render()


def test_unknown_task_and_render_mode_name_the_fix() -> None:
    with pytest.raises(ValueError, match="choose one of"):
        VirtualHomeEnv(task="Cake")
    with pytest.raises(ValueError, match="render_mode"):
        VirtualHomeEnv(render_mode="human")


def test_a_new_chore_is_a_row() -> None:
    banana = VirtualHomeTask(
        name="Banana", scenario="appliance", roles={"item": "banana", "appliance": "oven"},
        description="test", shortest_plan=6,
    )  # fmt: skip
    env = VirtualHomeEnv(task=banana)
    obs, info = env.reset(seed=0)
    assert "heat up the banana in the oven" in obs
    assert "walk to the oven" in info["available_actions"]
    assert len(shortest_plan(env.scenario, env.state)) == 6


# -- observations -----------------------------------------------------------------------------------
def test_initial_offered_actions_match_appendix_a() -> None:
    for task, objects in (("FoodPreparation", ("pancake", "microwave")),
                          ("Entertainment", ("chips", "milk"))):  # fmt: skip
        _, info = make(task).reset(seed=0)
        expected = [ROOM_WALKS[i] for i in (0, 2, 3)] + [f"walk to the {o}" for o in objects]
        assert info["available_actions"] == expected


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_prompt_states_the_goal_and_ends_with_the_cue(task: VirtualHomeTask) -> None:
    env = make(task.name)
    obs, info = env.reset(seed=0)
    goal = env.unwrapped.scenario.goal.instruction(env.unwrapped.scenario.scene)
    assert f"Your goal is to {goal}." in obs
    assert obs.endswith("Your next step is to")
    assert obs.startswith("There are four rooms") and "You are in the kitchen." in obs
    for noun in task.roles.values():
        if task.scenario == "appliance" or noun in ("chips", "milk"):
            assert noun in obs
    # Every offered label names only this task's nouns.
    assert all(
        a.startswith(("walk", "grab", "put", "open", "close")) for a in info["available_actions"]
    )
    # Same reset for every seed: the reference has no randomness.
    assert env.reset(seed=123)[0] == obs


def test_variants_keep_heat_up_and_use_plural_verbs() -> None:
    env = make("WashingPlate")
    obs, _, _, _, _ = run(env, ["walk to the dishes"])
    assert "heat up the dishes in the dishwasher" in obs
    assert "The dishes are close to you" in obs
    obs = run(env, ["walk to the dishes", "grab the dishes", "walk to the dishwasher",
                    "open the dishwasher", "put the dishes in the dishwasher",
                    "close the dishwasher"])[0]  # fmt: skip
    assert "The dishes are inside the dishwasher." in obs


def test_food_preparation_prompt_follows_the_state() -> None:
    env = make()
    obs = run(env, ["walk to the pancake"])[0]
    assert "Your hands are empty. The pancake is close to you. The microwave is not open." in obs
    obs = run(env, ["walk to the pancake", "grab the pancake"])[0]
    assert "You are holding the pancake, but the microwave is not close to you." in obs
    obs = run(env, ["walk to the pancake", "grab the pancake", "walk to the bedroom"])[0]
    assert "You are in the bedroom. You notice nothing useful here." in obs
    assert "You are holding the pancake." in obs
    obs = run(env, ["walk to the microwave", "open the microwave"])[0]
    assert "The microwave is close to you. The microwave is open." in obs
    # Just put in: the reference states neither hands nor closeness here.
    plan = ["walk to the pancake", "grab the pancake", "walk to the microwave",
            "open the microwave", "put the pancake in the microwave"]  # fmt: skip
    obs = run(env, plan)[0]
    assert "You notice the pancake and the microwave. The microwave is open. Your goal" in obs
    obs = run(env, [*plan, "close the microwave"])[0]
    assert "The pancake is inside the microwave." in obs and "The microwave is closed." in obs


def test_entertainment_prompt_follows_the_state() -> None:
    env = make("Entertainment")
    obs = run(env, ["walk to the chips", "grab the chips"])[0]
    assert "You notice the chips and the milk. The milk is not close to you." in obs
    assert "You are holding the chips." in obs
    obs = run(env, ["walk to the living room"])[0]
    assert "You notice the coffee table, the TV and the sofa." in obs
    assert "None of the coffee table, the TV and the sofa is close to you." in obs
    assert "Your hands are empty." in obs
    # The reference's facts near the TV: with the TV on it says the sofa is not close, and with
    # empty hands it says neither what is held nor that the TV is on.
    obs = run(env, ["walk to the living room", "walk to the TV"])[0]
    assert "The TV is close to you. Your goal" in obs
    obs = run(env, ["walk to the living room", "walk to the TV", "turn on the TV"])[0]
    assert "The sofa is not close to you. Your goal" in obs
    steps = ["walk to the chips", "grab the chips", "walk to the living room", "walk to the TV",
             "turn on the TV"]  # fmt: skip
    obs = run(env, steps)[0]
    assert "The TV is on. You are holding the chips." in obs
    steps = ["walk to the milk", "grab the milk", "walk to the chips", "grab the chips",
             "walk to the living room", "walk to the coffee table",
             "put the milk on the coffee table"]  # fmt: skip
    obs = run(env, steps)[0]
    assert "The TV is not close to you." in obs  # sic: the reference's sentence here
    assert "The milk is on the coffee table, and you are holding the chips." in obs
    # The dead end, seen from the kitchen: only the chips are in sight.
    steps = ["walk to the milk", "grab the milk", "walk to the living room",
             "walk to the coffee table", "put the milk on the coffee table",
             "walk to the kitchen"]  # fmt: skip
    obs = run(env, steps)[0]
    assert "You notice only the chips. The chips are not close to you. Your goal" in obs


# -- dynamics and quirks --------------------------------------------------------------------------
def test_optimal_plans_of_the_spec_succeed() -> None:
    plan = ["walk to the pancake", "grab the pancake", "walk to the microwave",
            "open the microwave", "put the pancake in the microwave", "close the microwave"]  # fmt: skip
    obs, reward, terminated, truncated, info = run(make(), plan)
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
    plan = ["walk to the living room", "walk to the TV", "turn on the TV", "walk to the kitchen",
            "walk to the chips", "grab the chips", "walk to the milk", "grab the milk",
            "walk to the living room", "walk to the sofa", "sit on the sofa"]  # fmt: skip
    obs, reward, terminated, truncated, info = run(make("Entertainment"), plan)
    assert (reward, terminated, truncated) == (1.0, True, False)


def test_reward_only_on_completion() -> None:
    env = make()
    _, info = env.reset(seed=0)
    for action in ["walk to the pancake", "grab the pancake", "walk to the microwave",
                   "open the microwave", "put the pancake in the microwave"]:  # fmt: skip
        _, reward, terminated, _, info = env.step(action)
        assert reward == 0.0 and not terminated and not info["success"]


def _play_until_truncated(env: gym.Env, info: dict, steps_taken: int) -> tuple[float, bool]:
    total = 0.0
    for _ in range(50 - steps_taken):
        _, reward, terminated, truncated, info = env.step(info["available_actions"][-1])
        total += reward
        assert not terminated
        if truncated:
            return total, truncated
    return total, False


def test_entertainment_dead_end() -> None:
    """Milk on the coffee table first: back in the kitchen the chips can't be reached."""
    env = make("Entertainment")
    steps = ["walk to the milk", "grab the milk", "walk to the living room",
             "walk to the coffee table", "put the milk on the coffee table", "walk to the kitchen"]  # fmt: skip
    _, _, _, _, info = run(env, steps)
    assert info["available_actions"] == [ROOM_WALKS[i] for i in (0, 2, 3)] + ["walk to the milk"]
    state = env.unwrapped.state
    _, _, _, _, info = env.step("walk to the milk")  # offered, but the milk is not here
    assert info["action_valid"] and not info["action_effective"]
    assert env.unwrapped.state == state
    assert shortest_plan(env.unwrapped.scenario, state) is None
    assert _play_until_truncated(env, info, len(steps) + 1) == (0.0, True)


def test_entertainment_sitting_trap() -> None:
    env = make("Entertainment")
    _, _, _, _, info = run(env, ["walk to the living room", "walk to the sofa"])
    assert "sit on the sofa" not in info["available_actions"]  # only offered with the TV on
    steps = ["walk to the living room", "walk to the TV", "turn on the TV", "walk to the sofa",
             "sit on the sofa"]  # fmt: skip
    obs, reward, terminated, _, info = run(env, steps)
    assert reward == 0.0 and not terminated and "You are sitting on the sofa." in obs
    assert info["available_actions"] == [ROOM_WALKS[i] for i in (1, 2, 3)]
    state = env.unwrapped.state
    for walk in info["available_actions"]:
        _, _, _, _, info = env.step(walk)
        assert not info["action_effective"] and env.unwrapped.state == state
    assert shortest_plan(env.unwrapped.scenario, state) is None
    assert _play_until_truncated(env, info, len(steps) + 3) == (0.0, True)


def test_turn_on_with_full_hands_is_offered_but_fails() -> None:
    env = make("Entertainment")
    steps = ["walk to the chips", "grab the chips", "walk to the milk", "grab the milk",
             "walk to the living room", "walk to the TV", "turn on the TV"]  # fmt: skip
    _, _, _, _, info = run(env, steps)
    assert info["action_valid"] and not info["action_effective"]
    assert "screen" not in env.unwrapped.state.switched_on


def test_held_item_is_filed_one_walk_late() -> None:
    """'walk to the pancake' while holding it can teleport the agent (section 5.3)."""
    env = make()
    steps = ["walk to the pancake", "grab the pancake", "walk to the living room",
             "walk to the kitchen", "walk to the pancake"]  # fmt: skip
    obs = run(env, steps)[0]
    assert "You are in the living room." in obs


def test_offered_but_ineffective_put_changes_nothing() -> None:
    env = make()
    obs, _, _, _, info = run(
        env, ["walk to the pancake", "grab the pancake", "walk to the microwave"]
    )
    assert "put the pancake in the microwave" in info["available_actions"]
    state = env.unwrapped.state
    obs2, reward, _, _, info2 = env.step("put the pancake in the microwave")  # still shut
    assert info2["action_valid"] and not info2["action_effective"]
    assert env.unwrapped.state == state and obs2 == obs and reward == 0.0


# -- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "action", ["grab the banana", "grab the pancake", "walk to the kitchen", "", "x" * 500]
)
def test_unavailable_action_is_a_noop_with_a_note(action: str) -> None:
    env = make()
    obs, info = env.reset(seed=0)
    state = env.unwrapped.state
    obs2, reward, terminated, truncated, info2 = env.step(action)
    assert reward == env.unwrapped.invalid_action_penalty == 0.0
    assert not (terminated or truncated)
    assert (
        info2["action_valid"] is False and info2["available_actions"] == info["available_actions"]
    )
    assert env.unwrapped.state == state
    assert "is not available here" in obs2 and obs2.endswith(obs)
    assert env.observation_space.contains(obs2)


def test_action_matching_ignores_case_blanks_and_full_stop() -> None:
    env = make()
    env.reset(seed=0)
    _, _, _, _, info = env.step("  Walk to the   PANCAKE. ")
    assert info["action_valid"] and "grab the pancake" in info["available_actions"]


def test_type_errors_and_reset_needed() -> None:
    env = VirtualHomeEnv()
    with pytest.raises(ResetNeeded):
        env.step("walk to the pancake")
    env.reset(seed=0)
    for bad in (3, None, b"walk to the pancake"):
        with pytest.raises(TypeError):
            env.step(bad)  # type: ignore[arg-type]


def test_step_limit_truncates() -> None:
    env = make()
    _, info = env.reset(seed=0)
    for t in range(50):
        _, _, terminated, truncated, info = env.step("walk to the bathroom" if t % 2 == 0
                                                     else "walk to the kitchen")  # fmt: skip
        assert not terminated
        assert truncated == (t == 49)


# -- engine ---------------------------------------------------------------------------------------
def _box_scene() -> Scene:
    return Scene(
        rooms=("kitchen", "hall"),
        objects=[
            SceneObject("cup", frozenset({GRABBABLE}), start=(INSIDE, "box")),
            SceneObject("box", frozenset({OPENABLE, CONTAINER}), room="kitchen"),
        ],
        start_room="kitchen",
    )


def test_engine_hides_what_a_closed_container_holds() -> None:
    scene = _box_scene()
    s = scene.initial_state()
    assert not scene.visible(s, "cup") and scene.visible(s, "box")
    assert scene.apply(s, Action("grab", ("cup",))) is None  # unseen: fails
    s = scene.apply(s, Action("walk", ("box",)))
    assert s.close == {"box", "cup"}  # close to what is inside the target
    s = scene.apply(s, Action("open", ("box",)))
    s = scene.apply(s, Action("grab", ("cup",)))
    assert s.held == ("cup",) and scene.visible(s, "cup")
    s = scene.apply(s, Action("walk", ("hall",)))
    assert scene.room_of(s, "cup") == "kitchen"  # filed one walk late
    assert scene.apply(s, Action("close", ("box",))) is None  # not in this room


def test_engine_rejects_bad_scenes_and_actions() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        SceneObject("cup")
    with pytest.raises(ValueError, match="unknown"):
        Scene(("kitchen",), [SceneObject("cup", start=(IN_ROOM, "attic"))], "kitchen")
    scene = _box_scene()
    with pytest.raises(ValueError, match="unknown verb"):
        scene.apply(scene.initial_state(), Action("juggle", ("cup",)))
    with pytest.raises(ValueError, match="argument"):
        scene.apply(scene.initial_state(), Action("put_in", ("cup",)))
    with pytest.raises(ValueError, match="unknown object"):
        scene.apply(scene.initial_state(), Action("grab", ("plate",)))
