"""One source of env facts: ``register_family`` records them, ``env_facts`` reads them."""

from __future__ import annotations

import json
import warnings

import gymnasium as gym
import pytest

from agentbench_poad import EnvFamily, TaskRow, env_facts, paper_layout, register_family
from agentbench_poad.environments.datascicoding import datasets as ds
from agentbench_poad.environments.overcooked.env import OvercookedEnv
from agentbench_poad.environments.overcooked.tasks import TASKS as OVERCOOKED_TASKS
from agentbench_poad.environments.virtualhome.tasks import TASKS as VIRTUALHOME_TASKS
from agentbench_poad.leaderboard.records import DEFAULT_STORE
from agentbench_poad.registration import UnknownEnvError, family_of_env, registered_ids
from tests.test_leaderboard_toys import CorridorEnv

RESULTS = DEFAULT_STORE  # the committed records
ALL_IDS = registered_ids() + registered_ids("casestudy")
#: The keyword argument that selects the task, per family (the entry points' signatures).
TASK_KWARG = {"overcooked": "task", "virtualhome": "task", "datascicoding": "dataset"}


def test_every_family_registered():
    families = {env_facts(i).family for i in ALL_IDS}
    assert families == {"overcooked", "virtualhome", "datascicoding", "casestudy"}
    assert len(registered_ids()) == len(OVERCOOKED_TASKS) + len(VIRTUALHOME_TASKS) + len(
        ds.DATASETS
    )


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_facts_agree_with_the_gymnasium_spec(env_id):
    facts, spec = env_facts(env_id), gym.spec(env_id)
    assert facts.env_id == spec.id == env_id and facts.registered_by_family
    assert facts.entry_point == spec.entry_point
    assert dict(facts.kwargs) == spec.kwargs
    assert facts.max_episode_steps == spec.max_episode_steps
    assert facts.version == spec.version
    assert facts.description.strip()
    if facts.family in TASK_KWARG:  # the entry point lives in its family's package
        assert spec.entry_point.startswith(f"agentbench_poad.environments.{facts.family}.")
        assert spec.kwargs[TASK_KWARG[facts.family]] == facts.task
    assert facts.open_action == (facts.actions == "open")
    assert (facts.metric == "final_auc") == facts.open_action
    assert facts.in_paper == (facts.paper_name is not None)
    assert not facts.paper_tables or facts.in_paper


@pytest.mark.parametrize(
    "env_id",
    [
        "Overcooked-TomatoSalad-v0",
        "VirtualHome-Cheese-v0",
        "DataSciCoding-iris-v0",
        "CaseStudy-Microwave-v0",
        "CaseStudy-OpenText-v0",
    ],
)
def test_action_kind_is_what_the_env_does(env_id):
    kwargs = {"sandbox": "process"} if env_facts(env_id).family == "datascicoding" else {}
    env = gym.make(env_id, **kwargs)
    try:
        _, info = env.reset(seed=0)
    finally:
        env.close()
    assert (info["available_actions"] is None) == env_facts(env_id).open_action


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.json")), ids=lambda p: p.stem)
def test_committed_records_state_the_registered_facts(path):
    record = json.loads(path.read_text(encoding="utf-8"))
    facts = env_facts(record["env"]["id"])
    assert record["env"]["family"] == facts.family
    assert record["env"]["version"] == facts.version
    assert record["env"]["open_action"] == facts.open_action
    assert record["scores"]["metric"] == record["protocol"]["metric"] == facts.metric
    assert record["protocol"]["success"] == facts.success_rule


def test_module_prefix_form():
    assert env_facts("agentbench_poad:Overcooked-TomatoSalad-v0") is env_facts(
        "Overcooked-TomatoSalad-v0"
    )


def test_external_and_unknown_ids():
    lake = env_facts("FrozenLake-v1")
    assert (lake.family, lake.task, lake.version) == ("external", "FrozenLake", 1)
    assert lake.actions is lake.metric is lake.success_rule is None
    assert not lake.registered_by_family and not lake.in_paper
    assert env_facts("phys2d/CartPole-v1").family == "phys2d"
    with pytest.raises(UnknownEnvError, match="import agentbench_poad") as info:
        env_facts("Nowhere-Nothing-v0")
    assert isinstance(info.value, KeyError)


