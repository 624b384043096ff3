"""Every script of benchmarks/ and studies/ runs at a tiny size, so none can rot unnoticed.

Each runs as a subprocess (as a user runs it) with its smallest options (``--smoke`` where a script
has no size options of its own) and must exit 0 and print what it exists to print: its ratio
against the anchor measured in the same run, or its measurements. Nothing about time is asserted:
the printed ratios are meaningless at these sizes. A new script needs a row in ``SCRIPTS`` (or in
``COVERED_ELSEWHERE``), else ``test_every_script_has_a_smoke_run`` fails.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures_rl import train_tiny_poad_run

ROOT = Path(__file__).resolve().parents[1]
#: Helpers imported by scripts, not scripts.
NOT_SCRIPTS = {"benchmarks/_bench_model.py"}
#: Scripts whose smoke run lives in another test module (named here; checked below).
COVERED_ELSEWHERE = {
    "benchmarks/ppo_update.py": "tests/test_rl_speed.py",
    "benchmarks/action_scoring.py": "tests/test_rl_speed.py",
    "benchmarks/train_iteration.py": "tests/test_rl_speed.py",
    "benchmarks/update_profile.py": "tests/test_rl_speed.py",
    "benchmarks/side_by_side.py": "tests/test_rl_speed.py",
    "benchmarks/gpu_check.py": "tests/test_gpu_check.py",
    "benchmarks/compile_probe.py": "tests/test_compile_probe.py",
}
TINY_MODEL = "{tiny_model}"  # replaced by the tiny model's directory
TINY_RUN = "{tiny_run}"  # replaced by a tiny trained run directory
TINY_ARCHER_RUN = "{tiny_archer_run}"  # replaced by a tiny ArCHer run (critics and buffer kept)

#: script -> (arguments, text its output must contain)
SCRIPTS: dict[str, tuple[list[str], str]] = {
    "benchmarks/advantages.py": (["--smoke", "--threads", "1"], "ratio:"),
    "benchmarks/env_throughput.py": (["--seconds", "0.02"], "ratio"),
    "benchmarks/leaderboard_protocol.py": (["--episodes", "2", "--repeats", "1"], "ratio:"),
    "benchmarks/datascicoding_step.py": (["--repeats", "1", "--trees", "5"], "ratio:"),
    "benchmarks/sandbox_overhead.py": (
        ["--repeats", "1", "--trees", "5", "--pool-wait", "0"],
        "ratio:",
    ),
    "benchmarks/ray_grading.py": (
        ["--steps", "2", "--workers", "2", "--backend", "process"],
        "speed-up:",
    ),
    "benchmarks/quickstart_budget.py": (["--smoke"], "ratio:"),
    "studies/plan_probe.py": (
        ["VirtualHome-FoodPreparation-v0", "--model", TINY_MODEL, "--seeds", "1"],
        "P(plan)",
    ),
    "studies/dsc_prompt_probe.py": (
        [
            "--model",
            TINY_MODEL,
            "--samples",
            "1",
            "--batch",
            "1",
            "--sandbox",
            "process",
            "--formats",
            "plain",
        ],
        "attempts ran",
    ),
    "studies/dsc_runnable_probe.py": (["--smoke"], "of 2 ran (95 % Wilson"),
    "studies/dsc_dataset_spread.py": (["--smoke", "--markdown"], "| dataset |"),
    "studies/language_probe.py": ([TINY_RUN, "--window", "256"], "ppl"),
    "studies/update_stats.py": ([TINY_RUN], "run | updates zero/reward"),
    "studies/archer_critic_probe.py": (
        [TINY_ARCHER_RUN, "--lr", "1e-3", "--samples-per-update", "4"],
        "| fresh, lr 0.001 |",
    ),
    # an ablation folder with no finished run yet (the working directory): the table's head
    "studies/reward_free_ablation.py": (["."], "decision: not yet"),
    # a pilot folder with no run yet: every task says what it waits for
    "studies/budget_pilot.py": (["."], "run --group tomato-lettuce-1x next"),
}


def _scripts() -> set[str]:
    found = {
        str(path.relative_to(ROOT))
        for folder in ("benchmarks", "studies")
        for path in (ROOT / folder).glob("*.py")
    }
    return found - NOT_SCRIPTS


def test_every_script_has_a_smoke_run():
    missing = _scripts() - set(SCRIPTS) - set(COVERED_ELSEWHERE)
    assert not missing, f"scripts without a smoke run: {sorted(missing)}"
    for script, module in COVERED_ELSEWHERE.items():
        assert Path(script).name in (ROOT / module).read_text(encoding="utf-8"), (script, module)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tiny_model_dir) -> Path:  # noqa: F811
    """One tiny POAD training run (2 steps), for the scripts that read runs."""
    return train_tiny_poad_run(tiny_model_dir, tmp_path_factory.mktemp("smoke-run") / "poad")


@pytest.fixture(scope="module")
def tiny_archer_run(tmp_path_factory, tiny_model_dir) -> Path:  # noqa: F811
    """A tiny ArCHer run (3 updates of 2 steps) whose checkpoint keeps critics and buffer."""
    out = tmp_path_factory.mktemp("smoke-run") / "archer"
    return train_tiny_poad_run(tiny_model_dir, out, agent="archer", steps=6)


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_script_smoke_run(script, request, tmp_path):
    args, expected = SCRIPTS[script]
    if script == "benchmarks/ray_grading.py" and importlib.util.find_spec("ray") is None:
        pytest.skip('Ray is not installed (pip install "agentbench-poad[ray]")')
    if TINY_MODEL in args:
        model = request.getfixturevalue("tiny_model_dir")
        args = [str(model) if a == TINY_MODEL else a for a in args]
    for placeholder, fixture in ((TINY_RUN, "tiny_run"), (TINY_ARCHER_RUN, "tiny_archer_run")):
        if placeholder in args:
            run = request.getfixturevalue(fixture)
            args = [str(run) if a == placeholder else a for a in args]
    done = subprocess.run(
        [sys.executable, str(ROOT / script), *args],
        cwd=tmp_path,  # a script that writes into its working directory writes here
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert expected in done.stdout, done.stdout[-2000:]
