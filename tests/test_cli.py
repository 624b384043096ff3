"""The ``agentbench-poad`` command line: --version, --help everywhere, envs, play."""

from __future__ import annotations

import argparse
import io

import gymnasium as gym
import pytest

from agentbench_poad.baselines.oracle import make_oracle
from agentbench_poad.cli import build_parser, main
from agentbench_poad.environments import registered_ids
from agentbench_poad.version import __version__


def _command_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """Every command path of the parser tree, e.g. ("leaderboard", "add")."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name)
                yield from _command_paths(sub, (*prefix, name))


COMMANDS = sorted(set(_command_paths(build_parser())))


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"agentbench-poad {__version__}"


def test_the_main_commands_exist():
    top = {path[0] for path in COMMANDS}
    assert {
        "quickstart",
        "envs",
        "play",
        "train",
        "evaluate",
        "leaderboard",
        "data",
        "sandbox",
        "model",
    } <= top


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_help_everywhere(path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*path, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: agentbench-poad " + " ".join(path))
    assert len(out.splitlines()) > 3  # a description and options, not just a usage line


def test_envs_lists_every_id_with_a_description(capsys):
    assert main(["envs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == registered_ids()
    assert all(len(line.split()) > 2 for line in lines)
    assert main(["envs", "--family", "virtualhome"]) == 0
    ids = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert ids and all(i.startswith("VirtualHome-") for i in ids)


def test_play_an_episode_by_numbers(monkeypatch, capsys):
    """A person typing the oracle's choices as numbers finishes the episode with the dish."""
    env = gym.make("Overcooked-TomatoSalad-v0")
    oracle = make_oracle(env)
    observation, info = env.reset(seed=0)
    typed, terminated = [], False
    while not terminated:
        action = oracle.act(observation, info["available_actions"])
        typed.append(str(info["available_actions"].index(action) + 1))
        observation, _, terminated, _, info = env.step(action)
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(["not an action", *typed]) + "\n"))
    assert main(["play", "Overcooked-TomatoSalad-v0", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert "(action not available)" in out
    assert "1. pick up the tomato" in out.lower()
    assert "episode 0 over" in out and "(success)" in out


def test_play_quits_and_reports_unknown_ids(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("q\n"))
    assert main(["play", "VirtualHome-FoodPreparation-v0"]) == 0
    assert "quit" in capsys.readouterr().out
    assert main(["play", "Overcooked-NoSuchTask-v0"]) == 2
    assert "agentbench-poad envs" in capsys.readouterr().err


# -- errors before work: every command checks what it was given before it loads a model, makes an
# env or starts a container. The model given is a path that does not exist, so a check that ran
# after loading would fail differently; the run folder must not appear.
MISSING_MODEL = "/nonexistent/agentbench-poad-model"


def _error(capsys, argv: list[str], code: int = 2) -> str:
    """The one-line error of ``main(argv)`` (exit code 2 unless said, nothing on stdout)."""
    assert main(argv) == code
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentbench-poad: error: "), captured.err
    assert "Traceback" not in captured.err
    return lines[0]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--env", "Overcooked-Nope-v0"], "unknown environment id 'Overcooked-Nope-v0'"),
        (
            ["--env", "Overcooked-TomatoSalad-v0", "--total-steps", "0"],
            "--total-steps must be >= 1",
        ),
        (["--env", "Overcooked-TomatoSalad-v0"], f"--model: {MISSING_MODEL!r} does not exist"),
        (
            ["--env", "Overcooked-TomatoSalad-v0", "--env-arg", "max_episode_steps=oops"],
            "--env-arg takes KEY=JSON",
        ),
    ],
)
def test_train_checks_before_loading_the_model(tmp_path, capsys, extra, message):
    out = tmp_path / "run"
    argv = ["train", "--agent", "poad", "--model", MISSING_MODEL, "--out", str(out)]
    argv += ["--total-steps", "64", *extra] if "--total-steps" not in extra else extra
    line = _error(capsys, argv)
    assert message in line
    assert not out.exists()


def test_train_refuses_twosome_in_an_open_action_env(tmp_path, capsys):
    line = _error(
        capsys,
        [
            "train",
            "--agent",
            "twosome",
            "--env",
            "DataSciCoding-iris-v0",
            "--model",
            MISSING_MODEL,  # checked after the agent and env: the agent error comes first
            "--total-steps",
            "64",
            "--out",
            str(tmp_path / "run"),
        ],
    )
    assert "open-action environment" in line and "POAD or NTPO" in line


