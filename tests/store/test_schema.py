"""S2: the schema, its migrations, and the named queries both dialects share.

The schema that the numbered migrations build must equal the one ``schema.sql`` describes (so
the file a reader trusts is the truth), migrating is idempotent, and a database from a newer
tidings is refused rather than written to.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

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


class Empty:
    """Brand-new, empty databases of one backend (no template, no migration), dropped at the
    end of the test, and what a test reads or runs on them without tidings."""

    def __init__(self, backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.backend = backend
        self._tmp_path = tmp_path
        self._admin: str | None = (
            request.getfixturevalue("postgres_template") if backend == "postgres" else None)
        self._made: list[str] = []

    def new(self) -> str:
        """The URL of another empty database."""
        if self._admin is None:
            url = str(self._tmp_path / f"empty-{len(self._made)}.db")
        else:
            url = fresh_postgres_database(self._admin, template=None)
        self._made.append(url)
        return url

    def drop(self) -> None:
        if self._admin is not None:
            for url in self._made:
                drop_postgres_database(self._admin, url)

    def execute(self, url: str, statements: Iterable[str]) -> None:
        """Run ``statements`` in one transaction, outside tidings."""
        if self._admin is None:
            conn = sqlite3.connect(url)
            try:
                for statement in statements:
                    conn.execute(statement)
                conn.commit()
            finally:
                conn.close()
            return
        with psycopg.connect(url) as pg:
            for statement in statements:
                pg.execute(statement)

    def describe(self, url: str) -> dict[str, Any]:
        """The schema as the store describes it, read outside tidings."""
        if self._admin is None:
            return describe_sqlite_schema(url)
        with psycopg.connect(url, row_factory=dict_row) as pg:
            return describe_postgres_schema(pg)

    def ledger(self, url: str) -> list[tuple[int, str]]:
        """The migrations the database records as applied."""
        query = "SELECT version, name FROM schema_migrations ORDER BY version"
        if self._admin is None:
            conn = sqlite3.connect(url)
            try:
                return [(int(v), str(n)) for v, n in conn.execute(query).fetchall()]
            finally:
                conn.close()
        with psycopg.connect(url) as pg:
            return [(int(v), str(n)) for v, n in pg.execute(query).fetchall()]

    def insert_version(self, url: str, version: int) -> None:
        """Record a migration this tidings does not know, as a newer tidings would."""
        self.execute(url, ["INSERT INTO schema_migrations (version, name) "
                           f"VALUES ({version:d}, 'from_the_future')"])


@pytest.fixture(params=DIALECTS)
def empty(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Empty]:
    """Empty databases on each backend; ids ``sqlite`` and ``postgres``."""
    made = Empty(request.param, tmp_path, request)
    try:
        yield made
    finally:
        made.drop()


def _known_ledger(dialect: str) -> list[tuple[int, str]]:
    return [(m.version, m.name) for m in load_migrations(dialect)]


# -- schema.sql is what the migrations build -----------------------------------------------------


async def test_s2_migrations_build_schema_sql(empty: Empty) -> None:
    store = await open_store(empty.new())
    try:
        migrated = await store.describe_schema()
    finally:
        await store.close()

    declared = empty.new()
    empty.execute(declared, split_statements(sql_text(empty.backend, "schema.sql")))

    assert migrated == empty.describe(declared)
    # The comparison is only worth something if it sees the tables S2 names.
    for table in ("operations", "signal_events", "signal_deliveries", "instances"):
        assert f"table {table}" in migrated


# -- idempotent migrations ----------------------------------------------------------------------


async def test_s2_reopening_changes_nothing_and_keeps_data(
    empty: Empty, clock: ManualClock
) -> None:
    url = empty.new()
    async with Outbox.open(url, clock=clock) as ob:
        published = await ob.store.transact(
            lambda tx: ob.publish(tx, "conv-a", "task.exited", {"task_key": "t1"})
        )
        first = await ob.store.describe_schema()

    async with Outbox.open(url, clock=clock) as ob:
        second = await ob.store.describe_schema()
        lease = await ob.claim("conv-a")
        assert [d.event_id for d in lease.deliveries] == [published.event_id]

    assert first == second
    assert empty.ledger(url) == _known_ledger(empty.backend)


async def test_s2_migration_statements_rerun_cleanly(empty: Empty) -> None:
    """Additive and idempotent: replaying every migration on a migrated database is a no-op."""
    url = empty.new()
    store = await open_store(url)
    before = await store.describe_schema()
    await store.close()

    empty.execute(url, [statement for migration in load_migrations(empty.backend)
                        for statement in migration.statements])
    assert empty.describe(url) == before


# -- a newer database is refused ----------------------------------------------------------------


async def test_s2_newer_schema_is_refused(empty: Empty) -> None:
    url = empty.new()
    store = await open_store(url)
    await store.close()
    future = len(load_migrations(empty.backend)) + 1
    empty.insert_version(url, future)

    with pytest.raises(SchemaError) as caught:
        await open_store(url)
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
