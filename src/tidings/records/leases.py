"""Leases on signal deliveries: claim, extend, acknowledge, release (SPEC S5-S8).

The half of the outbox a consumer holds: :class:`~tidings.records.outbox.Outbox` offers these
as its own methods. ``claim_in``, ``ack`` and ``release_in`` are plain functions over a
:class:`~tidings.store.Tx` (call them inside the caller's unit of work); ``claim``, ``extend``,
``release`` and ``consume`` are coroutines that stand alone.

- a claim is scoped to one conversation, bounded in count and bytes, in journal order (S5);
- only the current unexpired lease token may extend, acknowledge or release (S6);
- an ack commits with the consumer's writes, or not at all (S7);
- a failed attempt backs off with jitter; a permanent failure or exhausted budget dead-letters
  with a code, and nothing replays a dead letter (S8).

Delivery is at least once: a consumer that crashes after its external effect and before its
ack sees the signal again.
"""

from __future__ import annotations

import contextlib
import json
import random
import secrets
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from tidings.clock import Clock, to_us
from tidings.errors import InvalidInputError, StaleLeaseError, StoreError, TidingsError
from tidings.records.instances import Instance
from tidings.store import Row, Store, Tx
from tidings.support.policy import backoff_us, check_id, check_slug, dead_letter_due
from tidings.types import (
    ConversationId,
    Delivery,
    DeliveryId,
    EventId,
    Lease,
    OperationId,
    OutboxConfig,
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


def _lease(params: dict[str, Any], rows: list[Row]) -> Lease:
    """The lease a claim took: its rows in journal order (a statement that leases returns
    them in any order)."""
    rows.sort(key=lambda r: r["queue_seq"])
    return Lease(params["token"], ConversationId(params["conversation_id"]),
                 params["deadline_us"], tuple(_delivery(r) for r in rows))


class Leases:
    """Claim, extend, acknowledge and release the deliveries of the outbox's instance.

    Its leases are fenced by the instance's id, and only while the instance runs may it claim.
    """

    store: Store
    instance: Instance
    clock: Clock
    config: OutboxConfig
    _rng: random.Random

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
        deadline_us = self.clock.now_us() + ttl
        if self.store.claims_in_one_statement:
            # The dialect's claim leases in its one statement: run alone, it is one round trip.
            params = self._claim_params(conversation_id, deadline_us, max_count, max_bytes, owner)
            rows = await self.store.transact_query(
                "claim", route=conversation_id, durable=False, **params
            )
            return _lease(params, rows)
        return await self.store.transact(
            lambda tx: self.claim_in(
                tx, conversation_id, max_count=max_count, max_bytes=max_bytes, owner=owner,
                deadline_us=deadline_us,
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
        params = self._claim_params(conversation_id, deadline_us, max_count, max_bytes, owner)
        rows = tx.all("claim", **params)
        if rows and not rows[0]["leased"]:
            # Read, not leased yet (SQLite): cut to max_bytes in journal order, the first
            # always taken, then lease the batch by its sequence span.
            total = 0
            for n, row in enumerate(rows):
                total += row["payload_bytes"]
                if n and total > params["max_bytes"]:
                    del rows[n:]
                    break
            tx.run_later(
                "claim_lease", expect=len(rows), conversation_id=conversation_id,
                token=params["token"], deadline_us=deadline_us, now_us=params["now_us"],
                instance_id=params["instance_id"], owner=owner,
                first_seq=rows[0]["queue_seq"], last_seq=rows[-1]["queue_seq"],
                max_attempts=self.config.max_attempts,
            )
        return _lease(params, rows)

    def _claim_params(
        self, conversation_id: str, deadline_us: int, max_count: int | None,
        max_bytes: int | None, owner: str | None,
    ) -> dict[str, Any]:
        """The ``claim`` query's parameters, checked, with a fresh lease token."""
        check_id(conversation_id, "conversation id")
        count = self.config.claim_max_count if max_count is None else max_count
        size = self.config.claim_max_bytes if max_bytes is None else max_bytes
        if count < 1 or size < 1:
            raise InvalidInputError("max_count and max_bytes must be positive")
        return {
            "conversation_id": conversation_id, "token": secrets.token_hex(16),
            "deadline_us": deadline_us, "now_us": self.clock.now_us(),
            "instance_id": self.instance.instance_id, "owner": owner, "max_count": count,
            "max_bytes": size, "max_attempts": self.config.max_attempts,
        }

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
        self._ack(tx, lease, delivery_ids, at_once=True)

    def ack_later(self, tx: Tx, lease: Lease) -> None:
        """:meth:`ack` of the whole lease, for a unit that lets a stale lease fail it: the
        :class:`StaleLeaseError` may come when the unit ends rather than here, so the ack can
        travel with the unit's later statements and waits for no answer of its own."""
        self._ack(tx, lease, None, at_once=False)

    def _ack(
        self, tx: Tx, lease: Lease, delivery_ids: Sequence[int] | None, *, at_once: bool
    ) -> None:
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
        params = {
            "token": lease.token,
            "conversation_id": lease.conversation_id,
            "now_us": self.clock.now_us(),
            "expected": len(held),
            "first_seq": held[0].queue_seq,  # a lease is in journal order
            "last_seq": held[-1].queue_seq,
            **({} if whole else {"delivery_ids": ids}),
        }
        query = "ack" if whole else "ack_listed"
        if not at_once:
            tx.run_later(query, expect=1, mismatch=lambda: StaleLeaseError(lease.token, ids),
                         **params)
        elif tx.execute(query, **params) != 1:
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
            self.ack_later(tx, lease)
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


__all__ = ("Leases",)
