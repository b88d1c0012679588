"""The execution coordinator (C1-C9): one entry, one slot, one turn at a time per conversation.

Person input, agent sends, kernel mail, signal wake-ups and goal checkpoints all enter through
:meth:`Coordinator.request` (C2). Requests for a conversation coalesce into one pending set
(C4); one driver task per busy conversation takes them in order. No task, timer or poll exists
for an idle conversation: it costs nothing until something arrives.

Taking the slot is one unit of work under the conversation's lock, written in :mod:`.slot`
and bound to this process in :mod:`.starter`: the coordinator runs it, runs the turn it plans,
keeps the slot while the turn runs, and re-checks after the slot is released. A slot found busy
elsewhere is retried when its lease is due to expire. Compaction (:mod:`.compaction`) holds the
same slot.

The coordinator's own bookkeeping (the pending sets and driver handles, one entry per
conversation: :mod:`.entries`) is touched only in synchronous sections of the event loop, so it
can never be held across a model call or a disk read (C5): a conversation whose model hangs
delays no other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from tidings.clock import Clock, to_us
from tidings.errors import (
    CompactionRefusedError,
    SlotLostError,
    TidingsError,
    UnknownConversationError,
)
from tidings.mail.door import Door
from tidings.mail.stop import request_stop
from tidings.records.instances import Instance
from tidings.records.outbox import Outbox
from tidings.records.transcript import ConversationTx
from tidings.scheduler import compaction
from tidings.scheduler.capacity import Capacity
from tidings.scheduler.entries import Entries, Entry
from tidings.scheduler.pacing import PASS_BUDGET_S, Pacer
from tidings.scheduler.slot import Begin, recover_interrupted
from tidings.scheduler.starter import Starter, written
from tidings.store import Store, Tx
from tidings.support.lifetime import Loop
from tidings.support.policy import check_id
from tidings.turns.runner import TurnConfig, TurnOutcome, TurnPlan, TurnRunner
from tidings.types import RunId, StartKind

log = logging.getLogger("tidings.coordinator")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """Concurrency and timing of the coordinator."""

    max_concurrent_turns: int = 64
    sweep_interval: timedelta = timedelta(seconds=5)
    sweep_batch: int = 500
    busy_retry_margin: timedelta = timedelta(milliseconds=50)
    turn_start_budget: timedelta = timedelta(seconds=PASS_BUDGET_S)
    """How long the turns that start in one pass of the event loop may take for their first
    steps before the next one waits for a later pass (:mod:`.pacing`): many start together
    when one commit answered many callers. Zero paces every turn but the first of a pass."""


class Coordinator(Loop):
    """Per-conversation slots and the one entry every start goes through.

    A component of the runtime (:class:`~tidings.support.lifetime.Loop`): its work follows
    wake-ups and sweeps (:meth:`serve`); its shutdown closes it first (:meth:`close`: running
    turns end as ``stopped``), then cancels that work."""

    def __init__(
        self,
        store: Store,
        outbox: Outbox,
        runner: TurnRunner,
        clock: Clock,
        config: CoordinatorConfig | None = None,
        *,
        instance: Instance,
        door: Door | None = None,
    ) -> None:
        super().__init__("tidings-coordinator")
        self.store = store
        self.outbox = outbox
        self.instance = instance
        self.runner = runner
        self.door = door or runner.door
        """The door the slot-taking unit delivers due task notifications through."""
        self.clock = clock
        self.config = config or CoordinatorConfig()
        self._starter = Starter(store, outbox, runner, clock, door=self.door, instance=instance)
        self._entries = Entries()
        self._capacity = Capacity(self.config.max_concurrent_turns)
        self._pacer = Pacer(self.config.turn_start_budget.total_seconds())
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._closing = False
        self.turns_started = 0
        self.yields: dict[str, int] = {}

    @property
    def turn_config(self) -> TurnConfig:
        return self.runner.config

    # -- the one entry (C2) -------------------------------------------------------------------

    def request(
        self, conversation_id: str, kind: StartKind | None = None, *, record: bool = True
    ) -> None:
        """Ask for a turn of ``conversation_id`` on behalf of ``kind``; never blocks.

        ``kind`` None is a re-check: start whatever is eligible, record nothing if nothing is.
        Requests coalesce (C4): however many arrive while one is pending, one decision reads
        them all.
        """
        if self._closing:
            return
        entry = self._entries.get(conversation_id)
        if entry is None:
            entry = self._entries.add(conversation_id, Entry())
        if kind is None:
            entry.recheck = True
        else:
            entry.kinds.add(kind)
            entry.record = entry.record or record
        entry.settled_ns = None
        entry.idle.clear()
        entry.moved.set()
        if entry.driver is None and not entry.compacting and not entry.starting:
            entry.driver = asyncio.create_task(self._drive(conversation_id, entry))

    async def start_with(
        self, conversation_id: str, kind: StartKind, write: Callable[[ConversationTx], T],
        *, record: bool = True, ahead: Callable[[Tx], None] | None = None,
    ) -> T:
        """Run ``write`` on the locked conversation in the same unit that takes its slot for
        ``kind`` -- a person's post and the start of the turn it asks for, one commit.

        When this process is busy with the conversation, or has no capacity free, ``write``
        commits alone and the start is requested as usual.

        A caller that posts the moment its last answer arrived finds that turn's driver still
        finishing (its turn task returning, its keeper stopping): it waits for the driver to
        go, rather than write alone and leave the start to a unit of its own (one commit more
        per turn). The wait ends early if anything else asks for the conversation meanwhile.

        ``ahead``, when given, is called with the unit's transaction before the conversation is
        locked, to say what ``write`` reads first (:meth:`Tx.read_ahead`).
        """
        await self._entries.let_finish(conversation_id)
        if self._closing or conversation_id in self._entries or self._capacity.full():
            result = await self.store.transact(
                lambda tx: self._starter.alone(tx, conversation_id, write, ahead=ahead),
                route=conversation_id,
            )
            self.request(conversation_id, kind, record=record)
            return result
        entry = self._entries.add(conversation_id, Entry(starting=True))
        await self._capacity.take()  # free (checked above, nothing awaited since)
        try:
            result, begin = await self.store.transact(
                lambda tx: self._starter.begin_with(tx, conversation_id, kind, write,
                                                    record=record, ahead=ahead),
                route=conversation_id,
            )
        except BaseException:
            self._capacity.give_back()
            entry.starting = False
            self._settle_entry(conversation_id, entry)
            raise
        entry.starting = False
        entry.driver = asyncio.create_task(self._drive(conversation_id, entry, begin))
        return result

    def _settle_entry(self, conversation_id: str, entry: Entry) -> None:
        """Start a driver for what is pending, or drop the idle entry."""
        if entry.compacting or entry.starting or entry.driver is not None:
            return
        if (entry.kinds or entry.recheck) and not self._closing:
            entry.driver = asyncio.create_task(self._drive(conversation_id, entry))
        else:
            self._entries.drop(conversation_id, entry)

    def active(self, conversation_id: str) -> bool:
        """Whether a turn of the conversation is running in this process."""
        entry = self._entries.get(conversation_id)
        return entry is not None and entry.turn is not None

    async def idle(self, conversation_id: str) -> None:
        """Wait until the conversation is settled: nothing pending or running here, and
        nothing in the database that a re-check would start a turn for.

        Wake-up hints that are still on their way (a publish's wake-up is handed to the event
        loop after its commit) are waited for by the same rule.

        When the last unit of what ran here began after this wait did and read under the lock
        that nothing would start (the turn's end, or a start that yielded), that read is this
        wait's: the database was settled at a moment inside the wait, exactly as a read of
        its own would have found it then, so no read follows.
        """
        called = time.monotonic_ns()
        while True:
            if await self._entries.quiet(conversation_id, called):
                return
            if self._closing or not await self.store.read(
                lambda tx: self._starter.would_start(tx, conversation_id)
            ):
                return
            self.request(conversation_id, None)

    async def _drive(
        self, conversation_id: str, entry: Entry, begun: Begin | None = None
    ) -> None:
        """Take the pending starts in turn until none is left. ``begun`` is a start already
        made (by :meth:`start_with`), whose capacity is already held."""
        try:
            if begun is not None:
                try:
                    await self._run_begun(conversation_id, entry, begun)
                finally:
                    self._capacity.give_back()
            while (entry.kinds or entry.recheck) and not self._closing:
                entry.settled_ns = None
                kinds = frozenset(entry.kinds)
                record = entry.record
                entry.kinds.clear()
                entry.recheck = False
                entry.record = False
                async with self._capacity:
                    await self._start(conversation_id, entry, kinds, record)
        except Exception:
            log.exception("coordinator driver for %s failed", conversation_id)
        finally:
            entry.driver = None
            self._settle_entry(conversation_id, entry)

    async def _start(
        self, conversation_id: str, entry: Entry, kinds: frozenset[StartKind], record: bool
    ) -> None:
        try:
            begin = await self.store.transact(
                lambda tx: self._starter.begin(tx, conversation_id, kinds, record=record),
                route=conversation_id,
            )
        except UnknownConversationError:
            return
        except TidingsError as exc:
            # A store fault: the sweep finds the conversation again; nothing is lost.
            log.warning("could not start a turn of %s: %s", conversation_id, exc)
            return
        await self._run_begun(conversation_id, entry, begin)

    async def _run_begun(self, conversation_id: str, entry: Entry, begin: Begin) -> None:
        decision = begin.decision
        for _, reason in decision.yielded:
            self.yields[reason] = self.yields.get(reason, 0) + 1
        if begin.plan is None:
            if decision.reason == "slot_busy" and begin.slot_deadline_us is not None:
                self._retry_at(conversation_id, begin.slot_deadline_us)
            if not (entry.kinds or entry.recheck):
                entry.settled_ns = begin.settled_ns
            return
        self.turns_started += 1
        entry.stop_reason = "stopped" if begin.plan.run_id in entry.stopped_runs else None
        entry.stopped_runs.clear()
        entry.turn_started = False
        entry.released = False
        entry.turn = asyncio.create_task(self._turn(begin.plan, entry))
        keeper = self._starter.keeper(begin.plan, entry)
        more_work = True
        settled_ns = None
        try:
            outcome = await entry.turn
            more_work = outcome.more_work
            settled_ns = outcome.settled_ns
        except asyncio.CancelledError:
            if entry.stop_reason != "slot_lost" or self._closing:
                raise
        except SlotLostError as exc:
            if self._closing or entry.released:
                # Stopped or shut down while the turn's own end was still committing (cancelled
                # before it landed): the end stands, and the attempt to end the run again found
                # the slot given back.
                log.debug("turn %s of %s: already ended when %s reached it",
                          begin.plan.run_id, conversation_id, entry.stop_reason or "shutdown")
            else:
                log.warning("turn %s of %s ended by %s", begin.plan.run_id, conversation_id,
                            exc)
        except TidingsError as exc:
            log.warning("turn %s of %s ended by %s", begin.plan.run_id, conversation_id, exc)
        finally:
            await keeper.stop()
            entry.turn = None
        # Level-triggered: the turn's last unit read, under the lock and before releasing the
        # slot, whether inputs or signals were waiting; what arrived later found the slot free.
        if more_work:
            entry.recheck = True
            entry.moved.set()
        elif not (entry.kinds or entry.recheck):
            entry.settled_ns = settled_ns  # what the turn's last unit read (see idle)

    async def _turn(self, plan: TurnPlan, entry: Entry) -> TurnOutcome:
        # A task cancelled before its first step never runs its body, so its cleanup would
        # never run either: until the turn has started, an interruption is only recorded, and
        # run_turn sees it on entry. So a turn waits for its pass of the loop (many start
        # together when one commit answered many callers) before it counts as started.
        await self._pacer.step()
        entry.turn_started = True
        return await self.runner.run_turn(plan, stop_reason=lambda: entry.stop_reason,
                                          released=entry.turn_released,
                                          for_a_person=self._capacity.lender())

    def _retry_at(self, conversation_id: str, deadline_us: int) -> None:
        delay = max(0.0, (deadline_us - self.clock.now_us()) / 1e6)
        delay += to_us(self.config.busy_retry_margin) / 1e6
        old = self._timers.pop(conversation_id, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._timers.pop(conversation_id, None)
            self.request(conversation_id, None)

        self._timers[conversation_id] = loop.call_later(delay, fire)

    # -- stop (C6) ----------------------------------------------------------------------------

    async def stop(self, conversation_id: str, *, owner: str | None = None) -> list[RunId]:
        """Stop the running turn (wherever it runs) and suppress automatic continuation.

        The suppression lasts until a person's business input; a maintenance compact keeps it.
        Returns the runs asked to stop.
        """
        check_id(conversation_id, "conversation id")
        runs = await self.store.transact(
            lambda tx: written(tx, conversation_id, self.clock,
                               lambda cx: request_stop(cx, owner=owner)),
            route=conversation_id,
        )
        entry = self._entries.get(conversation_id)
        if entry is not None:
            entry.kinds = {k for k in entry.kinds if not k.automatic}
            if entry.turn is not None:
                entry.interrupt("stopped")
            else:
                entry.stopped_runs.update(runs)
        return runs

    # -- compaction (C7, compaction.py) -------------------------------------------------------

    async def compact(self, conversation_id: str, *, owner: str | None = None) -> int:
        """Summarise the history through the model and start the window at the summary.

        Needs the slot: refused with :class:`CompactionRefusedError` while a turn is active or
        a start is queued. Keeps a stop's suppression (it is maintenance, not business).
        Returns the summary's message position.
        """
        check_id(conversation_id, "conversation id")
        entry = self._entries.get(conversation_id)
        if entry is not None:
            reason = (
                "a compaction is running" if entry.compacting
                else "a turn is starting" if entry.starting
                else "a turn is active" if entry.turn is not None
                else "a start is queued"
            )
            raise CompactionRefusedError(conversation_id, reason)
        entry = self._entries.add(conversation_id, Entry(compacting=True))
        try:
            return await compaction.compact(
                self.store, self.clock, conversation_id, owner=owner,
                summarize=self.runner.summarize, config=self.turn_config,
                instance_id=self.instance.instance_id,
            )
        finally:
            entry.compacting = False
            self._settle_entry(conversation_id, entry)


    # -- the sweep and wake-ups ---------------------------------------------------------------

    async def sweep(self) -> int:
        """Re-find conversations a lost wake-up left behind; returns how many were asked."""
        now = self.clock.now_us()
        rows = await self.store.read(
            lambda tx: tx.all(
                "stranded_conversations", now_us=now, limit=self.config.sweep_batch,
                max_attempts=self.outbox.config.max_attempts,
            )
        )
        asked = 0
        for row in rows:
            if row["conversation_id"] not in self._entries:
                self.request(row["conversation_id"], None)
                asked += 1
        return asked

    async def serve(self) -> None:
        """Follow signal wake-ups and sweep periodically, until cancelled."""
        async with self.outbox.wakeups() as wakeups:
            sweeper = asyncio.create_task(self._sweep_forever())
            try:
                while True:
                    conversation_id = await wakeups.get()
                    self.request(conversation_id, StartKind.WAKE, record=False)
            finally:
                sweeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sweeper

    async def _sweep_forever(self) -> None:
        while True:
            await self.clock.sleep(to_us(self.config.sweep_interval) / 1e6)
            try:
                await self.sweep()
            except TidingsError as exc:
                log.warning("coordinator sweep failed: %s", exc)

    async def close(self) -> None:
        """Stop taking starts; running turns end as ``stopped`` (shutdown). Idempotent."""
        self._closing = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        drivers = []
        for entry in self._entries:
            if entry.turn is not None:
                entry.interrupt("shutdown")
            if entry.driver is not None:
                drivers.append(entry.driver)
        for driver in drivers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await driver

    stopping = close  # at shutdown, before the wake-ups and the sweep are cancelled


__all__ = ("Coordinator", "CoordinatorConfig", "recover_interrupted")
