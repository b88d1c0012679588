"""The execution coordinator (C1-C9): one entry, one slot, one turn at a time per conversation.

Person input, agent sends, kernel mail, signal wake-ups and goal checkpoints all enter through
:meth:`Coordinator.request` (C2). Requests for a conversation coalesce into one pending set
(C4); one driver task per busy conversation takes them in order. No task, timer or poll exists
for an idle conversation: it costs nothing until something arrives.

Taking the slot is one unit of work under the conversation's lock: it reads the queued inputs,
the goal, the suppression and attention flags and the ready signals, decides with the pure
:func:`~tidings.policy.decide_start` (C3), and -- only if a turn starts -- writes the run, the
slot lease and the claim of the signals in the same transaction. A start that yields records
why. The slot is a fenced lease on the conversation row, so it is cluster-wide on PostgreSQL
(C9): a holder that dies loses it when the lease expires, and the next holder answers the dead
turn's open tool calls ``outcome_unknown`` before anything else -- nothing is replayed.

The coordinator's own bookkeeping (the pending sets and driver handles) is touched only in
synchronous sections of the event loop, so it can never be held across a model call or a disk
read (C5): a conversation whose model hangs delays no other.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from tidings.approvals import expire_run_approvals
from tidings.clock import Clock, to_us
from tidings.errors import (
    CompactionRefusedError,
    TidingsError,
    UnknownConversationError,
)
from tidings.instances import Instance
from tidings.mail.batching import mail_batch
from tidings.mail.door import Door
from tidings.outbox import Outbox
from tidings.policy import StartDecision, StartState, check_id, decide_start, fenced_json
from tidings.records import conversation_from_row, input_from_row, run_from_row
from tidings.store import Row, Store, Tx
from tidings.tasks import journal
from tidings.tasks.notify import is_notice
from tidings.transcript import ConversationTx
from tidings.turns.runner import TurnConfig, TurnOutcome, TurnPlan, TurnRunner
from tidings.types import (
    Conversation,
    ConversationId,
    ConversationStatus,
    Input,
    Origin,
    RunId,
    RunStatus,
    StartKind,
    new_id,
)

log = logging.getLogger("tidings.coordinator")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """Concurrency and timing of the coordinator."""

    max_concurrent_turns: int = 64
    sweep_interval: timedelta = timedelta(seconds=5)
    sweep_batch: int = 500
    busy_retry_margin: timedelta = timedelta(milliseconds=50)


@dataclass
class _Entry:
    """A conversation with work pending or running; dropped as soon as it is idle."""

    kinds: set[StartKind] = field(default_factory=set)
    recheck: bool = False
    record: bool = False
    driver: asyncio.Task[None] | None = None
    turn: asyncio.Task[TurnOutcome] | None = None
    turn_started: bool = False
    stop_reason: str | None = None
    stopped_runs: set[str] = field(default_factory=set)
    """Runs a stop named before their turn task existed here (the gap after the start's
    commit): such a turn begins stopped."""
    compacting: bool = False
    starting: bool = False
    idle: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True, slots=True)
class Begin:
    """The answer of the slot-taking unit: a plan to run, or the decision to yield."""

    plan: TurnPlan | None
    decision: StartDecision
    slot_deadline_us: int | None = None


class Coordinator:
    """Per-conversation slots and the one entry every start goes through."""

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
        self.store = store
        self.outbox = outbox
        self.instance = instance
        self.runner = runner
        self.door = door or runner.door
        """The door the slot-taking unit delivers due task notifications through."""
        self.clock = clock
        self.config = config or CoordinatorConfig()
        self._entries: dict[str, _Entry] = {}
        self._capacity = asyncio.Semaphore(self.config.max_concurrent_turns)
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
            entry = self._entries[conversation_id] = _Entry()
        if kind is None:
            entry.recheck = True
        else:
            entry.kinds.add(kind)
            entry.record = entry.record or record
        entry.idle.clear()
        if entry.driver is None and not entry.compacting and not entry.starting:
            entry.driver = asyncio.create_task(self._drive(conversation_id, entry))

    async def start_with(
        self, conversation_id: str, kind: StartKind, write: Callable[[ConversationTx], T],
        *, record: bool = True,
    ) -> T:
        """Run ``write`` on the locked conversation in the same unit that takes its slot for
        ``kind`` -- a person's post and the start of the turn it asks for, one commit.

        When this process is busy with the conversation, or has no capacity free, ``write``
        commits alone and the start is requested as usual.
        """
        if self._closing or conversation_id in self._entries or self._capacity.locked():
            result = await self.store.transact(
                lambda tx: _written(tx, conversation_id, self.clock, write),
                route=conversation_id,
            )
            self.request(conversation_id, kind, record=record)
            return result
        entry = self._entries[conversation_id] = _Entry(starting=True)
        await self._capacity.acquire()  # free (checked above, nothing awaited since)

        def unit(tx: Tx) -> tuple[T, Begin]:
            cx = ConversationTx.lock(tx, conversation_id, self.clock)
            result = write(cx)
            begin = self._begin_locked(cx, frozenset({kind}), record=record)
            cx.save()
            return result, begin

        try:
            result, begin = await self.store.transact(unit, route=conversation_id)
        except BaseException:
            self._capacity.release()
            entry.starting = False
            self._settle_entry(conversation_id, entry)
            raise
        entry.starting = False
        entry.driver = asyncio.create_task(self._drive(conversation_id, entry, begin))
        return result

    def _settle_entry(self, conversation_id: str, entry: _Entry) -> None:
        """Start a driver for what is pending, or drop the idle entry."""
        if entry.compacting or entry.starting or entry.driver is not None:
            return
        if (entry.kinds or entry.recheck) and not self._closing:
            entry.driver = asyncio.create_task(self._drive(conversation_id, entry))
        else:
            self._entries.pop(conversation_id, None)
            entry.idle.set()

    def active(self, conversation_id: str) -> bool:
        """Whether a turn of the conversation is running in this process."""
        entry = self._entries.get(conversation_id)
        return entry is not None and entry.turn is not None

    async def idle(self, conversation_id: str) -> None:
        """Wait until the conversation is settled: nothing pending or running here, and
        nothing in the database that a re-check would start a turn for.

        Wake-up hints that are still on their way (a publish's wake-up is handed to the event
        loop after its commit) are waited for by the same rule.
        """
        while True:
            await asyncio.sleep(0)
            entry = self._entries.get(conversation_id)
            if entry is not None:
                await entry.idle.wait()
                continue
            if self._closing or not await self.store.read(
                lambda tx: self._would_start(tx, conversation_id)
            ):
                return
            self.request(conversation_id, None)

    async def _drive(
        self, conversation_id: str, entry: _Entry, begun: Begin | None = None
    ) -> None:
        """Take the pending starts in turn until none is left. ``begun`` is a start already
        made (by :meth:`start_with`), whose capacity is already held."""
        try:
            if begun is not None:
                try:
                    await self._run_begun(conversation_id, entry, begun)
                finally:
                    self._capacity.release()
            while (entry.kinds or entry.recheck) and not self._closing:
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
        self, conversation_id: str, entry: _Entry, kinds: frozenset[StartKind], record: bool
    ) -> None:
        try:
            begin = await self.store.transact(
                lambda tx: self._begin(tx, conversation_id, kinds, record),
                route=conversation_id,
            )
        except UnknownConversationError:
            return
        except TidingsError as exc:
            # A store fault: the sweep finds the conversation again; nothing is lost.
            log.warning("could not start a turn of %s: %s", conversation_id, exc)
            return
        await self._run_begun(conversation_id, entry, begin)

    async def _run_begun(self, conversation_id: str, entry: _Entry, begin: Begin) -> None:
        decision = begin.decision
        for _, reason in decision.yielded:
            self.yields[reason] = self.yields.get(reason, 0) + 1
        if begin.plan is None:
            if decision.reason == "slot_busy" and begin.slot_deadline_us is not None:
                self._retry_at(conversation_id, begin.slot_deadline_us)
            return
        self.turns_started += 1
        entry.stop_reason = "stopped" if begin.plan.run_id in entry.stopped_runs else None
        entry.stopped_runs.clear()
        entry.turn_started = False
        entry.turn = asyncio.create_task(self._turn(begin.plan, entry))
        keeper = asyncio.create_task(self._keep(begin.plan, entry))
        more_work = True
        try:
            outcome = await entry.turn
            more_work = outcome.more_work
        except asyncio.CancelledError:
            if entry.stop_reason != "slot_lost" or self._closing:
                raise
        except TidingsError as exc:
            log.warning("turn %s of %s ended by %s", begin.plan.run_id, conversation_id, exc)
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
            entry.turn = None
        # Level-triggered: the turn's last unit read, under the lock and before releasing the
        # slot, whether inputs or signals were waiting; what arrived later found the slot free.
        if more_work:
            entry.recheck = True

    async def _turn(self, plan: TurnPlan, entry: _Entry) -> TurnOutcome:
        # A task cancelled before its first step never runs its body, so its cleanup would
        # never run either: until the turn has started, an interruption is only recorded, and
        # run_turn sees it on entry.
        entry.turn_started = True
        return await self.runner.run_turn(plan, stop_reason=lambda: entry.stop_reason)

    @staticmethod
    def _interrupt(entry: _Entry, reason: str) -> None:
        entry.stop_reason = reason
        if entry.turn is not None and entry.turn_started:
            entry.turn.cancel()

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

    # -- the slot-taking unit (C3, C9, S5) ----------------------------------------------------

    def _begin(
        self, tx: Tx, conversation_id: str, kinds: frozenset[StartKind], record: bool
    ) -> Begin:
        cx = ConversationTx.lock(tx, conversation_id, self.clock)
        begin = self._begin_locked(cx, kinds, record=record)
        cx.save()  # writes only if something changed
        return begin

    def _begin_locked(
        self, cx: ConversationTx, kinds: frozenset[StartKind], *, record: bool
    ) -> Begin:
        """Decide a start under the lock and, if a turn starts, take the slot, write the run
        and claim the signals. The caller saves ``cx``."""
        tx = cx.tx
        conversation_id = cx.conversation_id
        c = cx.conversation
        slot_free = cx.slot_free()
        token_held, _, _ = cx.slot_holder()
        if slot_free and token_held is not None:
            # The holder's lease expired (its process died or stalled): close what it left
            # open before anyone else writes, whether or not a turn starts now.
            recover_interrupted(cx)
            cx.release_slot(token_held)
        cfg = self.turn_config
        # A safe point with no turn running: notifications that came due while a turn held
        # the slot (or before a crash) are delivered now, and the turn that starts reads them
        # first (T4, T6, M2).
        delivered = journal.deliver_due(cx, self.door) if slot_free else []
        inputs, state = self._start_state(tx, cx.row, slot_free, cx.now_us, cx=cx)
        if delivered or (slot_free and cx.notified):
            state = dataclasses.replace(state, notifications=True)
        decision = self._decide(tx, conversation_id, state, kinds)
        if record and decision.yielded:
            for kind, reason in decision.yielded:
                cx.record_event("turn_yielded", {"start": kind.value, "reason": reason})
        if decision.trigger is None:
            _, deadline, _ = cx.slot_holder()
            return Begin(None, decision, deadline)
        run_id = RunId(new_id("run"))
        token = secrets.token_hex(16)
        deadline_us = cx.now_us + to_us(cfg.slot_ttl)
        lease = (
            self.outbox.claim_in(tx, conversation_id, deadline_us=deadline_us, owner=run_id)
            if state.ready_signals else None
        )
        if decision.trigger is StartKind.WAKE and not state.notifications and (
            lease is None or not lease.deliveries
        ):
            # Another claimer (or the budget) took them: the wake-up was stale (C4).
            return Begin(None, StartDecision(None, "nothing_to_do"), None)
        tx.run_later(
            "insert_run", run_id=run_id, conversation_id=conversation_id,
            trigger=decision.trigger.value, status=RunStatus.RUNNING.value,
            instance_id=self.instance.instance_id, now_us=cx.now_us,
        )
        cx.take_slot(token, deadline_us, self.instance.instance_id, run_id)
        # Whatever starts, the run reads the queued task notifications first, here -- the
        # kernel's rows come first (M2), and the notice is in the transcript before the model
        # sees it (T4, T6). The other inputs are read at the run's first commit.
        notices = [i for i in inputs if is_notice(i)]
        others = [i for i in inputs if not is_notice(i)]
        journal.read(cx, notices, run_id)
        taken = others if decision.trigger in (StartKind.PERSON, StartKind.AGENT) else []
        if decision.trigger is StartKind.MAIL:
            # Up to 16 contiguous, compatible receipts share one supplementary reply (M8).
            taken = mail_batch(others, owner=c.owner)
        notice: str | None = None
        notice_meta: dict[str, Any] = {}
        if decision.trigger is StartKind.GOAL:
            notice = f"Goal checkpoint. Continue working toward the goal: {c.goal_text or ''}"
            notice_meta = {"kind": "goal_checkpoint"}
        cx.record_event(
            "turn_status",
            {"run_public_id": run_id, "status": "running", "trigger": decision.trigger.value,
             "inputs": [i.input_id for i in (*notices, *taken)],
             "signals": 0 if lease is None else len(lease.deliveries)},
            run_id,
        )
        plan = TurnPlan(
            conversation_id=ConversationId(conversation_id),
            run_id=run_id,
            trigger=decision.trigger,
            slot_token=token,
            profile=c.profile,
            inputs=tuple(taken),
            started_at_us=cx.now_us,
            history_start_seq=int(cx.row["history_start_seq"]),
            last_message_seq=int(cx.row["last_message_seq"]),
            lease=lease if lease is not None and lease.deliveries else None,
            notice=notice,
            notice_meta=notice_meta,
            appended=tuple(cx.appended),
        )
        return Begin(plan, decision, deadline_us)

    def _start_state(
        self, tx: Tx, row: Row, slot_free: bool, now_us: int,
        *, cx: ConversationTx | None = None,
    ) -> tuple[list[Input], StartState]:
        """What a start decision reads: the queued inputs (read order) and the flags.

        The conversation row's counters say whether there is anything to read at all, so an
        idle conversation's check is one statement; under the lock (``cx``), inputs the unit
        wrote itself -- a post, a notice -- are not read back.
        """
        c = conversation_from_row(row)
        inputs: list[Input] = []
        ready = False
        limit = self.turn_config.inputs_per_turn
        if slot_free and cx is not None:
            inputs = cx.queued_inputs(limit)
        elif slot_free and int(row["queued_inputs"]) > 0:
            rows = tx.all("queued_inputs", conversation_id=c.conversation_id, limit=limit)
            inputs = [input_from_row(r) for r in rows]
        if slot_free and int(row.get("signal_backlog") or 0) > 0:
            ready = self.ready_signals(tx, c.conversation_id, now_us)
        return inputs, StartState(
            status=c.status,
            goal_status=c.goal_status,
            suppressed=c.suppressed,
            awaiting_person=c.awaiting_person,
            slot_free=slot_free,
            person_inputs=any(i.origin is Origin.PERSON for i in inputs),
            agent_inputs=any(i.origin is Origin.AGENT for i in inputs),
            # A task's notification is read by whichever turn starts next; on its own it wakes
            # the conversation as a notification does (L3, L4), not as a receipt's mail turn.
            kernel_inputs=any(i.origin.is_kernel and not is_notice(i) for i in inputs),
            ready_signals=ready,
            notifications=slot_free and bool(row.get("unconsumed_notifications")),
        )

    @staticmethod
    def _decide(
        tx: Tx, conversation_id: str, state: StartState, kinds: frozenset[StartKind]
    ) -> StartDecision:
        """:func:`decide_start`, then L3's bound: a wake-up that only notifications of tasks
        begun by continuation-started work would answer starts nothing -- they wait for the
        next direct turn, so work cannot wake the agent recursively."""
        decision = decide_start(state, kinds)
        if decision.trigger is StartKind.WAKE and not state.ready_signals:
            row = tx.one("direct_notifications", conversation_id=conversation_id)
            if not (row and row["direct"]):
                return StartDecision(None, "continuation_started", tuple(
                    (k, "continuation_started") for k in sorted(kinds) if k.automatic
                ))
        return decision

    def ready_signals(self, tx: Tx, conversation_id: str, now_us: int) -> bool:
        """Whether a signal of the conversation is ready to be claimed now."""
        row = tx.one(
            "has_ready_signals", conversation_id=conversation_id, now_us=now_us,
            max_attempts=self.outbox.config.max_attempts,
        )
        return bool(row and row["ready"])

    def _would_start(self, tx: Tx, conversation_id: str) -> bool:
        """Whether a re-check would start a turn now (read-only: no lock, nothing written)."""
        row = tx.one("get_conversation", conversation_id=conversation_id)
        if row is None:
            return False
        now = self.clock.now_us()
        deadline = row["slot_deadline_us"]
        slot_free = row["slot_token"] is None or deadline is None or deadline <= now
        _, state = self._start_state(tx, row, slot_free, now)
        return self._decide(tx, conversation_id, state, frozenset()).trigger is not None

    # -- keeping the slot ---------------------------------------------------------------------

    async def _keep(self, plan: TurnPlan, entry: _Entry) -> None:
        """Extend the slot (and the signal lease) while the turn runs; stop it when asked to
        from another process, or when the slot was lost."""
        ttl_us = to_us(self.turn_config.slot_ttl)
        interval = ttl_us / 3 / 1e6
        while True:
            await asyncio.sleep(interval)
            now = self.clock.now_us()
            try:
                rows = await self.store.transact_query(
                    "extend_slot", route=plan.conversation_id,
                    conversation_id=plan.conversation_id, token=plan.slot_token,
                    deadline_us=now + ttl_us, now_us=now,
                )
            except TidingsError as exc:
                log.warning("could not extend the slot of %s: %s", plan.conversation_id, exc)
                continue
            reason = "slot_lost" if not rows else "stopped" if rows[0]["stop_requested"] else None
            if reason is None and plan.lease is not None:
                with contextlib.suppress(TidingsError):
                    await self.outbox.extend(plan.lease, lease_ttl=self.turn_config.slot_ttl)
            if reason is not None and entry.turn is not None:
                self._interrupt(entry, reason)
                return

    # -- stop (C6) ----------------------------------------------------------------------------

    async def stop(self, conversation_id: str, *, owner: str | None = None) -> list[RunId]:
        """Stop the running turn (wherever it runs) and suppress automatic continuation.

        The suppression lasts until a person's business input; a maintenance compact keeps it.
        Returns the runs asked to stop.
        """
        check_id(conversation_id, "conversation id")

        def unit(tx: Tx) -> list[RunId]:
            cx = ConversationTx.lock(tx, conversation_id, self.clock)
            if cx.conversation.status is ConversationStatus.TOMBSTONED or (
                owner is not None and cx.conversation.owner != owner
            ):
                raise UnknownConversationError(conversation_id)
            runs = [RunId(r["run_id"]) for r in tx.all(
                "request_stop", conversation_id=conversation_id
            )]
            cx.update(suppressed=True)
            cx.record_event("stop_requested", {"runs": list(runs)})
            cx.save()
            return runs

        runs = await self.store.transact(unit, route=conversation_id)
        entry = self._entries.get(conversation_id)
        if entry is not None:
            entry.kinds = {k for k in entry.kinds if not k.automatic}
            if entry.turn is not None:
                self._interrupt(entry, "stopped")
            else:
                entry.stopped_runs.update(runs)
        return runs

    # -- compaction (C7) ----------------------------------------------------------------------

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
        entry = self._entries[conversation_id] = _Entry(compacting=True)
        token = secrets.token_hex(16)
        try:
            conversation, history = await self.store.transact(
                lambda tx: self._begin_compaction(tx, conversation_id, token, owner),
                route=conversation_id,
            )
            summary = await self.runner.summarize(conversation.profile, history)

            def finish(tx: Tx) -> int:
                cx = ConversationTx.lock(tx, conversation_id, self.clock)
                cx.require_slot(token)
                # Summarising never erases a long-running task: the hand-off carries every
                # active or unhandled task by reference (T7).
                tasks = journal.open_references(cx)
                handoff = summary if not tasks else (
                    f"{summary}\n<task_references>{fenced_json(tasks)}</task_references>"
                )
                seq = cx.append_user(
                    handoff, meta={"kind": "compaction_summary",
                                   "summarized_through": history[-1].seq if history else 0,
                                   "task_keys": [t["task_key"] for t in tasks]},
                )
                cx.start_history_at(seq - 1)
                cx.record_event(
                    "context_compacted",
                    {"message_seq": seq, "summarized_messages": len(history)},
                )
                cx.release_slot(token)
                cx.save()
                return seq

            return await self.store.transact(finish, route=conversation_id)
        except BaseException:
            with contextlib.suppress(TidingsError):
                await self.store.transact(
                    lambda tx: _release_slot(tx, conversation_id, token, self.clock),
                    route=conversation_id,
                )
            raise
        finally:
            entry.compacting = False
            self._settle_entry(conversation_id, entry)

    def _begin_compaction(
        self, tx: Tx, conversation_id: str, token: str, owner: str | None
    ) -> tuple[Conversation, list[Any]]:
        cx = ConversationTx.lock(tx, conversation_id, self.clock)
        c = cx.conversation
        if c.status is ConversationStatus.TOMBSTONED or (owner is not None and c.owner != owner):
            raise UnknownConversationError(conversation_id)
        if not cx.slot_free():
            raise CompactionRefusedError(conversation_id, "a turn is active")
        if cx.queued_inputs(1):
            raise CompactionRefusedError(conversation_id, "a start is queued")
        recover_interrupted(cx)
        deadline = cx.now_us + to_us(self.turn_config.slot_ttl) * 4
        cx.take_slot(token, deadline, self.instance.instance_id, f"compaction:{token[:8]}")
        history = cx.history(self.turn_config.history_messages * 5)
        cx.save()
        return c, history

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

    async def run(self) -> None:
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
            await asyncio.sleep(to_us(self.config.sweep_interval) / 1e6)
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
        for entry in list(self._entries.values()):
            if entry.turn is not None:
                self._interrupt(entry, "shutdown")
            if entry.driver is not None:
                drivers.append(entry.driver)
        for driver in drivers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await driver


def recover_interrupted(cx: ConversationTx) -> int:
    """Close what a dead holder of the slot left open; runs in the unit that takes the slot.

    Its open tool calls are answered ``outcome_unknown`` (the tool may or may not have acted;
    it is never run again, S9) and its run is failed with ``interrupted``.
    """
    answered = 0
    calls: dict[str, set[str]] = {}
    for call in cx.open_tool_calls():
        calls.setdefault(str(call["run_id"]), set()).add(str(call["call_id"]))
        cx.append_tool_result(
            call["call_id"],
            "outcome_unknown: the runtime stopped while this tool was running; it was not "
            "run again and whether it took effect is unknown",
            tool_name=call["name"],
            run_id=call["run_id"],
            meta={"status": "outcome_unknown", "is_error": True},
        )
        answered += 1
    for run_id, call_ids in calls.items():
        journal.commit_calls(cx, run_id, call_ids)  # a task such a call started is still told
    _, _, prior = cx.slot_holder()
    if prior is not None and not prior.startswith("compaction:"):
        row = cx.tx.one(
            "finish_run", run_id=prior, status=RunStatus.FAILED.value, failure_code="interrupted",
            model=None, steps=0, now_us=cx.now_us,
        )
        if row is not None:
            run = run_from_row(row)
            cx.record_event(
                "turn_status",
                {"run_public_id": run.run_id, "status": "failed", "failure_code": "interrupted"},
                run.run_id,
            )
        expire_run_approvals(cx, prior)  # a held call died with its turn: no late decision
        # The turn that owned its turn-lifetime tasks is over: their notifications go to the
        # conversation (delivered by the caller's unit at the safe point it reaches).
        for task in journal.of_run(cx, prior):
            journal.hand_off(cx, task)
    return answered


def _written(
    tx: Tx, conversation_id: str, clock: Clock, write: Callable[[ConversationTx], T]
) -> T:
    cx = ConversationTx.lock(tx, conversation_id, clock)
    result = write(cx)
    cx.save()
    return result


def _release_slot(tx: Tx, conversation_id: str, token: str, clock: Clock) -> None:
    cx = ConversationTx.lock(tx, conversation_id, clock)
    cx.release_slot(token)
    cx.save()


__all__ = ("Coordinator", "CoordinatorConfig", "recover_interrupted")
