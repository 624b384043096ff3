"""Which model the speed benchmarks run on (shared by ``ppo_update.py`` and ``action_scoring.py``).

``--model`` takes anything ``load_causal_lm`` resolves: a named model (``smollm2-135m``, fetched on
first use), a ``.gguf`` file or a local Hugging Face directory. Without it:
``$AGENTBENCH_POAD_BENCH_MODEL``, else the named ``smollm2-135m`` when it is already cached
(``agentbench-poad model fetch smollm2-135m``), else a tiny random model built in a temporary directory so the script always
runs (offline, nothing fetched).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

#: The named model used when it is already in the model cache (``agentbench-poad model fetch``).
DEFAULT_MODEL_NAME = "smollm2-135m"
#: Environment variable that overrides the default model of the benchmarks.
MODEL_ENV_VAR = "AGENTBENCH_POAD_BENCH_MODEL"


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
