"""DataSciCoding grading on a pool of Ray actors: same grades as a local sandbox, test labels stay
on the host, a node without a usable backend says so. (The adversarial suite runs through the
pool too: tests/test_sandbox_adversarial.py, params ``ray-*``.)"""

from __future__ import annotations

import threading

import gymnasium as gym
import numpy as np
import pytest

from agentbench_poad.environments.datascicoding import datasets as ds
from agentbench_poad.environments.datascicoding.grader import make_splits
from agentbench_poad.sandbox import Limits, SandboxUnavailable
from tests.test_datascicoding_env import BAD_CODE, GOOD_BODY, LOGISTIC

pytestmark = pytest.mark.usefixtures("ray_cluster")
LIMITS = Limits(wall_time_s=60.0, memory_mb=1024)
#: Step info that depends on where and how fast the code ran.
VOLATILE = ("runtime_s", "sandbox_backend")


@pytest.fixture(scope="module")
def pool(ray_cluster):
    from agentbench_poad.ray_sandbox import RaySandboxPool

    p = RaySandboxPool(workers=2, backend="process", cpus_per_worker=0.5)
    yield p
    p.close()


def steps(sandbox, name: str, bodies: list[str], seed: int = 0) -> list[tuple]:
    env = gym.make(f"DataSciCoding-{name}-v0", sandbox=sandbox, limits=LIMITS)
    try:
        out = []
        env.reset(seed=seed)
        for body in bodies:
            obs, reward, terminated, truncated, info = env.step(body)
            out.append(
                (
                    obs,
                    reward,
                    terminated,
                    truncated,
                    {k: v for k, v in info.items() if k not in VOLATILE},
                )
            )
            if terminated or truncated:
                env.reset(seed=seed)
        return out
    finally:
        env.close()


@pytest.mark.parametrize(
    "name,bodies",
    [
        ("iris", [LOGISTIC]),
        ("breast-cancer", [BAD_CODE[5][1], BAD_CODE[7][1], GOOD_BODY]),
    ],
)
def test_grades_through_ray_equal_local(pool, name, bodies):
    local = steps("process", name, bodies)
    remote = steps(pool, name, bodies)
    assert remote == local
    assert any(step[1] > 0.5 for step in remote)  # a real AUC, not only failures


def test_test_labels_never_leave_the_host(ray_cluster):
    from agentbench_poad.ray_sandbox import RaySandboxPool

    class RecordingPool(RaySandboxPool):
        """The real pool, keeping what leaves the host for the Ray workers."""

        calls: list[dict[str, np.ndarray]] = []

        def run(self, source, entry, inputs, **kwargs):
            self.calls.append({k: np.array(v) for k, v in inputs.items()})
            return super().run(source, entry, inputs, **kwargs)

    recording = RecordingPool(workers=1, backend="process", cpus_per_worker=0.5)
    env = gym.make("DataSciCoding-breast-cancer-v0", sandbox=recording, limits=LIMITS)
    env.reset(seed=0)
    _, reward, *_ = env.step(GOOD_BODY)
    env.close()
    recording.close()
    # one call per split, each with its training data and test features only
    assert reward > 0.5 and len(recording.calls) == 5
    data = ds.load_dataset("breast-cancer")
    for inputs, (train, test) in zip(recording.calls, make_splits(len(data.y))):
        assert set(inputs) == {"x_train", "y_train", "x_test"}
        np.testing.assert_array_equal(inputs["y_train"], data.y[train])
        np.testing.assert_array_equal(inputs["x_test"], data.X[test])


def test_parallel_grades_equal_sequential(pool):
    from agentbench_poad.environments.datascicoding.grader import Grader
    from agentbench_poad.environments.datascicoding.prompts import parse_action

    data = ds.load_dataset("wine")
    grader = Grader(data.X, data.y, data.n_classes, sandbox=pool, limits=LIMITS)
    bodies = [LOGISTIC, GOOD_BODY, BAD_CODE[2][1], LOGISTIC]
    sequential = [grader.grade(parse_action(b)) for b in bodies]
    parallel: list = [None] * len(bodies)

    def grade(i: int) -> None:
        parallel[i] = grader.grade(parse_action(bodies[i]))

    threads = [threading.Thread(target=grade, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for a, b in zip(sequential, parallel):
        assert (a.ok, a.reward, a.split_aucs, a.category, a.message) == (
            b.ok,
            b.reward,
            b.split_aucs,
            b.category,
            b.message,
        )
    assert [g.ok for g in parallel] == [True, True, False, True]


def test_sandbox_ray_by_name_uses_the_nodes_backend(ray_cluster):
    env = gym.make("DataSciCoding-iris-v0", sandbox="ray", limits=LIMITS)
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(LOGISTIC)
    env.close()
    from agentbench_poad.ray_sandbox import shared_pool

    shared_pool().close()
    assert terminated and reward > 0.5
    assert info["sandbox_backend"] in ("docker", "process")


def test_a_node_without_a_usable_backend_says_so(ray_cluster):
    from agentbench_poad.ray_sandbox import RaySandboxPool

    with pytest.raises(
        SandboxUnavailable,
        match=r"Ray node \S+ has no usable sandbox backend "
        r"'docker'.*sandbox status",
    ):
        RaySandboxPool(
            workers=1,
            backend="docker",
            image="agentbench-poad-sandbox:no-such-tag",
            cpus_per_worker=0,
        )
