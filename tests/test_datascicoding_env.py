"""DataSciCoding environment: conformance, AUC against scikit-learn, bad code, protocols.

Code runs in the real sandbox (process backend; docker tests are marked and skipped without an
engine). The network datasets go through a cache that the tests create in ``tmp_path``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from agentbench_poad import check_text_env, env_facts
from agentbench_poad.baselines.oracle import make_oracle
from agentbench_poad.baselines.oracle_datascicoding import ORACLE_BODIES
from agentbench_poad.environments import registered_ids
from agentbench_poad.environments.datascicoding import datasets as ds
from agentbench_poad.environments.datascicoding.env import DataSciCodingEnv
from agentbench_poad.environments.datascicoding.grader import make_splits
from agentbench_poad.sandbox import Limits
from agentbench_poad.sandbox.process_backend import ProcessBackend
from tests.test_datascicoding_datasets import offline_openml, populate_cache

DSC_IDS = registered_ids("datascicoding")
LIMITS = Limits(wall_time_s=60.0, memory_mb=1024)

GOOD_BODY = (
    "from sklearn.naive_bayes import GaussianNB\n"
    "    model = GaussianNB()\n"
    "    model.fit(x_train, y_train)\n"
    "    return"
)
LOGISTIC = (
    "from sklearn.linear_model import LogisticRegression\n"
    "model = LogisticRegression(max_iter=500)\n"
    "model.fit(x_train, y_train)\n"
)


def make(name: str = "iris", **kwargs) -> gym.Env:
    kwargs.setdefault("sandbox", "process")
    kwargs.setdefault("limits", LIMITS)
    return gym.make(f"DataSciCoding-{name}-v0", **kwargs)


# -- registry and conformance ---------------------------------------------------------------


def test_every_dataset_is_registered():
    assert DSC_IDS == sorted(spec.env_id for spec in ds.DATASETS.values())
    assert "DataSciCoding-airlines-v0" in DSC_IDS and "DataSciCoding-kidney-stone-v0" in DSC_IDS


@pytest.mark.parametrize("env_id", DSC_IDS)
def test_check_text_env(env_id, tmp_path, monkeypatch):
    spec = ds.get_spec(env_facts(env_id).task)
    if not spec.offline:
        cache = tmp_path / "cache"
        monkeypatch.setenv(ds.CACHE_ENV_VAR, str(cache))
        populate_cache(cache, monkeypatch, names={spec.name})
        offline_openml(monkeypatch)  # from here on only the cache can serve it
    env = gym.make(env_id, sandbox="process", limits=LIMITS)
    try:
        check_text_env(env)
        observation, info = env.reset(seed=0)
        assert info["available_actions"] is None
        assert spec.description in observation
    finally:
        env.close()


def test_make_needs_no_network_and_reset_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv(ds.CACHE_ENV_VAR, str(tmp_path / "empty"))
    offline_openml(monkeypatch)
    env = gym.make("DataSciCoding-airlines-v0")  # constructs: nothing is loaded yet
    with pytest.raises(ds.DatasetUnavailable) as info:
        env.reset(seed=0)
    assert "dataset 'airlines' is not cached and OpenML is unreachable" in str(info.value)
    assert "agentbench-poad data fetch airlines" in str(info.value)


def test_fresh_interpreter_make_opens_no_socket(tmp_path):
    """`import agentbench_poad; gym.make("DataSciCoding-airlines-v0")`, every connect refused."""
    import subprocess
    import sys

    code = (
        "import socket\n"
        "def refuse(*a, **k):\n"
        "    raise AssertionError('gym.make opened a connection')\n"
        "socket.socket.connect = refuse\n"
        "socket.create_connection = refuse\n"
        "import gymnasium as gym\n"
        "import agentbench_poad\n"
        "env = gym.make('DataSciCoding-airlines-v0')\n"
        "print(type(env.unwrapped).__name__, env.unwrapped.dataset_name)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, ds.CACHE_ENV_VAR: str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["DataSciCodingEnv", "airlines"]


# -- reward = mean AUC, as scikit-learn computes it directly --------------------------------


@pytest.mark.parametrize("name,body", [("iris", LOGISTIC), ("breast-cancer", GOOD_BODY)])
def test_reward_equals_direct_sklearn_auc(name, body):
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import train_test_split
    from sklearn.naive_bayes import GaussianNB

    env = make(name)
    env.reset(seed=0)
    _, reward, terminated, truncated, info = env.step(body)
    assert terminated and not truncated, info["failure_message"]
    trusted = {LOGISTIC: lambda: LogisticRegression(max_iter=500), GOOD_BODY: GaussianNB}[body]

    data = ds.load_dataset(name)
    expected = []
    for i in range(5):
        x_tr, x_te, y_tr, y_te = train_test_split(
            data.X, data.y, test_size=0.5, random_state=i, shuffle=True
        )
        proba = trusted().fit(x_tr, y_tr).predict_proba(x_te)
        expected.append(
            roc_auc_score(y_te, proba, multi_class="ovo")
            if proba.shape[1] > 2
            else roc_auc_score(y_te, proba[:, 1])
        )
    np.testing.assert_allclose(info["split_aucs"], expected, rtol=0, atol=1e-9)
    assert reward == pytest.approx(np.mean(expected), abs=1e-9)
    assert info["auc_std"] == pytest.approx(np.std(expected), abs=1e-9)
    assert info["sandbox_backend"] == "process" and info["failure_category"] is None
    assert info["runtime_s"] > 0


UNSEEDED = (
    "from sklearn.ensemble import RandomForestClassifier\n"
    "import random\n"
    "model = RandomForestClassifier(n_estimators=8, max_features=random.choice([1, 2, 3]))\n"
    "model.fit(x_train, y_train)\n"
)


def _unseeded_auc_by_hand(name: str) -> list[float]:
    """The env's rule written as a plain loop: split i's global random state is seeded with i."""
    import random

    from sklearn.ensemble import RandomForestClassifier
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import train_test_split

    data = ds.load_dataset(name)
    aucs = []
    for i in range(5):
        x_tr, x_te, y_tr, y_te = train_test_split(
            data.X, data.y, test_size=0.5, random_state=i, shuffle=True
        )
        random.seed(i)
        np.random.seed(i)
        model = RandomForestClassifier(n_estimators=8, max_features=random.choice([1, 2, 3]))
        proba = model.fit(x_tr, y_tr).predict_proba(x_te)
        aucs.append(roc_auc_score(y_te, proba[:, 1]))
    return aucs


def test_code_without_a_random_state_gets_the_same_reward_every_run():
    # before the grader seeded the global random state, this body scored differently on every
    # run (a forest of 8 trees on gen-xor moves by a few hundredths of AUC)
    rewards, split_aucs = [], []
    for seed in (0, 0, 1):
        env = make("gen-xor")
        env.reset(seed=seed)
        _, reward, terminated, _, info = env.step(UNSEEDED)
        assert terminated, info["failure_message"]
        rewards.append(reward)
        split_aucs.append(info["split_aucs"])
    assert rewards[0] == rewards[1] == rewards[2]
    np.testing.assert_allclose(split_aucs[0], _unseeded_auc_by_hand("gen-xor"), rtol=0, atol=1e-9)
    # each split has its own stream: the forests of two splits are not fitted from one state
    assert len(set(split_aucs[0])) == 5


class RecordingBackend(ProcessBackend):
    """The real process backend, recording what each call hands the sandbox."""

    def __init__(self):
        super().__init__()
        self.calls: list[dict[str, np.ndarray]] = []
        self.sources: list[str] = []

    def _run(self, source, entry, inputs, limits, output_shapes):
        self.calls.append({k: np.array(v) for k, v in inputs.items()})
        self.sources.append(source)
        return super()._run(source, entry, inputs, limits, output_shapes)


def test_one_sandbox_call_per_split_holding_no_scored_label():
    backend = RecordingBackend()
    env = make("breast-cancer", sandbox=backend)
    env.reset(seed=0)
    _, reward, terminated, _, _ = env.step(GOOD_BODY)
    assert terminated and reward > 0.5
    data = ds.load_dataset("breast-cancer")
    splits = make_splits(len(data.y))
    assert len(backend.calls) == len(splits) == 5
    for i, (inputs, (train, test)) in enumerate(zip(backend.calls, splits)):
        # the split's training data and test features, in the splits' row order and dtypes
        assert set(inputs) == {"x_train", "y_train", "x_test"}
        np.testing.assert_array_equal(inputs["x_train"], data.X[train])
        np.testing.assert_array_equal(inputs["y_train"], data.y[train])
        np.testing.assert_array_equal(inputs["x_test"], data.X[test])
        assert inputs["x_train"].dtype == np.float64 and inputs["y_train"].dtype == np.int64
        # the call is seeded with its split's index
        assert f"_random.seed({i})" in backend.sources[i]
        # no label of a row it is scored on: its labels are of its training rows only
        assert not set(train) & set(test)
    # one call holding every split's training labels (as before issue 64) would have held the
    # labels of most rows each split is scored on (1 - 1/2**4 of them, on average)
    for i, (_, test) in enumerate(splits):
        others = set(np.concatenate([train for j, (train, _) in enumerate(splits) if j != i]))
        assert len(set(test) & others) > 0.85 * len(test)


# -- bad code: a failed step with its category, never an exception --------------------------

BAD_CODE = [
    ("empty", "", "empty_code", "no code"),
    ("blank", "   \n\n", "empty_code", "no code"),
    ("syntax", "model = (", "syntax_error", "SyntaxError"),
    ("no-model", "x = 1", "no_model", "name 'model' is not defined"),
    ("unbound", "if False:\n    model = 1", "exception", "model"),
    (
        "regressor",
        "from sklearn.linear_model import LinearRegression\n"
        "model = LinearRegression().fit(x_train, y_train)",
        "exception",
        "has no predict_proba",
    ),
    ("returns-none", "model = None", "exception", "returned None"),
    (
        "wrong-shape",
        "class M:\n    def predict_proba(self, x):\n"
        "        return np.ones((len(x) + 1, 3)) / 3\nmodel = M()",
        "output_invalid",
        "shape",
    ),
    (
        "nan",
        "class M:\n    def predict_proba(self, x):\n"
        "        return np.full((len(x), 3), np.nan)\nmodel = M()",
        "output_invalid",
        "NaN",
    ),
    (
        "not-probabilities",
        "class M:\n    def predict_proba(self, x):\n"
        "        return np.ones((len(x), 3))\nmodel = M()",
        "output_invalid",
        "probabilities",
    ),
    (
        "exception",
        "model = None\nraise ValueError('no data today')",
        "exception",
        "ValueError: no data today",
    ),
    (
        "prints-megabytes",
        "print('x' * 5_000_000)\nmodel = None\nraise ValueError('after print')",
        "exception",
        "ValueError: after print",
    ),
    (
        "banned-grid",
        "from sklearn.model_selection import GridSearchCV\nmodel = GridSearchCV(None, {})",
        "banned_construct",
        "GridSearchCV(",
    ),
    (
        "banned-svc",
        "from sklearn.svm import SVC\nmodel = SVC(probability=True)",
        "banned_construct",
        "SVC(",
    ),
]


@pytest.mark.parametrize("case,code,category,needle", BAD_CODE, ids=[c[0] for c in BAD_CODE])
def test_bad_code_is_a_failed_step(case, code, category, needle):
    env = make("iris")
    env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step(code)
    assert info["failure_category"] == category, info["failure_message"]
    assert needle in info["failure_message"]
    assert reward == -1.0 and not terminated and not truncated
    assert info["split_aucs"] == [] and info["action_valid"] is True
    assert "previous attempt failed" in observation and needle in observation
    assert env.observation_space.contains(observation) and len(observation) < 8000


def test_env_stays_usable_after_failures():
    env = make("iris")
    env.reset(seed=0)
    categories = []
    for code in (
        "model = bytearray(3 * 1024 ** 3)",
        "import os\nos._exit(3)\nmodel = None",
        "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\nmodel = None",
    ):
        *_, info = env.step(code)
        categories.append(info["failure_category"])
        assert info["failure_message"]
    assert categories[0] == "memory_exceeded"
    assert set(categories[1:]) <= {"exception", "sandbox_error"}, categories
    _, reward, terminated, _, info = env.step(GOOD_BODY)
    assert terminated and 0.5 < reward <= 1.0, info["failure_message"]


def test_hanging_code_times_out():
    env = make("iris", limits=Limits(wall_time_s=3.0))
    env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step(
        "model = None\nwhile True:\n    pass"
    )
    assert info["failure_category"] == "timeout" and "timed out" in info["failure_message"]
    assert reward == -1.0 and not terminated and "timed out" in observation


def test_printing_megabytes_does_not_reach_the_observation():
    env = make("iris")
    env.reset(seed=0)
    observation, reward, terminated, _, info = env.step("print('y' * 3_000_000)\n" + LOGISTIC)
    assert terminated and reward > 0.5
    assert "yyyy" not in observation and len(info["failure_message"]) == 0


def test_sandbox_hides_host_secrets(tmp_path, monkeypatch):
    secret = "s3cr3t-7f1d2c"
    monkeypatch.setenv("DSC_TEST_SECRET", secret)
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text(secret)
    env = make("iris")
    env.reset(seed=0)
    for attack in (
        "import os\nmodel = None\nraise RuntimeError(repr(os.environ.get('DSC_TEST_SECRET')))",
        f"model = None\nraise RuntimeError(open({str(secret_file)!r}).read())",
    ):
        observation, reward, _, _, info = env.step(attack)
        assert reward == -1.0 and info["failure_category"] == "exception"
        assert secret not in observation and secret not in info["failure_message"]


def test_banned_list_is_configurable():
    env = make("iris", banned=())
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(
        "from sklearn.svm import SVC\nmodel = SVC(probability=True, random_state=0)\n"
        "model.fit(x_train, y_train)"
    )
    assert terminated and reward > 0.5, info["failure_message"]


def test_truncated_after_five_attempts():
    env = make("iris")
    env.reset(seed=0)
    for attempt in range(1, 6):
        observation, reward, terminated, truncated, info = env.step("pass")
        assert reward == -1.0 and not terminated and info["attempt"] == attempt
        assert truncated == (attempt == 5)
    assert "previous attempt failed" in observation


# -- actions: bodies, full definitions, trailing returns ------------------------------------


@pytest.mark.parametrize(
    "action",
    [
        # completion style: first line unindented, the rest indented, a dangling `return`
        GOOD_BODY,
        # a plain dedented body ending with the template's own `return model`
        "from sklearn.naive_bayes import GaussianNB\nmodel = GaussianNB().fit(x_train, y_train)\n"
        "return model\n",
        # a whole definition with imports before it
        "from sklearn.naive_bayes import GaussianNB\n\n\n"
        "def build_model(x_train: np.ndarray, y_train: np.ndarray):\n"
        "    clf = GaussianNB()\n    clf.fit(x_train, y_train)\n    return clf\n",
        # an early return of another name
        "from sklearn.naive_bayes import GaussianNB\nclf = GaussianNB().fit(x_train, y_train)\n"
        "return clf",
    ],
    ids=["completion", "return-model", "full-def", "return-clf"],
)
def test_accepted_action_forms(action):
    env = make("iris")
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(action)
    assert terminated and reward > 0.5, info["failure_message"]


# -- prompts --------------------------------------------------------------------------------


def test_prompts_are_plain_ascii_without_fim_tokens():
    env = make("wine")
    observation, _ = env.reset(seed=0)
    assert "<PRE>" not in observation and "\u2581" not in observation
    assert '"Wine"' in observation and "(178, 13)" in observation
    assert "def build_model(x_train: np.ndarray, y_train: np.ndarray):" in observation
    assert "GridSearchCV(" in observation and "SVC(" in observation
    assert all(32 <= ord(c) < 127 or c in "\n\t" for c in observation)
    failed, *_ = env.step("model = (")
    assert "SyntaxError" in failed and "model = (" in failed and '"Wine"' in failed

    infill = make("wine", prompt_format="codellama-infill")
    observation, _ = infill.reset(seed=0)
    assert observation.startswith("<PRE> ") and observation.endswith(" <MID>")
    assert "<SUF>" in observation and "return model" in observation.split("<SUF>")[1]
    failed, *_ = infill.step("model = (")
    assert failed.startswith("<PRE> ") and "SyntaxError" in failed and failed.endswith("<MID>")


def test_bad_arguments_fail_at_construction():
    with pytest.raises(ValueError, match="prompt_format"):
        DataSciCodingEnv("iris", prompt_format="chatml")
    with pytest.raises(ValueError, match="protocol"):
        DataSciCodingEnv("iris", protocol="kfold")
    with pytest.raises(KeyError, match="unknown dataset"):
        DataSciCodingEnv("mnist")


# -- holdout protocol -----------------------------------------------------------------------


def test_holdout_rows_never_reach_the_per_step_reward():
    from sklearn.metrics import roc_auc_score
    from sklearn.naive_bayes import GaussianNB

    backend = RecordingBackend()
    env = make("breast-cancer", sandbox=backend, protocol="holdout")
    env.reset(seed=0)
    _, failed_reward, _, _, info = env.step("pass")
    assert info["holdout_auc"] is None
    _, reward, terminated, _, info = env.step(GOOD_BODY)
    assert terminated and 0.5 < reward <= 1.0 and 0.5 < info["holdout_auc"] <= 1.0
    assert len(backend.calls) == 6  # the attempt's 5 splits, then the final held-out scoring

    grader = env.unwrapped.grader
    data = ds.load_dataset("breast-cancer")
    held = {data.X[r].tobytes() for r in grader.holdout_rows}
    assert len(grader.holdout_rows) == round(0.2 * len(data.y))
    step_rows = {
        row.tobytes()
        for call in backend.calls[:5]
        for k, v in call.items()
        if k.startswith("x_")
        for row in v
    }
    assert not held & step_rows
    final = backend.calls[5]
    assert set(final) == {"x_train", "y_train", "x_test"}
    np.testing.assert_array_equal(final["x_test"], data.X[grader.holdout_rows])
    model = GaussianNB().fit(data.X[grader.dev_rows], data.y[grader.dev_rows])
    expected = roc_auc_score(
        data.y[grader.holdout_rows], model.predict_proba(data.X[grader.holdout_rows])[:, 1]
    )
    assert info["holdout_auc"] == pytest.approx(expected, abs=1e-9)


def test_paper_protocol_reports_no_holdout():
    env = make("iris")
    env.reset(seed=0)
    *_, info = env.step(GOOD_BODY)
    assert info["holdout_auc"] is None


# -- oracle, vector envs, docker ------------------------------------------------------------


@pytest.mark.parametrize("name", [s.name for s in ds.DATASETS.values() if s.offline])
def test_oracle_solves_every_offline_dataset(name):
    env = make(name)
    observation, info = env.reset(seed=0)
    agent = make_oracle(env)
    _, reward, terminated, _, info = env.step(agent.act(observation, info["available_actions"]))
    # the generated tables are built so that a linear model (the oracle's) stays near chance
    floor = 0.0 if isinstance(ds.get_spec(name).source, ds.GeneratedSource) else 0.5
    assert terminated and reward > floor, info["failure_message"]


def test_oracle_solves_a_cached_network_dataset(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    populate_cache(cache, monkeypatch, names={"kidney-stone"})
    env = make("kidney-stone", cache_dir=str(cache))
    observation, info = env.reset(seed=0)
    _, reward, terminated, _, info = env.step(make_oracle(env).act(observation, None))
    assert terminated and reward > 0.0, info["failure_message"]


def _vector_env_factory():
    # The `module:` form registers the ids in the worker process whatever its start method.
    return gym.make("agentbench_poad:DataSciCoding-iris-v0", sandbox="process", limits=LIMITS)


def test_async_vector_env_runs_four_envs(monkeypatch):
    monkeypatch.setenv("AGENTBENCH_SANDBOX_CONCURRENCY", "2")
    envs = gym.vector.AsyncVectorEnv([_vector_env_factory] * 4, shared_memory=False)
    try:
        observations, infos = envs.reset(seed=0)
        assert len(observations) == 4 and all("Iris" in o for o in observations)
        actions = (ORACLE_BODIES["logistic"], "pass", ORACLE_BODIES["logistic"], "model = (")
        observations, rewards, terminated, truncated, infos = envs.step(actions)
        assert rewards[0] == rewards[2] > 0.5 and rewards[1] == rewards[3] == -1.0
        assert list(terminated) == [True, False, True, False]
        assert list(infos["failure_category"]) == [None, "no_model", None, "syntax_error"]
    finally:
        envs.close()


@pytest.mark.docker
def test_docker_backend_scores_like_process(sandbox_image):
    rewards = {}
    for sandbox in ("docker", "process"):
        env = make("iris", sandbox=sandbox)
        env.reset(seed=0)
        _, rewards[sandbox], terminated, _, info = env.step(LOGISTIC)
        assert terminated and info["sandbox_backend"] == sandbox, info["failure_message"]
    assert rewards["docker"] == pytest.approx(rewards["process"], abs=1e-9)


@pytest.mark.docker
def test_docker_backend_seeds_the_global_random_state(sandbox_image):
    rewards = []
    for _ in range(2):
        env = make("gen-xor", sandbox="docker")
        env.reset(seed=0)
        _, reward, terminated, _, info = env.step(UNSEEDED)
        assert terminated and info["sandbox_backend"] == "docker", info["failure_message"]
        rewards.append(reward)
    assert rewards[0] == rewards[1]


def test_scripted_bodies_other_than_the_default_are_other_rows():
    """The default body is the board's "scripted" anchor; another body gets a name of its own,
    so its record (e.g. a study's default-classifier baseline) never replaces the anchor."""
    from agentbench_poad.baselines.oracle_datascicoding import ORACLE_BODIES, DataSciCodingOracle
    from agentbench_poad.leaderboard.records import ANCHOR_AGENTS

    assert DataSciCodingOracle().name == "scripted" in ANCHOR_AGENTS
    assert DataSciCodingOracle("forest").name == "scripted-forest" not in ANCHOR_AGENTS
    assert DataSciCodingOracle("forest").body == ORACLE_BODIES["forest"]
    custom = DataSciCodingOracle("model = 1")
    assert custom.name == "scripted-custom" and custom.body == "model = 1"
