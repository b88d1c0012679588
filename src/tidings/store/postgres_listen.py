"""PostgreSQL's listener: one connection per process LISTENs for wake-ups and the feed.

The publish statement NOTIFYs ``tidings_signals`` with a conversation id: the listener hands
it to :attr:`Store.wakeups`, which fans it out in-process. Journal hints (NOTIFYed by the
statement that writes a conversation's events, so they are sent at commit) and live messages
(:mod:`tidings.store.postgres_feed`) arrive on ``tidings_feed``: the listener hands them to
:attr:`Store.feed`, each batch read from the socket at once. It runs on a thread of its own;
when its connection dies it connects again, and the wake-ups missed meanwhile are re-found by
polling and the sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import threading
import time
from typing import Any

import psycopg

from tidings.store.base import Wakeups
from tidings.store.feed import FEED_CHANNEL, FeedSignals

_FEED = FEED_CHANNEL.encode("ascii")


def _listen(dsn: str) -> psycopg.Connection[Any]:
    """The listener's connection: wake-ups and the feed."""
    listener = psycopg.connect(dsn, autocommit=True, application_name="tidings-listen")
    try:
        listener.execute("LISTEN tidings_signals")
        listener.execute(f"LISTEN {FEED_CHANNEL}")
    except BaseException:
        listener.close()
        raise
    return listener


class Listener:
    """The LISTEN loop of one store, on a thread of its own; see the module docstring."""

    def __init__(self, dsn: str, wakeups: Wakeups, feed: FeedSignals) -> None:
        self._dsn = dsn
        self._wakeups = wakeups
        self._feed = feed
        self._conn: psycopg.Connection[Any] | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stop_r, self._stop_w = os.pipe()
        self._closed = False

    def start(self) -> None:
        """Connect and LISTEN (blocking: called from a thread), then hear on the thread."""
        self._conn = _listen(self._dsn)
        self._thread = threading.Thread(target=self._loop, name="tidings-pg-listen", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        # select() on the socket, not psycopg's notifies() generator: waiting then releases the
        # GIL completely, so the listener costs the units of work nothing while idle.
        while not self._closed:
            listener = self._conn
            assert listener is not None
            try:
                ready, _, _ = select.select([listener.fileno(), self._stop_r], [], [], 1.0)
                if listener.fileno() not in ready:
                    continue
                listener.pgconn.consume_input()
                heard: list[tuple[str, int]] = []
                while (notify := listener.pgconn.notifies()) is not None:
                    payload = notify.extra.decode("utf-8", "replace")
                    if notify.relname == _FEED:
                        heard.append((payload, notify.be_pid))
                    else:
                        self._wakeups.notify(payload)
                self._feed.heard(heard)
            except (psycopg.Error, OSError, ValueError):
                if self._closed:
                    return
                # The listener's connection died; wake-ups missed meanwhile are re-found by
                # polling and the sweep.
                self._reconnect()

    def _reconnect(self) -> None:
        with self._lock:
            with contextlib.suppress(psycopg.Error):
                if self._conn is not None:
                    self._conn.close()
            while not self._closed:
                try:
                    self._conn = _listen(self._dsn)
                    return
                except psycopg.Error:
                    time.sleep(0.5)

    def end(self) -> None:
        """Hear no more: the loop (and a reconnect under way) ends at its next pass."""
        self._closed = True

    async def stop(self) -> None:
        """End the loop now, wait for its thread and close the connection. Once only."""
        self._closed = True
        os.write(self._stop_w, b"x")
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
        os.close(self._stop_r)
        os.close(self._stop_w)
        with self._lock:
            if self._conn is not None:
                self._conn.close()


__all__ = ("Listener",)
