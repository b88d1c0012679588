"""PostgreSQL: the scale-out backend. Several runtime processes on several hosts, one database.

Units of work run on pooled connections in worker threads (psycopg's blocking API releases
the GIL during I/O), so the event loop never waits on the database and concurrent units commit
concurrently -- PostgreSQL shares WAL flushes between them.

A unit that fails before its commit with a transient error (serialization failure, deadlock,
a connection lost) is run again on a fresh connection, a bounded number of times: units only
touch the database, so running one again is safe. A connection lost *during* COMMIT is
different: the transaction may or may not have landed, and the caller is told exactly that
(:class:`CommitOutcomeUnknownError`), never success.

Wake-ups: the publish statement NOTIFYs ``tidings_signals``; one listener connection per
process LISTENs and fans the conversation ids out in-process. The same connection holds a
session advisory lock keyed by the instance id: the lock is the instance's liveness mark, and
it vanishes with the process (or its connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import select
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from tidings.errors import (
    CommitOutcomeUnknownError,
    ConnectionLostError,
    CorruptDatabaseError,
    DatabaseBusyError,
    DiskFullError,
    IntegrityViolationError,
    ReadOnlyDatabaseError,
    SchemaError,
    StoreError,
)
from tidings.store.base import Query, Row, Store, Tx, load_migrations, split_statements, sql_text
from tidings.types import ConversationId, InstanceId

T = TypeVar("T")

_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_][A-Za-z0-9_]*)")
_MIGRATION_LOCK = 7_311_001  # pg_advisory_xact_lock key serialising concurrent migrators
_RETRIES = 3
_TRANSIENT = ("40001", "40P01")  # serialization_failure, deadlock_detected


def to_psycopg(statement: str) -> str:
    """Rewrite ``:name`` parameters to ``%(name)s``, leaving ``::type`` casts alone."""
    return _PARAM.sub(r"%(\1)s", statement.replace("%", "%%"))


def classify(exc: BaseException) -> StoreError:
    """Map a psycopg error to a TidingsError by SQLSTATE class, never by message text."""
    if isinstance(exc, psycopg.OperationalError) and getattr(exc, "sqlstate", None) is None:
        return ConnectionLostError(str(exc))
    sqlstate: str = getattr(exc, "sqlstate", None) or ""
    cls = sqlstate[:2]
    if cls == "08" or sqlstate in ("57P01", "57P02", "57P03"):
        return ConnectionLostError(str(exc), db_code=sqlstate)
    if sqlstate in _TRANSIENT or sqlstate == "55P03":
        return DatabaseBusyError(str(exc), db_code=sqlstate)
    if sqlstate in ("53100",):
        return DiskFullError(str(exc), db_code=sqlstate)
    if cls == "23":
        return IntegrityViolationError(str(exc), db_code=sqlstate)
    if sqlstate == "25006":
        return ReadOnlyDatabaseError(str(exc), db_code=sqlstate)
    if cls == "XX":
        return CorruptDatabaseError(str(exc), db_code=sqlstate)
    return StoreError(str(exc), db_code=sqlstate or None)


def _transient(exc: BaseException) -> bool:
    sqlstate = getattr(exc, "sqlstate", None) or ""
    lost = isinstance(exc, psycopg.OperationalError) and (not sqlstate or sqlstate[:2] == "08")
    return lost or sqlstate in _TRANSIENT or sqlstate in ("57P01",)


class PostgresTx(Tx):
    def __init__(self, queries: dict[str, Query], conn: psycopg.Connection[Row]) -> None:
        super().__init__(queries)
        self._conn = conn

    def _run(self, statement: str, params: dict[str, Any]) -> tuple[list[Row], int]:
        cursor = self._conn.execute(statement, params)
        rows = cursor.fetchall() if cursor.description is not None else []
        return rows, cursor.rowcount


def _pg_queries(queries: dict[str, Query]) -> dict[str, Query]:
    return {
        name: Query(name, tuple(to_psycopg(s) for s in q.statements))
        for name, q in queries.items()
    }


class PostgresStore(Store):
    """A PostgreSQL database shared by any number of runtime processes."""

    dialect = "postgres"

    def __init__(self, dsn: str, *, pool_size: int = 16, application_name: str = "tidings") -> None:
        super().__init__()
        self.queries = _pg_queries(self.queries)
        self.dsn = dsn
        self._pool: ConnectionPool[psycopg.Connection[Row]] = ConnectionPool(
            dsn,
            connection_class=psycopg.Connection[Row],
            min_size=min(2, pool_size),
            max_size=pool_size,
            open=False,
            kwargs={"row_factory": dict_row, "application_name": application_name},
        )
        self._executor = ThreadPoolExecutor(pool_size, thread_name_prefix="tidings-pg")
        self._listener: psycopg.Connection[Any] | None = None
        self._listener_thread: threading.Thread | None = None
        self._listener_lock = threading.Lock()
        self._stop_r, self._stop_w = os.pipe()
        self._liveness: psycopg.Connection[Any] | None = None
        self._held: set[str] = set()
        self._closed = False

    # -- opening -------------------------------------------------------------------------------

    @classmethod
    async def open(cls, dsn: str, **options: Any) -> PostgresStore:
        store = cls(dsn, **options)
        try:
            await asyncio.to_thread(store._open_sync)
        except psycopg.Error as exc:
            await store.close()
            raise classify(exc) from exc
        except BaseException:
            await store.close()
            raise
        return store

    def _open_sync(self) -> None:
        self._pool.open(wait=True, timeout=30)
        with self._pool.connection() as conn:
            self._migrate(conn)
        listener = psycopg.connect(self.dsn, autocommit=True, application_name="tidings-listen")
        listener.execute("LISTEN tidings_signals")
        self._listener = listener
        self._listener_thread = threading.Thread(
            target=self._listen_loop, name="tidings-pg-listen", daemon=True
        )
        self._listener_thread.start()

    def _migrate(self, conn: psycopg.Connection[Row]) -> None:
        migrations = load_migrations(self.dialect)
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            for statement in split_statements(sql_text(self.dialect, "bootstrap.sql")):
                conn.execute(statement)
            applied = {r["version"] for r in conn.execute("SELECT version FROM schema_migrations")}
            for migration in migrations:
                if migration.version in applied:
                    continue
                for statement in migration.statements:
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
        newest = max(applied, default=0)
        if newest > len(migrations):
            raise SchemaError(
                f"the database has schema version {newest}; this tidings knows {len(migrations)}"
            )

    def _listen_loop(self) -> None:
        # select() on the socket, not psycopg's notifies() generator: waiting then releases the
        # GIL completely, so the listener costs the units of work nothing while idle.
        while not self._closed:
            listener = self._listener
            assert listener is not None
            try:
                ready, _, _ = select.select([listener.fileno(), self._stop_r], [], [], 1.0)
                if listener.fileno() not in ready:
                    continue
                listener.pgconn.consume_input()
                while (notify := listener.pgconn.notifies()) is not None:
                    self.wakeups.notify(notify.extra.decode("utf-8", "replace"))
            except (psycopg.Error, OSError, ValueError):
                if self._closed:
                    return
                # The listener's connection died; wake-ups missed meanwhile are re-found by
                # polling and the sweep.
                self._reconnect_listener()

    def _reconnect_listener(self) -> None:
        with self._listener_lock:
            with contextlib.suppress(psycopg.Error):
                if self._listener is not None:
                    self._listener.close()
            while not self._closed:
                try:
                    listener = psycopg.connect(
                        self.dsn, autocommit=True, application_name="tidings-listen"
                    )
                    listener.execute("LISTEN tidings_signals")
                    self._listener = listener
                    return
                except psycopg.Error:
                    time.sleep(0.5)

    # -- units of work -------------------------------------------------------------------------

    def _transact_sync(self, unit: Callable[[Tx], T]) -> T:
        for attempt in range(1, _RETRIES + 1):
            try:
                conn_cm = self._pool.connection()
                conn = conn_cm.__enter__()
            except psycopg.Error as exc:
                raise classify(exc) from exc
            try:
                tx = PostgresTx(self.queries, conn)
                try:
                    result = unit(tx)
                except psycopg.Error as exc:
                    with contextlib.suppress(psycopg.Error):
                        conn.rollback()
                    if _transient(exc) and attempt < _RETRIES:
                        continue
                    raise classify(exc) from exc
                except BaseException:
                    with contextlib.suppress(psycopg.Error):
                        conn.rollback()
                    raise
                try:
                    conn.commit()
                except psycopg.Error as exc:
                    if isinstance(exc, psycopg.OperationalError) and conn.closed:
                        raise CommitOutcomeUnknownError(str(exc)) from exc
                    with contextlib.suppress(psycopg.Error):
                        conn.rollback()
                    if _transient(exc) and attempt < _RETRIES:
                        continue
                    raise classify(exc) from exc
                for callback in tx._take_after_commit():
                    callback()
                return result
            finally:
                conn_cm.__exit__(None, None, None)
        raise AssertionError("unreachable")  # pragma: no cover

    def _autocommit_sync(self, statement: str, params: dict[str, Any]) -> list[Row]:
        for attempt in range(1, _RETRIES + 1):
            try:
                with self._pool.connection() as conn:
                    conn.autocommit = True
                    try:
                        cursor = conn.execute(statement, params)
                        return cursor.fetchall() if cursor.description is not None else []
                    finally:
                        if not conn.closed:
                            conn.autocommit = False
            except psycopg.Error as exc:
                sqlstate = getattr(exc, "sqlstate", None) or ""
                if sqlstate in _TRANSIENT and attempt < _RETRIES:
                    continue  # rolled back by the server: safe to run again
                if _transient(exc):
                    # The statement is its own transaction: lost with the connection, it may
                    # or may not have committed.
                    raise CommitOutcomeUnknownError(str(exc)) from exc
                raise classify(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def transact_query(self, query: str, **params: Any) -> list[Row]:
        """One named query in autocommit when it is one statement: one round trip, no BEGIN."""
        statements = self.queries[query].statements
        if len(statements) != 1:
            return await super().transact_query(query, **params)
        if self._closed:
            raise StoreError("the store is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, self._autocommit_sync, statements[0], params
        )

    async def transact(self, unit: Callable[[Tx], T]) -> T:
        if self._closed:
            raise StoreError("the store is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._transact_sync, unit)

    def _read_sync(self, unit: Callable[[Tx], T]) -> T:
        for attempt in range(1, _RETRIES + 1):
            try:
                with self._pool.connection() as conn:
                    conn.read_only = True
                    try:
                        with conn.transaction():
                            return unit(PostgresTx(self.queries, conn))
                    finally:
                        if not conn.closed:
                            conn.read_only = False
            except psycopg.Error as exc:
                # A read changes nothing, so running it again after a lost connection is safe.
                if _transient(exc) and attempt < _RETRIES:
                    continue
                raise classify(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def read(self, unit: Callable[[Tx], T]) -> T:
        if self._closed:
            raise StoreError("the store is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._read_sync, unit)

    def wake(self, tx: Tx, conversation_id: ConversationId) -> None:
        """Nothing to do here: the publish statement's NOTIFY reaches this process too."""

    # -- instance liveness: a session advisory lock on a connection of its own ----------------

    async def hold_instance(self, instance_id: InstanceId) -> None:
        def hold() -> None:
            if self._liveness is None:
                self._liveness = psycopg.connect(
                    self.dsn, autocommit=True, application_name="tidings-instance"
                )
            self._liveness.execute(
                "SELECT pg_advisory_lock(hashtextextended(%s, 0))", (instance_id,)
            )
            self._held.add(instance_id)

        try:
            await asyncio.to_thread(hold)
        except psycopg.Error as exc:
            raise classify(exc) from exc

    def instance_alive(self, tx: Tx, instance_id: InstanceId) -> bool:
        if instance_id in self._held:
            return True
        assert isinstance(tx, PostgresTx)
        # A transaction-level try-lock: it succeeds only if no session holds the instance's lock,
        # and it is released when this transaction ends.
        row = tx._conn.execute(
            "SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0)) AS free", (instance_id,)
        ).fetchone()
        return not (row and row["free"])

    # -- closing -------------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        os.write(self._stop_w, b"x")
        if self._listener_thread is not None:
            await asyncio.to_thread(self._listener_thread.join)
        os.close(self._stop_r)
        os.close(self._stop_w)
        with self._listener_lock:
            if self._listener is not None:
                self._listener.close()
        if self._liveness is not None:
            self._liveness.close()  # releases the instance's advisory lock
        self._executor.shutdown(wait=True)
        await asyncio.to_thread(self._pool.close)

    # -- schema --------------------------------------------------------------------------------

    async def describe_schema(self) -> dict[str, Any]:
        def describe(tx: Tx) -> dict[str, Any]:
            assert isinstance(tx, PostgresTx)
            return describe_postgres_schema(tx._conn)

        return await self.read(describe)


def describe_postgres_schema(conn: psycopg.Connection[Row]) -> dict[str, Any]:
    """Tables, columns, indexes and constraints of the public schema, normalised."""
    described: dict[str, Any] = {}
    for row in conn.execute(
        "SELECT table_name, column_name, data_type, is_nullable, column_default, is_identity "
        "FROM information_schema.columns WHERE table_schema = 'public' "
        "AND table_name != 'schema_migrations' ORDER BY table_name, ordinal_position"
    ):
        described.setdefault(f"table {row['table_name']}", []).append(
            (row["column_name"], row["data_type"], row["is_nullable"], row["column_default"],
             row["is_identity"])
        )
    for row in conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' "
        "AND tablename != 'schema_migrations' ORDER BY indexname"
    ):
        described[f"index {row['indexname']}"] = row["indexdef"]
    for row in conn.execute(
        "SELECT c.conname, c.conrelid::regclass::text AS tbl, pg_get_constraintdef(c.oid) AS def "
        "FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace "
        "WHERE n.nspname = 'public' AND c.conrelid::regclass::text != 'schema_migrations' "
        "ORDER BY c.conname"
    ):
        described[f"constraint {row['tbl']}.{row['conname']}"] = row["def"]
    return described
