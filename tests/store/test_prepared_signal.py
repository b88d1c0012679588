"""S4, S11: a signal prepared outside the transaction publishes once, however often it is run."""

from __future__ import annotations

import pytest

from tidings import InvalidInputError, Outbox, PayloadTooLargeError


async def test_s11_signal_is_refused_before_any_transaction(outbox: Outbox) -> None:
    with pytest.raises(InvalidInputError):
        outbox.signal("conv", "task.exited", {"api_key": "sk-123"})
    with pytest.raises(PayloadTooLargeError):
        outbox.signal("conv", "task.exited", {"excerpt": "x" * 9000})
    assert (await outbox.stats()).backlog == 0


async def test_s4_prepared_signal_published_twice_is_one_event(outbox: Outbox) -> None:
    # A unit may run again before it commits; a prepared signal keeps its event id and key.
    signal = outbox.signal("conv", "task.exited", {"task_key": "t1"})
    first = await outbox.store.transact(lambda tx: outbox.publish_signal(tx, signal))
    again = await outbox.store.transact(lambda tx: outbox.publish_signal(tx, signal))
    assert first.created
    assert not again.created
    assert again.event_id == first.event_id == signal.event_id
    lease = await outbox.claim("conv")
    assert [d.event_id for d in lease.deliveries] == [signal.event_id]
