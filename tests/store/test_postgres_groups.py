"""S5, S7: how a writer's group commits on PostgreSQL -- claims alone commit without waiting
for their own fsync, a group mixing claims and other writes commits as usual -- seen from
outside: every claim is a lease that acks, on both backends."""

from __future__ import annotations

import asyncio

from tidings import Lease, Outbox, Published
from tidings.store import Tx


async def publish(ob: Outbox, conv: str) -> Published:
    def unit(tx: Tx) -> Published:
        return ob.publish(tx, conv, "probe", {"conv": conv})

    return await ob.store.transact(unit, route=conv)


async def test_s5_claims_alone_and_among_writes_are_leases_that_ack(outbox: Outbox) -> None:
    ob = outbox
    convs = [f"conv-{n}" for n in range(12)]
    for conv in convs:
        await publish(ob, conv)

    # Claims submitted together: a group of claims only.
    leases: list[Lease] = await asyncio.gather(*(ob.claim(conv) for conv in convs[:6]))

    # Claims submitted with publications to the same conversations: mixed groups.
    async def claim_and_publish(conv: str) -> Lease:
        claimed = asyncio.ensure_future(ob.claim(conv))  # submitted first, then the publication
        published = asyncio.ensure_future(publish(ob, conv))
        assert (await published).event_id
        return await claimed

    leases += await asyncio.gather(*(claim_and_publish(conv) for conv in convs[6:]))
    assert [len(lease.deliveries) for lease in leases] == [1] * 12

    def ack_all(tx: Tx) -> None:
        for lease in leases:
            ob.ack(tx, lease)

    await ob.store.transact(ack_all)
    for conv in convs[:6]:
        assert (await ob.stats(conv)).backlog == 0
    for conv in convs[6:]:
        assert (await ob.stats(conv)).backlog == 1  # the publication that came with the claim
