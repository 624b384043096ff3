"""Loading causal language models, LoRA settings, and a tiny random model for tests.

The reference agents train any Hugging Face ``AutoModelForCausalLM`` (the paper used Llama-2-7b
and CodeLlama-7b) with LoRA adapters. This module holds the pieces that do not depend on the
algorithm:

* :class:`LoraSettings` -- the paper's adapter settings (r 8, alpha 16, dropout 0, ``q_proj`` and
  ``v_proj``; docs/reference.md#models-and-critic).
* :func:`load_causal_lm` -- model and tokenizer by named model (``"smollm2-135m"``, fetched and
  converted once into the model cache), ``.gguf`` file, local directory or hub id, with ``dtype``
  and ``device`` options (``"auto"`` picks CUDA when available). Names and ``.gguf`` files are
  resolved by :func:`agentbench_poad.models.store.resolve_model`.
* :func:`init_tiny_model` -- writes a small random-init Llama-style model with a byte-level
  tokenizer to a directory. The Hugging Face hub is unreachable here, so tests, examples and the
  ``agentbench-poad model init tiny --out DIR`` command use it in place of a real checkpoint.
"""

from __future__ import annotations

import importlib.util
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbench_poad.errors import require
from agentbench_poad.models.errors import ModelNotAvailable
from agentbench_poad.models.named import NAMED_MODELS
from agentbench_poad.models.store import resolve_model

#: Accepted ``dtype`` names (besides ``"auto"``).
DTYPES = ("float32", "float16", "bfloat16")

#: Special tokens of the tiny byte-level tokenizer; their ids are 0, 1, 2 and the 256 byte
#: tokens follow (the same layout as Llama: 0 pad/unk, 1 BOS, 2 EOS).
TINY_SPECIAL_TOKENS = ("<pad>", "<s>", "</s>")


@dataclass
class LoraSettings:
    """LoRA adapter settings; the defaults are the paper's (docs/reference.md#models-and-critic).

    The adapter weights are always kept in float32, also when the base model is loaded in
    float16/bfloat16 (deliberate deviation docs/reference.md#deviations: the reference optimised fp16 LoRA weights,
    where updates at learning rates of 5e-7 round to zero).
    """

    r: int = 8
    """Rank of the update matrices."""
    alpha: float = 16
    """Scaling numerator: the update is ``(alpha / r) * B @ A``."""
    dropout: float = 0.0
    """Dropout on the adapter input."""
    target_modules: tuple[str, ...] = ("q_proj", "v_proj")
    """Names of the linear sub-modules that get an adapter (Llama attention query/value)."""

    def __post_init__(self) -> None:
        if isinstance(self.target_modules, str):
            self.target_modules = (self.target_modules,)
        self.target_modules = tuple(self.target_modules)
        if not isinstance(self.r, int) or self.r < 1:
            raise ValueError(f"LoraSettings.r must be a positive int, got {self.r!r}")
        if not self.alpha > 0:
            raise ValueError(f"LoraSettings.alpha must be > 0, got {self.alpha!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoraSettings.dropout must be in [0, 1), got {self.dropout!r}")
        if not self.target_modules or not all(
            isinstance(m, str) and m for m in self.target_modules
        ):
            raise ValueError(
                "LoraSettings.target_modules must name at least one module, e.g. ('q_proj', 'v_proj')"
            )

    def to_peft_config(self):
        """The equivalent ``peft.LoraConfig`` (task ``CAUSAL_LM``, no bias)."""
        peft = require("peft", "train")
        return peft.LoraConfig(
            r=self.r,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=list(self.target_modules),
            bias="none",
            task_type="CAUSAL_LM",
        )


