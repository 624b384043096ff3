"""Supervised warm starts (agentbench_poad/warmstart, `agentbench-poad warmstart`).

* the program grid: deterministic, distinct draws; every drawn body runs in the sandbox (the
  real process sandbox) and scores a ROC AUC on a training dataset;
* the examples: the env's own prompt in each style, completions its stop rule accepts,
  evaluation datasets refused;
* the SFT: a real (tiny) TRL SFTTrainer run writes an adapter and a manifest whose digest is
  checked; the merged model names its warm start, and a record's base-weights entry says so.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbench_poad.warmstart.examples import (
    DEFAULT_TRAINING_DATASETS,
    build_examples,
    completion_for,
)
from agentbench_poad.warmstart.programs import (
    ESTIMATORS,
    PREPROCESSING,
    draw_programs,
    grid_size,
    render,
)


# -- the program grid -----------------------------------------------------------------------------
def _plain_grid_size() -> int:
    total = 0
    for _, _, grid in ESTIMATORS.values():
        points = 1
        for values in grid.values():
            points *= len(values)
        total += points * len(PREPROCESSING)
    return total


def test_grid_size_counts_every_point():
    assert grid_size() == _plain_grid_size() > 100


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 60), seed=st.integers(0, 10_000))
def test_draws_are_deterministic_and_distinct(n, seed):
    first, again = draw_programs(n, seed), draw_programs(n, seed)
    assert first == again and len(first) == n
    keys = [(p.estimator, p.preprocessing, p.params) for p in first]
    assert len(set(keys)) == n
    for program in first:
        assert program.body == render(
            program.estimator, program.preprocessing, dict(program.params)
        )
        assert program.body.endswith("    model.fit(x_train, y_train)")
        assert all(line == "" or line.startswith("    ") for line in program.body.splitlines())
        assert "GridSearchCV(" not in program.body and "SVC(" not in program.body


def test_draws_beyond_the_grid_and_unknown_names_are_refused():
    with pytest.raises(ValueError, match="distinct programs"):
        draw_programs(grid_size() + 1)
    with pytest.raises(KeyError, match="unknown estimator 'svm'"):
        render("svm", "none", {})
    with pytest.raises(KeyError, match="unknown preprocessing"):
        render("logistic", "pca", {})
    with pytest.raises(KeyError, match="logistic takes no depth"):
        render("logistic", "none", {"depth": 3})


@pytest.mark.parametrize("style", ["paper", "worked_example"])
def test_drawn_programs_run_in_the_sandbox(style):
    """A sample of bodies, ended as each style ends them, graded by the env in the sandbox."""
    import gymnasium as gym

    import agentbench_poad  # noqa: F401

    env = gym.make("DataSciCoding-gen-moons-v0", prompt_style=style, sandbox="process")
    try:
        for program in draw_programs(4, seed=3 if style == "paper" else 4):
            env.reset(seed=0)
            _, reward, *_, info = env.step(completion_for(program, style))
            assert 0.0 <= reward <= 1.0, (program.body, info.get("failure_message"))
    finally:
        env.close()


# -- the examples ---------------------------------------------------------------------------------
def test_examples_use_the_envs_prompt_and_refuse_evaluation_datasets():
    import gymnasium as gym

    import agentbench_poad  # noqa: F401

    examples = build_examples(
        lambda obs: "<" + obs + ">",
        style="worked_example",
        programs_per_dataset=3,
        datasets=("wine", "gen-circles"),
        evaluation_datasets=("iris",),
    )
    assert [e.dataset for e in examples] == ["wine"] * 3 + ["gen-circles"] * 3
    env = gym.make("DataSciCoding-wine-v0", prompt_style="worked_example", sandbox="process")
    observation, _ = env.reset(seed=0)
    env.close()
    assert examples[0].prompt == "<" + observation + ">"
    assert observation.endswith("    ")  # the body's indent is in the prompt ...
    assert not examples[0].completion.startswith(" ")  # ... so not in the completion
    assert examples[0].completion.endswith("    return model\n")
    with pytest.raises(ValueError, match="iris are evaluation datasets"):
        build_examples(
            str,
            style="paper",
            programs_per_dataset=1,
            datasets=("iris", "wine"),
            evaluation_datasets=("iris", "gen-xor"),
        )
    with pytest.raises(ValueError, match="unknown prompt style"):
        build_examples(str, style="haiku", programs_per_dataset=1)
    assert not {"iris", "gen-xor"} & set(DEFAULT_TRAINING_DATASETS)


# -- the fine-tuning ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def warm_start(tiny_model_dir, tmp_path_factory):
    pytest.importorskip("trl")
    from agentbench_poad.warmstart.sft import train_warm_start

    out = tmp_path_factory.mktemp("warm") / "ws-tiny"
    return train_warm_start(
        str(tiny_model_dir),
        out,
        style="paper",
        chat_template=False,
        programs_per_dataset=2,
        datasets=("wine", "gen-moons"),
        batch_size=2,
        max_steps=2,
        lora_r=4,
        lora_layers=1,
        progress=False,
    )


def test_sft_writes_an_adapter_and_a_checked_manifest(warm_start, tiny_model_dir):
    from agentbench_poad.warmstart.sft import adapter_sha256, read_manifest, train_warm_start

    manifest = read_manifest(warm_start)
    assert manifest["adapter_sha256"] == adapter_sha256(warm_start)
    assert manifest["examples"] == 4 and manifest["datasets"] == ["wine", "gen-moons"]
    assert [row["step"] for row in manifest["training_loss"]] == [1, 2]
    assert all(row["loss"] == row["loss"] for row in manifest["training_loss"])  # finite
    assert manifest["lora"]["layers"] == [1]  # the top one of the tiny model's two layers
    assert manifest["versions"]["trl"]
    assert len(manifest["examples_sha256"]) == 64
    with pytest.raises(FileExistsError, match="already holds a warm start"):
        train_warm_start(str(tiny_model_dir), warm_start, style="paper", chat_template=False)


def test_merged_model_names_its_warm_start_and_a_tampered_adapter_is_refused(warm_start, tmp_path):
    from agentbench_poad.leaderboard.provenance import base_weights_entry
    from agentbench_poad.warmstart.sft import merged_model, read_manifest, warm_start_of

    model = merged_model(warm_start, progress=False)
    note = warm_start_of(model)
    assert note["adapter_sha256"] == read_manifest(warm_start)["adapter_sha256"]
    assert merged_model(warm_start, progress=False) == model  # reused, not remade
    entry = base_weights_entry(str(model))
    from agentbench_poad.leaderboard.records import make_record_id

    # a record id names the warm start, not the folder every warm start's model lives in
    assert make_record_id("E-v0", "base-chat", str(model)) == f"E-v0__base-chat__{warm_start.name}"
    assert make_record_id("E-v0", "poad", "smollm2-135m") == "E-v0__poad__smollm2-135m"
    assert entry["warm_start"]["name"] == warm_start.name
    assert entry["warm_start"]["adapter_sha256"] == note["adapter_sha256"]

    tampered = tmp_path / "ws"
    shutil.copytree(warm_start, tampered, ignore=shutil.ignore_patterns("model"))
    weights = tampered / "adapter" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\x00")
    with pytest.raises(ValueError, match="changed after training"):
        read_manifest(tampered)


def test_cli_checks_before_loading(tmp_path):
    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "agentbench_poad.cli", "warmstart", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )

    def build(datasets: str):
        return run(
            "build", "--model", "nowhere", "--style", "paper", "--chat-template", "off",
            "--out", str(tmp_path / "w"), "--datasets", datasets,
        )  # fmt: skip

    done = build("wine,iris")
    assert done.returncode == 2 and "iris are evaluation datasets" in done.stderr
    done = build("atlantis")
    assert done.returncode == 2 and "unknown atlantis" in done.stderr
    done = run("info", str(tmp_path))
    assert done.returncode == 2 and "is not a warm start" in done.stderr
    (tmp_path / "manifest.json").write_text(json.dumps({}))
    done = run(
        "build",
        "--model",
        "nowhere",
        "--style",
        "paper",
        "--chat-template",
        "off",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 2 and "already holds a warm start" in done.stderr
