"""Content digests of model weights: what a record states to say which weights it was scored with.

* :func:`tensor_digest` -- the canonical digest ``safetensors-tensors-v1`` of the tensors stored in
  safetensors files: for each tensor in name order, its name, dtype and shape (comma-joined) each
  followed by a NUL byte, the data length as 8 little-endian bytes, then the raw (little-endian)
  data, all through one sha256. It is a digest of the state dict as stored, not of the files'
  bytes: sharding, the order of tensors inside a file and the files' ``__metadata__`` do not
  change it; any changed weight, dtype, shape or name does.
* :func:`weights_digest` -- that digest over every ``*.safetensors`` file of a model folder (a
  converted named model in the cache, or any Hugging Face model folder), cached per process by the
  files' size and modification time.
* :func:`file_sha256` -- the plain sha256 of a file (adapter files are hashed this way).

Used by the leaderboard's provenance (``agentbench_poad.leaderboard.provenance``); needs no torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentbench_poad.errors import AgentBenchError

#: The name of the canonical weight digest.
DIGEST_NAME = "safetensors-tensors-v1"

_CHUNK = 1 << 20
_digest_cache: dict[tuple[str, int, int], str] = {}


class WeightDigestError(AgentBenchError, ValueError):
    """A weight file is not safetensors, is truncated or stores a tensor twice."""


class MissingWeights(WeightDigestError):
    """A model folder holds no weight file."""


# -- digests -----------------------------------------------------------------------------------
def file_sha256(path: str | os.PathLike) -> str:
    """sha256 (hex) of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _safetensors_header(fh: Any, path: Path) -> tuple[dict[str, Any], int]:
    raw = fh.read(8)
    if len(raw) != 8:
        raise WeightDigestError(f"{path} is not a safetensors file (shorter than its header)")
    (size,) = struct.unpack("<Q", raw)
    try:
        header = json.loads(fh.read(size))
    except (ValueError, UnicodeDecodeError) as exc:
        raise WeightDigestError(f"{path} is not a safetensors file (unreadable header)") from exc
    header.pop("__metadata__", None)
    return header, 8 + size


def tensor_digest(files: Iterable[str | os.PathLike]) -> str:
    """Canonical sha256 of the tensors stored in safetensors ``files`` (see the module doc).

    For each tensor in name order: ``name``, ``dtype`` and ``shape`` (comma-joined) each followed
    by a NUL byte, the data length as 8 little-endian bytes, then the data.

    Raises:
        WeightDigestError: a file is not safetensors, or two files hold a tensor of the same name.
    """
    where: dict[str, tuple[Path, int, dict[str, Any]]] = {}
    for file in files:
        path = Path(file)
        with open(path, "rb") as fh:
            header, start = _safetensors_header(fh, path)
        for name, info in header.items():
            if name in where:
                raise WeightDigestError(
                    f"tensor {name!r} is stored twice ({where[name][0]}, {path})"
                )
            where[name] = (path, start, info)
    digest = hashlib.sha256()
    handles: dict[Path, Any] = {}
    try:
        for name in sorted(where):
            path, start, info = where[name]
            if path not in handles:
                handles[path] = open(path, "rb")  # noqa: SIM115 - closed in the finally
            fh = handles[path]
            begin, end = (int(v) for v in info["data_offsets"])
            shape = ",".join(str(int(d)) for d in info["shape"])
            digest.update(f"{name}\0{info['dtype']}\0{shape}\0".encode())
            digest.update(struct.pack("<Q", end - begin))
            fh.seek(start + begin)
            left = end - begin
            while left:
                chunk = fh.read(min(_CHUNK, left))
                if not chunk:
                    raise WeightDigestError(
                        f"{path} is truncated (tensor {name!r} ends past the file)"
                    )
                digest.update(chunk)
                left -= len(chunk)
    finally:
        for fh in handles.values():
            fh.close()
    return digest.hexdigest()


def weights_digest(model_dir: str | os.PathLike) -> tuple[str, list[str]]:
    """(canonical digest, safetensors file names) of a model folder; cached per file state.

    Raises:
        WeightDigestError: the folder holds no ``*.safetensors`` file (a missing weight file).
    """
    folder = Path(model_dir)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise MissingWeights(
            f"the base model folder {folder} holds no weights (no *.safetensors file); the "
            "weight file is missing -- fetch the model again (`agentbench-poad model fetch "
            "NAME --force`) or restore the folder"
        )
    key = (
        str(folder.resolve()),
        sum(f.stat().st_size for f in files),
        max(f.stat().st_mtime_ns for f in files),
    )
    if key not in _digest_cache:
        _digest_cache[key] = tensor_digest(files)
    return _digest_cache[key], [f.name for f in files]
