"""Executors (local and Ray) and evaluation sweeps over (agent, env, seed) cells.

The Ray half runs on a local 2-CPU cluster started by the ``ray_cluster`` fixture and is skipped
with its reason when Ray is not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentbench_poad.cli import main
from agentbench_poad.executors import LocalExecutor, RayExecutor, get_executor
from agentbench_poad.leaderboard.protocol import EvaluationPlan, Provenance, evaluate_plan
from agentbench_poad.leaderboard.sweep import cell_key, evaluate_grid, run_cell

ROOT = Path(__file__).resolve().parents[1]
RANDOM = "agentbench_poad.baselines.random:make_random_agent"
BROKEN = f"{ROOT / 'tests' / '_sweep_agents.py'}:make_broken_on"
#: Fields that legitimately differ between two runs of the same evaluation.
MASKED = ("created_at", "hardware", "software", "wall_time_s")


@dataclass(frozen=True)
class Flaky:
    """A cell that fails its first ``fail`` attempts (counted in a file: works across processes)."""

    counter: str
    value: int
    fail: int = 0
    crash: bool = False  # fail by killing the worker process instead of raising


def run_flaky(cell: Flaky) -> int:
    path = Path(cell.counter)
    attempts = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(attempts))
    if attempts <= cell.fail:
        if cell.crash:
            os._exit(1)  # a dead worker, not an exception
        raise RuntimeError(f"flaky failure {attempts} of cell {cell.value}")
    return cell.value * 10


def masked(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in MASKED}


def plan(agent=RANDOM, envs=("Overcooked-TomatoSalad-v0",), seeds=(0, 1), episodes=2, **kw):
    return EvaluationPlan(
        agent=agent, env_ids=tuple(envs), seeds=tuple(seeds), episodes=episodes, **kw
    )


EXECUTORS = ["local", "ray"]


@pytest.fixture
def make(request):
    """``make(name, max_retries)``: an executor; "ray" brings up the module's Ray cluster."""

    def build(name: str, max_retries: int = 2):
        if name == "local":
            return LocalExecutor(max_retries)
        request.getfixturevalue("ray_cluster")
        return RayExecutor(max_retries=max_retries)

    return build


# -- the executor contract -----------------------------------------------------------------------
@pytest.mark.parametrize("name", EXECUTORS)
def test_failed_cell_is_reported_retried_and_others_kept(name, make, tmp_path):
    cells = [Flaky(str(tmp_path / f"c{i}"), i, fail=f) for i, f in enumerate([0, 1, 2, 5])]
    failures, finished = [], []
    outcomes = make(name, max_retries=2).map(
        run_flaky,
        cells,
        on_result=finished.append,
        on_failure=lambda cell, attempt, error: failures.append((cell.value, attempt, error)),
    )
    assert [o.ok for o in outcomes] == [True, True, True, False]
    assert [o.value for o in outcomes[:3]] == [0, 10, 20]
    assert [o.attempts for o in outcomes] == [1, 2, 3, 3]
    assert "flaky failure 3 of cell 3" in outcomes[3].error
    # every failed attempt was reported, with its attempt number
    assert sorted((v, a) for v, a, _ in failures) == [
        (1, 1),
        (2, 1),
        (2, 2),
        (3, 1),
        (3, 2),
        (3, 3),
    ]
    assert sorted(o.cell.value for o in finished) == [0, 1, 2, 3]  # each reported once
    assert int((tmp_path / "c3").read_text()) == 3  # 1 + max_retries attempts, no more


def started_at(seconds: float) -> float:
    """A cell that records when it started, then works for ``seconds``."""
    import time

    start = time.time()
    time.sleep(seconds)
    return start


@pytest.mark.parametrize("name", EXECUTORS)
def test_follow_ups_run_next_and_report_after_the_cells(name, make, tmp_path):
    """``on_result`` may return follow-up cells: each runs (with retries) before the cells still
    waiting, is reported to ``on_result`` in turn, and its outcome comes after the cells'."""
    cells = [Flaky(str(tmp_path / f"c{i}"), i) for i in range(3)]
    order: list[int] = []

    def finished(outcome):
        order.append(outcome.cell.value)
        if outcome.cell.value == 0:  # two follow-ups, the second failing once
            return [Flaky(str(tmp_path / "f1"), 10), Flaky(str(tmp_path / "f2"), 20, fail=1)]
        if outcome.cell.value == 20:
            return [Flaky(str(tmp_path / "f3"), 30)]  # a follow-up of a follow-up
        return None

    outcomes = make(name, max_retries=1).map(run_flaky, cells, on_result=finished)
    assert [o.cell.value for o in outcomes] == [0, 1, 2, 10, 20, 30]
    assert [o.value for o in outcomes] == [0, 10, 20, 100, 200, 300]
    assert [o.attempts for o in outcomes] == [1, 1, 1, 1, 2, 1]
    assert sorted(order) == [0, 1, 2, 10, 20, 30]  # each reported once
    if name == "local":  # one at a time: the follow-ups run before cells 1 and 2
        assert order == [0, 10, 20, 30, 1, 2]


