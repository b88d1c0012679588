"""An operator's hand on dead letters, on both backends: inspect one with its payload, retry it
(ready again at its place in the queue, with a fresh budget, within the backlog bound), or
discard it (settled, never delivered). A repeated act, an unknown id, a full backlog: a typed
refusal that changes nothing."""

from __future__ import annotations

import pytest

from tests.conftest import Backend
from tests.store.test_outbox import CONV, ack, opened, publish, states
from tidings import BacklogFullError, ManualClock, Outbox, OutboxConfig
from tidings.errors import NotDeadLetterError, UnknownDeadLetterError
from tidings.records.dead_letters import DISCARDED, DeadLetters


def hand(ob: Outbox) -> DeadLetters:
    return DeadLetters(ob.store, ob.clock, ob.config)


async def dead(ob: Outbox, payload: object) -> int:
    """A signal whose attempt failed permanently: a dead letter of CONV."""
    published = await publish(ob, payload=payload)
    lease = await ob.claim(CONV)
    await ob.release(lease, "unsupported_signal", permanent=True,
                     delivery_ids=[published.delivery_id])
    return int(published.delivery_id)


async def test_o5_a_dead_letter_is_inspected_with_its_payload(outbox: Outbox) -> None:
    letter = await dead(outbox, {"task_key": "t9", "exit_code": 3})
    detail = await hand(outbox).get(letter)
    assert (detail.conversation_id, detail.type, detail.attempts) == (CONV, "task.exited", 1)
    assert detail.failure_code == "unsupported_signal"
    assert detail.payload == {"task_key": "t9", "exit_code": 3}
    with pytest.raises(UnknownDeadLetterError):
        await hand(outbox).get(letter + 1000)


async def test_o5_a_retried_dead_letter_is_claimed_again_from_its_place(
    outbox: Outbox, clock: ManualClock
) -> None:
    letter = await dead(outbox, {"task_key": "first"})
    later = await publish(outbox, payload={"task_key": "later"})
    lease = await outbox.claim(CONV)
    await ack(outbox, lease)  # the queue's head has moved past the dead letter
    assert (await outbox.stats(CONV)).dead_letters == 1

    settled = await hand(outbox).retry(letter)
    assert (settled.conversation_id, settled.state) == (CONV, "ready")
    stats = await outbox.stats(CONV)
    assert (stats.backlog, stats.ready, stats.dead_letters) == (1, 1, 0)
    again = await outbox.claim(CONV)
    assert [d.delivery_id for d in again.deliveries] == [letter]
    assert again.deliveries[0].attempts == 1  # a fresh budget: this is its first new attempt
    assert later.delivery_id not in [d.delivery_id for d in again.deliveries]
    await ack(outbox, again)
    assert (await outbox.stats(CONV)).backlog == 0

    with pytest.raises(NotDeadLetterError) as refused:
        await hand(outbox).retry(letter)
    assert refused.value.state == "acknowledged"


async def test_o5_a_discarded_dead_letter_is_settled_undelivered(outbox: Outbox) -> None:
    letter = await dead(outbox, {"task_key": "t1"})
    settled = await hand(outbox).discard(letter)
    assert settled.state == "acknowledged"
    row = (await states(outbox, [letter]))[letter]
    assert (row["state"], row["failure_code"]) == ("acknowledged", DISCARDED)
    assert await outbox.dead_letters(CONV) == []
    stats = await outbox.stats(CONV)
    assert (stats.backlog, stats.dead_letters) == (0, 0)
    assert (await outbox.claim(CONV)).deliveries == ()
    for act in (hand(outbox).discard, hand(outbox).retry):
        with pytest.raises(NotDeadLetterError):
            await act(letter)
    with pytest.raises(UnknownDeadLetterError):
        await hand(outbox).discard(10**12)


async def test_o5_a_retry_into_a_full_backlog_is_refused_and_changes_nothing(
    backend: Backend, clock: ManualClock
) -> None:
    async with opened(backend, clock, backlog_limit=1) as ob:
        letter = await dead(ob, {"task_key": "t1"})
        await publish(ob, payload={"task_key": "t2"})  # the one place the bound allows
        with pytest.raises(BacklogFullError):
            await DeadLetters(ob.store, ob.clock, OutboxConfig(backlog_limit=1)).retry(letter)
        assert [d.delivery_id for d in await ob.dead_letters(CONV)] == [letter]
        stats = await ob.stats(CONV)
        assert (stats.backlog, stats.dead_letters) == (1, 1)
