"""Operations, signal events and deliveries: the durable signal outbox (SPEC S3-S12).

Transitions that must commit with the caller's own writes (``publish``, ``ack``, and the
operation transitions) are plain functions over a :class:`~tidings.store.Tx`: call them inside
the caller's unit of work. Transitions that stand alone (``claim``, ``extend``, ``release``,
``sweep``) are coroutines.

Guarantees, in one place:

- publication commits or rolls back with the caller's transaction (S3);
- one idempotency key per conversation publishes once; a repeat returns the first event (S4);
- a claim is scoped to one conversation, bounded in count and bytes, in journal order (S5);
- only the current unexpired lease token may extend, acknowledge or release (S6);
- an ack commits with the consumer's writes, or not at all (S7);
- a failed attempt backs off with jitter; a permanent failure or exhausted budget dead-letters
  with a code, and nothing replays a dead letter (S8);
- leases and accepted operations of instances that are gone are voided and made
  outcome_unknown, never replayed (S9);
- the backlog is bounded by refusal, never by dropping (S10).

Delivery is at least once: a consumer that crashes after its external effect and before its
ack sees the signal again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import secrets
import socket
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from tidings.clock import Clock, SystemClock, to_us
from tidings.errors import (
    BacklogFullError,
    InstanceNotRunningError,
    InvalidInputError,
    OperationSettledError,
    StaleLeaseError,
    StoreError,
    TidingsError,
    UnknownOperationError,
)
from tidings.policy import (
    backoff_us,
    check_id,
    check_signal_payload,
    check_slug,
    dead_letter_due,
    encode_json,
)
from tidings.store import Row, Store, Tx, open_store
from tidings.types import (
    JSON,
    ConversationId,
    DeadLetter,
    Delivery,
    DeliveryId,
    EventId,
    InstanceId,
    Lease,
    Operation,
    OperationId,
    OperationState,
    Published,
    QueueStats,
    ReconcileReport,
    Signal,
    new_id,
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class OutboxConfig:
    """Bounds and timings of the outbox; every duration carries its unit in its type."""

    payload_limit_bytes: int = 8 * 1024
    backlog_limit: int = 1_000
    claim_max_count: int = 16
    claim_max_bytes: int = 64 * 1024
    lease_ttl: timedelta = timedelta(seconds=30)
    max_attempts: int = 5
    backoff_base: timedelta = timedelta(seconds=1)
    backoff_cap: timedelta = timedelta(minutes=5)
    retention: timedelta = timedelta(days=1)
    heartbeat_interval: timedelta = timedelta(seconds=5)
    instance_timeout: timedelta = timedelta(minutes=2)
    sweep_interval: timedelta = timedelta(seconds=5)
    purge_batch: int = 1_000


@dataclass(frozen=True, slots=True)
class SweepReport:
    """What one sweep changed."""

    reconciled: ReconcileReport
    dead_lettered: int
    purged: int


def _operation(row: Row) -> Operation:
    return Operation(
        operation_id=OperationId(row["operation_id"]),
        kind=row["kind"],
        owner=row["owner"],
        origin_instance=InstanceId(row["origin_instance"]),
        state=OperationState(row["state"]),
        accepted_at_us=row["accepted_at_us"],
        settled_at_us=row["settled_at_us"],
        outcome=None if row["outcome"] is None else json.loads(row["outcome"]),
        failure_code=row["failure_code"],
    )


def _delivery(row: Row) -> Delivery:
    return Delivery(
        delivery_id=DeliveryId(row["delivery_id"]),
        event_id=EventId(row["event_id"]),
        seq=row["seq"],
        queue_seq=row["queue_seq"],
        type=row["type"],
        operation_id=None if row["operation_id"] is None else OperationId(row["operation_id"]),
        conversation_id=ConversationId(row["conversation_id"]),
        payload=json.loads(row["payload"]),
        payload_bytes=row["payload_bytes"],
        schema_version=row["schema_version"],
        attempts=row["attempts"],
        published_at_us=row["published_at_us"],
    )


class Outbox:
    """The signal outbox of one runtime instance over one store.

    ``start()`` registers the instance (with a heartbeat and a liveness mark) and reconciles
    instances that are gone; ``close()`` settles this instance's own leases and unsettled
    operations the same way and is idempotent.
    """

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock | None = None,
        config: OutboxConfig | None = None,
        rng: random.Random | None = None,
        owns_store: bool = False,
    ) -> None:
        self.store = store
        self.clock: Clock = clock or SystemClock()
        self.config = config or OutboxConfig()
        self._rng = rng or random.Random()
        self._owns_store = owns_store
        self.instance_id = InstanceId(new_id("inst"))
        self._running = False
        self._closed = False
        self._stop = asyncio.Event()

    # -- lifecycle -----------------------------------------------------------------------------

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls, url: str, *, store_options: dict[str, Any] | None = None, **options: Any
    ) -> AsyncIterator[Outbox]:
        """Open the database at ``url``, start an outbox on it, and close both on exit."""
        store = await open_store(url, **(store_options or {}))
        outbox = cls(store, owns_store=True, **options)
        try:
            await outbox.start()
            yield outbox
        finally:
            await outbox.close()

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
        """Stop this instance: its leases are voided, its unsettled operations outcome_unknown."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        try:
            if self._running:
                self._running = False
                await self.store.transact(lambda tx: self._retire(tx, self.instance_id))
        finally:
            if self._owns_store:
                await self.store.close()

    async def run(self) -> None:
        """Heartbeat and sweep until ``close()``; each pass survives a failed database call."""
        heartbeat_s = self.config.heartbeat_interval.total_seconds()
        sweep_every = max(1, round(self.config.sweep_interval / self.config.heartbeat_interval))
        beats = 0
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=heartbeat_s)
            if self._stop.is_set():
                return
            with contextlib.suppress(StoreError):
                await self.heartbeat()
                beats += 1
                if beats % sweep_every == 0:
                    await self.sweep()

    async def heartbeat(self) -> None:
        """Record that this instance is alive; if it was declared gone, stop acting."""

        def beat(tx: Tx) -> int:
            return tx.execute("heartbeat", instance_id=self.instance_id, now_us=self.clock.now_us())

        if self._running and await self.store.transact(beat) == 0:
            self._running = False  # another instance declared us gone; our leases are void

    def _require_running(self) -> None:
        if not self._running:
            raise InstanceNotRunningError()

    # -- reconciliation (S9) -------------------------------------------------------------------

    def _retire(self, tx: Tx, instance_id: InstanceId) -> tuple[int, list[OperationId]]:
        now = self.clock.now_us()
        tx.execute("mark_instance_gone", instance_id=instance_id, now_us=now)
        leases = tx.execute("invalidate_leases", instance_id=instance_id, now_us=now)
        unknown = tx.all("orphan_operations", instance_id=instance_id, now_us=now)
        return leases, [OperationId(r["operation_id"]) for r in unknown]

    async def reconcile(self) -> ReconcileReport:
        """Find instances that are gone; void their leases, make their operations unknown.

        An instance is gone when it stopped, when its liveness mark is free (its process or
        connection died), or when its heartbeat is older than ``instance_timeout``. Nothing
        is replayed: an operation that was accepted and never settled is outcome_unknown.
        """

        def unit(tx: Tx) -> ReconcileReport:
            now = self.clock.now_us()
            stale_before = now - to_us(self.config.instance_timeout)
            gone: list[InstanceId] = []
            leases = 0
            unknown: list[OperationId] = []
            for row in tx.all("unreconciled_instances", instance_id=self.instance_id):
                instance = InstanceId(row["instance_id"])
                alive = (
                    row["stopped_at_us"] is None
                    and row["heartbeat_at_us"] >= stale_before
                    and self.store.instance_alive(tx, instance)
                )
                if alive:
                    continue
                voided, orphaned = self._retire(tx, instance)
                gone.append(instance)
                leases += voided
                unknown.extend(orphaned)
            return ReconcileReport(tuple(gone), leases, tuple(unknown))

        return await self.store.transact(unit)

    # -- operations ----------------------------------------------------------------------------

    def accept(
        self, tx: Tx, kind: str, owner: str, *, idempotency_key: str | None = None
    ) -> Operation:
        """Record an operation as accepted by this instance, before anything external runs.

        With an ``idempotency_key`` already used by ``owner``, the first operation is returned.
        """
        self._require_running()
        check_slug(kind, "operation kind")
        check_id(owner, "owner")
        key = check_id(idempotency_key, "idempotency key") if idempotency_key else None
        operation_id = new_id("op")
        row = tx.one(
            "accept_operation",
            operation_id=operation_id,
            kind=kind,
            owner=owner,
            origin_instance=self.instance_id,
            idempotency_key=key or operation_id,
            now_us=self.clock.now_us(),
        )
        if row is None:  # a concurrent accept won the key, or this instance was declared gone
            row = tx.one("operation_by_key", owner=owner, idempotency_key=key or operation_id)
        if row is None:
            self._running = False
            raise InstanceNotRunningError()
        return _operation(row)

    def complete(self, tx: Tx, operation_id: str, outcome: JSON = None) -> Operation:
        """Settle an accepted operation as completed, with a bounded JSON outcome."""
        text = None
        if outcome is not None:
            text, _ = encode_json(outcome, "outcome", limit_bytes=self.config.payload_limit_bytes)
        return self._settle(tx, operation_id, OperationState.COMPLETED, text, None)

    def fail(self, tx: Tx, operation_id: str, failure_code: str) -> Operation:
        """Settle an accepted operation as failed, with a non-sensitive failure code."""
        check_slug(failure_code, "failure code")
        return self._settle(tx, operation_id, OperationState.FAILED, None, failure_code)

    def mark_outcome_unknown(self, tx: Tx, operation_id: str) -> Operation:
        """Settle an accepted operation as outcome_unknown: it may or may not have happened."""
        return self._settle(tx, operation_id, OperationState.OUTCOME_UNKNOWN, None, None)

    def _settle(
        self,
        tx: Tx,
        operation_id: str,
        state: OperationState,
        outcome: str | None,
        failure_code: str | None,
    ) -> Operation:
        changed = tx.execute(
            "settle_operation",
            operation_id=operation_id,
            state=state.value,
            outcome=outcome,
            failure_code=failure_code,
            now_us=self.clock.now_us(),
        )
        row = tx.one("get_operation", operation_id=operation_id)
        if row is None:
            raise UnknownOperationError(operation_id)
        if changed == 0:
            raise OperationSettledError(operation_id, row["state"])
        return _operation(row)

    async def operation(self, operation_id: str) -> Operation:
        row = await self.store.read(lambda tx: tx.one("get_operation", operation_id=operation_id))
        if row is None:
            raise UnknownOperationError(operation_id)
        return _operation(row)

    # -- publish (S3, S4, S10, S11) ------------------------------------------------------------

    def signal(
        self,
        conversation_id: str,
        type: str,
        payload: JSON,
        *,
        idempotency_key: str | None = None,
        operation_id: str | None = None,
        schema_version: int = 1,
    ) -> Signal:
        """Validate and encode a signal, outside any transaction.

        Raises :class:`PayloadTooLargeError` / :class:`InvalidInputError` for a payload that is
        too big or is not bounded metadata (S10, S11). Preparing a signal before opening the
        unit that publishes it keeps that work off the store's writer.
        """
        check_id(conversation_id, "conversation id")
        check_slug(type, "signal type")
        check_signal_payload(payload)
        text, size = encode_json(payload, "payload", limit_bytes=self.config.payload_limit_bytes)
        event_id = EventId(new_id("evt"))
        key = check_id(idempotency_key, "idempotency key") if idempotency_key else event_id
        if operation_id is not None:
            check_id(operation_id, "operation id")
        if not isinstance(schema_version, int) or schema_version < 1:
            raise InvalidInputError("schema_version must be a positive integer")
        return Signal(
            ConversationId(conversation_id), type, text, size, event_id, key,
            None if operation_id is None else OperationId(operation_id), schema_version,
        )

    def publish(
        self,
        tx: Tx,
        conversation_id: str,
        type: str,
        payload: JSON,
        *,
        idempotency_key: str | None = None,
        operation_id: str | None = None,
        schema_version: int = 1,
    ) -> Published:
        """Publish a signal to one conversation inside the caller's transaction.

        The same as ``publish_signal(tx, self.signal(...))``; see both.
        """
        prepared = self.signal(
            conversation_id, type, payload, idempotency_key=idempotency_key,
            operation_id=operation_id, schema_version=schema_version,
        )
        return self.publish_signal(tx, prepared)

    def publish_signal(self, tx: Tx, signal: Signal) -> Published:
        """Publish a prepared signal inside the caller's transaction (S3, S4, S10).

        Raises :class:`BacklogFullError` when the conversation already holds ``backlog_limit``
        unacknowledged signals (nothing is dropped to make room). A repeated idempotency key
        returns the first event and writes nothing.
        """
        conversation_id = signal.conversation_id
        row = tx.one(
            "publish",
            event_id=signal.event_id,
            type=signal.type,
            operation_id=signal.operation_id,
            conversation_id=conversation_id,
            idempotency_key=signal.idempotency_key,
            payload=signal.payload_text,
            payload_bytes=signal.payload_bytes,
            schema_version=signal.schema_version,
            backlog_limit=self.config.backlog_limit,
            now_us=self.clock.now_us(),
        )
        if row is not None and row["outcome"] == "created":
            if row["backlog"] == 1:  # the queue was empty: consumers drain until a claim is empty
                self.store.wake(tx, conversation_id)
            return Published(
                EventId(row["event_id"]), row["seq"], DeliveryId(row["delivery_id"]),
                conversation_id, created=True,
            )
        if row is not None:  # admitted, but a concurrent publisher won the key: undo admission
            tx.execute("undo_admission", conversation_id=conversation_id)
        first = tx.one(
            "event_by_key", conversation_id=conversation_id,
            idempotency_key=signal.idempotency_key,
        )
        if first is None:
            raise BacklogFullError(conversation_id, self.config.backlog_limit)
        return Published(
            EventId(first["event_id"]), first["seq"], DeliveryId(first["delivery_id"]),
            conversation_id, created=False,
        )

    # -- claim, extend, ack, release (S5-S8) ---------------------------------------------------

    async def claim(
        self,
        conversation_id: str,
        *,
        max_count: int | None = None,
        max_bytes: int | None = None,
        owner: str | None = None,
        lease_ttl: timedelta | None = None,
    ) -> Lease:
        """Lease the next ready signals of one conversation, in journal order.

        At most ``max_count`` signals and ``max_bytes`` of payload (the first signal is always
        taken). The lease has a fresh random token and a deadline; an empty lease means there
        was nothing to claim. ``owner`` names the run holding the lease.
        """
        self._require_running()
        ttl = to_us(lease_ttl or self.config.lease_ttl)
        return await self.store.transact(
            lambda tx: self.claim_in(
                tx, conversation_id, max_count=max_count, max_bytes=max_bytes, owner=owner,
                deadline_us=self.clock.now_us() + ttl,
            ),
            route=conversation_id,
        )

    def claim_in(
        self,
        tx: Tx,
        conversation_id: str,
        *,
        deadline_us: int,
        max_count: int | None = None,
        max_bytes: int | None = None,
        owner: str | None = None,
    ) -> Lease:
        """:meth:`claim` inside the caller's unit: a turn claims in the unit that takes its
        conversation's slot, so signals are claimed only inside that slot (S5)."""
        self._require_running()
        check_id(conversation_id, "conversation id")
        count = self.config.claim_max_count if max_count is None else max_count
        size = self.config.claim_max_bytes if max_bytes is None else max_bytes
        if count < 1 or size < 1:
            raise InvalidInputError("max_count and max_bytes must be positive")
        token = secrets.token_hex(16)
        now = self.clock.now_us()
        rows = tx.all(
            "claim",
            conversation_id=conversation_id,
            token=token,
            deadline_us=deadline_us,
            now_us=now,
            instance_id=self.instance_id,
            owner=owner,
            max_count=count,
            max_bytes=size,
            max_attempts=self.config.max_attempts,
        )
        rows.sort(key=lambda r: r["queue_seq"])  # journal order within the batch
        return Lease(
            token, ConversationId(conversation_id), deadline_us, tuple(_delivery(r) for r in rows)
        )

    async def extend(self, lease: Lease, *, lease_ttl: timedelta | None = None) -> Lease:
        """Push the lease's deadline out; only the current unexpired token may."""
        ttl = to_us(lease_ttl or self.config.lease_ttl)
        ids = list(lease.delivery_ids)

        def unit(tx: Tx) -> Lease:
            now = self.clock.now_us()
            rows = tx.all(
                "extend", token=lease.token, delivery_ids=ids, now_us=now, deadline_us=now + ttl
            )
            if len(rows) != len(ids):
                raise StaleLeaseError(lease.token, ids)
            return Lease(lease.token, lease.conversation_id, now + ttl, lease.deliveries)

        return await self.store.transact(unit, route=lease.conversation_id)

    def ack(self, tx: Tx, lease: Lease, delivery_ids: Sequence[int] | None = None) -> None:
        """Acknowledge leased signals inside the consumer's transaction (S7).

        If any of them is no longer held by this unexpired token, :class:`StaleLeaseError` is
        raised and -- because the whole unit then rolls back -- the consumer's writes do not
        commit either.
        """
        ids = list(dict.fromkeys(lease.delivery_ids if delivery_ids is None else delivery_ids))
        if not ids:
            return
        unknown = set(ids) - set(lease.delivery_ids)
        if unknown:
            raise InvalidInputError(f"deliveries {sorted(unknown)} are not in this lease")
        now = self.clock.now_us()
        rows = tx.all(
            "ack",
            token=lease.token,
            delivery_ids=ids,
            expected=len(ids),
            conversation_id=lease.conversation_id,
            now_us=now,
        )
        if len(rows) != len(ids):
            raise StaleLeaseError(lease.token, ids)

    async def consume(self, lease: Lease, unit: Callable[[Tx], T], *, failure_code: str) -> T:
        """Run the consumer's ``unit`` and the ack in one transaction.

        If the transaction fails for any reason, the lease is released at once with
        ``failure_code`` (backing off, or dead-lettering when the budget is spent) and the
        error is raised. A commit whose outcome is unknown leaves the lease to expire.
        """

        check_slug(failure_code, "failure code")

        def both(tx: Tx) -> T:
            result = unit(tx)
            self.ack(tx, lease)
            return result

        try:
            return await self.store.transact(both, route=lease.conversation_id)
        except StaleLeaseError:
            raise
        except TidingsError as exc:
            if exc.code != "commit_outcome_unknown":
                with contextlib.suppress(StaleLeaseError, StoreError):
                    await self.release(lease, failure_code)
            raise
        except Exception:
            with contextlib.suppress(StaleLeaseError, StoreError):
                await self.release(lease, failure_code)
            raise

    async def release(
        self,
        lease: Lease,
        failure_code: str,
        *,
        permanent: bool = False,
        delivery_ids: Sequence[int] | None = None,
    ) -> dict[DeliveryId, str]:
        """Give leased signals back after a failed attempt (S8).

        Each goes back to ready after a capped, jittered exponential backoff -- or to
        dead_letter, with ``failure_code``, when ``permanent`` or when its attempt budget is
        spent. Returns the new state of each delivery.
        """
        check_slug(failure_code, "failure code")
        wanted = set(lease.delivery_ids if delivery_ids is None else delivery_ids)
        chosen = [d for d in lease.deliveries if d.delivery_id in wanted]
        if len(chosen) != len(wanted):
            raise InvalidInputError("some deliveries are not in this lease")
        if not chosen:
            return {}
        return await self.store.transact(
            lambda tx: self._release_in(tx, lease, chosen, failure_code, permanent),
            route=lease.conversation_id,
        )

    def release_in(
        self, tx: Tx, lease: Lease, failure_code: str, *, permanent: bool = False
    ) -> dict[DeliveryId, str]:
        """:meth:`release` of the whole lease inside the caller's unit (a failed turn's commit)."""
        check_slug(failure_code, "failure code")
        if not lease.deliveries:
            return {}
        return self._release_in(tx, lease, list(lease.deliveries), failure_code, permanent)

    def _release_in(
        self,
        tx: Tx,
        lease: Lease,
        chosen: Sequence[Delivery],
        failure_code: str,
        permanent: bool,
    ) -> dict[DeliveryId, str]:
        cfg = self.config
        now = self.clock.now_us()
        items = []
        for d in chosen:
            dead = dead_letter_due(d.attempts, max_attempts=cfg.max_attempts, permanent=permanent)
            delay = backoff_us(d.attempts, self._rng, base=cfg.backoff_base, cap=cfg.backoff_cap)
            items.append({
                "delivery_id": d.delivery_id,
                "state": "dead_letter" if dead else "ready",
                "claimable_at_us": now + delay,
                "failure_code": failure_code,
            })
        rows = tx.all("release", token=lease.token, items=json.dumps(items), now_us=now)
        if len(rows) != len(items):
            raise StaleLeaseError(lease.token, [d.delivery_id for d in chosen])
        dead_count = sum(1 for r in rows if r["state"] == "dead_letter")
        if dead_count:
            tx.execute("count_dead_letters", conversation_id=lease.conversation_id, dead=dead_count)
        return {DeliveryId(r["delivery_id"]): r["state"] for r in rows}

    # -- sweep, stats, dead letters ------------------------------------------------------------

    async def sweep(self) -> SweepReport:
        """One recovery pass: reconcile gone instances, dead-letter spent deliveries whose
        leases expired, purge acknowledged deliveries past retention."""
        reconciled = await self.reconcile()

        def spent(tx: Tx) -> int:
            rows = tx.all(
                "dead_letter_exhausted",
                now_us=self.clock.now_us(),
                max_attempts=self.config.max_attempts,
            )
            for conversation_id, dead in Counter(r["conversation_id"] for r in rows).items():
                tx.execute("count_dead_letters", conversation_id=conversation_id, dead=dead)
            return len(rows)

        dead_lettered = await self.store.transact(spent)
        purged = 0
        before = self.clock.now_us() - to_us(self.config.retention)
        while True:
            batch = await self.store.transact(
                lambda tx: tx.execute(
                    "purge_acknowledged", before_us=before, limit=self.config.purge_batch
                )
            )
            purged += batch
            if batch < self.config.purge_batch:
                break
        return SweepReport(reconciled, dead_lettered, purged)

    async def stats(self, conversation_id: str | None = None) -> QueueStats:
        """Backlog, ready and leased counts, oldest age, retries and dead letters (S10)."""
        if conversation_id is None:
            row = await self.store.read(lambda tx: tx.one("stats_all"))
        else:
            check_id(conversation_id, "conversation id")
            row = await self.store.read(
                lambda tx: tx.one("stats_conversation", conversation_id=conversation_id)
            )
        assert row is not None
        oldest = row["oldest_published_at_us"]
        return QueueStats(
            conversation_id=None if conversation_id is None else ConversationId(conversation_id),
            backlog=int(row["backlog"]),
            ready=int(row["ready"]),
            leased=int(row["leased"]),
            oldest_age_us=None if oldest is None else max(0, self.clock.now_us() - int(oldest)),
            retried=int(row["retried"]),
            max_attempts=int(row["max_attempts"]),
            dead_letters=int(row["dead_letters"]),
        )

    async def dead_letters(
        self, conversation_id: str | None = None, *, limit: int = 100
    ) -> list[DeadLetter]:
        """Dead letters, oldest first. They stay until an operator acts; nothing replays them."""
        if not 1 <= limit <= 1_000:
            raise InvalidInputError("limit must be between 1 and 1000")
        rows = await self.store.read(
            lambda tx: tx.all("dead_letters", conversation_id=conversation_id, limit=limit)
        )
        return [
            DeadLetter(
                DeliveryId(r["delivery_id"]), EventId(r["event_id"]),
                ConversationId(r["conversation_id"]), r["type"], r["attempts"],
                r["failure_code"], r["published_at_us"], r["settled_at_us"],
            )
            for r in rows
        ]

    async def delivery_states(self, delivery_ids: Sequence[int]) -> list[Row]:
        """The raw consumer state of some deliveries (diagnostics and tests)."""
        ids = list(delivery_ids)
        return await self.store.read(lambda tx: tx.all("delivery_states", delivery_ids=ids))

    @contextlib.asynccontextmanager
    async def wakeups(self) -> AsyncIterator[asyncio.Queue[str]]:
        """A queue of conversation ids whose signal queue went from empty to non-empty.

        Hints only: possibly repeated, possibly missed (the sweep re-finds what they miss). A
        consumer woken for a conversation claims until a claim comes back empty.
        """
        queue = self.store.wakeups.subscribe()
        try:
            yield queue
        finally:
            self.store.wakeups.unsubscribe(queue)
