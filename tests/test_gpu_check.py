"""The GPU path, checked on a CPU: the prepared device check, Ray's GPU requests, bad devices.

* ``benchmarks/gpu_check.py --smoke`` runs every part of the GPU check on the CPU with a tiny
  model, so the script cannot rot before a GPU machine runs it.
* ``study --executor ray --device cuda`` asks Ray for ``1 / runs_per_gpu`` GPUs per cell: checked
  with Ray's own resource accounting on a local cluster that declares fake GPUs.
* ``--device cuda`` without a GPU stops train, evaluate and study before any model loads.
* The dtype decision (bfloat16 -> float16 on a GPU without bfloat16) with the capability query
  passed in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures_rl import tiny_model_dir  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
ENV = "Overcooked-TomatoSalad-v0"
NO_GPU = pytest.mark.skipif(
    pytest.importorskip("torch").cuda.is_available(), reason="this machine has a GPU"
)


# -- the device check script ---------------------------------------------------------------------
def test_gpu_check_smoke_writes_every_part(tmp_path):
    """benchmarks/gpu_check.py --smoke: exit 0, one summary line, every part in the JSON."""
    out = tmp_path / "check"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--smoke", "--out", str(out)],
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    summary = [line for line in done.stdout.splitlines() if line.startswith("gpu_check:")]
    assert len(summary) == 1 and summary[0].startswith("gpu_check: OK"), done.stdout
    assert "ratio:" in summary[0] and "candidates/s" in summary[0]
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["ok"] and report["summary"] in summary[0]
    env = report["environment"]
    assert env["device"] == "cpu" and env["dtype"] == "float32" and env["torch"]
    assert "cuda" in env  # the CUDA version torch was built with (None on a CPU build)
    update = report["ppo_update"]
    assert update["ok"] and update["tokens"] > 0 and update["ratio"] > 0
    assert update["update_tokens_per_s"] > 0 and update["anchor_tokens_per_s"] > 0
    # a missed goal is said in the JSON and the summary line, apart from "ok" (it ran)
    assert update["goal_met"] == (update["ratio"] >= 0.8)
    assert ("goal >= 0.8 met" if update["goal_met"] else "goal >= 0.8 NOT met") in summary[0]
    training = report["training"]
    assert training["ok"] and training["updates"] == 1 and training["not_finite"] == []
    # the run's config.json names where it computed (a GPU run: device name, dtype fallback)
    assert training["compute"] == {"device": "cpu", "dtype": "float32"}
    parity = report["rollout_parity"]  # CPU against CPU here: the same actions
    assert parity["ok"] and parity["identical"] and parity["first_difference"] is None
    assert parity["steps"] == 2 and parity["max_candidate_log_prob_gap"] == 0.0
    scoring = report["action_scoring"]
    assert scoring["ok"] and scoring["candidates_per_s"] > 0 and scoring["candidates_per_call"] > 0
    assert scoring["goal_met"] == (scoring["ratio"] <= 2)
    assert report["peak_memory_bytes"] is None  # no GPU


# -- the dtype decision ----------------------------------------------------------------------------
def _never() -> bool:
    raise AssertionError("the GPU's bfloat16 support was asked for off the GPU")


@pytest.mark.parametrize(
    "requested, device_type, has_bf16, expected, noted",
    [
        ("auto", "cuda", True, "bfloat16", False),
        ("auto", "cuda", False, "float16", True),  # e.g. a V100 or T4
        ("bfloat16", "cuda", True, "bfloat16", False),
        ("bfloat16", "cuda", False, "float16", True),
        ("float32", "cuda", False, "float32", False),
        ("float16", "cuda", False, "float16", False),
        ("auto", "cpu", None, "float32", False),
        ("bfloat16", "cpu", None, "bfloat16", False),
    ],
)
def test_choose_dtype(requested, device_type, has_bf16, expected, noted):
    from agentbench_poad.models.loading import choose_dtype

    query = _never if has_bf16 is None else (lambda: has_bf16)
    dtype, note = choose_dtype(requested, device_type, query)
    assert dtype == expected
    assert (note is not None) == noted
    if noted:
        assert "float16 used instead" in note and "bfloat16" in note


def test_choose_dtype_rejects_unknown_names():
    from agentbench_poad.models.loading import choose_dtype

    with pytest.raises(ValueError, match="unknown dtype 'float8'"):
        choose_dtype("float8", "cuda", lambda: True)


# -- --device cuda without a GPU -----------------------------------------------------------------
@NO_GPU
def test_train_cuda_without_gpu_fails_before_the_model(tmp_path, capsys, tiny_model_dir):  # noqa: F811
    from agentbench_poad.cli import main

    out = tmp_path / "run"
    argv = ["train", "--agent", "poad", "--env", ENV, "--model", str(tiny_model_dir)]
    code = main([*argv, "--total-steps", "8", "--out", str(out), "--device", "cuda"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--device cpu" in err and "--device auto" in err and "CUDA is not available" in err
    assert not out.exists()  # nothing was made: the model never loaded


@NO_GPU
def test_train_device_from_set_is_checked_too(tmp_path, capsys, tiny_model_dir):  # noqa: F811
    from agentbench_poad.cli import main

    argv = ["train", "--agent", "poad", "--env", ENV, "--model", str(tiny_model_dir)]
    code = main([*argv, "--total-steps", "8", "--out", str(tmp_path / "r"), "--set", "device=cuda"])
    assert code == 2 and "--device cpu" in capsys.readouterr().err


@NO_GPU
def test_evaluate_device_cuda_without_gpu(tmp_path, capsys):
    from agentbench_poad.cli import main

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"algorithm": {"device": "cuda"}}))
    assert main(["evaluate", "--run", str(run), "--device", "cuda"]) == 2
    assert "--device cpu" in capsys.readouterr().err
    # a run trained on a GPU, evaluated on a machine without one: the run's device is checked
    assert main(["evaluate", "--run", str(run)]) == 2
    err = capsys.readouterr().err
    assert "the run was trained on 'cuda'; pass --device" in err


@NO_GPU
def test_study_device_cuda_without_gpu(tmp_path, capsys):
    from agentbench_poad.cli import main

    spec = tmp_path / "s.toml"
    spec.write_text(f'[study]\nmodel = "m"\n[[group]]\nagents = ["poad"]\nenvs = ["{ENV}"]\n')
    assert main(["study", str(spec), "--device", "cuda", "--out", str(tmp_path / "o")]) == 2
    assert "--device cpu" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_device_problem_names_a_bad_device():
    from agentbench_poad.models.loading import device_problem

    assert device_problem("auto") is None and device_problem("cpu") is None
    assert "not a torch device" in device_problem("gpu0")


# -- runs per GPU in a study spec --------------------------------------------------------------
def test_spec_runs_per_gpu(tmp_path):
    from agentbench_poad.study import StudyError, load_study

    def write(extra: str = "") -> Path:
        spec = tmp_path / "s.toml"
        spec.write_text(
            f'[study]\nmodel = "m"\n{extra}[study.total_steps]\n"{ENV}" = 64\n'
            f'[[group]]\nname = "g"\nagents = ["poad"]\nenvs = ["{ENV}"]\n'
        )
        return spec

    assert load_study(write()).runs_per_gpu == 1
    study = load_study(write("runs_per_gpu = 2\n"))
    assert study.runs_per_gpu == 2 and study.select(["g"]).runs_per_gpu == 2
    for bad in ("0", "1.5", "true", '"2"'):
        with pytest.raises(StudyError, match="runs_per_gpu must be an int >= 1"):
            load_study(write(f"runs_per_gpu = {bad}\n"))


@pytest.mark.parametrize(
    "device, runs_per_gpu, cluster_gpus, expected",
    [
        ("cuda", 1, 0.0, 1.0),
        ("cuda", 2, 0.0, 0.5),  # cuda asks regardless: the executor then refuses a GPU-less cluster
        ("cuda:0", 4, 1.0, 0.25),
        ("auto", 2, 1.0, 0.5),
        ("auto", 2, 0.0, 0.0),
        ("cpu", 2, 1.0, 0.0),
        (None, 2, 1.0, 0.0),
    ],
)
def test_gpu_share(device, runs_per_gpu, cluster_gpus, expected):
    from agentbench_poad.executors import gpu_share

    assert gpu_share(device, runs_per_gpu, cluster_gpus) == expected


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_gpu_share_rejects_bad_runs_per_gpu(bad):
    from agentbench_poad.executors import gpu_share

    with pytest.raises(ValueError, match="runs_per_gpu must be an int >= 1"):
        gpu_share("cuda", bad)


# -- Ray's own accounting on a cluster with fake GPUs -----------------------------------------
def _ray_cluster(num_cpus: int, num_gpus: int):
    ray = pytest.importorskip(
        "ray", reason="Ray is not installed (pip install 'agentbench-poad[ray]')"
    )
    if ray.is_initialized():
        ray.shutdown()
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    ray.init(
        num_cpus=num_cpus,
        num_gpus=num_gpus,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    return ray


@pytest.fixture(scope="module")
def fake_gpu_cluster():
    """A local Ray cluster of 4 CPUs and 1 (fake) GPU: GPUs, not CPUs, bound the cells."""
    ray = _ray_cluster(num_cpus=4, num_gpus=1)
    yield ray
    ray.shutdown()


class _Meeting:
    """Where the cells meet (a Ray actor): how many are inside at once, and a gate the driver
    opens to let them leave."""

    def __init__(self, open_gate: bool = False) -> None:
        self.inside = 0
        self.most = 0
        self.arrived = 0
        self.gate_open = open_gate

    def enter(self) -> None:
        self.inside += 1
        self.arrived += 1
        self.most = max(self.most, self.inside)

    def leave(self) -> None:
        self.inside -= 1

    def open_gate(self) -> None:
        self.gate_open = True

    def state(self) -> dict:
        return {"inside": self.inside, "most": self.most, "arrived": self.arrived}

    def may_leave(self) -> bool:
        return self.gate_open


def _until(check, what: str, seconds: float = 240.0) -> None:
    """Poll ``check()`` until it holds (a bound on waiting, not a timing assertion)."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {seconds:.0f} s for {what}")
        time.sleep(0.05)


