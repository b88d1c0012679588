"""The runtime's facade over background work and signals: ``runtime.tasks``,
``runtime.results`` and ``runtime.signals``.

Each view reads the conversation first (as ``owner``'s, when given): another owner's
conversation answers exactly as an unknown one does. Without a conversation, the signal views
are the operator's totals, refused to an owner; so are the acts on dead letters
(:mod:`tidings.records.dead_letters`).
"""

from __future__ import annotations

from tidings.errors import InvalidInputError
from tidings.records.dead_letters import DeadLetterDetail, DeadLetters, Settled
from tidings.records.results import ResultPage, ResultRef
from tidings.runtime.groups import Group
from tidings.support.locking import mutation
from tidings.support.policy import check_id, check_position
from tidings.tasks.journal import TaskRecord
from tidings.types import DeadLetter, QueueStats


class RuntimeTasks(Group):
    """A conversation's background tasks: processes, MCP tasks, remote agents' tasks."""

    async def get(
        self, conversation_id: str, task_key: str, *, owner: str | None = None
    ) -> TaskRecord:
        check_id(task_key, "task key")
        await self._owned(conversation_id, owner)
        return await self._kernel.background.get(conversation_id, task_key)

    async def list(
        self, conversation_id: str, *, owner: str | None = None, before_us: int | None = None,
        limit: int = 100,
    ) -> list[TaskRecord]:
        """The conversation's tasks, newest first (page with ``before_us``)."""
        if before_us is not None:
            check_position(before_us, "before_us")
        await self._owned(conversation_id, owner)
        return await self._kernel.background.list(conversation_id, before_us=before_us,
                                                  limit=limit)



class RuntimeResults(Group):
    """A conversation's result envelopes: what its tasks and tools kept, sealed at rest. They
    need the master key (``master_key=`` or the environment)."""

    async def page(
        self, conversation_id: str, result_id: str, *, owner: str | None = None,
        offset: int = 0, limit_bytes: int | None = None,
    ) -> ResultPage:
        """One page of a result; another owner's conversation, or another conversation's
        result, is answered exactly like an unknown id (R2)."""
        await self._owned(conversation_id, owner)
        return await self._kernel.keyring.results().page(
            conversation_id, result_id, offset=offset, limit_bytes=limit_bytes
        )

    async def get(
        self, conversation_id: str, result_id: str, *, owner: str | None = None
    ) -> tuple[ResultRef, bytes]:
        """A result whole: its reference and its bytes (empty once it expired)."""
        await self._owned(conversation_id, owner)
        return await self._kernel.keyring.results().get(conversation_id, result_id)

    async def list(
        self, conversation_id: str, *, owner: str | None = None, after: str = "",
        limit: int = 100,
    ) -> list[ResultRef]:
        """The conversation's results, oldest first (page with the last id)."""
        await self._owned(conversation_id, owner)
        return await self._kernel.keyring.results().list(conversation_id, after=after,
                                                         limit=limit)



class RuntimeSignals(Group):
    """The signals' deliveries: their backlog, and the dead letters an operator settles."""

    async def stats(
        self, conversation_id: str | None = None, *, owner: str | None = None
    ) -> QueueStats:
        """Backlog, oldest age, retries, dead letters: of one conversation, or of all (an
        operator's view: without ``owner``)."""
        await self._scope(conversation_id, owner, "totals over every conversation")
        return await self._kernel.outbox.stats(conversation_id)

    async def dead_letters(
        self, conversation_id: str | None = None, *, owner: str | None = None, limit: int = 100
    ) -> list[DeadLetter]:
        await self._scope(conversation_id, owner, "dead letters of every conversation")
        return await self._kernel.outbox.dead_letters(conversation_id, limit=limit)

    async def dead_letter(
        self, delivery_id: int, *, owner: str | None = None
    ) -> DeadLetterDetail:
        """One dead letter with its payload (an operator's inspection)."""
        await self._scope(None, owner, "single dead letters")
        return await self._dead_letters().get(delivery_id)

    @mutation
    async def retry(self, delivery_id: int, *, owner: str | None = None) -> Settled:
        """Deliver a dead letter again, with a fresh budget."""
        await self._scope(None, owner, "retries of dead letters")
        return await self._dead_letters().retry(delivery_id)

    @mutation
    async def discard(self, delivery_id: int, *, owner: str | None = None) -> Settled:
        """Settle a dead letter without delivering it."""
        await self._scope(None, owner, "discards of dead letters")
        return await self._dead_letters().discard(delivery_id)

    async def _scope(self, conversation_id: str | None, owner: str | None, what: str) -> None:
        """One conversation (``owner``'s, when given), or all of them: for operators only."""
        if conversation_id is not None:
            await self._owned(conversation_id, owner)
        elif owner is not None:
            raise InvalidInputError(f"{what} are for operators")

    def _dead_letters(self) -> DeadLetters:
        outbox = self._kernel.outbox
        return DeadLetters(outbox.store, outbox.clock, outbox.config)


__all__ = ("RuntimeResults", "RuntimeSignals", "RuntimeTasks")
