"""S1, S7: statements a unit sends "later" (pipelined on PostgreSQL) still belong to the unit.

A deferred write that fails -- a broken constraint, or a row count that is not the one expected
-- fails its own unit (rolling back everything it did) and only that unit; other units of the
same group commit.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.conftest import Backend
from tidings.clock import SystemClock
from tidings.conversations.catalog import Conversations
from tidings.errors import IntegrityViolationError, PairingViolationError
from tidings.store import Tx, open_store
from tidings.types import Profile


def _event(seq: int) -> str:
    return json.dumps([{"seq": seq, "type": "probe", "run_id": None, "data": "{}"}])


async def test_s7_failed_deferred_write_fails_its_unit_alone(backend: Backend) -> None:
    store = await open_store(backend.url)
    try:
        conversations = Conversations(store, SystemClock())
        conv = (await conversations.create("alice", Profile(model="m"))).conversation_id
        before = len(await conversations.events(conv))

        def duplicate(tx: Tx) -> None:
            tx.run_later("insert_events", conversation_id=conv, items=_event(900), now_us=1)
            tx.run_later("insert_events", conversation_id=conv, items=_event(900), now_us=1)

        def fine(tx: Tx) -> None:
            tx.run_later("insert_events", conversation_id=conv, items=_event(901), now_us=1)

        results = await asyncio.gather(
            store.transact(duplicate, route=conv), store.transact(fine, route=conv),
            return_exceptions=True,
        )
        assert isinstance(results[0], IntegrityViolationError)
        assert results[1] is None
        seqs = [e.seq for e in await conversations.events(conv)]
        assert 900 not in seqs
        assert 901 in seqs
        assert len(seqs) == before + 1
    finally:
        await store.close()


async def test_s7_deferred_row_count_mismatch_raises_and_rolls_back(backend: Backend) -> None:
    store = await open_store(backend.url)
    try:
        conversations = Conversations(store, SystemClock())
        conv = (await conversations.create("alice", Profile(model="m"))).conversation_id

        def unit(tx: Tx) -> None:
            tx.run_later("insert_events", conversation_id=conv, items=_event(950), now_us=1)
            tx.run_later(
                "answer_tool_call", conversation_id=conv, call_id="nope", seq=1, expect=1,
                mismatch=lambda: PairingViolationError(conv, "no open call"),
            )

        with pytest.raises(PairingViolationError):
            await store.transact(unit, route=conv)
        assert 950 not in [e.seq for e in await conversations.events(conv)]
    finally:
        await store.close()


async def test_s7_deferred_row_count_mismatch_fails_its_unit_alone(backend: Backend) -> None:
    # PostgreSQL checks such a count in the server, in the round trip that sends the statement
    # (with a later unit's statements, or COMMIT): the mismatch is still its own unit's error.
    store = await open_store(backend.url)
    try:
        conversations = Conversations(store, SystemClock())
        conv = (await conversations.create("alice", Profile(model="m"))).conversation_id

        def mismatched(tx: Tx) -> None:
            tx.run_later("insert_events", conversation_id=conv, items=_event(960), now_us=1)
            tx.run_later(
                "answer_tool_call", conversation_id=conv, call_id="nope", seq=1, expect=1,
                mismatch=lambda: PairingViolationError(conv, "no open call"),
            )

        def fine(tx: Tx) -> str:
            tx.run_later("insert_events", conversation_id=conv, items=_event(961), now_us=1)
            return "committed"

        results = await asyncio.gather(
            store.transact(fine, route=conv), store.transact(mismatched, route=conv),
            store.transact(fine, route=conv), return_exceptions=True,
        )
        assert isinstance(results[1], PairingViolationError)
        assert results[0] == "committed"
        assert isinstance(results[2], IntegrityViolationError)  # 961 again: its own error
        seqs = [e.seq for e in await conversations.events(conv)]
        assert 960 not in seqs
        assert seqs.count(961) == 1
    finally:
        await store.close()


async def test_s7_deferred_row_count_with_returning_is_checked(backend: Backend) -> None:
    # A statement with its own RETURNING (finish_run's shape): its rows are what is counted.
    store = await open_store(backend.url)
    try:
        conversations = Conversations(store, SystemClock())
        conv = (await conversations.create("alice", Profile(model="m"))).conversation_id

        def unit(tx: Tx) -> None:
            tx.run_later("insert_events", conversation_id=conv, items=_event(970), now_us=1)
            tx.run_later(
                "finish_run", run_id="run_none", status="completed", failure_code=None,
                model=None, steps=0, now_us=1, expect=1,
                mismatch=lambda: PairingViolationError(conv, "no such run"),
            )

        with pytest.raises(PairingViolationError):
            await store.transact(unit, route=conv)
        assert 970 not in [e.seq for e in await conversations.events(conv)]
    finally:
        await store.close()

