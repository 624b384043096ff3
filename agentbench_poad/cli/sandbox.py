"""``agentbench-poad sandbox build|status|run``: the code-execution sandbox."""

from __future__ import annotations

import argparse

from agentbench_poad.cli._common import add_command, check_at_least, check_file, die, first_error


def add_parser(subparsers) -> None:
    p = add_command(
        subparsers,
        "sandbox",
        "build and inspect the sandbox that runs model-written code",
        "Model-written code (DataSciCoding) runs in a sandbox: a hardened Docker container\n"
        "(default) or, where no engine runs, a weaker namespaced process. See docs/sandbox.md.",
    )
    sub = p.add_subparsers(title="sandbox commands", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])

    b = add_command(
        sub,
        "build",
        "build the sandbox image (Python 3, numpy, pandas, scikit-learn)",
        "Build agentbench-poad-sandbox:<version>. Online: a Dockerfile from python:3.11-slim\n"
        "plus pip install. Offline: debootstrap a minimal Debian bookworm with Debian's python3\n"
        "packages and `docker import` it (needs root and debootstrap; about two minutes).",
    )
    # SUPPRESS keeps the help free of "(default: ...)" noise; the defaults live in set_defaults.
    b.set_defaults(mode="auto", tag=None, mirror=None)
    mode = b.add_mutually_exclusive_group()
    mode.add_argument(
        "--offline",
        dest="mode",
        action="store_const",
        const="offline",
        default=argparse.SUPPRESS,
        help="debootstrap + docker import (no registry needed)",
    )
    mode.add_argument(
        "--online",
        dest="mode",
        action="store_const",
        const="online",
        default=argparse.SUPPRESS,
        help="Dockerfile from python:3.11-slim (needs a registry)",
    )
    mode.add_argument(
        "--auto",
        dest="mode",
        action="store_const",
        const="auto",
        default=argparse.SUPPRESS,
        help="online when the registry answers, else offline (the default)",
    )
    b.add_argument(
        "--tag",
        default=argparse.SUPPRESS,
        help="image tag; agentbench-poad-sandbox:<version> if omitted",
    )
    b.add_argument(
        "--mirror",
        default=argparse.SUPPRESS,
        help="Debian mirror for --offline; deb.debian.org if omitted",
    )
    b.add_argument("--force", action="store_true", help="rebuild even if the image exists")
    b.set_defaults(func=run_build)

    s = add_command(sub, "status", "say which sandbox backends are usable here and why not")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=run_status)

    r = add_command(
        sub,
        "run",
        "run a Python file's function in the sandbox (a smoke test)",
        "Run FUNCTION from FILE in the sandbox with no inputs and print the result summary.",
    )
    r.add_argument("file", help="a Python source file")
    r.add_argument("function", help="function to call; it must return a numpy array")
    r.add_argument("--backend", default="auto", choices=["auto", "docker", "process"])
    r.add_argument("--timeout", type=float, default=30.0, help="wall-time limit in seconds")
    r.add_argument("--memory-mb", type=int, default=2048, help="memory limit in MiB")
    r.set_defaults(func=run_run)


def run_build(args: argparse.Namespace) -> int:
    from agentbench_poad.sandbox.api import SandboxUnavailable
    from agentbench_poad.sandbox.image import build_image, image_exists, image_tag

    tag = args.tag or image_tag()
    try:
        if not args.force and image_exists(tag):
            print(f"{tag} exists already (use --force to rebuild)")
            return 0
        build_image(
            args.mode, tag=tag, mirror=args.mirror, progress=lambda line: print(line, flush=True)
        )
    except SandboxUnavailable as exc:
        return die(str(exc))
    return 0


def run_status(args: argparse.Namespace) -> int:
    import json

    from agentbench_poad.sandbox import sandbox_status

    status = sandbox_status()
    print(json.dumps(status, indent=2) if args.json else status)
    return 0


def run_run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from agentbench_poad.sandbox import Limits, SandboxUnavailable, run_code

    error = first_error(
        check_file(args.file, "FILE"),
        None if args.function.isidentifier() else f"{args.function!r} is not a function name",
        None if args.timeout > 0 else f"--timeout must be > 0, got {args.timeout:g}",
        check_at_least(args.memory_mb, 16, "--memory-mb"),
    )
    if error:  # before any container starts
        return die(error)
    try:
        source = Path(args.file).read_text(encoding="utf-8")
    except OSError as exc:
        return die(f"cannot read {args.file}: {exc.strerror}")
    try:
        result = run_code(
            source,
            args.function,
            {},
            backend=args.backend,
            limits=Limits(wall_time_s=args.timeout, memory_mb=args.memory_mb),
        )
    except SandboxUnavailable as exc:
        return die(str(exc))
    print(f"backend: {result.backend}  duration: {result.duration_s:.2f} s")
    print(f"result: {'ok' if result.ok else result.category.value}: {result.message}")
    for name, array in result.outputs.items():
        print(f"  {name}: {array.dtype} {array.shape}")
    if result.traceback_tail:
        print(result.traceback_tail.rstrip())
    if result.stdout_tail:
        print("--- stdout (tail)\n" + result.stdout_tail.rstrip())
    if result.stderr_tail:
        print("--- stderr (tail)\n" + result.stderr_tail.rstrip())
    return 0 if result.ok else 1