def device_problem(device: Any) -> str | None:
    """Why ``device`` cannot be used on this machine, with the fix; None when it can.

    Judged from torch's device queries alone (no model is loaded), so a command can check its
    ``--device`` before any work. ``None`` and ``"auto"`` always work (``auto`` falls back to the
    CPU).
    """
    if device is None or device == "auto":
        return None
    torch = require("torch", "train")
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        return (
            f"device {device!r} is not a torch device ({exc}); use 'cpu', 'cuda', 'cuda:N' "
            "or 'auto'"
        )
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            why = (
                "this torch build has no CUDA support"
                if torch.version.cuda is None and torch.version.hip is None
                else "no GPU is visible"
            )
            return (
                f"device {device!r} was asked for, but CUDA is not available ({why}; torch "
                f"{torch.__version__}); "
                "use --device cpu, or --device auto to take a GPU only where there is one"
            )
        count = torch.cuda.device_count()
        if parsed.index is not None and parsed.index >= count:
            return (
                f"device {device!r} was asked for, but this machine has {count} GPU(s) "
                f"(cuda:0 .. cuda:{count - 1}); use one of them, 'cuda' or 'auto'"
            )
    elif parsed.type == "mps" and not torch.backends.mps.is_available():
        return f"device {device!r} was asked for, but MPS is not available; use 'cpu' or 'auto'"
    return None


def resolve_device(device: Any = "auto"):
    """A ``torch.device``; ``"auto"`` is ``cuda`` when a GPU is visible, else ``cpu``.

    Raises:
        ValueError: the device is not usable here (:func:`device_problem` says why and the fix).
    """
    torch = require("torch", "train")
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if isinstance(device, torch.device):
        device = str(device)
    problem = device_problem(device)
    if problem:
        raise ValueError(problem)
    return torch.device(device)


def cuda_has_bf16(device: Any = None) -> bool:
    """The GPU computes natively in bfloat16 (compute capability 8.0+, or ROCm).

    Unlike ``torch.cuda.is_bf16_supported()`` (which by default also counts a slow emulation on
    older GPUs), this is what decides whether bfloat16 is worth loading a model in.
    """
    torch = require("torch", "train")
    if torch.version.hip:
        return True
    if not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_properties(device).major >= 8


def choose_dtype(
    dtype: str, device_type: str, bf16_supported: Callable[[], bool]
) -> tuple[str, str | None]:
    """The dtype a model is loaded in on a device of ``device_type``, and a note when it is not
    the one asked for.

    ``"auto"`` is bfloat16 on a GPU that has it, else float16; float32 off the GPU. An explicit
    ``"bfloat16"`` on a GPU without native bfloat16 (pre-Ampere: V100, T4) falls back to float16
    too: emulated bfloat16 there is several times slower, and the LoRA weights and the critic
    stay float32 either way (:class:`LoraSettings`). The note says so; a training run writes it
    into its ``config.json`` (``code_sessions[-1].compute.dtype_note``).

    Args:
        dtype: ``"float32"``, ``"float16"``, ``"bfloat16"`` or ``"auto"``.
        device_type: ``torch.device(...).type``: ``"cuda"``, ``"cpu"``, ...
        bf16_supported: asked (only on CUDA) whether the GPU has bfloat16; normally
            :func:`cuda_has_bf16` of the device.

    Returns:
        ``(dtype name, note or None)``.
    """
    if dtype != "auto" and dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {DTYPES + ('auto',)}")
    if device_type != "cuda":
        return ("float32" if dtype == "auto" else dtype), None
    if dtype not in ("auto", "bfloat16") or bf16_supported():
        return ("bfloat16" if dtype == "auto" else dtype), None
    return "float16", (
        f"dtype {dtype!r} asked for, but this GPU has no native bfloat16 (compute capability "
        "below 8.0): float16 used instead"
    )


def resolve_dtype(dtype: Any = "float32", device: Any = "cpu"):
    """A ``torch.dtype`` from a name, for a model on ``device`` (see :func:`choose_dtype`:
    ``"auto"`` is bfloat16, or float16, on CUDA, float32 on CPU; ``"bfloat16"`` on a GPU
    without it is float16, with a warning)."""
    torch = require("torch", "train")
    if isinstance(dtype, torch.dtype):
        return dtype
    device = resolve_device(device)
    name, note = choose_dtype(dtype, device.type, lambda: cuda_has_bf16(device))
    if note:
        warnings.warn(note, stacklevel=2)
    return getattr(torch, name)


