"""Strict records: content hashes, recomputed numbers, exact replays, the runs root and the
tamper cases of issue 28 (edited summary, flipped episode, swapped adapter, missing weight
file, dirty tree): each a clear error naming what differs, and nothing on the board changes."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbench_poad.cli import main
from agentbench_poad.leaderboard.provenance import (
    DIGEST_NAME,
    HashMismatch,
    check_hashes,
    tensor_digest,
)
from agentbench_poad.leaderboard.recompute import DerivedMismatch, check_derived
from agentbench_poad.leaderboard.records import (
    DEFAULT_STORE,
    HISTORY_DIR,
    DirtyTree,
    RecordError,
    add_record,
    iter_record_files,
    read_record,
    summarize_seeds,
    write_record,
)
from agentbench_poad.leaderboard.runs import (
    RUNS_ENV_VAR,
    RunsNotFound,
    absolute_runs,
    board_checkout,
    check_board_runs,
    checkout_root,
    resolve_run,
    runs_root,
    set_runs_root,
)
from agentbench_poad.leaderboard.verify import verify_record

ENV = "CaseStudy-Microwave-v0"


# -- a trained record of a tiny model, with its runs in a runs root -----------------------------
@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model):
    """Two tiny POAD runs (seeds 0, 1) in a runs root, a private copy of the base model, and the
    greedy record made from them: ``(record, runs_root, model_dir)``."""
    from agentbench_poad.baselines import get_algorithm
    from agentbench_poad.leaderboard.from_run import record_from_runs
    from agentbench_poad.rl.trainer import train

    root = tmp_path_factory.mktemp("runs_root")
    model = tmp_path_factory.mktemp("model") / "tiny"
    shutil.copytree(tiny_model, model)
    mp = pytest.MonkeyPatch()
    mp.setenv(RUNS_ENV_VAR, str(root))
    try:
        runs = [
            train(
                get_algorithm("poad"),
                ENV,
                str(model),
                total_steps=4,
                seed=seed,
                out=root / "study" / f"seed{seed}",
                progress=False,
                overrides=dict(
                    num_envs=2,
                    rollout_length=2,
                    epochs=1,
                    num_minibatches=1,
                    lr=5e-2,
                    critic_hidden_sizes=(8,),
                    eval_every=1,
                    eval_episodes=2,
                    target_kl=None,
                ),
            )
            for seed in (0, 1)
        ]
        record = record_from_runs(runs, episodes=2)
    finally:
        mp.undo()
    return record, root, model


@pytest.fixture
def runs_env(trained, monkeypatch):
    record, root, model = trained
    monkeypatch.setenv(RUNS_ENV_VAR, str(root))
    return copy.deepcopy(record), root, model


def test_a_trained_record_names_its_runs_relative_to_the_runs_root_and_hashes_them(runs_env):
    record, root, model = runs_env
    runs = record["config"]["agent_kwargs"]["runs"]
    assert runs == {"0": "study/seed0", "1": "study/seed1"}
    assert record["training"]["runs"] == ["study/seed0", "study/seed1"]
    weights = record["model"]["base_weights"]
    assert weights["digest"] == DIGEST_NAME and weights["files"] == ["model.safetensors"]
    assert weights["sha256"] == tensor_digest([model / "model.safetensors"])
    for seed, run in runs.items():
        entry = record["model"]["adapters"][seed]
        assert entry["run"] == run
        folder = root / run / "checkpoints" / entry["checkpoint"] / "adapter"
        for name, sha in entry["files"].items():
            assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == sha
    assert "mean_discounted_return" in record["scores"]  # beside scores.mean (None: no γ here)
    assert check_hashes(record) == {s: root / r for s, r in runs.items()}


def test_a_greedy_record_replays_every_seed_exactly(runs_env):
    record, _, _ = runs_env
    result = verify_record(record, episodes_per_seed=1)
    assert result.deterministic and result.hashes_checked
    assert result.reproduced, result.summary()
    assert result.sampled == 2 and result.exact_matches == 2
    assert {row["seed"] for row in result.episodes} == {0, 1}  # at least one episode per seed
    assert result.derived_checked > 10


def test_a_sampled_record_is_judged_by_a_tolerance_derived_from_its_episodes(runs_env):
    import math

    from agentbench_poad.leaderboard.from_run import record_from_runs

    record, root, _ = runs_env
    sampled = record_from_runs(
        [root / "study/seed0", root / "study/seed1"], episodes=3, greedy=False
    )
    assert sampled["protocol"]["greedy"] is False
    result = verify_record(sampled, episodes_per_seed=2)
    assert not result.deterministic and result.reproduced, result.summary()
    scores = [e["score"] for s in sampled["scores"]["per_seed"] for e in s["episodes"]]
    mean = sum(scores) / len(scores)
    sd = math.sqrt(sum((v - mean) ** 2 for v in scores) / (len(scores) - 1))
    assert result.tolerance == pytest.approx(max(3 * math.sqrt(2) * sd / math.sqrt(4), 1e-9))
    sampled["scores"]["stderr"] = 100.0  # a stated field never widens the tolerance ...
    with pytest.raises(DerivedMismatch, match="scores.stderr"):  # ... it is recomputed
        verify_record(sampled, episodes_per_seed=2)


def test_an_installed_wheel_without_runs_names_the_fix(runs_env, monkeypatch):
    import agentbench_poad.leaderboard.runs as runs_module

    record, _, _ = runs_env
    monkeypatch.delenv(RUNS_ENV_VAR)
    monkeypatch.setattr(runs_module, "checkout_root", lambda: None)  # as in site-packages
    with pytest.raises(RunsNotFound, match="wheel ships records, not runs.*clone the repository"):
        verify_record(record, episodes_per_seed=1)


def _assert_board_unchanged(store, before):
    assert {p.name: p.read_bytes() for p in store.glob("*.json")} == before


def _board(tmp_path, record):
    store = tmp_path / "board"
    add_record(record, store)
    return store, {p.name: p.read_bytes() for p in store.glob("*.json")}


@pytest.mark.parametrize(
    "field, edit",
    [
        ("scores.mean", lambda r: r["scores"].__setitem__("mean", r["scores"]["mean"] + 0.25)),
        ("scores.stderr", lambda r: r["scores"].__setitem__("stderr", 0.5)),
        (
            "scores.success_rate",
            lambda r: r["scores"].__setitem__("success_rate", 1.0 - r["scores"]["success_rate"]),
        ),
        (
            "scores.per_seed[1].score",
            lambda r: r["scores"]["per_seed"][1].__setitem__("score", 9.0),
        ),
        (
            "scores.mean_discounted_return",
            lambda r: r["scores"].__setitem__("mean_discounted_return", 7.0),
        ),
        (
            "learning_curve.points[0].mean",
            lambda r: r["learning_curve"]["points"][0].__setitem__("mean", 3.0),
        ),
    ],
)
def test_an_edited_summary_fails_verify_naming_the_field(runs_env, tmp_path, capsys, field, edit):
    record, _, _ = runs_env
    edit(record)
    with pytest.raises(DerivedMismatch, match=field.replace("[", r"\[").replace("]", r"\]")):
        verify_record(record, episodes_per_seed=1)
    store, before = _board(tmp_path, record)
    assert main(["leaderboard", "--store", str(store), "verify", record["record_id"]]) == 2
    assert field in capsys.readouterr().err
    _assert_board_unchanged(store, before)


def test_a_flipped_episode_with_a_consistent_summary_fails_the_replay(runs_env, tmp_path, capsys):
    record, _, _ = runs_env
    seed = record["scores"]["per_seed"][0]
    episode = seed["episodes"][0]
    episode["return"] = episode["score"] = episode["return"] + 1.0  # claims a point it never won
    episode["success"] = not episode["success"]
    seed["score"] = seed["mean_return"] = float(np.mean([e["return"] for e in seed["episodes"]]))
    seed["success_rate"] = float(np.mean([e["success"] for e in seed["episodes"]]))
    record["scores"].update(summarize_seeds(record["scores"]["per_seed"]))
    check_derived(record)  # the forgery is self-consistent ...
    result = verify_record(record, episodes_per_seed=1)
    assert not result.reproduced  # ... but the agent does not play it
    assert result.mismatches and result.mismatches[0].startswith("seed 0 episode 0: score")
    assert "success" in result.mismatches[0]
    assert "NOT REPRODUCED" in result.summary() and "differs: seed 0 episode 0" in result.summary()
    store, before = _board(tmp_path, record)
    assert main(["leaderboard", "--store", str(store), "verify", record["record_id"]]) == 1
    assert "differs: seed 0 episode 0" in capsys.readouterr().out
    _assert_board_unchanged(store, before)


def test_a_swapped_adapter_file_fails_before_loading(runs_env, tmp_path):
    record, root, _ = runs_env
    entry = record["model"]["adapters"]["1"]
    target = root / entry["run"] / "checkpoints" / entry["checkpoint"] / "adapter"
    other = record["model"]["adapters"]["0"]
    source = root / other["run"] / "checkpoints" / other["checkpoint"] / "adapter"
    saved = (target / "adapter_model.safetensors").read_bytes()
    try:
        shutil.copyfile(source / "adapter_model.safetensors", target / "adapter_model.safetensors")
        with pytest.raises(
            HashMismatch, match=r"seed 1's adapter file .*adapter_model\.safetensors has sha256"
        ):
            verify_record(record, episodes_per_seed=1)
    finally:
        (target / "adapter_model.safetensors").write_bytes(saved)
    check_hashes(record)  # restored


def test_a_missing_weight_file_fails_naming_it(runs_env, tmp_path):
    record, root, model = runs_env
    broken = tmp_path / "tiny"
    shutil.copytree(model, broken)
    (broken / "model.safetensors").unlink()
    record["model"]["base"] = str(broken)
    with pytest.raises(HashMismatch, match="no .*safetensors.*weight file is missing"):
        verify_record(record, episodes_per_seed=1)
    entry = record["model"]["adapters"]["0"]
    adapter = root / entry["run"] / "checkpoints" / entry["checkpoint"] / "adapter"
    record["model"]["base"] = str(model)
    moved = tmp_path / "moved.safetensors"
    shutil.move(adapter / "adapter_model.safetensors", moved)
    try:
        with pytest.raises(HashMismatch, match="seed 0's adapter file .* is missing"):
            verify_record(record, episodes_per_seed=1)
    finally:
        shutil.move(moved, adapter / "adapter_model.safetensors")


def test_changed_base_weights_fail_naming_both_digests(runs_env, tmp_path):
    record, _, _ = runs_env
    record["model"]["base_weights"]["sha256"] = "0" * 64
    with pytest.raises(HashMismatch, match="model.base_weights.sha256 is 0000"):
        verify_record(record, episodes_per_seed=1)
    del record["model"]["base_weights"]
    with pytest.raises(HashMismatch, match="leaderboard backfill"):
        verify_record(record, episodes_per_seed=1)


def test_a_record_from_a_dirty_tree_is_refused_by_add_unless_allowed(runs_env, tmp_path, capsys):
    record, _, _ = runs_env
    record["software"]["git_dirty"] = True
    path = tmp_path / "dirty.json"
    write_record(path, record)
    store = tmp_path / "board"
    assert main(["leaderboard", "--store", str(store), "add", str(path)]) == 2
    err = capsys.readouterr().err
    assert "uncommitted changes" in err and "--allow-dirty" in err
    assert not store.exists() or not list(store.glob("*.json"))  # nothing on the board changed
    with pytest.raises(DirtyTree):
        add_record(record, tmp_path / "other", allow_dirty=False)
    assert main(["leaderboard", "--store", str(store), "add", str(path), "--allow-dirty"]) == 0
    (added,) = store.glob("*.json")
    assert read_record(added)["software"]["dirty_allowed"] is True


def test_a_board_refuses_a_record_naming_its_runs_by_absolute_path(runs_env, tmp_path):
    record, root, _ = runs_env
    assert absolute_runs(record) == []  # made under the runs root: relative everywhere
    moved = copy.deepcopy(record)
    for seed, run in record["config"]["agent_kwargs"]["runs"].items():
        full = str(root.resolve() / run)
        moved["config"]["agent_kwargs"]["runs"][seed] = full
        moved["agent"]["kwargs"]["runs"][seed] = full
        moved["model"]["adapters"][seed]["run"] = full
    moved["training"]["runs"] = [str(root.resolve() / r) for r in record["training"]["runs"]]
    assert absolute_runs(moved) == sorted(moved["training"]["runs"])
    # a checkout's board (leaderboard/results beside pyproject.toml and agentbench_poad/)
    checkout = tmp_path / "clone"
    (checkout / "agentbench_poad").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("")
    board = checkout / "leaderboard" / "results"
    assert board_checkout(board) == checkout.resolve()
    with pytest.raises(RecordError, match="absolute path.*runs root"):
        add_record(moved, board)
    assert not board.exists() or not list(board.glob("*.json"))  # nothing written
    assert add_record(record, board).is_file()  # the relative record lands
    # any other folder is not a board: a private store keeps what the user gives it
    assert board_checkout(tmp_path / "mine") is None
    assert add_record(moved, tmp_path / "mine").is_file()


def test_a_study_writing_into_a_board_needs_its_runs_under_that_checkouts_runs(
    tmp_path, monkeypatch
):
    checkout = tmp_path / "clone"
    (checkout / "agentbench_poad").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("")
    board, runs = checkout / "leaderboard" / "results", checkout / "runs"
    inside, outside = runs / "study" / "seed0", tmp_path / "elsewhere" / "seed0"
    check_board_runs(tmp_path / "records", [outside])  # not a board: nothing to check
    monkeypatch.setenv(RUNS_ENV_VAR, str(runs))
    check_board_runs(board, [inside])  # the runs root is the checkout's runs/: fine
    with pytest.raises(RunsNotFound, match="lie outside"):
        check_board_runs(board, [inside, outside])
    # the runs root of another checkout (e.g. a second worktree) would make absolute paths
    monkeypatch.setenv(RUNS_ENV_VAR, str(tmp_path / "worktree" / "runs"))
    with pytest.raises(RunsNotFound, match=f"runs root in effect.*{RUNS_ENV_VAR}={runs}"):
        check_board_runs(board, [inside])


def test_runs_root_order_and_the_error_when_runs_are_absent(runs_env, tmp_path, monkeypatch):
    record, root, _ = runs_env
    assert runs_root() == root.resolve()  # $AGENTBENCH_POAD_RUNS
    empty = tmp_path / "empty"
    empty.mkdir()
    try:
        set_runs_root(empty)  # --runs wins over the variable
        assert runs_root() == empty.resolve()
        with pytest.raises(RunsNotFound, match=f"{RUNS_ENV_VAR}.*--runs DIR"):
            verify_record(record, episodes_per_seed=1)
    finally:
        set_runs_root(None)
    monkeypatch.setenv(RUNS_ENV_VAR, str(tmp_path / "nowhere"))
    with pytest.raises(RunsNotFound, match="does not exist"):
        resolve_run("study/seed0")
    monkeypatch.delenv(RUNS_ENV_VAR)
    assert checkout_root() is not None  # the tests run from a checkout ...
    assert runs_root() == checkout_root() / "runs"  # ... whose runs/ is the default
    # --runs on the command line
    store, _ = _board(tmp_path, record)
    assert (
        main(
            [
                "leaderboard",
                "--store",
                str(store),
                "--runs",
                str(root),
                "verify",
                record["record_id"],
                "--episodes-per-seed",
                "1",
            ]
        )
        == 0
    )


# -- the canonical weight digest -------------------------------------------------------------
def _write_safetensors(path, tensors):
    """A safetensors file written by hand (tensors: name -> float32 / int64 numpy array)."""
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
        dtype = {"float32": "F32", "int64": "I64"}[array.dtype.name]
        header[name] = {
            "dtype": dtype,
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


_arrays = st.dictionaries(
    st.text("abcdefgh.", min_size=1, max_size=6),
    st.tuples(
        st.lists(st.integers(1, 3), min_size=0, max_size=2),
        st.integers(0, 2**31 - 1),
        st.sampled_from(["float32", "int64"]),
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=30, deadline=None)
@given(spec=_arrays, split=st.integers(0, 5))
def test_the_weight_digest_is_the_plain_loop_over_sorted_tensors_whatever_the_sharding(
    tmp_path_factory, spec, split
):
    folder = tmp_path_factory.mktemp("st")
    tensors = {
        name: np.random.default_rng(seed).standard_normal(shape).astype(dtype)
        if dtype == "float32"
        else np.random.default_rng(seed).integers(-5, 5, shape).astype(dtype)
        for name, (shape, seed, dtype) in spec.items()
    }
    expected = hashlib.sha256()
    for name in sorted(tensors):
        array = tensors[name]
        data = array.astype(array.dtype.newbyteorder("<")).tobytes()
        dtype = {"float32": "F32", "int64": "I64"}[array.dtype.name]
        expected.update(name.encode() + b"\0" + dtype.encode() + b"\0")
        expected.update(",".join(str(d) for d in array.shape).encode() + b"\0")
        expected.update(len(data).to_bytes(8, "little") + data)
    names = list(reversed(tensors))  # another order inside the files
    one, two = names[: split % (len(names) + 1)], names[split % (len(names) + 1) :]
    files = []
    for i, part in enumerate((one, two)):
        if part:
            _write_safetensors(folder / f"m{i}.safetensors", {n: tensors[n] for n in part})
            files.append(folder / f"m{i}.safetensors")
    assert tensor_digest(files) == expected.hexdigest()
    first = names[0]
    changed = dict(tensors)
    changed[first] = tensors[first].copy()
    changed[first].reshape(-1)[:1] += 1
    _write_safetensors(folder / "changed.safetensors", changed)
    assert tensor_digest([folder / "changed.safetensors"]) != expected.hexdigest()


# -- recomputation against a plain loop ------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(
    returns=st.lists(
        st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=4), min_size=1, max_size=4
    )
)
def test_summaries_recompute_as_a_plain_loop_does(returns):
    per_seed = []
    for s, values in enumerate(returns):
        episodes = [
            {
                "index": i,
                "reset_seed": s * 100000 + i,
                "return": r,
                "score": r,
                "discounted_return": 0.5 * r,
                "success": r > 0,
                "length": 1,
                "failed": False,
            }
            for i, r in enumerate(values)
        ]
        per_seed.append(
            {
                "seed": s,
                "score": sum(values) / len(values),
                "mean_return": sum(values) / len(values),
                "mean_discounted_return": sum(0.5 * r for r in values) / len(values),
                "success_rate": sum(r > 0 for r in values) / len(values),
                "failed_episodes": 0,
                "episodes": episodes,
            }
        )
    if len({len(v) for v in returns}) > 1:
        return  # a record has one episode count
    scores = summarize_seeds(per_seed)
    means = [s["score"] for s in per_seed]
    n = len(means)
    mean = sum(means) / n
    stderr = (sum((m - mean) ** 2 for m in means) / (n - 1) / n) ** 0.5 if n > 1 else 0.0
    assert scores["mean"] == pytest.approx(mean, abs=1e-12)
    assert scores["stderr"] == pytest.approx(stderr, abs=1e-12)
    disc = [s["mean_discounted_return"] for s in per_seed]
    assert scores["mean_discounted_return"] == pytest.approx(sum(disc) / n, abs=1e-12)
    record = {
        "record_id": "r",
        "scores": {"metric": "return", **scores, "per_seed": per_seed},
        "protocol": {
            "seeds": list(range(n)),
            "episodes_per_seed": len(returns[0]),
            "metric": "return",
        },
    }
    assert check_derived(record) >= 4 * n + 6


# -- the committed board -------------------------------------------------------------------------
COMMITTED = iter_record_files(DEFAULT_STORE)


def test_no_committed_record_names_a_run_by_absolute_path():
    """The board's records and the history's: each must verify from any clone."""
    files = [*COMMITTED, *sorted((DEFAULT_STORE.parent / HISTORY_DIR).rglob("*.json"))]
    assert len(files) > len(COMMITTED)  # the history is searched too
    bad = {p.name: absolute_runs(read_record(p)) for p in files}
    assert {name: runs for name, runs in bad.items() if runs} == {}


@pytest.mark.parametrize("path", COMMITTED, ids=[p.stem for p in COMMITTED])
def test_committed_records_recompute_and_carry_their_hashes(path):
    from agentbench_poad.leaderboard.provenance import record_runs

    record = read_record(path)
    runs = record_runs(record) or {}
    assert not absolute_runs(record), "runs named by absolute path verify on one machine only"
    check_derived(record, run_dirs={s: resolve_run(r) for s, r in runs.items()})
    model = record["model"]
    assert "base_weights" in model and "adapters" in model, "run `leaderboard backfill`"
    assert bool(model["base_weights"]) == bool(model["base"])
    assert bool(model["adapters"]) == bool(runs)
    if runs:
        assert {s: a["run"] for s, a in model["adapters"].items()} == runs
    assert "mean_discounted_return" in record["scores"]
