"""Live messages to other processes: coalesced per conversation, at most one send in flight.

A model may stream hundreds of small pieces a second; a NOTIFY costs a round trip. So each
conversation has a queue here: while one send is in flight, the pieces that arrive are merged
into as few messages as they can be (contiguous pieces of one step become one), and the next
send carries them all. A send never waits on the event loop (the store sends from a thread of
its own) and never slows the writer's commits.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace

from tidings.feed.wire import DELTA, Live, encode
from tidings.store import Store

log = logging.getLogger("tidings.feed")


@dataclass(slots=True)
class _Queue:
    items: list[Live] = field(default_factory=list)
    sending: asyncio.Task[None] | None = None
    scheduled: bool = False


class Publisher:
    """Sends the live messages of this process's drafts to the other processes' hubs."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._queues: dict[str, _Queue] = {}
        self._notices: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def reaches_peers(self) -> bool:
        return self.store.feed_reaches_peers and not self._closed

    def send(self, live: Live) -> None:
        """Queue ``live``; it goes out with the next send of its conversation."""
        if not self.reaches_peers:
            return
        queue = self._queues.setdefault(live.conversation_id, _Queue())
        last = queue.items[-1] if queue.items else None
        if (live.kind == DELTA and last is not None and last.kind == DELTA and not last.final
                and (last.run_id, last.step) == (live.run_id, live.step)
                and last.offset + len(last.text) == live.offset):
            queue.items[-1] = replace(last, text=last.text + live.text, final=live.final)
        else:
            queue.items.append(live)
        self._schedule(live.conversation_id, queue)

    def resend(self, live: Live) -> None:
        """Queue a whole draft from offset 0 (a snapshot): it replaces the queued pieces of
        the same step, which it holds."""
        if not self.reaches_peers:
            return
        queue = self._queues.setdefault(live.conversation_id, _Queue())
        queue.items = [i for i in queue.items
                       if not (i.kind == DELTA and (i.run_id, i.step) == (live.run_id, live.step))]
        queue.items.append(live)
        self._schedule(live.conversation_id, queue)

    def announce(self, notices: list[Live]) -> None:
        """Send notices about many conversations (watch notices) together: one send, not
        one per conversation; a notice lost is sent again at the next renewal."""
        if not self.reaches_peers or not notices:
            return
        limit = self.store.feed_payload_bytes
        messages = [message for notice in notices for message in encode(notice, limit)]
        task = asyncio.create_task(self._send_notices(messages))
        self._notices.add(task)
        task.add_done_callback(self._notices.discard)

    async def _send_notices(self, messages: list[str]) -> None:
        try:
            await self.store.publish_feed(messages)
        except Exception:  # a hint lost: the next renewal says it again
            log.exception("feed watch notices were not sent")

    def _schedule(self, conversation_id: str, queue: _Queue) -> None:
        if queue.sending is None and not queue.scheduled:
            # On the next pass of the loop: what the caller adds meanwhile (the rest of a
            # burst of pieces, the reply's end) goes in the same send.
            queue.scheduled = True
            asyncio.get_running_loop().call_soon(self._flush, conversation_id)

    def _flush(self, conversation_id: str) -> None:
        queue = self._queues.get(conversation_id)
        if queue is None:
            return
        queue.scheduled = False
        if self._closed or not queue.items:
            self._queues.pop(conversation_id, None)
            return
        items, queue.items = queue.items, []
        limit = self.store.feed_payload_bytes
        messages = [message for item in items for message in encode(item, limit)]
        queue.sending = asyncio.create_task(self._send(conversation_id, messages))

    async def _send(self, conversation_id: str, messages: list[str]) -> None:
        try:
            await self.store.publish_feed(messages)
        except Exception:  # a hint lost: the commit still shows the text
            log.exception("live feed messages of %s were not sent", conversation_id)
        finally:
            queue = self._queues.get(conversation_id)
            if queue is not None:
                queue.sending = None
                self._flush(conversation_id)

    async def close(self) -> None:
        self._closed = True
        sending = [q.sending for q in self._queues.values() if q.sending is not None]
        sending += self._notices
        self._queues.clear()
        for task in sending:
            task.cancel()
        await asyncio.gather(*sending, return_exceptions=True)


__all__ = ("Publisher",)
