"""The model cache on disk: where it is, what a complete folder is, and how one is written.

``AGENTBENCH_POAD_MODELS`` names the model cache folder; otherwise it is
``$AGENTBENCH_POAD_CACHE/models`` when that variable is set, else ``~/.cache/agentbench-poad/models``
(:func:`default_cache_dir`). A folder is complete when its ``provenance.json`` (written last; read
with :func:`read_provenance`) has this cache format, the source's sha256 and every file it lists.

Every write goes to a scratch folder next to the target (:class:`_workspace`, ``<cache>/.tmp-*``)
that is renamed into place only when complete (:func:`_install`); concurrent fetches of one model
take turns on ``<cache>/.<name>.lock`` (:func:`_fetch_lock`). A full disk becomes
:class:`~agentbench_poad.models.errors.DiskFull` with a message that says what to do.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentbench_poad.models.errors import DiskFull, ModelFetchError
from agentbench_poad.models.named import get_named_model

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
    "OFFLINE_ENV_VARS",
    "PROVENANCE_FILE",
    "cache_root",
    "cached_gguf_dirs",
    "default_cache_dir",
    "downloads_allowed",
    "is_cached",
    "model_dir",
    "read_provenance",
]
