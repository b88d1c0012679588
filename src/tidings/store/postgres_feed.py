"""PostgreSQL's publisher of live feed messages: NOTIFY on a connection of its own.

Deltas of an answer being written must reach the watchers of other processes within a few
milliseconds, and must never wait for (or slow down) the writers' group commits: they go out
on their own autocommit connection, from one thread, off the event loop. Several messages sent
together are one statement (one round trip). A message that cannot be sent -- the connection
died and a new one failed too -- is dropped and logged: live messages are hints, the journal
is the truth.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg

from tidings.store.feed import FEED_CHANNEL, LIVE_PREFIX

log = logging.getLogger("tidings.store.feed")

# One transaction, notifications in array order (PostgreSQL delivers them in the order sent).
_NOTIFY = "SELECT pg_notify(%s, p) FROM unnest(%s::text[]) AS p"


class FeedPublisher:
    """Sends live messages on :data:`FEED_CHANNEL`; one connection, one thread."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._conn: psycopg.Connection[Any] | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="tidings-pg-feed")
        self._closed = False

    async def publish(self, messages: Sequence[str]) -> None:
        if self._closed or not messages:
            return
        payloads = [LIVE_PREFIX + m for m in messages]
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._send, payloads)
        except RuntimeError:  # the executor shut down meanwhile: the store is closing
            return

    def _send(self, payloads: list[str]) -> None:
        for attempt in (1, 2):
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(
                        self._dsn, autocommit=True, application_name="tidings-feed"
                    )
                self._conn.execute(_NOTIFY, (FEED_CHANNEL, payloads))
                return
            except psycopg.Error as exc:
                if self._conn is not None:
                    with contextlib.suppress(psycopg.Error):
                        self._conn.close()
                self._conn = None
                if attempt == 2 or self._closed:
                    log.warning("live feed messages dropped: %s", exc)
                    return

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self._executor.shutdown, wait=True)
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()


__all__ = ("FeedPublisher",)
