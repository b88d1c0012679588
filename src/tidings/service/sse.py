"""The event feed over Server-Sent Events (A2, M15, B1).

The feed is :meth:`Runtime.watch <tidings.runtime.root.Runtime.watch>` on the wire. Each journal
row is one SSE event: ``id`` is its sequence, ``event`` its type, ``data`` its JSON. Live
events (``message_delta``, ``message_discarded``: an answer being written) have the same JSON
with ``"seq": null`` and no ``id``, so a client's ``Last-Event-ID`` stays the last committed
sequence. A client resumes with ``Last-Event-ID`` (or ``?after=``) and gets every row after
that sequence, once -- the journal's sequence is gap-free and commit-ordered per
conversation, so "after the last id I saw" is the whole contract, across reconnects and
server restarts alike -- then the answer in progress from where it is now, then the rest.

Keep-alive pings and disconnect detection are sse-starlette's. When the server shuts down,
open feeds end at once (:meth:`Feeds.close`, or sse-starlette's word that uvicorn is stopping,
for an app mounted in another) so a graceful shutdown does not wait on them; the
client reconnects to the next server with its last id. A feed ends by returning, so its
response is completed (the last chunk is sent): sse-starlette, which also watches for the
server's exit, waits ``SHUTDOWN_GRACE_S`` for that before it cancels a feed -- without the
grace it cancelled every feed that was inside a journal read at that moment, and the client
saw a broken response (and the server logged an error for each).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator
from datetime import timedelta

import anyio
from sse_starlette import ServerSentEvent

from tidings.feed import Watch
from tidings.runtime.root import Runtime
from tidings.service.schemas import EventOut
from tidings.types import FeedEvent

SHUTDOWN_GRACE_S = 3.0
"""How long a feed may take to end by itself once the server stops (less than the server's
graceful-shutdown timeout), before sse-starlette cancels it."""


class Feeds:
    """The open feeds of one app, and the signal that ends them."""

    def __init__(self, *, ping: timedelta) -> None:
        self.ping_s = ping.total_seconds()
        self._closing = asyncio.Event()
        self._open: set[Watch] = set()

    def open(self) -> None:
        """Let feeds run (a server starting, on its own event loop)."""
        self._closing = asyncio.Event()

    def close(self) -> None:
        """End every open feed (a server shutting down)."""
        self._closing.set()
        for watch in list(self._open):
            watch.close()

    @property
    def closing(self) -> bool:
        return self._closing.is_set()

    def track(self, watch: Watch) -> None:
        self._open.add(watch)
        if self.closing:
            watch.close()

    def forget(self, watch: Watch) -> None:
        self._open.discard(watch)


def encode(event: EventOut) -> ServerSentEvent:
    """A journal event with its sequence as the SSE id; a live one without an id."""
    return ServerSentEvent(id=None if event.seq is None else str(event.seq), event=event.type,
                           data=event.model_dump_json())


_ENCODED: OrderedDict[int, tuple[FeedEvent, bytes]] = OrderedDict()
_ENCODED_LIMIT = 1_024


def _encoded(event: FeedEvent) -> bytes:
    """The event's SSE bytes, encoded once for every watcher that is served the same event
    (keyed by identity; the entry holds the event, so its id is not reused meanwhile)."""
    key = id(event)
    hit = _ENCODED.get(key)
    if hit is not None and hit[0] is event:
        return hit[1]
    data = encode(EventOut.of(event)).encode()
    _ENCODED[key] = (event, data)
    if len(_ENCODED) > _ENCODED_LIMIT:
        _ENCODED.popitem(last=False)
    return data


async def _close_on(shutdown: anyio.Event, watch: Watch) -> None:
    await shutdown.wait()
    watch.close()


async def feed(
    runtime: Runtime, feeds: Feeds, conversation_id: str, *, owner: str | None, after: int,
    shutdown: anyio.Event | None = None,
) -> AsyncIterator[bytes]:
    """The conversation's feed after ``after`` until the conversation is gone, the client
    leaves (the response cancels this) or the server shuts down. The route checked the owner
    before answering 200.

    ``shutdown`` is sse-starlette's signal that the server (any uvicorn, not only
    :class:`~tidings.service.Server`) began to stop: the feed then ends by itself, a whole
    response, as :meth:`Feeds.close` makes it -- an app mounted in another has no other word
    of it before its connections are waited for."""
    watch = runtime.watch(conversation_id, after_seq=after, owner=owner)
    feeds.track(watch)
    closer = (None if shutdown is None
              else asyncio.ensure_future(_close_on(shutdown, watch)))
    try:
        event: FeedEvent
        async for event in watch:
            # What else is ready goes in the same write: one send for a watcher catching up.
            yield b"".join(_encoded(e) for e in (event, *watch.ready_now()))
    finally:
        if closer is not None:
            closer.cancel()
        feeds.forget(watch)
        await watch.aclose()


__all__ = ("SHUTDOWN_GRACE_S", "Feeds", "encode", "feed")
