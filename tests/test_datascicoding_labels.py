"""DataSciCoding: no program is handed a label it is scored on, and honest programs score as before.

The grader runs each split in a sandbox call of its own holding that split's training data and
test features only (issue 64). Here:

* a hostile program that looks every label up that it can reach (its callers' frames and
  globals, ``gc``, every file of its working dir, input and output dirs, ``/tmp``, ``/dev/shm``,
  ``/proc``, and what earlier splits left behind in files, System V shared memory, POSIX
  message queues, the kernel keyring or a daemon on an abstract socket) scores exactly chance
  on a table with random labels, on the process backend and on docker; the same program reads
  nearly every label when one call holds all splits (the grading before issue 64, kept as a
  plain reference in ``tests/_dsc_reference.py``), so the test can fail;
* honest programs get bit for bit the grade of the one-call grading (rewards, split AUCs,
  failure categories and messages), and the programs of the committed DataSciCoding records
  replay to their recorded scores (on docker, where they were graded);
* the attempt's wall-clock limit is shared by its splits' runs.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import numpy as np
import pytest

from agentbench_poad.environments.datascicoding import datasets as ds
from agentbench_poad.environments.datascicoding.grader import Grader
from agentbench_poad.environments.datascicoding.prompts import parse_action
from agentbench_poad.sandbox import Limits, get_backend
from tests._dsc_reference import one_call_grade

LIMITS = Limits(wall_time_s=120.0, memory_mb=1024)
RESULTS = Path(__file__).resolve().parents[1] / "leaderboard" / "results"

#: Looks labels up by every route the sandbox offers; predicts the label where it found one
#: and 0.5 elsewhere, so with nothing found its AUC is exactly 0.5. Prints one report per split.
HOSTILE = r"""
import ctypes, gc, glob, hashlib, json, os, socket, sys, time

TAG = "abp-leak-64"


def _fp(row):
    data = np.ascontiguousarray(row, dtype=np.float64).tobytes()
    return hashlib.blake2b(data, digest_size=8).digest()


def _encode(table):
    return b"".join(k + bytes([v & 0xFF]) for k, v in table.items())


def _decode(blob, table):
    for i in range(0, len(blob) - len(blob) % 9, 9):
        table.setdefault(bytes(blob[i:i + 8]), blob[i + 8])
    return len(blob) // 9


