"""The feed hub of one runtime: answers in progress and committed events, fanned out to every
watcher of a conversation in this process, without polling.

- **Drafts.** A turn opens a :class:`~tidings.feed.drafts.Draft` per model call; each piece
  the model streams reaches this process's watchers at once (no database write, no wait) and,
  on PostgreSQL, the other processes' hubs (coalesced, :mod:`tidings.feed.publisher`).
- **Committed events.** When a unit that journalled events commits, the store tells the hub
  (in-process after the commit; on PostgreSQL also from the committing transaction's NOTIFY,
  in every process). Each watched conversation has one reader here
  (:class:`~tidings.feed.channel.Channel`), whatever the number of its watchers.
- **A slow poll** (``poll``, about a second) asks, in one query for every watched
  conversation, how far their journals are: a lost hint costs that much latency, never an
  event. It is the only way commits of other SQLite processes arrive (their deltas do not).
- **Other processes** (:class:`~tidings.feed.peers.Peers`): what is heard of them passes
  through the hub to its channels; what they watch and ask for, and what this process sends
  them of its drafts, is :mod:`tidings.feed.peers` (joining mid-answer, and pieces only to
  processes that watch).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta

from tidings.clock import Clock
from tidings.errors import StoreError
from tidings.feed.channel import Channel
from tidings.feed.drafts import Draft, DraftKey, delta_event, discarded_event
from tidings.feed.peers import Peers
from tidings.feed.watch import Reader, ReadPage, Watch
from tidings.feed.wire import DISCARD, REQUEST, WATCH, decode
from tidings.store import Row, Store, Tx
from tidings.store.feed import FeedSubscription
from tidings.support.lifetime import Loop
from tidings.support.policy import check_position
from tidings.types import new_id

log = logging.getLogger("tidings.feed")


def _soon(loop: asyncio.AbstractEventLoop, callback: Callable[[str], None], arg: str) -> None:
    """Call ``callback(arg)`` on ``loop`` (from a finalizer: any thread, any moment)."""
    if not loop.is_closed():
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(callback, arg)


def _heads(tx: Tx, conversation_ids: list[str]) -> list[Row]:
    return tx.all("journal_heads", conversation_ids=conversation_ids)


class FeedHub(Loop):
    """Drafts and watchers of one runtime; see the module docstring.

    A component of the runtime with no work of its own to run: it holds its place in the
    shutdown order, last, and its shutdown closes it (:meth:`close`). It listens from
    :meth:`start` on, which its owner calls before any turn can run -- not from ``run()``,
    whose task begins at no moment its owner controls."""

    def __init__(self, store: Store, clock: Clock, *,
                 poll: timedelta = timedelta(seconds=1)) -> None:
        if poll <= timedelta(0):
            raise ValueError("the feed's poll must be positive")
        super().__init__("tidings-feed")
        self.store = store
        self.clock = clock
        self.poll_s = poll.total_seconds()
        self.hub_id = new_id("feed")
        self._channels: dict[str, Channel] = {}
        self._drafts: dict[str, dict[DraftKey, Draft]] = {}
        self._peers = Peers(store, self.hub_id, self.now_us)
        self._subscription: FeedSubscription | None = None
        self._poller: asyncio.Task[None] | None = None
        self._closed = False

    def now_us(self) -> int:
        return self.clock.now_us()

    @property
    def watched(self) -> frozenset[str]:
        """The conversations someone in this process watches (each has one reader)."""
        return frozenset(self._channels)

    # -- drafts (the turn's side) -------------------------------------------------------------

    def draft(self, conversation_id: str, run_id: str, step: int) -> Draft:
        """A new draft for one model call of step ``step`` of ``run_id``."""
        self._listen()
        draft = Draft(self, conversation_id, run_id, step)
        self._drafts.setdefault(conversation_id, {})[draft.key] = draft
        return draft

    def drafted(self, draft: Draft, offset: int, piece: str) -> None:
        channel = self._channels.get(draft.conversation_id)
        if channel is not None:
            channel.live(delta_event(draft.conversation_id, draft.key, offset, piece,
                                          self.now_us()))
        self._peers.drafted(draft, offset, piece)

    def sealed(self, draft: Draft) -> None:
        self._forget(draft)
        self._peers.sealed(draft)

    def discarded(self, draft: Draft, reason: str) -> None:
        self._forget(draft)
        channel = self._channels.get(draft.conversation_id)
        if channel is not None:
            channel.live(discarded_event(draft.conversation_id, draft.key, reason,
                                              self.now_us()))
        self._peers.discarded(draft, reason)

    def _forget(self, draft: Draft) -> None:
        drafts = self._drafts.get(draft.conversation_id)
        if drafts is not None and drafts.get(draft.key) is draft:
            del drafts[draft.key]
            if not drafts:
                del self._drafts[draft.conversation_id]

    def drafts_of(self, conversation_id: str) -> list[tuple[DraftKey, str]]:
        """The answers in progress in the conversation, here and (as heard) elsewhere."""
        local = [(key, d.text) for key, d in self._drafts.get(conversation_id, {}).items()
                 if d.length]
        channel = self._channels.get(conversation_id)
        return local + (channel.remote.snapshot() if channel is not None else [])

    # -- watchers -----------------------------------------------------------------------------

    def watch(self, conversation_id: str, *, after_seq: int, read: ReadPage) -> Watch:
        """A watch of the conversation from ``after_seq``; ``read`` reads its journal pages
        (and checks the watcher's right to them)."""
        check_position(after_seq, "after_seq")
        watch = Watch(self, conversation_id, after_seq=after_seq, read=read,
                      retry_s=self.poll_s)
        if self._closed:
            watch.close()
        return watch

    def attach(self, watch: Watch) -> Reader | None:
        """Add ``watch`` to its conversation's channel (started for the first): what commits
        from now on queues for it. Returns the conversation's reader (None: the hub closed)."""
        if self._closed:
            watch.close()
            return None
        self._listen()
        channel = self._channels.get(watch.conversation_id)
        if channel is None:
            channel = self._channels[watch.conversation_id] = Channel(
                self.store, watch.conversation_id, self.now_us
            )
            channel.start()
            self._peers.ask_for_drafts(channel)
            self._want_hints()
            if self._poller is None or self._poller.done():
                self._poller = asyncio.create_task(self._poll(), name="tidings-feed-poll")
        channel.watches.add(watch)
        # A consumer that leaves its loop without closing the watch drops it: once it is gone,
        # its channel is looked at again (and stopped if nobody else watches).
        weakref.finalize(watch, _soon, asyncio.get_running_loop(), self._prune,
                         watch.conversation_id)
        return channel

    def detach(self, watch: Watch) -> None:
        channel = self._channels.get(watch.conversation_id)
        if channel is not None:
            channel.watches.discard(watch)
            self._prune(watch.conversation_id)

    def _prune(self, conversation_id: str) -> None:
        channel = self._channels.get(conversation_id)
        if channel is not None and not channel.watches:
            del self._channels[conversation_id]
            channel.cancel()
            self._want_hints()

    def _want_hints(self) -> None:
        """Journal hints are for channels: with none, the writers need not wake this loop."""
        if self._subscription is not None:
            self._subscription.journal = bool(self._channels)

    # -- what the store hears -----------------------------------------------------------------

    def start(self) -> None:
        """Listen from now on (a draft or a watch would start it anyway): on a store that
        reaches other processes, their watchers' notices are heard before any turn here."""
        if self._peers.reachable:
            self._listen()

    def _listen(self) -> None:
        if self._subscription is None and not self._closed:
            self._subscription = self.store.feed.subscribe(self._journal_hints, self._heard)
            self._want_hints()

    def _journal_hints(self, hints: Mapping[str, int],
                       written: Mapping[str, Sequence[object]]) -> None:
        """Journals advanced; ``written``: what this process's commits wrote there, handed to
        the channels before their hints."""
        for conversation_id, writes in written.items():
            channel = self._channels.get(conversation_id)
            if channel is not None:
                channel.written(writes)
        for conversation_id, seq in hints.items():
            channel = self._channels.get(conversation_id)
            if channel is not None:
                channel.hint(seq)

    def _heard(self, messages: list[str]) -> None:
        for message in messages:
            live = decode(message)
            if live is None or live.hub == self.hub_id:
                continue  # not understood, or this hub's own
            if live.kind in (REQUEST, WATCH):
                self._peers.noticed(live, self._drafts.get(live.conversation_id, {}).values())
                continue
            channel = self._channels.get(live.conversation_id)
            if channel is None:
                continue  # nobody watches it here
            key = (live.run_id, live.step)
            if live.kind == DISCARD:
                channel.remote_discard(key, live.reason)
            elif channel.remote_delta(key, live.offset, live.text, live.final):
                self._peers.ask_for_drafts(channel)

    async def _poll(self) -> None:
        """The slow poll: one query for every watched conversation's journal head (and, every
        few seconds, the word to the other processes that they are still watched here)."""
        while self._channels and not self._closed:
            await self.clock.sleep(self.poll_s)
            if not self._channels:
                return
            self._peers.renew(self._channels)
            try:
                rows = await self.store.read(functools.partial(
                    _heads, conversation_ids=list(self._channels)
                ))
            except StoreError as exc:
                log.warning("feed poll: %s (%s)", exc.code, exc.message)
                continue
            self._journal_hints({r["conversation_id"]: int(r["last_event_seq"]) for r in rows}, {})

    # -- closing ------------------------------------------------------------------------------

    async def close(self) -> None:
        """End every watch, stop the readers and the poll. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._subscription is not None:
            self.store.feed.unsubscribe(self._subscription)
        channels = list(self._channels.values())
        self._channels.clear()
        for channel in channels:
            for watch in list(channel.watches):
                watch.close()
            await channel.stop()
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        await self._peers.close()

    stopped = close  # at shutdown: every watch ends


__all__ = ("FeedHub",)
