"""S3-S11: the signal outbox, on SQLite and on PostgreSQL.

Every test runs on both backends through the ``outbox`` / ``backend`` fixtures, on a manual
clock: deadlines, backoff and retention are crossed by advancing the clock, never by sleeping.
They follow the reference design's verification list: transaction rollback, duplicate
publication, isolation of recipients, ordered bounded batches, stale-lease acknowledgment,
expiry and reclaim, failure before the consumer's commit, dead-letter escalation, restart
recovery, admission and retention.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest

from tests.conftest import Backend, drop_postgres_database, fresh_postgres_database
from tidings import (
    BacklogFullError,
    InstanceNotRunningError,
    InvalidInputError,
    Lease,
    ManualClock,
    Operation,
    OperationSettledError,
    OperationState,
    Outbox,
    OutboxConfig,
    PayloadTooLargeError,
    Published,
    SqliteStore,
    StaleLeaseError,
    Tx,
    UnknownOperationError,
    open_store,
)
from tidings.clock import to_us
from tidings.records import operations
from tidings.store import Row
from tidings.store.postgres import PostgresStore

CONV = "conv-a"
OTHER = "conv-b"
TTL = OutboxConfig().lease_ttl
US = timedelta(microseconds=1)


class Boom(Exception):
    """A consumer's or producer's own failure inside a unit of work."""


# -- helpers -------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def opened(backend: Backend, clock: ManualClock, **config: Any) -> AsyncIterator[Outbox]:
    """An outbox on the test's database with some bounds changed."""
    async with Outbox.open(backend.url, clock=clock, config=OutboxConfig(**config)) as ob:
        yield ob


async def publish(
    ob: Outbox,
    conversation_id: str = CONV,
    payload: Any = None,
    *,
    type: str = "task.exited",
    key: str | None = None,
    operation_id: str | None = None,
) -> Published:
    body = {"task_key": "t1"} if payload is None else payload
    return await ob.store.transact(
        lambda tx: ob.publish(
            tx, conversation_id, type, body, idempotency_key=key, operation_id=operation_id
        )
    )


async def ack(ob: Outbox, lease: Lease, ids: Sequence[int] | None = None) -> None:
    await ob.store.transact(lambda tx: ob.ack(tx, lease, ids))


async def states(ob: Outbox, ids: Sequence[int]) -> dict[int, Row]:
    return {int(r["delivery_id"]): r for r in await ob.delivery_states(ids)}


async def accept(ob: Outbox, kind: str = "restart", owner: str = CONV, **kw: Any) -> Operation:
    return await ob.store.transact(lambda tx: operations.accept(tx, ob.instance, kind, owner, **kw))


async def exists(ob: Outbox, operation_id: str) -> bool:
    try:
        await operations.get(ob.store, operation_id)
    except UnknownOperationError:
        return False
    return True


def consumer_write(ob: Outbox, tx: Tx, written: list[str]) -> None:
    """What a consumer commits with its ack: here, an accepted operation and a signal."""
    written.append(operations.accept(tx, ob.instance, "turn", "transcript-owner").operation_id)
    ob.publish(tx, "conv-transcript", "turn.committed", {"turn": 1})


async def consumer_write_landed(ob: Outbox, written: list[str]) -> bool:
    signal_landed = (await ob.stats("conv-transcript")).backlog > 0
    op_landed = {await exists(ob, op) for op in written}
    assert op_landed == {signal_landed}  # all of the unit's writes, or none of them
    return signal_landed


# -- S3 transactional publication ----------------------------------------------------------------


async def test_s3_rollback_publishes_nothing(outbox: Outbox) -> None:
    ob = outbox
    seen: list[Published] = []
    ops: list[str] = []

    def unit(tx: Tx) -> None:
        op = operations.accept(tx, ob.instance, "restart", CONV)
        ops.append(op.operation_id)
        seen.append(ob.publish(tx, CONV, "restart.accepted", {"n": 1},
                               operation_id=op.operation_id))
        raise Boom

    with pytest.raises(Boom):
        await ob.store.transact(unit)

    assert len(seen) == 1
    assert (await ob.claim(CONV)).deliveries == ()
    stats = await ob.stats(CONV)
    assert (stats.backlog, stats.ready, stats.leased) == (0, 0, 0)
    assert await ob.delivery_states([seen[0].delivery_id]) == []
    assert not await exists(ob, ops[0])  # the operation accepted in the same unit is gone too

    # The rolled-back admission left no trace: the next signal is the only one.
    after = await publish(ob)
    lease = await ob.claim(CONV)
    assert [d.event_id for d in lease.deliveries] == [after.event_id]


async def test_s3_publication_commits_with_domain_change_and_is_not_ack(
    outbox: Outbox, clock: ManualClock
) -> None:
    ob = outbox

    def unit(tx: Tx) -> tuple[Operation, Published]:
        op = operations.accept(tx, ob.instance, "restart", CONV)
        return op, ob.publish(tx, CONV, "restart.accepted", {"phase": "accepted"},
                              operation_id=op.operation_id)

    op, published = await ob.store.transact(unit)
    assert published.created
    assert published.conversation_id == CONV
    assert (await operations.get(ob.store, op.operation_id)).state is OperationState.ACCEPTED

    # Published, not acknowledged: it waits, ready, for its consumer.
    state = (await states(ob, [published.delivery_id]))[published.delivery_id]
    assert (state["state"], state["attempts"]) == ("ready", 0)
    assert (await ob.stats(CONV)).backlog == 1

    lease = await ob.claim(CONV)
    (delivery,) = lease.deliveries
    assert delivery.event_id == published.event_id
    assert delivery.delivery_id == published.delivery_id
    assert delivery.operation_id == op.operation_id
    assert delivery.type == "restart.accepted"
    assert delivery.payload == {"phase": "accepted"}
    assert delivery.schema_version == 1
    assert delivery.published_at_us == clock.now_us()


async def test_s3_failing_units_roll_back_alone_among_concurrent_units(outbox: Outbox) -> None:
    """Group commit: of many units in flight at once, each failure rolls back alone."""
    ob = outbox
    sqlite = ob.store if isinstance(ob.store, SqliteStore) else None
    groups_before = sqlite.groups_committed if sqlite else 0

    def unit(i: int) -> Callable[[Tx], int]:
        def run(tx: Tx) -> int:
            ob.publish(tx, CONV, "unit.done", {"i": i}, idempotency_key=f"unit-{i}")
            if i % 4 == 0:
                raise Boom(i)
            return i

        return run

    n = 40
    results = await asyncio.gather(*(ob.store.transact(unit(i)) for i in range(n)),
                                   return_exceptions=True)
    groups = (sqlite.groups_committed - groups_before) if sqlite else 0

    failed = {i for i in range(n) if i % 4 == 0}
    for i, result in enumerate(results):
        if i in failed:
            assert isinstance(result, Boom)
        else:
            assert result == i
    lease = await ob.claim(CONV, max_count=n)
    assert sorted(d.payload["i"] for d in lease.deliveries) == sorted(set(range(n)) - failed)
    assert (await ob.stats(CONV)).backlog == n - len(failed)
    if sqlite is not None:
        # Units made ready together share one transaction: one commit for all forty.
        assert groups == 1


