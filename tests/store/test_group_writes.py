"""S1, S7: a writer group's writes and its COMMIT -- on PostgreSQL sent together, as prepared
statements, in one write to the server -- land as they were bound, whatever the values hold
and however many units of the group send the same statement; a statement the server refuses
fails its own unit and no other."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio

from tests.conftest import drop_postgres_database, fresh_postgres_database
from tidings.clock import SystemClock
from tidings.conversations.catalog import Conversations
from tidings.errors import IntegrityViolationError
from tidings.store import Store, Tx
from tidings.store.postgres import PostgresStore
from tidings.types import Profile

# Text a driver could take for its own syntax, or mangle on the way: placeholders of every
# style, a percent sign, quotes, a backslash, a line break, letters outside ASCII.
AWKWARD = "$1 %s %(name)s :name 100% 'quoted' \"double\" back\\slash\nnext ünïcödé 😀"


@pytest_asyncio.fixture
async def pg_store(postgres_template: str) -> AsyncIterator[PostgresStore]:
    url = fresh_postgres_database(postgres_template)
    opened = await PostgresStore.open(url)
    try:
        yield opened
    finally:
        await opened.close()
        drop_postgres_database(postgres_template, url)


async def _conversation(store: Store) -> str:
    return (await Conversations(store, SystemClock()).create("alice", Profile(model="m"))
            ).conversation_id


async def _seqs(store: Store, conv: str) -> set[int]:
    """The journal positions the conversation has."""
    return {e.seq for e in await Conversations(store, SystemClock()).events(conv)}


def _journal(conv: str, *seqs: int, data: str = "{}", now_us: int = 1) -> Callable[[Tx], None]:
    """A unit that writes journal rows at ``seqs`` without waiting for their answer."""

    def unit(tx: Tx) -> None:
        tx.run_later("insert_events", conversation_id=conv, items=_events(*seqs, data=data),
                     now_us=now_us)

    return unit


def _events(*seqs: int, data: str = "{}") -> str:
    return json.dumps([{"seq": s, "type": "probe", "run_id": None, "data": data} for s in seqs],
                      ensure_ascii=False)


async def test_s7_written_later_values_read_back_as_bound(store: Store) -> None:
    conv = await _conversation(store)
    data = json.dumps({"text": AWKWARD}, ensure_ascii=False)
    big = 2**62
    await store.transact(_journal(conv, big, data=data, now_us=2**53 + 1), route=conv)
    [event] = [e for e in await Conversations(store, SystemClock()).events(conv)
               if e.seq == big]
    assert event.data == {"text": AWKWARD}
    assert event.at_us == 2**53 + 1


async def test_s7_units_of_one_group_sending_the_same_statements_all_commit(
    store: Store,
) -> None:
    convs = [await _conversation(store) for _ in range(12)]

    def twice(conv: str, n: int) -> Callable[[Tx], None]:
        # Twice the same statement in one unit, and in every unit of the group.
        first, second = _journal(conv, 500 + n), _journal(conv, 600 + n)

        def unit(tx: Tx) -> None:
            first(tx)
            second(tx)

        return unit

    for round_ in range(3):  # the statements are prepared by then: the same again
        await asyncio.gather(*(store.transact(twice(conv, round_), route=conv)
                               for conv in convs))
    for conv in convs:
        assert {500, 501, 502, 600, 601, 602} <= await _seqs(store, conv)


async def test_s7_a_refused_write_fails_its_unit_and_the_rest_commit(store: Store) -> None:
    conv = await _conversation(store)
    others = [await _conversation(store) for _ in range(4)]
    # The journal's key, twice: the server refuses the second.
    twice = _journal(conv, 700, 700)
    results = await asyncio.gather(
        *(store.transact(_journal(o, 700), route=o) for o in others[:2]),
        store.transact(twice, route=conv),
        *(store.transact(_journal(o, 700), route=o) for o in others[2:]),
        return_exceptions=True,
    )
    assert isinstance(results[2], IntegrityViolationError)
    assert [r for n, r in enumerate(results) if n != 2] == [None] * 4
    assert 700 not in await _seqs(store, conv)
    for other in others:
        assert 700 in await _seqs(store, other)


@pytest.mark.postgres_only
async def test_s1_postgres_group_writes_and_commit_are_one_round_trip(
    pg_store: PostgresStore,
) -> None:
    conv = await _conversation(pg_store)
    for n in range(8):  # the first prepares its statement on the connection, the rest not
        trips = pg_store.round_trips
        journal = _journal(conv, 800 + n)

        def unit(tx: Tx, journal: Callable[[Tx], None] = journal) -> None:
            journal(tx)
            tx.run_later("heartbeat", now_us=1, instance_id="nobody")

        await pg_store.transact(unit, route=conv)
        # BEGIN, the writes and COMMIT together; no second try the careful way.
        assert pg_store.round_trips - trips == 1
    assert {800 + n for n in range(8)} <= await _seqs(pg_store, conv)


@pytest.mark.postgres_only
async def test_s7_postgres_a_group_too_large_for_the_socket_still_commits(
    pg_store: PostgresStore,
) -> None:
    trips = pg_store.round_trips

    def many(tx: Tx) -> None:
        # Megabytes of statements, and their answers, in one round trip.
        for _ in range(20_000):
            tx.run_later("heartbeat", now_us=1, instance_id="nobody")

    await asyncio.wait_for(pg_store.transact(many), 60)
    assert pg_store.round_trips - trips == 1