class Spy:
    def __init__(self, x_train, y_train):
        self.d = x_train.shape[1]
        self.table = {}
        self.report = {}
        self.mine = {_fp(r): int(v) for r, v in zip(x_train, y_train)}
        self.memory()
        self.files()
        self.channels()
        self.classes_ = np.array([0, 1])

    # -- pairing features with labels by the names they go by ------------------------------
    def learn_named(self, named):
        found = 0
        for key, x in list(named.items()):
            if not isinstance(key, str) or not key[:1] in "xX":
                continue
            y = named.get("y" + key[1:])
            if (isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and x.ndim == 2
                    and x.shape[1] == self.d and y.ndim == 1 and len(y) == len(x)):
                for row, label in zip(x, y):
                    self.table.setdefault(_fp(row), int(label))
                found += 1
        return found

    def memory(self):
        pairs, frame, depth = 0, sys._getframe(), 0
        while frame is not None:
            for space in (frame.f_locals, frame.f_globals):
                pairs += self.learn_named(space)
                for value in list(space.values()):
                    if isinstance(value, dict):
                        pairs += self.learn_named(value)
            frame, depth = frame.f_back, depth + 1
        for module in list(sys.modules.values()):
            pairs += self.learn_named(getattr(module, "__dict__", {}) or {})
        objects = 0
        for obj in gc.get_objects():
            if isinstance(obj, dict):
                objects += 1
                pairs += self.learn_named(obj)
        self.report.update(frames=depth, gc_dicts=objects, memory_pairs=pairs)

    # -- files ---------------------------------------------------------------------------
    def files(self):
        roots = {os.getcwd(), "/tmp", "/var/tmp", "/dev/shm", os.environ.get("HOME", "/tmp"),
                 "/sbx", *sys.argv[1:3], *glob.glob("/tmp/abp-sbx-*")}
        read, pairs = 0, 0
        for root in sorted(r for r in roots if r and os.path.isdir(r)):
            for folder, _, names in os.walk(root):
                arrays = {}
                for name in names:
                    path = os.path.join(folder, name)
                    try:
                        if not os.path.isfile(path) or os.path.getsize(path) > 64 << 20:
                            continue
                        with open(path, "rb") as fh:
                            data = fh.read()
                    except OSError:
                        continue
                    read += 1
                    if TAG in name:
                        _decode(data, self.table)
                    if data[:6] == b"\x93NUMPY":
                        try:
                            arrays[name.rsplit(".", 1)[0]] = np.load(path, allow_pickle=False)
                        except Exception:
                            pass
                pairs += self.learn_named(arrays)
        for path in glob.glob("/proc/self/*") + glob.glob("/proc/self/fd/*") + glob.glob(
            "/proc/[0-9]*/cmdline"
        ) + glob.glob("/proc/[0-9]*/environ"):
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
                try:
                    os.read(fd, 1 << 20)
                    read += 1
                finally:
                    os.close(fd)
            except OSError:
                pass
        self.report.update(files_read=read, file_pairs=pairs)

    # -- what earlier splits left, then what this one leaves ---------------------------------
    def channels(self):
        before = len(self.table)
        mine = _encode(self.mine)
        report = {}
        for folder in ("/tmp", "/var/tmp", "/dev/shm", os.environ.get("HOME", "/tmp"),
                       os.getcwd()):
            try:
                with open(os.path.join(folder, TAG), "ab") as fh:
                    fh.write(mine)
                report["file"] = "written"
            except OSError as exc:
                report.setdefault("file", exc.strerror)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        libc.syscall.restype = ctypes.c_long
        # System V shared memory under a fixed key
        size = 1 << 20
        shm = libc.shmget(0x64ABB, size, 0o1666)
        if shm >= 0:
            addr = libc.shmat(shm, None, 0)
            if addr not in (None, ctypes.c_void_p(-1).value):
                used = int.from_bytes(ctypes.string_at(addr, 8), "little")
                _decode(ctypes.string_at(addr + 8, min(used, size - 8)), self.table)
                blob = mine[: size - 8 - used]
                ctypes.memmove(addr + 8 + used, blob, len(blob))
                ctypes.memmove(addr, (used + len(blob)).to_bytes(8, "little"), 8)
                report["shm"] = "read %d bytes" % used
        else:
            report["shm"] = os.strerror(ctypes.get_errno())
        # the kernel keyring of this uid
        key = libc.syscall(249, b"user", TAG.encode(), None, ctypes.c_long(0))
        if key > 0:
            buf = ctypes.create_string_buffer(1 << 16)
            n = libc.syscall(250, 11, ctypes.c_long(key), buf, ctypes.c_long(1 << 16))
            _decode(buf.raw[: max(n, 0)], self.table)
        added = libc.syscall(248, b"user", TAG.encode(), mine[:32000], ctypes.c_long(
            len(mine[:32000])), ctypes.c_long(-4))
        report["keyring"] = "added" if added > 0 else os.strerror(ctypes.get_errno())
        # a POSIX message queue
        try:
            rt = ctypes.CDLL("librt.so.1", use_errno=True)
            mq = rt.mq_open(b"/" + TAG.encode(), os.O_RDWR | os.O_CREAT | os.O_NONBLOCK,
                            0o666, None)
            if mq >= 0:
                buf = ctypes.create_string_buffer(1 << 16)
                while True:
                    n = rt.mq_receive(mq, buf, ctypes.c_size_t(1 << 16), None)
                    if n < 0:
                        break
                    _decode(buf.raw[:n], self.table)
                for i in range(0, len(mine), 8190):
                    rt.mq_send(mq, mine[i:i + 8190], ctypes.c_size_t(len(mine[i:i + 8190])), 0)
                report["mqueue"] = "opened"
            else:
                report["mqueue"] = os.strerror(ctypes.get_errno())
        except OSError as exc:
            report["mqueue"] = str(exc)
        # a daemon left behind, serving on an abstract unix socket
        address = "\0" + TAG
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                client.settimeout(2)
                client.connect(address)
                data = b""
                while chunk := client.recv(1 << 16):
                    data += chunk
                _decode(data, self.table)
                report["daemon"] = "read %d bytes" % len(data)
        except OSError as exc:
            report["daemon"] = exc.strerror or str(exc)
        if os.fork() == 0:  # the daemon: detach and serve every label known here
            os.setsid()
            if os.fork() == 0:
                try:
                    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    server.bind(address)
                    server.listen(8)
                    blob = _encode({**self.table, **self.mine})
                    while True:
                        conn, _ = server.accept()
                        conn.sendall(blob)
                        conn.close()
                finally:
                    os._exit(0)
            os._exit(0)
        time.sleep(0.2)
        report["channel_rows"] = len(self.table) - before
        self.report.update(report)

    def predict_proba(self, x_test):
        self.memory()  # the caller's frames, now that it is scoring
        p = np.full(len(x_test), 0.5)
        hits = 0
        for j, row in enumerate(x_test):
            label = self.table.get(_fp(row))
            if label is not None:
                p[j], hits = float(label), hits + 1
        print("HOSTILE " + json.dumps({**self.report, "hits": hits, "rows": len(x_test)}),
              flush=True)
        return np.column_stack([1.0 - p, p])


