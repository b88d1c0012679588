from __future__ import annotations

from tidings import Outbox


async def test_s1_publish_claim_ack_on_each_backend(outbox: Outbox) -> None:
    published = await outbox.store.transact(
        lambda tx: outbox.publish(tx, "conv-a", "task.exited", {"task_key": "t1"})
    )
    lease = await outbox.claim("conv-a")
    assert [d.event_id for d in lease.deliveries] == [published.event_id]
    await outbox.store.transact(lambda tx: outbox.ack(tx, lease))
    assert (await outbox.stats("conv-a")).backlog == 0
