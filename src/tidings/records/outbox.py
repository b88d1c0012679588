"""Signal events and deliveries: the durable signal outbox (SPEC S3-S12).

Transitions that must commit with the caller's own writes (``publish``, ``ack``) are plain
functions over a :class:`~tidings.store.Tx`: call them inside the caller's unit of work.
Transitions that stand alone (``claim``, ``extend``, ``release``, ``sweep``) are coroutines.
The outbox acts for one :class:`~tidings.records.instances.Instance`, whose id fences its
leases; operations (:mod:`.operations`) and instances (:mod:`.instances`) live apart. This
module publishes, sweeps and reports; the leases a consumer holds (claim, extend, ack, release,
consume) are :mod:`.leases`, which the outbox offers as its own methods.

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
import random
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Any

from tidings.clock import Clock, to_us
from tidings.errors import BacklogFullError, InvalidInputError
from tidings.records.instances import Instance
from tidings.records.leases import Leases
from tidings.store import Row, Store, Tx, open_store
from tidings.support.policy import check_id, check_signal_payload, check_slug, encode_json
from tidings.types import (
    JSON,
    ConversationId,
    DeadLetter,
    DeliveryId,
    EventId,
    OperationId,
    OutboxConfig,
    Published,
    QueueStats,
    Signal,
    SweepReport,
    new_id,
)


class Outbox(Leases):
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
        row = tx.one("publish", **self._publish_params(signal))
        if row is not None and row["outcome"] == "created":
            if row["backlog"] == 1:  # the queue was empty: consumers drain until a claim is empty
                self.store.wake(tx, conversation_id)
            return _created(row, conversation_id)
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

    async def publish_alone(self, signal: Signal) -> Published:
        """Publish a prepared signal in a transaction of its own, when nothing else has to
        commit with it: what ``store.transact(lambda tx: outbox.publish_signal(tx, signal))``
        does, with the same answers and errors.

        A signal without an idempotency key of the producer's is one statement that needs
        nothing after it -- no earlier event can hold its key, so no concurrent publisher can
        win it -- and PostgreSQL runs that statement in autocommit when its writer is free:
        one round trip instead of two. A signal with a key is published in a unit as usual.
        """
        conversation_id = signal.conversation_id
        if signal.idempotency_key != signal.event_id:  # the producer's key: it may repeat
            return await self.store.transact(
                lambda tx: self.publish_signal(tx, signal), route=conversation_id
            )
        rows = await self.store.transact_query(
            "publish", route=conversation_id, **self._publish_params(signal)
        )
        if not rows or rows[0]["outcome"] != "created":
            # No key to repeat, so nothing was admitted: the backlog is full.
            raise BacklogFullError(conversation_id, self.config.backlog_limit)
        if rows[0]["backlog"] == 1:  # the queue was empty: its consumers here are woken now
            self.store.wakeups.notify(conversation_id)
        return _created(rows[0], conversation_id)

    def _publish_params(self, signal: Signal) -> dict[str, Any]:
        return {
            "event_id": signal.event_id, "type": signal.type,
            "operation_id": signal.operation_id, "conversation_id": signal.conversation_id,
            "idempotency_key": signal.idempotency_key, "payload": signal.payload_text,
            "payload_bytes": signal.payload_bytes, "schema_version": signal.schema_version,
            "backlog_limit": self.config.backlog_limit, "now_us": self.clock.now_us(),
        }

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


def _created(row: Row, conversation_id: ConversationId) -> Published:
    return Published(
        EventId(row["event_id"]), row["seq"], DeliveryId(row["delivery_id"]), conversation_id,
        created=True,
    )


__all__ = ("Outbox", "OutboxConfig", "SweepReport")
