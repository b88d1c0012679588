"""The other processes' hubs, as this one sees them: what it sends them of its drafts, what it
asks of theirs, and which of its conversations they watch.

- **Joining mid-answer.** A process that starts watching while another process writes an
  answer asks for it (a snapshot request); the writer sends its draft again from offset 0.
- **Only to processes that watch.** A draft's pieces go to other processes only while one of
  them watches the conversation: it says so with its snapshot request and renews it with a
  watch notice every few seconds (``_RENEW_US``); a notice not renewed lapses
  (``_WATCHED_US``). A turn nobody elsewhere watches sends nothing (a round trip, and a wake-up
  of every process, per piece).

On a store that reaches no other process (SQLite), nothing is sent and nothing is heard.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tidings.feed.channel import Channel
from tidings.feed.drafts import Draft
from tidings.feed.publisher import Publisher
from tidings.feed.wire import DELTA, DISCARD, REQUEST, WATCH, Live
from tidings.store import Store

_ASK_AGAIN_US = 500_000
"""How soon a watching process may ask a conversation's writers for their drafts again."""

_RENEW_US = 3_000_000
"""How often a watching process tells the others that it still watches its conversations."""

_WATCHED_US = 10_000_000
"""How long another process's word that it watches a conversation holds, unrenewed."""


class Peers:
    """The other processes' hubs, for the hub ``hub_id``; see the module docstring."""

    def __init__(self, store: Store, hub_id: str, now_us: Callable[[], int]) -> None:
        self.hub_id = hub_id
        self._now_us = now_us
        self._publisher = Publisher(store)
        self._elsewhere: dict[str, int] = {}  # watched by another process, until (µs)
        self._renewed_at_us = 0
        self._pruned_at_us = 0

    @property
    def reachable(self) -> bool:
        """Whether the store reaches other processes (and this side is not closed)."""
        return self._publisher.reaches_peers

    def watching(self, conversation_id: str) -> bool:
        """Whether another process said lately that it watches the conversation."""
        until = self._elsewhere.get(conversation_id)
        if until is None:
            return False
        if until < self._now_us():
            del self._elsewhere[conversation_id]
            return False
        return True

    def _forget_lapsed(self) -> None:
        """Drop the notices that lapsed (at most once per lapse time: the map stays as large
        as what other processes watch now, not as what they ever watched)."""
        now = self._now_us()
        if now - self._pruned_at_us >= _WATCHED_US:
            self._pruned_at_us = now
            self._elsewhere = {c: until for c, until in self._elsewhere.items() if until >= now}

    # -- this process's drafts ----------------------------------------------------------------

    def drafted(self, draft: Draft, offset: int, piece: str) -> None:
        if self.watching(draft.conversation_id):
            run_id, step = draft.key
            self._publisher.send(Live(DELTA, self.hub_id, draft.conversation_id, run_id, step,
                                      offset, piece))

    def sealed(self, draft: Draft) -> None:
        if self.watching(draft.conversation_id):
            run_id, step = draft.key
            self._publisher.send(Live(DELTA, self.hub_id, draft.conversation_id, run_id, step,
                                      draft.length, "", final=True))

    def discarded(self, draft: Draft, reason: str) -> None:
        if self.watching(draft.conversation_id):
            run_id, step = draft.key
            self._publisher.send(Live(DISCARD, self.hub_id, draft.conversation_id, run_id, step,
                                      reason=reason))

    def noticed(self, live: Live, drafts: Iterable[Draft]) -> None:
        """Another process watches ``live.conversation_id`` (a snapshot request or a watch
        notice): pieces of its ``drafts`` go out from now on, and the drafts whole from offset 0
        when it asks, or when it was not known to watch (its pieces went nowhere until now)."""
        news = not self.watching(live.conversation_id)
        self._elsewhere[live.conversation_id] = self._now_us() + _WATCHED_US
        self._forget_lapsed()
        if live.kind == REQUEST or news:
            for draft in drafts:
                run_id, step = draft.key
                self._publisher.resend(Live(DELTA, self.hub_id, live.conversation_id, run_id,
                                            step, 0, draft.text))

    # -- the conversations this process watches -----------------------------------------------

    def ask_for_drafts(self, channel: Channel) -> None:
        """Ask the conversation's writers elsewhere for their drafts (a snapshot request;
        again at most every ``_ASK_AGAIN_US``)."""
        now = self._now_us()
        if self._publisher.reaches_peers and now - channel.asked_at_us >= _ASK_AGAIN_US:
            channel.asked_at_us = now
            self._publisher.send(Live(REQUEST, self.hub_id, channel.conversation_id))

    def renew(self, conversation_ids: Iterable[str]) -> None:
        """Tell the others that these conversations are still watched here (one notice for
        all, at most every ``_RENEW_US``)."""
        now = self._now_us()
        if self._publisher.reaches_peers and now - self._renewed_at_us >= _RENEW_US:
            self._renewed_at_us = now
            self._publisher.announce([Live(WATCH, self.hub_id, conversation_id)
                                      for conversation_id in conversation_ids])

    async def close(self) -> None:
        await self._publisher.close()


__all__ = ("Peers",)
