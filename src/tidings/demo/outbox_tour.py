"""The demo's short look underneath: the signal outbox's idempotency, fencing and dead letters.

It runs on a manual clock (a lease expires, a backoff passes, without waiting) as its own
instance on the same database, after the conversation's runtimes have closed.
"""

from __future__ import annotations

from datetime import timedelta

from rich.console import Console

from tidings.clock import ManualClock, SystemClock
from tidings.conversations import Conversations
from tidings.demo.checks import Check
from tidings.demo.script import OWNER, PROFILE
from tidings.errors import StaleLeaseError
from tidings.outbox import Outbox, OutboxConfig
from tidings.types import DeliveryId


async def outbox_tour(url: str, console: Console) -> list[Check]:
    """Publish twice under one key, ack under a stale lease, exhaust an attempt budget."""
    clock = ManualClock(SystemClock().now_us())
    config = OutboxConfig(max_attempts=3, lease_ttl=timedelta(seconds=30),
                          backoff_base=timedelta(seconds=1), backoff_cap=timedelta(seconds=4))
    checks: list[Check] = []
    async with Outbox.open(url, clock=clock, config=config) as outbox:
        conversations = Conversations(outbox.store, clock)
        steady = (await conversations.create(OWNER, PROFILE, title="outbox: fencing")
                  ).conversation_id
        failing = (await conversations.create(OWNER, PROFILE, title="outbox: dead letter")
                   ).conversation_id

        first = await outbox.store.transact(lambda tx: outbox.publish(
            tx, steady, "job.finished", {"job": "nightly"}, idempotency_key="nightly-1"))
        again = await outbox.store.transact(lambda tx: outbox.publish(
            tx, steady, "job.finished", {"job": "nightly"}, idempotency_key="nightly-1"))
        same = not again.created and again.event_id == first.event_id
        console.print(f"  publishing key nightly-1 twice returns the first event "
                      f"(created={again.created}), one delivery")
        checks.append(Check("a repeated idempotency key publishes nothing new", same,
                            f"event {first.event_id} returned again, created={again.created}"))

        stalled = await outbox.claim(steady, owner="run-1")
        clock.advance(config.lease_ttl + timedelta(seconds=1))
        current = await outbox.claim(steady, owner="run-2")
        await outbox.consume(current, lambda tx: None, failure_code="turn_failed")
        refused = ""
        try:
            await outbox.store.transact(lambda tx: outbox.ack(tx, stalled))
        except StaleLeaseError as exc:
            refused = exc.code
        console.print(f"  run-1 stalled past its lease; run-2 claimed and acked; run-1's late "
                      f"ack is refused: {refused or 'accepted (wrong)'}")
        checks.append(Check("a stale lease's ack is refused and changes nothing",
                            refused == "stale_lease",
                            f"error {refused or 'none'}; the current holder's ack stands"))

        await outbox.store.transact(lambda tx: outbox.publish(
            tx, failing, "job.finished", {"job": "report"}, idempotency_key="report-1"))
        states: dict[DeliveryId, str] = {}
        for attempt in range(config.max_attempts):
            lease = await outbox.claim(failing, owner=f"run-f{attempt}")
            states = await outbox.release(lease, "model_unavailable")
            clock.advance(config.backoff_cap + timedelta(seconds=1))
        letters = await outbox.dead_letters(failing)
        console.print(f"  a model that keeps failing: after {config.max_attempts} attempts "
                      f"with backoff the delivery is {sorted(set(states.values()))} — "
                      f"{len(letters)} dead letter, code "
                      f"{letters[0].failure_code if letters else '-'}, kept visible")
        checks.append(Check("a spent attempt budget ends in a visible dead letter",
                            len(letters) == 1 and set(states.values()) == {"dead_letter"},
                            f"{len(letters)} dead letter(s) on {failing}"))
    return checks
