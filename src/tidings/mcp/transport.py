"""How tidings reaches one MCP server: the SDK's transport (a stdio subprocess, or a
streamable HTTP session), its read side watched, and how tidings introduces itself.

The end of what the server sends (a subprocess that exited, a stream that closed) is told to
the caller at once, so a connection is known lost without waiting for a call to find it; an
HTTP server's 401 or 403 (or an OAuth authorization that failed) is told as a refusal (see
:mod:`tidings.mcp.oauth`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from importlib.metadata import PackageNotFoundError, version
from types import TracebackType
from typing import Any

from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.message import SessionMessage
from mcp_types import Implementation

from tidings.mcp import oauth
from tidings.mcp.declaration import MCPServer

RESULT_BOUND = 2 * 1024 * 1024
"""The largest result (UTF-8 text) that arrives whole: a result envelope's bound."""
SSE_EVENT_LIMIT = 8 * RESULT_BOUND
"""What one server-sent event may carry: a result of ``RESULT_BOUND`` bytes of text as JSON,
escaped (``\\uXXXX`` for every character at worst is six bytes), with room to spare. The SDK's
own default (1 MiB) dropped the whole connection for a larger result."""


def client_info() -> Implementation:
    """How tidings introduces itself to a server: ``tidings`` and its version."""
    try:
        own = version("tidings")
    except PackageNotFoundError:  # run from a checkout that was not installed
        own = "0"
    return Implementation(name="tidings", version=own)


@contextlib.asynccontextmanager
async def watched(server: MCPServer, lose: Callable[[str], None],
                  refuse: Callable[[int, str], None],
                  tokens: oauth.SealedTokens | None = None) -> AsyncIterator[Any]:
    """The SDK's transport for ``server``, its read side watched: the end of what the server
    sends (a subprocess that exited, a stream that closed) marks the connection lost, and an
    HTTP server's 401 or 403 (or an OAuth authorization that failed) marks it refused."""
    async with contextlib.AsyncExitStack() as stack:
        if server.url is not None:
            http = await stack.enter_async_context(create_mcp_http_client(
                headers=dict(server.headers) or None,
                auth=oauth.Guard(refuse, None if tokens is None else oauth.provider(tokens))))
            transport: Any = streamable_http_client(server.url, http_client=http,
                                                    max_sse_event_size=SSE_EVENT_LIMIT)
        else:
            transport = stdio_client(StdioServerParameters(
                command=server.command[0], args=list(server.command[1:]),
                env=dict(server.env) or None, cwd=server.cwd))
        read, write = await stack.enter_async_context(transport)
        yield _WatchedRead(read, lambda: lose("the server closed the connection")), write


class _WatchedRead:
    """A read stream that says when it ends."""

    def __init__(self, inner: Any, ended: Any) -> None:
        self._inner = inner
        self._ended = ended

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)  # ``last_context`` and the like

    async def receive(self) -> SessionMessage | Exception:
        try:
            item: SessionMessage | Exception = await self._inner.receive()
        except Exception:
            self._ended()
            raise
        return item

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            item: SessionMessage | Exception = await self._inner.__anext__()
        except (StopAsyncIteration, Exception):
            self._ended()
            raise
        return item

    async def __aenter__(self) -> _WatchedRead:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc_val: BaseException | None, exc_tb: TracebackType | None) -> None:
        await self.aclose()


def describe(exc: BaseException) -> str:
    """What broke a connection, in one line (a group's first exception)."""
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return describe(exc.exceptions[0])
    if isinstance(exc, TimeoutError):
        return "no answer within the connect timeout"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]


__all__ = ("RESULT_BOUND", "SSE_EVENT_LIMIT", "client_info", "describe", "watched")
