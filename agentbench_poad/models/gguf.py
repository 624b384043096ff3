"""GGUF files: their metadata, the architectures transformers reads, and the conversion.

:func:`convert_gguf` writes a GGUF causal LM as a float32 Hugging Face directory: transformers'
GGUF loader dequantises it (with the ``gguf`` package); that model refuses ``save_pretrained``,
so its state dict is copied into a model built from the same config, which is saved with the
tokenizer. The saved directory is reloaded and its logits compared with the GGUF-loaded model's
before it is accepted. :func:`gguf_metadata` and :func:`supported_architectures` let the store
refuse an unreadable or unsupported file before converting it.
"""

from __future__ import annotations

import copy
import os
import platform
import time
from pathlib import Path
from typing import Any

from agentbench_poad.errors import DependencyNotInstalled, require
from agentbench_poad.models.errors import ModelFetchError, UnsupportedGGUF
from agentbench_poad.version import __version__


def gguf_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The scalar ``general.*`` metadata of a GGUF file (architecture, name, licence, ...).

    Raises:
        UnsupportedGGUF: the file is not a readable GGUF file.
    """
    gguf = require("gguf", "train")
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as exc:  # noqa: BLE001 - the reader raises ValueError, struct.error, ...
        raise UnsupportedGGUF(
            f"{path} is not a readable GGUF file ({type(exc).__name__}: {exc}); it is corrupt, "
            "truncated or of a GGUF version this `gguf` package does not read "
            "(pip install -U gguf)"
        ) from exc
    meta: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if not key.startswith("general.") or len(field.data) != 1:
            continue
        meta[key] = _field_value(field)
    file_type = meta.get("general.file_type")
    if isinstance(file_type, int):
        try:
            meta["quantisation"] = gguf.LlamaFileType(file_type).name.removeprefix("MOSTLY_")
        except ValueError:
            meta["quantisation"] = f"file type {file_type}"
    return meta


def _field_value(field: Any) -> Any:
    if hasattr(field, "contents"):
        return field.contents()
    part = field.parts[field.data[0]]
    if hasattr(part, "tobytes") and part.dtype.kind == "u" and part.itemsize == 1:
        return part.tobytes().decode("utf-8", errors="replace")
    return part.tolist()[0] if hasattr(part, "tolist") else part


def supported_architectures() -> set[str] | None:
    """GGUF architectures transformers can load (``None`` if this transformers does not say)."""
    try:
        from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES
    except ImportError:
        return None
    archs = set(GGUF_SUPPORTED_ARCHITECTURES)
    try:
        from transformers.integrations.gguf import GGUF_ARCHS

        archs |= set(GGUF_ARCHS)
    except ImportError:
        pass
    # Keys of the same mapping that are not architectures; t5 is an encoder-decoder.
    return archs - {"general", "tokenizer", "tokenizer_config", "t5", "umt5", "t5encoder"}


def _check_architecture(gguf_file: Path, meta: dict[str, Any]) -> str:
    arch = str(meta.get("general.architecture", ""))
    supported = supported_architectures()
    if not arch or (supported is not None and arch not in supported):
        import transformers

        listed = f" (it reads: {', '.join(sorted(supported))})" if supported else ""
        raise UnsupportedGGUF(
            f"{gguf_file.name} is a GGUF of architecture {arch or 'unknown'!r}, which "
            f"transformers {transformers.__version__} cannot load as a causal LM{listed}. Use a "
            "GGUF of a supported architecture, a newer transformers (pip install -U "
            "transformers gguf), or convert the model to a Hugging Face directory yourself and "
            "pass that directory"
        )
    return arch


def _gguf_upstream(meta: dict[str, Any]) -> str:
    parts = [meta.get("general.organization"), meta.get("general.name")]
    return " / ".join(str(p) for p in parts if p) or "unknown"


def convert_gguf(
    gguf_file: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    progress: bool = True,
    desc: str = "convert",
) -> dict[str, Any]:
    """Write a GGUF causal LM as a float32 Hugging Face directory (weights + tokenizer).

    The GGUF is loaded with transformers' GGUF support (dequantised to float32). That model
    refuses ``save_pretrained``, so its state dict is copied into a model built from the same
    config (minus the GGUF quantisation entry), which is saved with the tokenizer. The saved
    folder is then reloaded and its logits on a probe text must equal the GGUF model's.

    Args:
        gguf_file: The .gguf file.
        out_dir: An existing, empty folder to write into (the caller makes it atomic).
        progress: Show the conversion steps on a progress bar.
        desc: The bar's label.

    Returns:
        ``{"parameters", "max_diff", "seconds"}``.
    """
    from tqdm.auto import tqdm

    torch = require("torch", "train")
    transformers = require("transformers", "train")
    gguf_file, out = Path(gguf_file), Path(out_dir)
    start = time.perf_counter()
    steps = ["tokenizer", "dequantise weights", "rebuild model", "save", "check reload"]
    with tqdm(
        total=len(steps),
        desc=desc,
        unit="step",
        disable=not progress,
        bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}] {postfix}",
    ) as bar:

        def step(i: int) -> None:
            bar.set_postfix_str(steps[i])
            bar.update(1 if i else 0)

        folder, filename = str(gguf_file.parent), gguf_file.name
        step(0)
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=filename)
            step(1)
            quantised = transformers.AutoModelForCausalLM.from_pretrained(
                folder, gguf_file=filename, dtype=torch.float32
            )
        except (ValueError, KeyError, NotImplementedError, TypeError) as exc:
            raise UnsupportedGGUF(
                f"transformers {transformers.__version__} could not load {filename} as a causal "
                f"LM ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); use "
                "a GGUF of a supported architecture or a newer transformers/gguf "
                "(pip install -U transformers gguf)"
            ) from exc
        quantised.eval()
        step(2)
        config = copy.deepcopy(quantised.config)
        config.__dict__.pop("quantization_config", None)
        with torch.random.fork_rng(devices=[]):  # from_config's random init; weights replaced
            model = transformers.AutoModelForCausalLM.from_config(config)
        model.load_state_dict(quantised.state_dict(), strict=True)
        model.eval()
        step(3)
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        step(4)
        reloaded = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
        reloaded_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
        probe = "The capital of France is Paris. 1 + 1 = 2."
        ids = tokenizer(probe, return_tensors="pt")["input_ids"]
        if reloaded_tokenizer(probe, return_tensors="pt")["input_ids"].tolist() != ids.tolist():
            raise ModelFetchError(
                f"the tokenizer saved from {filename} encodes differently after reloading; the "
                "conversion is not faithful (report it with your transformers version)"
            )
        with torch.no_grad():
            expected = quantised(input_ids=ids).logits
            actual = reloaded(input_ids=ids).logits
        max_diff = float((expected - actual).abs().max())
        if not max_diff <= 1e-4 * max(1.0, float(expected.abs().max())):
            raise ModelFetchError(
                f"the model saved from {filename} differs from the GGUF after reloading (max "
                f"logit difference {max_diff:.3g}); the conversion is not faithful (report it "
                "with your transformers version)"
            )
        bar.update(1)
        bar.set_postfix_str("done")
    parameters = sum(p.numel() for p in model.parameters())
    return {
        "parameters": int(parameters),
        "max_diff": max_diff,
        "seconds": round(time.perf_counter() - start, 2),
    }


def _tool_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    versions = {"agentbench-poad": __version__, "python": platform.python_version()}
    for dist in ("transformers", "gguf", "torch", "safetensors", "tokenizers"):
        try:
            versions[dist] = version(dist)
        except PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


def _require_conversion_dependencies() -> None:
    for module in ("torch", "transformers", "gguf"):
        require(module, "train")
    try:
        require("accelerate", "train")
    except DependencyNotInstalled:
        # transformers asks for accelerate when it loads a GGUF file.
        raise DependencyNotInstalled(
            "accelerate is not installed; transformers needs it to read GGUF files: "
            'pip install "agentbench-poad[train]"'
        ) from None


__all__ = ["convert_gguf", "gguf_metadata", "supported_architectures"]
