"""The public facade: one runtime instance over one database.

::

    async with Runtime.open("sqlite:///agent.db", models=[ScriptedModel()]) as runtime:
        conversation = await runtime.create_conversation("alice", Profile(model="scripted"))
        await runtime.post(conversation.conversation_id, "hello")
        await runtime.settle(conversation.conversation_id)
        print(await runtime.transcript(conversation.conversation_id))

The verbs of a conversation's life are the runtime's own methods; the rest is grouped by what it
acts on -- ``runtime.conversations``, ``runtime.inputs``, ``runtime.runs``, ``runtime.children``,
``runtime.approvals``, ``runtime.questions`` (:mod:`tidings.runtime.groups`), ``runtime.tasks``,
``runtime.results`` and ``runtime.signals`` (:mod:`tidings.runtime.views`). The components and
their lifetime are the :class:`~tidings.runtime.kernel.Kernel`'s.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any, Literal, overload

from tidings.agents import RemoteAgent
from tidings.clock import Clock
from tidings.errors import InvalidInputError
from tidings.feed import Watch
from tidings.mcp import MCPServer
from tidings.models.base import Model
from tidings.records.instances import InstanceRecord, list_instances
from tidings.records.results import MasterKey
from tidings.records.transcript import ConversationTx
from tidings.runtime.answers import DEFAULT_TIMEOUT, timeout_seconds
from tidings.runtime.config import RuntimeConfig
from tidings.runtime.groups import (
    RuntimeApprovals,
    RuntimeChildren,
    RuntimeConversations,
    RuntimeInputs,
    RuntimeQuestions,
    RuntimeRuns,
)
from tidings.runtime.kernel import Kernel
from tidings.runtime.views import RuntimeResults, RuntimeSignals, RuntimeTasks
from tidings.scheduler.settling import settle
from tidings.store import Store, open_store
from tidings.support.locking import mutation
from tidings.tools.registry import Tool
from tidings.types import (
    Answer,
    Author,
    Conversation,
    DeliveryMode,
    Event,
    Input,
    Message,
    Origin,
    Profile,
    Run,
    RunId,
    StartKind,
)


class Runtime(Kernel):
    """One runtime instance over one database: the verbs of a conversation's life, and the
    rest of the facade in groups."""

    conversations: RuntimeConversations
    inputs: RuntimeInputs
    runs: RuntimeRuns
    children: RuntimeChildren
    approvals: RuntimeApprovals
    questions: RuntimeQuestions
    tasks: RuntimeTasks
    results: RuntimeResults
    signals: RuntimeSignals

    def __init__(
        self, store: Store, *, models: Mapping[str, Model] | Iterable[Model],
        tools: Iterable[Tool] = (), clock: Clock | None = None,
        config: RuntimeConfig | None = None, master_key: MasterKey | None = None,
        owns_store: bool = False, profiles: Mapping[str, Profile] | None = None,
        mcp_servers: Iterable[MCPServer] = (), agents: Iterable[RemoteAgent] = (),
    ) -> None:
        super().__init__(store, models=models, tools=tools, clock=clock, config=config,
                         master_key=master_key, owns_store=owns_store, profiles=profiles,
                         mcp_servers=mcp_servers, agents=agents)
        self.conversations = RuntimeConversations(self)
        self.inputs = RuntimeInputs(self)
        self.runs = RuntimeRuns(self)
        self.children = RuntimeChildren(self)
        self.approvals = RuntimeApprovals(self)
        self.questions = RuntimeQuestions(self)
        self.tasks = RuntimeTasks(self)
        self.results = RuntimeResults(self)
        self.signals = RuntimeSignals(self)

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls, database_url: str, *, models: Mapping[str, Model] | Iterable[Model],
        tools: Iterable[Tool] = (), clock: Clock | None = None,
        config: RuntimeConfig | None = None, master_key: MasterKey | None = None,
        store_options: Mapping[str, Any] | None = None, locked: bool = False,
        profiles: Mapping[str, Profile] | None = None, mcp_servers: Iterable[MCPServer] = (),
        agents: Iterable[RemoteAgent] = (),
    ) -> AsyncIterator[Runtime]:
        """Open the database (migrating it), start a runtime on it, and close both on exit.

        ``locked``: boot locked (L1) -- migrated, with its instance id, but claiming,
        delivering and accepting nothing until :meth:`unlock` gives it the master key.
        """
        store = await open_store(database_url, **dict(store_options or {}))
        runtime = cls(store, models=models, tools=tools, clock=clock, config=config,
                      master_key=master_key, owns_store=True, profiles=profiles,
                      mcp_servers=mcp_servers, agents=agents)
        try:
            await runtime.start(locked=locked)
            yield runtime
        finally:
            await runtime.close()

    # -- conversations ------------------------------------------------------------------------

    @mutation
    async def create_conversation(
        self, owner: str, profile: Profile | str, *, title: str = ""
    ) -> Conversation:
        """``profile``: a :class:`Profile`, or the name of one of :attr:`profiles`."""
        return await self.catalog.create(owner, self.named(profile), title=title)

    async def conversation(self, conversation_id: str, *, owner: str | None = None) -> Conversation:
        """The conversation, with its usage: the sums over its runs."""
        return await self.catalog.get(conversation_id, owner=owner, with_usage=True)

    # -- the door -----------------------------------------------------------------------------

    # ``self, /``: as the lock check (:func:`mutation`) passes it, positionally.
    @overload
    async def post(
        self, /, conversation_id: str, content: str, *, wait: Literal[False] = False,
        origin: Origin | str = ..., authored_by: Author | None = ...,
        delivery_mode: DeliveryMode | str = ..., sender_conversation_id: str | None = ...,
        run_public_id: str | None = ..., task_key: str | None = ...,
        meta: Mapping[str, Any] | None = ..., idempotency_key: str | None = ...,
        owner: str | None = ...,
    ) -> Input: ...

    @overload
    async def post(
        self, /, conversation_id: str, content: str, *, wait: Literal[True],
        timeout: timedelta | float = ..., origin: Origin | str = ...,  # noqa: ASYNC109
        authored_by: Author | None = ..., delivery_mode: DeliveryMode | str = ...,
        sender_conversation_id: str | None = ..., run_public_id: str | None = ...,
        task_key: str | None = ..., meta: Mapping[str, Any] | None = ...,
        idempotency_key: str | None = ..., owner: str | None = ...,
        until: Callable[[Answer], Awaitable[bool]] | None = ...,
    ) -> Answer: ...

    @overload
    async def post(
        self, /, conversation_id: str, content: str, *, wait: bool,
        timeout: timedelta | float = ..., origin: Origin | str = ...,  # noqa: ASYNC109
        authored_by: Author | None = ..., delivery_mode: DeliveryMode | str = ...,
        sender_conversation_id: str | None = ..., run_public_id: str | None = ...,
        task_key: str | None = ..., meta: Mapping[str, Any] | None = ...,
        idempotency_key: str | None = ..., owner: str | None = ...,
        until: Callable[[Answer], Awaitable[bool]] | None = ...,
    ) -> Input | Answer: ...

    @mutation
    async def post(
        self, conversation_id: str, content: str, *, wait: bool = False,
        # A timeout here answers as it stands; asyncio.timeout around the call would raise and
        # lose the answer (the input is committed either way).
        timeout: timedelta | float = DEFAULT_TIMEOUT,  # noqa: ASYNC109
        origin: Origin | str = Origin.PERSON,
        authored_by: Author | None = None,
        delivery_mode: DeliveryMode | str = DeliveryMode.QUEUE,
        sender_conversation_id: str | None = None, run_public_id: str | None = None,
        task_key: str | None = None, meta: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None, owner: str | None = None,
        until: Callable[[Answer], Awaitable[bool]] | None = None,
    ) -> Input | Answer:
        """Admit an input through the single door and ask for a turn (M1, C2).

        When the conversation is idle here, the input and the start of its turn commit in
        one transaction. With ``wait``, return instead the input's :class:`Answer` once the
        run that read it ended or awaits approval, or once ``timeout`` (seconds, or a
        timedelta) passed -- or, given ``until``, once it says so of the answer as it stands
        when the wait looks: then as it stands (:mod:`tidings.runtime.answers`).
        """
        if wait:
            timeout_seconds(timeout)  # a bad bound is refused before anything is written
        admission = self.door.prepare(
            conversation_id, content, origin=origin, authored_by=authored_by,
            delivery_mode=delivery_mode, sender_conversation_id=sender_conversation_id,
            run_public_id=run_public_id, task_key=task_key, meta=meta,
            idempotency_key=idempotency_key, owner=owner,
        )
        kind = StartKind.PERSON if admission.origin is Origin.PERSON else StartKind.AGENT
        if not wait:
            return await self.coordinator.start_with(
                conversation_id, kind, lambda cx: self.door.admit(cx, admission)
            )
        marks: list[int | None] = []

        def admit(cx: ConversationTx) -> Input:
            # The conversation's mark as of this commit: the wait reads nothing while it holds.
            cx.tx.after_commit(lambda: marks.append(self.store.wakeups.mark(conversation_id)))
            return self.door.admit(cx, admission)

        item = await self.coordinator.start_with(conversation_id, kind, admit)
        return await self.answers.wait(item, timeout, until=until,
                                       mark=marks[0] if marks else None)

    @mutation
    async def stop(self, conversation_id: str, *, owner: str | None = None) -> list[RunId]:
        """A person's stop of the running turn: it is stopped as ``runs.stop`` stops a source
        (its mail suppressed, its children's requests cancelled, in cascade)."""
        return await self.stops.stop(conversation_id, owner=owner)

    # -- reading ------------------------------------------------------------------------------

    async def transcript(
        self, conversation_id: str, *, after_seq: int = 0, owner: str | None = None
    ) -> list[Message]:
        return await self.catalog.transcript(conversation_id, after_seq=after_seq,
                                             owner=owner)

    async def events(
        self, conversation_id: str, *, after_seq: int = 0, owner: str | None = None
    ) -> list[Event]:
        return await self.catalog.events(conversation_id, after_seq=after_seq, owner=owner)

    def watch(self, conversation_id: str, *, after_seq: int = 0,
              owner: str | None = None) -> Watch:
        """The conversation's feed after ``after_seq``, then live: an async iterator of
        :class:`FeedEvent` (see :mod:`tidings.feed`)."""
        return self.feed.watch(conversation_id, after_seq=after_seq, read=lambda after: (
            self.events(conversation_id, after_seq=after, owner=owner)))

    async def settle(self, conversation_id: str) -> list[Run]:
        """Wait until the conversation is settled (see :mod:`tidings.scheduler.settling`): nothing
        pending or running here, or what runs there waits for a person. Returns the runs that
        are ``awaiting_approval`` then (empty when the conversation settled).

        A locked runtime runs nothing, so there is nothing to wait for: it returns at once
        (and starts nothing, L1).
        """
        if self.locked:
            return []
        return await settle(conversation_id, coordinator=self.coordinator,
                            approvals=self.approval_records, conversations=self.catalog)

    async def instances(
        self, *, owner: str | None = None, limit: int = 100
    ) -> list[InstanceRecord]:
        """The newest boots of runtimes over this database, live or not (an operator's view)."""
        if owner is not None:
            raise InvalidInputError("instances are for operators")
        if not 1 <= limit <= 1_000:
            raise InvalidInputError("limit must be between 1 and 1000")
        return await list_instances(self.store, now_us=self.clock.now_us(),
                                    config=self.config.outbox, limit=limit)


__all__ = ("Runtime", "RuntimeConfig")
