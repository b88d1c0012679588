"""A request's validation errors in the caller's words: the field path they sent.

pydantic locates an error by its own schema: ``body.profile.ProfileBody.model``, with a
union's branch (``ProfileBody``, ``str``) as a step, and an error for every branch tried. The
caller sent ``{"profile": {...}}`` and meant the branch their value's JSON type fits (an object:
the model; a string: the name), so only that branch's errors are told, at the path they wrote:
``profile.model: required``. A value that fits no branch is told what it may be instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

_WHERE = {"query": "query parameter", "path": "path parameter", "header": "header",
          "cookie": "cookie"}
_MISSING = frozenset({"missing", "missing_argument", "missing_keyword_only_argument"})
_WORDS = {"missing": "required", "extra_forbidden": "unknown field"}
_KINDS = (  # a union branch's tag -> the JSON type it takes
    (re.compile(r"str|constrained-str|literal\[['\"]|url|uuid|date|time"), "a string"),
    (re.compile(r"bool"), "true or false"),
    (re.compile(r"int|float|decimal|constrained-(int|float)"), "a number"),
    (re.compile(r"none"), "null"),
    (re.compile(r"list|tuple|set|frozenset|generator"), "an array"),
)
_WRAPPED = re.compile(r"function-(?:after|before|wrap|plain)\[[^,]*,\s*(.*)\]$")


def _kind_of_value(value: Any) -> str:
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if value is None:
        return "null"
    return "an array"


def _kind_of_tag(tag: str) -> str:
    """The JSON type a union branch takes: a model (or a dict) takes an object."""
    if (wrapped := _WRAPPED.match(tag)) is not None:
        return _kind_of_tag(wrapped[1])
    for pattern, kind in _KINDS:
        if pattern.match(tag):
            return kind
    return "an object"


def _sent(node: Any, part: str | int) -> bool:
    """Whether ``part`` names a field or an item of ``node`` as sent."""
    if isinstance(node, Mapping):
        return isinstance(part, str) and part in node
    return isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)


def _walk(error: Mapping[str, Any], node: Any, loc: Sequence[str | int],
          unions: dict[tuple[str | int, ...], list[str]]) -> tuple[str | int, ...] | None:
    """The path ``error`` has in what was sent, or None when it belongs to a union branch the
    value does not fit (``unions`` then learns the branches each union offered)."""
    path: list[str | int] = []
    for index, part in enumerate(loc):
        if _sent(node, part):
            path.append(part)
            node = node[part]
        elif isinstance(part, int) or (index == len(loc) - 1
                                       and error.get("type") in _MISSING):
            path.append(part)  # a missing field's name
        else:  # a union's branch
            kinds = unions.setdefault(tuple(path), [])
            kind = _kind_of_tag(str(part))
            if kind not in kinds:
                kinds.append(kind)
            if kind != _kind_of_value(node):
                return None
    return tuple(path)


def _message(error: Mapping[str, Any]) -> str:
    kind = str(error.get("type", ""))
    return _WORDS.get("missing" if kind in _MISSING else kind, str(error.get("msg", "")))


def _name(path: Sequence[str | int]) -> str:
    return ".".join(map(str, path)) or "the body"


def readable(raw: Sequence[Mapping[str, Any]], body: Any) -> list[str]:
    """``field.path: what is wrong`` for each error, as the caller wrote the fields."""
    said: list[str] = []
    unions: dict[tuple[str | int, ...], list[str]] = {}
    for error in raw:
        loc = list(error.get("loc", ()))
        where = loc.pop(0) if loc and loc[0] in (*_WHERE, "body") else "body"
        if where != "body":
            said.append(f"{_name(loc)} ({_WHERE[str(where)]}): {_message(error)}")
            continue
        path = _walk(error, body, loc, unions)
        if path is not None:
            said.append(f"{_name(path)}: {_message(error)}")
    for path, kinds in unions.items():
        named = _name(path)
        if not any(s.startswith(f"{named}:") or s.startswith(f"{named}.") for s in said):
            said.append(f"{named}: must be {' or '.join(kinds)}")
    return list(dict.fromkeys(said))


__all__ = ("readable",)
