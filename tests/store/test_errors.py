"""S1: database failures reach callers as TidingsError subclasses, classified by code.

Each backend's ``classify`` maps a driver error by its code (SQLite's result-code name,
PostgreSQL's SQLSTATE), never by its message text. The errors here are real ones, provoked
on real databases; the store-level tests check what a caller of ``transact`` / ``open_store``
actually sees.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import drop_postgres_database, fresh_postgres_database
from tidings import (
    ConnectionLostError,
    DatabaseBusyError,
    DiskFullError,
    ManualClock,
    Outbox,
    StoreError,
    TidingsError,
    Tx,
)
from tidings.errors import (
    CommitOutcomeUnknownError,
    CorruptDatabaseError,
    IntegrityViolationError,
    InvalidInputError,
    ReadOnlyDatabaseError,
)
from tidings.store import open_store
from tidings.store import postgres as pg_store
from tidings.store import sqlite as sqlite_store
from tidings.types import Published

# -- SQLite: classify() on real sqlite3 errors ---------------------------------------------------


def _sqlite_error(action: str, tmp_path: Path) -> sqlite3.Error:
    """Provoke one real sqlite3 error and return it."""
    path = tmp_path / f"{action}.db"
    if action == "not_a_database":
        path.write_bytes(b"this file holds notes, not a database\n" * 200)
    conn = sqlite3.connect(path, isolation_level=None, timeout=0)
    other: sqlite3.Connection | None = None
    try:
        if action == "not_a_database":
            conn.execute("PRAGMA journal_mode = WAL")
        elif action == "busy":
            conn.execute("CREATE TABLE t (x INTEGER)")
            other = sqlite3.connect(path, isolation_level=None, timeout=0)
            other.execute("BEGIN IMMEDIATE")
            conn.execute("BEGIN IMMEDIATE")
        elif action == "constraint":
            conn.execute("CREATE TABLE t (x INTEGER UNIQUE)")
            conn.execute("INSERT INTO t VALUES (1)")
            conn.execute("INSERT INTO t VALUES (1)")
        elif action == "read_only":
            conn.execute("CREATE TABLE t (x INTEGER)")
            other = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
            other.execute("INSERT INTO t VALUES (1)")
        elif action == "syntax":
            conn.execute("SELEKT 1")
    except sqlite3.Error as exc:
        return exc
    finally:
        if other is not None:
            other.close()
        conn.close()
    raise AssertionError(f"{action} raised nothing")


@pytest.mark.parametrize(
    ("action", "expected", "code_prefix"),
    [
        ("busy", DatabaseBusyError, "SQLITE_BUSY"),
        ("constraint", IntegrityViolationError, "SQLITE_CONSTRAINT"),
        ("not_a_database", CorruptDatabaseError, "SQLITE_NOTADB"),
        ("read_only", ReadOnlyDatabaseError, "SQLITE_READONLY"),
    ],
)
def test_s1_sqlite_classify_by_result_code(
    tmp_path: Path, action: str, expected: type[StoreError], code_prefix: str
) -> None:
    error = sqlite_store.classify(_sqlite_error(action, tmp_path))
    assert type(error) is expected
    assert isinstance(error, TidingsError)
    assert error.db_code is not None
    assert error.db_code.startswith(code_prefix)
    assert error.code == expected.code


def test_s1_sqlite_classify_unknown_code_is_plain_store_error(tmp_path: Path) -> None:
    error = sqlite_store.classify(_sqlite_error("syntax", tmp_path))
    assert type(error) is StoreError
    assert error.db_code == "SQLITE_ERROR"


# -- SQLite: what a caller of the store sees -----------------------------------------------------


async def test_s1_sqlite_locked_database_is_busy_error(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "locked.db"
    store = await open_store(str(path), busy_timeout_ms=50)
    ob = Outbox(store, clock=clock)
    await ob.instance.start()
    holder = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the database
        with pytest.raises(DatabaseBusyError) as caught:
            await store.transact(lambda tx: ob.publish(tx, "conv-a", "task.exited", {}))
        assert caught.value.code == "database_busy"
        assert caught.value.db_code is not None
        assert caught.value.db_code.startswith("SQLITE_BUSY")
        holder.execute("ROLLBACK")

        # Nothing was written, and the store works again once the other writer is gone.
        assert (await ob.stats("conv-a")).backlog == 0
        await store.transact(lambda tx: ob.publish(tx, "conv-a", "task.exited", {}))
        assert (await ob.stats("conv-a")).backlog == 1
    finally:
        holder.close()
        await ob.instance.close()
        await store.close()


async def test_s1_sqlite_constraint_violation_is_integrity_error(
    tmp_path: Path, clock: ManualClock
) -> None:
    async with Outbox.open(str(tmp_path / "fk.db"), clock=clock) as ob:
        # A signal correlated with an operation that does not exist violates a foreign key.
        with pytest.raises(IntegrityViolationError) as caught:
            await ob.store.transact(
                lambda tx: ob.publish(
                    tx, "conv-a", "task.exited", {}, operation_id="op_does_not_exist"
                )
            )
        assert caught.value.db_code is not None
        assert caught.value.db_code.startswith("SQLITE_CONSTRAINT")
        stats = await ob.stats("conv-a")
        assert (stats.backlog, stats.ready) == (0, 0)
        # The admission counter rolled back with the unit: the conversation still takes signals.
        await ob.store.transact(lambda tx: ob.publish(tx, "conv-a", "task.exited", {}))
        assert (await ob.stats("conv-a")).backlog == 1


async def test_s1_sqlite_file_that_is_not_a_database_is_corrupt_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"this file holds notes, not a database\n" * 200)
    with pytest.raises(CorruptDatabaseError) as caught:
        await open_store(str(path))
    assert caught.value.code == "corrupt_database"
    assert caught.value.db_code == "SQLITE_NOTADB"


# -- PostgreSQL: classify() on real psycopg errors -----------------------------------------------


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh migrated PostgreSQL database (skips without ``TIDINGS_TEST_POSTGRES_DSN``)."""
    admin: str = request.getfixturevalue("postgres_template")
    url = fresh_postgres_database(admin)
    try:
        yield url
    finally:
        drop_postgres_database(admin, url)


