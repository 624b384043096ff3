"""``study --dry-run`` and ``--files`` run nothing: they import no code a spec's agents name (a
file or a module), while a real run imports and checks it before any cell (issue 64)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agentbench_poad.cli import main
from agentbench_poad.study import StudyError, load_study

ENV = "CaseStudy-Microwave-v0"
#: An agent module whose import has a visible side effect: it writes a marker file.
AGENT_CODE = """
from pathlib import Path

Path({marker!r}).write_text("imported")


def make_agent(env=None):
    raise AssertionError("never built here")
"""


def _agent_module(folder: Path, name: str, *, fails: bool = False) -> Path:
    """``folder/<name>.py``, which writes ``folder/<name>.imported`` when imported (and then
    raises, with ``fails``); returns the marker's path."""
    marker = folder / f"{name}.imported"
    code = AGENT_CODE.format(marker=str(marker))
    if fails:
        code += '\nraise RuntimeError("this agent file is broken")\n'
    (folder / f"{name}.py").write_text(code)
    return marker


def _spec(path: Path, agents: list[str], **extra) -> Path:
    path.write_text(
        json.dumps(
            {
                "study": {"name": "t", "model": "tiny", "total_steps": {ENV: 24}},
                "eval": {"episodes": 2},
                "group": [
                    {"name": "main", "agents": ["poad"], "envs": [ENV]},
                    {"name": "mine", "agents": agents, "envs": [ENV]},
                ],
                **extra,
            }
        )
    )
    return path


@pytest.fixture
def named_code(tmp_path, monkeypatch):
    """A spec naming a file agent and a module agent (on sys.path, under a name of its own:
    Python imports a module name once per process), and both markers."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = "module_agent_" + re.sub(r"\W", "_", tmp_path.name)
    file_marker = _agent_module(tmp_path, "file_agent")
    module_marker = _agent_module(tmp_path, module)
    agents = ["file_agent.py:make_agent", f"{module}:make_agent"]
    return _spec(tmp_path / "s.json", agents), [file_marker, module_marker], agents


def test_dry_run_imports_no_agent_the_spec_names(named_code, capsys):
    spec, markers, agents = named_code
    assert main(["study", str(spec), "--out", "out", "--dry-run"]) == 0
    assert [m.exists() for m in markers] == [False, False]
    printed = capsys.readouterr().out
    for agent in agents:  # named, with why its cells are not listed
        assert f"agent {agent}: not imported, not checked" in printed
        assert printed.count(agent) == 1
    # the built-in agent's cell and evaluation are listed as before
    assert "new      train poad" in printed and "eval  CaseStudy-Microwave-v0__poad" in printed
    assert "runs: 0 done, 0 partial, 1 new; evaluations: 0 done, 1 todo" in printed


def test_files_imports_no_agent_the_spec_names(named_code, capsys):
    spec, markers, agents = named_code
    assert main(["study", str(spec), "--out", "out", "--files"]) == 0
    assert [m.exists() for m in markers] == [False, False]
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing trained yet; notes stay off stdout (git add $(...))
    for agent in agents:
        assert f"note: agent {agent} [mine] is not imported" in captured.err


def test_a_run_still_imports_and_checks_them_first(named_code):
    """The same spec read for a run imports both agents (that is how it checks them)."""
    spec, markers, agents = named_code
    study = load_study(spec, out="out")
    assert [m.exists() for m in markers] == [True, True]
    assert study.unchecked == []
    assert [t.agent for t in study.evals if t.group == "mine"] == agents


def test_a_broken_agent_file_stops_a_run_before_any_cell(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    marker = _agent_module(tmp_path, "broken_agent", fails=True)
    spec = _spec(tmp_path / "s.json", ["broken_agent.py:make_agent"])
    assert main(["study", str(spec), "--out", "out", "--dry-run"]) == 0
    assert not marker.exists()
    assert main(["study", str(spec), "--out", "out"]) == 2
    assert marker.exists()  # the run imported it, and stopped on its error
    assert "this agent file is broken" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    with pytest.raises(StudyError, match="broken_agent.py:make_agent"):
        load_study(spec, out="out")


def test_dry_run_imports_no_tuned_agent_the_spec_names(tmp_path, monkeypatch, capsys):
    """A tuning protocol's agent spec is left out too, with no false problem from the tables
    that may name it (its class name is unknown without the import)."""
    monkeypatch.chdir(tmp_path)
    marker = _agent_module(tmp_path, "tuned_agent")
    tuning = {
        "task": ENV,
        "agents": ["poad", "tuned_agent.py:MyAlgo"],
        "seeds": [1000, 1001],
        "total_steps": 24,
        "selection": "last3-sampled-return",
        "grid": {"lr": [1e-3, 2e-3, 3e-3, 4e-3]},
        "per_agent": {"myalgo": {"total_steps": 24}},
    }
    spec = _spec(tmp_path / "s.json", ["poad"], tuning=tuning)
    spec_data = json.loads(spec.read_text())
    spec_data["group"] = spec_data["group"][:1]
    spec.write_text(json.dumps(spec_data))
    study = load_study(spec, out="out", import_agents=False)
    assert not marker.exists()
    assert study.unchecked == [("tuning", "tuned_agent.py:MyAlgo")]
    assert {c.agent for c in study.cells if c.group == "tuning"} == {"poad"}
    assert len([c for c in study.cells if c.group == "tuning"]) == 4 * 2
    assert main(["study", str(spec), "--out", "out", "--dry-run"]) == 0
    assert not marker.exists()
    assert "agent tuned_agent.py:MyAlgo: not imported" in capsys.readouterr().out
    # --group keeps the notes of the chosen groups only
    assert study.select(["main"]).unchecked == []
    assert study.select(["tuning"]).unchecked == study.unchecked


def test_env_kwargs_a_record_cannot_carry_are_refused_before_any_run(tmp_path):
    """A group whose env kwargs change the task without being part of a row's identity would
    train for hours and then fail to write its records: the spec check refuses it first."""
    from agentbench_poad.study import StudyError, load_study

    spec = tmp_path / "spec.toml"
    spec.write_text(
        '[study]\nname = "s"\nmodel = "m"\n[study.total_steps]\n'
        '"Overcooked-TomatoSalad-v0" = 8\n'
        '[[group]]\nagents = ["poad"]\nenvs = ["Overcooked-TomatoSalad-v0"]\nseeds = [0]\n'
        'env_kwargs = { layout = "other" }\n'
    )
    with pytest.raises(StudyError, match="layout"):
        load_study(spec, out=tmp_path / "out")
    spec.write_text(spec.read_text().replace('layout = "other"', "max_episode_steps = 30"))
    assert load_study(spec, out=tmp_path / "out").cells
