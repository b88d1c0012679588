"""Push deliveries: the durable journal of the notifications owed to each webhook.

A delivery is written by the engine (the trigger of migration 0019) in the very transaction
that journals the state change it announces -- a run's ``turn_status``, a question asked of a
person, an input cancelled -- once per config of each task the event concerns. So publication
commits or rolls back with the state (S3), and no process, crash or restart can leave a
committed change unannounced. From there the guarantees are the outbox's, kept for another
kind of recipient (an HTTP endpoint, not a conversation's turn):

- a claim leases the *head* of each config's queue only: a config is sent its notifications in
  journal order, one at a time (a later one waits while an earlier one backs off);
- a lease has a fresh random token and a deadline; only that token settles the attempt, and a
  lease whose holder died is claimable again after its deadline (at least once);
- a failed attempt goes back to ready after a bounded exponential backoff with jitter
  (:func:`~tidings.support.policy.backoff_us`); a permanent failure or a spent budget makes it
  a dead letter, with a non-sensitive code, and nothing replays it (S8);
- deleting a config deletes its pending deliveries in the same unit, and a claim joins the
  config, so a deleted config is sent nothing more.
"""

from __future__ import annotations

import json
import random
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from tidings.clock import Clock, to_us
from tidings.errors import InvalidInputError
from tidings.store import Row, Store, Tx
from tidings.support.policy import backoff_us, check_slug, dead_letter_due


@dataclass(frozen=True, slots=True)
class PushDeliveryConfig:
    """Bounds and timings of webhook deliveries; every duration carries its unit."""

    max_attempts: int = 8
    backoff_base: timedelta = timedelta(seconds=1)
    backoff_cap: timedelta = timedelta(minutes=5)
    attempt_timeout: timedelta = timedelta(seconds=10)
    """One POST, connection to answer."""
    lease_margin: timedelta = timedelta(seconds=5)
    """A lease lasts one attempt's timeout and this: it outlives the attempt it covers, and a
    process killed in the middle of an attempt delays the notification by no more."""
    claim_max_count: int = 64
    poll: timedelta = timedelta(seconds=1)
    """How often the worker looks by itself (a commit of this process, or a journal hint of
    another one, wakes it at once)."""
    retention: timedelta = timedelta(days=1)
    allow_private: bool = False
    """Whether webhooks may target loopback, private and link-local addresses (tests, a
    private network the operator trusts)."""


@dataclass(frozen=True, slots=True)
class PushDelivery:
    """One notification owed to one config, as claimed: what to send and where."""

    delivery_id: int
    task_id: str
    owner: str
    config_id: str
    conversation_id: str
    event_seq: int
    event_type: str
    run_id: str | None
    data: dict[str, Any]
    attempts: int
    published_at_us: int
    token: str
    """The lease token: only it settles this attempt."""

    @property
    def notification_id(self) -> str:
        """The stable id of this notification, the same on every attempt (the receiver's
        dedupe key): the task and the journal position of the change."""
        return f"{self.task_id}.{self.event_seq}"


@dataclass(frozen=True, slots=True)
class PushDeadLetter:
    """A notification that failed for good; it stays until an operator acts."""

    delivery_id: int
    task_id: str
    owner: str
    config_id: str
    conversation_id: str
    event_seq: int
    event_type: str
    attempts: int
    failure_code: str
    published_at_us: int
    settled_at_us: int


@dataclass(frozen=True, slots=True)
class PushStats:
    pending: int
    leased: int
    delivered: int
    dead_letters: int
    oldest_pending_us: int | None


def _delivery(row: Row) -> PushDelivery:
    return PushDelivery(
        delivery_id=int(row["delivery_id"]), task_id=str(row["task_id"]),
        owner=str(row["owner"]), config_id=str(row["config_id"]),
        conversation_id=str(row["conversation_id"]), event_seq=int(row["event_seq"]),
        event_type=str(row["event_type"]), run_id=row["run_id"], data=json.loads(row["data"]),
        attempts=int(row["attempts"]), published_at_us=int(row["published_at_us"]),
        token=str(row["lease_token"]),
    )


