"""The runtime's facade, grouped by what a caller acts on: ``runtime.conversations``,
``runtime.inputs``, ``runtime.runs``, ``runtime.children``, ``runtime.approvals`` and
``runtime.questions`` (the background work's are in :mod:`tidings.runtime.views`).

Every method that names a conversation reads it first, as ``owner``'s when ``owner`` is given:
another owner's conversation answers exactly as an unknown one does. Every method that changes
state refuses while the runtime is locked (:func:`~tidings.support.locking.mutation`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from tidings.conversations.approvals import Approval
from tidings.conversations.catalog import ConversationSummary
from tidings.conversations.questions import Question
from tidings.mail.child_requests import Cancelled, ChildRequest
from tidings.runtime.kernel import Kernel
from tidings.support.locking import mutation
from tidings.turns.retry import retry as retry_unit
from tidings.types import (
    Answer,
    Author,
    Conversation,
    GoalStatus,
    Input,
    Message,
    Profile,
    Run,
    StartKind,
)


class Group:
    """One part of the facade, over the runtime's components."""

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel

    @property
    def locked(self) -> bool:
        """The runtime's lock (L1): a locked runtime refuses this group's changes."""
        return self._kernel.locked

    async def _owned(self, conversation_id: str, owner: str | None) -> Conversation:
        """The conversation, ``owner``'s when given (a foreign one is unknown alike)."""
        return await self._kernel.catalog.get(conversation_id, owner=owner)


class RuntimeConversations(Group):
    """Conversations as a whole: listing them, their state, goal and profile."""

    async def summaries(
        self, owner: str | None, *, after: str = "", limit: int = 100, newest_first: bool = False
    ) -> list[ConversationSummary]:
        """A page of ``owner``'s conversations (every owner's: ``None``, an operator's view),
        each with its last activity and its newest run."""
        return await self._kernel.catalog.summaries(owner, after=after, limit=limit,
                                                    newest_first=newest_first)

    @mutation
    async def archive(self, conversation_id: str, *, owner: str | None = None) -> Conversation:
        """It takes no more callers' input; the kernel's mail to it still runs."""
        return await self._kernel.catalog.archive(conversation_id, owner=owner)

    @mutation
    async def unarchive(self, conversation_id: str, *, owner: str | None = None) -> Conversation:
        """Undo :meth:`archive`: callers' input is taken again."""
        return await self._kernel.catalog.unarchive(conversation_id, owner=owner)

    @mutation
    async def tombstone(self, conversation_id: str, *, owner: str | None = None) -> Conversation:
        """Delete: the conversation stops answering and is unknown to every reader from now."""
        return await self._kernel.catalog.tombstone(conversation_id, owner=owner)

    @mutation
    async def set_profile(
        self, conversation_id: str, profile: Profile | str, *, owner: str | None = None
    ) -> Conversation:
        """``profile``: a :class:`Profile`, or the name of one of the runtime's profiles."""
        return await self._kernel.catalog.set_profile(
            conversation_id, self._kernel.named(profile), owner=owner)

    @mutation
    async def set_goal(
        self, conversation_id: str, status: GoalStatus | str, text: str | None = None, *,
        owner: str | None = None,
    ) -> Conversation:
        """Set, pause, complete or clear the conversation's goal."""
        return await self._kernel.catalog.set_goal(conversation_id, status, text, owner=owner)

    @mutation
    async def checkpoint(self, conversation_id: str, *, owner: str | None = None) -> None:
        """A goal checkpoint: ask for an automatic turn toward the active goal."""
        await self._owned(conversation_id, owner)
        self._kernel.coordinator.request(conversation_id, StartKind.GOAL)

    @mutation
    async def compact(self, conversation_id: str, *, owner: str | None = None) -> int:
        """Compact the conversation's history now, between its turns."""
        return await self._kernel.coordinator.compact(conversation_id, owner=owner)

    async def list(self, owner: str, *, after: str = "", limit: int = 100) -> list[Conversation]:
        """The owner's conversations, by id (page with the last id)."""
        return await self._kernel.catalog.list_owned(owner, after=after, limit=limit)



class RuntimeInputs(Group):
    """What was posted, and what became of it."""

    async def get(self, input_id: str, *, owner: str | None = None) -> Input:
        """One input by its id, wherever it was posted (a foreign one is unknown alike)."""
        return await self._kernel.door.input(input_id, owner=owner)

    async def answer_of(self, item: Input) -> Answer:
        """What became of a posted input, as it stands now (:mod:`tidings.runtime.answers`)."""
        return await self._kernel.answers.read(item)

    async def list(self, conversation_id: str, *, owner: str | None = None) -> list[Input]:
        """The conversation's inputs, oldest first."""
        return await self._kernel.door.inputs(conversation_id, owner=owner)