@pytest.fixture
def pg_admin(request: pytest.FixtureRequest) -> str:
    admin: str = request.getfixturevalue("postgres_template")
    return admin


def _raise_sqlstate(url: str, sqlstate: str) -> psycopg.Error:
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            conn.execute(
                f"DO $$ BEGIN RAISE EXCEPTION 'provoked' USING ERRCODE = '{sqlstate}'; END $$"
            )
        except psycopg.Error as exc:
            return exc
    raise AssertionError(f"{sqlstate} raised nothing")


@pytest.mark.postgres_only
@pytest.mark.parametrize(
    ("sqlstate", "expected"),
    [
        ("40001", DatabaseBusyError),  # serialization_failure
        ("40P01", DatabaseBusyError),  # deadlock_detected
        ("55P03", DatabaseBusyError),  # lock_not_available
        ("53100", DiskFullError),  # disk_full
        ("23503", IntegrityViolationError),  # foreign_key_violation
        ("25006", ReadOnlyDatabaseError),  # read_only_sql_transaction
        ("XX001", CorruptDatabaseError),  # data_corrupted
        ("42P01", StoreError),  # undefined_table: nothing a caller can act on
    ],
)
def test_s1_postgres_classify_by_sqlstate(
    pg_admin: str, sqlstate: str, expected: type[StoreError]
) -> None:
    raw = _raise_sqlstate(pg_admin, sqlstate)
    assert raw.sqlstate == sqlstate
    error = pg_store.classify(raw)
    assert type(error) is expected
    assert error.db_code == sqlstate


@pytest.mark.postgres_only
def test_s1_postgres_classify_real_lock_and_unique_errors(pg_url: str) -> None:
    with psycopg.connect(pg_url) as holder, psycopg.connect(pg_url) as waiter:
        holder.execute("CREATE TABLE probe (x integer UNIQUE)")
        holder.execute("INSERT INTO probe VALUES (1)")
        holder.commit()
        holder.execute("SELECT * FROM probe FOR UPDATE")
        with pytest.raises(psycopg.Error) as locked:
            waiter.execute("SELECT * FROM probe FOR UPDATE NOWAIT")
        waiter.rollback()
        assert type(pg_store.classify(locked.value)) is DatabaseBusyError
        holder.rollback()

        with pytest.raises(psycopg.Error) as duplicate:
            waiter.execute("INSERT INTO probe VALUES (1)")
        waiter.rollback()
        error = pg_store.classify(duplicate.value)
        assert type(error) is IntegrityViolationError
        assert error.db_code == "23505"