def test_register_family_registers_rows_and_is_idempotent():
    family = EnvFamily("factstoy", "FactsToy", entry_point=CorridorEnv, version=3)
    rows = [
        TaskRow("Short", {}, "a corridor", max_episode_steps=5),
        TaskRow(
            "Long",
            {"render_mode": "ansi"},
            "another",
            paper_name="Long",
            paper_tables=("Table 99",),
        ),
    ]
    try:
        ids = register_family(family, rows)
        assert ids == ("FactsToy-Short-v3", "FactsToy-Long-v3")
        assert gym.spec("FactsToy-Short-v3").max_episode_steps == 5
        assert gym.spec("FactsToy-Long-v3").kwargs == {"render_mode": "ansi"}
        facts = env_facts("FactsToy-Long-v3")
        assert (facts.family, facts.task, facts.version) == ("factstoy", "Long", 3)
        assert (facts.actions, facts.metric) == ("restricted", "return")
        assert paper_layout("Table 99") == ("FactsToy-Long-v3",)
        before = dict(gym.registry)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # gymnasium warns when it overrides an id
            assert register_family(family, rows) == ids
        assert dict(gym.registry) == before
        assert gym.make("FactsToy-Short-v3").reset(seed=0)[1]["available_actions"]
        assert "FactsToy-Short-v3" not in registered_ids()  # not a benchmark family
        assert registered_ids("factstoy") == sorted(ids)
        with pytest.raises(ValueError, match="twice"):
            register_family(family, [TaskRow("New"), rows[0], rows[0]])
        assert "FactsToy-New-v3" not in gym.registry  # a bad table registers nothing
    finally:
        for env_id in ("FactsToy-Short-v3", "FactsToy-Long-v3"):
            gym.registry.pop(env_id, None)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"actions": "some"}, "actions"),
        ({"metric": "auc"}, "metric"),
        ({"version": -1}, "version"),
        ({"id_prefix": "Two-Words"}, "id_prefix"),
        ({"discount": 1.5}, "discount"),
        ({"discount": True}, "discount"),
    ],
)
def test_env_family_is_validated(kwargs, match):
    fields = {"name": "x", "id_prefix": "X", "entry_point": "m:C", **kwargs}
    with pytest.raises(ValueError, match=match):
        EnvFamily(**fields)


def test_the_protocol_discount_is_family_data_that_the_presets_read():
    """One γ per family: the env facts state it, every algorithm's paper preset uses it."""
    pytest.importorskip("torch")
    from agentbench_poad.baselines import ALGORITHMS, get_algorithm

    for env_id in registered_ids():
        facts = env_facts(env_id)
        assert facts.discount is not None and 0.0 < facts.discount <= 1.0, env_id
        assert facts.discount == env_facts(registered_ids(facts.family)[0]).discount
    checked = 0
    for name in ALGORITHMS:
        config_class = get_algorithm(name).config_class
        for family, preset in config_class.PRESETS.items():
            discount = env_facts(registered_ids(family)[0]).discount
            assert preset["gamma"] == config_class.preset(family).gamma == discount
            checked += 1
    # POAD, NTPO, GRPO, GiGPO, ARCHER-ADRL and ARCHER on the three families, TWOSOME on two
    assert checked == 20
    # the discount of the paper's Table 1 (VirtualHome generalisation) is its preset's γ
    assert {env_facts(i).discount for i in paper_layout("Table 1")} == {0.95}
    assert env_facts("FrozenLake-v1").discount is None  # no family states one


def test_paper_layout_follows_the_task_tables():
    # Table 1: Food Preparation and its noun-swapped variants (the appliance scenario), in the
    # order of the VirtualHome task table.
    appliance = [f"VirtualHome-{t.name}-v0" for t in VIRTUALHOME_TASKS if t.scenario == "appliance"]
    assert list(paper_layout("Table 1")) == appliance
    assert paper_layout("Table 1")[0] == "VirtualHome-FoodPreparation-v0"
    # Tables 4 and 5: the paper's DataSciCoding datasets; none is a bundled (offline) one.
    table4 = paper_layout("Table 4")
    assert table4 == paper_layout("Table 5") and len(table4) == 6
    assert all(env_facts(i).family == "datascicoding" for i in table4)
    assert not any(ds.DATASETS[env_facts(i).task].offline for i in table4)
    # Overcooked: the paper's two tasks have paper names, in no table.
    assert {
        env_facts(f"Overcooked-{n}-v0").paper_name is not None
        for n, t in OVERCOOKED_TASKS.items()
        if t.paper
    } == {True}
    assert sum(env_facts(i).in_paper for i in registered_ids("overcooked")) == 2
    assert paper_layout("Table 99") == ()


def test_family_of_env_reads_the_spec_or_the_entry_point():
    made = gym.make("Overcooked-LettuceSalad-v0")
    assert family_of_env(made) == "overcooked"
    assert family_of_env(OvercookedEnv(task="TomatoSalad")) == "overcooked"  # no spec
    assert family_of_env(gym.make("FrozenLake-v1")) is None
