"""One watcher of a conversation's feed: the journal from its position, then everything live.

A watch joins the conversation's live stream *first* (events start queueing for it), then
reads its backlog from the journal, then takes the answers in progress, then serves what
queued meanwhile. Its read and the conversation's reader (:mod:`~tidings.feed.channel`) run
side by side, each on its own snapshot: a read that ended before rows the reader had already
passed by reads on, so that the last rows of a conversation that then falls quiet (a run
waiting for a person) are never left between the two. Two rules make that seamless:

- **Journal events** pass once, in sequence: one at or below the last sequence served is a
  duplicate and is skipped; one past the next expected means a gap (hints raced, or the queue
  overflowed), and the gap is read from the journal before anything else is served.
- **Deltas** pass once per character: each step's answer is tracked by how much of it this
  watcher has; a piece that ends at or before that is a duplicate, one that overlaps is cut
  to what is new. An answer in progress is first served as one ``message_delta`` at offset 0
  with its whole text so far. A ``message_discarded`` resets the step (a retried call starts
  again at 0); once a step's message is committed, or its run ended, nothing more of it
  passes.
- **An answer is whole before its commit.** Across processes the pieces and the commit travel
  by different connections, so the last pieces may be heard after the commit (and then never
  pass). A step this watcher was given part of is completed from the committed message, in
  one ``message_delta`` just before it, when the text it has is where that message begins:
  the deltas a watcher is given add up to the answer.

A watch that falls too far behind (its consumer does not read) drops what queued and catches
up from the journal and the drafts again, so memory stays bounded.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from tidings.clock import wait_set
from tidings.errors import StoreError, UnknownConversationError
from tidings.feed.drafts import (
    MESSAGE_DELTA,
    MESSAGE_DISCARDED,
    DraftKey,
    committed_step,
    delta_event,
    ended_run,
)
from tidings.types import Event, FeedEvent

log = logging.getLogger("tidings.feed")

ReadPage = Callable[[int], Awaitable[list[Event]]]
"""Reads the journal page after a sequence (checking the watcher's right to read it)."""

PAGE = 1_000
"""The page a read returns at most (the conversations' MAX_PAGE): a full page reads on."""

QUEUE_LIMIT = 4_096
"""Live events a watch holds for its consumer before it drops them and catches up."""

_REMEMBERED = 64
"""Steps committed and runs ended that a watch remembers (to refuse their late deltas)."""


class Reader(Protocol):
    """The conversation's one journal reader in this process, as a watch sees it."""

    def joined(self, seq: int) -> bool:
        """A watch read the journal to ``seq`` and takes the rest from the reader: whether it
        can (False: rows after ``seq`` went by before, and the watch reads on)."""
        ...


class WatchHost(Protocol):
    """What a watch needs of the hub."""

    def attach(self, watch: Watch) -> Reader | None: ...

    def detach(self, watch: Watch) -> None: ...

    def drafts_of(self, conversation_id: str) -> list[tuple[DraftKey, str]]: ...

    def now_us(self) -> int: ...


@dataclass(slots=True)
class _Served:
    """What a watch has served of one step's answer in progress."""

    pieces: list[str] = field(default_factory=list)
    length: int = 0

    def add(self, text: str) -> None:
        self.pieces.append(text)
        self.length += len(text)

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def _remember(memory: OrderedDict[object, None], item: object) -> None:
    memory[item] = None
    memory.move_to_end(item)
    while len(memory) > _REMEMBERED:
        memory.popitem(last=False)


class Watch:
    """An async iterator of one conversation's :class:`~tidings.types.FeedEvent` objects.

    It ends (``StopAsyncIteration``) when the conversation is deleted, the runtime closes or
    :meth:`close` is called. The first read checks the caller's right to it: a foreign or
    unknown conversation raises :class:`~tidings.errors.UnknownConversationError` there.
    """

    def __init__(self, host: WatchHost, conversation_id: str, *, after_seq: int,
                 read: ReadPage, retry_s: float = 1.0) -> None:
        self._host = host
        self.conversation_id = conversation_id
        self._read = read
        self._retry_s = retry_s
        self.last = after_seq
        self._have: dict[DraftKey, _Served] = {}
        self._done: OrderedDict[object, None] = OrderedDict()  # committed steps, ended runs
        self._ready: deque[FeedEvent] = deque()
        self._queued: deque[tuple[FeedEvent, int]] = deque()  # (event, journal rows before it)
        self._wake: asyncio.Event = asyncio.Event()
        self._ended = asyncio.Event()
        self._attached = False
        self._reader: Reader | None = None
        self._started = False
        self._catching_up = True
        self._read_on = False  # reading once more: the reader had passed this watch's read
        self._ending = False  # the conversation was deleted: end once what is ready is served
        self._closed = False
        self._deferred: FeedEvent | None = None

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> FeedEvent:
        while True:
            if self._closed:  # at once, even with events ready (a server shutting down)
                self._detach()
                raise StopAsyncIteration
            if self._ready:
                return self._ready.popleft()
            if self._ending:  # deleted: what came before the deletion is served first
                self._detach()
                raise StopAsyncIteration
            if self._catching_up:
                await self._catch_up()
                continue
            if not self._queued:
                self._wake.clear()
                await self._wake.wait()
                continue
            self._take_queued()

    def ready_now(self) -> list[FeedEvent]:
        """Every event that can be served without waiting (after one :meth:`__anext__`): a
        consumer that writes to a socket sends them together."""
        if not self._catching_up and not self._closed:
            self._take_queued()
        ready = list(self._ready)
        self._ready.clear()
        return ready

    def _take_queued(self) -> None:
        # All of the queue at once, so that the pieces of one answer that queued while the
        # consumer was busy are served as one delta (see _delta).
        while self._queued and not self._catching_up:
            self._take(*self._queued.popleft())

    # -- from the hub -------------------------------------------------------------------------

    def push(self, event: FeedEvent, after: int = 0) -> None:
        """Queue a live or journal event for this watch (called on the hub's loop). A live
        event's ``after`` is the last journal sequence its channel had handed out when it
        came: the rows that happened before it."""
        if self._closed:
            return
        if len(self._queued) >= QUEUE_LIMIT:
            # The consumer is too slow: forget the queue, catch up from the journal and the
            # drafts when it reads again.
            self._queued.clear()
            self._catching_up = True
        else:
            self._queued.append((event, after))
        self._wake.set()

    def close(self) -> None:
        """End the watch: its consumer's next read (or the one it waits in) ends."""
        self._closed = True
        self._ended.set()
        self._wake.set()

    async def aclose(self) -> None:
        self.close()
        self._detach()

    # -- catching up --------------------------------------------------------------------------

    async def _catch_up(self) -> None:
        """Read the journal after the last sequence served, to its end; then the drafts."""
        if not self._attached:
            self._reader = self._host.attach(self)  # first: what commits from now on queues here
            self._attached = True
        try:
            page = await self._read(self.last)
        except UnknownConversationError:
            if not self._started:
                self._detach()
                raise  # a foreign or unknown conversation, at the first read
            self._ending = True  # deleted while watched
            return
        except StoreError as exc:
            if not self._started:
                self._detach()
                raise
            log.warning("feed of %s: %s (%s)", self.conversation_id, exc.code, exc.message)
            await self._pause()
            return
        self._started = True
        for event in page:
            self._serve_live_before()
            self._journal(FeedEvent.of(event))
        self._serve_live_before()
        if len(page) < PAGE and not self._ending:
            reader = self._reader
            if reader is not None and not reader.joined(self.last) and not self._read_on:
                # Rows after this read went by before it: read once more (a read that starts
                # now sees them; what the reader hands out from now on queues here).
                self._read_on = True
                return
            self._read_on = False
            self._catching_up = False
            now = self._host.now_us()
            for key, text in self._host.drafts_of(self.conversation_id):
                self._delta(delta_event(self.conversation_id, key, 0, text, now))

    async def _pause(self) -> None:
        """Wait before reading again after a failed read (less if the watch is closed)."""
        await wait_set(self._ended, self._retry_s)

    # -- what is served -----------------------------------------------------------------------

    def _take(self, event: FeedEvent, after: int) -> None:
        if event.seq is not None:
            self._journal(event)
        elif event is not self._deferred and after > self.last:
            # Rows committed before this live event have not been served here (the channel
            # handed them out before this watch joined, and its own read of the journal
            # stopped short of them): serve them first, then the event -- once; it passes
            # after one catch-up. Rows committed *after* the event do not hold it back: they
            # reach this watch behind it, from the channel, with no read of its own.
            self._deferred = event
            self._queued.appendleft((event, after))
            self._catching_up = True
        else:
            self._live(event)

    def _live(self, event: FeedEvent) -> None:
        if event.type == MESSAGE_DELTA:
            self._delta(event)
        elif event.type == MESSAGE_DISCARDED:
            self._discarded(event)
        else:
            self._ready.append(event)

    def _serve_live_before(self) -> None:
        """While catching up: serve the queued live events whose earlier rows are served now,
        before the next row -- a read reaches rows committed after them (the run's end, say),
        and they belong before those."""
        queued = self._queued
        while queued:
            event, after = queued[0]
            if event.seq is not None and event.seq <= self.last:
                queued.popleft()  # a row this read served already
            elif event.seq is None and after <= self.last:
                queued.popleft()
                if event is self._deferred:
                    self._deferred = None
                self._live(event)
            else:
                return

    def _journal(self, event: FeedEvent) -> None:
        assert event.seq is not None
        if event.seq <= self.last or self._ending:
            return
        if event.seq > self.last + 1:
            self._catching_up = True  # a gap: read it before anything else
            return
        self.last = event.seq
        if (key := committed_step(event)) is not None:
            self._complete(key, event)  # the answer's rest goes before its commit
            self._have.pop(key, None)
            _remember(self._done, key)
        self._ready.append(event)
        if (run_id := ended_run(event)) is not None:
            _remember(self._done, run_id)
            for key in [k for k in self._have if k[0] == run_id]:
                del self._have[key]
        elif event.type == "conversation_status" and event.data.get("status") == "tombstoned":
            self._ending = True

    def _delta(self, event: FeedEvent) -> None:
        key = (str(event.data["run_id"]), int(event.data["step"]))
        if key in self._done or key[0] in self._done:
            return
        served = self._have.get(key)
        have = 0 if served is None else served.length
        offset, text = int(event.data["offset"]), str(event.data["text"])
        if offset + len(text) <= have or offset > have:
            return  # a duplicate, or a piece past a gap (the hub sends the draft again)
        if offset < have:
            text = text[have - offset:]
            event = delta_event(self.conversation_id, key, have, text, event.at_us)
        if served is None:
            served = self._have[key] = _Served()
        served.add(text)
        last = self._ready[-1] if self._ready else None
        if (last is not None and last.type == MESSAGE_DELTA
                and (last.data["run_id"], last.data["step"]) == key):
            # The consumer has not taken the previous piece yet: serve both as one, so a
            # watcher that fell behind catches up in one event instead of many.
            self._ready[-1] = delta_event(self.conversation_id, key, int(last.data["offset"]),
                                          str(last.data["text"]) + text, last.at_us)
            return
        self._ready.append(event)

    def _complete(self, key: DraftKey, committed: FeedEvent) -> None:
        """Serve the rest of a step's answer that this watch was given part of, from its
        committed message (pieces heard after the commit never pass)."""
        served = self._have.get(key)
        content = committed.data["message"].get("content")
        if served is None or not isinstance(content, str) or len(content) <= served.length:
            return
        if content.startswith(served.text):  # else the commit replaces a text it never began
            self._delta(delta_event(self.conversation_id, key, served.length,
                                    content[served.length:], self._host.now_us()))

    def _discarded(self, event: FeedEvent) -> None:
        key = (str(event.data["run_id"]), int(event.data["step"]))
        if key in self._done:
            return
        self._have.pop(key, None)
        self._ready.append(event)

    def _detach(self) -> None:
        if self._attached:
            self._attached = False
            self._host.detach(self)


__all__ = ("PAGE", "QUEUE_LIMIT", "ReadPage", "Reader", "Watch", "WatchHost")