async def test_s3_event_loop_stays_responsive_while_the_writer_waits(outbox: Outbox) -> None:
    """A unit that cannot go on yet (SQLite: another connection holds the write lock;
    PostgreSQL: the unit itself waits on its writer's thread) leaves the event loop free:
    timers fire and reads answer meanwhile, and the unit commits afterwards."""
    ob = outbox
    await publish(ob)
    gate = threading.Event()
    ticks = 0
    holder: sqlite3.Connection | None = None
    if isinstance(ob.store, SqliteStore):
        holder = sqlite3.connect(ob.store.path, isolation_level=None, timeout=0)
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the database

    async def ticker() -> None:
        nonlocal ticks
        while ticks < 10:
            await asyncio.sleep(0.001)
            # Reads are not blocked by the open write transaction either.
            assert (await ob.stats(CONV)).backlog == 1
            ticks += 1
        gate.set()
        if holder is not None:
            holder.execute("ROLLBACK")

    def slow(tx: Tx) -> int:
        if holder is None:
            assert gate.wait(timeout=10), "the event loop stalled while a unit ran"
        ob.publish(tx, CONV, "unit.slow", {})
        return ticks

    try:
        ticked_during_unit, _ = await asyncio.gather(ob.store.transact(slow), ticker())
    finally:
        if holder is not None:
            holder.close()
    assert ticked_during_unit == 10
    assert (await ob.stats(CONV)).backlog == 2


async def test_s3_publish_wakes_subscribers_after_commit(outbox: Outbox) -> None:
    ob = outbox
    async with ob.wakeups() as wakeups:
        def rolled_back(tx: Tx) -> None:
            ob.publish(tx, "conv-rolled-back", "task.exited", {})
            raise Boom

        with pytest.raises(Boom):
            await ob.store.transact(rolled_back)
        await publish(ob, CONV)
        seen: list[str] = []
        while CONV not in seen:
            seen.append(await asyncio.wait_for(wakeups.get(), timeout=10))
    assert "conv-rolled-back" not in seen


async def test_s3_a_signal_published_alone_is_claimed_as_one_published_in_a_unit(
    outbox: Outbox,
) -> None:
    """A lone publish (one statement in autocommit on PostgreSQL) writes what a unit's does:
    the event, its delivery, the backlog, the subscribers' wake-up -- and answers the same."""
    ob = outbox
    async with ob.wakeups() as wakeups:
        alone = await ob.publish_alone(ob.signal(CONV, "task.exited", {"n": 1}))
        woken = await asyncio.wait_for(wakeups.get(), timeout=10)
    assert woken == CONV  # the queue was empty
    in_unit = await publish(ob, payload={"n": 2})
    assert alone.created
    assert in_unit.created
    assert alone.seq < in_unit.seq
    assert (await ob.stats(CONV)).backlog == 2
    lease = await ob.claim(CONV)
    assert [(d.event_id, d.delivery_id, d.payload) for d in lease.deliveries] == [
        (alone.event_id, alone.delivery_id, {"n": 1}),
        (in_unit.event_id, in_unit.delivery_id, {"n": 2}),
    ]
    await ack(ob, lease)
    assert (await ob.stats(CONV)).backlog == 0


async def test_s4_s10_a_signal_published_alone_keeps_its_key_and_the_bound(
    backend: Backend, clock: ManualClock
) -> None:
    async with opened(backend, clock, backlog_limit=2) as ob:
        keyed = [ob.signal(CONV, "task.exited", {"n": n}, idempotency_key="k") for n in (1, 9)]
        first = await ob.publish_alone(keyed[0])
        again = await ob.publish_alone(keyed[1])
        assert first.created
        assert not again.created
        assert (again.event_id, again.delivery_id) == (first.event_id, first.delivery_id)
        await ob.publish_alone(ob.signal(CONV, "task.exited", {"n": 2}))
        with pytest.raises(BacklogFullError):
            await ob.publish_alone(ob.signal(CONV, "task.exited", {"n": 3}))
        assert (await ob.stats(CONV)).backlog == 2  # the refused one wrote nothing
        lease = await ob.claim(CONV)
        assert [d.payload for d in lease.deliveries] == [{"n": 1}, {"n": 2}]


async def test_s3_signals_published_alone_at_once_each_publish_once(outbox: Outbox) -> None:
    """Many lone publishes at once (the writer groups them then) lose and repeat nothing."""
    ob = outbox
    published = await asyncio.gather(
        *(ob.publish_alone(ob.signal(CONV, "task.exited", {"n": n})) for n in range(40))
    )
    assert all(p.created for p in published)
    assert len({p.delivery_id for p in published}) == 40
    lease = await ob.claim(CONV, max_count=100)
    assert sorted(d.payload["n"] for d in lease.deliveries) == list(range(40))


# -- S4 idempotency ------------------------------------------------------------------------------


async def test_s4_duplicate_key_returns_first_event_and_one_delivery(outbox: Outbox) -> None:
    ob = outbox
    first = await publish(ob, payload={"n": 1}, key="task-7-exited")
    again = await publish(ob, payload={"n": 2}, key="task-7-exited")
    assert first.created
    assert not again.created
    assert (again.event_id, again.delivery_id, again.seq) == (
        first.event_id, first.delivery_id, first.seq)
    assert (await ob.stats(CONV)).backlog == 1

    def twice(tx: Tx) -> tuple[Published, Published]:
        a = ob.publish(tx, CONV, "task.exited", {"n": 3}, idempotency_key="same-unit")
        b = ob.publish(tx, CONV, "task.exited", {"n": 4}, idempotency_key="same-unit")
        return a, b

    a, b = await ob.store.transact(twice)
    assert a.created
    assert not b.created
    assert a.event_id == b.event_id
    assert (await ob.stats(CONV)).backlog == 2

    lease = await ob.claim(CONV)
    assert [d.payload for d in lease.deliveries] == [{"n": 1}, {"n": 3}]
    await ack(ob, lease)

    # Even once acknowledged, the key still answers with the first event and delivers nothing.
    late = await publish(ob, payload={"n": 5}, key="task-7-exited")
    assert not late.created
    assert late.event_id == first.event_id
    assert (await ob.claim(CONV)).deliveries == ()
    assert (await ob.stats(CONV)).backlog == 0

    # Keys are per conversation: the same key elsewhere is a separate event.
    theirs = await publish(ob, OTHER, key="task-7-exited")
    assert theirs.created
    assert theirs.event_id != first.event_id
    assert theirs.delivery_id != first.delivery_id
    assert [d.event_id for d in (await ob.claim(OTHER)).deliveries] == [theirs.event_id]


async def test_s4_concurrent_publishers_of_one_key_publish_once(outbox: Outbox) -> None:
    ob = outbox
    results = await asyncio.gather(
        *(publish(ob, payload={"n": n}, key="restart-done") for n in range(12))
    )
    assert sum(p.created for p in results) == 1
    assert len({p.event_id for p in results}) == 1
    assert len({p.delivery_id for p in results}) == 1
    lease = await ob.claim(CONV)
    assert [d.event_id for d in lease.deliveries] == [results[0].event_id]
    assert (await ob.stats(CONV)).backlog == 1


# -- S5 claims -----------------------------------------------------------------------------------


async def test_s5_claim_is_scoped_to_one_conversation(outbox: Outbox) -> None:
    """Isolation of recipients: A's claims never see B's signals (S5, S11: no broadcast)."""
    ob = outbox
    a1 = await publish(ob, CONV, {"n": "a1"})
    b1 = await publish(ob, OTHER, {"n": "b1"})
    a2 = await publish(ob, CONV, {"n": "a2"})
    b2 = await publish(ob, OTHER, {"n": "b2"})

    lease_a = await ob.claim(CONV)
    assert [d.event_id for d in lease_a.deliveries] == [a1.event_id, a2.event_id]
    assert {d.conversation_id for d in lease_a.deliveries} == {CONV}
    assert lease_a.conversation_id == CONV
    assert (await ob.stats(OTHER)).ready == 2  # B untouched by A's claim

    await ack(ob, lease_a)
    lease_b = await ob.claim(OTHER)
    assert [d.event_id for d in lease_b.deliveries] == [b1.event_id, b2.event_id]
    assert {d.conversation_id for d in lease_b.deliveries} == {OTHER}
    assert (await ob.claim(CONV)).deliveries == ()
    assert (await ob.stats(CONV)).backlog == 0


