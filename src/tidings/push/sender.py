"""The webhook worker's HTTP side: a thread with an event loop of its own.

A notification's POST (the target resolved again, the request written, the answer read) takes a
dozen steps of an event loop. On the runtime's loop, each step waits its turn behind everything
else ready there -- a burst of requests and turns makes every step of every POST wait for the
whole burst -- and httpx's own work adds to what the loop must get through. Here the POSTs run
on a loop that holds nothing else: their steps wait only for the interpreter, which threads
share by time slices, not by queue length. The runtime's loop keeps what needs the store (the
claims and acks); an attempt crosses to this loop and back once.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import TypeVar

import httpx

T = TypeVar("T")


class Sender:
    """An :class:`httpx.AsyncClient` on a thread of its own, until :meth:`close`."""

    def __init__(self, *, timeout_s: float,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._timeout_s = timeout_s
        self._transport = transport
        self._started = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: httpx.AsyncClient | None = None
        self._closing: asyncio.Event | None = None
        self._failure: BaseException | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._main, name="tidings-webhooks",
                                        daemon=True)

    def start(self) -> None:
        """Start the thread, and return once its client is open (blocking: call it off-loop).
        After :meth:`close`, it starts nothing."""
        with self._lock:
            if self._closed:
                return
            self._thread.start()
        self._started.wait()
        if self._failure is not None:
            raise self._failure

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._hold())
        except BaseException as exc:  # reported by start() when it never opened
            self._failure = exc
        finally:
            self._started.set()
            loop.close()

    async def _hold(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._closing = asyncio.Event()
        async with httpx.AsyncClient(follow_redirects=False, transport=self._transport,
                                     trust_env=False, timeout=self._timeout_s) as client:
            self._client = client
            self._started.set()
            await self._closing.wait()

    @property
    def running(self) -> bool:
        """Whether its thread runs."""
        return self._thread.is_alive()

    async def run(self, work: Callable[[httpx.AsyncClient], Awaitable[T]]) -> T:
        """``work(client)`` on the sender's loop; cancelled with the caller."""
        loop, client = self._loop, self._client
        if loop is None or client is None:
            raise RuntimeError("the sender is not started")

        async def bound() -> T:
            return await work(client)

        future: Future[T] = asyncio.run_coroutine_threadsafe(bound(), loop)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()
            raise

    def close(self) -> None:
        """Close the client and end the thread (blocking: call it off-loop). Idempotent; safe
        while :meth:`start` is still under way (it waits for the client to be open first)."""
        with self._lock:
            self._closed = True
            started = self._thread.ident is not None
        if not started:
            return
        self._started.wait()  # the loop and its closing event exist, or the thread ended
        loop, closing = self._loop, self._closing
        if loop is not None and closing is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(closing.set)
        self._thread.join()


__all__ = ("Sender",)