class RuntimeRuns(Group):
    """A conversation's runs: reading them, stopping one, asking again after one."""

    async def get(self, run_id: str, *, owner: str | None = None) -> Run:
        return await self._kernel.catalog.run(run_id, owner=owner)

    async def transcript(
        self, conversation_id: str, run_id: str, *, owner: str | None = None
    ) -> list[Message]:
        """The messages of one run."""
        return await self._kernel.catalog.run_transcript(conversation_id, run_id, owner=owner)

    @mutation
    async def stop(
        self, conversation_id: str, run_id: str, *, owner: str | None = None
    ) -> list[str]:
        """Stop a source run, running or completed (M14): no more mail for it, in cascade down
        its children (M16); what it already published stays. See :mod:`tidings.mail.stop`.
        Returns the cancelled input ids."""
        cancelled, _ = await self._kernel.stops.stop_run(conversation_id, run_id, owner=owner,
                                                         seen=set())
        return cancelled

    @mutation
    async def retry(
        self, conversation_id: str, run_id: str, *, model: str | None = None,
        owner: str | None = None, authored_by: Author | None = None,
    ) -> Input:
        """A person asks again after a run failed or needs attention (C8), optionally naming
        another of the profile's models to try first. It enters through the door as the
        person's input (so a retry is a direct turn, and read in order); the turn it starts
        sees the whole history, so completed tool calls are not repeated. Retrying the same run
        with the same model twice admits it once."""
        await self._owned(conversation_id, owner)
        return await self._kernel.coordinator.start_with(
            conversation_id, StartKind.PERSON, functools.partial(
                retry_unit, door=self._kernel.door, run_id=run_id, model=model,
                authored_by=authored_by, owner=owner,
            ),
        )

    async def list(self, conversation_id: str, *, owner: str | None = None) -> list[Run]:
        return await self._kernel.catalog.runs(conversation_id, owner=owner)



class RuntimeChildren(Group):
    """The requests a parent opened in its children: spawns and sends."""

    @mutation
    async def cancel(
        self, parent_id: str, task_key: str, *, owner: str | None = None
    ) -> list[Cancelled]:
        """Cancel one request the parent opened (by its task key), in cascade (M16). Returns
        what was cancelled, the request first -- the canceller is told, even what lay below;
        empty when its reply was relayed or consumed already."""
        return await self._kernel.stops.cancel_child(parent_id, task_key, owner=owner)

    async def list(
        self, parent_id: str, *, owner: str | None = None, limit: int = 100
    ) -> list[ChildRequest]:
        """The requests the parent opened, oldest first, with what became of each: open,
        replied, cancelled; relayed or consumed in-run."""
        await self._owned(parent_id, owner)
        return await self._kernel.relay.requests_of(parent_id, limit=limit)



class RuntimeApprovals(Group):
    """Tool calls held for a person's decision (see :mod:`tidings.conversations.approvals`)."""

    @mutation
    async def decide(
        self, conversation_id: str, approval_id: str, *, approve: bool, decided_by: str,
        owner: str | None = None,
    ) -> Approval:
        """A person's decision on a held tool call."""
        await self._owned(conversation_id, owner)
        return await self._kernel.approval_records.decide(
            conversation_id, approval_id, approve=approve, decided_by=decided_by, owner=owner
        )

    async def list(
        self, conversation_id: str, *, owner: str | None = None, status: str = "",
        limit: int = 100,
    ) -> list[Approval]:
        """The conversation's approvals, newest first (``status`` filters: ``pending``...)."""
        await self._owned(conversation_id, owner)
        return await self._kernel.approval_records.list(conversation_id, status=status,
                                                        limit=limit)



class RuntimeQuestions(Group):
    """What the conversation's MCP servers asked its people
    (see :mod:`tidings.conversations.questions`)."""

    @mutation
    async def answer(
        self, conversation_id: str, question_id: str, *, action: str,
        content: Mapping[str, Any] | None = None, decided_by: str, owner: str | None = None,
    ) -> Question:
        """A person's answer: ``accept`` (with ``content`` that fits its schema), ``decline``
        or ``cancel``."""
        await self._owned(conversation_id, owner)
        return await self._kernel.question_records.decide(
            conversation_id, question_id, action=action, content=content,
            decided_by=decided_by, owner=owner)


    async def list(
        self, conversation_id: str, *, owner: str | None = None, status: str = "",
        limit: int = 100,
    ) -> list[Question]:
        """The conversation's questions, newest first (``status`` filters: ``pending``...)."""
        await self._owned(conversation_id, owner)
        return await self._kernel.question_records.list(conversation_id, status=status,
                                                        limit=limit)


__all__ = (
    "Group",
    "RuntimeApprovals",
    "RuntimeChildren",
    "RuntimeConversations",
    "RuntimeInputs",
    "RuntimeQuestions",
    "RuntimeRuns",
)
