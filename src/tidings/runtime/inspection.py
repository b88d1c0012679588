"""Inspection: reading a database that no runtime of this process runs (``tidings status``,
``tidings transcript``).

Opening an inspection registers no instance and reconciles nothing. What it shows comes through
the store's read API (:mod:`tidings.store.status`), the outbox's and the conversations' reads.
Its writes are a conversation's own (``tidings create``, ``archive``, ``unarchive``,
``profile``): they start no turn and need no runtime. It sits beside the runtime, so a front
end reaches the database through one of the two and never through the store itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType

from tidings.clock import SystemClock
from tidings.conversations.catalog import Conversations
from tidings.push import PushDeadLetter, PushDeliveries, PushDeliveryConfig
from tidings.records.outbox import Outbox, OutboxConfig
from tidings.records.rows import run_status
from tidings.store import Store, open_store
from tidings.store.status import OpenRun, StatusReport, read_status
from tidings.types import Conversation, DeadLetter, Message, Profile, QueueStats, RunStatus


@dataclass(frozen=True, slots=True)
class Status:
    """The signals, the live instances, running tasks and open runs, read in one visit."""

    stats: QueueStats
    report: StatusReport
    instance_timeout_us: int
    """An instance silent longer than this is taken for gone."""


def shown_status(run: OpenRun) -> RunStatus:
    """The status a person reads for an open run (awaiting approval, or running)."""
    return run_status(run.status, awaiting_approval=run.awaiting_approval)


class Inspection:
    """An open, read-only view of one database; use as ``async with await Inspection.open()``."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._outbox = Outbox(store)  # never started: it registers nothing, reconciles nothing
        self._conversations = Conversations(store, SystemClock())

    @classmethod
    async def open(cls, database: str, conversation: str | None = None) -> Inspection:
        """Open the store and check that ``conversation`` (when given) exists."""
        store = await open_store(database)
        if conversation is not None:
            try:
                await Conversations(store, SystemClock()).get(conversation)
            except BaseException:
                await store.close()
                raise
        return cls(store)

    async def status(self, conversation: str | None) -> Status:
        stats = await self._outbox.stats(conversation)
        report = await read_status(self._store, conversation)
        timeout_us = int(OutboxConfig().instance_timeout.total_seconds() * 1e6)
        return Status(stats, report, timeout_us)

    async def dead_letters(self, conversation: str | None, *, limit: int) -> list[DeadLetter]:
        return await self._outbox.dead_letters(conversation, limit=limit)

    async def push_dead_letters(self, *, limit: int) -> list[PushDeadLetter]:
        """A2A push notifications that failed for good (P3), oldest first."""
        return await PushDeliveries(self._store, SystemClock(),
                                    PushDeliveryConfig()).dead_letters(limit=limit)

    async def transcript(self, conversation_id: str, *, after_seq: int = 0) -> list[Message]:
        """A page of the conversation's messages after ``after_seq``."""
        return await self._conversations.transcript(conversation_id, after_seq=after_seq)

    async def create_conversation(
        self, owner: str, profile: Profile, *, title: str = ""
    ) -> Conversation:
        """Open a conversation for ``owner``; the runtime that serves the database answers it."""
        return await self._conversations.create(owner, profile, title=title)

    async def archive(self, conversation_id: str) -> Conversation:
        return await self._conversations.archive(conversation_id)

    async def unarchive(self, conversation_id: str) -> Conversation:
        return await self._conversations.unarchive(conversation_id)

    async def set_profile(self, conversation_id: str, profile: Profile) -> Conversation:
        """Change the profile; the next turn, of whichever runtime serves the database, uses
        it (the models and tools it names are checked by that runtime, not here)."""
        return await self._conversations.set_profile(conversation_id, profile)

    async def close(self) -> None:
        await self._store.close()

    async def __aenter__(self) -> Inspection:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.close()


__all__ = ("Inspection", "PushDeadLetter", "Status", "shown_status")
