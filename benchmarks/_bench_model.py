"""Which model the speed benchmarks run on, and the pieces several of them share.

Shared by ``ppo_update.py``, ``action_scoring.py`` and ``gpu_check.py``: :func:`resolve_model`
(below), :func:`collect_rollout` and :func:`time_update` (a POAD rollout, and its update timed
against a plain forward + backward), :func:`synchronize`, :func:`smollm2_shaped_model`; by
``update_profile.py`` and ``side_by_side.py``: the quickstart's and the ``--tiny`` trainer
settings (:data:`QUICKSTART_OVERRIDES`, :data:`TINY_OVERRIDES`).

``--model`` takes anything ``load_causal_lm`` resolves: a named model (``smollm2-135m``, fetched on
first use), a ``.gguf`` file or a local Hugging Face directory. Without it:
``$AGENTBENCH_POAD_BENCH_MODEL``, else the named ``smollm2-135m`` when it is already cached
(``agentbench-poad model fetch smollm2-135m``), else a tiny random model built in a temporary directory so the script always
runs (offline, nothing fetched).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The named model used when it is already in the model cache (``agentbench-poad model fetch``).
DEFAULT_MODEL_NAME = "smollm2-135m"
#: Environment variable that overrides the default model of the benchmarks.
MODEL_ENV_VAR = "AGENTBENCH_POAD_BENCH_MODEL"
#: The quickstart's trainer overrides and episode cap (agentbench_poad/cli/quickstart.py): what
#: ``update_profile.py`` and ``side_by_side.py`` train with by default. Copy before changing.
QUICKSTART_OVERRIDES = {"eval_every": 6, "eval_episodes": 4}
QUICKSTART_MAX_EPISODE_STEPS = 30
#: Their ``--tiny`` (CPU-sized) trainer overrides and episode cap. Copy before changing.
TINY_OVERRIDES = {
    "num_envs": 2,
    "rollout_length": 4,
    "epochs": 1,
    "num_minibatches": 2,
    "lora_layers": 1,
    "critic_hidden_sizes": [16],
    "eval_every": 2,
    "eval_episodes": 1,
}
TINY_MAX_EPISODE_STEPS = 5


def resolve_model(
    requested: str | None, tiny_dir: tempfile.TemporaryDirectory | None = None, **tiny_kwargs: int
) -> tuple[str, str]:
    """``(model, description)``: the requested model, the default one, or a fresh tiny model.

    Args:
        requested: ``--model`` value, or None.
        tiny_dir: a temporary directory to build the tiny model in (made when None and needed).
        **tiny_kwargs: ``init_tiny_model`` arguments (hidden_size, num_layers ...).
    """
    if requested:
        return requested, requested
    from_env = os.environ.get(MODEL_ENV_VAR)
    if from_env:
        return from_env, f"{from_env} (${MODEL_ENV_VAR})"
    try:  # the named model, when `agentbench-poad model fetch smollm2-135m` has cached it
        from agentbench_poad.models import is_cached

        if is_cached(DEFAULT_MODEL_NAME):
            return DEFAULT_MODEL_NAME, f"{DEFAULT_MODEL_NAME} (cached named model)"
    except ImportError:  # pragma: no cover - a tree without the named-model table
        pass
    from agentbench_poad.models import init_tiny_model

    directory = tiny_dir.name if tiny_dir is not None else tempfile.mkdtemp(prefix="bench-tiny-")
    path = init_tiny_model(Path(directory) / "tiny", seed=0, **tiny_kwargs)
    return str(
        path
    ), f"tiny random model {tiny_kwargs or ''} (no --model, {DEFAULT_MODEL_NAME} not cached)"


# -- pieces shared by ppo_update.py and gpu_check.py -------------------------------------------
#: SmolLM2-135M's layer sizes (its config.json), for a random model of the same compute per token
#: where the real weights cannot be had (a GPU machine that reaches no package index).
SMOLLM2_135M_SHAPE = {
    "hidden_size": 576,
    "num_layers": 30,
    "num_heads": 9,
    "num_kv_heads": 3,
    "intermediate_size": 1536,
}
#: SmolLM2's vocabulary size: the shaped model's output layer is this wide, as the real one's.
SMOLLM2_VOCAB = 49152


def smollm2_shaped_model(out_dir: str | Path, seed: int = 0) -> Path:
    """A random-init model with SmolLM2-135M's layers and output width (byte tokenizer).

    The compute per token is SmolLM2-135M's; the texts are longer in tokens (one per byte) and
    the weights random, so only speed and memory figures carry over, not actions or returns.
    """
    import transformers

    from agentbench_poad.models import init_tiny_model

    path = init_tiny_model(Path(out_dir), seed=seed, **SMOLLM2_135M_SHAPE)
    model = transformers.AutoModelForCausalLM.from_pretrained(path)
    # Extra output rows are never sampled (the byte tokenizer has 259 ids); they cost what
    # SmolLM2's 49k-wide head costs.
    model.resize_token_embeddings(SMOLLM2_VOCAB, mean_resizing=False)
    model.save_pretrained(path)
    return path


def synchronize(device: Any) -> None:
    """Wait for the GPU's queued work (a no-op on CPU), so a timer measures the work itself."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def collect_rollout(algorithm: Any, env_id: str, config: Any, seed: int = 0) -> Any:
    """One rollout of ``config.num_envs`` envs x ``config.rollout_length`` steps, advantages
    computed: a ``RolloutBuffer`` whose ``steps[t][k].sample`` are the actions taken.

    Env ``k`` starts from ``reset(seed=k)`` (a finished episode from ``100 + k``); actions are
    drawn from ``torch.Generator().manual_seed(seed)``, so two devices given the same seed see
    the same observations until their sampled actions part.
    """
    import gymnasium as gym
    import torch

    import agentbench_poad  # noqa: F401  (registers the environments)
    from agentbench_poad.rl.buffer import RolloutBuffer

    envs = [gym.make(env_id) for _ in range(config.num_envs)]
    observations, infos = map(list, zip(*(e.reset(seed=i) for i, e in enumerate(envs))))
    generator = torch.Generator().manual_seed(seed)
    buffer = RolloutBuffer(num_envs=config.num_envs)
    for _ in range(config.rollout_length):
        records = algorithm.collect(
            observations, [i["available_actions"] for i in infos], generator
        )
        for k, record in enumerate(records):
            obs, reward, terminated, truncated, info = envs[k].step(record.sample.text)
            record.reward, record.done = float(reward), bool(terminated or truncated)
            if record.done:
                obs, info = envs[k].reset(seed=100 + k)
            observations[k], infos[k] = obs, info
        buffer.add(records)
    buffer.next_values = algorithm.bootstrap_values(observations)
    algorithm.compute_advantages(buffer)
    return buffer


