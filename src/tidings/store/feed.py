"""The feed's signals: "this conversation's journal advanced" hints and live feed messages.

Both are hints, never the truth: the journal is. A lost journal hint delays a watcher until its
slow poll; a lost live message (a delta of an answer being written) leaves a gap that the
committed message closes. Thread-safe; each subscriber is called on its own event loop, once
per batch.

- **Journal hints** carry the conversation and the highest journal sequence its commit wrote.
  In-process they come from the writers right after a commit (:meth:`Tx.journaled`), with
  what the units wrote; on PostgreSQL the ``insert_events`` statement also NOTIFYs them on
  :data:`FEED_CHANNEL`, inside the committing transaction, so they reach every process. This
  process's copy, sent by one of its own writers' connections, is dropped
  (:meth:`FeedSignals.sending_from`): the writer's hint, which carries the rows, is the one
  its watchers take.
- **Live messages** are opaque text for the feed hub above the store (deltas, discards,
  snapshot requests). A store that reaches other processes (PostgreSQL) sends them with
  :meth:`tidings.store.base.Store.publish_feed` and hands the ones it hears to subscribers,
  its own included; a store that does not (SQLite) sends nothing.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FEED_CHANNEL = "tidings_feed"
"""PostgreSQL's NOTIFY channel of the feed (journal hints and live messages)."""

JOURNAL_PREFIX = "j "
"""A journal hint on the channel: ``j <conversation_id> <seq>`` (written by the SQL)."""

LIVE_PREFIX = "l "
"""A live message on the channel: ``l <text of the hub's own format>``."""

PAYLOAD_BYTES = 7999
"""PostgreSQL's bound on a NOTIFY payload (shorter than 8000 bytes), prefix included."""

JournalHints = Callable[[Mapping[str, int], Mapping[str, Sequence[object]]], None]
"""Called with the hints and, by conversation, what this process's units wrote there (empty
for hints heard from the database)."""
LiveMessages = Callable[[list[str]], None]


def call_in(loop: asyncio.AbstractEventLoop, callback: Callable[..., object], *args: Any) -> None:
    """Schedule ``callback(*args)`` on ``loop``: cheaply when it is this thread's running loop
    (a writer on the loop), through the loop's self-pipe from any other thread."""
    if asyncio._get_running_loop() is loop:
        loop.call_soon(callback, *args)
    else:
        loop.call_soon_threadsafe(callback, *args)


@dataclass(slots=True, eq=False)
class FeedSubscription:
    """One subscriber: its loop and what it is called with (compared by identity).

    ``journal`` says whether it wants journal hints now (a hub that watches nothing does
    not: the writers then skip waking its loop for every commit)."""

    loop: asyncio.AbstractEventLoop
    on_journal: JournalHints
    on_live: LiveMessages
    journal: bool = True


class FeedSignals:
    """The fan-out of journal hints and live messages to subscribers in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: tuple[FeedSubscription, ...] = ()
        self._senders: dict[object, int] = {}
        self._own: frozenset[int] = frozenset()

    def sending_from(self, writer: object, pid: int | None) -> None:
        """``writer``'s database connection is now the server process ``pid`` (None: it has
        none). The hints its commits NOTIFY are this process's own: its watchers have them
        from the writer already, with what was written, and the database's copy is dropped
        (a commit whose outcome the writer never learnt is then seen at the slow poll)."""
        with self._lock:
            if pid is None:
                self._senders.pop(writer, None)
            else:
                self._senders[writer] = pid
            self._own = frozenset(self._senders.values())

    def subscribe(self, on_journal: JournalHints, on_live: LiveMessages) -> FeedSubscription:
        """Call ``on_journal({conversation_id: seq}, {conversation_id: writes})`` and
        ``on_live([text, ...])`` on the running loop for every hint and message from now on."""
        subscription = FeedSubscription(asyncio.get_running_loop(), on_journal, on_live)
        with self._lock:
            self._subscribers = (*self._subscribers, subscription)
        return subscription

    def unsubscribe(self, subscription: FeedSubscription) -> None:
        with self._lock:
            self._subscribers = tuple(s for s in self._subscribers if s is not subscription)

    def journal_advanced(self, advanced: Mapping[str, int],
                         written: Mapping[str, Sequence[object]]) -> None:
        """Tell every subscriber that these conversations' journals reached these sequences;
        ``written``: what this process's units wrote there, by conversation (opaque here)."""
        if not advanced:
            return
        hints = dict(advanced)
        for subscriber in self._subscribers:
            if subscriber.journal and not subscriber.loop.is_closed():
                call_in(subscriber.loop, subscriber.on_journal, hints, written)

    def live(self, messages: Iterable[str]) -> None:
        """Hand live messages heard from the database to every subscriber."""
        batch = list(messages)
        if not batch:
            return
        for subscriber in self._subscribers:
            if not subscriber.loop.is_closed():
                call_in(subscriber.loop, subscriber.on_live, batch)

    def heard(self, notices: Iterable[tuple[str, int]]) -> None:
        """Route NOTIFY payloads of :data:`FEED_CHANNEL` (each with the server process that
        sent it): journal hints -- but those of this process's own writers -- and live
        messages."""
        hints: dict[str, int] = {}
        live: list[str] = []
        own = self._own
        for payload, sender in notices:
            if payload.startswith(JOURNAL_PREFIX):
                if sender in own:
                    continue
                conversation_id, _, seq = payload[len(JOURNAL_PREFIX):].rpartition(" ")
                if conversation_id and seq.isdigit():
                    hints[conversation_id] = max(int(seq), hints.get(conversation_id, 0))
            elif payload.startswith(LIVE_PREFIX):
                live.append(payload[len(LIVE_PREFIX):])
        self.journal_advanced(hints, {})
        self.live(live)


def merge_hints(into: dict[str, int], more: Mapping[str, int]) -> None:
    """Keep the highest sequence per conversation."""
    for conversation_id, seq in more.items():
        if seq > into.get(conversation_id, 0):
            into[conversation_id] = seq


def merge_written(into: dict[str, list[object]], more: Mapping[str, list[object]]) -> None:
    """Add a later unit's writes to each conversation's, in commit order."""
    for conversation_id, writes in more.items():
        into.setdefault(conversation_id, []).extend(writes)


__all__ = (
    "FEED_CHANNEL",
    "JOURNAL_PREFIX",
    "LIVE_PREFIX",
    "PAYLOAD_BYTES",
    "FeedSignals",
    "FeedSubscription",
    "call_in",
    "merge_hints",
    "merge_written",
)