class PushDeliveries:
    """Claim, settle and inspect push deliveries (see the module docstring)."""

    def __init__(self, store: Store, clock: Clock, config: PushDeliveryConfig,
                 rng: random.Random | None = None) -> None:
        self.store = store
        self.clock = clock
        self.config = config
        self._rng = rng or random.Random()

    async def claim(self, limit: int | None = None) -> tuple[list[PushDelivery], list[Row]]:
        """Lease the due heads of the configs' queues; with them, their configs' rows."""
        token = secrets.token_hex(16)
        now = self.clock.now_us()

        def unit(tx: Tx) -> tuple[list[PushDelivery], list[Row]]:
            rows = tx.all("claim_push_deliveries", token=token, now_us=now,
                          deadline_us=now + to_us(self.config.attempt_timeout
                                                  + self.config.lease_margin),
                          limit=limit or self.config.claim_max_count)
            if not rows:
                return [], []
            return ([_delivery(r) for r in sorted(rows, key=lambda r: r["delivery_id"])],
                    tx.all("push_targets", token=token))

        # Not durable (Store.transact): a lease a power failure loses leaves the notification
        # ready, as before the claim.
        return await self.store.transact(unit, durable=False)

    async def ack(self, delivery: PushDelivery) -> bool:
        """The receiver has it. False: the lease was lost (its config deleted, or it expired
        and another attempt took it) -- nothing changed."""
        now = self.clock.now_us()
        # Not durable: an ack a power failure loses sends the notification once more, which
        # at least once allows (its id is the same: the receiver's dedupe drops it).
        rows = await self.store.transact(lambda tx: tx.all(
            "ack_push_delivery", delivery_id=delivery.delivery_id, token=delivery.token,
            now_us=now), durable=False)
        return bool(rows)

    async def release(self, delivery: PushDelivery, failure_code: str, *,
                      permanent: bool = False) -> str | None:
        """A failed attempt: ``ready`` again after its backoff, or ``dead_letter``. None: the
        lease was lost, nothing changed."""
        check_slug(failure_code, "failure code")
        cfg = self.config
        dead = dead_letter_due(delivery.attempts, max_attempts=cfg.max_attempts,
                               permanent=permanent)
        now = self.clock.now_us()
        delay = backoff_us(delivery.attempts, self._rng, base=cfg.backoff_base,
                           cap=cfg.backoff_cap)
        rows = await self.store.transact(lambda tx: tx.all(
            "release_push_delivery", delivery_id=delivery.delivery_id, token=delivery.token,
            state="dead_letter" if dead else "ready", claimable_at_us=now + delay,
            failure_code=failure_code, now_us=now))
        return str(rows[0]["state"]) if rows else None

    async def watched_conversations(self) -> frozenset[str]:
        """The conversations that have a push config: only their commits can owe a
        notification (the publishing trigger writes for a conversation's configs alone)."""
        rows = await self.store.read(lambda tx: tx.all("push_watched_conversations"))
        return frozenset(str(r["conversation_id"]) for r in rows)

    async def next_due_us(self) -> int | None:
        row = await self.store.read(lambda tx: tx.one("next_push_due"))
        return None if row is None or row["due"] is None else int(row["due"])

    async def dead_letters(self, *, after: int = 0, limit: int = 100) -> list[PushDeadLetter]:
        """Dead letters, oldest first, after the id ``after``. Nothing replays them."""
        if not 1 <= limit <= 1_000:
            raise InvalidInputError("limit must be between 1 and 1000")
        rows = await self.store.read(lambda tx: tx.all("push_dead_letters", after=after,
                                                       limit=limit))
        return [PushDeadLetter(
            int(r["delivery_id"]), str(r["task_id"]), str(r["owner"]), str(r["config_id"]),
            str(r["conversation_id"]), int(r["event_seq"]), str(r["event_type"]),
            int(r["attempts"]), str(r["failure_code"] or ""), int(r["published_at_us"]),
            int(r["settled_at_us"] or 0)) for r in rows]

    async def stats(self) -> PushStats:
        row = await self.store.read(lambda tx: tx.one("push_stats"))
        assert row is not None
        oldest = row["oldest_pending_us"]
        return PushStats(int(row["pending"] or 0), int(row["leased"] or 0),
                         int(row["delivered"] or 0), int(row["dead_letters"] or 0),
                         None if oldest is None else int(oldest))

    async def purge(self) -> int:
        """Forget delivered notifications past retention."""
        before = self.clock.now_us() - to_us(self.config.retention)
        return int(await self.store.transact(lambda tx: tx.execute(
            "purge_push_delivered", before_us=before, limit=1_000)))

    async def of_task(self, task_id: str) -> list[Row]:
        """A task's deliveries in their raw state (diagnostics and tests)."""
        return await self.store.read(lambda tx: tx.all("push_deliveries_of_task",
                                                       task_id=task_id))


__all__ = (
    "PushDeadLetter",
    "PushDeliveries",
    "PushDelivery",
    "PushDeliveryConfig",
    "PushStats",
)
