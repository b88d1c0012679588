"""S1: a read a unit asks for ahead is what the unit would have read, and on PostgreSQL it
rides with the statement before it (the conversation's locked read): a background task's end
is recorded in two round trips, not three.

The read is answered from what came back with that statement only when nothing ran in between
-- a write of the unit's own, another read -- so a unit never reads an answer older than its
own writes.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.conftest import Backend, drop_postgres_database, fresh_postgres_database
from tidings.clock import SystemClock
from tidings.conversations.catalog import Conversations
from tidings.records.transcript import ConversationTx
from tidings.store import Store, Tx
from tidings.store.postgres import PostgresStore, PostgresTx
from tidings.tasks import journal
from tidings.types import Profile

CLOCK = SystemClock()


async def _conversation_with_tasks(store: Store) -> str:
    conv = (await Conversations(store, CLOCK).create("alice", Profile(model="m"))
            ).conversation_id

    def unit(tx: Tx) -> None:
        for key in ("t1", "t2"):
            tx.execute("insert_task", task_id=f"task_{key}_{conv}", conversation_id=conv,
                       task_key=key, run_id=None, call_id=None, command=f"sleep {key}",
                       notify="on_exit", lifetime="conversation", handed_off=0,
                       instance_id="inst_s1", now_us=1)

    await store.transact(unit, route=conv)
    return conv


async def _spent(store: Store, unit: Any, conv: str) -> tuple[Any, int | None]:
    """What the unit answered and the round trips its group took (None: not counted)."""
    before = getattr(store, "round_trips", None)
    result = await store.transact(unit, route=conv)
    after = getattr(store, "round_trips", None)
    return result, None if before is None or after is None else after - before


async def test_s1_a_task_read_ahead_is_read_with_the_lock(backend: Backend, store: Store) -> None:
    conv = await _conversation_with_tasks(store)

    def read(ahead: bool) -> Any:
        def unit(tx: Tx) -> Any:
            cx = ConversationTx.lock(tx, conv, CLOCK,
                                     ahead=journal.get_ahead(conv, "t2") if ahead else None)
            return journal.get(cx, "t2")
        return unit

    plain, plain_trips = await _spent(store, read(False), conv)
    early, early_trips = await _spent(store, read(True), conv)
    assert plain is not None
    assert plain.task_key == "t2"
    assert plain.command == "sleep t2"
    assert early == plain
    if backend.name == "postgres":
        # BEGIN and the lock, the task, COMMIT -- against the lock and the task together.
        assert (plain_trips, early_trips) == (3, 2)


async def test_s1_a_read_ahead_sees_the_units_own_writes_made_before_it(store: Store) -> None:
    conv = await _conversation_with_tasks(store)

    def unit(tx: Tx) -> tuple[bool, str]:
        cx = ConversationTx.lock(tx, conv, CLOCK, ahead=journal.get_ahead(conv, "t1"))
        task = journal.get(cx, "t2")  # not the read asked for: read as asked
        assert task is not None
        tx.run_later("set_task_flags", task_id=f"task_t1_{conv}", committed=1,
                     handed_off=1, delivered=1, consumed=0, cancelled=0,
                     reported_in_tool_result=0, continuation_error=None,
                     notification_seq=None)
        first = journal.get(cx, "t1")  # after a write of the unit's own: read again
        assert first is not None
        return first.delivered, task.task_key

    delivered, other = await store.transact(unit, route=conv)
    assert (delivered, other) == (True, "t2")


async def test_s1_a_read_ahead_asked_for_before_anything_carried_it_is_read_once(
    backend: Backend, store: Store,
) -> None:
    conv = await _conversation_with_tasks(store)

    def unit(tx: Tx) -> tuple[str | None, str | None]:
        tx.read_ahead("get_task", conversation_id=conv, task_key="t1")
        row = tx.one("get_task", conversation_id=conv, task_key="t1")  # nothing before it
        lock = tx.one("lock_conversation", conversation_id=conv)  # carries nothing now
        again = tx.one("get_task", conversation_id=conv, task_key="t1")
        assert lock is not None
        return (None if row is None else row["command"],
                None if again is None else again["command"])

    result, trips = await _spent(store, unit, conv)
    assert result == ("sleep t1", "sleep t1")
    if backend.name == "postgres":
        assert trips == 4  # each read its own round trip, COMMIT one more


@pytest.mark.postgres_only
async def test_s1_a_read_ahead_outside_a_group_goes_in_one_pipeline(
    postgres_template: str,
) -> None:
    """Outside a writer's group (a unit run again the careful way), the locked read and the
    read asked for ahead go to the server in one pipeline too."""
    url = fresh_postgres_database(postgres_template)
    store = await PostgresStore.open(url)
    try:
        conv = await _conversation_with_tasks(store)
        with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
            tx = PostgresTx(store.queries, conn)
            tx.read_ahead("get_task", conversation_id=conv, task_key="t2")
            assert tx.one("lock_conversation", conversation_id=conv) is not None
            row = tx.one("get_task", conversation_id=conv, task_key="t2")
            assert tx.round_trips == 1
            assert row is not None
            assert row["command"] == "sleep t2"
            assert tx.one("get_task", conversation_id=conv, task_key="t2") == row
            assert tx.round_trips == 2  # answered once: a second read asks the server
    finally:
        await store.close()
        drop_postgres_database(postgres_template, url)


async def test_s1_a_turns_end_reads_its_notifications_tasks_with_the_lock(
    backend: Backend, store: Store,
) -> None:
    """A turn that read a task's notification handles it as it ends (T5): the notified tasks
    are asked for ahead and come with the lock."""
    conv = await _conversation_with_tasks(store)

    def notified(tx: Tx) -> None:
        tx.execute("set_task_flags", task_id=f"task_t2_{conv}", committed=1, handed_off=1,
                   delivered=1, consumed=0, cancelled=0, reported_in_tool_result=0,
                   continuation_error=None, notification_seq=7)

    await store.transact(notified, route=conv)

    def ending(ahead: bool) -> Any:
        def unit(tx: Tx) -> list[str]:
            cx = ConversationTx.lock(tx, conv, CLOCK,
                                     ahead=journal.unconsumed_ahead(conv) if ahead else None)
            return [task.task_key for task in journal.unconsumed(cx)]
        return unit

    plain, plain_trips = await _spent(store, ending(False), conv)
    early, early_trips = await _spent(store, ending(True), conv)
    assert plain == early == ["t2"]
    if backend.name == "postgres":
        assert (plain_trips, early_trips) == (3, 2)
