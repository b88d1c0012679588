"""Helpers for the feed tests: a watcher that keeps what it saw, and a model whose answer the
test lets out piece by piece.

Nothing here sleeps to wait: a test waits for what the watcher has seen (with a deadline that
only stops a broken test from hanging) and lets the model go on when it is ready.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidings import FeedEvent
from tidings.models.base import DeltaCallback, ModelError, ModelReply, ModelRequest

WITHIN_S = 20.0


class Collector:
    """Reads a feed in a task of its own and keeps every event, in order."""

    def __init__(self, feed: AsyncIterator[FeedEvent]) -> None:
        self.feed = feed
        self.events: list[FeedEvent] = []
        self._changed = asyncio.Event()
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for event in self.feed:
                self.events.append(event)
                self._changed.set()
        finally:
            self._changed.set()

    async def until(self, condition: Callable[[list[FeedEvent]], object], *, what: str,
                    within_s: float = WITHIN_S) -> list[FeedEvent]:
        """Wait until ``condition(events)`` holds; fail with what was seen otherwise."""
        try:
            async with asyncio.timeout(within_s):
                while not condition(self.events):
                    if self.task.done():
                        self.task.result()  # raise what ended it
                        raise AssertionError(f"the feed ended before {what}")
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            raise AssertionError(f"not within {within_s} s: {what}; saw {self.summary()}") \
                from None
        return self.events

    async def ended(self, *, within_s: float = WITHIN_S) -> list[FeedEvent]:
        """Wait for the feed to end by itself."""
        async with asyncio.timeout(within_s):
            await self.task
        return self.events

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        aclose = getattr(self.feed, "aclose", None)
        if aclose is not None:
            await aclose()

    def summary(self) -> list[tuple[Any, ...]]:
        return [(e.seq, e.type, e.data.get("text", e.data.get("status", ""))) for e in self.events]


def journal(events: Sequence[FeedEvent]) -> list[FeedEvent]:
    """The committed events among ``events``."""
    return [e for e in events if e.seq is not None]


def deltas(events: Sequence[FeedEvent]) -> list[tuple[int, str]]:
    """The ``(offset, text)`` of every ``message_delta`` among ``events``, in order."""
    return [(e.data["offset"], e.data["text"]) for e in events if e.type == "message_delta"]


def assembled(events: Sequence[FeedEvent]) -> str:
    """The text the deltas build, checking that each piece starts where the last ended."""
    text = ""
    for offset, piece in deltas(events):
        assert offset == len(text), f"a delta at {offset} after {len(text)} characters"
        text += piece
    return text


def turn_ended(events: Sequence[FeedEvent], status: str = "completed") -> bool:
    return any(e.type == "turn_status" and e.data.get("status") == status for e in events)


def committed(events: Sequence[FeedEvent], role: str) -> list[dict[str, Any]]:
    """The messages of a role that ``message_committed`` events carried, in order."""
    return [e.data["message"] for e in events
            if e.type == "message_committed" and e.data["message"]["role"] == role]


@dataclass
class Pieces:
    """A model that streams ``pieces`` of its answer: the first at once, each next one when
    the test calls :meth:`allow`. It may then fail with ``error`` instead of answering, or
    hang (``hang=True``) until it is cancelled."""

    pieces: Sequence[str]
    name: str = "scripted"
    error: ModelError | None = None
    hang: bool = False
    calls: int = 0
    _allowed: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(0))

    def allow(self, count: int = 1) -> None:
        for _ in range(count):
            self._allowed.release()

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        self.calls += 1
        for index, piece in enumerate(self.pieces):
            if index:
                await self._allowed.acquire()
            if on_delta is not None:
                on_delta(piece)
        if self.hang:
            await asyncio.Event().wait()
        if self.error is not None:
            raise self.error
        return ModelReply("".join(self.pieces), model=request.model)


@dataclass
class Elsewhere:
    """A model registered only so that a conversation naming it can be created here, while its
    turns run in another process: called here, it fails the test's turn loudly."""

    name: str = "scripted"

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        raise AssertionError("this process was not meant to run the turn")


__all__ = ("Collector", "Elsewhere", "FeedEvent", "Pieces", "assembled", "committed", "deltas",
           "journal", "turn_ended")
