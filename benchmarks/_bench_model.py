"""Which model the speed benchmarks run on (shared by ``ppo_update.py`` and ``action_scoring.py``).

``--model`` takes a local Hugging Face directory (or anything ``load_causal_lm`` resolves, such as
a named model once the model table lands). Without it: ``$AGENTBENCH_POAD_BENCH_MODEL``, else the
converted SmolLM2-135M-Instruct at ``/work/models/smollm2-135m`` when that directory exists, else
a tiny random model built in a temporary directory so the script always runs.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

#: Where the development machines keep the converted SmolLM2-135M-Instruct.
DEFAULT_MODEL_DIR = Path("/work/models/smollm2-135m")
#: Environment variable that overrides the default model of the benchmarks.
MODEL_ENV_VAR = "AGENTBENCH_POAD_BENCH_MODEL"


def resolve_model(requested: str | None, tiny_dir: tempfile.TemporaryDirectory | None = None,
                  **tiny_kwargs: int) -> tuple[str, str]:
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
    if (DEFAULT_MODEL_DIR / "config.json").is_file():
        return str(DEFAULT_MODEL_DIR), str(DEFAULT_MODEL_DIR)
    from agentbench_poad.rl.models import init_tiny_model

    directory = tiny_dir.name if tiny_dir is not None else tempfile.mkdtemp(prefix="bench-tiny-")
    path = init_tiny_model(Path(directory) / "tiny", seed=0, **tiny_kwargs)
    return str(path), f"tiny random model {tiny_kwargs or ''} (no --model, no {DEFAULT_MODEL_DIR})"
