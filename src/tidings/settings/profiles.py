"""A config file's profiles, checked against what the file (and the host) configures.

A profile that names a model or a tool nobody configured would start fine and fail only when a
conversation is opened with it, deep in a request; the file is refused at start instead, at the
line that names it.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from typing import NoReturn, Protocol

from tidings.settings.lines import item_line, line_of
from tidings.settings.schema import ProfileTable
from tidings.tools.builtin import BUILTIN_TOOLS


class FailAt(Protocol):
    def __call__(self, line: int | None, message: str) -> NoReturn: ...


def _q(name: str) -> str:
    """A name as the file writes it: in double quotes."""
    return f'"{name}"'


def _known(names: Collection[str]) -> str:
    return ", ".join(names) or "none"


def _hint(name: str, names: Collection[str]) -> str:
    close = difflib.get_close_matches(name, list(names), n=1)
    return f"did you mean {_q(close[0])}? " if close else ""


def check_profiles(
    profiles: Mapping[str, ProfileTable], *, models: Collection[str], tools: Collection[str],
    mcp_servers: Collection[str], text: str, lines: Mapping[tuple[str, ...], int],
    fail: FailAt,
) -> None:
    """Refuse the first profile naming a model or a tool that is not configured: a model is
    a ``[models.<alias>]`` table; a tool is one of ``tools`` (the file's and the host's), a
    built-in one, or ``<server>.<tool>`` of a declared MCP server (whose tools are listed only
    once it runs)."""
    offered = [*tools, *(t for t in BUILTIN_TOOLS if t not in tools)]
    patterns = [f"{server}.*" for server in mcp_servers]
    for name, profile in profiles.items():
        key = ("profiles", name, "model" if profile.model else "models")
        for alias in profile.aliases:
            if alias not in models:
                fail(item_line(text, line_of(lines, key) or 1, alias),
                     f"profile {_q(name)} names model {_q(alias)}, which is not configured "
                     f"({_hint(alias, models)}known: {_known(sorted(models))})")
        for tool in profile.tools:
            server, dot, _ = tool.partition(".")
            if tool in offered or (dot and server in mcp_servers):
                continue
            fail(item_line(text, line_of(lines, ("profiles", name, "tools")) or 1, tool),
                 f"profile {_q(name)} names tool {_q(tool)}, which is not configured "
                 f"({_hint(tool, offered)}known: {_known([*offered, *patterns])})")
        for tool in profile.background:
            if tool not in profile.tools:
                fail(item_line(text, line_of(lines, ("profiles", name, "background")) or 1,
                               tool),
                     f"profile {_q(name)} runs tool {_q(tool)} in the background, but its tools "
                     f"do not include it (its tools: {_known(profile.tools)})")


__all__ = ("check_profiles",)
