"""The runtime's owner-scoped views of a conversation's background work and signals, and the
operator's views and acts across every conversation.

Each view reads the conversation first (as ``owner``'s, when given): another owner's
conversation answers exactly as an unknown one does. Without a conversation, the signal views
are the operator's totals, refused to an owner; so are the instances and the acts on dead
letters (:mod:`tidings.records.dead_letters`). :class:`~tidings.runtime.root.Runtime` offers
them as its own methods.
"""

from __future__ import annotations

from tidings.conversations.catalog import Conversations, ConversationSummary
from tidings.errors import InvalidInputError
from tidings.records.dead_letters import DeadLetterDetail, DeadLetters, Settled
from tidings.records.instances import InstanceRecord, list_instances
from tidings.records.keyring import Keyring
from tidings.records.outbox import Outbox
from tidings.records.results import ResultPage, ResultRef
from tidings.support.locking import mutation
from tidings.support.policy import check_id, check_position
from tidings.tasks.journal import TaskRecord
from tidings.tasks.service import BackgroundTasks
from tidings.types import DeadLetter, QueueStats


class BackgroundViews:
    """Tasks, results and signals, read on an owner's (or an operator's) behalf."""

    conversations: Conversations
    tasks: BackgroundTasks
    keyring: Keyring
    outbox: Outbox
    locked: bool

    # -- conversations at a glance ------------------------------------------------------------

    async def conversation_summaries(
        self, owner: str | None, *, after: str = "", limit: int = 100, newest_first: bool = False
    ) -> list[ConversationSummary]:
        """A page of ``owner``'s conversations (every owner's: ``None``, an operator's view),
        each with its last activity and its newest run."""
        return await self.conversations.summaries(owner, after=after, limit=limit,
                                                  newest_first=newest_first)

    # -- tasks and results (owner-scoped) -----------------------------------------------------

    async def task_list(
        self, conversation_id: str, *, owner: str | None = None, before_us: int | None = None,
        limit: int = 100,
    ) -> list[TaskRecord]:
        if before_us is not None:
            check_position(before_us, "before_us")
        await self.conversations.get(conversation_id, owner=owner)
        return await self.tasks.list(conversation_id, before_us=before_us, limit=limit)

    async def task(
        self, conversation_id: str, task_key: str, *, owner: str | None = None
    ) -> TaskRecord:
        check_id(task_key, "task key")
        await self.conversations.get(conversation_id, owner=owner)
        return await self.tasks.get(conversation_id, task_key)

    async def result_list(
        self, conversation_id: str, *, owner: str | None = None, after: str = "",
        limit: int = 100,
    ) -> list[ResultRef]:
        await self.conversations.get(conversation_id, owner=owner)
        return await self.keyring.results().list(conversation_id, after=after, limit=limit)

    async def result_page(
        self, conversation_id: str, result_id: str, *, owner: str | None = None,
        offset: int = 0, limit_bytes: int | None = None,
    ) -> ResultPage:
        """One page of a result; another owner's conversation, or another conversation's
        result, is answered exactly like an unknown id (R2)."""
        await self.conversations.get(conversation_id, owner=owner)
        return await self.keyring.results().page(
            conversation_id, result_id, offset=offset, limit_bytes=limit_bytes
        )

    # -- signals ------------------------------------------------------------------------------

    async def signal_stats(
        self, conversation_id: str | None = None, *, owner: str | None = None
    ) -> QueueStats:
        """Backlog, oldest age, retries, dead letters: of one conversation, or of all (an
        operator's view: without ``owner``)."""
        await self._scope(conversation_id, owner, "totals over every conversation")
        return await self.outbox.stats(conversation_id)

    async def dead_letters(
        self, conversation_id: str | None = None, *, owner: str | None = None, limit: int = 100
    ) -> list[DeadLetter]:
        await self._scope(conversation_id, owner, "dead letters of every conversation")
        return await self.outbox.dead_letters(conversation_id, limit=limit)

    async def dead_letter(
        self, delivery_id: int, *, owner: str | None = None
    ) -> DeadLetterDetail:
        """One dead letter with its payload (an operator's inspection)."""
        await self._scope(None, owner, "single dead letters")
        return await self._dead_letters().get(delivery_id)

    @mutation
    async def retry_dead_letter(self, delivery_id: int, *, owner: str | None = None) -> Settled:
        """Deliver a dead letter again, with a fresh budget
        (see :mod:`tidings.records.dead_letters`)."""
        await self._scope(None, owner, "retries of dead letters")
        return await self._dead_letters().retry(delivery_id)

    @mutation
    async def discard_dead_letter(
        self, delivery_id: int, *, owner: str | None = None
    ) -> Settled:
        """Settle a dead letter without delivering it."""
        await self._scope(None, owner, "discards of dead letters")
        return await self._dead_letters().discard(delivery_id)

    def _dead_letters(self) -> DeadLetters:
        return DeadLetters(self.outbox.store, self.outbox.clock, self.outbox.config)

    # -- instances ----------------------------------------------------------------------------

    async def instances(
        self, *, owner: str | None = None, limit: int = 100
    ) -> list[InstanceRecord]:
        """The newest boots of runtimes over this database, live or not (an operator's view)."""
        await self._scope(None, owner, "instances")
        if not 1 <= limit <= 1_000:
            raise InvalidInputError("limit must be between 1 and 1000")
        return await list_instances(self.outbox.store, now_us=self.outbox.clock.now_us(),
                                    config=self.outbox.config, limit=limit)

    async def _scope(self, conversation_id: str | None, owner: str | None, what: str) -> None:
        """One conversation (``owner``'s, when given), or all of them: for operators only."""
        if conversation_id is not None:
            await self.conversations.get(conversation_id, owner=owner)
        elif owner is not None:
            raise InvalidInputError(f"{what} are for operators")


__all__ = ("BackgroundViews",)
