"""Reading one record file that may be hostile: bounded, regular, finite (issue 64, item 5).

A record store is a folder anyone can send files to (a pull request, a shared drive). Reading
one must end, in bounded time and memory, with either the decoded JSON or a
:class:`~agentbench_poad.leaderboard.schema.RecordError` that the store turns into its usual
skipped-record warning:

* **regular files only**: the file is opened without following a symlink and without blocking
  (a FIFO would wait forever for a writer), then checked on its descriptor to be a regular file
  (not ``/dev/zero``, a FIFO, a socket or a folder);
* **size**: at most :data:`MAX_RECORD_BYTES` are read (a larger file is refused unread);
* **numbers**: ``NaN``/``Infinity``, numbers that overflow to infinity (``1e999``) and integers
  of over :data:`MAX_INTEGER_DIGITS` digits (whose conversion costs quadratic time) are refused
  while parsing, before any conversion;
* **depth**: nesting deeper than :data:`MAX_DEPTH` arrays and objects is refused (the parser's
  own recursion limit included), so no later walk of the record can overflow the stack;
* **ids** (:func:`check_ids`): the record id, env id and agent name are made of a safe alphabet
  (:data:`SAFE_ID`), because they name files and reach HTML attributes and terminals.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentbench_poad.agents import SAFE_NAME
from agentbench_poad.leaderboard.schema import RecordError

#: Largest record file read (bytes). The biggest committed record is ~250 KB; a record keeps
#: every episode's summary, so thousands of episodes stay well under this.
MAX_RECORD_BYTES = 32 << 20
#: Deepest nesting of arrays and objects in a record (the schema's records nest about 7 deep;
#: ``config`` holds a run's configuration, which stays far under this).
MAX_DEPTH = 64
#: Most digits of one integer in a record (a seed or step count has at most 20).
MAX_INTEGER_DIGITS = 64
#: Ids that name files and reach pages and terminals: a letter or digit, then letters, digits,
#: ``.``, ``_`` or ``-``; at most 200 characters (a file name has 255 bytes, ``.json`` included).
SAFE_ID = SAFE_NAME
#: The ids :func:`check_ids` checks, by where they sit in a record.
ID_FIELDS = (("record_id",), ("env", "id"), ("agent", "name"))


class _Refused(ValueError):
    """A number or nesting the parser refuses (turned into a RecordError by the reader)."""


def _parse_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INTEGER_DIGITS:
        raise _Refused(f"an integer of {digits:,} digits (at most {MAX_INTEGER_DIGITS})")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"a number out of range ({text[:24]}); numbers must be finite")
    return value


def _parse_constant(name: str) -> float:
    raise _Refused(f"{name}, which is not a JSON number; numbers must be finite")


def _depth_over(value: Any, limit: int) -> bool:
    """Whether ``value`` nests arrays and objects deeper than ``limit`` (no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def parse_record_json(text: str | bytes, source: str) -> Any:
    """Decode a record's JSON under the number and depth rules of the module docstring.

    Raises:
        RecordError: malformed JSON, a refused number, or nesting too deep (naming ``source``).
    """
    try:
        data = json.loads(
            text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant
        )
    except json.JSONDecodeError as exc:
        raise RecordError(
            f"{source}: is not valid JSON ({exc.msg} at line {exc.lineno}); the file is corrupt "
            "-- delete it and re-create the record"
        ) from None
    except _Refused as exc:
        raise RecordError(
            f"{source}: holds {exc}; a record's numbers are finite and plain -- delete it and "
            "re-create the record"
        ) from None
    except RecursionError:
        raise RecordError(
            f"{source}: nests deeper than this reader goes; a record nests at most {MAX_DEPTH} "
            "levels -- delete it"
        ) from None
    except ValueError as exc:  # UnicodeDecodeError, and any number Python will not convert
        raise RecordError(f"{source}: cannot be decoded ({str(exc)[:120]}) -- delete it") from None
    if _depth_over(data, MAX_DEPTH):
        raise RecordError(
            f"{source}: nests arrays and objects deeper than {MAX_DEPTH} levels; a record "
            "nests about 7 -- delete it"
        )
    return data


def read_json_file(path: Path | str, max_bytes: int = MAX_RECORD_BYTES) -> Any:
    """The decoded JSON of the regular file ``path`` (not a symlink, at most ``max_bytes``).

    Raises:
        RecordError: the file cannot be opened, is not a regular file, is too large, or its
            JSON is refused (:func:`parse_record_json`).
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        why = "a symlink" if path.is_symlink() else exc.strerror
        raise RecordError(
            f"{path}: cannot be read ({why}); a record is a regular file -- remove it"
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RecordError(
                f"{path}: is not a regular file (a device, FIFO, socket or folder); a record "
                "is a regular file -- remove it"
            )
        if info.st_size > max_bytes:
            raise RecordError(
                f"{path}: is {info.st_size:,} bytes, over the {max_bytes:,} a record may have "
                "-- remove it"
            )
        with os.fdopen(os.dup(fd), "rb") as fh:
            raw = fh.read(max_bytes + 1)  # the size may have grown since fstat
    except OSError as exc:
        raise RecordError(f"{path}: cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if len(raw) > max_bytes:
        raise RecordError(f"{path}: is over the {max_bytes:,} bytes a record may have -- remove it")
    return parse_record_json(raw, str(path))


def check_ids(record: Mapping[str, Any], source: str = "record") -> None:
    """Refuse a record whose record id, env id or agent name is not a :data:`SAFE_ID`.

    Raises:
        RecordError: naming the field, the offending text (escaped) and the fix.
    """
    for keys in ID_FIELDS:
        value: Any = record
        for key in keys:
            value = value.get(key) if isinstance(value, Mapping) else None
        if isinstance(value, str) and SAFE_ID.fullmatch(value):
            continue
        field = ".".join(keys)
        shown = ascii(value)[:80]
        fix = (
            "give the agent a `name` of those characters (or `leaderboard add --run ... --name`)"
            if keys == ("agent", "name")
            else "re-create the record"
        )
        raise RecordError(
            f"{source}: {field} {shown} is not a safe id (a letter or digit, then letters, "
            "digits, '.', '_' or '-', at most 200 characters: ids name files and reach web "
            f"pages and terminals); {fix}"
        )
