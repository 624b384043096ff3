"""Where a generated action ends: one rule for the envs that declare it and the policy that
honours it (DataSciCoding's ``info["action_stop"]``, ``GenerationSettings.find_stop``)."""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["find_stop"]


def find_stop(
    text: str, stop_strings: Iterable[str], stop_patterns: Iterable[str], *, final: bool
) -> int | None:
    """Index in ``text`` of the first stop (a literal of ``stop_strings`` or a match of a regular
    expression of ``stop_patterns``), or None.

    A pattern match that reaches the end of ``text`` only counts when ``final`` is true:
    ``return\\b`` matches ``"...\\nreturn"`` but the next token could make it ``returned``.

    A pattern with a group named ``cut`` stops at the start of that group, not of the match: the
    rest of the match is context the rule needs to see (``\\A``-anchored patterns look at the
    action's first lines, since Python's ``re`` has no variable-width look-behind).
    """
    cut: int | None = None
    for stop in stop_strings:
        at = text.find(stop)
        if at >= 0 and (cut is None or at < cut):
            cut = at
    for pattern in stop_patterns:
        for match in re.finditer(pattern, text):
            if match.end() < len(text) or final:
                at = match.start("cut") if "cut" in match.re.groupindex else match.start()
                if cut is None or at < cut:
                    cut = at
                break
    return cut
