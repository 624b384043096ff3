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