async def test_s5_batch_is_in_journal_order_and_bounded_in_count(outbox: Outbox) -> None:
    ob = outbox
    published = [await publish(ob, payload={"i": i}) for i in range(20)]

    first = await ob.claim(CONV)  # default bound: 16
    assert len(first.deliveries) == OutboxConfig().claim_max_count == 16
    assert [d.event_id for d in first.deliveries] == [p.event_id for p in published[:16]]
    seqs = [d.seq for d in first.deliveries]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)

    second = await ob.claim(CONV, max_count=3)
    assert [d.payload["i"] for d in second.deliveries] == [16, 17, 18]
    third = await ob.claim(CONV, max_count=3)
    assert [d.payload["i"] for d in third.deliveries] == [19]
    assert (await ob.claim(CONV)).deliveries == ()


async def test_s5_batch_is_bounded_in_bytes_and_the_first_always_fits(outbox: Outbox) -> None:
    ob = outbox
    body = {"excerpt": "x" * 86}
    size = len(json.dumps(body, separators=(",", ":")).encode())
    assert size == 100
    for _ in range(4):
        await publish(ob, payload=body)

    two = await ob.claim(CONV, max_bytes=250)
    assert len(two.deliveries) == 2
    assert [d.payload_bytes for d in two.deliveries] == [size, size]
    exact = await ob.claim(CONV, max_bytes=100)
    assert len(exact.deliveries) == 1
    # A signal bigger than the byte bound is still claimed, alone: never stuck.
    alone = await ob.claim(CONV, max_bytes=10)
    assert len(alone.deliveries) == 1
    assert (await ob.claim(CONV)).deliveries == ()

    bad_bounds: list[dict[str, Any]] = [{"max_count": 0}, {"max_bytes": 0}, {"max_count": -1}]
    for kwargs in bad_bounds:
        with pytest.raises(InvalidInputError):
            await ob.claim(CONV, **kwargs)
    for bad in ("", "conv\nwith newline", "c" * 201):
        with pytest.raises(InvalidInputError):
            await ob.claim(bad)


async def test_s5_order_is_journal_sequence_not_wall_clock(
    outbox: Outbox, clock: ManualClock
) -> None:
    ob = outbox
    first = await publish(ob, payload={"n": 1})
    clock.advance(timedelta(seconds=-60))  # the wall clock steps back between publications
    second = await publish(ob, payload={"n": 2})
    clock.advance(timedelta(seconds=120))
    lease = await ob.claim(CONV)
    assert [d.event_id for d in lease.deliveries] == [first.event_id, second.event_id]
    assert lease.deliveries[0].published_at_us > lease.deliveries[1].published_at_us


async def test_s5_delayed_redelivery_may_follow_newer_events(
    outbox: Outbox, clock: ManualClock
) -> None:
    ob = outbox
    older = await publish(ob, payload={"n": 1})
    newer = await publish(ob, payload={"n": 2})
    lease = await ob.claim(CONV, max_count=1)
    assert lease.delivery_ids == (older.delivery_id,)
    await ob.release(lease, "model_error")

    later = await ob.claim(CONV)
    assert later.delivery_ids == (newer.delivery_id,)  # the retry waits out its backoff
    await ack(ob, later)
    clock.advance(OutboxConfig().backoff_base)
    retry = await ob.claim(CONV)
    assert retry.delivery_ids == (older.delivery_id,)
    assert retry.deliveries[0].event_id == older.event_id


async def test_s5_s6_a_lease_spanning_another_takes_and_acks_only_its_own(
    outbox: Outbox, clock: ManualClock
) -> None:
    """A claim leases, and an ack of the whole lease acknowledges, only that lease's deliveries,
    even with another lease's delivery between them in the journal."""
    ob = outbox
    first, middle, last = [await publish(ob, payload={"n": n}) for n in range(3)]
    holder = await ob.claim(CONV, max_count=2)
    assert holder.delivery_ids == (first.delivery_id, middle.delivery_id)
    await ob.release(holder, "model_error", delivery_ids=[first.delivery_id])
    clock.advance(ob.config.backoff_base)  # the retry is due; the holder's lease is not out

    spanning = await ob.claim(CONV)
    assert spanning.delivery_ids == (first.delivery_id, last.delivery_id)
    await ack(ob, spanning)
    rows = await states(ob, [first.delivery_id, middle.delivery_id, last.delivery_id])
    assert [rows[d]["state"] for d in sorted(rows)] == ["acknowledged", "leased", "acknowledged"]
    assert rows[middle.delivery_id]["lease_token"] == holder.token
    assert (await ob.stats(CONV)).backlog == 1

    await ack(ob, holder, [middle.delivery_id])
    assert (await ob.stats(CONV)).backlog == 0
    assert (await ob.claim(CONV)).deliveries == ()


async def test_s5_concurrent_claims_never_share_a_delivery(outbox: Outbox) -> None:
    ob = outbox
    published = [await publish(ob, payload={"n": n}) for n in range(12)]
    leases = await asyncio.gather(*(ob.claim(CONV, max_count=3) for _ in range(6)))
    taken = [d.delivery_id for lease in leases for d in lease.deliveries]
    assert len(taken) == len(set(taken))  # no delivery in two leases
    assert len({lease.token for lease in leases}) == len(leases)
    for lease in leases:
        await ack(ob, lease)
    while (rest := await ob.claim(CONV)).deliveries:  # whatever a claim skipped is still there
        taken.extend(rest.delivery_ids)
        await ack(ob, rest)
    assert sorted(taken) == sorted(p.delivery_id for p in published)
    assert (await ob.stats(CONV)).backlog == 0


# -- S6 fenced leases ----------------------------------------------------------------------------


async def test_s6_stale_ack_rejected(outbox: Outbox, clock: ManualClock) -> None:
    ob = outbox
    published = await publish(ob)
    old = await ob.claim(CONV)
    clock.advance(TTL + US)
    new = await ob.claim(CONV)  # reclaimed after expiry
    assert new.delivery_ids == old.delivery_ids == (published.delivery_id,)
    assert new.token != old.token
    before = await states(ob, new.delivery_ids)
    assert before[published.delivery_id]["lease_token"] == new.token

    # The stale holder's ack fails, and its own writes in the same unit do not commit.
    written: list[str] = []

    def stale_turn(tx: Tx) -> None:
        consumer_write(ob, tx, written)
        ob.ack(tx, old)

    with pytest.raises(StaleLeaseError) as caught:
        await ob.store.transact(stale_turn)
    assert caught.value.code == "stale_lease"
    assert caught.value.token == old.token
    assert not await consumer_write_landed(ob, written)

    with pytest.raises(StaleLeaseError):
        await ob.extend(old)
    with pytest.raises(StaleLeaseError):
        await ob.release(old, "model_error")
    with pytest.raises(StaleLeaseError):
        await ob.release(old, "model_error", permanent=True)
    assert await states(ob, new.delivery_ids) == before  # nothing changed

    await ack(ob, new)  # the current holder is unaffected
    assert (await states(ob, new.delivery_ids))[published.delivery_id]["state"] == "acknowledged"


