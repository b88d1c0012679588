"""The client's connections: httpx's own transport, each request leaving in one send.

httpx (through httpcore) writes a request's head and its body with a send each. With
``TCP_NODELAY`` -- which asyncio sets on every TCP connection -- each is a packet of its own,
and the server wakes twice per request: once to parse the head and wait, once for the body.
:class:`Coalescing` holds what is written until the connection is next read -- which httpcore
does only once the whole request is written -- and sends it then, in one piece.
"""

from __future__ import annotations

import contextlib
import ssl
import urllib.request
from typing import Any

import httpcore
import httpx


class Coalescing(httpcore.AsyncNetworkStream):
    """A connection whose writes wait for its next read (or its close) and go out together."""

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream
        self._pending: list[bytes] = []

    # httpcore's interface names its timeouts ``timeout``.
    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if buffer:
            self._pending.append(buffer)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            # As httpcore itself does when a write fails: a server may answer (a 413, a 401)
            # and close before it read the whole request; its answer is still read.
            with contextlib.suppress(httpcore.WriteError):
                await self._stream.write(data, timeout)
        return await self._stream.read(max_bytes, timeout)

    async def aclose(self) -> None:
        self._pending.clear()
        await self._stream.aclose()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None,  # noqa: ASYNC109
                        ) -> httpcore.AsyncNetworkStream:
        # Nothing is written before a handshake; the secured connection coalesces in turn.
        return Coalescing(await self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class CoalescingBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, its connections :class:`Coalescing`."""

    def __init__(self) -> None:
        self._backend = httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int,
                          timeout: float | None = None,  # noqa: ASYNC109
                          local_address: str | None = None,
                          socket_options: Any = None) -> httpcore.AsyncNetworkStream:
        return Coalescing(await self._backend.connect_tcp(
            host, port, timeout=timeout, local_address=local_address,
            socket_options=socket_options))

    async def connect_unix_socket(self, path: str,
                                  timeout: float | None = None,  # noqa: ASYNC109
                                  socket_options: Any = None) -> httpcore.AsyncNetworkStream:
        return Coalescing(await self._backend.connect_unix_socket(
            path, timeout=timeout, socket_options=socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


class Transport(httpx.AsyncHTTPTransport):
    """httpx's transport (HTTP/1.1, keep-alive, its default limits and TLS verification), its
    connections :class:`Coalescing`."""

    def __init__(self) -> None:
        context = httpx.create_ssl_context()
        self.ssl_context = context
        super().__init__(verify=context)
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=20,
                              keepalive_expiry=5.0)  # httpx's defaults
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=context, max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry, network_backend=CoalescingBackend(),
        )


def transport() -> httpx.AsyncBaseTransport | None:
    """The transport a :class:`~tidings.Client` uses: :class:`Transport` -- or, when the
    environment names a proxy, None: httpx's own, which honours it."""
    return None if urllib.request.getproxies() else Transport()


__all__ = ("Coalescing", "CoalescingBackend", "Transport", "transport")
