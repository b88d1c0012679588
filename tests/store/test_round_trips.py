"""S1: the PostgreSQL store counts its round trips -- each time it waits for the server's answer:
a statement sent alone, or a pipeline up to its sync -- so a unit's cost in round trips is a
figure one can watch (``round_trips`` over ``units_committed``)."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.conftest import drop_postgres_database, fresh_postgres_database
from tidings.store import Tx
from tidings.store.postgres import PostgresStore, PostgresTx


def reads(n: int) -> Callable[[Tx], None]:
    def unit(tx: Tx) -> None:
        for _ in range(n):
            tx.all("applied_migrations")  # an answer the unit waits for

    return unit


def writes(tx: Tx) -> None:
    for _ in range(3):  # answers nobody waits for
        tx.run_later("heartbeat", now_us=1, instance_id="nobody")


@pytest.mark.postgres_only
async def test_s1_postgres_counts_the_round_trips_of_its_units(postgres_template: str) -> None:
    url = fresh_postgres_database(postgres_template)
    store = await PostgresStore.open(url)
    try:

        async def spent(unit: Callable[[Tx], None]) -> tuple[int, int]:
            trips, units = store.round_trips, store.units_committed
            await store.transact(unit)
            return store.round_trips - trips, store.units_committed - units

        # BEGIN goes with the first statement whose answer the unit needs, each further one is
        # a round trip of its own, and COMMIT one more.
        assert await spent(reads(1)) == (2, 1)
        assert await spent(reads(3)) == (4, 1)
        # Writes whose answers nobody needs go with COMMIT, BEGIN too: one round trip.
        assert await spent(writes) == (1, 1)
        # A lone statement commits on its own (autocommit): one round trip, no BEGIN.
        trips = store.round_trips
        await store.transact_query("applied_migrations")
        assert store.round_trips - trips == 1

        # Outside a writer's group, a transaction counts its own: each statement sent alone,
        # and the writes it held back, sent together in one pipeline, once.
        with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
            tx = PostgresTx(store.queries, conn)
            for _ in range(4):
                tx.all("applied_migrations")
            assert tx.round_trips == 4
            writes(tx)
            tx.flush()
            assert tx.round_trips == 5
    finally:
        await store.close()
        drop_postgres_database(postgres_template, url)
