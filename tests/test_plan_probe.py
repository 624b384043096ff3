"""studies/plan_probe.py: the base model's probability of following a task's shortest plan."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import pytest

import agentbench_poad  # noqa: F401  (registers the envs)
from agentbench_poad.baselines.oracle_virtualhome import shortest_plan
from tests._studies import load_study_script

pytest.importorskip("torch")


def _probe_module():
    return load_study_script("plan_probe")


@pytest.mark.parametrize("env_id", ["VirtualHome-FoodPreparation-v0", "VirtualHome-Laundry-v0"])
def test_probe_scores_the_shortest_plan_like_the_policy_samples(tiny_model_dir, tmp_path, env_id):
    import torch

    from agentbench_poad.models import LoraSettings
    from agentbench_poad.rl.policy import LMPolicy

    out = tmp_path / "probe.json"
    assert (
        _probe_module().main(
            [env_id, "--model", str(tiny_model_dir), "--seeds", "2", "--out", str(out)]
        )
        == 0
    )
    result = json.loads(out.read_text())
    (row,) = result["envs"]
    assert row["env_id"] == env_id and len(row["episodes"]) == 2

    # Plain reference: replay the plan in a fresh env and ask the policy for its sampling
    # distribution over the offered actions in every state on it.
    policy = LMPolicy(str(tiny_model_dir), lora=LoraSettings())
    env = gym.make(env_id)
    for episode in row["episodes"]:
        observation, info = env.reset(seed=episode["reset_seed"])
        plan = shortest_plan(env.unwrapped.scenario, env.unwrapped.state)
        assert [s["action"] for s in episode["steps"]] == plan
        log_p = log_uniform = 0.0
        for step, action in zip(episode["steps"], plan):
            actions = list(info["available_actions"])
            with torch.no_grad():
                probs = policy.candidate_log_probs([observation], [actions])[0].exp().tolist()
            p = probs[actions.index(action)]
            assert step["p"] == pytest.approx(p, rel=1e-5)
            assert step["offered"] == len(actions)
            assert step["rank"] == 1 + sum(q > p for q in probs)
            assert step["p_favourite"] == pytest.approx(max(probs), rel=1e-5)
            assert step["favourite"] in actions
            log_p += math.log(p)
            log_uniform -= math.log(len(actions))
            observation, _, terminated, _, info = env.step(action)
        assert terminated and episode["solved"]
        assert episode["log_p_plan"] == pytest.approx(log_p, rel=1e-6)
        assert episode["log_p_plan_uniform"] == pytest.approx(log_uniform, rel=1e-12)
    env.close()


def test_probe_rejects_a_non_positive_seed_count(capsys):
    with pytest.raises(SystemExit) as exit_info:
        _probe_module().main(["VirtualHome-FoodPreparation-v0", "--seeds", "0"])
    assert exit_info.value.code == 2
    assert "--seeds must be >= 1" in capsys.readouterr().err
