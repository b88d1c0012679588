"""Where a key sits in a TOML text: the line of each table header and key, by dotted path.

tomllib gives line and column for a syntax error only; a validation error names a key path,
and this finds the line to point at by reading the text the way TOML lays it out (headers,
``key = value`` lines, dotted keys; lines inside multi-line strings are skipped).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

_HEADER = re.compile(r"^\s*\[\[?\s*(?P<path>[^\]\[]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"""^\s*(?P<path>(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')"""
                  r"""(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*=""")
_PART = re.compile(r"""[A-Za-z0-9_-]+|"([^"]*)"|'([^']*)'""")


def _parts(dotted: str) -> tuple[str, ...]:
    return tuple(m[1] if m[1] is not None else m[2] if m[2] is not None else m[0]
                 for m in _PART.finditer(dotted))


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Every table and key path the text writes, with the (1-based) line it first appears on."""
    found: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    in_string: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if in_string is not None:
            if line.count(in_string) % 2 == 1:
                in_string = None
            continue
        if header := _HEADER.match(line):
            table = _parts(header["path"])
            found.setdefault(table, number)
            continue
        if key := _KEY.match(line):
            path = (*table, *_parts(key["path"]))
            for end in range(len(table) + 1, len(path) + 1):
                found.setdefault(path[:end], number)
        for quotes in ('"""', "'''"):
            if line.count(quotes) % 2 == 1:
                in_string = quotes
                break
    return found


def line_of(lines: Mapping[tuple[str, ...], int], path: Sequence[str]) -> int | None:
    """The line of ``path``, or of its nearest enclosing table or key that the text writes."""
    for end in range(len(path), 0, -1):
        if (line := lines.get(tuple(path[:end]))) is not None:
            return line
    return None


def item_line(text: str, start: int, item: str) -> int:
    """The line of the string ``item`` in the array whose key is on line ``start`` (an array
    may span lines); ``start`` when it is not found there."""
    quoted = re.compile(rf"""(["']){re.escape(item)}\1""")
    for number, line in enumerate(text.splitlines()[start - 1:], start=start):
        if number > start and (_HEADER.match(line) or _KEY.match(line)):
            break
        if quoted.search(line):
            return number
    return start


def present_path(data: Any, loc: Sequence[str | int]) -> tuple[str, ...]:
    """The part of a pydantic error location that names keys of ``data`` (and one unknown key
    at its end), without the union tags pydantic adds."""
    path: list[str] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and isinstance(part, str):
            path.append(part)
            if part not in node:
                break
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            continue
    return tuple(path)


__all__ = ("item_line", "key_lines", "line_of", "present_path")
