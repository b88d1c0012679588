"""The event feed over Server-Sent Events (A2, M15).

Each journal row is one SSE event: ``id`` is its sequence, ``event`` its type, ``data`` its
JSON. A client resumes with ``Last-Event-ID`` (or ``?after=``) and gets every row after that
sequence, once: the journal's sequence is gap-free and commit-ordered per conversation, so
"after the last id I saw" is the whole contract -- across reconnects and server restarts alike,
since the position lives in the database and in the client, never in the server.

The feed first sends everything after the given sequence, then polls the journal every
``poll``; keep-alive pings and disconnect detection are sse-starlette's. When the server shuts
down, open feeds end at once (:meth:`Feeds.close`) so a graceful shutdown does not wait on
them; the client reconnects to the next server with its last id. A feed ends by returning, so
its response is completed (the last chunk is sent): sse-starlette, which also watches for the
server's exit, waits ``SHUTDOWN_GRACE_S`` for that before it cancels a feed -- without the
grace it cancelled every feed that was inside a journal read at that moment, and the client
saw a broken response (and the server logged an error for each).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import timedelta

from sse_starlette import ServerSentEvent

from tidings.errors import StoreError, UnknownConversationError
from tidings.runtime import Runtime
from tidings.service.schemas import EventOut

log = logging.getLogger("tidings.service.sse")

SHUTDOWN_GRACE_S = 3.0
"""How long a feed may take to end by itself once the server stops (less than the server's
graceful-shutdown timeout), before sse-starlette cancels it."""


class Feeds:
    """The open feeds of one app: how often they poll, and the signal that ends them."""

    def __init__(self, *, poll: timedelta, ping: timedelta) -> None:
        if poll <= timedelta(0):
            raise ValueError("feed_poll must be positive")
        self.poll_s = poll.total_seconds()
        self.ping_s = ping.total_seconds()
        self._closing = asyncio.Event()

    def open(self) -> None:
        """Let feeds run (a server starting, on its own event loop)."""
        self._closing = asyncio.Event()

    def close(self) -> None:
        """End every open feed (a server shutting down)."""
        self._closing.set()

    @property
    def closing(self) -> bool:
        return self._closing.is_set()

    async def pause(self) -> None:
        """Wait one poll interval, or less if the feeds are being closed."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), self.poll_s)


def encode(event: EventOut) -> ServerSentEvent:
    return ServerSentEvent(id=str(event.seq), event=event.type, data=event.model_dump_json())


async def feed(
    runtime: Runtime,
    feeds: Feeds,
    conversation_id: str,
    *,
    owner: str,
    after: int,
    first: list[EventOut],
) -> AsyncIterator[ServerSentEvent]:
    """Journal rows after ``after``, as they commit, until the conversation is gone, the
    client leaves (the response cancels this) or the server shuts down.

    ``first`` is the page the route already read (it checked the owner before answering 200).
    """
    last = after
    page = first
    while True:
        for event in page:
            yield encode(event)
            last = event.seq
        if feeds.closing:
            return
        if not page:  # caught up: wait; otherwise read on at once
            await feeds.pause()
            if feeds.closing:
                return
        try:
            rows = await runtime.events(conversation_id, after_seq=last, owner=owner)
        except UnknownConversationError:
            return  # tombstoned while watched: nothing more will come
        except StoreError as exc:
            # A passing store failure: keep the feed, try again at the next poll.
            log.warning("feed of %s: %s (%s)", conversation_id, exc.code, exc.message)
            rows = []
        page = [EventOut.of(e) for e in rows]


__all__ = ("SHUTDOWN_GRACE_S", "Feeds", "encode", "feed")
