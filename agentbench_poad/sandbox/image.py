"""Build the sandbox's runtime image: Python 3 with numpy, pandas and scikit-learn.

Two recipes, same result (``agentbench-poad-sandbox:<package version>``):

* **online** (a registry answers): a Dockerfile ``FROM python:3.11-slim`` plus ``pip install``;
* **offline** (no registry, e.g. CI here): ``debootstrap --variant=minbase`` of Debian bookworm
  with ``python3-numpy python3-pandas python3-sklearn`` from a Debian mirror, then
  ``docker import`` of the root file system. Needs root and ``debootstrap``.

The harness is not baked in: every run mounts a fresh copy, so an image stays valid across
harness changes of the same package version.
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import subprocess
import tarfile
import tempfile
from collections.abc import Callable

from agentbench_poad.sandbox.api import SandboxUnavailable
from agentbench_poad.version import __version__

IMAGE_REPOSITORY = "agentbench-poad-sandbox"
DEBIAN_SUITE = "bookworm"
DEBIAN_PACKAGES = ("python3", "python3-numpy", "python3-pandas", "python3-sklearn")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
PIP_PACKAGES = ("numpy", "pandas", "scikit-learn")
IMAGE_LABEL = "agentbench-poad.sandbox-image"
_CHANGES = [
    "ENV PATH=/usr/local/bin:/usr/bin:/bin",
    "ENV LANG=C.UTF-8",
    "WORKDIR /tmp",
    f"LABEL {IMAGE_LABEL}={__version__}",
]

Progress = Callable[[str], None]


def image_tag() -> str:
    """The image tag for this package version (override with ``AGENTBENCH_SANDBOX_IMAGE``)."""
    return os.environ.get("AGENTBENCH_SANDBOX_IMAGE") or f"{IMAGE_REPOSITORY}:{__version__}"


def _client(timeout: int = 600):
    import docker

    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means "no engine"
        raise SandboxUnavailable(
            f"no Docker engine answers ({type(exc).__name__}); install Docker (Debian: "
            f"apt-get install docker.io) and start it (dockerd or systemctl start docker)"
        ) from None
    return client


def image_exists(tag: str | None = None, client=None) -> bool:
    """Whether the engine has the image ``tag`` (default: :func:`image_tag`)."""
    import docker

    client = client or _client(timeout=30)
    try:
        client.images.get(tag or image_tag())
    except docker.errors.ImageNotFound:
        return False
    return True


def registry_reachable(host: str = "registry-1.docker.io", timeout: float = 3.0) -> bool:
    """A cheap probe: can we open a TCP connection to the Docker Hub registry?"""
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def build_image(
    mode: str = "auto",
    *,
    tag: str | None = None,
    mirror: str | None = None,
    progress: Progress = print,
) -> str:
    """Build the sandbox image and return its tag.

    Args:
        mode: ``"online"`` (Dockerfile from ``python:3.11-slim``), ``"offline"`` (debootstrap +
            ``docker import``) or ``"auto"`` (online when the registry answers).
        tag: Image tag; defaults to :func:`image_tag`.
        mirror: Debian mirror for the offline build (``AGENTBENCH_DEBIAN_MIRROR`` or
            deb.debian.org).
        progress: Called with one line per step.

    Raises:
        SandboxUnavailable: No engine, no debootstrap, not root (offline), or the build failed.
    """
    builders = {"online": _build_online, "offline": _build_offline}
    if mode not in (*builders, "auto"):
        raise ValueError(f"mode must be 'auto', 'online' or 'offline', got {mode!r}")
    tag = tag or image_tag()
    mirror = mirror or os.environ.get("AGENTBENCH_DEBIAN_MIRROR") or DEFAULT_MIRROR
    client = _client()
    if mode == "auto":
        mode = "offline"
        if registry_reachable():
            progress("registry reachable: online build")
            try:
                _build_online(client, tag, mirror, progress)
                mode = "online"
            except Exception as exc:  # noqa: BLE001 - e.g. a proxy that accepts but cannot pull
                progress(f"online build failed ({str(exc)[:200]}); falling back to offline")
        else:
            progress("registry unreachable: offline build")
        if mode == "offline":
            _build_offline(client, tag, mirror, progress)
    else:
        builders[mode](client, tag, mirror, progress)
    _smoke_test(client, tag, progress)
    return tag


def _build_online(client, tag: str, mirror: str, progress: Progress) -> None:
    dockerfile = (
        "FROM python:3.11-slim\n"
        f"RUN pip install --no-cache-dir {' '.join(PIP_PACKAGES)} && mkdir -p /sbx/in /sbx/out\n"
        + "".join(f"{line}\n" for line in _CHANGES)
    )
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        data = dockerfile.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    progress(f"building {tag} from python:3.11-slim (pip install {' '.join(PIP_PACKAGES)})")
    for chunk in client.api.build(
        fileobj=context, custom_context=True, tag=tag, rm=True, pull=True, decode=True
    ):
        if "error" in chunk:
            raise SandboxUnavailable(
                f"docker build failed: {chunk['error'].strip()}; try "
                f"`agentbench-poad sandbox build --offline`"
            )
        line = (chunk.get("stream") or chunk.get("status") or "").strip()
        if line:
            progress(line)


def _build_offline(client, tag: str, mirror: str, progress: Progress) -> None:
    debootstrap = shutil.which("debootstrap") or shutil.which("debootstrap", path="/usr/sbin")
    if debootstrap is None:
        raise SandboxUnavailable(
            "the offline build needs debootstrap (Debian/Ubuntu: apt-get "
            "install debootstrap), or use --online where a registry answers"
        )
    if os.geteuid() != 0:
        raise SandboxUnavailable(
            "the offline build runs debootstrap, which needs root: run "
            "`sudo agentbench-poad sandbox build --offline`, or --online"
        )
    work = tempfile.mkdtemp(prefix="abp-image-")
    try:
        rootfs = os.path.join(work, "rootfs")
        progress(
            f"debootstrap {DEBIAN_SUITE} (minbase + {', '.join(DEBIAN_PACKAGES)}) from "
            f"{mirror}; this takes a minute or two"
        )
        proc = subprocess.Popen(
            [
                debootstrap,
                "--variant=minbase",
                f"--include={','.join(DEBIAN_PACKAGES)}",
                DEBIAN_SUITE,
                rootfs,
                mirror,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        last: list[str] = []
        per_package = (
            "I: Retrieving",
            "I: Validating",
            "I: Extracting",
            "I: Unpacking",
            "I: Configuring",
        )
        counts = dict.fromkeys(per_package, 0)
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            last = (last + [line])[-20:]
            kind = next((k for k in per_package if line.startswith(k)), None)
            if kind is None:
                if line.startswith(("I: ", "W: ", "E: ")):
                    progress(line)
                continue
            # Hundreds of per-package lines: show one in 25 with a running count.
            counts[kind] += 1
            if counts[kind] % 25 == 1:
                progress(f"{kind[3:].lower()} packages: {counts[kind]} ({line[3:].strip()})")
        if proc.wait() != 0:
            raise SandboxUnavailable(
                "debootstrap failed (is the Debian mirror reachable? set "
                "AGENTBENCH_DEBIAN_MIRROR):\n" + "\n".join(last)
            )
        # Caches only make the image bigger; /sbx/* are the mount points of every run.
        for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(os.path.join(rootfs, sub), ignore_errors=True)
            os.makedirs(os.path.join(rootfs, sub), exist_ok=True)
        for sub in ("sbx/in", "sbx/out"):
            os.makedirs(os.path.join(rootfs, sub), mode=0o755, exist_ok=True)
        archive = os.path.join(work, "rootfs.tar")
        progress("packing the root file system")
        subprocess.run(["tar", "-C", rootfs, "--numeric-owner", "-cf", archive, "."], check=True)
        progress(f"docker import -> {tag}")
        repository, _, version = tag.rpartition(":")
        client.api.import_image_from_file(
            archive,
            repository=repository or tag,
            tag=version if repository else None,
            changes=_CHANGES,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _smoke_test(client, tag: str, progress: Progress) -> None:
    progress("checking the image (python3, numpy, pandas, sklearn)")
    check = (
        "import numpy, pandas, sklearn; print(f'numpy {numpy.__version__}, pandas "
        "{pandas.__version__}, scikit-learn {sklearn.__version__}')"
    )
    container = client.containers.create(
        tag, ["python3", "-I", "-c", check], network_mode="none", labels={IMAGE_LABEL: "smoke-test"}
    )
    try:
        container.start()
        code = container.wait(timeout=120).get("StatusCode")
        logs = container.logs().decode(errors="replace").strip()
    finally:
        container.remove(force=True)
    if code != 0:
        raise SandboxUnavailable(
            f"the built image {tag} cannot import numpy/pandas/sklearn: {logs[-500:]}"
        )
    progress(f"ok: {tag} ({logs})")
