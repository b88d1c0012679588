"""The demo's short look underneath: the signal outbox's idempotency, fencing and dead letters.

It runs on a manual clock (a lease expires, a backoff passes, without waiting) as its own
instance on the same database, after the conversation's runtimes have closed.
"""

from __future__ import annotations

from datetime import timedelta

from rich.console import Console

from tidings.clock import ManualClock, SystemClock
from tidings.conversations.catalog import Conversations
from tidings.demo.checks import Check
from tidings.demo.script import OWNER, PROFILE
from tidings.errors import StaleLeaseError
from tidings.records.outbox import Outbox, OutboxConfig
from tidings.types import DeliveryId


async def outbox_tour(url: str, console: Console) -> list[Check]:
    """Publish twice under one key, ack under a stale lease, exhaust an attempt budget."""
    clock = ManualClock(SystemClock().now_us())
    config = OutboxConfig(max_attempts=3, lease_ttl=timedelta(seconds=30),
                          backoff_base=timedelta(seconds=1), backoff_cap=timedelta(seconds=4))
    checks: list[Check] = []
    async with Outbox.open(url, clock=clock, config=config) as outbox:
        conversations = Conversations(outbox.store, clock)
        steady = (await conversations.create(OWNER, PROFILE, title="outbox: a stalled worker")
                  ).conversation_id
        failing = (await conversations.create(OWNER, PROFILE, title="outbox: dead letter")
                   ).conversation_id

        first = await outbox.store.transact(lambda tx: outbox.publish(
            tx, steady, "job.finished", {"job": "nightly"}, idempotency_key="nightly-1"))
        again = await outbox.store.transact(lambda tx: outbox.publish(
            tx, steady, "job.finished", {"job": "nightly"}, idempotency_key="nightly-1"))
        same = not again.created and again.event_id == first.event_id
        made = "a second" if again.created else "no second"
        console.print(f"  an event published twice with the same key (nightly-1): {made} "
                      "event, one delivery -- the second publish returns the first")
        checks.append(Check("a repeated idempotency key publishes nothing new", same,
                            f"event {first.event_id} returned again, {made} event made"))

        stalled = await outbox.claim(steady, owner="run-1")
        clock.advance(config.lease_ttl + timedelta(seconds=1))
        current = await outbox.claim(steady, owner="run-2")
        await outbox.consume(current, lambda tx: None, failure_code="turn_failed")
        refused = ""
        try:
            await outbox.store.transact(lambda tx: outbox.ack(tx, stalled))
        except StaleLeaseError as exc:
            refused = exc.code
        console.print(f"  worker run-1 stalls past its lease; run-2 takes the delivery over and "
                      f"acknowledges it; run-1's late acknowledgement is "
                      f"{f'refused ({refused})' if refused else 'accepted (wrong)'}")
        checks.append(Check("a stalled worker's late acknowledgement is refused and changes "
                            "nothing", refused == "stale_lease",
                            f"refused with {refused or 'nothing'}; the new holder's stands"))

        await outbox.store.transact(lambda tx: outbox.publish(
            tx, failing, "job.finished", {"job": "report"}, idempotency_key="report-1"))
        states: dict[DeliveryId, str] = {}
        for attempt in range(config.max_attempts):
            lease = await outbox.claim(failing, owner=f"run-f{attempt}")
            states = await outbox.release(lease, "model_unavailable")
            clock.advance(config.backoff_cap + timedelta(seconds=1))
        letters = await outbox.dead_letters(failing)
        dead = set(states.values()) == {"dead_letter"}
        console.print(f"  a model that keeps failing: after {config.max_attempts} attempts, "
                      f"each after a longer wait, the delivery "
                      f"{'becomes a dead letter' if dead else 'is still tried (wrong)'} "
                      f"({len(letters)} kept for an operator to see, code "
                      f"{letters[0].failure_code if letters else '-'})")
        checks.append(Check("a delivery that keeps failing ends as a dead letter, kept in sight",
                            len(letters) == 1 and set(states.values()) == {"dead_letter"},
                            f"{len(letters)} dead letter(s) on {failing}"))
    return checks