async def test_s6_expired_token_cannot_act_even_before_reclaim(
    outbox: Outbox, clock: ManualClock
) -> None:
    ob = outbox
    await publish(ob)
    lease = await ob.claim(CONV)
    clock.advance(TTL - US)
    assert (await ob.claim(CONV)).deliveries == ()  # unexpired: not reclaimable
    clock.advance(US)  # the deadline itself: expired
    before = await states(ob, lease.delivery_ids)
    with pytest.raises(StaleLeaseError):
        await ack(ob, lease)
    with pytest.raises(StaleLeaseError):
        await ob.extend(lease)
    with pytest.raises(StaleLeaseError):
        await ob.release(lease, "model_error")
    assert await states(ob, lease.delivery_ids) == before
    assert (await ob.claim(CONV)).delivery_ids == lease.delivery_ids


async def test_s6_ack_twice_or_of_foreign_deliveries_is_refused(outbox: Outbox) -> None:
    ob = outbox
    await publish(ob, CONV)
    other = await publish(ob, OTHER)
    lease = await ob.claim(CONV)
    await ack(ob, lease)
    with pytest.raises(StaleLeaseError):
        await ack(ob, lease)
    with pytest.raises(InvalidInputError):
        await ack(ob, lease, [other.delivery_id])
    assert (await states(ob, [other.delivery_id]))[other.delivery_id]["state"] == "ready"


async def test_s6_ack_naming_an_already_acknowledged_delivery_is_refused(
    outbox: Outbox,
) -> None:
    """One behaviour on both backends: an ack that names a delivery the token no longer
    holds fails as a whole, even when the clock has not moved since that delivery's ack."""
    ob = outbox
    await publish(ob)
    await publish(ob)
    lease = await ob.claim(CONV)
    first, second = lease.delivery_ids
    await ack(ob, lease, [first])
    with pytest.raises(StaleLeaseError):
        await ack(ob, lease, [first, second])
    row = (await states(ob, [second]))[second]
    assert (row["state"], row["lease_token"]) == ("leased", lease.token)
    assert (await ob.stats(CONV)).backlog == 1


def careless_turn(ob: Outbox, lease: Lease) -> Callable[[Tx], bool]:
    """A consumer that catches the stale-lease error inside its unit and commits anyway."""

    def turn(tx: Tx) -> bool:
        try:
            ob.ack(tx, lease)
        except StaleLeaseError:
            return False
        return True

    return turn


async def test_s6_failed_ack_changes_nothing_even_when_caught(outbox: Outbox) -> None:
    """A stale call changes nothing -- not even the deliveries it could still have acked."""
    ob = outbox
    released = await publish(ob, payload={"n": 1})
    held = await publish(ob, payload={"n": 2})
    lease = await ob.claim(CONV)
    await ob.release(lease, "model_error", delivery_ids=[released.delivery_id])

    assert await ob.store.transact(careless_turn(ob, lease)) is False
    row = (await states(ob, [held.delivery_id]))[held.delivery_id]
    assert (row["state"], row["lease_token"]) == ("leased", lease.token)
    assert (await ob.stats(CONV)).backlog == 2


async def test_s5_failed_ack_never_strands_a_signal(outbox: Outbox, clock: ManualClock) -> None:
    """Whatever a failed ack did, every unacknowledged signal can still be claimed."""
    ob = outbox
    released = await publish(ob, payload={"n": 1})
    await publish(ob, payload={"n": 2})
    newer = await publish(ob, payload={"n": 3})
    lease = await ob.claim(CONV, max_count=2)
    await ob.release(lease, "model_error", delivery_ids=[released.delivery_id])
    assert await ob.store.transact(careless_turn(ob, lease)) is False

    clock.advance(ob.config.backoff_cap)
    claimed = {d.event_id for d in (await ob.claim(CONV)).deliveries}
    assert {released.event_id, newer.event_id} <= claimed


async def test_s6_extend_pushes_the_deadline(outbox: Outbox, clock: ManualClock) -> None:
    ob = outbox
    published = await publish(ob)
    lease = await ob.claim(CONV)
    assert lease.deadline_us == clock.now_us() + to_us(TTL)
    clock.advance(timedelta(seconds=20))
    extended = await ob.extend(lease)
    assert extended.token == lease.token
    assert extended.deadline_us == clock.now_us() + to_us(TTL)
    row = (await states(ob, lease.delivery_ids))[published.delivery_id]
    assert row["lease_deadline_us"] == extended.deadline_us

    clock.advance(timedelta(seconds=20))  # past the first deadline, before the new one
    assert (await ob.claim(CONV)).deliveries == ()
    shorter = await ob.extend(extended, lease_ttl=timedelta(seconds=5))
    assert shorter.deadline_us == clock.now_us() + 5_000_000
    await ack(ob, shorter)
    row = (await states(ob, lease.delivery_ids))[published.delivery_id]
    assert (row["state"], row["attempts"]) == ("acknowledged", 1)


async def test_s6_expired_lease_is_reclaimed_with_a_new_token(
    outbox: Outbox, clock: ManualClock
) -> None:
    """Expiry and reclaim; the redelivery keeps its event id, the attempt gets a new token (S4)."""
    ob = outbox
    published = await publish(ob)
    first = await ob.claim(CONV, owner="run-1")
    assert first.deliveries[0].attempts == 1
    assert (await ob.claim(CONV)).deliveries == ()
    clock.advance(TTL + US)

    second = await ob.claim(CONV, owner="run-2")
    (delivery,) = second.deliveries
    assert delivery.event_id == published.event_id
    assert delivery.delivery_id == published.delivery_id
    assert delivery.attempts == 2  # the expired attempt counts
    assert second.token != first.token
    assert second.deadline_us == clock.now_us() + to_us(TTL)
    row = (await states(ob, second.delivery_ids))[published.delivery_id]
    assert (row["state"], row["lease_token"]) == ("leased", second.token)


# -- S7 ack with the transcript ------------------------------------------------------------------


async def test_s7_consume_commits_the_turn_and_the_ack_together(outbox: Outbox) -> None:
    ob = outbox
    published = await publish(ob)
    lease = await ob.claim(CONV)
    written: list[str] = []

    def turn(tx: Tx) -> str:
        consumer_write(ob, tx, written)
        return "reply"

    assert await ob.consume(lease, turn, failure_code="turn_failed") == "reply"
    assert await consumer_write_landed(ob, written)
    row = (await states(ob, lease.delivery_ids))[published.delivery_id]
    assert row["state"] == "acknowledged"
    assert (await ob.stats(CONV)).backlog == 0


async def test_s7_failure_before_commit_keeps_the_signal_for_redelivery(
    outbox: Outbox, clock: ManualClock
) -> None:
    ob = outbox
    published = await publish(ob)
    lease = await ob.claim(CONV)
    written: list[str] = []

    def failing_turn(tx: Tx) -> str:
        consumer_write(ob, tx, written)
        raise Boom("the transcript could not be persisted")

    with pytest.raises(Boom):
        await ob.consume(lease, failing_turn, failure_code="turn_failed")

    assert not await consumer_write_landed(ob, written)
    row = (await states(ob, lease.delivery_ids))[published.delivery_id]
    # Released at once (not left to expire), not acknowledged, with its failure code.
    assert (row["state"], row["failure_code"], row["attempts"]) == ("ready", "turn_failed", 1)
    assert row["lease_deadline_us"] is None
    assert (await ob.stats(CONV)).backlog == 1
    assert (await ob.claim(CONV)).deliveries == ()  # backing off, not an immediate retry

    clock.advance(OutboxConfig().backoff_base)
    again = await ob.claim(CONV)
    assert [d.event_id for d in again.deliveries] == [published.event_id]
    assert again.token != lease.token
    assert again.deliveries[0].attempts == 2
    await ob.consume(again, lambda tx: None, failure_code="turn_failed")
    assert (await ob.stats(CONV)).backlog == 0


