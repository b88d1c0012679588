"""S1: reads run apart from the writers, on read-only connections, on both backends."""

from __future__ import annotations

import json

import pytest

from tests.conftest import Backend
from tidings.clock import SystemClock
from tidings.conversations.catalog import Conversations
from tidings.errors import StoreError
from tidings.store import Tx, open_store
from tidings.types import Profile


def _event(seq: int) -> str:
    return json.dumps([{"seq": seq, "type": "probe", "run_id": None, "data": "{}"}])


async def test_s1_a_read_cannot_write_and_sees_each_commit(backend: Backend) -> None:
    # Reads run on read-only connections (PostgreSQL: each statement its own read-only
    # transaction): a write through read() is refused and changes nothing; the next read sees
    # what committed meanwhile.
    store = await open_store(backend.url)
    try:
        conversations = Conversations(store, SystemClock())
        conv = (await conversations.create("alice", Profile(model="m"))).conversation_id
        before = len(await conversations.events(conv))

        def writes(tx: Tx) -> None:
            tx.execute("insert_events", conversation_id=conv, items=_event(980), now_us=1)

        with pytest.raises(StoreError):
            await store.read(writes)
        assert len(await conversations.events(conv)) == before
        await store.transact(writes, route=conv)
        assert [e.seq for e in await conversations.events(conv)][-1] == 980
    finally:
        await store.close()