def test_ray_a_follow_up_takes_the_next_free_slot(ray_cluster):
    """A study evaluates a record (a follow-up) as soon as its runs are trained: it must run in
    the next free slot, not behind the training cells still waiting, and while it runs the other
    slot goes on training (a slot freed meanwhile takes the next cell at once)."""
    executor = RayExecutor(max_retries=0)
    assert executor.slots() == 2  # the fixture's 2-CPU cluster
    reported: list[float] = []
    cells = [1.0, 3.0, 1.0, 1.0]

    def evaluate_after_the_first(outcome):
        reported.append(outcome.cell)
        return [4.0] if len(reported) == 1 else None  # after cell 0, at ~1 s, until ~5 s

    outcomes = executor.map(started_at, cells, on_result=evaluate_after_the_first)
    starts = [o.value for o in outcomes]
    assert [o.cell for o in outcomes] == [*cells, 4.0] and all(o.ok for o in outcomes)
    follow_up = starts[4]
    assert follow_up < starts[2] and follow_up < starts[3]  # not behind cells 2 and 3
    assert starts[2] < follow_up + 4.0  # cell 1's slot (free at ~3 s) did not wait for it
    assert starts[2] >= starts[1] + 3.0  # two in flight at most: cell 2 waited for cell 1


def test_ray_reruns_the_task_of_a_dead_worker(ray_cluster, tmp_path):
    cells = [Flaky(str(tmp_path / "dies"), 7, fail=1, crash=True), Flaky(str(tmp_path / "fine"), 8)]
    outcomes = RayExecutor(max_retries=0).map(run_flaky, cells)
    assert [(o.ok, o.value) for o in outcomes] == [(True, 70), (True, 80)]
    assert int((tmp_path / "dies").read_text()) == 2


def test_executor_arguments_are_checked():
    with pytest.raises(ValueError, match="max_retries"):
        LocalExecutor(-1)
    with pytest.raises(ValueError, match="choose one of local, ray"):
        get_executor("dask")
    with pytest.raises(ValueError, match="--executor ray"):
        get_executor("local", address="auto")


# -- sweeps: records equal the protocol's --------------------------------------------------------
@pytest.mark.parametrize("name", EXECUTORS)
@pytest.mark.parametrize(
    "env_id,seeds", [("Overcooked-TomatoSalad-v0", [0, 3]), ("VirtualHome-Cheese-v0", [2, 1, 5])]
)
def test_sweep_records_equal_the_protocol(name, make, env_id, seeds, tmp_path):
    the_plan = plan(envs=[env_id], seeds=seeds, episodes=3, action_timeout=None)
    provenance = Provenance(command="test")
    (reference,) = evaluate_plan(the_plan, provenance)
    result = evaluate_grid(the_plan, provenance, executor=make(name), out_dir=tmp_path)
    assert result.failed == [] and result.reused == 0
    (record,) = result.records
    assert masked(record) == masked(reference)
    on_disk = json.loads(result.paths[0].read_text())
    assert masked(on_disk) == masked(reference)
    assert not list((tmp_path / ".cells").glob("*.json"))  # cells folded into the record


def test_local_and_ray_records_are_identical(ray_cluster, tmp_path):
    envs = ["Overcooked-TomatoSalad-v0", "VirtualHome-Cheese-v0"]
    local = evaluate_grid(plan(envs=envs), executor=LocalExecutor())
    remote = evaluate_grid(plan(envs=envs), executor=RayExecutor())
    assert len(local.records) == len(remote.records) == 2
    assert [masked(r) for r in local.records] == [masked(r) for r in remote.records]


