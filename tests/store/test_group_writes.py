"""S1, S7: a writer group's writes and its COMMIT -- on PostgreSQL sent together, as prepared
statements, in one write to the server -- land as they were bound, whatever the values hold
and however many units of the group send the same statement; a statement the server refuses
fails its own unit and no other."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from tests.conftest import Backend, drop_postgres_database, fresh_postgres_database
from tidings.clock import SystemClock
from tidings.conversations.catalog import Conversations
from tidings.errors import IntegrityViolationError
from tidings.store import Tx, open_store
from tidings.store.postgres import PostgresStore
from tidings.types import Profile

# Text a driver could take for its own syntax, or mangle on the way: placeholders of every
# style, a percent sign, quotes, a backslash, a line break, letters outside ASCII.
AWKWARD = "$1 %s %(name)s :name 100% 'quoted' \"double\" back\\slash\nnext ünïcödé 😀"


def _events(*seqs: int, data: str = "{}") -> str:
    return json.dumps([{"seq": s, "type": "probe", "run_id": None, "data": data} for s in seqs],
                      ensure_ascii=False)


async def test_s7_written_later_values_read_back_as_bound(backend: Backend) -> None:
    store = await open_store(backend.url)
    try:
        conversations = Conversations(store, SystemClock())
        conv = (await conversations.create("alice", Profile(model="m"))).conversation_id
        data = json.dumps({"text": AWKWARD}, ensure_ascii=False)
        big = 2**62

        def unit(tx: Tx) -> None:
            tx.run_later("insert_events", conversation_id=conv, items=_events(big, data=data),
                         now_us=2**53 + 1)

        await store.transact(unit, route=conv)
        [event] = [e for e in await conversations.events(conv) if e.seq == big]
        assert event.data == {"text": AWKWARD}
        assert event.at_us == 2**53 + 1
    finally:
        await store.close()


async def test_s7_units_of_one_group_sending_the_same_statements_all_commit(
    backend: Backend,
) -> None:
    store = await open_store(backend.url)
    try:
        conversations = Conversations(store, SystemClock())
        convs = [(await conversations.create("alice", Profile(model="m"))).conversation_id
                 for _ in range(12)]

        def unit(conv: str, n: int) -> Callable[[Tx], None]:
            def write(tx: Tx) -> None:
                # Twice the same statement in one unit, and in every unit of the group.
                tx.run_later("insert_events", conversation_id=conv, items=_events(500 + n),
                             now_us=1)
                tx.run_later("insert_events", conversation_id=conv, items=_events(600 + n),
                             now_us=1)

            return write

        for round_ in range(3):  # the statements are prepared by then: the same again
            await asyncio.gather(*(store.transact(unit(conv, round_), route=conv)
                                   for conv in convs))
        for conv in convs:
            seqs = {e.seq for e in await conversations.events(conv)}
            assert {500, 501, 502, 600, 601, 602} <= seqs
    finally:
        await store.close()


async def test_s7_a_refused_write_fails_its_unit_and_the_rest_commit(backend: Backend) -> None:
    store = await open_store(backend.url)
    try:
        conversations = Conversations(store, SystemClock())
        conv = (await conversations.create("alice", Profile(model="m"))).conversation_id
        others = [(await conversations.create("alice", Profile(model="m"))).conversation_id
                  for _ in range(4)]

        def twice(tx: Tx) -> None:  # the journal's key, twice: the server refuses the second
            tx.run_later("insert_events", conversation_id=conv, items=_events(700), now_us=1)
            tx.run_later("insert_events", conversation_id=conv, items=_events(700), now_us=1)

        def fine(other: str) -> Callable[[Tx], None]:
            def write(tx: Tx) -> None:
                tx.run_later("insert_events", conversation_id=other, items=_events(700),
                             now_us=1)

            return write

        results = await asyncio.gather(
            *(store.transact(fine(o), route=o) for o in others[:2]),
            store.transact(twice, route=conv),
            *(store.transact(fine(o), route=o) for o in others[2:]),
            return_exceptions=True,
        )
        assert isinstance(results[2], IntegrityViolationError)
        assert [r for n, r in enumerate(results) if n != 2] == [None] * 4
        assert 700 not in {e.seq for e in await conversations.events(conv)}
        for other in others:
            assert 700 in {e.seq for e in await conversations.events(other)}
    finally:
        await store.close()


@pytest.mark.postgres_only
async def test_s1_postgres_group_writes_and_commit_are_one_round_trip(
    postgres_template: str,
) -> None:
    url = fresh_postgres_database(postgres_template)
    store = await PostgresStore.open(url)
    try:
        conversations = Conversations(store, SystemClock())
        conv = (await conversations.create("alice", Profile(model="m"))).conversation_id
        for n in range(8):  # the first prepares its statement on the connection, the rest not
            trips = store.round_trips

            def unit(tx: Tx, n: int = n) -> None:
                tx.run_later("insert_events", conversation_id=conv, items=_events(800 + n),
                             now_us=1)
                tx.run_later("heartbeat", now_us=1, instance_id="nobody")

            await store.transact(unit, route=conv)
            # BEGIN, the writes and COMMIT together; no second try the careful way.
            assert store.round_trips - trips == 1
        assert {800 + n for n in range(8)} <= {e.seq for e in await conversations.events(conv)}
    finally:
        await store.close()
        drop_postgres_database(postgres_template, url)


@pytest.mark.postgres_only
async def test_s7_postgres_a_group_too_large_for_the_socket_still_commits(
    postgres_template: str,
) -> None:
    url = fresh_postgres_database(postgres_template)
    store = await PostgresStore.open(url)
    try:
        trips = store.round_trips

        def many(tx: Tx) -> None:
            # Megabytes of statements, and their answers, in one round trip: more than the
            # socket holds in either direction.
            for _ in range(20_000):
                tx.run_later("heartbeat", now_us=1, instance_id="nobody")

        await asyncio.wait_for(store.transact(many), 60)
        assert store.round_trips - trips == 1
    finally:
        await store.close()
        drop_postgres_database(postgres_template, url)
