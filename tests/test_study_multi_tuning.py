"""Several tuning protocols in one study spec (``[[tuning]]`` entries): their cells and run dirs,
spec errors, ``--select`` per protocol with write-back, and the single ``[tuning]`` table's
layout, which must not move (a running study's finished runs live there)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from agentbench_poad.study import StudyError, load_study, run_study, select_configs
from agentbench_poad.study.selection import select_all
from tests.test_study_tuning import GRID, SMALL  # the single-protocol tests' tiny settings

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
TASK_A = "CaseStudy-Microwave-v0"
TASK_B = "CaseStudy-MicrowaveClose-v0"
CONFIGS = [
    {"lr": 1e-3, "target_kl": 0.02},
    {"lr": 1e-3, "target_kl": 1.0},
    {"lr": 5e-2, "target_kl": 0.02},
    {"lr": 5e-2, "target_kl": 1.0},
]


def protocol(name, task, seeds, **extra):
    return {
        "name": name,
        "task": task,
        "agents": ["poad"],
        "seeds": seeds,
        "total_steps": 18,
        "selection": "last3-sampled-return",
        "grid": GRID,
        **extra,
    }


def two_protocol_spec(model, *, other_model="warm-model", task_b=TASK_B):
    """``cook`` tunes on task A with the study's model and preset; ``dsc`` tunes on task B with
    its own model and preset (a warm-started model, another preset), as a DataSciCoding group
    needs beside an Overcooked one."""
    return {
        "study": {
            "name": "two-protocols",
            "model": str(model),
            "total_steps": {TASK_A: 6, TASK_B: 6},
            "overrides": SMALL,
        },
        "eval": {"episodes": 2},
        "tuning": [
            protocol("cook", TASK_A, [1000, 1001]),
            protocol("dsc", task_b, [2000, 2001], model=str(other_model), preset="overcooked"),
        ],
        "group": [
            {
                "name": "a",
                "tuned": True,
                "tuning": "cook",
                "agents": ["poad"],
                "envs": [TASK_A],
                "seeds": [7],
            },
            {
                "name": "b",
                "tuned": True,
                "tuning": "dsc",
                "agents": ["poad"],
                "envs": [task_b],
                "seeds": [8],
            },
        ],
    }


def write(path: Path, spec: dict) -> Path:
    path.write_text(json.dumps(spec))
    return path


def fake_finished_runs(study, group, returns=lambda index, seed: [0, 0, index, index]):
    """Finished-looking tuning runs of one protocol's cells (what the selection rule reads)."""
    for cell in study.cells:
        if cell.group != group:
            continue
        run_dir = Path(cell.run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        index = int(cell.label.removeprefix("config"))
        curve = [{"eval_return": r} for r in returns(index, cell.seed)]
        (run_dir / "learning_curve.json").write_text(json.dumps(curve))
        (run_dir / "config.json").write_text(
            json.dumps({"algorithm": {"eval_greedy": False, "num_envs": 2, "rollout_length": 3}})
        )
        checkpoint = run_dir / "checkpoints" / "update_000003"
        checkpoint.mkdir(parents=True, exist_ok=True)
        (checkpoint / "state.json").write_text(json.dumps({"update": 3}))
        (run_dir / "checkpoints" / "latest").write_text("update_000003")


# -- loading: cells, dirs, models and presets per protocol ------------------------------------------
def test_two_protocols_on_two_tasks_have_their_own_cells_dirs_model_and_preset(tmp_path):
    out = tmp_path / "out"
    study = load_study(write(tmp_path / "s.json", two_protocol_spec("tiny")), out=out)
    assert study.tuning is None and [t.name for t in study.tunings] == ["cook", "dsc"]
    assert study.groups == ["tuning/cook", "tuning/dsc", "a", "b"]
    by_group = {g: [c for c in study.cells if c.group == g] for g in ("tuning/cook", "tuning/dsc")}
    assert len(study.cells) == 16  # the tuned groups wait for --select
    for group, task, model, preset, seeds in (
        ("tuning/cook", TASK_A, "tiny", None, (1000, 1001)),
        ("tuning/dsc", TASK_B, "warm-model", "overcooked", (2000, 2001)),
    ):
        cells = by_group[group]
        name = group.split("/")[1]
        # seed, then configuration (then agent): equal shares at every stopping point
        assert [(c.seed, c.label) for c in cells] == [
            (s, f"config{i}") for s in seeds for i in range(4)
        ]
        assert [c.run_dir for c in cells] == [
            str(out / "tuning" / name / task / "poad" / f"config{i}" / f"seed{s}")
            for s in seeds
            for i in range(4)
        ]
        assert {(c.env_id, c.model, c.preset, c.total_steps) for c in cells} == {
            (task, model, preset, 18)
        }
        assert [{k: c.overrides[k] for k in GRID} for c in cells[:4]] == CONFIGS
    assert study.pending == [
        "a: poad (tuning protocol 'cook')",
        "b: poad (tuning protocol 'dsc')",
    ]


def test_two_protocols_on_one_task_never_share_a_run_dir(tmp_path):
    spec = two_protocol_spec("tiny", task_b=TASK_A)
    spec["tuning"][1]["seeds"] = [1000, 1001]  # even the same seeds: other dirs
    study = load_study(write(tmp_path / "s.json", spec), out=tmp_path / "out")
    dirs = [c.run_dir for c in study.cells]
    assert len(dirs) == len(set(dirs)) == 16
    cook = {c.run_dir for c in study.cells if c.group == "tuning/cook"}
    dsc = {c.run_dir for c in study.cells if c.group == "tuning/dsc"}
    assert all("/tuning/cook/" in d for d in cook) and all("/tuning/dsc/" in d for d in dsc)


def test_one_entry_needs_no_tuning_key_in_its_groups(tmp_path):
    spec = two_protocol_spec("tiny")
    spec["tuning"] = spec["tuning"][:1]
    spec["group"] = spec["group"][:1]
    del spec["group"][0]["tuning"]
    study = load_study(write(tmp_path / "s.json", spec), out=tmp_path / "out")
    assert study.tuning is study.tunings[0] and study.tuning.name == "cook"
    assert study.pending == ["a: poad (tuning protocol 'cook')"]


# -- spec errors that name the fix ------------------------------------------------------------------
def _errors(tmp_path, change) -> str:
    spec = two_protocol_spec("tiny")
    change(spec)
    with pytest.raises(StudyError, match="nothing was run") as info:
        load_study(write(tmp_path / "s.json", spec), out=tmp_path / "out")
    assert not (tmp_path / "out").exists()
    return str(info.value)


def _set(path, value):
    def change(spec):
        target = spec
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (_set(("group", 1, "tuning"), "nope"), "tuning = 'nope' is no tuning protocol of the spec"),
        (_set(("tuning", 1, "name"), "cook"), "duplicate name 'cook'"),
        (_set(("tuning", 1, "name"), "a/b"), 'needs name = "<name>"'),
        (lambda s: s["tuning"][1].pop("name"), 'needs name = "<name>"'),
        (
            lambda s: s["group"][0].pop("tuning"),
            "the spec has 2 tuning protocols ['cook', 'dsc']; name one with tuning",
        ),
        (_set(("group", 0, "tuned"), False), "names a tuning protocol, but the group is not tuned"),
        # evaluation seeds: of the group's own protocol ...
        (_set(("group", 1, "seeds"), [8, 2001]), "evaluation seeds [2001] are tuning seeds"),
        # ... and of any protocol tuning on a task the group evaluates
        (_set(("group", 1, "eval_envs"), [TASK_A]), None),
        (_set(("group", 1, "model"), "another"), "its protocol [[tuning]] 'dsc' tuned model"),
        (_set(("tuning", 1, "chosen"), {"poad": CONFIGS[0]}), "lives in [tuning_chosen.dsc]"),
        (_set(("tuning_chosen",), {"nope": {}}), "['nope'] name no [[tuning]] entry"),
    ],
)
def test_spec_errors_name_the_fix(change, expected, tmp_path):
    if expected is None:  # group b evaluates on task A, where cook tuned on seed 1001

        def change(spec):
            spec["group"][1]["eval_envs"] = [TASK_A]
            spec["group"][1]["seeds"] = [8, 1001]

        expected = "evaluation seeds [1001] are tuning seeds of [[tuning]] 'cook' on " + TASK_A
    assert expected in _errors(tmp_path, change)


