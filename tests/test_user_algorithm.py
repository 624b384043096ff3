"""A user's own algorithm (issue 32): named by spec, checked before any model loads, trained
through the study runner beside POAD, recorded with its source and compared in the report."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from agentbench_poad.baselines import ALGORITHMS, get_algorithm  # noqa: E402
from agentbench_poad.cli import main  # noqa: E402
from agentbench_poad.rl.algorithm import (  # noqa: E402
    AlgorithmError,
    NotAnAlgorithm,
    algorithm_source,
    check_algorithm,
)
from agentbench_poad.study import StudyError, load_study, run_study  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = "examples/my_algorithm.py:MyPOAD"
ENV = "CaseStudy-Microwave-v0"
SMALL = dict(
    num_envs=2,
    rollout_length=3,
    epochs=2,
    num_minibatches=2,
    lr=5e-2,
    critic_lr=1e-3,
    critic_hidden_sizes=[16, 16],
    eval_every=2,
    eval_episodes=2,
    target_kl=None,
)

HEADER = "from agentbench_poad.baselines.poad import POAD, POADConfig\n"
BAD_CLASSES = {
    "plain": ("class Algo:\n    name = 'x'\n", "not a subclass of agentbench_poad.rl.ppo.PPOAgent"),
    "noname": ("class Algo(POAD):\n    pass\n", "no `name` of its own (it inherits 'poad')"),
    "builtin_name": ("class Algo(POAD):\n    name = 'ntpo'\n", "is a built-in algorithm's"),
    "bad_name": ("class Algo(POAD):\n    name = 'my algo/1'\n", "`name` must be"),
    "noconfig": (
        "from agentbench_poad.rl.ppo import PPOAgent\n"
        "class Algo(PPOAgent):\n    name = 'mine'\n"
        "    def make_critic(self, g): ...\n",
        "no `config_class` dataclass",
    ),
    "methods": (
        "from agentbench_poad.rl.ppo import PPOAgent\n"
        "class Algo(PPOAgent):\n    name = 'mine'\n    config_class = POADConfig\n"
        "    def make_critic(self, g): ...\n    def collect(self, p, a, g): ...\n",
        "missing methods ['bootstrap_values', 'compute_advantages', 'make_batch', "
        "'evaluate_policy']",
    ),
}


def write_algo(tmp_path: Path, key: str) -> str:
    body, _ = BAD_CLASSES[key]
    path = tmp_path / f"{key}.py"
    path.write_text(HEADER + body)
    return f"{path}:Algo"


# -- the class check ------------------------------------------------------------------------------
@pytest.mark.parametrize("key", sorted(BAD_CLASSES))
def test_a_class_that_is_no_algorithm_is_refused_naming_what_is_missing(tmp_path, key):
    with pytest.raises(AlgorithmError) as caught:
        get_algorithm(write_algo(tmp_path, key))
    assert BAD_CLASSES[key][1] in str(caught.value)
    assert isinstance(caught.value, NotAnAlgorithm) == (key == "plain")


def test_a_spec_that_does_not_import_is_a_clear_error(tmp_path):
    (tmp_path / "syntax.py").write_text("class Algo(:\n")
    (tmp_path / "imports.py").write_text("import no_such_module_anywhere\n")
    with pytest.raises(AlgorithmError, match="does not import: SyntaxError"):
        get_algorithm(f"{tmp_path / 'syntax.py'}:Algo")
    with pytest.raises(AlgorithmError, match="does not import: ModuleNotFoundError"):
        get_algorithm(f"{tmp_path / 'imports.py'}:Algo")
    with pytest.raises(AlgorithmError, match="does not exist"):
        get_algorithm(f"{tmp_path / 'absent.py'}:Algo")
    with pytest.raises(AlgorithmError, match="cannot import 'no_such_pkg.algos'"):
        get_algorithm("no_such_pkg.algos:Algo")
    with pytest.raises(AlgorithmError, match="has no attribute 'Nope'"):
        get_algorithm("agentbench_poad.baselines.poad:Nope")
    with pytest.raises(KeyError, match="choose one of"):
        get_algorithm("no-such-agent")


def test_builtins_and_the_example_pass_the_check_and_name_their_source(monkeypatch):
    monkeypatch.chdir(ROOT)
    for name in ALGORITHMS:
        assert check_algorithm(get_algorithm(name)) is get_algorithm(name)
    poad = algorithm_source(get_algorithm("poad"))
    assert poad["spec"] == ALGORITHMS["poad"] and poad["package"] == "agentbench-poad"
    mine = get_algorithm(EXAMPLE)
    assert mine.name == "mypoad" and mine.config_class.__name__ == "MyPOADConfig"
    source = algorithm_source(mine)
    digest = hashlib.sha256((ROOT / "examples" / "my_algorithm.py").read_bytes()).hexdigest()
    assert source == {
        "name": "mypoad",
        "spec": EXAMPLE,
        "package": None,
        "package_version": "0.1.0",
        "source_sha256": digest,
    }
    # A module spec: the installed distribution and its version.
    assert get_algorithm("agentbench_poad.baselines.poad:POAD") is get_algorithm("poad")


# -- the example's credit rule, against a plain loop -----------------------------------------------
def _buffer(rng: np.random.Generator, steps: int, envs: int, lengths: list[int]):
    from agentbench_poad.rl.buffer import RolloutBuffer, StepRecord

    buffer = RolloutBuffer(num_envs=envs)
    k = 0
    for _ in range(steps):
        records = []
        for _ in range(envs):
            end = rng.random()
            records.append(
                StepRecord(
                    prompt="",
                    available_actions=None,
                    sample=None,
                    values=rng.normal(size=lengths[k % len(lengths)]).tolist(),
                    reward=float(rng.normal()),
                    terminated=end < 0.2,
                    truncated=0.2 <= end < 0.35,  # a time limit: bootstraps from final_value
                    final_value=float(rng.normal()),
                )
            )
            k += 1
        buffer.add(records)
    buffer.next_values = rng.normal(size=envs)
    return buffer


_EXAMPLE_CLASS: list[type] = []


def _example() -> type:
    if not _EXAMPLE_CLASS:
        _EXAMPLE_CLASS.append(get_algorithm(str(ROOT / EXAMPLE)))
    return _EXAMPLE_CLASS[0]


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    steps=st.integers(1, 4),
    envs=st.integers(1, 3),
    lengths=st.lists(st.integers(1, 5), min_size=1, max_size=6),
    share=st.floats(0.0, 1.0),
)
def test_mypoad_mixes_each_tokens_bad_advantage_with_its_actions_mean(
    seed, steps, envs, lengths, share
):
    """Against a plain loop over actions: POAD's per-token advantages, then the mix; returns and
    pads untouched; credit_share = 0 is POAD exactly."""
    import copy

    from agentbench_poad.baselines.poad import POAD

    mine = _example()
    rng = np.random.default_rng(seed)
    buffer = _buffer(rng, steps, envs, lengths)
    reference = copy.deepcopy(buffer)
    poad = object.__new__(POAD)  # only compute_advantages runs: no model needed
    poad.config = POAD.config_class()
    poad.compute_advantages(reference)
    agent = object.__new__(mine)
    agent.config = mine.config_class(credit_share=share)
    agent.compute_advantages(buffer)

    for t, step in enumerate(buffer.steps):
        for i, record in enumerate(step):
            n = len(record.values)
            own = [float(reference.advantages[t, i, j]) for j in range(n)]
            mean = sum(own) / n
            for j in range(n):
                expected = (1 - share) * own[j] + share * mean
                assert buffer.advantages[t, i, j] == pytest.approx(expected, abs=1e-12)
            assert not np.any(buffer.advantages[t, i, n:])
    np.testing.assert_array_equal(buffer.returns, reference.returns)
    agent.config = mine.config_class(credit_share=0.0)
    again = copy.deepcopy(reference)
    again.advantages = again.returns = None
    agent.compute_advantages(again)
    np.testing.assert_allclose(again.advantages, reference.advantages, rtol=0, atol=1e-15)


# -- the CLI: every bad input before any model loads ------------------------------------------------
def _train(capsys, *extra: str) -> tuple[int, str]:
    code = main(
        [
            "train",
            *extra,
            "--env",
            ENV,
            "--model",
            "no/such/model/dir",  # never reached: the algorithm is checked first
            "--total-steps",
            "12",
            "--out",
            "unused-run-dir",
        ]
    )
    return code, capsys.readouterr().err


def test_cli_train_refuses_bad_algorithms_before_any_model_loads(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for key in ("plain", "noname", "noconfig", "methods"):
        code, err = _train(capsys, "--agent", write_algo(tmp_path, key))
        assert code == 2 and BAD_CLASSES[key][1] in err, err
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom at import')\n")
    code, err = _train(capsys, "--agent", "broken.py:Algo")
    assert code == 2 and "does not import: RuntimeError: boom at import" in err
    code, err = _train(capsys, "--agent", "no-such-agent")
    assert code == 2 and "unknown agent 'no-such-agent'" in err and "path/to/file.py:Class" in err
    assert not (tmp_path / "unused-run-dir").exists()


def test_cli_train_refuses_a_config_field_the_class_does_not_know(tmp_path, capsys, monkeypatch):
    shutil.copy(ROOT / "examples" / "my_algorithm.py", tmp_path / "my_algorithm.py")
    monkeypatch.chdir(tmp_path)
    code, err = _train(capsys, "--agent", "my_algorithm.py:MyPOAD", "--set", "nope=1")
    assert code == 2 and "unknown MyPOADConfig field 'nope'" in err and "credit_share" in err
    code, err = _train(capsys, "--agent", "poad", "--set", "credit_share=0.5")
    assert code == 2 and "unknown POADConfig field 'credit_share'" in err
    code, err = _train(capsys, "--agent", "my_algorithm.py:MyPOAD", "--set", "credit_share=2")
    assert code == 2 and "credit_share must be in [0, 1]" in err
    assert not (tmp_path / "unused-run-dir").exists()


PRESETLESS = (
    "from dataclasses import dataclass\n"
    "from agentbench_poad.baselines.poad import POAD, POADConfig\n"
    "@dataclass\n"
    "class BareConfig(POADConfig):\n"
    "    PRESETS = {}\n"
    "@dataclass\n"
    "class SaladConfig(POADConfig):\n"
    "    PRESETS = {'overcooked': POADConfig.PRESETS['overcooked']}\n"
    "class Bare(POAD):\n    name = 'bare'\n    config_class = BareConfig\n"
    "class Salad(POAD):\n    name = 'salad'\n    config_class = SaladConfig\n"
)


def test_cli_train_preset_mini_without_the_familys_preset_is_an_error(
    tmp_path, capsys, monkeypatch
):
    """``--preset mini`` for a config class without the env family's preset was silently the
    plain defaults: it is an error naming the presets the class has and the way out."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.py").write_text(PRESETLESS)

    def train(agent: str, env: str, preset: str) -> tuple[int, str]:
        code = main(
            [
                "train",
                "--agent",
                agent,
                "--env",
                env,
                "--model",
                "no/such/model/dir",  # never reached: the preset is checked first
                "--total-steps",
                "12",
                "--preset",
                preset,
                "--out",
                "unused-run-dir",
            ]
        )
        return code, capsys.readouterr().err

    code, err = train("mine.py:Bare", "Overcooked-TomatoSalad-v0", "mini")
    assert code == 2, err
    assert "BareConfig has no preset for the overcooked family" in err
    assert "its presets: none" in err and "--preset none" in err
    code, err = train("mine.py:Salad", "VirtualHome-Cheese-v0", "mini")
    assert code == 2, err
    assert "its presets: overcooked, overcooked-mini" in err
    # The family it has still resolves; "auto" without one is documented as the defaults.
    from agentbench_poad.baselines import get_algorithm
    from agentbench_poad.rl.config import preset_for

    salad = get_algorithm("mine.py:Salad").config_class
    assert preset_for(salad, "Overcooked-TomatoSalad-v0", "mini") == "overcooked-mini"
    assert preset_for(salad, "VirtualHome-Cheese-v0", "auto") is None
    assert preset_for(salad, ENV, "mini") is None  # a toy outside the benchmark families
    assert not (tmp_path / "unused-run-dir").exists()


