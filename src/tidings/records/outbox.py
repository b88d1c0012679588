"""Signal events and deliveries: the durable signal outbox (SPEC S3-S12).

Transitions that must commit with the caller's own writes (``publish``, ``ack``) are plain
functions over a :class:`~tidings.store.Tx`: call them inside the caller's unit of work.
Transitions that stand alone (``claim``, ``extend``, ``release``, ``sweep``) are coroutines.
The outbox acts for one :class:`~tidings.records.instances.Instance`, whose id fences its
leases; operations (:mod:`.operations`) and instances (:mod:`.instances`) live apart.

Guarantees, in one place:

- publication commits or rolls back with the caller's transaction (S3);
- one idempotency key per conversation publishes once; a repeat returns the first event (S4);
- a claim is scoped to one conversation, bounded in count and bytes, in journal order (S5);
- only the current unexpired lease token may extend, acknowledge or release (S6);
- an ack commits with the consumer's writes, or not at all (S7);
- a failed attempt backs off with jitter; a permanent failure or exhausted budget dead-letters
  with a code, and nothing replays a dead letter (S8);
- the leases of instances that are gone are voided, never replayed (S9);
- the backlog is bounded by refusal, never by dropping (S10).

Delivery is at least once: a consumer that crashes after its external effect and before its
ack sees the signal again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import secrets
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from tidings.clock import Clock, to_us
from tidings.errors import (
    BacklogFullError,
    InvalidInputError,
    StaleLeaseError,
    StoreError,
    TidingsError,
)
from tidings.records.instances import Instance
from tidings.store import Row, Store, Tx, open_store
from tidings.support.policy import (
    backoff_us,
    check_id,
    check_signal_payload,
    check_slug,
    dead_letter_due,
    encode_json,
)
from tidings.types import (
    JSON,
    ConversationId,
    DeadLetter,
    Delivery,
    DeliveryId,
    EventId,
    Lease,
    OperationId,
    OutboxConfig,
    Published,
    QueueStats,
    Signal,
    SweepReport,
    new_id,
)

T = TypeVar("T")


def _delivery(row: Row) -> Delivery:
    return Delivery(
        delivery_id=DeliveryId(row["delivery_id"]), event_id=EventId(row["event_id"]),
        seq=row["seq"], queue_seq=row["queue_seq"], type=row["type"],
        operation_id=None if row["operation_id"] is None else OperationId(row["operation_id"]),
        conversation_id=ConversationId(row["conversation_id"]),
        payload=json.loads(row["payload"]), payload_bytes=row["payload_bytes"],
        schema_version=row["schema_version"], attempts=row["attempts"],
        published_at_us=row["published_at_us"],
    )


class Outbox:
    """The signal outbox over one store, acting for one instance.

    The instance's id fences the leases this outbox takes, and only while the instance runs
    may it claim; its clock and config are the outbox's.
    """

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock | None = None,
        config: OutboxConfig | None = None,
        rng: random.Random | None = None,
        instance: Instance | None = None,
    ) -> None:
        """``instance``: the instance this outbox acts for; by default a new one over ``store``
        with ``clock`` and ``config``, not yet started. Given an instance, give those to it."""
        if instance is None:
            instance = Instance(store, clock=clock, config=config)
        elif clock is not None or config is not None or instance.store is not store:
            raise ValueError("an outbox takes its store, clock and config from its instance")
        self.store = store
        self.instance = instance
        self.clock: Clock = instance.clock
        self.config = instance.config
        self._rng = rng or random.Random()

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls, url: str, *, store_options: dict[str, Any] | None = None, **options: Any
    ) -> AsyncIterator[Outbox]:
        """Open the database at ``url``, start an outbox's instance on it, and on exit retire
        the instance and close the database."""
        store = await open_store(url, **(store_options or {}))
        try:
            outbox = cls(store, **options)
            await outbox.instance.start()
            try:
                yield outbox
            finally:
                await outbox.instance.close()
        finally:
            await store.close()

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
            "publish", event_id=signal.event_id, type=signal.type,
            operation_id=signal.operation_id, conversation_id=conversation_id,
            idempotency_key=signal.idempotency_key, payload=signal.payload_text,
            payload_bytes=signal.payload_bytes, schema_version=signal.schema_version,
            backlog_limit=self.config.backlog_limit, now_us=self.clock.now_us(),
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
        self.instance.require_running()
        ttl = to_us(lease_ttl or self.config.lease_ttl)
        return await self.store.transact(
            lambda tx: self.claim_in(
                tx, conversation_id, max_count=max_count, max_bytes=max_bytes, owner=owner,
                deadline_us=self.clock.now_us() + ttl,
            ),
            route=conversation_id,
            durable=False,  # a lease lost to a power failure leaves its signals ready
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
        self.instance.require_running()
        check_id(conversation_id, "conversation id")
        count = self.config.claim_max_count if max_count is None else max_count
        size = self.config.claim_max_bytes if max_bytes is None else max_bytes
        if count < 1 or size < 1:
            raise InvalidInputError("max_count and max_bytes must be positive")
        token = secrets.token_hex(16)
        now = self.clock.now_us()
        instance_id = self.instance.instance_id
        rows = tx.all(
            "claim", conversation_id=conversation_id, token=token, deadline_us=deadline_us,
            now_us=now, instance_id=instance_id, owner=owner, max_count=count,
            max_bytes=size, max_attempts=self.config.max_attempts,
        )
        if rows and not rows[0]["leased"]:
            # Read, not leased yet (SQLite): cut to max_bytes in journal order, the first
            # always taken, then lease the batch by its sequence span.
            total = 0
            for n, row in enumerate(rows):
                total += row["payload_bytes"]
                if n and total > size:
                    del rows[n:]
                    break
            tx.run_later(
                "claim_lease", expect=len(rows), conversation_id=conversation_id, token=token,
                deadline_us=deadline_us, now_us=now, instance_id=instance_id, owner=owner,
                first_seq=rows[0]["queue_seq"], last_seq=rows[-1]["queue_seq"],
                max_attempts=self.config.max_attempts,
            )
        else:
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
        whole = delivery_ids is None
        ids = list(dict.fromkeys(lease.delivery_ids if delivery_ids is None else delivery_ids))
        if not ids:
            return
        held = lease.deliveries
        if not whole:
            wanted = set(ids)
            held = tuple(d for d in held if d.delivery_id in wanted)
            if len(held) != len(wanted):
                unknown = wanted - {d.delivery_id for d in held}
                raise InvalidInputError(f"deliveries {sorted(unknown)} are not in this lease")
            whole = len(held) == len(lease.deliveries)
        # All or nothing: one row changes at the end, or none when any of them is no longer
        # held by this unexpired token -- and then nothing changed at all.
        changed = tx.execute(
            "ack" if whole else "ack_listed",
            token=lease.token,
            conversation_id=lease.conversation_id,
            now_us=self.clock.now_us(),
            expected=len(held),
            first_seq=held[0].queue_seq,  # a lease is in journal order
            last_seq=held[-1].queue_seq,
            **({} if whole else {"delivery_ids": ids}),
        )
        if changed != 1:
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
        reconciled = await self.instance.reconcile()

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


__all__ = ("Outbox", "OutboxConfig", "SweepReport")