@pytest.mark.postgres_only
def test_s1_postgres_classify_unreachable_server_is_connection_lost() -> None:
    with pytest.raises(psycopg.OperationalError) as caught:
        psycopg.connect("postgresql://postgres@127.0.0.1:1/nothing", connect_timeout=2)
    assert type(pg_store.classify(caught.value)) is ConnectionLostError


@pytest.mark.postgres_only
def test_s1_postgres_classify_terminated_backend_is_connection_lost(pg_admin: str) -> None:
    with psycopg.connect(pg_admin) as victim:
        pid = victim.info.backend_pid
        with psycopg.connect(pg_admin, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
        with pytest.raises(psycopg.OperationalError) as caught:
            victim.execute("SELECT 1")
    assert type(pg_store.classify(caught.value)) is ConnectionLostError


# -- PostgreSQL: what a caller of the store sees -------------------------------------------------


def _terminate(admin: str, url: str, *, state: str | None = None) -> int:
    """Terminate tidings' pooled connections to ``url``'s database (optionally in ``state``)."""
    dbname = url.rsplit("/", 1)[1].split("?", 1)[0]
    query = (
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
        "WHERE datname = %s AND application_name = 'tidings' AND pid <> pg_backend_pid()"
    )
    params: list[str] = [dbname]
    if state is not None:
        query += " AND state = %s"
        params.append(state)
    with psycopg.connect(admin, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.postgres_only
async def test_s1_postgres_terminated_pool_connections_never_fake_success(
    pg_url: str, pg_admin: str, clock: ManualClock
) -> None:
    async with Outbox.open(pg_url, clock=clock) as ob:
        assert _terminate(pg_admin, pg_url) >= 1
        try:
            published: Published | None = await ob.store.transact(
                lambda tx: ob.publish(tx, "conv-a", "task.exited", {}, idempotency_key="k1")
            )
        except ConnectionLostError:
            published = None
        lease = await ob.claim("conv-a")
        if published is None:
            assert lease.deliveries == ()  # lost before commit: nothing landed
        else:
            # Success was reported, so the signal is there -- exactly once.
            assert [d.event_id for d in lease.deliveries] == [published.event_id]
            assert (await ob.stats("conv-a")).backlog == 1


@pytest.mark.postgres_only
async def test_s1_postgres_connection_lost_mid_unit_is_retried_transparently(
    pg_url: str, pg_admin: str, clock: ManualClock
) -> None:
    async with Outbox.open(pg_url, clock=clock) as ob:
        runs: list[int] = []

        def unit(tx: Tx) -> Published:
            runs.append(1)
            published = ob.publish(tx, "conv-a", "task.exited", {"run": len(runs)})
            if len(runs) == 1:
                # Our own connection dies between two statements of the unit.
                assert _terminate(pg_admin, pg_url, state="idle in transaction") == 1
            tx.one("get_operation", operation_id="op_probe")
            return published

        published = await ob.store.transact(unit)
        assert len(runs) == 2  # the unit ran again on a fresh connection
        lease = await ob.claim("conv-a")
        assert [d.event_id for d in lease.deliveries] == [published.event_id]
        assert [d.payload for d in lease.deliveries] == [{"run": 2}]
        assert (await ob.stats("conv-a")).backlog == 1


@pytest.mark.postgres_only
async def test_s1_postgres_connection_lost_at_commit_is_outcome_unknown(
    pg_url: str, pg_admin: str, clock: ManualClock
) -> None:
    async with Outbox.open(pg_url, clock=clock) as ob:
        runs: list[int] = []

        def unit(tx: Tx) -> Published:
            runs.append(1)
            published = ob.publish(tx, "conv-a", "task.exited", {})
            # The connection dies after the unit's last statement, before COMMIT is answered.
            assert _terminate(pg_admin, pg_url, state="idle in transaction") == 1
            return published

        with pytest.raises(CommitOutcomeUnknownError) as caught:
            await ob.store.transact(unit)
        assert caught.value.code == "commit_outcome_unknown"
        assert len(runs) == 1  # never run again: it might have landed
        # Here it did not land (the backend died before COMMIT arrived).
        assert (await ob.stats("conv-a")).backlog == 0


@pytest.mark.postgres_only
async def test_s1_postgres_lock_timeout_is_busy_error(pg_url: str, clock: ManualClock) -> None:
    impatient = pg_url + "?options=-c%20lock_timeout%3D100"
    async with Outbox.open(impatient, clock=clock) as ob:
        with psycopg.connect(pg_url) as holder:
            holder.execute("LOCK TABLE signal_queues IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(DatabaseBusyError) as caught:
                await ob.store.transact(
                    lambda tx: ob.publish(tx, "conv-a", "task.exited", {})
                )
            assert caught.value.db_code == "55P03"
        # The lock is gone: nothing was written by the refused unit, and the store works.
        assert (await ob.stats("conv-a")).backlog == 0
        await ob.store.transact(lambda tx: ob.publish(tx, "conv-a", "task.exited", {}))
        assert (await ob.stats("conv-a")).backlog == 1


@pytest.mark.postgres_only
async def test_s1_postgres_constraint_violation_is_integrity_error(
    pg_url: str, clock: ManualClock
) -> None:
    async with Outbox.open(pg_url, clock=clock) as ob:
        with pytest.raises(IntegrityViolationError) as caught:
            await ob.store.transact(
                lambda tx: ob.publish(
                    tx, "conv-a", "task.exited", {}, operation_id="op_does_not_exist"
                )
            )
        assert caught.value.db_code == "23503"
        assert (await ob.stats("conv-a")).backlog == 0


# -- H4: a value a backend cannot hold is the caller's bad input, never a store error ----------


def _events_after(**changed: Any) -> dict[str, Any]:
    return {"conversation_id": "conv-a", "after_seq": 0, "limit": 10, **changed}


@pytest.mark.parametrize("after_seq", [2**63, 2**64, -(2**63) - 1, 10**40])
async def test_h4_an_integer_beyond_64_bits_is_invalid_input_on_both_backends(
    outbox: Outbox, after_seq: int
) -> None:
    ob = outbox
    params = _events_after(after_seq=after_seq)
    # A read: SQLite's driver overflowed (OverflowError: a 500 over HTTP) and PostgreSQL
    # compared it as numeric (a 200); both now refuse it before it is sent.
    with pytest.raises(InvalidInputError) as caught:
        await ob.store.read(lambda tx: tx.all("events_after", **params))
    assert not isinstance(caught.value, StoreError)
    assert "after_seq" in caught.value.message

    # A write in the same unit rolls back with it: nothing was written.
    def unit(tx: Tx) -> None:
        ob.publish(tx, "conv-a", "task.exited", {})
        tx.all("events_after", **params)

    with pytest.raises(InvalidInputError):
        await ob.store.transact(unit, route="conv-a")
    assert (await ob.stats("conv-a")).backlog == 0
    # The bounds themselves are values both hold.
    for edge in (2**63 - 1, -(2**63)):
        bounded = _events_after(after_seq=edge)
        assert await ob.store.read(lambda tx: tx.all("events_after", **bounded)) == []  # noqa: B023


@pytest.mark.parametrize("text", ["conv\x00a", "\x00"])
async def test_h4_text_with_nul_is_invalid_input_on_postgres_and_held_by_sqlite(
    outbox: Outbox, text: str
) -> None:
    ob = outbox
    params = _events_after(conversation_id=text)
    if ob.store.dialect == "sqlite":  # SQLite's text holds NUL: an ordinary value
        assert await ob.store.read(lambda tx: tx.all("events_after", **params)) == []
        return
    # PostgreSQL's text cannot: the driver's refusal was a StoreError (a 503 over HTTP).
    with pytest.raises(InvalidInputError) as caught:
        await ob.store.read(lambda tx: tx.all("events_after", **params))
    assert not isinstance(caught.value, StoreError)
    assert "conversation_id" in caught.value.message

    def unit(tx: Tx) -> None:
        ob.publish(tx, "conv-a", "task.exited", {})
        tx.run_later("events_after", **params)  # held for the pipeline: refused all the same

    with pytest.raises(InvalidInputError):
        await ob.store.transact(unit, route="conv-a")
    assert (await ob.stats("conv-a")).backlog == 0
