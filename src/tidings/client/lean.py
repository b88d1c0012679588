"""The client's most-made request -- a post, its answer read whole -- on a kept-alive HTTP/1.1
connection of its own, without httpx's layers.

httpx (through httpcore, h11 and anyio) spends about half a millisecond of the caller's CPU on
one small request and its answer; a turn of a scripted model costs the server about three. For
that one request, :class:`Lean` writes the request in one piece and parses the answer with
``httptools`` (the server's own parser, in C): a few tens of microseconds. Every other request,
and any post when the client was given a transport of its own or the environment names a
proxy, goes through httpx as before.

What it keeps of httpx's behaviour:

- connections are reused (HTTP/1.1 keep-alive) while the server allows it, one request at a
  time each, at most :data:`IDLE_KEPT` kept idle, none idle longer than :data:`IDLE_EXPIRY_S`
  (below the server's own keep-alive timeout, five seconds by default, so a connection is not
  reused just as the server drops it);
- TLS with the same verification as httpx's default (``https://``);
- a connection that failed, timed out, was cancelled mid-request or answered with
  ``Connection: close`` is closed, never reused; a failure is never retried (a post's outcome
  is then unknown, as over httpx).
"""

from __future__ import annotations

import asyncio
import select
import ssl
import time
from urllib.parse import urlsplit

import httptools

IDLE_KEPT = 20
"""Idle connections kept for reuse (httpx's default)."""
IDLE_EXPIRY_S = 4.0
"""An idle connection older than this is closed, not reused."""


class LeanError(ConnectionError):
    """The request failed on its way (refused, reset, closed early, an answer that is not
    HTTP, the time bound): its outcome is unknown."""


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: one request at a time, its answer parsed as it arrives."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.answer: asyncio.Future[None] | None = None
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.usable = True
        self.idle_since = 0.0

    # -- asyncio's side ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(f"the answer is not HTTP: {exc}")
            self.close()

    def eof_received(self) -> bool | None:
        self._fail("the server closed the connection")
        return None  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(str(exc) if exc is not None else "the connection was closed")

    # -- httptools' side -----------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.answer is None or self.answer.done():
            self.usable = False  # an answer no request asked for: the connection is not sound
            return
        if not self.parser.should_keep_alive():
            self.usable = False
        self.answer.set_result(None)

    # -- the pool's side -----------------------------------------------------------------------

    def send(self, request: bytes) -> asyncio.Future[None]:
        assert self.transport is not None
        self.status = 0
        self.headers = []
        self.body = []
        self.answer = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self.answer

    def idle_and_sound(self) -> bool:
        """Whether the idle connection can take a request: nothing has come on it since its
        last answer (the loop may not have run since a server closed it: its socket is then
        readable -- as httpcore checks before it reuses a connection)."""
        if not self.usable or self.transport is None or self.transport.is_closing():
            return False
        sock = self.transport.get_extra_info("socket")
        if sock is None:
            return False
        readable, _, _ = select.select([sock], [], [], 0)
        return not readable

    def _fail(self, why: str) -> None:
        self.usable = False
        if self.answer is not None and not self.answer.done():
            self.answer.set_exception(LeanError(why))

    def close(self) -> None:
        self.usable = False
        if self.transport is not None:
            self.transport.close()


class Lean:
    """Kept-alive connections to the service at ``url``, for requests sent and read whole."""

    def __init__(self, url: str, ssl_context: ssl.SSLContext | None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = (ssl_context or ssl.create_default_context()) if parts.scheme == "https" \
            else None
        self.prefix = parts.path.rstrip("/")
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.authority = host if parts.port is None else f"{host}:{parts.port}"
        self._idle: list[_Connection] = []
        self._busy: set[_Connection] = set()

    def head(self, method: str, target: str, headers: list[tuple[str, str]],
             length: int) -> bytes:
        """A request's head: ``target`` (path and query, already encoded) under the URL's own
        path. Raises ValueError for a name or value a head cannot carry."""
        lines = [f"{method} {self.prefix}{target} HTTP/1.1", f"Host: {self.authority}"]
        for name, value in headers:
            lines.append(f"{name}: {value}")
        lines.append(f"Content-Length: {length}")
        if any(c in line for line in lines for c in "\0\r\n"):
            raise ValueError("a header carries a line break")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def exchange(self, request: bytes, *, connect_s: float, answer_s: float
                       ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """Send ``request`` (head and body) and read its answer whole: the status, the headers
        and the body. Raises :class:`LeanError` when the outcome is unknown."""
        connection = self._take() or await self._connect(connect_s)
        self._busy.add(connection)
        try:
            async with asyncio.timeout(answer_s):
                await connection.send(request)
        except TimeoutError:
            connection.close()
            raise LeanError(f"no answer within {answer_s:g} s") from None
        except BaseException:
            connection.close()  # cancelled or failed mid-request: the connection is not sound
            raise
        finally:
            self._busy.discard(connection)
        answer = connection.status, connection.headers, b"".join(connection.body)
        self._give_back(connection)
        return answer

    def close(self) -> None:
        """Close every connection (one in use fails its request)."""
        for connection in [*self._idle, *self._busy]:
            connection.close()
        self._idle.clear()
        self._busy.clear()

    def _take(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if now - connection.idle_since < IDLE_EXPIRY_S and connection.idle_and_sound():
                return connection
            connection.close()
        return None

    def _give_back(self, connection: _Connection) -> None:
        if not connection.usable or len(self._idle) >= IDLE_KEPT:
            connection.close()
            return
        connection.idle_since = time.monotonic()
        self._idle.append(connection)

    async def _connect(self, seconds: float) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(seconds):
                _, connection = await loop.create_connection(
                    _Connection, self.host, self.port, ssl=self.ssl,
                    server_hostname=self.host if self.ssl is not None else None)
        except TimeoutError:
            raise LeanError(f"no connection within {seconds:g} s") from None
        except OSError as exc:
            raise LeanError(str(exc) or type(exc).__name__) from None
        return connection


__all__ = ("IDLE_EXPIRY_S", "IDLE_KEPT", "Lean", "LeanError")