def test_tuning_seeds_of_another_task_are_no_overlap(tmp_path):
    spec = two_protocol_spec("tiny")
    spec["group"][1]["seeds"] = [1000]  # cook's tuning seed, but cook tunes on another task
    study = load_study(write(tmp_path / "s.json", spec), out=tmp_path / "out")
    assert "b: poad (tuning protocol 'dsc')" in study.pending


# -- --select per protocol, write-back, reload ---------------------------------------------------------
def _toml_spec(model) -> str:
    spec = two_protocol_spec(model)
    lines = [
        "# comments stay",
        "[study]",
        'name = "two-protocols"',
        f'model = "{model}"',
        "overrides = { "
        + ", ".join(f"{k} = {json.dumps(v).lower()}" for k, v in SMALL.items())
        + " }",
        "",
        "[study.total_steps]",
        f'"{TASK_A}" = 6',
        f'"{TASK_B}" = 6',
    ]
    for entry in spec["tuning"]:
        lines += ["", "[[tuning]]"]
        for key, value in entry.items():
            if key == "grid":
                value_text = "{ lr = [1e-3, 5e-2], target_kl = [0.02, 1.0] }"
            else:
                value_text = json.dumps(value)
            lines.append(f"{key} = {value_text}")
    for group in spec["group"]:
        lines += ["", "[[group]]"] + [f"{k} = {json.dumps(v)}" for k, v in group.items()]
    return "\n".join(lines) + "\n"


