"""One watched conversation in one process: its watchers, its one journal reader, and the
drafts other processes are writing in it.

However many watch it, a conversation has one reader here: when a hint says its journal
advanced past what the reader has, the reader reads the new rows once (with their messages
filled in) and hands each to every watcher. 500 watchers of one conversation cost one query
per commit, not 500. Hints carry the sequence they announce, so a second copy of one (this
process's own commit, heard again from the database) reads nothing. A commit of this process
comes with what it wrote (:func:`~tidings.conversations.journal.written_events` makes the
same events a read would): when those rows follow the last handed out, the reader hands them
out without reading; a gap between them (another process's commit in between) is read.

Live events keep the order of cause and effect: one that comes while the reader is behind a
hint (the commit that started the run whose answer this is) waits until that read is handed
out, so no watcher sees an answer begin before the turn that writes it.

Live events are handed out in rounds: the pieces of one answer that came since the last round
go out as one delta, the same object for every watcher -- one push per watcher and one
encoding for all of them, however fast the model writes. A round follows the last one by at
least a frame that grows with the number of watchers (:data:`FRAME_PER_WATCHER_S`, at most
:data:`MAX_FRAME_S`): one watcher is handed each piece at once, 500 get 50 rounds a second,
so fanning out never takes the whole event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence

from tidings.conversations.history import MAX_PAGE
from tidings.conversations.journal import read_events, written_events
from tidings.errors import StoreError
from tidings.feed.drafts import (
    MESSAGE_DELTA,
    DraftKey,
    RemoteDrafts,
    committed_step,
    delta_event,
    discarded_event,
    ended_run,
)
from tidings.feed.watch import Watch
from tidings.store import Store
from tidings.types import FeedEvent

log = logging.getLogger("tidings.feed")

_REMEMBERED = 64
_WRITTEN = 256
"""Units' writes kept for the reader at most (beyond, it reads them)."""
_HELD = 1_024
"""Live events held behind a read at most (then they pass: they are hints)."""

FRAME_PER_WATCHER_S = 0.000_04
"""How much a watcher adds to the least time between two rounds of live events."""

MAX_FRAME_S = 0.02
"""The most time between two rounds of live events (50 a second)."""


