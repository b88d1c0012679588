"""Real processes killed with SIGKILL at the worst instant, then a restart on the same database.

Each test runs a child process (``child.py``) that does outbox work and announces a
checkpoint; the parent kills it there -- no ``close()``, no ``finally`` -- and opens a new
outbox on the same database, as the next boot of the runtime would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio

from tests.conftest import Backend
from tests.crash.helpers import count_rows, spawn, wait_instance_released
from tidings import (
    Delivery,
    Lease,
    ManualClock,
    OperationSettledError,
    OperationState,
    Outbox,
    StaleLeaseError,
    Tx,
    open_store,
)
from tidings.records import operations
from tidings.types import ConversationId


def child_lease(fields: dict[str, Any]) -> Lease:
    """The lease a killed child held, rebuilt from its checkpoint line."""
    return Lease(
        fields["token"],
        ConversationId(fields["conversation_id"]),
        fields["deadline_us"],
        tuple(Delivery(**d) for d in fields["deliveries"]),
    )


async def publish_signals(url: str, clock: ManualClock, conversation_id: str, n: int) -> list[str]:
    """Publish ``n`` signals from a boot that then stops cleanly; their event ids."""
    async with Outbox.open(url, clock=clock) as ob:

        def unit(tx: Tx) -> list[str]:
            return [
                ob.publish(tx, conversation_id, "task.exited", {"task_key": f"t{i}"}).event_id
                for i in range(n)
            ]

        return await ob.store.transact(unit)


@pytest_asyncio.fixture
async def reboot() -> AsyncIterator[list[Outbox]]:
    """Outboxes a test boots by hand (to see ``start()``'s report); closed afterwards."""
    booted: list[Outbox] = []
    try:
        yield booted
    finally:
        for ob in booted:
            await ob.instance.close()
            await ob.store.close()


async def boot(backend: Backend, clock: ManualClock, booted: list[Outbox]) -> tuple[Outbox, Any]:
    store = await open_store(backend.url)
    ob = Outbox(store, clock=clock)
    booted.append(ob)
    report = await ob.instance.start()
    return ob, report


async def test_s3_s9_signal_committed_before_sigkill_is_claimable_once(
    backend: Backend, clock: ManualClock
) -> None:
    async with spawn("publish", backend.url, "conv-a", "exit-t1") as child:
        published = await child.checkpoint("committed")
        await child.kill()
    await wait_instance_released(backend.url, published["instance_id"])

    async with Outbox.open(backend.url, clock=clock) as ob:
        # The same key after the crash finds the committed event: no second one (S4).
        again = await ob.store.transact(
            lambda tx: ob.publish(
                tx, "conv-a", "task.exited", {"task_key": "t1"}, idempotency_key="exit-t1"
            )
        )
        assert not again.created
        assert again.event_id == published["event_id"]

        lease = await ob.claim("conv-a")
        assert [d.event_id for d in lease.deliveries] == [published["event_id"]]
        assert [d.delivery_id for d in lease.deliveries] == [published["delivery_id"]]
        assert lease.deliveries[0].attempts == 1
        assert (await ob.claim("conv-a")).deliveries == ()

        await ob.store.transact(lambda tx: ob.ack(tx, lease))
        clock.advance(timedelta(hours=1))  # past any lease deadline: still nothing to claim
        assert (await ob.claim("conv-a")).deliveries == ()
        stats = await ob.stats("conv-a")
        assert (stats.backlog, stats.dead_letters) == (0, 0)


async def test_s3_sigkill_before_commit_publishes_nothing(
    backend: Backend, clock: ManualClock
) -> None:
    async with spawn("publish_uncommitted", backend.url, "conv-a", "exit-t1") as child:
        uncommitted = await child.checkpoint("published_not_committed")
        await child.kill()
    await wait_instance_released(backend.url, uncommitted["instance_id"])

    async with Outbox.open(backend.url, clock=clock) as ob:
        assert (await ob.claim("conv-a")).deliveries == ()
        assert (await ob.stats("conv-a")).backlog == 0
        assert count_rows(backend.url, "signal_events") == 0
        # The key was never used: publishing it now creates the event for the first time.
        fresh = await ob.store.transact(
            lambda tx: ob.publish(
                tx, "conv-a", "task.exited", {"task_key": "t1"}, idempotency_key="exit-t1"
            )
        )
        assert fresh.created
        assert fresh.event_id != uncommitted["event_id"]
        assert fresh.seq >= 1


async def test_s9_interrupted_external_call_is_outcome_unknown_never_replayed(
    backend: Backend, clock: ManualClock, reboot: list[Outbox]
) -> None:
    async with spawn("accept", backend.url, "conv-a", "call-1") as child:
        accepted = await child.checkpoint("about_to_call_external_tool")
        await child.kill()
    await wait_instance_released(backend.url, accepted["instance_id"])
    operation_id = accepted["operation_id"]

    ob, report = await boot(backend, clock, reboot)
    assert report.gone_instances == (accepted["instance_id"],)
    assert report.operations_unknown == (operation_id,)
    assert ob.instance.instance_id != accepted["instance_id"]  # each boot has a new instance id

    operation = await operations.get(ob.store, operation_id)
    assert operation.state is OperationState.OUTCOME_UNKNOWN
    assert operation.origin_instance == accepted["instance_id"]
    assert operation.settled_at_us is not None

    # Nothing is replayed: no new operation, no signal, and a second pass finds nothing more.
    assert count_rows(backend.url, "operations") == 1
    assert count_rows(backend.url, "signal_events") == 0
    later = await ob.instance.reconcile()
    assert (later.gone_instances, later.operations_unknown) == ((), ())

    # A retry under the same key gets the unknown outcome back, not a fresh acceptance...
    retry = await ob.store.transact(
        lambda tx: operations.accept(
            tx, ob.instance, "tool.shell", "conv-a", idempotency_key="call-1"
        )
    )
    assert retry.operation_id == operation_id
    assert retry.state is OperationState.OUTCOME_UNKNOWN
    # ...and outcome_unknown is an answer that nothing overwrites.
    with pytest.raises(OperationSettledError):
        await ob.store.transact(
            lambda tx: operations.complete(tx, ob.instance, operation_id, {"exit": 0})
        )
    assert (await operations.get(ob.store, operation_id)).state is OperationState.OUTCOME_UNKNOWN


async def test_s6_s9_lease_of_killed_holder_is_voided_at_once(
    backend: Backend, clock: ManualClock, reboot: list[Outbox]
) -> None:
    # A running instance publishes; a second process claims and is killed while holding.
    ob, _ = await boot(backend, clock, reboot)
    event_ids = [
        p.event_id for p in await ob.store.transact(
            lambda tx: [ob.publish(tx, "conv-a", "task.exited", {"task_key": f"t{i}"})
                        for i in range(2)]
        )
    ]
    async with spawn("claim", backend.url, "conv-a") as child:
        held = await child.checkpoint("claimed")
        assert (await ob.instance.reconcile()).gone_instances == ()  # alive: its lease stands
        assert (await ob.claim("conv-a")).deliveries == ()
        await child.kill()
    await wait_instance_released(backend.url, held["instance_id"])
    dead = child_lease(held)
    assert [d.event_id for d in dead.deliveries] == event_ids

    # No clock advance: the lease is still far from its deadline, yet void at once.
    assert clock.now_us() < dead.deadline_us
    report = await ob.instance.reconcile()
    assert report.gone_instances == (held["instance_id"],)
    assert report.leases_invalidated == 2

    states = await ob.delivery_states(dead.delivery_ids)
    assert [(s["state"], s["attempts"], s["failure_code"]) for s in states] == [
        ("ready", 1, "instance_gone"), ("ready", 1, "instance_gone")
    ]

    # The dead holder's token can no longer act, and its attempts change nothing.
    with pytest.raises(StaleLeaseError):
        await ob.store.transact(lambda tx: ob.ack(tx, dead))
    with pytest.raises(StaleLeaseError):
        await ob.extend(dead)
    with pytest.raises(StaleLeaseError):
        await ob.release(dead, "holder_crashed")
    assert await ob.delivery_states(dead.delivery_ids) == states

    lease = await ob.claim("conv-a")
    assert [d.event_id for d in lease.deliveries] == event_ids  # redelivery keeps the event id
    assert [d.attempts for d in lease.deliveries] == [2, 2]  # the killed attempt counted
    assert lease.token != dead.token
    assert (await ob.stats("conv-a")).retried == 2

    with pytest.raises(StaleLeaseError):
        await ob.store.transact(lambda tx: ob.ack(tx, dead))
    await ob.store.transact(lambda tx: ob.ack(tx, lease))
    assert (await ob.stats("conv-a")).backlog == 0


async def test_s7_sigkill_between_claim_and_consume_redelivers(
    backend: Backend, clock: ManualClock, reboot: list[Outbox]
) -> None:
    event_ids = await publish_signals(backend.url, clock, "conv-a", 3)
    async with spawn("claim", backend.url, "conv-a") as child:
        held = await child.checkpoint("claimed")
        await child.kill()
    await wait_instance_released(backend.url, held["instance_id"])

    ob, _ = await boot(backend, clock, reboot)
    states = await ob.delivery_states(child_lease(held).delivery_ids)
    assert {s["state"] for s in states} == {"ready"}  # claimed is not acknowledged

    lease = await ob.claim("conv-a")
    assert [d.event_id for d in lease.deliveries] == event_ids
    turn = await ob.consume(
        lease,
        lambda tx: ob.publish(tx, "transcript", "turn.completed", {"run": "run-2"}),
        failure_code="turn_failed",
    )
    assert turn.created
    after = await ob.delivery_states(lease.delivery_ids)
    assert {s["state"] for s in after} == {"acknowledged"}


async def test_s7_sigkill_inside_consumer_unit_commits_neither_turn_nor_ack(
    backend: Backend, clock: ManualClock, reboot: list[Outbox]
) -> None:
    event_ids = await publish_signals(backend.url, clock, "conv-a", 2)
    async with spawn("consume", backend.url, "conv-a", "transcript") as child:
        dying = await child.checkpoint("acked_not_committed")
        await child.kill()
    await wait_instance_released(backend.url, dying["instance_id"])
    dead = child_lease(dying)

    ob, report = await boot(backend, clock, reboot)
    assert report.leases_invalidated == 2  # the claim had committed; the ack had not

    states = await ob.delivery_states(dead.delivery_ids)
    assert [(s["state"], s["attempts"]) for s in states] == [("ready", 1), ("ready", 1)]
    assert (await ob.stats("transcript")).backlog == 0  # the turn's write is gone as well
    assert count_rows(backend.url, "signal_events", "conversation_id = 'transcript'") == 0

    lease = await ob.claim("conv-a")
    assert [d.event_id for d in lease.deliveries] == event_ids
    assert [d.attempts for d in lease.deliveries] == [2, 2]
    turn = await ob.consume(
        lease,
        lambda tx: ob.publish(
            tx, "transcript", "turn.completed", {"run": "run-2"}, idempotency_key="turn-1"
        ),
        failure_code="turn_failed",
    )
    assert turn.created  # the dead turn's key was never committed
    assert (await ob.stats("conv-a")).backlog == 0
    assert {s["state"] for s in await ob.delivery_states(lease.delivery_ids)} == {"acknowledged"}
