"""The ``agentbench-poad`` command line.

Each command group lives in its own module of this package and exposes
``add_parser(subparsers)``, which adds its sub-parser(s) and sets ``func`` to a callable taking
the parsed ``argparse.Namespace`` and returning an exit code. Heavy imports (torch, docker)
happen inside those callables, so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import textwrap
from collections.abc import Sequence

from agentbench_poad.version import __version__

#: Command modules, in the order their commands appear in ``--help``.
COMMAND_MODULES = (
    "quickstart",
    "envs",
    "train",
    "evaluate",
    "study",
    "leaderboard",
    "data",
    "sandbox",
    "model",
    "warmstart",
    "serve",
)


class _Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Keeps paragraph breaks; shows a default unless the help already says it or it is None."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        if "default" in help_text.lower() or action.default in (None, argparse.SUPPRESS):
            return help_text
        return super()._get_help_string(action)

    def _split_lines(self, text: str, width: int) -> list[str]:
        # argparse's wrapping, but never inside a hyphenated name (archer-adrl, smollm2-135m):
        # users copy those from the help.
        text = self._whitespace_matcher.sub(" ", text).strip()
        return textwrap.wrap(text, width, break_on_hyphens=False)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentbench-poad",
        description=(
            "Benchmark LLM agents trained with RL on text environments (Overcooked, "
            "VirtualHome, DataSciCoding) against POAD, NTPO and TWOSOME."
        ),
        epilog="Run `agentbench-poad COMMAND --help` for the options of a command.",
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"agentbench-poad {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for name in COMMAND_MODULES:
        qualified = f"agentbench_poad.cli.{name}"
        try:
            module = importlib.import_module(qualified)
        except ModuleNotFoundError as exc:
            if exc.name == qualified:  # this command group is not part of this build
                continue
            raise
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
