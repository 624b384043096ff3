"""Exact resume after SIGKILL at any moment (issue 64, docs/agents.md "Run directory").

A tiny-model run of 4 updates is trained in a subprocess and killed with SIGKILL, then resumed
in another; every resumed run must log the uninterrupted run's metrics lines (timing keys aside)
and end with its adapter and critic, bit for bit. The kills land inside each step of the commit
sequence (the test-only pause of ``COMMIT_PAUSE_ENV`` widens every window between two steps to
``PAUSE`` seconds and names the step on stderr) and in the computation between two commits.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from agentbench_poad.rl.run_dir import COMMIT_PAUSE_ENV, latest_checkpoint  # noqa: E402
from agentbench_poad.rl.trainer import TIMING_KEYS  # noqa: E402
from tests.fixtures_rl import small_overrides  # noqa: E402

#: Seconds each commit step pauses in the killed runs (the window a kill lands in).
PAUSE = 0.3
#: Steps of one update's commit sequence, in order (rl/trainer.py _commit_update, then
#: rl/run_dir.py save_checkpoint; every update is checkpointed here).
STEPS = ("logged", "checkpoint-written", "checkpoint-renamed", "checkpoint-committed")
UPDATES = 4

CHILD = """
import json, sys
from agentbench_poad.baselines import get_algorithm
from agentbench_poad.rl.trainer import train

model, out, resume, overrides = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
train(get_algorithm("poad"), "CaseStudy-Microwave-v0", model, total_steps=24, seed=3, out=out,
      resume=resume, overrides=json.loads(overrides), progress=False)
"""


def _command(model: Path, out: Path, *, resume: bool) -> list[str]:
    overrides = small_overrides(keep_checkpoints=2, checkpoint_every=1)
    assert overrides["num_envs"] * overrides["rollout_length"] * UPDATES == 24
    return [sys.executable, "-c", CHILD, str(model), str(out), "1" if resume else "0",
            json.dumps(overrides)]  # fmt: skip


def _train(model: Path, out: Path, *, resume: bool = False) -> None:
    env = {k: v for k, v in os.environ.items() if k != COMMIT_PAUSE_ENV}
    done = subprocess.run(
        _command(model, out, resume=resume), env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]


def _train_and_kill(model: Path, out: Path, step: int, delay: float) -> list[str]:
    """Train with the commit pauses on and SIGKILL the run ``delay`` seconds after the
    ``step``-th commit step (0-based, over the whole run) was announced; returns the steps
    announced before the kill."""
    env = {**os.environ, COMMIT_PAUSE_ENV: str(PAUSE)}
    child = subprocess.Popen(
        _command(model, out, resume=False),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[str] = []
    reached = threading.Event()

    def read() -> None:
        for line in child.stderr:
            if line.startswith("commit-step: "):
                seen.append(line.split(": ", 1)[1].strip())
                if len(seen) > step:
                    reached.set()
        reached.set()  # the run ended (or crashed) before that step

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert reached.wait(timeout=600), "the run announced no commit step in 10 minutes"
        assert len(seen) > step, f"the run ended after {seen} without reaching step {step}"
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=60)
        reader.join(timeout=60)
    assert child.returncode == -signal.SIGKILL, "the run ended before the kill"
    return seen[: step + 1]


def _lines(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k not in TIMING_KEYS} for row in rows]


def _weights(run: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    checkpoint = latest_checkpoint(run)
    adapter = load_file(str(next((checkpoint / "adapter").glob("*.safetensors"))))
    critic = torch.load(checkpoint / "agent.pt", weights_only=True)["critic"]
    named = {f"adapter.{k}": v for k, v in adapter.items()}
    named.update({f"critic.{k}": v for k, v in critic.items()})
    return named


def _assert_same_run(resumed: Path, full: Path, what: str) -> None:
    assert _lines(resumed) == _lines(full), f"{what}: the metrics lines differ"
    got, want = _weights(resumed), _weights(full)
    assert got.keys() == want.keys()
    different = [k for k in want if not torch.equal(got[k], want[k])]
    assert not different, f"{what}: {different} differ from the uninterrupted run's"
    newest = latest_checkpoint(resumed).name
    assert newest == latest_checkpoint(full).name, what
    names = [p.name for p in (resumed / "checkpoints").iterdir() if p.name != "latest"]
    uncommitted = [n for n in names if n.endswith(".tmp") or n > newest]
    assert not uncommitted, f"{what}: {uncommitted} left beyond the last commit"


@pytest.fixture(scope="module")
def uninterrupted(tiny_model, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sigkill") / "full"
    _train(tiny_model, out)
    assert [row["update"] for row in _lines(out)] == list(range(1, UPDATES + 1))
    return out


def _kill_resume_compare(tiny_model, full: Path, out: Path, step: int, delay: float) -> None:
    announced = _train_and_kill(tiny_model, out, step, delay)
    _train(tiny_model, out, resume=True)
    _assert_same_run(resumed=out, full=full, what=f"killed {delay:.2f} s after {announced}")


def test_a_kill_between_a_checkpoint_and_its_commit_resumes_exactly(
    tiny_model, uninterrupted, tmp_path
):
    """The narrowest window: update 2's checkpoint is on disk under its final name, the
    ``latest`` pointer still names update 1's; the run resumes from update 1 and rewrites 2."""
    step = STEPS.index("checkpoint-renamed") + len(STEPS)  # update 2's
    _kill_resume_compare(tiny_model, uninterrupted, tmp_path / "run", step, PAUSE / 2)


@pytest.mark.slow
def test_kills_at_many_moments_all_resume_exactly(tiny_model, uninterrupted, tmp_path):
    """Ten kills: inside each kind of step of the commit sequence, at random steps, and in the
    computation of the next update (after a commit of updates 1-3, so the run is still alive)."""
    rng = random.Random(64)
    total = UPDATES * len(STEPS)
    kills = [(len(STEPS) * u + STEPS.index(name), rng.uniform(0, PAUSE))
             for u, name in enumerate(STEPS)]  # fmt: skip
    kills += [(rng.randrange(total), rng.uniform(0, PAUSE)) for _ in range(3)]
    kills += [(len(STEPS) * u + STEPS.index("checkpoint-committed"), PAUSE + rng.uniform(0, 1))
              for u in rng.sample(range(UPDATES - 1), 3)]  # fmt: skip
    assert len(kills) == 10
    for i, (step, delay) in enumerate(kills):
        _kill_resume_compare(tiny_model, uninterrupted, tmp_path / f"run{i}", step, delay)
