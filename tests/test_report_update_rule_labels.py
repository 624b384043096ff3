"""A record whose runs used their own KL guard or another update rule than the default is
labelled wherever the board names its agent (docs/agents.md, "Stable updates")."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from agentbench_poad.leaderboard.report.common import agent_label

RESULTS = Path(__file__).resolve().parents[1] / "leaderboard" / "results"


@pytest.fixture()
def trained_record():
    path = RESULTS / "Overcooked-TomatoSalad-v0__poad__smollm2-135m.json"
    return json.loads(path.read_text())


@pytest.mark.parametrize(
    "training, expected",
    [
        ({"guard": "shared", "safeguards_default": True}, []),
        ({"guard": "custom", "safeguards_default": True}, ["[custom guard]"]),
        ({"guard": "shared", "safeguards_default": False}, ["[non-default update rule]"]),
        ({}, []),  # records made before the fields existed
    ],
)
def test_guard_and_update_rule_labels(trained_record, training, expected):
    record = copy.deepcopy(trained_record)
    record["training"] = {**(record.get("training") or {}), **training}
    for key in ("guard", "safeguards_default"):
        if key not in training:
            record["training"].pop(key, None)
    label = agent_label(record)
    for word in ("[custom guard]", "[non-default update rule]"):
        assert (word in label) == (word in expected)


@pytest.mark.parametrize(
    "safeguards, named",
    [
        (
            {"skip_signal_free": True, "normalize_over": "minibatch", "advantage_std_floor": 0.0},
            "skip",
        ),
        (
            {"skip_signal_free": False, "normalize_over": "batch", "advantage_std_floor": 0.1},
            "keep",
        ),
        (
            {
                "skip_signal_free": False,
                "normalize_over": "batch",
                "advantage_std_floor": 0.1,
                "signal_free_entropy": False,
            },
            "keep-noent",
        ),
        ({"skip_signal_free": False, "normalize_over": "minibatch"}, None),  # no named rule
        (None, None),  # a record made before the safeguard fields
    ],
)
def test_a_non_default_rule_is_named_where_it_is_one_of_the_reward_free_rules(
    trained_record, safeguards, named
):
    record = copy.deepcopy(trained_record)
    record["training"] = {
        **(record.get("training") or {}),
        "safeguards": safeguards,
        "safeguards_default": False,
    }
    label = agent_label(record)
    assert "[non-default update rule]" in label
    assert ("[reward-free: " in label) == (named is not None)
    if named is not None:
        assert f"[reward-free: {named}]" in label
    # a default rule is never named: the label stays as it was
    record["training"]["safeguards_default"] = True
    assert "[reward-free:" not in agent_label(record)


# -- whose defaults: the algorithm's own, not PPO's shared config --------------------------------
GROUP_SOURCE = {"spec": "agentbench_poad.baselines.grpo:GRPO"}
POAD_SOURCE = {"spec": "agentbench_poad.baselines.poad:POAD"}


def _settings(config) -> dict:
    from agentbench_poad.leaderboard.from_run import SAFEGUARD_FIELDS

    return {k: getattr(config, k) for k in SAFEGUARD_FIELDS}


@pytest.mark.parametrize(
    "source, change, default",
    [
        (GROUP_SOURCE, {}, True),  # GRPO's own defaults: no per-minibatch re-normalisation
        (GROUP_SOURCE, {"dual_clip": None}, False),
        (GROUP_SOURCE, {"normalize_advantages": True}, False),
        (POAD_SOURCE, {}, True),
        (POAD_SOURCE, {"normalize_advantages": False}, False),
        # the other reward-free rule than the default one, whichever that is
        (POAD_SOURCE, lambda d: {"skip_signal_free": not d.skip_signal_free}, False),
        (GROUP_SOURCE, lambda d: {"skip_signal_free": not d.skip_signal_free}, False),
        (None, {}, True),  # a run that names no algorithm: PPO's shared defaults
    ],
)
def test_safeguards_are_judged_against_the_runs_algorithm(source, change, default):
    from agentbench_poad.leaderboard.from_run import algorithm_defaults, safeguards_are_default

    defaults = algorithm_defaults(source)
    change = change(defaults) if callable(change) else change
    settings = {**_settings(defaults), **change}
    assert safeguards_are_default(settings, source) is default


def test_group_defaults_are_not_ppos_so_a_shared_rule_would_mislabel_them():
    from agentbench_poad.leaderboard.from_run import algorithm_defaults, safeguards_are_default
    from agentbench_poad.rl.config import PPOConfig

    group = _settings(algorithm_defaults(GROUP_SOURCE))
    assert group != _settings(PPOConfig())
    # a user's algorithm (its module is not imported) is judged by the shared defaults
    assert safeguards_are_default(group, {"spec": "my_algo.py:Mine"}) is False


def test_backfill_corrects_a_stale_update_rule_flag(tmp_path):
    from agentbench_poad.leaderboard.backfill import backfill_record
    from agentbench_poad.leaderboard.records import find_record

    source = RESULTS / "Overcooked-TomatoSalad-v0__grpo__smollm2-135m.json"
    data = json.loads(source.read_text())
    if (data.get("training") or {}).get("safeguards") is None:
        pytest.skip("the committed GRPO record predates the safeguard fields")
    # runs with GRPO's own defaults (whichever reward-free rule is the default today), flagged
    # non-default as the shared-default rule (PPO's config) once did for every group agent
    from agentbench_poad.leaderboard.from_run import (
        ADDED_SAFEGUARD_FIELDS,
        SAFEGUARD_FIELDS,
        algorithm_defaults,
    )

    defaults = algorithm_defaults(data["training"].get("algorithm"))
    data["training"]["safeguards"] = {
        k: getattr(defaults, k) for k in (*SAFEGUARD_FIELDS, *ADDED_SAFEGUARD_FIELDS)
    }
    data["training"]["safeguards_default"] = False
    path = tmp_path / source.name
    path.write_text(json.dumps(data))
    changes = backfill_record(find_record(str(path), tmp_path))
    assert "update-rule default" in changes
    fixed = json.loads(path.read_text())
    assert fixed["training"]["safeguards_default"] is True
    assert "[non-default update rule]" not in agent_label(fixed)
    assert backfill_record(find_record(str(path), tmp_path)) == []  # idempotent