def compute_summary(device: Any = "cpu", dtype: Any = "float32") -> dict[str, Any]:
    """Where a run computes, for its ``config.json``: ``{"device", "dtype"}``, plus
    ``"device_name"`` and ``"cuda"`` (the CUDA version torch was built with) on a GPU and
    ``"dtype_note"`` when the dtype is not the one asked for (:func:`choose_dtype`)."""
    torch = require("torch", "train")
    resolved = resolve_device(device)
    name, note = choose_dtype(str(dtype), resolved.type, lambda: cuda_has_bf16(resolved))
    summary: dict[str, Any] = {"device": str(resolved), "dtype": name}
    if resolved.type == "cuda":
        summary["device_name"] = torch.cuda.get_device_name(resolved)
        summary["cuda"] = torch.version.cuda or torch.version.hip
    if note:
        summary["dtype_note"] = note
    return summary


def load_causal_lm(
    name_or_path: str | Path, *, dtype: Any = "float32", device: Any = "cpu", progress: bool = True
):
    """Load a causal LM and its tokenizer by name, ``.gguf`` file, local directory or hub id.

    Args:
        name_or_path: A named model (``"smollm2-135m"``; ``agentbench-poad model list``),
            fetched and converted into the model cache on first use; a ``.gguf`` file,
            converted once into the cache (keyed by its sha256); a local directory written by
            ``save_pretrained`` (or by :func:`init_tiny_model`); or a Hugging Face hub id
            (``"meta-llama/Llama-2-7b-hf"``). An existing path wins over a name.
        dtype: ``"float32"``, ``"float16"``, ``"bfloat16"`` or ``"auto"`` (see
            :func:`resolve_dtype`).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ... or ``"auto"``.
        progress: Show progress bars when a named model is fetched or a GGUF converted.

    Returns:
        ``(model, tokenizer)``; the model is in eval mode on ``device``. A tokenizer without a
        pad token gets the EOS (or UNK) token as pad: pads are always masked, so the choice does
        not change any result.

    Raises:
        ModelNotAvailable: the model is neither a named model, a local path nor reachable on
            the hub; or a named model is not cached and cannot be fetched (the message names
            ``agentbench-poad model fetch NAME``). Its subclass ``ModelFetchError`` reports a
            failed fetch or conversion.
    """
    transformers = require("transformers", "train")
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    source = resolve_model(name_or_path, progress=progress)
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source)
        kwargs: dict[str, Any] = {"dtype": torch_dtype}
        if device.type == "cuda" and importlib.util.find_spec("accelerate") is not None:
            # Load the weights straight onto the GPU instead of staging a copy in host memory.
            kwargs["device_map"] = str(device)
        model = transformers.AutoModelForCausalLM.from_pretrained(source, **kwargs)
    except OSError as exc:
        raise ModelNotAvailable(
            f"could not load the causal LM {source!r} ({exc.__class__.__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}). Pass a local model "
            "directory, a .gguf file or a named model (`agentbench-poad model list`), make the "
            "Hugging Face hub reachable, or build a small random model for testing with "
            "`agentbench-poad model init tiny --out DIR` and pass DIR. (Offline, set "
            "HF_HUB_OFFLINE=1 to skip the hub's connection retries.)" + _name_hint(source)
        ) from exc
    if tokenizer.pad_token_id is None:
        fallback = tokenizer.eos_token if tokenizer.eos_token is not None else tokenizer.unk_token
        if fallback is None:
            raise ModelNotAvailable(
                f"tokenizer of {source!r} has no pad, EOS or UNK token; add a pad token to it "
                "(tokenizer.add_special_tokens({'pad_token': '<pad>'})) and save it again"
            )
        tokenizer.pad_token = fallback
    model.to(device)
    model.eval()
    return model, tokenizer