class Channel:
    """The watchers of one conversation in this process and what they are all given."""

    def __init__(self, store: Store, conversation_id: str, now_us: Callable[[], int]) -> None:
        self.store = store
        self.conversation_id = conversation_id
        self.now_us = now_us
        self.watches: weakref.WeakSet[Watch] = weakref.WeakSet()
        """Held weakly: a watch its consumer dropped (a ``break`` out of its loop) leaves."""
        self.remote = RemoteDrafts()
        self.last: int | None = None
        """The last journal sequence the reader handed out (None until it knows where)."""
        self._start: int | None = None
        """The least position a watch's read ended at before the reader knew where to start."""
        self._hinted = 0
        self._hint = asyncio.Event()
        self._done: OrderedDict[object, None] = OrderedDict()  # committed steps, ended runs
        self._reader: asyncio.Task[None] | None = None
        self._held: list[tuple[int, FeedEvent]] = []
        """Live events waiting for the journal rows hinted before them (that sequence, each)."""
        self._pending: list[FeedEvent] = []  # live events for the next turn of the loop
        self._written: list[object] = []
        """What this process's commits wrote to the journal since the reader last looked."""
        self._flush: asyncio.Handle | None = None
        self._round_at = 0.0  # the loop's time of the last round of live events
        self.asked_at_us = 0
        """When this process last asked the conversation's writers for their drafts."""

    def start(self) -> None:
        self._reader = asyncio.create_task(self._read_loop(),
                                           name=f"tidings-feed-{self.conversation_id}")

    def cancel(self) -> None:
        """Stop the reader (the last watcher left)."""
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        if self._reader is not None:
            self._reader.cancel()

    async def stop(self) -> None:
        self.cancel()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None

    # -- hints and the reader -----------------------------------------------------------------

    def written(self, writes: Sequence[object]) -> None:
        """What a commit of this process wrote to the journal (its hint follows): the reader
        hands it out instead of reading it, when it follows what was handed out."""
        if len(self._written) + len(writes) <= _WRITTEN:
            self._written.extend(writes)
        else:
            self._written = []  # too far behind: read

    def hint(self, seq: int) -> None:
        """The journal reached ``seq``: read on if that is past what was handed out."""
        if seq > self._hinted:
            self._hinted = seq
        if self.last is None or seq > self.last:
            self._hint.set()

    async def _read_loop(self) -> None:
        while True:
            self._hint.clear()  # before reading: a hint that comes during the read reads again
            try:
                if self.last is None:
                    head = await self._head()
                    # From the journal's head, or from where a watch's read ended meanwhile
                    # if that is before it (the rows between are read and handed out).
                    self.last = head if self._start is None else min(head, self._start)
                    self._hinted = max(self._hinted, head)
                self._take_written()
                while self.last < self._hinted and await self._read_new():
                    self._take_written()
                self._take_written()  # what came during the read, before the live events held
            except StoreError as exc:
                # A passing store failure: the next hint, or the slow poll, tries again.
                log.warning("feed reader of %s: %s (%s)", self.conversation_id, exc.code,
                            exc.message)
            self._release()
            await self._hint.wait()

    def joined(self, seq: int) -> bool:
        """A watch read the journal to ``seq`` and takes what follows from this reader:
        whether it can (False: rows after ``seq`` were passed by already, and it reads on).
        A reader that has not found its start yet starts no later than ``seq`` (a position
        past the journal's end -- a client's cursor from elsewhere -- changes nothing)."""
        if self.last is None:
            self._start = seq if self._start is None else min(self._start, seq)
            return True
        return self.last <= seq

    async def _head(self) -> int:
        rows = await self.store.read(lambda tx: tx.all(
            "journal_heads", conversation_ids=[self.conversation_id]
        ))
        return int(rows[0]["last_event_seq"]) if rows else 0

    def _take_written(self) -> None:
        """Hand out the events this process's commits wrote that follow the last handed out,
        up to the first gap (what follows a gap is read); drop those handed out already."""
        writes, self._written = self._written, []
        if not writes or self.last is None:
            return
        for event in written_events(writes):
            if event.seq <= self.last:
                continue  # a read reached it first
            if event.seq != self.last + 1:
                return  # a gap: the rest is read
            self.journal(FeedEvent.of(event))

    async def _read_new(self) -> bool:
        """Read the rows after the last handed out; whether a full page says there is more."""
        assert self.last is not None
        after = self.last
        target = self._hinted  # before the read: a hint that comes during it is a new one
        events = await self.store.read(
            lambda tx: read_events(tx, self.conversation_id, after_seq=after, limit=MAX_PAGE)
        )
        for event in events:
            self.journal(FeedEvent.of(event))
        if len(events) == MAX_PAGE:
            return True
        if self._hinted == target and self.last < target:
            self._hinted = self.last  # announced rows this snapshot did not show: a new hint
        return False                  # (or the slow poll) reads them

    def journal(self, event: FeedEvent) -> None:
        """Hand one journal event to every watcher; keep the drafts in step with it."""
        assert event.seq is not None
        self._hand_out_live()  # what came before it goes first
        self.last = event.seq
        if (key := committed_step(event)) is not None:
            self.remote.drop(key)
            self._remember(key)
        elif (run_id := ended_run(event)) is not None:
            self._remember(run_id)
            # A writer that died mid-answer never says so: the run's end does.
            for key in self.remote.drop_run(run_id):
                self.broadcast(discarded_event(self.conversation_id, key, "run_ended",
                                               self.now_us()))
        self.broadcast(event)
        if self._held and self._held[0][0] <= event.seq:
            # Live events that came once this row was announced go out behind it, not behind
            # rows committed after them (a read may reach further than the hint it answers).
            while self._held and self._held[0][0] <= event.seq:
                self._later(self._held.pop(0)[1])

    def _remember(self, item: object) -> None:
        self._done[item] = None
        while len(self._done) > _REMEMBERED:
            self._done.popitem(last=False)

    def broadcast(self, event: FeedEvent) -> None:
        after = self.last or 0
        for watch in tuple(self.watches):
            watch.push(event, after)

    def live(self, event: FeedEvent) -> None:
        """Hand a live event to every watcher, after the journal rows hinted before it."""
        if (self.last is None or self.last < self._hinted) and len(self._held) < _HELD:
            self._held.append((self._hinted, event))
        else:
            self._release()
            self._later(event)

    def _release(self) -> None:
        held, self._held = self._held, []
        for _, event in held:
            self._later(event)

    def _later(self, event: FeedEvent) -> None:
        self._pending.append(event)
        if self._flush is None:
            loop = asyncio.get_running_loop()
            frame = min(MAX_FRAME_S, FRAME_PER_WATCHER_S * len(self.watches))
            wait = self._round_at + frame - loop.time()
            self._flush = (loop.call_later(wait, self._hand_out_live) if wait > 0
                           else loop.call_soon(self._hand_out_live))

    def _hand_out_live(self) -> None:
        """Hand out the live events pending, the adjacent pieces of one answer as one."""
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        pending, self._pending = self._pending, []
        if pending:
            self._round_at = asyncio.get_running_loop().time()
        for event in coalesced(pending):
            self.broadcast(event)

    # -- drafts written elsewhere -------------------------------------------------------------

    def remote_delta(self, key: DraftKey, offset: int, text: str, final: bool) -> bool:
        """A delta heard from another process; whether its beginning is missing here."""
        if key in self._done or key[0] in self._done:
            return False
        merged = self.remote.merge(key, offset, text, final)
        if merged.text:
            self.live(delta_event(self.conversation_id, key, merged.offset, merged.text,
                                       self.now_us()))
        return merged.missing

    def remote_discard(self, key: DraftKey, reason: str) -> None:
        self.remote.drop(key)
        if key not in self._done:
            self.live(discarded_event(self.conversation_id, key, reason, self.now_us()))


def coalesced(events: list[FeedEvent]) -> list[FeedEvent]:
    """``events`` with each run of adjacent pieces of one step's answer joined into one."""
    if len(events) < 2:
        return events
    out: list[FeedEvent] = []
    pieces: list[str] = []  # the text of out[-1], when it is a delta still growing
    end = -1
    for event in events:
        last = out[-1] if out else None
        if (event.type == MESSAGE_DELTA and last is not None and last.type == MESSAGE_DELTA
                and last.data["run_id"] == event.data["run_id"]
                and last.data["step"] == event.data["step"]
                and int(event.data["offset"]) == end):
            text = str(event.data["text"])
            pieces.append(text)
            end += len(text)
            continue
        if pieces and len(pieces) > 1:
            out[-1] = _joined(out[-1], pieces)
        out.append(event)
        pieces = [str(event.data["text"])] if event.type == MESSAGE_DELTA else []
        end = int(event.data["offset"]) + len(pieces[0]) if pieces else -1
    if len(pieces) > 1:
        out[-1] = _joined(out[-1], pieces)
    return out


def _joined(first: FeedEvent, pieces: list[str]) -> FeedEvent:
    key = (str(first.data["run_id"]), int(first.data["step"]))
    return delta_event(first.conversation_id, key, int(first.data["offset"]), "".join(pieces),
                       first.at_us)


__all__ = ("FRAME_PER_WATCHER_S", "MAX_FRAME_S", "Channel", "coalesced")
