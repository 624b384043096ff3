"""A DataSciCoding record names the prompt style its agent saw: in its id and its board label."""

from __future__ import annotations

from agentbench_poad.leaderboard.records import record_id_suffix
from agentbench_poad.leaderboard.report.common import agent_label


def _record(agent: str, env_kwargs: dict) -> dict:
    return {
        "agent": {"name": agent},
        "model": {"base": "models/smollm2-135m"},
        "env": {"id": "DataSciCoding-gen-xor-v0"},
        "config": {"env_kwargs": env_kwargs},
    }


def test_the_prompt_style_names_every_agents_record():
    worked = {"prompt_style": "worked_example", "sandbox": "docker"}
    assert record_id_suffix("POAD", worked) == "prompt_style-worked_example"
    assert record_id_suffix("POAD", {"sandbox": "docker"}) is None  # old ids stay as they were
    assert record_id_suffix("scripted", worked) == "prompt_style-worked_example"
    assert agent_label(_record("POAD", worked)) == (
        "POAD (smollm2-135m) [prompt_style=worked_example]"
    )
    assert agent_label(_record("POAD", {"sandbox": "docker"})) == "POAD (smollm2-135m)"
    assert agent_label(_record("scripted", worked)) == (
        "scripted (smollm2-135m) [prompt_style=worked_example]"
    )
