"""The history window of recently active conversations, read incrementally.

Only the holder of a conversation's slot appends to its transcript, and a turn reads its
history right after the unit that took the slot, which reports the conversation's
``history_start_seq`` and ``last_message_seq``. A window cached for the same start is therefore
exact up to its own last message, and is brought up to date by reading only the messages after
it -- and what this process committed itself is added without reading it back. The cache is
bounded in conversations and in bytes (the least recently used are dropped), so an idle
conversation costs nothing once it ages out; it lives in one process only, and another
process's writes are simply read on the next turn.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from tidings.models.base import PromptMessage
from tidings.records.rows import message_from_row
from tidings.store import Store
from tidings.turns.context import history_window, prompt_message
from tidings.types import Message


@dataclass(slots=True)
class _Window:
    """A conversation's newest messages in order (no per-message tuples: a cache of hundreds
    of conversations is that many fewer objects for every full garbage collection to walk)."""

    start_seq: int
    last_seq: int
    messages: list[PromptMessage]
    size: int = 0

    def measure(self) -> int:
        self.size = sum(_size(m) for m in self.messages)
        return self.size


def _size(message: PromptMessage) -> int:
    # Roughly what the message holds in memory: its text, its calls, and a fixed overhead.
    calls = sum(len(c.name) + 64 for c in message.tool_calls)
    return len(message.content) + calls + 256


class HistoryCache:
    """Newest ``limit`` messages per conversation after its last compaction."""

    def __init__(
        self,
        store: Store,
        *,
        limit: int,
        max_conversations: int = 512,
        max_bytes: int = 32 * 1024 * 1024,
    ) -> None:
        self.store = store
        self.limit = limit
        self.max_conversations = max_conversations
        self.max_bytes = max_bytes
        self._windows: OrderedDict[str, _Window] = OrderedDict()
        self._bytes = 0
        self.reads = 0
        self.rows = 0

    async def window(
        self, conversation_id: str, *, start_seq: int, last_seq: int
    ) -> list[PromptMessage]:
        """The history a request carries: never opening inside a tool exchange."""
        cached = self._windows.pop(conversation_id, None)
        if cached is not None:
            self._bytes -= cached.size
        measured = False
        if (
            cached is not None
            and cached.start_seq == start_seq
            and cached.last_seq <= last_seq
            and last_seq - cached.last_seq <= self.limit
        ):
            if cached.last_seq < last_seq:
                cached.messages += await self._read(
                    "transcript", conversation_id, cached.last_seq, last_seq - cached.last_seq
                )
                del cached.messages[: max(0, len(cached.messages) - self.limit)]
                cached.last_seq = last_seq
                measured = True
        else:
            newest = await self._read("history", conversation_id, start_seq, self.limit)
            newest.reverse()  # read newest first: the window runs oldest first
            cached = _Window(start_seq, last_seq, newest)
            measured = True
        self._windows[conversation_id] = cached
        self._bytes += cached.measure() if measured else cached.size
        while self._windows and (
            len(self._windows) > self.max_conversations or self._bytes > self.max_bytes
        ):
            _, dropped = self._windows.popitem(last=False)
            self._bytes -= dropped.size
        return history_window(cached.messages)  # a copy: the cache moves on

    def extend(
        self, conversation_id: str, *, start_seq: int, messages: list[Message]
    ) -> None:
        """Add what this process just committed, so the next turn need not read it back.

        Only a window that ends right before the first new message is extended; anything else
        is dropped and read afresh next time.
        """
        cached = self._windows.get(conversation_id)
        if cached is None or not messages:
            return
        if cached.start_seq != start_seq or cached.last_seq + 1 != messages[0].seq:
            self.forget(conversation_id)
            return
        added = [prompt_message(m) for m in messages]
        cached.messages += added
        grown = sum(_size(m) for m in added)
        excess = max(0, len(cached.messages) - self.limit)
        shrunk = sum(_size(m) for m in cached.messages[:excess])
        del cached.messages[:excess]
        cached.last_seq = messages[-1].seq
        cached.size += grown - shrunk
        self._bytes += grown - shrunk

    def forget(self, conversation_id: str) -> None:
        dropped = self._windows.pop(conversation_id, None)
        if dropped is not None:
            self._bytes -= dropped.size

    async def _read(
        self, query: str, conversation_id: str, after_seq: int, limit: int
    ) -> list[PromptMessage]:
        rows = await self.store.read(
            lambda tx: tx.all(query, conversation_id=conversation_id, after_seq=after_seq,
                              limit=limit)
        )
        self.reads += 1
        self.rows += len(rows)
        return [prompt_message(message_from_row(r)) for r in rows]