@pytest.mark.parametrize("name", EXECUTORS)
def test_failing_cell_never_writes_its_record_and_resumes(name, make, tmp_path):
    marker = tmp_path / "broken"
    marker.write_text("x")
    envs = ["Overcooked-TomatoSalad-v0", "VirtualHome-Cheese-v0"]
    kwargs = {"broken_env": "VirtualHome-Cheese-v0", "marker": str(marker)}
    out = tmp_path / "out"
    broken = plan(BROKEN, envs, agent_kwargs=kwargs)
    named = Provenance(agent_name="b")
    first = evaluate_grid(broken, named, executor=make(name, max_retries=1), out_dir=out)
    assert [r["env"]["id"] for r in first.records] == ["Overcooked-TomatoSalad-v0"]
    assert sorted((o.cell.seed, o.attempts) for o in first.failed) == [(0, 2), (1, 2)]
    assert sorted(p.name for p in out.glob("*.json")) == ["Overcooked-TomatoSalad-v0__b.json"]
    marker.unlink()  # the fault is fixed: the re-run evaluates only what is missing
    second = evaluate_grid(broken, named, executor=make(name), out_dir=out)
    assert second.failed == [] and second.reused == 0
    assert sorted(p.name for p in out.glob("*.json")) == [
        "Overcooked-TomatoSalad-v0__b.json",
        "VirtualHome-Cheese-v0__b.json",
    ]
    (reference,) = evaluate_plan(
        plan(BROKEN, ["VirtualHome-Cheese-v0"], agent_kwargs=kwargs), named
    )
    assert masked(second.records[1]) == masked(reference)


def test_finished_cells_are_reused_after_an_interruption(tmp_path):
    out = tmp_path / "out"
    the_plan = plan(seeds=(0, 1, 2))
    full = evaluate_grid(the_plan, out_dir=tmp_path / "full")
    # an earlier run finished the cells of seeds 0 and 2, then died before seed 1
    (out / ".cells").mkdir(parents=True)
    for seed in (0, 2):
        request = the_plan.cell("Overcooked-TomatoSalad-v0", seed)
        (out / ".cells" / f"{cell_key(request)}.json").write_text(json.dumps(run_cell(request)))
    (out / ".cells" / "torn.json").write_text('{"env_id": ')  # not a cell of this sweep
    resumed = evaluate_grid(the_plan, out_dir=out)
    assert resumed.reused == 2
    assert masked(resumed.records[0]) == masked(full.records[0])


# -- the CLI --------------------------------------------------------------------------------------
def test_cli_evaluate_on_ray_equals_local(ray_cluster, tmp_path, capsys):
    base = [
        "evaluate",
        "--agent",
        RANDOM,
        "--env",
        "Overcooked-TomatoSalad-v0",
        "--seeds",
        "0",
        "1",
        "--episodes",
        "2",
        "--no-progress",
    ]
    assert main([*base, "--out", str(tmp_path / "plain.json")]) == 0
    assert main([*base, "--out", str(tmp_path / "ray.json"), "--executor", "ray"]) == 0
    assert "cells reused" in capsys.readouterr().out
    plain = json.loads((tmp_path / "plain.json").read_text())
    remote = json.loads((tmp_path / "ray.json").read_text())
    assert masked(plain) == masked(remote)


def _run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


def test_without_ray_the_executor_names_the_extra(tmp_path):
    code = f"""
import sys
class NoRay:
    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray' (blocked by the test)")
sys.meta_path.insert(0, NoRay())
from agentbench_poad.cli import main
sys.exit(main(["evaluate", "--agent", {RANDOM!r}, "--env", "Overcooked-TomatoSalad-v0",
               "--episodes", "1", "--executor", "ray", "--out", {str(tmp_path / "r.json")!r}]))
"""
    proc = _run_python(code)
    assert proc.returncode == 2, proc.stderr
    assert 'pip install "agentbench-poad[ray]"' in proc.stderr
    assert not (tmp_path / "r.json").exists()


def test_ray_is_never_imported_unless_asked(tmp_path):
    code = f"""
import sys
from agentbench_poad.cli import main
rc = main(["evaluate", "--agent", {RANDOM!r}, "--env", "Overcooked-TomatoSalad-v0",
           "--episodes", "1", "--executor", "local", "--no-progress",
           "--out", {str(tmp_path / "l.json")!r}])
import agentbench_poad.executors, agentbench_poad.leaderboard.sweep  # noqa
assert rc == 0, rc
print(sorted(m for m in sys.modules if m == "ray" or m.startswith("ray.")))
"""
    proc = _run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"