def build_model(x_train, y_train):
    model = Spy(x_train, y_train)
    return model
"""


def _reports(stdout: str) -> list[dict]:
    return [
        json.loads(line[len("HOSTILE ") :]) for line in stdout.splitlines() if "HOSTILE " in line
    ]


@pytest.fixture(params=["process", pytest.param("docker", marks=pytest.mark.docker)])
def sandbox(request: pytest.FixtureRequest):
    backend = get_backend(request.param)
    if getattr(backend, "mode", None) == "none":
        backend.close()
        pytest.skip(
            "the process backend runs without namespaces here (rlimits only): the code runs as "
            "this user beside the grader, so nothing keeps it from the grader's memory"
        )
    yield backend
    backend.close()


def test_a_hostile_program_recovers_no_scored_label(sandbox) -> None:
    # random features and labels from an unpredictable seed: chance is all there is to learn,
    # and the sandbox cannot regenerate the table
    rng = np.random.default_rng(secrets.randbits(64))
    X = rng.normal(size=(2000, 6))
    y = rng.integers(0, 2, size=2000)
    grader = Grader(X, y, 2, sandbox=sandbox, limits=LIMITS)
    grade = grader.grade(parse_action(HOSTILE))
    assert grade.ok, grade.message
    reports = _reports(grade.stdout_tail)
    assert len(reports) == 5, grade.stdout_tail
    for report in reports:
        # every route ran (so a pass is not a crash in disguise) and found no scored row
        assert report["frames"] >= 3 and report["gc_dicts"] > 100 and report["files_read"] > 3
        assert report["memory_pairs"] >= 1  # its own training data, found through the frames
        assert {"file", "shm", "keyring", "mqueue", "daemon"} <= set(report)
        assert report["channel_rows"] == 0, report
        assert report["hits"] == 0, report
    assert grade.split_aucs == [0.5] * 5 and grade.reward == 0.5

    # The same program, when one call holds every split (the grading before issue 64), finds
    # the labels of nearly every test row among the other splits' training labels.
    before = one_call_grade(grader, HOSTILE)
    assert before.category is None, before.message
    assert before.reward > 0.9


HONEST = {
    "logistic": (
        "from sklearn.linear_model import LogisticRegression\n"
        "model = LogisticRegression(max_iter=500).fit(x_train, y_train)"
    ),
    "forest-unseeded": (
        "from sklearn.ensemble import RandomForestClassifier\n"
        "model = RandomForestClassifier(n_estimators=15).fit(x_train, y_train)"
    ),
    "mlp-unseeded": (
        "from sklearn.neural_network import MLPClassifier\n"
        "model = MLPClassifier(hidden_layer_sizes=(16,), max_iter=60).fit(x_train, y_train)"
    ),
    "boosting": (
        "from sklearn.ensemble import HistGradientBoostingClassifier\n"
        "model = HistGradientBoostingClassifier(max_iter=30).fit(x_train, y_train)"
    ),
    "python-random": (
        "import random\n"
        "from sklearn.neighbors import KNeighborsClassifier\n"
        "model = KNeighborsClassifier(n_neighbors=random.choice([3, 5, 9])).fit(x_train, y_train)"
    ),
}
BROKEN = {
    "returns-none": "model = None",
    "wrong-shape": (
        "class M:\n    def predict_proba(self, x):\n"
        "        return np.ones((len(x) + 1, 2)) / 2\nmodel = M()"
    ),
    "nan": (
        "class M:\n    def predict_proba(self, x):\n"
        "        return np.full((len(x), 2), np.nan)\nmodel = M()"
    ),
    # split 0 returns a bad shape, split 1 raises: one process would have reported the raise
    "bad-shape-then-raise": (
        "import random\n"
        "class M:\n    def predict_proba(self, x):\n"
        "        return np.ones((len(x), 7))\n"
        "if random.random() != random.Random(0).random():\n"
        "    raise ValueError('not split 0')\n"
        "model = M()"
    ),
    "not-probabilities": (
        "class M:\n    def predict_proba(self, x):\n"
        "        return np.ones((len(x), 2)) * 3\nmodel = M()"
    ),
}


def _compare(grader: Grader, action: str) -> None:
    from agentbench_poad.core import to_text

    new = grader.grade(parse_action(action))
    old = one_call_grade(grader, action)
    assert (new.category, to_text(new.message, 4000)) == (old.category, to_text(old.message, 4000))
    assert new.reward == old.reward  # bit for bit
    assert new.split_aucs == old.split_aucs


@pytest.mark.parametrize("name", ["python-random", "forest-unseeded", "bad-shape-then-raise"])
def test_grades_equal_the_one_call_grading(name: str) -> None:
    data = ds.load_dataset("gen-xor")
    grader = Grader(data.X, data.y, data.n_classes, sandbox="process", limits=LIMITS)
    _compare(grader, {**HONEST, **BROKEN}[name])


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["iris", "breast-cancer", "gen-moons"])
@pytest.mark.parametrize("name", [*HONEST, *BROKEN])
def test_grades_equal_the_one_call_grading_everywhere(dataset: str, name: str) -> None:
    data = ds.load_dataset(dataset)
    grader = Grader(data.X, data.y, data.n_classes, sandbox="process", limits=LIMITS)
    _compare(grader, {**HONEST, **BROKEN}[name])


def _recorded_programs() -> list[tuple[str, str, float]]:
    """``(env id, final code, recorded score)`` of the successful episodes of the committed
    DataSciCoding records, one per distinct program."""
    seen: dict[tuple[str, str], float] = {}
    for path in sorted(RESULTS.glob("DataSciCoding-*.json")):
        record = json.loads(path.read_text())
        for seed in record["scores"]["per_seed"]:
            for episode in seed.get("episodes", []):
                if episode.get("success") and episode.get("final_code"):
                    seen.setdefault((record["env"]["id"], episode["final_code"]), episode["score"])
    return [(env_id, code, score) for (env_id, code), score in seen.items()]


def _replays(env_id: str, code: str, score: float) -> None:
    import gymnasium as gym

    import agentbench_poad  # noqa: F401  (registers the ids)

    # the records were graded in the docker image: its scikit-learn is not necessarily the
    # interpreter's, and another version can move an AUC in its last digits
    env = gym.make(env_id, sandbox="docker", limits=LIMITS)
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(code)
    assert terminated, info["failure_message"]
    assert reward == score  # bit for bit what the record holds


@pytest.mark.docker
def test_recorded_programs_replay_to_their_scores() -> None:
    programs = _recorded_programs()
    assert len(programs) > 100  # the board's six study records and the scripted rows
    # the first program recorded on each of three datasets (two of the study's, a scripted row)
    chosen = {env_id: (env_id, code, score) for env_id, code, score in reversed(programs)}
    for env_id in (
        "DataSciCoding-gen-xor-v0",
        "DataSciCoding-iris-v0",
        "DataSciCoding-breast-cancer-v0",
    ):
        _replays(*chosen[env_id])


@pytest.mark.slow
@pytest.mark.docker
def test_every_recorded_program_replays_to_its_score() -> None:
    for program in _recorded_programs():
        _replays(*program)


def test_the_wall_time_limit_is_the_attempts() -> None:
    """Five splits of 1.5 s each do not fit in a 5 s attempt, though each fits on its own."""
    data = ds.load_dataset("iris")
    slow = "import time\ntime.sleep(1.5)\nfrom sklearn.naive_bayes import GaussianNB\n" + (
        "model = GaussianNB().fit(x_train, y_train)"
    )
    grader = Grader(
        data.X, data.y, data.n_classes, sandbox="process", limits=Limits(wall_time_s=5.0)
    )
    grade = grader.grade(parse_action(slow))
    assert grade.category == "timeout" and grade.message == "timed out after 5 s"
    assert 5.0 <= grade.runtime_s < 15.0  # the kill, on a loaded machine, is not instant
    roomy = Grader(
        data.X, data.y, data.n_classes, sandbox="process", limits=Limits(wall_time_s=60.0)
    )
    assert roomy.grade(parse_action(slow)).ok
