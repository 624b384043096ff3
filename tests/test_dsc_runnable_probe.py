"""studies/dsc_runnable_probe.py: its interval and its resumable, seeded cells (issue 46 item 4).

The script's smoke run as a user runs it is in tests/test_scripts_smoke.py.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests._studies import load_study_script

probe = load_study_script("dsc_runnable_probe")


def _accepted(successes: int, n: int, p: float, z: float) -> bool:
    """The score test the Wilson interval inverts, for one ``p``."""
    return abs(successes / n - p) <= z * math.sqrt(p * (1 - p) / n)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 400), st.data())
def test_wilson_interval_is_the_set_the_score_test_accepts(n, data):
    successes = data.draw(st.integers(0, n))
    low, high = probe.wilson_interval(successes, n)
    assert 0.0 <= low <= successes / n <= high <= 1.0
    # A plain scan over p: inside the interval the score test accepts, outside it rejects
    # (a small margin around the bounds, where rounding decides).
    margin = 1e-9
    for i in range(1, 2000):
        p = i / 2000
        if low + margin < p < high - margin:
            assert _accepted(successes, n, p, probe.Z95), (successes, n, p, low, high)
        elif p < low - margin or p > high + margin:
            assert not _accepted(successes, n, p, probe.Z95), (successes, n, p, low, high)


def test_wilson_interval_known_values_and_bad_counts():
    # 0 of 200: the upper bound is z^2 / (n + z^2).
    low, high = probe.wilson_interval(0, 200)
    assert low == 0.0 and high == pytest.approx(probe.Z95**2 / (200 + probe.Z95**2))
    assert probe.wilson_interval(200, 200)[1] == 1.0
    for successes, n in ((3, 2), (-1, 5), (0, 0)):
        with pytest.raises(ValueError, match="successes"):
            probe.wilson_interval(successes, n)


def _cells(path):
    data = json.loads(path.read_text(encoding="utf-8"))
    return {
        key: [{k: v for k, v in a.items() if k != "grade_seconds"} for a in cell["attempts"]]
        for key, cell in data["cells"].items()
    }, data


@pytest.mark.slow  # three probe runs of a tiny model (~1-3 min on 2 busy cores)
def test_a_resumed_probe_draws_what_a_fresh_one_draws(tmp_path, monkeypatch):
    """2 attempts, then resumed to 4, equal 4 in one go: each batch has its own seed."""
    monkeypatch.chdir(tmp_path)
    resumed, fresh = tmp_path / "resumed.json", tmp_path / "fresh.json"
    common = ["--smoke", "--batch", "1"]
    assert probe.main([*common, "--samples", "2", "--out", str(resumed)]) == 0
    assert all(len(a) == 2 for a in _cells(resumed)[0].values())
    assert probe.main([*common, "--samples", "4", "--out", str(resumed)]) == 0
    assert probe.main([*common, "--samples", "4", "--out", str(fresh)]) == 0
    (got, data), (want, _) = _cells(resumed), _cells(fresh)
    assert got == want and all(len(a) == 4 for a in got.values())
    # What each cell records: the trainer's sampling (POAD's DataSciCoding mini preset), the
    # env's declared stop rule, its seed and the interval over its attempts.
    for key, cell in data["cells"].items():
        assert cell["sampling"] == {"temperature": 0.5, "top_k": 50, "max_new_tokens": 128}
        style = key.split("/")[0]
        stop = "end_of_function_body" if style == "worked_example" else "before_return"
        assert cell["action_stop"]["name"] == stop
        assert cell["summary"]["n"] == 4
        low, high = cell["summary"]["wilson95"]
        assert [low, high] == list(probe.wilson_interval(cell["summary"]["runnable"], 4))
        assert 1 <= len(cell["programs"]) <= 2 * probe.SAMPLE_PROGRAMS


def test_a_resume_with_another_batch_size_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "probe.json"
    assert probe.main(["--smoke", "--batch", "2", "--samples", "2", "--out", str(out)]) == 0
    with pytest.raises(SystemExit, match="resume with the same --chat and --batch"):
        probe.main(["--smoke", "--batch", "3", "--samples", "4", "--out", str(out)])


def test_a_shared_prompt_prefill_generates_what_the_policy_generates(tiny_model_dir):
    """The probe runs a batch's one prompt once; greedy code and log-probs stay the policy's.

    Also with rows of different prompts (the policy's own path) and with the env's stop rule.
    """
    import gymnasium as gym

    import agentbench_poad  # noqa: F401 - registers the ids
    from agentbench_poad.baselines.poad import POADConfig
    from agentbench_poad.rl.trainer import build_policy

    config = POADConfig.preset("datascicoding-mini", lora_layers=2, max_new_tokens=24)
    env = gym.make("DataSciCoding-gen-xor-v0", prompt_style="worked_example", sandbox="process")
    prompt, info = env.reset(seed=0)
    env.close()
    plain, shared = build_policy(config, tiny_model_dir), build_policy(config, tiny_model_dir)
    probe.share_prompt_prefill(shared)
    for policy in (plain, shared):
        policy.generation = policy.settings_for(info["action_stop"])
    for prompts in ([prompt] * 3, [prompt, prompt + "\n", prompt]):
        want = plain.act(prompts, [None] * len(prompts), greedy=True)
        got = shared.act(prompts, [None] * len(prompts), greedy=True)
        assert [s.text for s in got] == [s.text for s in want]
        assert [s.token_ids for s in got] == [s.token_ids for s in want]
        for a, b in zip(got, want):
            assert a.token_log_probs == pytest.approx(b.token_log_probs, abs=1e-5)


def test_a_cell_sampled_from_another_prompt_is_set_apart_and_measured_again(tmp_path, monkeypatch):
    """Attempts made on an older prompt (the style changed since) are never mixed with new ones:
    the cell moves to ``stale_cells`` with its summary and is measured again from attempt 0."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "probe.json"
    common = ["--smoke", "--batch", "1", "--samples", "2", "--out", str(out)]
    assert probe.main(common) == 0
    data = json.loads(out.read_text())
    key = sorted(data["cells"])[0]
    old = data["cells"][key]
    old["prompt"] = "an older prompt"
    old["attempts"][0]["tokens"] = -1  # a mark that must not survive the restart
    out.write_text(json.dumps(data))
    assert probe.main(common) == 0
    again = json.loads(out.read_text())
    stale = again["stale_cells"][key]
    assert len(stale) == 1 and stale[0]["prompt"] == "an older prompt"
    assert "attempts" not in stale[0] and stale[0]["summary"]["n"] == 2
    cell = again["cells"][key]
    assert cell["prompt"] != "an older prompt" and len(cell["attempts"]) == 2
    assert all(a["tokens"] >= 0 for a in cell["attempts"])
    assert set(again["stale_cells"]) == {key}  # the other cells were resumed, not restarted