def test_select_writes_each_complete_protocol_and_keeps_the_others_waiting(tmp_path, capsys):
    from agentbench_poad.cli import main

    path = tmp_path / "s.toml"
    text = _toml_spec("tiny")
    path.write_text(text)
    out = tmp_path / "out"
    study = load_study(path, out=out)
    fake_finished_runs(study, "tuning/dsc")

    done = select_all(study)
    assert list(done.selections) == ["dsc"] and done.wrote
    (selection,) = done.selections["dsc"]
    assert selection.index == 3 and selection.tuning == "dsc"
    assert "not trained" in done.incomplete["cook"]
    written = path.read_text()
    assert written.startswith(text.rstrip("\n"))
    assert "[tuning_chosen.dsc]\npoad = { lr = 0.05, target_kl = 1.0 }" in written

    again = load_study(path, out=out)
    assert [t.chosen for t in again.tunings] == [{}, {"poad": CONFIGS[3]}]
    (cell_b,) = [c for c in again.cells if c.group == "b"]
    assert (cell_b.model, cell_b.preset) == ("warm-model", "overcooked")
    assert {k: cell_b.overrides[k] for k in GRID} == CONFIGS[3]
    source = json.loads(cell_b.config_source_json)
    assert source["tuning"]["name"] == "dsc" and source["chosen"] == CONFIGS[3]
    assert source["tuning"]["model"] == "warm-model" and source["tuning"]["task"] == TASK_B
    assert again.pending == ["a: poad (tuning protocol 'cook')"]

    # --dry-run names each waiting pair's protocol; --select again changes nothing
    assert main(["study", str(path), "--out", str(out), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "wait     tuned a: poad (tuning protocol 'cook')" in printed
    assert main(["study", str(path), "--out", str(out), "--select"]) == 0
    printed = capsys.readouterr().out
    assert "cook: not complete yet" in printed and "already holds these choices" in printed
    assert path.read_text() == written

    # cook finishes: both protocols in the block, dsc's choice kept
    fake_finished_runs(again, "tuning/cook", lambda index, seed: [0, 5 - index, 5 - index, 0])
    assert [s.tuning for s in select_configs(load_study(path, out=out))] == ["cook", "dsc"]
    final = load_study(path, out=out)
    assert [t.chosen for t in final.tunings] == [{"poad": CONFIGS[0]}, {"poad": CONFIGS[3]}]
    assert final.pending == [] and len([c for c in final.cells if c.group in "ab"]) == 2
    assert path.read_text().count("[tuning_chosen.") == 2

    # tuning runs that changed after the choice: --select refuses to change it
    for cell in final.cells:
        if cell.group == "tuning/dsc":
            (Path(cell.run_dir) / "learning_curve.json").write_text(
                json.dumps([{"eval_return": 9.0 if cell.label == "config0" else 0.0}] * 3)
            )
    with pytest.raises(StudyError, match="already chose other configurations"):
        select_all(load_study(path, out=out))


def test_select_writes_a_json_spec_and_refuses_a_hand_written_table(tmp_path):
    # one folder per spec: specs beside each other are earlier studies to each other
    for folder in ("json", "fresh", "hand"):
        (tmp_path / folder).mkdir()
    path = write(tmp_path / "json" / "s.json", two_protocol_spec("tiny"))
    study = load_study(path, out=tmp_path / "out")
    fake_finished_runs(study, "tuning/cook")
    (selection,) = select_configs(study)
    assert json.loads(path.read_text())["tuning_chosen"] == {"cook": {"poad": selection.chosen}}
    assert load_study(path, out=tmp_path / "out").tunings[0].chosen == {"poad": selection.chosen}
    fresh = write(tmp_path / "fresh" / "s.json", two_protocol_spec("tiny"))
    with pytest.raises(StudyError, match="no tuning protocol has finished its runs"):
        select_configs(load_study(fresh, out=tmp_path / "nothing"))

    toml = tmp_path / "hand" / "s.toml"
    toml.write_text(_toml_spec("tiny") + "\n[tuning_chosen.cook]\n")
    with pytest.raises(StudyError, match=r"hand-written \[tuning_chosen\]"):
        select_all(load_study(toml, out=tmp_path / "out"))


# -- the single [tuning] table: layout, group and records unchanged --------------------------------
def test_single_tuning_table_keeps_its_dirs_group_and_config_source(tmp_path):
    spec = two_protocol_spec("tiny")
    single = {k: v for k, v in spec["tuning"][0].items() if k != "name"}
    single["agents"] = ["poad", "ntpo"]
    spec["tuning"] = single
    spec["group"] = [
        {"name": "a", "tuned": True, "agents": ["poad"], "envs": [TASK_A], "seeds": [7]}
    ]
    out = tmp_path / "out"
    study = load_study(write(tmp_path / "s.json", spec), out=out)
    assert study.tuning is study.tunings[0] and not study.tuning.entry
    assert study.groups == ["tuning", "a"] and study.pending == ["a: poad"]
    expected = [
        (agent, s, f"config{i}", str(out / "tuning" / TASK_A / agent / f"config{i}" / f"seed{s}"))
        for s in (1000, 1001)
        for i in range(4)
        for agent in ("poad", "ntpo")
    ]
    assert [(c.agent, c.seed, c.label, c.run_dir) for c in study.cells] == expected
    assert {(c.group, c.model, c.preset) for c in study.cells} == {("tuning", "tiny", None)}

    spec["tuning"]["chosen"] = {"poad": CONFIGS[2]}
    chosen = load_study(write(tmp_path / "s.json", spec), out=out)
    (cell,) = [c for c in chosen.cells if c.group == "a"]
    assert json.loads(cell.config_source_json) == {  # exactly today's record field
        "spec": str(tmp_path / "s.json"),
        "tuning": {
            "task": TASK_A,
            "seeds": [1000, 1001],
            "total_steps": 18,
            "configurations": CONFIGS,
            "selection": "last3-sampled-return",
        },
        "chosen": CONFIGS[2],
    }
    spec["tuning"]["name"] = "cook"
    with pytest.raises(StudyError, match=r"write \[\[tuning\]\] entries"):
        load_study(write(tmp_path / "s.json", spec), out=out)


def test_committed_fair_cpu_v2_tuning_dirs_are_where_its_runs_are(tmp_path):
    study = load_study(ROOT / "studies" / "fair-cpu-v2.toml", out=tmp_path / "out")
    cells = [c for c in study.cells if c.group == "tuning"]
    assert len(cells) == 40 and study.tuning is not None and not study.tuning.entry
    pattern = re.compile(
        r"^tuning/Overcooked-TomatoSalad-v0/(poad|ntpo|twosome|grpo|gigpo)/config[0-3]/seed100[01]$"
    )
    for cell in cells:
        assert pattern.match(str(Path(cell.run_dir).relative_to(tmp_path / "out"))), cell.run_dir


# -- the docs' example --------------------------------------------------------------------------------
def test_docs_example_of_several_protocols_loads(tmp_path):
    text = (ROOT / "docs" / "study.md").read_text(encoding="utf-8")
    marker = "<!-- example: several tuning protocols -->"
    assert marker in text, "docs/study.md lost its [[tuning]] example"
    block = text.split(marker, 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    spec = tmp_path / "spec.toml"
    spec.write_text(block)
    study = load_study(spec, out=tmp_path / "out")
    assert [t.name for t in study.tunings] == ["overcooked", "dsc"]
    assert len(study.pending) == 2 and all("tuning protocol" in p for p in study.pending)
    dsc_cells = [c for c in study.cells if c.group == "tuning/dsc"]
    assert dsc_cells and all("/tuning/dsc/" in c.run_dir for c in dsc_cells)


# -- end to end: train one protocol, select it, train its group, add the record --------------------
@pytest.mark.slow
def test_one_protocol_trained_selected_and_its_record_added(tiny_model, tmp_path):
    from agentbench_poad.leaderboard.records import RecordError, add_record

    spec = two_protocol_spec(tiny_model, other_model=tiny_model)
    path = write(tmp_path / "s.json", spec)
    out = tmp_path / "out"
    study = load_study(path, out=out).select(["tuning/dsc"])
    first = run_study(study, log=lambda line: None, evaluate=False)
    assert first.failed == [] and len(first.trained) == 8
    done = select_all(load_study(path, out=out))
    assert list(done.selections) == ["dsc"] and list(done.incomplete) == ["cook"]
    second = run_study(load_study(path, out=out).select(["b"]), log=lambda line: None)
    assert second.failed == [] and len(second.trained) == 1 and len(second.records) == 1
    record = json.loads(Path(second.records[0]).read_text())
    source = record["training"]["config_source"]
    assert (
        source["tuning"]["name"] == "dsc" and source["chosen"] == done.selections["dsc"][0].chosen
    )
    store = tmp_path / "store"
    store.mkdir()
    add_record(record, store)  # found in [tuning_chosen.dsc]
    claimed = copy.deepcopy(record)
    claimed["training"]["config_source"]["tuning"]["name"] = "cook"  # chose nothing yet
    with pytest.raises(RecordError, match="chose no configuration"):
        add_record(claimed, store, replace=True)


def test_tuning_table_names_one_of_several_protocols(tmp_path):
    """The docs' tuning table picks a protocol by name; without one it refuses to guess."""
    from agentbench_poad.leaderboard.report.fair_tables import tuning_table
    from agentbench_poad.study import load_study

    spec = write(tmp_path / "s.json", two_protocol_spec("tiny"))
    out = tmp_path / "out"
    study = load_study(spec, out=out)
    fake_finished_runs(study, "tuning/dsc", returns=lambda index, seed: [0, 0, index, seed - 2000])
    table = tuning_table(spec, out, "dsc")
    rows = [line for line in table.splitlines() if line.startswith("| poad")]
    assert len(rows) == 4  # the 2 x 2 grid, each configuration scored from its runs
    assert "| 0.000 | 0.333 |" in rows[0] and "| 0.333 | 0.667 |" in rows[1]
    assert "--" in tuning_table(spec, out, "cook").splitlines()[-1]  # cook has no runs yet
    with pytest.raises(ValueError, match="several tuning protocols"):
        tuning_table(spec, out)
    with pytest.raises(ValueError, match="no tuning protocol 'nope'"):
        tuning_table(spec, out, "nope")


def test_group_tuning_selects_every_protocol_and_one_protocol_by_its_name(tmp_path):
    study = load_study(write(tmp_path / "s.json", two_protocol_spec("tiny")), out=tmp_path / "o")
    every = study.select(["tuning"])
    assert every.groups == ["tuning/cook", "tuning/dsc"]
    assert {c.group for c in every.cells} == {"tuning/cook", "tuning/dsc"}
    assert len(every.cells) == len([c for c in study.cells if c.group.startswith("tuning/")])
    one = study.select(["tuning/dsc"])
    assert one.groups == ["tuning/dsc"] and {c.group for c in one.cells} == {"tuning/dsc"}
    with pytest.raises(StudyError, match="no group"):
        study.select(["tun"])  # a prefix of a name, not of a path: refused
