"""``tidings mcp login``: a person authorizes tidings for an MCP server behind OAuth, once.

The authorization code grant needs a browser and a person; a runtime has neither. The login
prints the authorization URL, listens on the loopback redirect URI of the server's declaration
for the code the authorization server sends back, exchanges it (PKCE, through the SDK's OAuth
client) and keeps the tokens sealed under the master key in the database, where a runtime on
that database finds them and refreshes them as they expire.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import AuthorizationCodeResult

from tidings.errors import InvalidInputError
from tidings.mcp.declaration import MCPServer
from tidings.mcp.oauth import SealedTokens, code_from, provider
from tidings.records.results import MasterKey
from tidings.store import open_store

_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_PAGE = (b"HTTP/1.1 200 OK\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
         b"\r\ntidings: authorized. You may close this page.\n")
_NOT_HERE = b"HTTP/1.1 404 Not Found\r\nconnection: close\r\n\r\n"


async def login(server: MCPServer, database: str, master_key: MasterKey, *,
                say: Callable[[str], None],
                within: timedelta = timedelta(minutes=5)) -> int:
    """Authorize tidings for ``server`` and keep its tokens in ``database``; how many tools
    the server then lists. ``say`` is told the URL to open; ``within`` bounds the wait."""
    oauth = server.oauth
    if oauth is None or server.url is None:
        raise InvalidInputError(f"MCP server {server.name!r} is not declared with oauth")
    if oauth.grant != "authorization_code":
        raise InvalidInputError(f"MCP server {server.name!r} uses the {oauth.grant} grant: "
                                f"it needs no login")
    where = urlsplit(oauth.redirect_uri)
    if where.scheme != "http" or where.hostname not in _LOOPBACK or where.port is None:
        raise InvalidInputError(
            f"MCP server {server.name!r}: a login listens on its redirect_uri, which must be "
            f"http on a loopback address with a port (got {oauth.redirect_uri!r})")
    store = await open_store(database)
    try:
        tokens = SealedTokens(server, store, lambda: master_key)
        await tokens.clear_tokens()  # a login starts from none (the registration is kept)
        async with _redirect_listener(where.hostname or "", where.port,
                                      where.path or "/") as received:
            async def redirect(url: str) -> None:
                say(url)

            async def callback() -> AuthorizationCodeResult:
                async with asyncio.timeout(within.total_seconds()):
                    return code_from(await received)

            auth = provider(tokens, redirect=redirect, callback=callback)
            http = create_mcp_http_client(headers=dict(server.headers) or None, auth=auth)
            async with http, Client(streamable_http_client(server.url, http_client=http),
                                    cache=None) as client:
                listed = await client.list_tools()
        return len(listed.tools)
    finally:
        await store.close()


@contextlib.asynccontextmanager
async def _redirect_listener(host: str, port: int,
                             path: str) -> AsyncIterator[asyncio.Future[str]]:
    """Listens on ``host:port`` for the browser's request to ``path``: the URL it asked for
    (with the code, or the error) is the future's result."""
    received: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = (await reader.readline()).decode("latin-1").split()
            while (await reader.readline()).strip():  # the headers: not needed
                pass
            target = line[1] if len(line) >= 2 and line[0] == "GET" else ""
            here = urlsplit(target).path == path
            writer.write(_PAGE if here else _NOT_HERE)
            await writer.drain()
            if here and not received.done():
                received.set_result(target)
        except (OSError, ValueError, IndexError):
            pass
        finally:
            writer.close()

    listener: Any = await asyncio.start_server(answer, host, port)
    try:
        yield received
    finally:
        listener.close()
        await listener.wait_closed()


__all__ = ("login",)
