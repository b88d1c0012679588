"""The composition root: a store, the outbox, conversations, the door, the turn runner and the
coordinator, started and stopped together.

::

    async with Runtime.open("sqlite:///agent.db", models=[ScriptedModel()]) as runtime:
        conversation = await runtime.create_conversation("alice", Profile(model="scripted"))
        await runtime.post(conversation.conversation_id, "hello")
        await runtime.settle(conversation.conversation_id)
        print(await runtime.transcript(conversation.conversation_id))

Every start of a turn goes through the coordinator (C2): posting an input asks for one, a
signal's wake-up asks for one, a goal checkpoint asks for one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any, Literal, overload

from tidings.agents import RemoteAgent, RemoteChildren
from tidings.clock import Clock, SystemClock
from tidings.conversations.approvals import Approval, Approvals
from tidings.conversations.catalog import Conversations
from tidings.conversations.lifecycle import RestartRequest, accept_restart
from tidings.conversations.questions import Question, Questions
from tidings.errors import UnknownProfileError
from tidings.feed import FeedHub, Watch
from tidings.mail.child_requests import Cancelled, ChildRequest
from tidings.mail.door import Door
from tidings.mail.relay import ChildRelay
from tidings.mail.stop import StopCascade
from tidings.mcp import MCPServer, MCPServers
from tidings.models.base import Model
from tidings.push import PushConfigs, PushDeliveries, Webhooks
from tidings.records.instances import Instance
from tidings.records.keyring import Keyring
from tidings.records.outbox import Outbox
from tidings.records.results import MasterKey, Results
from tidings.records.transcript import ConversationTx
from tidings.runtime.answers import DEFAULT_TIMEOUT, Answers, timeout_seconds
from tidings.runtime.config import RuntimeConfig
from tidings.runtime.views import BackgroundViews
from tidings.scheduler.coordinator import Coordinator
from tidings.scheduler.settling import settle
from tidings.scheduler.sweeps import RelaySweep, SlowSweep, Takeover
from tidings.store import Store, open_store
from tidings.support.lifetime import Lifetime, Loop
from tidings.support.locking import mutation
from tidings.support.metrics import Metrics
from tidings.support.tracing import Tracing
from tidings.tasks.service import BackgroundTasks
from tidings.tasks.supervisor import Supervisor
from tidings.tools.builtin import register_builtins
from tidings.tools.registry import Tool, ToolRegistry
from tidings.turns.retry import retry as retry_unit
from tidings.turns.runner import TurnRunner
from tidings.types import (
    Answer,
    Author,
    Conversation,
    DeliveryMode,
    Event,
    GoalStatus,
    Input,
    Message,
    Operation,
    Origin,
    Profile,
    Run,
    RunId,
    StartKind,
)

log = logging.getLogger("tidings.runtime")


class Runtime(BackgroundViews):
    """One runtime instance over one database; its views of tasks, results and signals are
    :class:`~tidings.runtime.views.BackgroundViews`."""

    def __init__(
        self, store: Store, *, models: Mapping[str, Model] | Iterable[Model],
        tools: Iterable[Tool] = (), clock: Clock | None = None,
        config: RuntimeConfig | None = None, master_key: MasterKey | None = None,
        owns_store: bool = False, profiles: Mapping[str, Profile] | None = None,
        mcp_servers: Iterable[MCPServer] = (), agents: Iterable[RemoteAgent] = (),
    ) -> None:
        self.store = store
        self.profiles = dict(profiles or {})  # named profiles (a config file's), by name
        self.clock: Clock = clock or SystemClock()
        self.config = config = config or RuntimeConfig()
        self.models: dict[str, Model] = (dict(models) if isinstance(models, Mapping)
                                         else {m.name: m for m in models})
        self.tools = ToolRegistry(tools)
        self.metrics = Metrics()
        self.tracing = Tracing(config.tracer_provider)
        self.instance = Instance(
            store, clock=self.clock, config=config.outbox,
            on_gone=lambda report: self.takeover.instances_gone(report),
        )
        self.outbox = Outbox(store, instance=self.instance)
        self.conversations = Conversations(
            store, self.clock, registered=lambda: (self.models, self.tools.names()))
        self.door = Door(store, self.clock, config.door)
        self.keyring = Keyring(store, self.clock, config.results, master_key)
        # Every start goes through the coordinator (C2), made last: the rest get a way to it.
        self.supervisor = Supervisor(clock=self.clock)
        self.tasks = BackgroundTasks(
            store, self.clock, self.supervisor, self.instance.instance_id,
            results=self.keyring.known, metrics=self.metrics, tracing=self.tracing,
            start_with=lambda conversation_id, write: self.coordinator.start_with(
                conversation_id, StartKind.WAKE, write, record=False
            ),
        )
        self.relay = ChildRelay(
            store, self.clock, self.door,
            start_with=lambda conversation_id, kind, write: self.coordinator.start_with(
                conversation_id, kind, write
            ),
            create_child=self.conversations.create_child,
            profile_of=self.conversations.profile_of,
        )
        self.approvals = Approvals(store, self.clock, config.approvals, metrics=self.metrics)
        self.feed = FeedHub(store, self.clock, poll=config.feed_poll)
        self.runner = TurnRunner(
            store, self.outbox, self.models, self.tools, self.clock, config.turns,
            tasks=self.tasks, children=self.relay, approvals=self.approvals,
            on_child_reply=self.relay.kick if config.relay_kick else None,
            metrics=self.metrics, door=self.door, tracing=self.tracing, feed=self.feed,
            results=self.keyring.known,
        )
        self.coordinator = Coordinator(
            store, self.outbox, self.runner, self.clock, config.coordinator,
            instance=self.instance, door=self.door,
        )
        self.answers = Answers(store, poll=config.answer_poll)
        self.questions = Questions(store, self.clock, config.questions)
        self.push_deliveries = PushDeliveries(store, self.clock, config.push)
        """The notifications owed to principals, published with the states they announce
        (P3)."""
        self.webhooks = Webhooks(store, self.clock, self.push_deliveries, metrics=self.metrics,
                                 master_key=self.keyring.master_key)
        self.push_configs = PushConfigs(store, self.clock, allow_private=config.push.allow_private,
                                        master_key=self.keyring.master_key,
                                        put=self.webhooks.watch)
        """Where principals asked to be told of their A2A tasks."""
        self.mcp = MCPServers((*config.mcp_servers, *mcp_servers), self.tools, self.metrics,
                              self.tasks, self.conversations,  # deaths told in the feeds
                              questions=self.questions, store=store,  # OAuth tokens, sealed
                              master_key=self.keyring.master_key, clock=self.clock)
        self.remote_children = RemoteChildren(
            (*config.agents, *agents), store=store, clock=self.clock,
            conversations=self.conversations, instance_id=lambda: self.instance.instance_id,
            replied=self.relay.kick if config.relay_kick else lambda: None,
        )
        """Children answered by remote A2A agents (P5), their tasks followed to their ends."""
        self.stops = StopCascade(
            self.conversations, lambda cid, owner: self.coordinator.stop(cid, owner=owner),
            self.mcp.cancel_run,  # the run's tasks notify nothing more; MCP ones are cancelled
            cancelled=self.remote_children.cancelled,  # remote ones: CancelTask at the agent
        )
        self.takeover = Takeover(store=store, outbox=self.outbox, instance=self.instance,
                                 clock=self.clock, tasks=self.tasks,
                                 conversations=self.coordinator.sweep, relay=self.relay,
                                 remote=self.remote_children.adopt, remote_tasks=self.mcp.tasks)
        register_builtins(
            self.tools, store=store, supervisor=self.supervisor, tasks=self.tasks,
            results=self.keyring.known, restart=self.request_restart, relay=self.relay,
            cancel_child=lambda parent, key: self.cancel_child(parent, key),
            remote=self.remote_children if self.remote_children.names() else None,
        )
        self.lifetime = Lifetime((  # stopped in this order
            Loop("tidings-coordinator", self.coordinator.run, first=self.coordinator.close),
            Loop("tidings-answers", first=self.answers.close),  # after the turns' ends
            Loop("tidings-supervisor", first=self._close_supervisor),
            *self.mcp.components(),
            self.remote_children,
            Loop("tidings-webhooks", self.webhooks.serve),
            RelaySweep(config.relay_sweep, self.relay, self.clock),
            SlowSweep(config.results_sweep_interval, store=store, outbox=self.outbox,
                      instance=self.instance, clock=self.clock, tasks=self.tasks,
                      results=self.keyring.known, remote_tasks=self.mcp.tasks),
            Loop("tidings-outbox", lambda: self.instance.run(self.outbox.sweep),
                 then=self.instance.close),
            # Last: the turns' last commits reach the watchers, whose feeds end here.
            Loop("tidings-feed", then=self.feed.close),
        ), clock=self.clock, on_failure=self.metrics.count_component_failure)
        self._owns_store = owns_store
        self._closed = False
        self.locked = False
        """True from a locked boot until :meth:`unlock` (L1)."""
        self.restart_requested = asyncio.Event()
        """Set when a restart was accepted: the host should close this runtime and exit (L2)."""

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

    @property
    def results(self) -> Results:
        """Result envelopes; they need the master key (``master_key=`` or the environment)."""
        return self.keyring.results()

    @property
    def instance_id(self) -> str:
        return self.instance.instance_id

    async def start(self, *, locked: bool = False) -> None:
        """Register, reconcile gone instances, follow work -- or, ``locked``, await unlock (L1)."""
        if locked:
            self.locked = True
            log.info("instance %s booted locked: waiting for the master key", self.instance_id)
            return
        await self._boot()

    async def unlock(self, master_key: MasterKey) -> None:
        """Give a locked runtime its master key; it then boots fully. Idempotent."""
        if not self.locked or self._closed:
            return
        self.keyring.unlock(master_key)
        self.locked = False
        await self._boot()

    async def _boot(self) -> None:
        await self.instance.start()
        self.feed.start()  # hears other processes' watchers before its first turn
        self.lifetime.start()
        await self.mcp.started()  # MCP tools registered before the first turn
        await self.takeover.take_up()

    async def close(self) -> None:
        """Stop running turns (committed as stopped), the processes, the relay and the sweeps,
        then the outbox (this instance retired), then the store. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.lifetime.shutdown()
        finally:
            if self._owns_store:
                await self.store.close()

    async def _close_supervisor(self) -> None:
        self.tasks.ends.close()  # a process's end is no longer retried for long
        await self.supervisor.close()

    # -- conversations ------------------------------------------------------------------------

    @mutation
    async def create_conversation(
        self, owner: str, profile: Profile | str, *, title: str = ""
    ) -> Conversation:
        """``profile``: a :class:`Profile`, or the name of one of :attr:`profiles`."""
        return await self.conversations.create(owner, self._named(profile), title=title)

    def _named(self, profile: Profile | str) -> Profile:
        if isinstance(profile, str) and profile not in self.profiles:
            raise UnknownProfileError(profile, list(self.profiles))
        return self.profiles[profile] if isinstance(profile, str) else profile

    async def conversation(self, conversation_id: str, *, owner: str | None = None) -> Conversation:
        """The conversation, with its usage: the sums over its runs."""
        return await self.conversations.get(conversation_id, owner=owner, with_usage=True)

    @mutation
    async def archive(self, conversation_id: str, *, owner: str | None = None) -> Conversation:
        return await self.conversations.archive(conversation_id, owner=owner)

    @mutation
    async def unarchive(self, conversation_id: str, *, owner: str | None = None) -> Conversation:
        """Undo :meth:`archive`: callers' input is taken again."""
        return await self.conversations.unarchive(conversation_id, owner=owner)

    @mutation
    async def tombstone(self, conversation_id: str, *, owner: str | None = None) -> Conversation:
        return await self.conversations.tombstone(conversation_id, owner=owner)

    @mutation
    async def set_profile(
        self, conversation_id: str, profile: Profile | str, *, owner: str | None = None
    ) -> Conversation:
        """``profile``: a :class:`Profile`, or the name of one of :attr:`profiles`."""
        return await self.conversations.set_profile(conversation_id, self._named(profile),
                                                    owner=owner)

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
    async def retry(
        self, conversation_id: str, run_id: str, *, model: str | None = None,
        owner: str | None = None, authored_by: Author | None = None,
    ) -> Input:
        """A person asks again after a run failed or needs attention (C8), optionally naming
        another of the profile's models to try first. It enters through the door as the
        person's input (so a retry is a direct turn, and read in order); the turn it starts
        sees the whole history, so completed tool calls are not repeated. Retrying the same run
        with the same model twice admits it once."""
        await self.conversations.get(conversation_id, owner=owner)  # foreign = unknown
        return await self.coordinator.start_with(
            conversation_id, StartKind.PERSON, functools.partial(
                retry_unit, door=self.door, run_id=run_id, model=model,
                authored_by=authored_by, owner=owner,
            ),
        )

    async def inputs(self, conversation_id: str, *, owner: str | None = None) -> list[Input]:
        return await self.door.inputs(conversation_id, owner=owner)

    async def input(self, input_id: str, *, owner: str | None = None) -> Input:
        """One input by its id, wherever it was posted (a foreign one is unknown alike)."""
        return await self.door.input(input_id, owner=owner)

    async def answer_of(self, item: Input) -> Answer:
        """What became of a posted input, as it stands now (:mod:`tidings.runtime.answers`)."""
        return await self.answers.read(item)

    # -- goals, stop, compaction --------------------------------------------------------------

    @mutation
    async def set_goal(
        self, conversation_id: str, status: GoalStatus | str, text: str | None = None, *,
        owner: str | None = None,
    ) -> Conversation:
        return await self.conversations.set_goal(conversation_id, status, text, owner=owner)

    @mutation
    async def checkpoint(self, conversation_id: str, *, owner: str | None = None) -> None:
        """A goal checkpoint: ask for an automatic turn toward the active goal."""
        await self.conversations.get(conversation_id, owner=owner)
        self.coordinator.request(conversation_id, StartKind.GOAL)

    @mutation
    async def stop(self, conversation_id: str, *, owner: str | None = None) -> list[RunId]:
        """A person's stop of the running turn: it is stopped as :meth:`stop_run` stops a
        source (its mail suppressed, its children's requests cancelled, in cascade)."""
        return await self.stops.stop(conversation_id, owner=owner)

    @mutation
    async def stop_run(
        self, conversation_id: str, run_id: str, *, owner: str | None = None
    ) -> list[str]:
        """Stop a source run, running or completed (M14): no more mail for it, in cascade down
        its children (M16); what it already published stays. See :mod:`tidings.mail.stop`.
        Returns the cancelled input ids."""
        cancelled, _ = await self.stops.stop_run(conversation_id, run_id, owner=owner, seen=set())
        return cancelled

    @mutation
    async def cancel_child(
        self, parent_id: str, task_key: str, *, owner: str | None = None
    ) -> list[Cancelled]:
        """Cancel one request the parent opened (a spawn or a send, by its task key), in
        cascade (M16). Returns what was cancelled, the request first -- the canceller is told,
        even what lay below; empty when its reply was relayed or consumed already."""
        return await self.stops.cancel_child(parent_id, task_key, owner=owner)

    async def children_of(
        self, parent_id: str, *, owner: str | None = None, limit: int = 100
    ) -> list[ChildRequest]:
        """The requests the parent opened in its children (spawns and sends), oldest first,
        with what became of each: open, replied, cancelled; relayed or consumed in-run."""
        await self.conversations.get(parent_id, owner=owner)  # foreign = unknown
        return await self.relay.requests_of(parent_id, limit=limit)

    @mutation
    async def compact(self, conversation_id: str, *, owner: str | None = None) -> int:
        return await self.coordinator.compact(conversation_id, owner=owner)

    # -- approvals (L5) -----------------------------------------------------------------------

    async def approvals_of(
        self, conversation_id: str, *, owner: str | None = None, status: str = "",
        limit: int = 100,
    ) -> list[Approval]:
        """The conversation's approvals, newest first (``status`` filters: ``pending``...)."""
        await self.conversations.get(conversation_id, owner=owner)
        return await self.approvals.list(conversation_id, status=status, limit=limit)

    @mutation
    async def decide(
        self, conversation_id: str, approval_id: str, *, approve: bool, decided_by: str,
        owner: str | None = None,
    ) -> Approval:
        """A person's decision on a held tool call; see :mod:`tidings.conversations.approvals`."""
        await self.conversations.get(conversation_id, owner=owner)  # foreign = unknown
        return await self.approvals.decide(
            conversation_id, approval_id, approve=approve, decided_by=decided_by, owner=owner
        )

    # -- questions ----------------------------------------------------------------------------

    async def questions_of(
        self, conversation_id: str, *, owner: str | None = None, status: str = "",
        limit: int = 100,
    ) -> list[Question]:
        """What the conversation's MCP servers asked its people, newest first (``status``
        filters: ``pending``...)."""
        await self.conversations.get(conversation_id, owner=owner)
        return await self.questions.list(conversation_id, status=status, limit=limit)

    @mutation
    async def answer(
        self, conversation_id: str, question_id: str, *, action: str,
        content: Mapping[str, Any] | None = None, decided_by: str, owner: str | None = None,
    ) -> Question:
        """A person's answer to a question: ``accept`` (with ``content`` that fits its
        schema), ``decline`` or ``cancel``; see :mod:`tidings.conversations.questions`."""
        await self.conversations.get(conversation_id, owner=owner)  # foreign = unknown
        return await self.questions.decide(conversation_id, question_id, action=action,
                                           content=content, decided_by=decided_by, owner=owner)

    # -- restart (L2) -------------------------------------------------------------------------

    @mutation
    async def request_restart(
        self, conversation_id: str, *, owner: str | None = None, reason: str = "",
        input_id: str | None = None, run_id: str | None = None, call_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> Operation:
        """Commit a restart of this runtime as accepted -- "accepted, not completed" -- and
        ask the host to restart (:attr:`restart_requested`). The next instance, once fully
        initialised, completes it and wakes the conversation with the correlated facts."""
        unit = functools.partial(
            accept_restart, instance=self.instance, idempotency_key=idempotency_key,
            request=RestartRequest(reason[:500], input_id, run_id, call_id),
        )
        operation = await self.conversations.change(conversation_id, unit, owner=owner)
        self.restart_requested.set()
        return operation

    # -- reading ------------------------------------------------------------------------------

    async def transcript(
        self, conversation_id: str, *, after_seq: int = 0, owner: str | None = None
    ) -> list[Message]:
        return await self.conversations.transcript(conversation_id, after_seq=after_seq,
                                                   owner=owner)

    async def run_transcript(
        self, conversation_id: str, run_id: str, *, owner: str | None = None
    ) -> list[Message]:
        return await self.conversations.run_transcript(conversation_id, run_id, owner=owner)

    async def events(
        self, conversation_id: str, *, after_seq: int = 0, owner: str | None = None
    ) -> list[Event]:
        return await self.conversations.events(conversation_id, after_seq=after_seq, owner=owner)

    def watch(self, conversation_id: str, *, after_seq: int = 0,
              owner: str | None = None) -> Watch:
        """The conversation's feed after ``after_seq``, then live: an async iterator of
        :class:`FeedEvent` (see :mod:`tidings.feed`)."""
        return self.feed.watch(conversation_id, after_seq=after_seq, read=lambda after: (
            self.events(conversation_id, after_seq=after, owner=owner)))

    async def runs(self, conversation_id: str, *, owner: str | None = None) -> list[Run]:
        return await self.conversations.runs(conversation_id, owner=owner)

    async def run(self, run_id: str, *, owner: str | None = None) -> Run:
        return await self.conversations.run(run_id, owner=owner)

    async def list_conversations(
        self, owner: str, *, after: str = "", limit: int = 100
    ) -> list[Conversation]:
        """The owner's conversations, by id (page with the last id)."""
        return await self.conversations.list_owned(owner, after=after, limit=limit)

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
                            approvals=self.approvals, conversations=self.conversations)


__all__ = ("Runtime", "RuntimeConfig")
