"""An operator's hand on dead letters: inspect one, retry it, or discard it.

Nothing replays a dead letter by itself (S8); these are the only ways one leaves that state,
and each is an operator's deliberate act:

- **retry** makes it ready again, with a fresh budget of attempts, at its place in its
  conversation's queue, and wakes the conversation. It counts against the backlog bound again:
  a full backlog refuses the retry (:class:`BacklogFullError`) and changes nothing (S10);
- **discard** settles it without delivering it (acknowledged, ``failure_code`` ``discarded``);
  it is purged with the acknowledged deliveries past retention.

A delivery that is no dead letter (any more) is refused with :class:`NotDeadLetterError`, so a
repeated retry or discard changes nothing; an unknown id is :class:`UnknownDeadLetterError`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tidings.clock import Clock
from tidings.errors import BacklogFullError, NotDeadLetterError, UnknownDeadLetterError
from tidings.store import Row, Store, Tx
from tidings.support.policy import MAX_INT64
from tidings.types import JSON, ConversationId, DeadLetter, DeliveryId, EventId, OutboxConfig

DISCARDED = "discarded"
"""The failure code a discarded dead letter is settled with."""


@dataclass(frozen=True, slots=True)
class DeadLetterDetail(DeadLetter):
    """A dead letter with what its signal carried: an operator's inspection of it."""

    payload: JSON
    payload_bytes: int
    schema_version: int
    operation_id: str | None
    last_lease_owner: str | None
    """The run that held it last, when one did."""


@dataclass(frozen=True, slots=True)
class Settled:
    """What a retry or a discard did to one dead letter."""

    delivery_id: DeliveryId
    conversation_id: ConversationId
    state: str
    """``ready`` after a retry, ``acknowledged`` after a discard."""


def _check(delivery_id: int) -> int:
    if isinstance(delivery_id, bool) or not isinstance(delivery_id, int) or not (
        1 <= delivery_id <= MAX_INT64
    ):
        raise UnknownDeadLetterError(delivery_id)
    return delivery_id


def _refuse(tx: Tx, delivery_id: int) -> NotDeadLetterError | UnknownDeadLetterError:
    row = tx.one("delivery_state", delivery_id=delivery_id)
    if row is None:
        return UnknownDeadLetterError(delivery_id)
    return NotDeadLetterError(delivery_id, str(row["state"]))


def _detail(row: Row) -> DeadLetterDetail:
    return DeadLetterDetail(
        DeliveryId(row["delivery_id"]), EventId(row["event_id"]),
        ConversationId(row["conversation_id"]), row["type"], int(row["attempts"]),
        row["failure_code"] or "", int(row["published_at_us"]), int(row["settled_at_us"] or 0),
        json.loads(row["payload"]), int(row["payload_bytes"]), int(row["schema_version"]),
        row["operation_id"], row["lease_owner"],
    )


class DeadLetters:
    """Inspect, retry and discard dead letters, one at a time, each in a unit of its own."""

    def __init__(self, store: Store, clock: Clock, config: OutboxConfig) -> None:
        self.store = store
        self.clock = clock
        self.config = config

    async def get(self, delivery_id: int) -> DeadLetterDetail:
        """The dead letter with its payload; one that is not (any more) a dead letter is
        unknown here."""
        _check(delivery_id)
        row = await self.store.read(lambda tx: tx.one("dead_letter", delivery_id=delivery_id))
        if row is None or row["state"] != "dead_letter":
            raise UnknownDeadLetterError(delivery_id)
        return _detail(row)

    async def retry(self, delivery_id: int) -> Settled:
        """Make the dead letter ready again, with a fresh budget, and wake its conversation."""
        _check(delivery_id)

        def unit(tx: Tx) -> Settled:
            row = tx.one("dead_letter_retry", delivery_id=delivery_id,
                         now_us=self.clock.now_us())
            if row is None:
                raise _refuse(tx, delivery_id)
            conversation_id = ConversationId(row["conversation_id"])
            admitted = tx.one("dead_letter_requeued", conversation_id=conversation_id,
                              queue_seq=int(row["queue_seq"]),
                              backlog_limit=self.config.backlog_limit)
            if admitted is None:  # the unit rolls back: the letter stays dead
                raise BacklogFullError(conversation_id, self.config.backlog_limit)
            self.store.wake(tx, conversation_id)
            return Settled(DeliveryId(delivery_id), conversation_id, "ready")

        return await self.store.transact(unit)

    async def discard(self, delivery_id: int) -> Settled:
        """Settle the dead letter without delivering it."""
        _check(delivery_id)

        def unit(tx: Tx) -> Settled:
            row = tx.one("dead_letter_discard", delivery_id=delivery_id,
                         now_us=self.clock.now_us(), failure_code=DISCARDED)
            if row is None:
                raise _refuse(tx, delivery_id)
            conversation_id = ConversationId(row["conversation_id"])
            tx.execute("dead_letter_discarded", conversation_id=conversation_id)
            return Settled(DeliveryId(delivery_id), conversation_id, "acknowledged")

        return await self.store.transact(unit)


__all__ = ("DISCARDED", "DeadLetterDetail", "DeadLetters", "Settled")
