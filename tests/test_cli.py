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