def test_cli_trains_the_example_and_its_run_names_the_class(tiny_model, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "run"
    sets = [x for k, v in {**SMALL, "credit_share": 0.5}.items() for x in ("--set", _cli(k, v))]
    code = main(
        [
            "train",
            "--agent",
            EXAMPLE,
            "--env",
            ENV,
            "--model",
            str(tiny_model),
            "--total-steps",
            "6",
            "--preset",
            "none",
            "--out",
            str(out),
            "--no-progress",
            *sets,
        ]
    )
    assert code == 0
    config = json.loads((out / "config.json").read_text())
    assert config["agent"] == "mypoad" and config["algorithm"]["credit_share"] == 0.5
    assert config["algorithm_source"]["spec"] == EXAMPLE
    assert config["algorithm_source"]["package_version"] == "0.1.0"


def _cli(key: str, value) -> str:
    if isinstance(value, list):
        return f"{key}={','.join(str(v) for v in value)}"
    return f"{key}={'none' if value is None else value}"


# -- the study: same footing as POAD ------------------------------------------------------------------
def _spec(path: Path, model: Path, agents, **group) -> Path:
    spec = {
        "study": {"name": "mine", "model": str(model), "seeds": [0, 1], "total_steps": {ENV: 12}},
        "eval": {"episodes": 2},
        "group": [{"agents": list(agents), "envs": [ENV], "overrides": SMALL, **group}],
    }
    path.write_text(json.dumps(spec))
    return path


def test_study_refuses_bad_user_algorithms_listing_each(tiny_model, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    (tmp_path / "broken.py").write_text("import no_such_module_anywhere\n")
    shutil.copy(ROOT / "examples" / "my_algorithm.py", tmp_path / "twin.py")
    agents = [
        "poad",
        EXAMPLE,
        f"{tmp_path / 'twin.py'}:MyPOAD",
        write_algo(tmp_path, "methods"),
        f"{tmp_path / 'broken.py'}:Algo",
        "examples/absent.py:Algo",
    ]
    with pytest.raises(StudyError) as caught:
        load_study(_spec(tmp_path / "s.json", tiny_model, agents, overrides={**SMALL, "nope": 1}))
    message = str(caught.value)
    assert "missing methods" in message and "does not import: ModuleNotFoundError" in message
    assert "absent.py" in message and "does not exist" in message
    assert "its name 'mypoad' is also the name of" in message
    # The unknown field is named for POAD and for the user's algorithm alike.
    assert message.count("'nope'") >= 2 and "MyPOADConfig" in message


def test_user_algorithm_trains_beside_poad_through_the_study_and_reaches_the_report(
    tiny_model, tmp_path, monkeypatch
):
    """The issue's 'done when': same seeds, budget and protocol as POAD; a record naming the
    class spec and its version; a report row compared with POAD."""
    from agentbench_poad.leaderboard.report import build_report

    monkeypatch.chdir(ROOT)  # the spec names the example relative to the checkout, as documented
    spec = _spec(tmp_path / "s.json", tiny_model, ["poad", EXAMPLE])
    study = load_study(spec, out=tmp_path / "out")
    cells = {(c.agent, c.seed): c for c in study.cells}
    resolved = f"{ROOT / 'examples' / 'my_algorithm.py'}:MyPOAD"
    assert sorted(cells) == [(resolved, 0), (resolved, 1), ("poad", 0), ("poad", 1)]
    mine = [c for c in study.cells if c.agent == resolved]
    poad = [c for c in study.cells if c.agent == "poad"]
    for a, b in zip(mine, poad):  # the same footing: everything but the agent is equal
        assert (a.env_id, a.seed, a.total_steps, a.model, a.preset, a.overrides_json) == (
            b.env_id,
            b.seed,
            b.total_steps,
            b.model,
            b.preset,
            b.overrides_json,
        )
        assert Path(a.run_dir).relative_to(tmp_path / "out").parts[:3] == ("runs", ENV, "mypoad")

    result = run_study(study, log=lambda line: None)
    assert result.failed == [] and len(result.trained) == 4 and len(result.records) == 2
    records = {}
    for path in result.records:
        record = json.loads(Path(path).read_text())
        records[record["agent"]["name"]] = record
    assert sorted(records) == ["mypoad", "poad"]
    ours, theirs = records["mypoad"], records["poad"]
    assert ours["protocol"] == theirs["protocol"]
    assert ours["training"]["total_steps"] == theirs["training"]["total_steps"]
    algorithm = ours["training"]["algorithm"]
    assert algorithm["spec"] == EXAMPLE and algorithm["package_version"] == "0.1.0"
    assert (
        algorithm["source_sha256"]
        == hashlib.sha256((ROOT / "examples" / "my_algorithm.py").read_bytes()).hexdigest()
    )
    assert theirs["training"]["algorithm"]["spec"] == ALGORITHMS["poad"]
    assert ours["config"]["training_config"]["algorithm"]["credit_share"] == 1.0

    md, _ = build_report(list(records.values()), tmp_path / "report")
    sections = {}  # "## " heading -> its text
    for block in ("\n" + md.read_text()).split("\n## ")[1:]:
        heading, _, body = block.partition("\n")
        sections[heading] = body
    assert "mypoad" in sections["Results by environment"]
    (comparison,) = [h for h in sections if "POAD" in h and "ompar" in h]  # its row beside POAD
    assert any("mypoad" in line for line in sections[comparison].splitlines() if "|" in line)


# -- the tuning protocol: the same search as POAD ---------------------------------------------------
def test_user_algorithm_gets_poads_tuning_search_then_its_chosen_config(
    tiny_model, tmp_path, monkeypatch
):
    """[tuning] lists the class spec beside poad: the same configurations, tuning seeds and
    steps; --select chooses its configuration under its name; the tuned group trains and records
    it with the same evaluation seeds as POAD, naming the tuning and the class."""
    from agentbench_poad.study import select_configs

    monkeypatch.chdir(ROOT)
    small = {k: v for k, v in SMALL.items() if k not in ("lr", "target_kl")}
    small.update(epochs=1, eval_every=1, eval_greedy=False, keep_checkpoints=1)
    spec = {
        "study": {
            "name": "tuned",
            "model": str(tiny_model),
            "total_steps": {ENV: 6},
            "overrides": small,
        },
        "eval": {"episodes": 2},
        "tuning": {
            "task": ENV,
            "agents": ["poad", EXAMPLE],
            "seeds": [1000, 1001],
            "total_steps": 18,
            "selection": "last3-sampled-return",
            "grid": {"lr": [1e-3, 5e-2], "target_kl": [0.02, 1.0]},
        },
        "group": [
            {
                "name": "eval",
                "tuned": True,
                "agents": ["poad", EXAMPLE],
                "envs": [ENV],
                "seeds": [7],
            }
        ],
    }
    path = tmp_path / "s.json"
    path.write_text(json.dumps(spec))
    out = tmp_path / "out"

    study = load_study(path, out=out)
    assert sorted(study.pending) == ["eval: mypoad", "eval: poad"]
    tuning = {}
    for cell in study.cells:
        name = Path(cell.run_dir).relative_to(out / "tuning" / ENV).parts[0]
        tuning.setdefault(name, []).append(
            (cell.overrides_json, cell.seed, cell.total_steps, cell.preset, cell.label)
        )
    assert sorted(tuning) == ["mypoad", "poad"] and tuning["mypoad"] == tuning["poad"]
    assert len(tuning["poad"]) == 8

    first = run_study(study, log=lambda line: None)
    assert first.failed == [] and len(first.trained) == 16 and first.records == []
    selections = {s.agent: s for s in select_configs(load_study(path, out=out))}
    assert sorted(selections) == ["mypoad", "poad"]
    second = run_study(path, out=out, log=lambda line: None)
    assert second.failed == [] and len(second.trained) == 2 and len(second.records) == 2
    records = {}
    for record_path in second.records:
        record = json.loads(Path(record_path).read_text())
        records[record["agent"]["name"]] = record
    ours, theirs = records["mypoad"], records["poad"]
    assert ours["protocol"] == theirs["protocol"] and ours["protocol"]["seeds"] == [7]
    source = ours["training"]["config_source"]
    assert source["chosen"] == selections["mypoad"].chosen
    assert source["tuning"] == theirs["training"]["config_source"]["tuning"]
    assert ours["training"]["algorithm"]["spec"] == EXAMPLE


# -- an algorithm with state of its own: exact resume ----------------------------------------------
def _metrics(run_dir: Path) -> list[dict]:
    from agentbench_poad.rl.trainer import TIMING_KEYS

    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        for key in TIMING_KEYS:
            record.pop(key, None)
        out.append(record)
    return out


def _checkpoint(run_dir: Path) -> tuple[dict, dict]:
    import torch
    from safetensors.torch import load_file

    from agentbench_poad.rl.trainer import latest_checkpoint

    ckpt = latest_checkpoint(run_dir)
    adapter = load_file(str(next((ckpt / "adapter").glob("*.safetensors"))))
    return adapter, torch.load(ckpt / "agent.pt", weights_only=True)


def test_an_algorithm_with_its_own_state_resumes_exactly(tiny_model, tmp_path, monkeypatch):
    """CentredPOAD keeps a moving reward baseline across updates and saves it through
    state_dict/load_state_dict: 4 updates in one go equal 2 + resume 2, metrics and weights;
    the same algorithm without saving its baseline does not resume exactly."""
    import torch

    from agentbench_poad.baselines.poad import POAD
    from agentbench_poad.rl.trainer import train

    monkeypatch.chdir(ROOT)
    centred = get_algorithm("examples/my_algorithm.py:CentredPOAD")
    overrides = {**SMALL, "baseline_rate": 0.5, "keep_checkpoints": 2}
    steps = 4 * 2 * 3  # 4 updates of 2 envs x 3 steps

    def run(algorithm, out: Path, **kwargs) -> None:
        train(
            algorithm,
            ENV,
            tiny_model,
            total_steps=steps,
            seed=3,
            out=out,
            overrides=overrides,
            progress=False,
            **kwargs,
        )

    run(centred, tmp_path / "full")
    run(centred, tmp_path / "part", max_updates=2)
    assert [r["update"] for r in _metrics(tmp_path / "part")] == [1, 2]
    run(centred, tmp_path / "part", resume=True)

    full, part = _metrics(tmp_path / "full"), _metrics(tmp_path / "part")
    assert [r["update"] for r in full] == [1, 2, 3, 4]
    assert part == full
    adapter_full, agent_full = _checkpoint(tmp_path / "full")
    adapter_part, agent_part = _checkpoint(tmp_path / "part")
    baseline = agent_full["reward_baseline"]
    assert baseline != 0.0, "the toy's rewards never moved the baseline: the test shows nothing"
    assert agent_part["reward_baseline"] == baseline
    for key in adapter_full:
        torch.testing.assert_close(adapter_full[key], adapter_part[key], rtol=0, atol=0)
    for key in agent_full["critic"]:
        torch.testing.assert_close(agent_full["critic"][key], agent_part["critic"][key])

    class Forgetful(centred):
        """The same algorithm, but its checkpoints leave the baseline out (the mistake)."""

        name = centred.name  # the same name: the same seeds, so the same run until the resume

        def state_dict(self):
            return POAD.state_dict(self)

        def load_state_dict(self, state):
            POAD.load_state_dict(self, state)

    run(Forgetful, tmp_path / "forgetful", max_updates=2)
    run(Forgetful, tmp_path / "forgetful", resume=True)
    forgetful = _metrics(tmp_path / "forgetful")
    assert forgetful[:2] == full[:2]  # the same run until the resume ...
    assert forgetful[2:] != full[2:]  # ... which restarts the baseline at 0
