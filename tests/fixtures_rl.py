"""Session fixtures for the RL tests: a tiny random causal LM on disk.

Load it as a plugin (``pytest_plugins = ["tests.fixtures_rl"]`` in ``tests/conftest.py``) or
import the fixture into a test module.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def small_overrides(**changes):
    """Trainer overrides for tests: two envs x three steps, big learning rates, a tiny critic.

    ``changes`` replace or add fields (``eval_every=0``, ``epochs=1`` ...).
    """
    values = dict(
        num_envs=2,
        rollout_length=3,
        epochs=2,
        num_minibatches=2,
        lr=5e-2,
        critic_lr=1e-3,
        critic_hidden_sizes=(16, 16),
        eval_every=2,
        eval_episodes=2,
        target_kl=None,
    )
    values.update(changes)
    return values


def train_tiny_poad_run(
    model_dir: Path, out: Path, *, seed: int = 0, agent: str = "poad", steps: int = 2
) -> Path:
    """Train the smallest run the CLI makes (2 env steps, one update) into ``out``.

    For tests of the scripts that read trained run directories (``agent``: another algorithm's
    tiny run, ``steps``: more updates of 2 steps).
    """
    from agentbench_poad.cli import main

    argv = ["train", "--agent", agent, "--env", "Overcooked-TomatoSalad-v0"]
    argv += ["--model", str(model_dir), "--total-steps", str(steps), "--out", str(out)]
    argv += ["--seed", str(seed), "--no-progress"]
    overrides = {
        "num_envs": 1,
        "rollout_length": 2,
        "epochs": 1,
        "num_minibatches": 1,
        "eval_every": 0,
        "critic_hidden_sizes": 16,
    }
    for key, value in overrides.items():
        argv += ["--set", f"{key}={value}"]
    assert main(argv) == 0
    return out


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-init Llama-style model with a byte-level tokenizer, built once per session.

    Under pytest-xdist each worker builds its own copy in its own temp dir.
    """
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    # Tests run with one intra-op thread (OMP_NUM_THREADS=1, set in tests/conftest.py): the tiny
    # model's matmuls are microseconds and extra threads only oversubscribe a small machine.
    from agentbench_poad.models import init_tiny_model

    return init_tiny_model(tmp_path_factory.mktemp("tiny_model"), seed=0)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An even smaller model (hidden size 32) for the trainer and learning tests."""
    pytest.importorskip("torch")
    from agentbench_poad.models import init_tiny_model

    return init_tiny_model(tmp_path_factory.mktemp("model") / "tiny", hidden_size=32)


def add_word_tokens(model_dir: Path, words: list[str], *, seed: int = 0) -> Path:
    """Give a tiny model's byte-level tokenizer whole-word tokens for ``words``, in place.

    The byte-level tiny tokenizer spends one token per character, so "close the microwave" is 20
    tokens; BPE language models spend one per common word (SmolLM2: 3, Llama-2: 5 in the paper's
    case study). Learning tests whose result depends on how many tokens an action has (NTPO's
    per-token discount shrinks the first tokens' credit by (γλ)^(n−1−j)) use this, so that the
    tiny model tokenises the toy like a real one. Each ``" " + word`` becomes one token through
    BPE merges; its embedding and output rows are drawn like the model's own (normal, std 0.02)
    from a private generator seeded with ``seed``.
    """
    import json

    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    state = json.loads(tokenizer.backend_tokenizer.to_str())
    vocab, merges = state["model"]["vocab"], state["model"]["merges"]
    old_size = len(vocab)
    parts: dict[int, str] = {}  # new token id -> its text
    for word in words:
        piece = "Ġ"  # the byte-level symbol of a space
        for char in word:
            merged = piece + char
            if merged not in vocab:
                vocab[merged] = len(vocab)
                merges.append([piece, char])
                parts[vocab[merged]] = merged
            piece = merged
    new_tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(state)),
        bos_token=tokenizer.bos_token,
        eos_token=tokenizer.eos_token,
        pad_token=tokenizer.pad_token,
        unk_token=None,
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in (model.get_input_embeddings(), model.get_output_embeddings()):
            rows = torch.randn(len(parts), layer.weight.shape[1], generator=generator) * 0.02
            layer.weight = torch.nn.Parameter(torch.cat([layer.weight, rows.to(layer.weight)]))
            if isinstance(layer, torch.nn.Embedding):
                layer.num_embeddings = layer.weight.shape[0]
            else:
                layer.out_features = layer.weight.shape[0]
    model.config.vocab_size = len(vocab)
    assert len(vocab) == old_size + len(parts)
    model.save_pretrained(model_dir)
    new_tokenizer.save_pretrained(model_dir)
    return model_dir


@pytest.fixture(scope="session")
def tiny_word_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny_model`` with whole-word tokens for the case-study toy's words (3-7 token actions)."""
    pytest.importorskip("torch")
    from agentbench_poad.models import init_tiny_model
    from agentbench_poad.rl.toy import ACTIONS_BY_STAGE

    words = sorted({w for actions in ACTIONS_BY_STAGE.values() for a in actions for w in a.split()})
    path = init_tiny_model(tmp_path_factory.mktemp("word_model") / "tiny", hidden_size=32)
    return add_word_tokens(path, words)


def play_rollout(agent, env_id: str, *, num_envs: int = 2, steps: int = 3, seed: int = 0):
    """``steps`` rollout steps of ``agent`` on ``num_envs`` fresh envs (reset seeds 0, 1, ...),
    sampling from a generator seeded with ``seed``; a finished episode stops where it ended.

    Returns ``(buffer, observations)``: the filled RolloutBuffer (no advantages yet) and each
    env's last observation, for ``agent.bootstrap_values``.
    """
    import gymnasium as gym
    import torch

    from agentbench_poad.rl.buffer import RolloutBuffer

    envs = [gym.make(env_id) for _ in range(num_envs)]
    observations, infos = map(list, zip(*(e.reset(seed=i) for i, e in enumerate(envs))))
    generator = torch.Generator().manual_seed(seed)
    buffer = RolloutBuffer(num_envs=num_envs)
    for _ in range(steps):
        records = agent.collect(observations, [i["available_actions"] for i in infos], generator)
        for k, record in enumerate(records):
            observations[k], reward, terminated, truncated, infos[k] = envs[k].step(
                record.sample.text
            )
            record.reward, record.terminated = float(reward), bool(terminated or truncated)
        buffer.add(records)
    return buffer, observations
