"""Instances: one boot of a runtime process over one database (SPEC S9).

An instance has its own id, a heartbeat and a liveness mark. It is *running* from ``start()``
until ``close()`` -- or until another instance declares it gone, which it learns at its next
heartbeat or write. Only a running instance may claim signals or accept operations: whatever it
holds when it goes is settled by the instance that notices, never replayed.

Guarantees:

- an instance that is gone has its leases voided and its unsettled operations made
  outcome_unknown, in one transaction, exactly once (the gone mark fences the rest);
- an instance known dead (its liveness mark is free, or it is this instance, closing) has the
  conversation slots it held voided at once; one that is only silent keeps them until they
  expire, since a stalled process may still be running a turn;
- every boot has a new id, so nothing an earlier boot held is mistaken for this one's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tidings.clock import Clock, SystemClock, to_us
from tidings.errors import InstanceNotRunningError, StoreError
from tidings.store import Store, Tx
from tidings.support.lifetime import Loop
from tidings.types import (
    ConversationId,
    InstanceId,
    OperationId,
    OutboxConfig,
    ReconcileReport,
    SweepReport,
    new_id,
)


@dataclass(frozen=True, slots=True)
class InstanceRecord:
    """One boot of a runtime over this database, as an operator lists it. ``state`` is
    ``live`` (heartbeating), ``silent`` (no heartbeat for longer than the instance timeout:
    taken for gone at the next sweep) or ``stopped`` (retired, or reconciled as gone)."""

    instance_id: InstanceId
    hostname: str
    pid: int
    state: str
    started_at_us: int
    heartbeat_at_us: int
    stopped_at_us: int | None


async def list_instances(
    store: Store, *, now_us: int, config: OutboxConfig, limit: int = 100
) -> list[InstanceRecord]:
    """The newest ``limit`` boots over this database, newest first."""
    rows = await store.read(lambda tx: tx.all("list_instances", limit=limit))
    timeout_us = to_us(config.instance_timeout)

    def state(stopped: int | None, heartbeat: int) -> str:
        if stopped is not None:
            return "stopped"
        return "silent" if now_us - heartbeat > timeout_us else "live"

    return [
        InstanceRecord(InstanceId(r["instance_id"]), str(r["hostname"]), int(r["pid"]),
                     state(r["stopped_at_us"], int(r["heartbeat_at_us"])),
                     int(r["started_at_us"]), int(r["heartbeat_at_us"]), r["stopped_at_us"])
        for r in rows
    ]


class Instance(Loop):
    """This process's instance over one store: register, heartbeat, reconcile, retire.

    ``start()`` registers it (with a heartbeat and a liveness mark) and reconciles instances
    that are gone; ``close()`` retires it -- its leases voided, its unsettled operations
    outcome_unknown, its slots freed -- and is idempotent. ``on_gone`` is handed the report of
    a periodic ``sweep`` (the outbox's; see :meth:`serve`) that found instances gone while this
    one runs.

    A component of the runtime, the outbox's heartbeat (``tidings-outbox``): its work
    heartbeats and sweeps (:meth:`serve`); its shutdown cancels that work, then retires the
    instance (:meth:`close`) -- last, once what stops before it no longer needs it.
    """

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock | None = None,
        config: OutboxConfig | None = None,
        on_gone: Callable[[ReconcileReport], Awaitable[None]] | None = None,
        sweep: Callable[[], Awaitable[SweepReport]] | None = None,
    ) -> None:
        super().__init__("tidings-outbox")
        self.store = store
        self.clock: Clock = clock or SystemClock()
        self.config = config or OutboxConfig()
        self.instance_id = InstanceId(new_id("inst"))
        self._on_gone = on_gone
        self._sweep = sweep
        self._running = False
        self._closed = False
        self._stop = asyncio.Event()

    @property
    def running(self) -> bool:
        """Started, not closed, and not declared gone by another instance (as far as known)."""
        return self._running

    def require_running(self) -> None:
        """Refuse to act for an instance that is not running: what it would hold is void."""
        if not self._running:
            raise InstanceNotRunningError()

    def declared_gone(self) -> None:
        """Another instance declared this one gone (a write of ours was fenced): stop acting."""
        self._running = False

    # -- lifetime ------------------------------------------------------------------------------

    async def start(self) -> ReconcileReport:
        """Register this instance, hold its liveness mark, and reconcile gone instances."""
        await self.store.hold_instance(self.instance_id)

        def register(tx: Tx) -> None:
            tx.execute(
                "register_instance",
                instance_id=self.instance_id,
                hostname=socket.gethostname(),
                pid=os.getpid(),
                now_us=self.clock.now_us(),
            )

        await self.store.transact(register)
        self._running = True
        return await self.reconcile()

    async def close(self) -> None:
        """Retire this instance: its leases void, its unsettled operations outcome_unknown.

        Idempotent; the store stays open (its owner closes it).
        """
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._running:
            self._running = False
            await self.store.transact(lambda tx: self._retire(tx, self.instance_id, dead=True))

    stopped = close  # at shutdown, once the heartbeat has ended

    async def serve(self) -> None:
        """Heartbeat, and every ``sweep_interval`` run ``sweep`` (none: never), until
        ``close()``; each pass survives a failed database call.

        A sweep that finds instances gone hands its report to ``on_gone``, so that what they
        left (tasks, slots, restarts) is taken up now, not at the next slower pass.
        """
        heartbeat_s = self.config.heartbeat_interval.total_seconds()
        sweep_every = max(1, round(self.config.sweep_interval / self.config.heartbeat_interval))
        beats = 0
        while not self._stop.is_set():
            await self.clock.wait(self._stop, heartbeat_s)
            if self._stop.is_set():
                return
            with contextlib.suppress(StoreError):
                await self.heartbeat()
                beats += 1
                if beats % sweep_every == 0 and self._sweep is not None:
                    report = await self._sweep()
                    if report.reconciled.gone_instances and self._on_gone is not None:
                        await self._on_gone(report.reconciled)

    async def heartbeat(self) -> None:
        """Record that this instance is alive; if it was declared gone, stop acting."""

        def beat(tx: Tx) -> int:
            return tx.execute("heartbeat", instance_id=self.instance_id, now_us=self.clock.now_us())

        if self._running and await self.store.transact(beat) == 0:
            self.declared_gone()  # another instance declared us gone; our leases are void

    # -- reconciliation (S9) -------------------------------------------------------------------

    async def reconcile(self) -> ReconcileReport:
        """Find instances that are gone; void their leases, make their operations unknown.

        An instance whose liveness mark is free (its process, or its database session, ended)
        is known to be gone: its leases and the conversation slots it held are voided at once,
        whatever their deadlines. An instance that stopped, or whose heartbeat is older than
        ``instance_timeout``, is declared gone too, but while its liveness mark is held its
        slots are left to expire: whether it still runs a turn cannot be known. Nothing is
        replayed: an operation that was accepted and never settled is outcome_unknown.
        """

        def unit(tx: Tx) -> ReconcileReport:
            now = self.clock.now_us()
            stale_before = now - to_us(self.config.instance_timeout)
            gone: list[InstanceId] = []
            leases = 0
            unknown: list[OperationId] = []
            slots: list[ConversationId] = []
            for row in tx.all("unreconciled_instances", instance_id=self.instance_id):
                instance = InstanceId(row["instance_id"])
                dead = not self.store.instance_alive(tx, instance)
                silent = row["stopped_at_us"] is not None or row["heartbeat_at_us"] < stale_before
                if not (dead or silent):
                    continue
                voided, orphaned, freed = self._retire(tx, instance, dead=dead)
                gone.append(instance)
                leases += voided
                unknown.extend(orphaned)
                slots.extend(freed)
            return ReconcileReport(tuple(gone), leases, tuple(unknown), tuple(slots))

        return await self.store.transact(unit)

    def _retire(
        self, tx: Tx, instance_id: InstanceId, *, dead: bool
    ) -> tuple[int, list[OperationId], list[ConversationId]]:
        """Declare an instance gone: its leases void, its unsettled operations unknown.

        ``dead``: its process is known to be gone (its liveness mark is free, or it is this
        instance, closing), so the conversation slots it held are voided too. Otherwise they
        stay until they expire: a process that is alive but stalled may still be running a
        turn, and only its slot keeps a second turn of that conversation from starting.
        """
        now = self.clock.now_us()
        tx.execute("mark_instance_gone", instance_id=instance_id, now_us=now)
        leases = tx.execute("invalidate_leases", instance_id=instance_id, now_us=now)
        unknown = tx.all("orphan_operations", instance_id=instance_id, now_us=now)
        slots = tx.all("void_slots", instance_id=instance_id, now_us=now) if dead else []
        return (
            leases,
            [OperationId(r["operation_id"]) for r in unknown],
            [ConversationId(r["conversation_id"]) for r in slots],
        )


__all__ = ("Instance", "InstanceRecord", "list_instances")