async def test_s7_stale_consumer_commits_nothing_and_releases_nothing(
    outbox: Outbox, clock: ManualClock
) -> None:
    ob = outbox
    await publish(ob)
    old = await ob.claim(CONV)
    clock.advance(TTL + US)
    new = await ob.claim(CONV)
    before = await states(ob, new.delivery_ids)
    written: list[str] = []

    with pytest.raises(StaleLeaseError):
        await ob.consume(old, lambda tx: consumer_write(ob, tx, written),
                         failure_code="turn_failed")
    assert not await consumer_write_landed(ob, written)
    assert await states(ob, new.delivery_ids) == before  # the new holder keeps its lease


async def test_s7_a_stale_consumer_among_concurrent_ones_fails_alone(
    outbox: Outbox, clock: ManualClock
) -> None:
    """Consumers that commit together: the one whose lease went stale gets its error and
    commits nothing; the others' acks and writes all land."""
    ob = outbox
    convs = [f"conv-group-{n}" for n in range(6)]
    for conv in (CONV, *convs):
        await publish(ob, conv)
    old = await ob.claim(CONV)
    clock.advance(TTL + US)
    new = await ob.claim(CONV)
    before = await states(ob, new.delivery_ids)
    leases = [await ob.claim(conv) for conv in convs]
    written: list[list[str]] = [[] for _ in range(7)]  # each consumer's tries, the last kept
    consumers = [*leases[:3], old, *leases[3:]]

    def writing(mine: list[str]) -> Callable[[Tx], None]:
        return lambda tx: consumer_write(ob, tx, mine)

    results = await asyncio.gather(
        *(ob.consume(lease, writing(mine), failure_code="turn_failed")
          for lease, mine in zip(consumers, written, strict=True)),
        return_exceptions=True,
    )
    assert isinstance(results[3], StaleLeaseError)
    assert [r for n, r in enumerate(results) if n != 3] == [None] * 6
    assert await states(ob, new.delivery_ids) == before
    for conv in convs:
        assert (await ob.stats(conv)).backlog == 0
    assert [await exists(ob, mine[-1]) for mine in written] == [True] * 3 + [False] + [True] * 3
    assert not [op for op in written[3] if await exists(ob, op)]


async def test_s5_s7_claims_alone_go_on_after_a_consumer_failed(outbox: Outbox) -> None:
    """A failed unit rolls its transaction back, and the driver then drops every statement it
    had prepared on the connection: the claims and publishes made alone after it, which the
    writer had prepared there too, still run (they are prepared again)."""
    ob = outbox
    for n in range(8):  # enough for the driver to prepare the commits it sends itself
        await ob.publish_alone(ob.signal(CONV, "task.exited", {"n": n}))
        await ack(ob, await ob.claim(CONV, max_count=1))
    stale = await ob.claim(CONV, max_count=1)  # nothing left: an empty lease
    assert stale.deliveries == ()
    await ob.publish_alone(ob.signal(CONV, "task.exited", {"n": 8}))
    lease = await ob.claim(CONV, max_count=1)
    await ack(ob, lease)
    with pytest.raises(StaleLeaseError):
        await ack(ob, lease)  # rolled back
    for n in range(9, 12):
        published = await ob.publish_alone(ob.signal(CONV, "task.exited", {"n": n}))
        taken = await ob.claim(CONV, max_count=1)
        assert [d.event_id for d in taken.deliveries] == [published.event_id]
        await ack(ob, taken)


async def test_s7_postgres_a_consumers_ack_rides_with_its_commit(
    postgres_template: str, clock: ManualClock
) -> None:
    """The ack's all-or-nothing check is made by the server with the commit: a consumer that
    reads nothing costs one round trip, its ack included."""
    url = fresh_postgres_database(postgres_template)
    try:
        async with Outbox.open(url, clock=clock) as ob:
            store = ob.store
            assert isinstance(store, PostgresStore)
            for n in range(4):  # the first prepares its statements on the connection
                await publish(ob, payload={"n": n})
                lease = await ob.claim(CONV)
                trips = store.round_trips
                await ob.consume(lease, lambda tx: None, failure_code="turn_failed")
                assert store.round_trips - trips == 1
                assert (await ob.stats(CONV)).backlog == 0
    finally:
        drop_postgres_database(postgres_template, url)


# -- S8 retry and dead letters -------------------------------------------------------------------


async def test_s8_exhausted_attempts_dead_letter(backend: Backend, clock: ManualClock) -> None:
    async with opened(backend, clock, max_attempts=3) as ob:
        published = await publish(ob, type="restart.completed")
        for attempt in (1, 2, 3):
            lease = await ob.claim(CONV)
            assert lease.delivery_ids == (published.delivery_id,)
            assert lease.deliveries[0].attempts == attempt
            result = await ob.release(lease, "model_error")
            assert result == {published.delivery_id: "ready" if attempt < 3 else "dead_letter"}
            assert (await ob.claim(CONV)).deliveries == ()  # never an immediate retry
            clock.advance(ob.config.backoff_cap)

        (dead,) = await ob.dead_letters(CONV)
        assert (dead.delivery_id, dead.event_id) == (published.delivery_id, published.event_id)
        assert (dead.failure_code, dead.attempts, dead.type) == (
            "model_error", 3, "restart.completed")
        assert dead.conversation_id == CONV
        assert dead.settled_at_us is not None
        assert [d.delivery_id for d in await ob.dead_letters()] == [published.delivery_id]
        assert await ob.dead_letters(OTHER) == []
        stats = await ob.stats(CONV)
        assert (stats.backlog, stats.dead_letters) == (0, 1)
        assert (await ob.stats()).dead_letters == 1

        # Nothing replays a dead letter: not time, not a sweep.
        clock.advance(timedelta(days=2))
        await ob.sweep()
        assert (await ob.claim(CONV)).deliveries == ()
        row = (await states(ob, [published.delivery_id]))[published.delivery_id]
        assert row["state"] == "dead_letter"
        assert len(await ob.dead_letters(CONV)) == 1


async def test_s8_permanent_failure_dead_letters_at_once(
    outbox: Outbox, clock: ManualClock
) -> None:
    ob = outbox
    published = await publish(ob)
    kept = await publish(ob)
    lease = await ob.claim(CONV)
    result = await ob.release(lease, "unsupported_signal", permanent=True,
                              delivery_ids=[published.delivery_id])
    assert result == {published.delivery_id: "dead_letter"}
    (dead,) = await ob.dead_letters(CONV)
    assert (dead.failure_code, dead.attempts) == ("unsupported_signal", 1)
    # The rest of the lease is still held and can be acknowledged.
    await ack(ob, lease, [kept.delivery_id])
    clock.advance(timedelta(hours=1))
    assert (await ob.claim(CONV)).deliveries == ()
    stats = await ob.stats(CONV)
    assert (stats.backlog, stats.dead_letters) == (0, 1)


async def test_s8_expired_lease_with_spent_attempts_is_dead_lettered_by_sweep(
    backend: Backend, clock: ManualClock
) -> None:
    async with opened(backend, clock, max_attempts=2) as ob:
        published = await publish(ob)
        await ob.release(await ob.claim(CONV), "model_error")
        clock.advance(ob.config.backoff_cap)
        last = await ob.claim(CONV)
        assert last.deliveries[0].attempts == 2
        clock.advance(TTL + US)  # the last attempt's holder vanished without a word

        assert (await ob.claim(CONV)).deliveries == ()  # no attempts left to reclaim with
        report = await ob.sweep()
        assert report.dead_lettered == 1
        (dead,) = await ob.dead_letters(CONV)
        assert (dead.delivery_id, dead.failure_code, dead.attempts) == (
            published.delivery_id, "lease_expired", 2)
        stats = await ob.stats(CONV)
        assert (stats.backlog, stats.leased, stats.dead_letters) == (0, 0, 1)
        with pytest.raises(StaleLeaseError):
            await ack(ob, last)
        assert (await ob.sweep()).dead_lettered == 0


