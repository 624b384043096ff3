"""studies/update_stats.py: zero-reward against rewarding PPO updates, read from metrics.jsonl."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests._studies import load_study_script


def _module():
    return load_study_script("update_stats")


finite = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)
update_line = st.fixed_dictionaries(
    {
        "reward_mean": st.sampled_from([0.0, 0.0, 0.0078125, -0.25]),
        "approx_kl": finite,
        "policy_grad_norm": st.one_of(st.none(), finite, st.floats(min_value=50.0, max_value=1e8)),
        "policy_loss": st.one_of(st.none(), st.floats(min_value=-5.0, max_value=1e6)),
        "policy_steps": finite,
        "skipped_kl": finite,
        "entropy": finite,
    }
)


@settings(max_examples=60, deadline=None)
@given(st.lists(update_line, max_size=25))
def test_summary_matches_a_plain_split(lines):
    rows = [{"update": k + 1, **line} for k, line in enumerate(lines)]
    summary = _module().summarise(rows)

    assert summary["updates"] == len(rows)
    for name, keep in (("zero_reward", lambda r: r == 0.0), ("reward", lambda r: r != 0.0)):
        chosen = [row for row in rows if keep(row["reward_mean"])]
        assert summary[name]["updates"] == len(chosen)
        for key in ("approx_kl", "policy_grad_norm", "policy_steps", "skipped_kl"):
            values = sorted(row[key] for row in chosen if row[key] is not None)
            if not values:
                expected = None
            elif key == "policy_grad_norm":  # the median: rare spikes must not decide it
                middle = len(values) // 2
                expected = (
                    values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2
                )
            else:
                expected = sum(values) / len(values)
            got = summary[name][key]
            assert (got is None) == (expected is None)
            if expected is not None:
                assert got == pytest.approx(expected)
    runaway, threshold = 0, _module().RUNAWAY_GRAD_NORM
    assert 10.0 < threshold < 1e8  # the strategies draw norms on both sides of it
    for row in rows:
        if row["policy_grad_norm"] is not None and row["policy_grad_norm"] > threshold:
            runaway += 1
    assert summary["runaway_updates"] == runaway
    losses = [row["policy_loss"] for row in rows if row["policy_loss"] is not None]
    assert summary["max_policy_loss"] == (max(losses) if losses else None)
    assert summary["entropy_first"] == (rows[0]["entropy"] if rows else None)
    assert summary["entropy_last"] == (rows[-1]["entropy"] if rows else None)


def test_cli_reads_runs_skips_a_cut_line_and_writes_json(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    lines = [
        {
            "update": 1,
            "reward_mean": 0.0,
            "approx_kl": 0.04,
            "policy_grad_norm": 1.0,
            "entropy": 2.6,
        },
        {
            "update": 2,
            "reward_mean": 0.01,
            "approx_kl": 0.02,
            "policy_grad_norm": 0.5,
            "entropy": 2.0,
        },
    ]
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in lines) + '{"update": 3, "approx'
    )
    out = tmp_path / "stats.json"
    assert _module().main([str(run), "--out", str(out)]) == 0

    result = json.loads(out.read_text())
    (row,) = result["runs"]
    assert row["updates"] == 2
    assert row["zero_reward"]["approx_kl"] == pytest.approx(0.04)
    assert row["reward"]["policy_grad_norm"] == pytest.approx(0.5)
    assert result["statistics"]["policy_grad_norm"] == "median"
    assert (row["entropy_first"], row["entropy_last"]) == (2.6, 2.0)
    assert str(run) in capsys.readouterr().out


def test_cli_names_a_directory_without_metrics(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _module().main([str(tmp_path)])
    assert exit_info.value.code == 2
    assert "metrics.jsonl does not exist" in capsys.readouterr().err


drift_line = st.fixed_dictionaries(
    {
        "signal_free": st.one_of(st.none(), st.sampled_from([0.0, 1.0])),
        "reward_mean": st.sampled_from([0.0, 0.25]),
        "policy_steps_taken": st.sampled_from([0.0, 4.0, 16.0]),
        "entropy": st.one_of(st.none(), st.floats(0.0, 3.0)),
        "policy_loss": st.one_of(st.none(), st.floats(-1e4, 1e4)),
        "policy_grad_norm": st.one_of(st.none(), st.floats(0.0, 1e7)),
    }
)


@settings(max_examples=80, deadline=None)
@given(st.lists(drift_line, max_size=20))
def test_large_updates_and_reward_free_drift_match_a_plain_loop(lines):
    module = _module()
    large = 0
    for row in lines:
        loss, norm = row["policy_loss"], row["policy_grad_norm"]
        if (loss is not None and abs(loss) > 1.0) or (norm is not None and norm > 1e3):
            large += 1
    drift = 0.0
    for k in range(len(lines) - 1):
        row, after = lines[k], lines[k + 1]
        free = (
            row["signal_free"] == 1.0 if row["signal_free"] is not None else row["reward_mean"] == 0
        )
        if (
            free
            and row["policy_steps_taken"] != 0
            and None not in (row["entropy"], after["entropy"])
        ):
            drift += after["entropy"] - row["entropy"]
    assert sum(module.is_large_update(r) for r in lines) == large
    assert module.reward_free_entropy_drift(lines) == pytest.approx(drift)


def _row(rule, env, agent, large=0, drift=0.0, ret=0.5):
    return {
        "rule": rule,
        "env": env,
        "agent": agent,
        "large_updates": large,
        "reward_free_entropy_drift": drift,
        "return_last4": ret,
    }


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["batch", "skip", "raw"]),
            st.integers(0, 3),
            st.floats(-1, 1),
            st.floats(-0.5, 1.5),
        ),
        min_size=1,
        max_size=6,
    ),
    st.floats(-0.5, 1.5),
)
def test_the_ablation_decision_follows_its_written_rule(rules, before_return):
    module = _module()
    ts, fp = "Overcooked-TomatoSalad-v0", "VirtualHome-FoodPreparation-v0"
    rows = [_row("before", ts, "poad", ret=before_return), _row("before", fp, "poad", 5, 0.7)]
    seen = {}
    for name, large, drift, ret in rules:
        if name in seen:
            continue
        seen[name] = (large, drift, ret)
        rows += [_row(name, ts, "poad", ret=ret), _row(name, fp, "poad", large, drift)]
    decision = module.ablation_decision(rows)
    eligible = {n: v for n, v in seen.items() if v[2] >= before_return - module.RETURN_MARGIN}
    if not eligible:
        assert decision["chosen"] is None
    else:
        best = min(eligible, key=lambda n: (eligible[n][0], abs(eligible[n][1])))
        assert decision["chosen"] == best
