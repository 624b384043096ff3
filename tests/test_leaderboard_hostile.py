"""Hostile records, runs and clients (issue 47), the leaderboard's side: verify replays the agent
a record shows (one spec, its source hashed, its file inside the record's checkout); every path a
record names stays inside its root; the Markdown report shows record fields as text; ``add``
checks timestamps and versions; a run names its model so that it loads from any folder; and
``evaluate --run`` refuses the options it would ignore."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from agentbench_poad.cli import main
from agentbench_poad.leaderboard import evaluate, verify_record
from agentbench_poad.leaderboard.records import add_record, read_record, write_record
from agentbench_poad.leaderboard.report import build_report
from agentbench_poad.leaderboard.schema import RecordError
from tests.fixtures_rl import small_overrides
from tests.test_leaderboard_toys import CORRIDOR_ID

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "leaderboard" / "results"
#: A committed trained record (its runs are named relative to the runs root).
TRAINED = RESULTS / "Overcooked-TomatoLettuceSalad-v0__gigpo__smollm2-135m.json"

AGENT_FILE = textwrap.dedent(
    """
    class LastChoice:
        name = "last-choice"

        def act(self, observation, available_actions):
            return available_actions[1]
    """
)
#: Imported, it leaves a file beside itself: the tests check it was never imported.
EVIL_FILE = textwrap.dedent(
    """
    from pathlib import Path

    Path(__file__).with_name("IMPORTED").write_text("ran")


    class X:
        name = "last-choice"

        def act(self, observation, available_actions):
            return available_actions[1]
    """
)


@pytest.fixture
def user_board(tmp_path, monkeypatch):
    """A board folder holding a user's agent file and the record made from it (by the package's
    own ``evaluate``, run from the board), and an ``elsewhere/evil.py`` beside the board."""
    board = tmp_path / "board"
    board.mkdir()
    (board / "my_agents.py").write_text(AGENT_FILE)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "evil.py").write_text(EVIL_FILE)
    monkeypatch.chdir(board)
    record = evaluate("my_agents.py:LastChoice", CORRIDOR_ID, seeds=[0], episodes=2)[0]
    path = write_record(board / f"{record['record_id']}.json", record)
    monkeypatch.chdir(tmp_path)  # verify runs from elsewhere: the record's board anchors paths
    return board, path, elsewhere


def _imported(elsewhere: Path) -> bool:
    return (elsewhere / "IMPORTED").exists()


def _rewrite(path: Path, edit) -> Path:
    record = json.loads(path.read_text())
    edit(record)
    path.write_text(json.dumps(record))
    return path


# -- 1. verify replays exactly the agent the record shows -----------------------------------------
def test_a_new_user_record_hashes_its_agent_file_and_verifies_from_another_folder(
    user_board, capsys
):
    board, path, _ = user_board
    record = read_record(path)
    assert record["agent"]["source"]["file"] == "my_agents.py"
    assert len(record["agent"]["source"]["sha256"]) == 64
    assert main(["leaderboard", "verify", str(path)]) == 0
    assert "REPRODUCED" in capsys.readouterr().out


def test_a_record_naming_another_agent_for_replay_is_refused_naming_both(user_board, capsys):
    board, path, elsewhere = user_board
    _rewrite(path, lambda r: r["config"].update(agent_spec="../elsewhere/evil.py:X"))
    assert main(["leaderboard", "verify", str(path)]) == 2
    err = capsys.readouterr().err
    assert "'my_agents.py:LastChoice'" in err and "'../elsewhere/evil.py:X'" in err
    assert not _imported(elsewhere)
    with pytest.raises(RecordError, match="names one agent"):
        add_record(read_record(path), board / "store")


def _both_specs(spec: str):
    def edit(record):
        record["agent"]["spec"] = record["config"]["agent_spec"] = spec

    return edit


def test_an_agent_file_outside_the_records_checkout_is_refused(user_board):
    board, path, elsewhere = user_board
    _rewrite(path, _both_specs("../elsewhere/evil.py:X"))
    with pytest.raises(RecordError, match="climbs out of its root"):
        verify_record(read_record(path) | {"_path": str(path)})
    _rewrite(path, _both_specs(f"{elsewhere / 'evil.py'}:X"))
    with pytest.raises(RecordError, match="outside the record's agent root"):
        verify_record(read_record(path) | {"_path": str(path)})
    assert not _imported(elsewhere)


def test_an_edited_agent_file_is_refused_before_it_is_imported(user_board, capsys):
    board, path, _ = user_board
    recorded = read_record(path)["agent"]["source"]["sha256"]
    # the same class, edited: it would import and play
    (board / "my_agents.py").write_text(EVIL_FILE.replace("class X", "class LastChoice"))
    assert main(["leaderboard", "verify", str(path)]) == 2
    err = capsys.readouterr().err
    assert recorded in err and "is not the code that made the record" in err
    assert not (board / "IMPORTED").exists()


def test_an_unhashed_user_record_runs_only_when_the_reviewer_trusts_it(user_board, capsys):
    board, path, _ = user_board
    _rewrite(path, lambda r: r["agent"].pop("source"))  # as made before records hashed agents
    assert main(["leaderboard", "verify", str(path)]) == 2
    assert "--trust-unhashed" in capsys.readouterr().err
    assert main(["leaderboard", "verify", str(path), "--trust-unhashed"]) == 0
    assert "REPRODUCED" in capsys.readouterr().out


def test_the_package_agents_need_no_source_hash():
    """Committed records name built-in agents (their code is the package's git commit)."""
    record = read_record(RESULTS / "Overcooked-TomatoSalad-v0__random.json")
    assert "source" not in record["agent"]
    assert verify_record(record, episodes_per_seed=1, max_seeds=1).reproduced


# -- 2. every path a record names stays inside its root -------------------------------------------
def _escaping(record: dict, run: str) -> dict:
    """``record`` with its first seed's run renamed ``run`` everywhere it is named."""
    seed = next(iter(record["config"]["agent_kwargs"]["runs"]))
    old = record["config"]["agent_kwargs"]["runs"][seed]
    record["config"]["agent_kwargs"]["runs"][seed] = run
    record["agent"]["kwargs"]["runs"][seed] = run
    record["training"]["runs"] = [run if r == old else r for r in record["training"]["runs"]]
    record["model"]["adapters"][seed]["run"] = run
    return record


def test_run_paths_that_climb_out_of_the_runs_root_are_refused(tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()
    (tmp_path / "outside" / "x100").mkdir(parents=True)
    record = _escaping(json.loads(TRAINED.read_text()), "../outside/x100")
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(record))
    store = tmp_path / "store"
    argv = ["leaderboard", "--runs", str(runs), "--store", str(store)]
    assert main([*argv, "add", str(path)]) == 2
    assert "climbs out of its root" in capsys.readouterr().err
    assert not store.exists()
    assert main([*argv, "verify", str(path)]) == 2
    assert "climbs out of its root" in capsys.readouterr().err


def test_a_symlink_out_of_the_runs_root_is_refused(tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()
    (tmp_path / "outside" / "x100").mkdir(parents=True)
    (runs / "link").symlink_to(tmp_path / "outside")
    record = _escaping(json.loads(TRAINED.read_text()), "link/x100")
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(record))
    argv = ["leaderboard", "--runs", str(runs), "--store", str(tmp_path / "store")]
    assert main([*argv, "add", str(path)]) == 2
    assert "outside its root" in capsys.readouterr().err
    assert main([*argv, "verify", str(path)]) == 2
    assert "outside its root" in capsys.readouterr().err


def test_an_adapter_file_name_that_climbs_out_is_refused(tmp_path):
    record = json.loads(TRAINED.read_text())
    adapter = next(iter(record["model"]["adapters"].values()))
    adapter["files"]["../../../../../../etc/passwd"] = "0" * 64
    with pytest.raises(RecordError, match="climbs out of its root"):
        add_record(record, tmp_path / "store")


# -- 4. Markdown shows record fields as text; add checks formats ----------------------------------
def test_html_in_record_fields_does_not_reach_the_markdown_report(tmp_path):
    record = evaluate(
        "agentbench_poad.baselines.random:RandomAgent", CORRIDOR_ID, seeds=[0, 1], episodes=2
    )[0]
    record["agent"]["name"] = "<script>alert(1)</script>"
    record["agent"]["version"] = '<img src=x onerror="alert(2)">'
    record["notes"] = "<iframe src=javascript:alert(3)>"
    md, _ = build_report([record], tmp_path / "report")
    text = Path(md).read_text()
    assert "&lt;script>alert(1)&lt;/script>" in text  # shown, as text
    for tag in ("<script", "<img", "<iframe"):
        assert tag not in text


@pytest.mark.parametrize(
    "field, value",
    [
        (("created_at",), "yesterday, around noon"),
        (("created_at",), "2026-02-30T10:00:00+00:00"),
        (("software", "python"), "<script>alert(1)</script>"),
        (("software", "package_version"), '0.1.0 <img src=x onerror="alert(1)">'),
    ],
)
def test_add_refuses_free_text_in_timestamps_and_versions(tmp_path, capsys, field, value):
    record = json.loads((RESULTS / "Overcooked-TomatoSalad-v0__random.json").read_text())
    target = record
    for key in field[:-1]:
        target = target[key]
    target[field[-1]] = value
    path = tmp_path / "record.json"
    path.write_text(json.dumps(record))
    argv = ["leaderboard", "--store", str(tmp_path / "store"), "add", "--allow-dirty", str(path)]
    assert main(argv) == 2
    assert f"{'.'.join(field)} is" in capsys.readouterr().err


def test_add_accepts_the_formats_the_package_writes(tmp_path):
    record = json.loads((RESULTS / "Overcooked-TomatoSalad-v0__random.json").read_text())
    assert add_record(record, tmp_path / "store").exists()


# -- 3. a run names its model so that it loads from any folder ------------------------------------
def _train(model: str, out: str) -> int:
    overrides = small_overrides(eval_every=0)
    sets = []
    for key in ("num_envs", "rollout_length", "num_minibatches", "epochs"):
        sets += ["--set", f"{key}={overrides[key]}"]
    argv = ["train", "--agent", "poad", "--env", "Overcooked-TomatoSalad-v0", "--model", model]
    return main([*argv, "--total-steps", "6", "--out", out, "--no-progress", *sets])


def test_a_run_trained_on_a_relative_model_evaluates_from_another_folder(
    tiny_model, tmp_path, monkeypatch, capsys
):
    work = tmp_path / "work"
    shutil.copytree(tiny_model, work / "models" / "tiny")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a hub lookup would fail, not retry
    monkeypatch.chdir(work)
    assert _train("models/tiny", "run") == 0
    config = json.loads((work / "run" / "config.json").read_text())
    assert config["model"] == str((work / "models" / "tiny").resolve())
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["evaluate", "--run", str(work / "run"), "--episodes", "1"]) == 0
    assert "mean return" in capsys.readouterr().out
    # a run made before runs recorded absolute paths stored the model as typed: from another
    # folder, evaluate names the fix before any loader asks the (offline) hub
    config["model"] = "models/tiny"
    (work / "run" / "config.json").write_text(json.dumps(config))
    assert main(["evaluate", "--run", str(work / "run"), "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert "'models/tiny'" in err and "the folder the run was trained in" in err


# -- 7 (part). evaluate --run refuses the options it would ignore ---------------------------------
@pytest.mark.parametrize(
    "extra, named",
    [(["--out", "X"], "--out"), (["--seeds", "1", "2", "--add"], "--add, --seeds")],
)
def test_evaluate_run_refuses_agent_mode_options(tmp_path, capsys, extra, named):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"model": "smollm2-135m"}))
    (run / "metrics.jsonl").write_text("")
    assert main(["evaluate", "--run", str(run), *extra]) == 2
    err = capsys.readouterr().err
    assert named in err and "leaderboard add --run" in err
    assert not (tmp_path / "X").exists()