@dataclass
class UpdateTiming:
    """``POAD.update`` against a plain Hugging Face forward + backward over the same tokens."""

    samples: int
    """Action samples in the buffer."""
    real_tokens: int
    """Prompt + action tokens over all epochs (pads not counted)."""
    action_tokens: int
    """Action tokens of one epoch."""
    padded_tokens: int
    """Tokens the anchor's right-padded chunks hold (pads counted)."""
    anchor_s: list[float]
    """Seconds of each timed anchor pass."""
    update_s: list[float]
    """Seconds of each timed update, interleaved with the anchor passes."""

    @property
    def ratio(self) -> float:
        """Median over the interleaved pairs of anchor time / update time (goal >= 0.8)."""
        return statistics.median(a / u for a, u in zip(self.anchor_s, self.update_s))

    @property
    def min_time_ratio(self) -> float:
        return min(self.anchor_s) / min(self.update_s)

    @property
    def anchor_tokens_per_s(self) -> float:
        return self.real_tokens / statistics.median(self.anchor_s)

    @property
    def update_tokens_per_s(self) -> float:
        return self.real_tokens / statistics.median(self.update_s)


def time_update(algorithm: Any, config: Any, buffer: Any, repeats: int) -> UpdateTiming:
    """Time ``algorithm.update(buffer)`` against the plain forward + backward anchor.

    The anchor (see ``benchmarks/ppo_update.py``) runs the same minibatches in the same order,
    each split into the same ``grad_accum_steps`` chunks and right-padded, with the same LoRA
    adapters: ``model(input_ids, attention_mask, labels).loss.backward()``. One warm-up of each,
    then ``repeats`` interleaved (anchor, update) pairs; the GPU is synchronised around each.
    """
    import torch

    policy = algorithm.policy
    prompts = buffer.flat("prompt")
    tokens = buffer.flat_samples("token_ids")
    sequences = [policy.encode_prompt(p) + list(t) for p, t in zip(prompts, tokens)]
    settings = config.ppo_settings()

    # The minibatches ppo_update draws with the same generator, split as it splits them.
    generator = torch.Generator().manual_seed(1)
    chunks = []
    for _ in range(config.epochs):
        order = torch.randperm(len(sequences), generator=generator)
        for index in order.tensor_split(settings.num_minibatches):
            for chunk in index.tensor_split(settings.grad_accum_steps):
                if chunk.numel():
                    chunks.append(chunk.tolist())

    def plain_forward_backward() -> None:
        policy.model.train()
        try:
            for chunk in chunks:
                ids, mask = policy._right_padded([sequences[i] for i in chunk])
                labels = ids.masked_fill(mask == 0, -100)
                out = policy.model(input_ids=ids, attention_mask=mask, labels=labels)
                out.loss.backward()
                policy.model.zero_grad(set_to_none=True)
        finally:
            policy.model.eval()

    def update() -> None:
        algorithm.update(buffer, torch.Generator().manual_seed(1))

    plain_forward_backward()  # warm-up of both paths
    update()
    anchor_s: list[float] = []
    update_s: list[float] = []
    for _ in range(repeats):
        for fn, times in ((plain_forward_backward, anchor_s), (update, update_s)):
            synchronize(policy.device)
            start = time.perf_counter()
            fn()
            synchronize(policy.device)
            times.append(time.perf_counter() - start)
    return UpdateTiming(
        samples=len(sequences),
        real_tokens=sum(len(s) for s in sequences) * config.epochs,
        action_tokens=sum(len(t) for t in tokens),
        padded_tokens=sum(len(c) * max(len(sequences[i]) for i in c) for c in chunks),
        anchor_s=anchor_s,
        update_s=update_s,
    )
