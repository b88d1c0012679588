"""The runtime's owner-scoped views of a conversation's background work and signals.

Each view reads the conversation first (as ``owner``'s, when given): another owner's
conversation answers exactly as an unknown one does. Without a conversation, the signal views
are the operator's totals, refused to an owner. :class:`~tidings.runtime.Runtime` offers them as
its own methods.
"""

from __future__ import annotations

from tidings.conversations import Conversations
from tidings.errors import InvalidInputError
from tidings.keyring import Keyring
from tidings.outbox import Outbox
from tidings.policy import check_id, check_position
from tidings.results import ResultPage, ResultRef
from tidings.tasks.journal import TaskRecord
from tidings.tasks.service import BackgroundTasks
from tidings.types import DeadLetter, QueueStats


class BackgroundViews:
    """Tasks, results and signals, read on an owner's (or an operator's) behalf."""

    conversations: Conversations
    tasks: BackgroundTasks
    keyring: Keyring
    outbox: Outbox

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

    async def _scope(self, conversation_id: str | None, owner: str | None, what: str) -> None:
        """One conversation (``owner``'s, when given), or all of them: for operators only."""
        if conversation_id is not None:
            await self.conversations.get(conversation_id, owner=owner)
        elif owner is not None:
            raise InvalidInputError(f"{what} are for operators")


__all__ = ("BackgroundViews",)
