"""An MCP server a runtime connects to: a command it starts (stdio) or a URL (streamable HTTP)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from tidings.errors import InvalidInputError

_SERVER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")


@dataclass(frozen=True, slots=True, init=False)
class MCPServer:
    """An MCP server declared for a runtime; its tools are named ``<name>.<tool>``.

    Either ``command`` (a program and its arguments, started as a subprocess spoken to over
    stdin/stdout, with ``args`` appended, ``env`` merged over a minimal environment and
    ``cwd``), or ``url`` (a streamable HTTP endpoint, sent ``headers``). ``timeout`` bounds
    each tool call, ``connect_timeout`` each connection (start and listing); a lost
    connection is tried again after a capped, jittered backoff from ``reconnect_base`` to
    ``reconnect_cap``.
    """

    name: str
    command: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str | None
    url: str | None
    headers: Mapping[str, str]
    timeout: timedelta
    connect_timeout: timedelta
    reconnect_base: timedelta
    reconnect_cap: timedelta
    task_ttl: timedelta
    task_poll: timedelta

    def __init__(
        self, name: str, *, command: str | Sequence[str] | None = None,
        args: Sequence[str] = (), env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None, url: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: timedelta = timedelta(seconds=60),
        connect_timeout: timedelta = timedelta(seconds=30),
        reconnect_base: timedelta = timedelta(milliseconds=200),
        reconnect_cap: timedelta = timedelta(seconds=30),
        task_ttl: timedelta = timedelta(days=1),
        task_poll: timedelta = timedelta(seconds=5),
    ) -> None:
        if not isinstance(name, str) or _SERVER_NAME.fullmatch(name) is None:
            raise InvalidInputError(
                f"an MCP server's name must be 1-64 letters, digits, '_' or '-', starting with "
                f"a letter (its tools are named '<server>.<tool>'); got {name!r}")
        program = (command,) if isinstance(command, str) else tuple(command or ())
        program += tuple(args)
        if bool(program) == bool(url):
            raise InvalidInputError(
                f"MCP server {name!r} needs exactly one of command (stdio) or url (HTTP)")
        if url is not None and not url.startswith(("http://", "https://")):
            raise InvalidInputError(f"MCP server {name!r}: url must be http(s), got {url!r}")
        for what, value in (("timeout", timeout), ("connect_timeout", connect_timeout),
                            ("reconnect_base", reconnect_base), ("task_ttl", task_ttl),
                            ("task_poll", task_poll)):
            if value <= timedelta(0):
                raise InvalidInputError(f"MCP server {name!r}: {what} must be positive")
        if reconnect_cap < reconnect_base:
            raise InvalidInputError(
                f"MCP server {name!r}: reconnect_cap must be at least reconnect_base")
        set_ = object.__setattr__
        set_(self, "name", name)
        set_(self, "command", program)
        set_(self, "env", dict(env or {}))
        set_(self, "cwd", None if cwd is None else str(cwd))
        set_(self, "url", url)
        set_(self, "headers", dict(headers or {}))
        set_(self, "timeout", timeout)
        set_(self, "connect_timeout", connect_timeout)
        set_(self, "reconnect_base", reconnect_base)
        set_(self, "reconnect_cap", reconnect_cap)
        set_(self, "task_ttl", task_ttl)
        set_(self, "task_poll", task_poll)

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "http" if self.url else "stdio"


__all__ = ("MCPServer",)
