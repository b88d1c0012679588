"""B1: one conversation's reader in one process. A commit announced while the reader is
reading the previous one is read at once -- not at the slow poll, a second later."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tidings.feed.channel import Channel
from tidings.types import ConversationId, Event, FeedEvent, RunId

CONV = "conv_1"


def event(seq: int) -> Event:
    return Event(ConversationId(CONV), seq, "noted", RunId("run_1"), {}, 0)


class Store:
    """Answers the channel's reads from a script; each read can be held open."""

    def __init__(self) -> None:
        self.answers: asyncio.Queue[tuple[list[Any], asyncio.Event | None]] = asyncio.Queue()
        self.reads = 0
        self.reading = asyncio.Event()

    async def read(self, unit: Callable[[Any], Any]) -> list[Any]:
        rows, gate = await self.answers.get()
        self.reads += 1
        self.reading.set()
        if gate is not None:
            await gate.wait()
        return rows


class Sink:
    """A watch as the channel sees it: what it was handed."""

    def __init__(self) -> None:
        self.got: list[FeedEvent] = []
        self.more = asyncio.Event()

    def push(self, event: FeedEvent, after: int = 0) -> None:
        self.got.append(event)
        self.more.set()


async def test_b1_a_commit_announced_during_a_read_is_read_at_once() -> None:
    store = Store()
    channel = Channel(store, CONV, lambda: 0)  # type: ignore[arg-type]
    sink = Sink()
    channel.watches.add(sink)  # type: ignore[arg-type]
    await store.answers.put(([{"last_event_seq": 1}], None))  # where the journal is
    held = asyncio.Event()
    await store.answers.put(([event(2)], held))
    channel.start()
    channel.hint(2)
    while store.reads < 2:  # until the reader is inside the read of row 2
        store.reading.clear()
        await store.reading.wait()
    channel.hint(3)  # row 3 commits meanwhile
    await store.answers.put(([event(3)], None))
    held.set()
    async with asyncio.timeout(0.5):  # well under the slow poll
        while [e.seq for e in sink.got] != [2, 3]:
            sink.more.clear()
            await sink.more.wait()
    assert store.reads == 3
    await channel.stop()