async def test_s8_backoff_is_bounded_exponential(backend: Backend, clock: ManualClock) -> None:
    base, cap = timedelta(seconds=10), timedelta(seconds=40)
    async with opened(backend, clock, backoff_base=base, backoff_cap=cap, max_attempts=10) as ob:
        published = await publish(ob)
        lease = await ob.claim(CONV)
        for attempt in range(1, 7):
            step = min(cap, base * 2 ** (attempt - 1))
            released_at = clock.now_us()
            await ob.release(lease, "model_error")
            # Never before half the step (so never before base/2) ...
            clock.advance(step / 2 - US)
            assert (await ob.claim(CONV)).deliveries == (), f"attempt {attempt} came back early"
            # ... and always by the full step, which never exceeds the cap.
            clock.advance(timedelta(microseconds=released_at + to_us(step) - clock.now_us()))
            lease = await ob.claim(CONV)
            assert lease.delivery_ids == (published.delivery_id,), f"attempt {attempt} late"
            assert lease.deliveries[0].attempts == attempt + 1


async def test_s8_backoff_has_jitter(backend: Backend, clock: ManualClock) -> None:
    base = timedelta(seconds=10)
    async with opened(backend, clock, backoff_base=base) as ob:
        for i in range(8):
            await publish(ob, payload={"i": i})
        lease = await ob.claim(CONV)
        assert len(lease.deliveries) == 8
        released_at = clock.now_us()
        await ob.release(lease, "model_error")

        clock.advance(base / 2 - US)
        assert (await ob.claim(CONV)).deliveries == ()
        came_back: dict[int, int] = {}
        step = timedelta(milliseconds=250)
        while clock.now_us() < released_at + to_us(base):
            clock.advance(step)
            for d in (await ob.claim(CONV)).deliveries:
                came_back[d.delivery_id] = clock.now_us()
        assert set(came_back) == set(lease.delivery_ids)  # all back by base
        assert len(set(came_back.values())) > 1  # spread out, not a thundering herd


async def test_s8_release_refuses_a_sensitive_looking_failure_code(outbox: Outbox) -> None:
    ob = outbox
    await publish(ob)
    lease = await ob.claim(CONV)
    for code in ("Error: password=hunter2", "", "x" * 65):
        with pytest.raises(InvalidInputError):
            await ob.release(lease, code)
    row = (await states(ob, lease.delivery_ids))[lease.delivery_ids[0]]
    assert (row["state"], row["lease_token"]) == ("leased", lease.token)


# -- S9 restart recovery -------------------------------------------------------------------------


async def test_s9_closed_instance_leases_ready_and_operations_unknown(
    outbox: Outbox, clock: ManualClock
) -> None:
    ob = outbox
    other = Outbox(ob.store, clock=clock)
    await other.instance.start()
    assert other.instance.instance_id != ob.instance.instance_id  # each boot has its own id
    op = await accept(other, "shell_command", CONV)
    published = await publish(other, operation_id=op.operation_id)
    lease = await other.claim(CONV)
    assert lease.delivery_ids == (published.delivery_id,)
    await other.instance.close()

    assert (await operations.get(ob.store, op.operation_id)).state is OperationState.OUTCOME_UNKNOWN
    row = (await states(ob, lease.delivery_ids))[published.delivery_id]
    assert row["state"] == "ready"
    taken = await ob.claim(CONV)  # at once: no waiting out the dead lease
    assert [d.event_id for d in taken.deliveries] == [published.event_id]
    assert taken.token != lease.token
    with pytest.raises(StaleLeaseError):
        await ack(other, lease)
    with pytest.raises(InstanceNotRunningError):
        await other.claim(CONV)
    with pytest.raises(InstanceNotRunningError):
        await accept(other)
    # Nothing is replayed: the unknown outcome is final.
    with pytest.raises(OperationSettledError):
        await ob.store.transact(
            lambda tx: operations.complete(tx, ob.instance, op.operation_id, {"ok": True})
        )


async def test_s9_gone_instance_is_found_by_reconcile(
    outbox: Outbox, backend: Backend, clock: ManualClock
) -> None:
    ob = outbox
    store = await open_store(backend.url)
    gone = Outbox(store, clock=clock)
    await gone.instance.start()
    op = await accept(gone, "background_tool", CONV)
    await publish(gone)
    lease = await gone.claim(CONV)
    await store.close()  # the process dies: its liveness mark goes with it, nothing is settled

    report = await ob.instance.reconcile()
    assert report.gone_instances == (gone.instance.instance_id,)
    assert report.leases_invalidated == 1
    assert report.operations_unknown == (op.operation_id,)
    assert (await operations.get(ob.store, op.operation_id)).state is OperationState.OUTCOME_UNKNOWN
    assert (await ob.claim(CONV)).delivery_ids == lease.delivery_ids
    again = await ob.instance.reconcile()
    assert again.gone_instances == ()
    assert again.leases_invalidated == 0


async def test_s9_reconcile_never_touches_a_live_instance(
    outbox: Outbox, backend: Backend, clock: ManualClock
) -> None:
    ob = outbox
    async with Outbox.open(backend.url, clock=clock) as live:
        op = await accept(live, "background_tool", CONV)
        await publish(live)
        lease = await live.claim(CONV)
        clock.advance(timedelta(seconds=10))

        report = await ob.instance.reconcile()
        assert report.gone_instances == ()
        assert report.leases_invalidated == 0
        assert (await ob.sweep()).reconciled.gone_instances == ()
        assert (await operations.get(ob.store, op.operation_id)).state is OperationState.ACCEPTED
        assert (await ob.claim(CONV)).deliveries == ()
        await ack(live, lease)


async def test_s9_heartbeat_of_an_instance_declared_gone_stops_it(
    outbox: Outbox, clock: ManualClock
) -> None:
    ob = outbox
    timeout = ob.config.instance_timeout
    other = Outbox(ob.store, clock=clock)
    await other.instance.start()
    try:
        await publish(other)
        lease = await other.claim(CONV)

        # A heartbeat keeps it alive past the timeout measured from its start.
        clock.advance(timeout * 3 / 4)
        await other.instance.heartbeat()
        clock.advance(timeout * 3 / 4)
        assert (await ob.instance.reconcile()).gone_instances == ()

        # Silent for longer than the timeout: declared gone, its lease voided.
        clock.advance(timeout)
        report = await ob.instance.reconcile()
        assert report.gone_instances == (other.instance.instance_id,)
        assert report.leases_invalidated == 1

        await other.instance.heartbeat()  # it learns it was declared gone, and stops acting
        with pytest.raises(InstanceNotRunningError) as caught:
            await other.claim(CONV)
        assert caught.value.code == "instance_not_running"
        with pytest.raises(StaleLeaseError):
            await ack(other, lease)
        assert (await ob.claim(CONV)).delivery_ids == lease.delivery_ids
    finally:
        await other.instance.close()


async def test_s9_operation_accepted_after_being_declared_gone_is_not_orphaned(
    outbox: Outbox, backend: Backend, clock: ManualClock
) -> None:
    """An instance declared gone (its heartbeat stalled) that accepts an operation before it
    notices, then dies, must not leave that operation accepted forever: either the accept is
    refused, or the operation still ends outcome_unknown."""
    ob = outbox
    store = await open_store(backend.url)
    stalled = Outbox(store, clock=clock)
    await stalled.instance.start()
    clock.advance(ob.config.instance_timeout + timedelta(seconds=1))
    assert (await ob.instance.reconcile()).gone_instances == (stalled.instance.instance_id,)

    try:
        op: Operation | None = await accept(stalled, "background_tool", CONV)
    except InstanceNotRunningError:
        op = None  # fenced at once: nothing can be orphaned
    await store.close()  # and now the stalled process really dies
    if op is not None:
        await ob.sweep()
        assert (await operations.get(ob.store, op.operation_id)).state is (
            OperationState.OUTCOME_UNKNOWN
        )


