"""The composition root: a store, the outbox, conversations, the door, the turn runner and the
coordinator, built together, started and stopped together.

:class:`Kernel` owns the components and their lifetime; :class:`~tidings.runtime.root.Runtime`
is the public facade over it. Every start of a turn goes through the coordinator (C2): posting
an input asks for one, a signal's wake-up asks for one, a goal checkpoint asks for one.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Iterable, Mapping

from tidings.agents import RemoteAgent, RemoteChildren
from tidings.clock import Clock, SystemClock
from tidings.conversations.approvals import Approvals
from tidings.conversations.catalog import Conversations
from tidings.conversations.lifecycle import RestartRequest, accept_restart
from tidings.conversations.questions import Questions
from tidings.errors import UnknownProfileError
from tidings.feed import FeedHub
from tidings.mail.door import Door
from tidings.mail.relay import ChildRelay
from tidings.mail.stop import StopCascade
from tidings.mcp import MCPServer, MCPServers
from tidings.models.base import Model
from tidings.push import PushConfigs, PushDeliveries, Webhooks
from tidings.records.instances import Instance
from tidings.records.keyring import Keyring
from tidings.records.outbox import Outbox
from tidings.records.results import MasterKey
from tidings.runtime.answers import Answers
from tidings.runtime.config import RuntimeConfig
from tidings.scheduler.coordinator import Coordinator
from tidings.scheduler.sweeps import RelaySweep, SlowSweep, Takeover
from tidings.store import Store
from tidings.support.lifetime import Lifetime
from tidings.support.locking import mutation
from tidings.support.metrics import Metrics
from tidings.support.tracing import Tracing
from tidings.tasks.service import BackgroundTasks
from tidings.tasks.supervisor import Supervisor
from tidings.tools.builtin import register_builtins
from tidings.tools.registry import Tool, ToolRegistry
from tidings.turns.runner import TurnRunner
from tidings.types import Operation, Profile, StartKind

log = logging.getLogger("tidings.runtime")


class Kernel:
    """One runtime instance's components over one database, and their lifetime."""

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
            sweep=lambda: self.outbox.sweep(),  # its heartbeat is the outbox's
        )
        self.outbox = Outbox(store, instance=self.instance)
        self.catalog = Conversations(
            store, self.clock, registered=lambda: (self.models, self.tools.names()))
        self.door = Door(store, self.clock, config.door)
        self.keyring = Keyring(store, self.clock, config.results, master_key)
        # Every start goes through the coordinator (C2), made last: the rest get a way to it.
        self.supervisor = Supervisor(clock=self.clock)
        self.background = BackgroundTasks(
            store, self.clock, self.supervisor, self.instance.instance_id,
            results=self.keyring.known, metrics=self.metrics, tracing=self.tracing,
            start_with=lambda conversation_id, write, ahead: self.coordinator.start_with(
                conversation_id, StartKind.WAKE, write, record=False, ahead=ahead
            ),
        )
        self.relay = ChildRelay(
            store, self.clock, self.door,
            start_with=lambda conversation_id, kind, write: self.coordinator.start_with(
                conversation_id, kind, write
            ),
            create_child=self.catalog.create_child,
            profile_of=self.catalog.profile_of,
        )
        self.approval_records = Approvals(store, self.clock, config.approvals, metrics=self.metrics)
        self.feed = FeedHub(store, self.clock, poll=config.feed_poll)
        self.runner = TurnRunner(
            store, self.outbox, self.models, self.tools, self.clock, config.turns,
            tasks=self.background, children=self.relay, approvals=self.approval_records,
            on_child_reply=self.relay.kick if config.relay_kick else None,
            metrics=self.metrics, door=self.door, tracing=self.tracing, feed=self.feed,
            results=self.keyring.known,
        )
        self.coordinator = Coordinator(
            store, self.outbox, self.runner, self.clock, config.coordinator,
            instance=self.instance, door=self.door,
        )
        self.answers = Answers(store, poll=config.answer_poll)
        self.question_records = Questions(store, self.clock, config.questions)
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
                              self.background, self.catalog,  # deaths told in the feeds
                              questions=self.question_records, store=store,  # OAuth tokens, sealed
                              master_key=self.keyring.master_key, clock=self.clock)
        self.remote_children = RemoteChildren(
            (*config.agents, *agents), store=store, clock=self.clock,
            conversations=self.catalog, instance_id=lambda: self.instance.instance_id,
            replied=self.relay.kick if config.relay_kick else lambda: None,
        )
        """Children answered by remote A2A agents (P5), their tasks followed to their ends."""
        self.stops = StopCascade(
            self.catalog, lambda cid, owner: self.coordinator.stop(cid, owner=owner),
            self.mcp.cancel_run,  # the run's tasks notify nothing more; MCP ones are cancelled
            cancelled=self.remote_children.cancelled,  # remote ones: CancelTask at the agent
        )
        self.takeover = Takeover(store=store, outbox=self.outbox, instance=self.instance,
                                 clock=self.clock, tasks=self.background,
                                 conversations=self.coordinator.sweep, relay=self.relay,
                                 remote=self.remote_children.adopt, remote_tasks=self.mcp.tasks)
        register_builtins(
            self.tools, store=store, supervisor=self.supervisor, tasks=self.background,
            results=self.keyring.known, restart=self.request_restart, relay=self.relay,
            cancel_child=lambda parent, key: self.stops.cancel_child(parent, key, owner=None),
            remote=self.remote_children if self.remote_children.names() else None,
        )
        self.lifetime = Lifetime((  # stopped in this order
            self.coordinator,  # running turns end as stopped
            self.answers,  # after the turns' ends
            self.background.ends,  # a process's end is no longer retried for long
            self.supervisor,
            *self.mcp.components(),
            self.remote_children,
            self.webhooks,
            RelaySweep(config.relay_sweep, self.relay, self.clock),
            SlowSweep(config.results_sweep_interval, store=store, outbox=self.outbox,
                      instance=self.instance, clock=self.clock, tasks=self.background,
                      results=self.keyring.known, remote_tasks=self.mcp.tasks),
            self.instance,  # the outbox's heartbeat; retires the instance once it ended
            # Last: the turns' last commits reach the watchers, whose feeds end here.
            self.feed,
        ), clock=self.clock, on_failure=self.metrics.count_component_failure)
        self._owns_store = owns_store
        self._closed = False
        self.locked = False
        """True from a locked boot until :meth:`unlock` (L1)."""
        self.restart_requested = asyncio.Event()
        """Set when a restart was accepted: the host should close this runtime and exit (L2)."""

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
        # Before any turn: it hears other processes' watchers from now on. Not in its run(),
        # whose task begins only once this boot yields -- perhaps after a turn was asked for.
        self.feed.start()
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

    def named(self, profile: Profile | str) -> Profile:
        """``profile`` itself, or the named profile of :attr:`profiles` it names."""
        if isinstance(profile, str) and profile not in self.profiles:
            raise UnknownProfileError(profile, list(self.profiles))
        return self.profiles[profile] if isinstance(profile, str) else profile

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
        operation = await self.catalog.change(conversation_id, unit, owner=owner)
        self.restart_requested.set()
        return operation


__all__ = ("Kernel",)