def test_train_suggests_the_named_model_for_a_typo(tmp_path, capsys):
    line = _error(
        capsys,
        [
            "train",
            "--agent",
            "poad",
            "--env",
            "Overcooked-TomatoSalad-v0",
            "--model",
            "smollm2-153m",
            "--total-steps",
            "64",
            "--out",
            str(tmp_path / "run"),
        ],
    )
    assert "'smollm2-135m'" in line


def test_unknown_env_ids_get_a_suggestion(capsys):
    line = _error(
        capsys,
        ["evaluate", "--agent", "lm:" + MISSING_MODEL, "--env", "Overcooked-TomatoSalad-v1"],
    )
    assert "did you mean 'Overcooked-TomatoSalad-v0'" in line


@pytest.mark.parametrize(
    "argv, message",
    [
        (["evaluate", "--run", "/nonexistent/run"], "--run: /nonexistent/run: no such directory"),
        (
            ["evaluate", "--agent", "lm:" + MISSING_MODEL, "--env", "Overcooked-Nope-v0"],
            "unknown environment id",
        ),
        (
            [
                "evaluate",
                "--agent",
                "lm:" + MISSING_MODEL,
                "--env",
                "Overcooked-TomatoSalad-v0",
                "--episodes",
                "0",
            ],
            "--episodes must be >= 1",
        ),
        (
            ["evaluate", "--agent", "lm:" + MISSING_MODEL, "--env", "Overcooked-TomatoSalad-v0"],
            "does not exist",
        ),
        (["study", "/nonexistent/spec.toml"], "SPEC: /nonexistent/spec.toml: no such file"),
        (
            ["quickstart", "--env", "Overcooked-Nope-v0", "--model", MISSING_MODEL],
            "unknown environment id",
        ),
        (["quickstart", "--model", MISSING_MODEL], "does not exist"),
        (["quickstart", "--tiny", "--steps", "0"], "--steps must be >= 1"),
        (
            ["quickstart", "--tiny", "--dataset-env", "Overcooked-TomatoSalad-v0"],
            "is not a DataSciCoding id",
        ),
        (
            ["quickstart", "--tiny", "--env", "DataSciCoding-iris-v0", "--agents", "twosome"],
            "open-action environment",
        ),
        (["leaderboard", "add", "--run", "/nonexistent/run"], "no such directory"),
        (["leaderboard", "add", "/nonexistent/record.json"], "no such file"),
        (
            ["leaderboard", "verify", "any-record", "--episodes-per-seed", "0"],
            "--episodes-per-seed must be >= 1",
        ),
        (["leaderboard", "report", "--paper", "/nonexistent/paper.json"], "no such file"),
        (["model", "init", "tiny", "--out", "unused", "--hidden-size", "0"], "--hidden-size"),
        (["model", "fetch", "no-such-model"], "no-such-model"),
        (["sandbox", "run", "/nonexistent/code.py", "f"], "no such file"),
    ],
    ids=lambda value: " ".join(value[:2]) if isinstance(value, list) else None,
)
def test_commands_answer_bad_input_in_one_line(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)  # nothing may be written; a stray output would land here
    assert message in _error(capsys, argv)
    assert list(tmp_path.iterdir()) == []


def test_study_checks_its_models_before_the_first_run(tmp_path, capsys):
    import json

    spec = tmp_path / "s.json"
    spec.write_text(
        json.dumps(
            {
                "study": {
                    "name": "t",
                    "model": MISSING_MODEL,
                    "seeds": [0],
                    "total_steps": {"Overcooked-TomatoSalad-v0": 64},
                },
                "group": [{"agents": ["poad"], "envs": ["Overcooked-TomatoSalad-v0"]}],
            }
        )
    )
    out = tmp_path / "out"
    assert "does not exist" in _error(capsys, ["study", str(spec), "--out", str(out)])
    assert not out.exists()


def test_data_import_checks_the_file_first(tmp_path, capsys):
    line = _error(capsys, ["data", "import", "iris", str(tmp_path / "missing.csv")], code=1)
    assert "no such file" in line


def test_sandbox_run_checks_limits_before_a_container_starts(tmp_path, capsys):
    code = tmp_path / "code.py"
    code.write_text("import numpy as np\ndef f():\n    return np.zeros(1)\n")
    assert "--timeout must be > 0" in _error(
        capsys, ["sandbox", "run", str(code), "f", "--timeout", "0"]
    )
    assert "is not a function name" in _error(capsys, ["sandbox", "run", str(code), "f()"])