async def test_s9_operation_settles_once(outbox: Outbox, clock: ManualClock) -> None:
    ob = outbox
    op = await accept(ob, "restart", CONV)
    assert op.state is OperationState.ACCEPTED
    assert (op.kind, op.owner, op.origin_instance) == ("restart", CONV, ob.instance.instance_id)
    assert (op.accepted_at_us, op.settled_at_us) == (clock.now_us(), None)
    assert await operations.get(ob.store, op.operation_id) == op  # what was stored, exactly

    clock.advance(timedelta(seconds=3))
    done = await ob.store.transact(
        lambda tx: operations.complete(tx, ob.instance, op.operation_id, {"exit": 0})
    )
    assert (done.state, done.outcome, done.settled_at_us) == (
        OperationState.COMPLETED, {"exit": 0}, clock.now_us())

    # A settled operation is never overwritten, by any transition.
    settle_again: list[Callable[[Tx], Operation]] = [
        lambda tx: operations.complete(tx, ob.instance, op.operation_id, {"exit": 1}),
        lambda tx: operations.fail(tx, ob.instance, op.operation_id, "exit_nonzero"),
        lambda tx: operations.mark_outcome_unknown(tx, ob.instance, op.operation_id),
    ]
    for transition in settle_again:
        with pytest.raises(OperationSettledError) as caught:
            await ob.store.transact(transition)
        assert caught.value.state == "completed"
    assert await operations.get(ob.store, op.operation_id) == done

    failed_op = await accept(ob, "background_tool", CONV)
    failed = await ob.store.transact(
        lambda tx: operations.fail(tx, ob.instance, failed_op.operation_id, "exit_nonzero"))
    assert (failed.state, failed.failure_code) == (OperationState.FAILED, "exit_nonzero")

    unknown_op = await accept(ob, "background_tool", CONV)
    unknown = await ob.store.transact(
        lambda tx: operations.mark_outcome_unknown(tx, ob.instance, unknown_op.operation_id))
    assert unknown.state is OperationState.OUTCOME_UNKNOWN
    with pytest.raises(OperationSettledError):
        await ob.store.transact(
            lambda tx: operations.complete(tx, ob.instance, unknown_op.operation_id)
        )

    # The refusal rolls back the unit that tried it.
    def late_settle(tx: Tx) -> None:
        ob.publish(tx, CONV, "restart.completed", {})
        operations.complete(tx, ob.instance, op.operation_id)

    with pytest.raises(OperationSettledError):
        await ob.store.transact(late_settle)
    assert (await ob.stats(CONV)).backlog == 0


async def test_s9_operation_unknown_id_and_bad_input(outbox: Outbox) -> None:
    ob = outbox
    with pytest.raises(UnknownOperationError) as caught:
        await operations.get(ob.store, "op_missing")
    assert caught.value.operation_id == "op_missing"
    for transition in (
        lambda tx: operations.complete(tx, ob.instance, "op_missing"),
        lambda tx: operations.fail(tx, ob.instance, "op_missing", "exit_nonzero"),
        lambda tx: operations.mark_outcome_unknown(tx, ob.instance, "op_missing"),
    ):
        with pytest.raises(UnknownOperationError):
            await ob.store.transact(transition)

    op = await accept(ob)
    with pytest.raises(InvalidInputError):
        await ob.store.transact(
            lambda tx: operations.fail(tx, ob.instance, op.operation_id, "Exit Code 1!")
        )
    with pytest.raises(PayloadTooLargeError):
        await ob.store.transact(
            lambda tx: operations.complete(tx, ob.instance, op.operation_id, {"out": "x" * 9000}))
    with pytest.raises(InvalidInputError):
        await accept(ob, kind="Restart Now")
    assert (await operations.get(ob.store, op.operation_id)).state is OperationState.ACCEPTED


async def test_s9_accept_is_idempotent(outbox: Outbox) -> None:
    ob = outbox
    first = await accept(ob, "restart", CONV, idempotency_key="msg-42")
    again = await accept(ob, "restart", CONV, idempotency_key="msg-42")
    assert again.operation_id == first.operation_id
    elsewhere = await accept(ob, "restart", OTHER, idempotency_key="msg-42")
    assert elsewhere.operation_id != first.operation_id

    await ob.store.transact(lambda tx: operations.complete(tx, ob.instance, first.operation_id))
    late = await accept(ob, "restart", CONV, idempotency_key="msg-42")
    assert late.operation_id == first.operation_id
    assert late.state is OperationState.COMPLETED  # the repeat never reopens it

    def both(tx: Tx) -> tuple[Operation, Operation]:
        return (operations.accept(tx, ob.instance, "restart", CONV, idempotency_key="msg-43"),
                operations.accept(tx, ob.instance, "restart", CONV, idempotency_key="msg-43"))

    a, b = await ob.store.transact(both)
    assert a.operation_id == b.operation_id


async def test_s9_concurrent_accepts_of_one_key_return_one_operation(outbox: Outbox) -> None:
    ob = outbox
    ops = await asyncio.gather(
        *(accept(ob, "restart", CONV, idempotency_key="msg-44") for _ in range(12))
    )
    assert len({op.operation_id for op in ops}) == 1
    assert {op.state for op in ops} == {OperationState.ACCEPTED}


# -- S10 admission, backlog, retention -----------------------------------------------------------


async def test_s10_full_backlog_refuses_and_drops_nothing(
    backend: Backend, clock: ManualClock
) -> None:
    async with opened(backend, clock, backlog_limit=3) as ob:
        earlier = [await publish(ob, payload={"n": n}, key=f"k{n}") for n in range(3)]

        with pytest.raises(BacklogFullError) as caught:
            await publish(ob, payload={"n": 3})
        assert (caught.value.code, caught.value.conversation_id, caught.value.limit) == (
            "backlog_full", CONV, 3)

        ops: list[str] = []

        def unit(tx: Tx) -> None:
            ops.append(operations.accept(tx, ob.instance, "background_tool", CONV).operation_id)
            ob.publish(tx, CONV, "task.exited", {"n": 4})

        with pytest.raises(BacklogFullError):
            await ob.store.transact(unit)
        assert not await exists(ob, ops[0])  # nothing of the refused unit was written

        # A repeat of an admitted key is not a new entry: it answers, it is not refused.
        repeat = await publish(ob, payload={"n": 0}, key="k0")
        assert not repeat.created
        assert repeat.event_id == earlier[0].event_id
        # The bound is per conversation.
        await publish(ob, OTHER)

        lease = await ob.claim(CONV)
        assert [d.event_id for d in lease.deliveries] == [p.event_id for p in earlier]
        assert [d.payload for d in lease.deliveries] == [{"n": 0}, {"n": 1}, {"n": 2}]
        assert (await ob.stats(CONV)).backlog == 3

        await ack(ob, lease, [earlier[0].delivery_id])  # acknowledging makes room
        await publish(ob, payload={"n": 5})
        with pytest.raises(BacklogFullError):
            await publish(ob, payload={"n": 6})
        assert (await ob.stats(CONV)).backlog == 3