def _name_hint(source: str) -> str:
    """ " Did you mean ...?" for a hub-id-less string close to a named model's name."""
    if "/" in source:
        return ""
    import difflib

    close = difflib.get_close_matches(source, list(NAMED_MODELS), n=3, cutoff=0.6)
    return f" Did you mean the named model {' or '.join(map(repr, close))}?" if close else ""


def _byte_level_tokenizer():
    """A ``PreTrainedTokenizerFast``: one token per byte, BOS prepended, no merges."""
    tokenizers = require("tokenizers", "train")
    transformers = require("transformers", "train")
    from tokenizers import decoders, models, pre_tokenizers, processors

    pad, bos, eos = TINY_SPECIAL_TOKENS
    vocab = {token: i for i, token in enumerate(TINY_SPECIAL_TOKENS)}
    for symbol in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[symbol] = len(vocab)
    # BPE with an empty merge list is a pure byte tokenizer: every string round-trips and
    # ``tokens(prompt + text) == tokens(prompt) + tokens(text)``, which keeps the tests exact.
    tokenizer = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, 1)]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=bos, eos_token=eos, pad_token=pad, unk_token=None
    )


def init_tiny_model(
    out_dir: str | Path,
    *,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int | None = None,
    intermediate_size: int | None = None,
    max_positions: int = 2048,
    init_std: float = 0.02,
) -> Path:
    """Write a random-init Llama-style causal LM with a byte-level tokenizer to ``out_dir``.

    The directory loads with ``AutoModelForCausalLM.from_pretrained(out_dir)`` and
    ``AutoTokenizer.from_pretrained(out_dir)`` like any checkpoint (safetensors weights). Its
    attention projections are named ``q_proj``/``k_proj``/``v_proj``/``o_proj``, so the paper's
    LoRA settings apply unchanged. The weights are a function of ``seed`` and the sizes only:
    they are drawn from a private ``torch.Generator``, never from the global RNG.

    Args:
        out_dir: Directory to create (or overwrite files in).
        seed: Seed of the weight initialisation.
        hidden_size: Model width; must be divisible by ``num_heads``.
        num_layers: Number of decoder layers.
        num_heads: Attention heads.
        num_kv_heads: Key/value heads (grouped-query attention); defaults to ``num_heads``.
        intermediate_size: MLP width; defaults to ``2 * hidden_size``.
        max_positions: Longest sequence the rotary embedding is configured for.
        init_std: Standard deviation of the normal initialisation of every matrix.

    Returns:
        The directory, as a ``Path``.
    """
    torch = require("torch", "train")
    transformers = require("transformers", "train")
    if hidden_size % num_heads:
        raise ValueError(f"hidden_size {hidden_size} must be divisible by num_heads {num_heads}")
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads {num_heads} must be divisible by num_kv_heads {num_kv_heads}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = _byte_level_tokenizer()
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_positions,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
        initializer_range=init_std,
    )
    # transformers' own init draws from the global RNG; fork it so the caller's stream is left
    # exactly as it was (the weights are re-drawn below from a private generator anyway).
    with torch.random.fork_rng(devices=[]):
        model = transformers.LlamaForCausalLM(config)
    generator = torch.Generator().manual_seed(int(seed))
    with torch.no_grad():
        # Re-draw every parameter in a fixed (sorted-name) order from the private generator, so
        # the weights depend on the seed only, not on transformers' own init or the global RNG.
        for _name, param in sorted(model.named_parameters(), key=lambda item: item[0]):
            if param.ndim == 1:  # RMSNorm scales
                param.fill_(1.0)
            else:
                param.normal_(0.0, init_std, generator=generator)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def count_parameters(parameters: Sequence[Any]) -> int:
    """Number of scalar entries in a list of tensors."""
    return int(sum(math.prod(p.shape) for p in parameters))


__all__ = [
    "DTYPES",
    "LoraSettings",
    "ModelNotAvailable",
    "choose_dtype",
    "compute_summary",
    "count_parameters",
    "cuda_has_bf16",
    "device_problem",
    "init_tiny_model",
    "load_causal_lm",
    "resolve_device",
    "resolve_dtype",
]