def _gpu_cell(cell: int) -> dict:
    """A cell that reports what Ray gave it, and stays inside until the gate opens."""
    import ray

    meeting = ray.get_actor("gpu-check-meeting")
    ray.get(meeting.enter.remote())
    try:
        _until(lambda: ray.get(meeting.may_leave.remote()), "the gate")
        return {
            "cell": cell,
            "resources": ray.get_runtime_context().get_assigned_resources(),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }
    finally:
        ray.get(meeting.leave.remote())


def test_ray_runs_two_cells_per_gpu_and_holds_the_third(fake_gpu_cluster):
    """runs_per_gpu = 2 on one GPU: each cell holds half of it (Ray's accounting), two run
    together, a third waits for a free half although CPUs are free."""
    ray = fake_gpu_cluster
    from agentbench_poad.executors import RayExecutor, get_executor

    executor = get_executor("ray", device="cuda", runs_per_gpu=2)
    assert isinstance(executor, RayExecutor)
    assert executor.task_gpus == 0.5 and executor.task_options()["num_gpus"] == 0.5
    assert executor.slots() == 2  # 4 CPUs, but 1 GPU / 0.5
    meeting = ray.remote(num_cpus=0)(_Meeting).options(name="gpu-check-meeting").remote()
    try:
        # Straight to Ray, past the executor's own slot count: Ray alone holds the third back.
        refs = [executor._remote.remote(ray.put(_gpu_cell), i) for i in range(3)]
        _until(lambda: ray.get(meeting.state.remote())["arrived"] >= 2, "two cells inside")
        # Ray's own books: the GPU is taken by the two halves, while CPUs are still free
        _until(lambda: ray.available_resources().get("GPU", 0.0) < 1e-6, "the GPU booked")
        assert ray.available_resources().get("CPU", 0.0) >= 1.0
        # the third cell waits (without the GPU request, 4 CPUs would let it in within a second)
        with pytest.raises(TimeoutError):
            _until(lambda: ray.get(meeting.state.remote())["arrived"] > 2, "a third", 3.0)
        ray.get(meeting.open_gate.remote())
        results = ray.get(refs, timeout=120)
        state = ray.get(meeting.state.remote())
    finally:
        ray.kill(meeting)
    assert state == {"inside": 0, "most": 2, "arrived": 3}
    for result in results:
        assert result["resources"].get("GPU") == pytest.approx(0.5)
        assert result["gpu_ids"] == ["0"] and result["visible"] == "0"
    # and the executor's map gives every cell its half GPU too
    meeting = ray.remote(num_cpus=0)(_Meeting).options(name="gpu-check-meeting").remote(True)
    try:
        outcomes = executor.map(_gpu_cell, [0, 1])
    finally:
        ray.kill(meeting)
    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    assert [o.value["resources"]["GPU"] for o in outcomes] == [0.5, 0.5]


def test_ray_auto_and_cpu_devices_on_a_gpu_cluster(fake_gpu_cluster):
    from agentbench_poad.executors import get_executor

    assert get_executor("ray", device="auto", runs_per_gpu=4).task_gpus == 0.25
    assert get_executor("ray", device="cpu").task_options()["num_gpus"] == 0.0
    assert get_executor("ray").slots() == 4  # no GPU asked for: the CPUs bound the cells


def test_ray_cuda_on_a_cluster_without_gpus_fails_before_any_task():
    ray = _ray_cluster(num_cpus=2, num_gpus=0)
    try:
        from agentbench_poad.executors import get_executor

        with pytest.raises(ValueError, match="the Ray cluster has no GPU.*--device cpu"):
            get_executor("ray", device="cuda")
        assert get_executor("ray", device="auto").task_gpus == 0.0
    finally:
        ray.shutdown()