async def test_s10_payload_is_bounded_at_8_kib(outbox: Outbox) -> None:
    ob = outbox
    limit = OutboxConfig().payload_limit_bytes
    assert limit == 8192
    exact = {"excerpt": "x" * (limit - 14)}
    assert len(json.dumps(exact, separators=(",", ":")).encode()) == limit
    fits = await publish(ob, payload=exact)

    with pytest.raises(PayloadTooLargeError) as caught:
        await publish(ob, payload={"excerpt": "x" * (limit - 13)})
    assert (caught.value.size_bytes, caught.value.limit_bytes) == (limit + 1, limit)
    assert caught.value.code == "payload_too_large"
    # Bytes, not characters: 4,100 two-byte characters are over the bound.
    with pytest.raises(PayloadTooLargeError):
        await publish(ob, payload={"excerpt": "\u00e9" * 4100})

    lease = await ob.claim(CONV)
    assert [d.event_id for d in lease.deliveries] == [fits.event_id]
    assert lease.deliveries[0].payload_bytes == limit
    assert (await ob.stats()).backlog == 1


async def test_s10_retention_purges_only_acknowledged(
    backend: Backend, clock: ManualClock
) -> None:
    retention = timedelta(days=1)
    async with opened(backend, clock, retention=retention, purge_batch=2) as ob:
        acked = [await publish(ob, payload={"n": n}) for n in range(4)]
        waiting = await publish(ob, payload={"n": "waiting"})
        dead = await publish(ob, payload={"n": "dead"})
        lease = await ob.claim(CONV)
        await ack(ob, lease, [p.delivery_id for p in acked])
        await ob.release(lease, "model_error", delivery_ids=[waiting.delivery_id])
        await ob.release(lease, "bad_signal", permanent=True, delivery_ids=[dead.delivery_id])
        every = [p.delivery_id for p in [*acked, waiting, dead]]

        clock.advance(retention - timedelta(seconds=1))
        assert (await ob.sweep()).purged == 0
        assert len(await states(ob, every)) == 6

        clock.advance(timedelta(seconds=2))
        assert (await ob.sweep()).purged == 4  # in batches of two
        left = await states(ob, every)
        assert {k: v["state"] for k, v in left.items()} == {
            waiting.delivery_id: "ready", dead.delivery_id: "dead_letter"}
        assert [d.delivery_id for d in await ob.dead_letters(CONV)] == [dead.delivery_id]

        # The unacknowledged entry is still delivered, a day on; once acknowledged, it ages out.
        late = await ob.claim(CONV)
        assert [d.event_id for d in late.deliveries] == [waiting.event_id]
        await ack(ob, late)
        assert (await ob.sweep()).purged == 0
        clock.advance(retention + timedelta(seconds=1))
        assert (await ob.sweep()).purged == 1
        left = await states(ob, every)
        assert {k: v["state"] for k, v in left.items()} == {dead.delivery_id: "dead_letter"}
        assert (await ob.stats(CONV)).dead_letters == 1


async def test_s10_stats_per_conversation_and_overall(
    outbox: Outbox, clock: ManualClock
) -> None:
    ob = outbox
    a1 = await publish(ob, CONV)
    a2 = await publish(ob, CONV)
    await publish(ob, CONV)
    clock.advance(timedelta(seconds=5))
    await publish(ob, OTHER)
    clock.advance(timedelta(seconds=5))

    a = await ob.stats(CONV)
    assert a.conversation_id == CONV
    assert (a.backlog, a.ready, a.leased, a.retried, a.dead_letters) == (3, 3, 0, 0, 0)
    assert a.oldest_age_us == 10_000_000
    b = await ob.stats(OTHER)
    assert (b.backlog, b.ready, b.oldest_age_us) == (1, 1, 5_000_000)

    lease = await ob.claim(CONV, max_count=2)
    a = await ob.stats(CONV)
    assert (a.backlog, a.ready, a.leased, a.max_attempts) == (3, 1, 2, 1)
    await ob.release(lease, "model_error", delivery_ids=[a1.delivery_id])
    await ob.release(lease, "bad_signal", permanent=True, delivery_ids=[a2.delivery_id])
    a = await ob.stats(CONV)
    assert (a.backlog, a.ready, a.leased, a.retried, a.dead_letters) == (2, 2, 0, 1, 1)
    assert a.oldest_age_us == 10_000_000

    overall = await ob.stats()
    assert overall.conversation_id is None
    assert (overall.backlog, overall.ready, overall.leased) == (3, 3, 0)
    assert (overall.retried, overall.dead_letters, overall.oldest_age_us) == (1, 1, 10_000_000)

    clock.advance(ob.config.backoff_cap)
    retry = await ob.claim(CONV)
    a = await ob.stats(CONV)
    assert (a.leased, a.retried, a.max_attempts) == (2, 1, 2)
    await ack(ob, retry)
    a = await ob.stats(CONV)
    assert (a.backlog, a.ready, a.leased, a.oldest_age_us, a.dead_letters) == (0, 0, 0, None, 1)

    empty = await ob.stats("conv-never-used")
    assert (empty.backlog, empty.oldest_age_us, empty.dead_letters) == (0, None, 0)


# -- S11 signals are observations ----------------------------------------------------------------


class _NotJson:
    pass


INVALID_PAYLOADS: dict[str, Any] = {
    "list": ["not", "an", "object"],
    "string": "a bare string",
    "null": None,
    "secret key": {"password": "hunter2"},
    "nested secret key": {"meta": {"API_KEY": "sk-123"}},
    "secret key in a list": {"headers": [{"Authorization": "Bearer x"}]},
    "too deep": {"a": {"b": {"c": {"d": {"e": {"f": 1}}}}}},
    "NaN": {"ratio": float("nan")},
    "infinity": {"ratio": float("inf")},
    "lone surrogate": {"text": "broken \ud800 surrogate"},
    "lone surrogate key": {"\udc80": "key"},
    "non-string key": {1: "int key"},
    "not JSON": {"raw": _NotJson()},
    "bytes": {"raw": b"bytes"},
}


async def test_s11_invalid_payload_is_refused_and_nothing_written(outbox: Outbox) -> None:
    ob = outbox
    for name, payload in INVALID_PAYLOADS.items():
        def unit(tx: Tx, payload: Any = payload) -> Published:
            return ob.publish(tx, CONV, "task.exited", payload)

        with pytest.raises(InvalidInputError) as caught:
            await ob.store.transact(unit)
        assert not isinstance(caught.value, PayloadTooLargeError), name
        assert caught.value.code == "invalid_input", name
    assert (await ob.stats()).backlog == 0
    assert (await ob.claim(CONV)).deliveries == ()

    # Bounded metadata and references pass, and arrive as they were sent.
    payload = {
        "task_key": "t1",
        "exit": {"code": 0, "signal": None},
        "result_ref": {"envelope": "res_1", "lifetime": "durable"},
        "tags": ["a", "b"],
        "token_count": 12,  # a key that merely contains "token" is not a secret
    }
    await publish(ob, payload=payload)
    (delivery,) = (await ob.claim(CONV)).deliveries
    assert delivery.payload == payload


async def test_s11_bad_ids_and_types_are_refused(outbox: Outbox) -> None:
    ob = outbox
    calls: list[Callable[[Tx], Published]] = [
        lambda tx: ob.publish(tx, "", "task.exited", {}),
        lambda tx: ob.publish(tx, "conv\x00a", "task.exited", {}),
        lambda tx: ob.publish(tx, "c" * 201, "task.exited", {}),
        lambda tx: ob.publish(tx, CONV, "Task Exited", {}),
        lambda tx: ob.publish(tx, CONV, "", {}),
        lambda tx: ob.publish(tx, CONV, "task.exited", {}, idempotency_key="k\n1"),
        lambda tx: ob.publish(tx, CONV, "task.exited", {}, schema_version=0),
    ]
    for call in calls:
        with pytest.raises(InvalidInputError):
            await ob.store.transact(call)
    assert (await ob.stats()).backlog == 0
