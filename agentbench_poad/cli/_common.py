"""Helpers shared by the command modules."""

from __future__ import annotations

import argparse


def add_command(subparsers, name: str, help: str, description: str | None = None):  # noqa: A002
    """Add a sub-command whose ``--help`` shows defaults and keeps paragraph breaks."""
    from agentbench_poad.cli import _Formatter

    return subparsers.add_parser(
        name, help=help, description=description or help, formatter_class=_Formatter
    )


def die(message: str, code: int = 2) -> int:
    """Print an error to stderr and return the exit code (``return die(...)`` in a command)."""
    import sys

    print(f"agentbench-poad: error: {message}", file=sys.stderr)
    return code


__all__ = ["add_command", "argparse", "die"]
