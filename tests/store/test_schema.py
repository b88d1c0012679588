"""S2: the schema, its migrations, and the named queries both dialects share.

The schema that the numbered migrations build must equal the one ``schema.sql`` describes (so
the file a reader trusts is the truth), migrating is idempotent, and a database from a newer
tidings is refused rather than written to.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.conftest import drop_postgres_database, fresh_postgres_database
from tidings import ManualClock, Outbox
from tidings.errors import SchemaError
from tidings.store import open_store
from tidings.store.base import load_migrations, load_queries, split_statements, sql_text
from tidings.store.postgres import describe_postgres_schema
from tidings.store.sqlite import describe_sqlite_schema

DIALECTS = ("sqlite", "postgres")
SRC = Path(__file__).resolve().parents[2] / "src" / "tidings"


@pytest.fixture
def pg_admin(request: pytest.FixtureRequest) -> str:
    """The admin DSN of the test server (skips without ``TIDINGS_TEST_POSTGRES_DSN``)."""
    admin: str = request.getfixturevalue("postgres_template")
    return admin


@pytest.fixture
def pg_empty(pg_admin: str) -> Iterator[str]:
    """A brand-new, empty PostgreSQL database (no template): its URL."""
    url = fresh_postgres_database(pg_admin, template=None)
    try:
        yield url
    finally:
        drop_postgres_database(pg_admin, url)


def _pg_ledger(url: str) -> list[tuple[int, str]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT version, name FROM schema_migrations ORDER BY version")
        return [(int(v), str(n)) for v, n in rows.fetchall()]


def _sqlite_ledger(path: Path) -> list[tuple[int, str]]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT version, name FROM schema_migrations ORDER BY version")
        return [(int(v), str(n)) for v, n in rows.fetchall()]
    finally:
        conn.close()


def _known_ledger(dialect: str) -> list[tuple[int, str]]:
    return [(m.version, m.name) for m in load_migrations(dialect)]


# -- schema.sql is what the migrations build -----------------------------------------------------


async def test_s2_sqlite_migrations_build_schema_sql(tmp_path: Path) -> None:
    store = await open_store(str(tmp_path / "migrated.db"))
    try:
        migrated = await store.describe_schema()
    finally:
        await store.close()

    declared_path = tmp_path / "declared.db"
    conn = sqlite3.connect(declared_path)
    try:
        for statement in split_statements(sql_text("sqlite", "schema.sql")):
            conn.execute(statement)
        conn.commit()
    finally:
        conn.close()
    declared = describe_sqlite_schema(declared_path)

    assert migrated == declared
    # The comparison is only worth something if it sees the tables S2 names.
    for table in ("operations", "signal_events", "signal_deliveries", "instances"):
        assert f"table {table}" in migrated


async def test_s2_postgres_migrations_build_schema_sql(pg_admin: str, pg_empty: str) -> None:
    migrated_url = fresh_postgres_database(pg_admin, template=None)
    try:
        store = await open_store(migrated_url)
        try:
            migrated = await store.describe_schema()
        finally:
            await store.close()
    finally:
        drop_postgres_database(pg_admin, migrated_url)

    with psycopg.connect(pg_empty, row_factory=dict_row) as conn:
        for statement in split_statements(sql_text("postgres", "schema.sql")):
            conn.execute(statement)
        conn.commit()
        declared = describe_postgres_schema(conn)

    assert migrated == declared
    for table in ("operations", "signal_events", "signal_deliveries", "instances"):
        assert f"table {table}" in migrated


# -- idempotent migrations ----------------------------------------------------------------------


async def test_s2_sqlite_reopening_changes_nothing_and_keeps_data(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "twice.db"
    async with Outbox.open(str(path), clock=clock) as ob:
        published = await ob.store.transact(
            lambda tx: ob.publish(tx, "conv-a", "task.exited", {"task_key": "t1"})
        )
        first = await ob.store.describe_schema()

    async with Outbox.open(str(path), clock=clock) as ob:
        second = await ob.store.describe_schema()
        lease = await ob.claim("conv-a")
        assert [d.event_id for d in lease.deliveries] == [published.event_id]

    assert first == second
    assert _sqlite_ledger(path) == _known_ledger("sqlite")


async def test_s2_postgres_reopening_changes_nothing_and_keeps_data(
    pg_empty: str, clock: ManualClock
) -> None:
    async with Outbox.open(pg_empty, clock=clock) as ob:
        published = await ob.store.transact(
            lambda tx: ob.publish(tx, "conv-a", "task.exited", {"task_key": "t1"})
        )
        first = await ob.store.describe_schema()

    async with Outbox.open(pg_empty, clock=clock) as ob:
        second = await ob.store.describe_schema()
        lease = await ob.claim("conv-a")
        assert [d.event_id for d in lease.deliveries] == [published.event_id]

    assert first == second
    assert _pg_ledger(pg_empty) == _known_ledger("postgres")


async def test_s2_sqlite_migration_statements_rerun_cleanly(tmp_path: Path) -> None:
    """Additive and idempotent: replaying every migration on a migrated file is a no-op."""
    path = tmp_path / "replay.db"
    store = await open_store(str(path))
    before = await store.describe_schema()
    await store.close()

    conn = sqlite3.connect(path)
    try:
        for migration in load_migrations("sqlite"):
            for statement in migration.statements:
                conn.execute(statement)
        conn.commit()
    finally:
        conn.close()
    assert describe_sqlite_schema(path) == before


async def test_s2_postgres_migration_statements_rerun_cleanly(pg_empty: str) -> None:
    store = await open_store(pg_empty)
    before = await store.describe_schema()
    await store.close()

    with psycopg.connect(pg_empty, row_factory=dict_row) as conn:
        for migration in load_migrations("postgres"):
            for statement in migration.statements:
                conn.execute(statement)
        conn.commit()
        assert describe_postgres_schema(conn) == before


# -- a newer database is refused ----------------------------------------------------------------


async def test_s2_sqlite_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    store = await open_store(str(path))
    await store.close()
    future = len(load_migrations("sqlite")) + 1
    conn = sqlite3.connect(path)
    try:
        conn.execute(
            "INSERT INTO schema_migrations (version, name) VALUES (?, 'from_the_future')",
            (future,),
        )
        conn.commit()
    finally:
        conn.close()

    with pytest.raises(SchemaError) as caught:
        await open_store(str(path))
    assert caught.value.code == "schema_error"
    assert str(future) in caught.value.message


async def test_s2_postgres_newer_schema_is_refused(pg_empty: str) -> None:
    store = await open_store(pg_empty)
    await store.close()
    future = len(load_migrations("postgres")) + 1
    with psycopg.connect(pg_empty) as conn:
        conn.execute(
            "INSERT INTO schema_migrations (version, name) VALUES (%s, 'from_the_future')",
            (future,),
        )

    with pytest.raises(SchemaError) as caught:
        await open_store(pg_empty)
    assert caught.value.code == "schema_error"
    assert str(future) in caught.value.message


# -- the named queries ---------------------------------------------------------------------------


def test_s2_every_query_name_exists_in_both_dialects() -> None:
    sqlite_names = set(load_queries("sqlite"))
    postgres_names = set(load_queries("postgres"))
    assert sqlite_names == postgres_names
    for dialect in DIALECTS:
        for name, query in load_queries(dialect).items():
            assert query.statements, f"{dialect}/queries.sql block {name!r} is empty"


def test_s2_every_query_the_code_runs_is_defined() -> None:
    """A name used in src (``tx.one("claim", …)``, ``cx.tx.run_later("insert_task", …)``) that
    a dialect does not resolve is a crash waiting for the one path that runs it."""
    used: set[str] = set()
    pattern = re.compile(
        r"\.(?:one|all|execute|run_later|transact_query)\(\s*\"([a-z_][a-z0-9_]*)\""
    )
    for source in SRC.rglob("*.py"):
        used.update(pattern.findall(source.read_text("utf-8")))
    assert used, "found no named-query calls in src: the pattern is stale"
    for dialect in DIALECTS:
        missing = used - set(load_queries(dialect))
        assert not missing, f"{dialect}/queries.sql lacks {sorted(missing)}"


def test_s2_migrations_are_numbered_and_additive() -> None:
    for dialect in DIALECTS:
        migrations = load_migrations(dialect)
        assert [m.version for m in migrations] == list(range(1, len(migrations) + 1))
        for migration in migrations:
            for statement in migration.statements:
                text = " ".join(statement.upper().split())
                assert not text.startswith(("DROP ", "DELETE ", "TRUNCATE ")), statement
                assert " DROP COLUMN " not in text, statement
                if text.startswith(("CREATE TABLE", "CREATE INDEX", "CREATE UNIQUE INDEX")):
                    assert "IF NOT EXISTS" in text, statement
