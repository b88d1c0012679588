"""PostgreSQL: the scale-out backend. Several runtime processes on several hosts, one database.

Units of work are group-committed, as on SQLite, but optimistically: a few writer threads,
each with its own connection, take whatever units are queued and run them in one transaction
(``BEGIN``, each unit's statements, ``COMMIT``), answering every caller after the commit. A
round trip costs more than a statement here, so a savepoint per unit would double the cost of
the common case; instead, when a unit fails, the transaction is rolled back, that unit alone
gets its error, and the others run again in a fresh transaction. That is safe because a unit
only touches the database. A group's first attempt ran nothing twice; each retry removes the
failed unit, so a group is retried at most as often as it has units.

A transient error (serialization failure, deadlock, a connection lost before ``COMMIT``) runs
the group again, a bounded number of times. A connection lost *during* ``COMMIT`` is different:
the transaction may or may not have landed, and every caller of the group is told exactly that
(:class:`CommitOutcomeUnknownError`), never success. A lone single-statement unit (a claim) runs
in autocommit: one round trip, no ``BEGIN``.

Reads run on a small pool of read-only transactions. Wake-ups: the publish statement NOTIFYs
``tidings_signals``; one listener connection per process LISTENs and fans the conversation ids
out in-process. Another connection holds a session advisory lock keyed by the instance id: the
lock is the instance's liveness mark, and it vanishes with the process (or its connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import re
import select
import threading
import time
import zlib
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
    InvalidInputError,
    ReadOnlyDatabaseError,
    StoreError,
)
from tidings.store.base import Query, Row, Store, Tx, bound_values
from tidings.store.jobs import STOP, Job, committed, next_group, settle
from tidings.types import ConversationId, InstanceId

T = TypeVar("T")

_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_][A-Za-z0-9_]*)")
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


_Later = tuple[tuple[str, ...], dict[str, Any], int | None, Callable[[], Exception] | None]


class PostgresTx(Tx):
    """Statements whose answers a unit does not need wait in ``_later`` and go to the server
    together, in one pipeline (one round trip), before the next statement that needs an
    answer or at the end of the unit."""

    def __init__(
        self, queries: dict[str, Query], conn: psycopg.Connection[Row], *, binary: bool = False
    ) -> None:
        super().__init__(queries)
        self._conn = conn
        self._later: list[_Later] = []
        # Reads take results in binary: no text round trip for numbers, and bytea (result
        # envelopes) arrives as bytes instead of twice its size in hex.
        self._binary = binary

    def run_ddl(self, statement: str) -> None:
        self.flush()
        self._conn.execute(statement)  # no parameters: '%' in DDL stays literal

    def _bind(self, params: dict[str, Any]) -> dict[str, Any]:
        # PostgreSQL's text cannot hold NUL (SQLite's can): refused as bad input, before the
        # driver refuses it as a database error.
        for name, item in bound_values(super()._bind(params)):
            if isinstance(item, str) and "\x00" in item:
                raise InvalidInputError(f"{name} must not contain NUL characters")
        return params

    def _run(self, statement: str, params: dict[str, Any]) -> tuple[list[Row], int]:
        self.flush()
        cursor = self._conn.execute(statement, params, binary=self._binary)
        rows = cursor.fetchall() if cursor.description is not None else []
        return rows, cursor.rowcount

    def run_later(
        self,
        query: str,
        *,
        expect: int | None = None,
        mismatch: Callable[[], Exception] | None = None,
        **params: Any,
    ) -> None:
        self._later.append((self._statements(query), self._bind(params), expect, mismatch))

    def flush(self) -> None:
        if not self._later:
            return
        later, self._later = self._later, []
        if len(later) == 1 and len(later[0][0]) == 1:
            (statement,), params, expect, mismatch = later[0]
            checks = [(self._conn.execute(statement, params), expect, mismatch)]
        else:
            checks = []
            with self._conn.pipeline():
                for statements, params, expect, mismatch in later:
                    cursors = [self._conn.execute(st, params) for st in statements]
                    checks.append((cursors[-1], expect, mismatch))
        for cursor, expect, mismatch in checks:
            if expect is not None and cursor.rowcount != expect:
                if mismatch is not None:
                    raise mismatch()
                raise AssertionError(f"a statement changed {cursor.rowcount} rows, not {expect}")


class _CommitUnknown(Exception):
    """COMMIT was sent and the connection died before its answer."""


def _fetch(cursor: psycopg.Cursor[Row]) -> list[Row]:
    return cursor.fetchall() if cursor.description is not None else []


def _rollback(conn: psycopg.Connection[Row]) -> None:
    with contextlib.suppress(psycopg.Error):
        if not conn.closed:
            conn.execute("ROLLBACK")


def _spoke_while_idle(conn: psycopg.Connection[Row]) -> bool:
    """Whether an idle connection has something to read: the server only speaks unasked to
    say goodbye (a terminated backend, a shutdown), so such a connection is not used."""
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return True
    return bool(readable)


def _release_liveness(conn: psycopg.Connection[Any]) -> None:
    # Release the liveness mark before returning: a server notices a closed session a moment
    # later, and whoever reconciles next must already see this instance gone.
    with contextlib.suppress(psycopg.Error):
        conn.execute("SELECT pg_advisory_unlock_all()")
    conn.close()


def _pg_queries(queries: dict[str, Query]) -> dict[str, Query]:
    return {
        name: Query(name, tuple(to_psycopg(s) for s in q.statements))
        for name, q in queries.items()
    }


class PostgresStore(Store):
    """A PostgreSQL database shared by any number of runtime processes."""

    dialect = "postgres"

    def __init__(
        self,
        dsn: str,
        *,
        writers: int = 2,
        readers: int = 4,
        max_group: int = 64,
        application_name: str = "tidings",
    ) -> None:
        super().__init__()
        if writers < 1 or readers < 1 or max_group < 1:
            raise ValueError("writers, readers and max_group must be positive")
        self.queries = _pg_queries(self.queries)
        self.dsn = dsn
        self._application_name = application_name
        self._max_group = max_group
        self._queues: list[queue.SimpleQueue[Job | object]] = [
            queue.SimpleQueue() for _ in range(writers)
        ]
        self._next = 0
        self._writer_threads = [
            threading.Thread(
                target=self._writer_loop, args=(jobs,), name=f"tidings-pg-writer-{n}", daemon=True
            )
            for n, jobs in enumerate(self._queues)
        ]
        self._pool: ConnectionPool[psycopg.Connection[Row]] = ConnectionPool(
            dsn,
            connection_class=psycopg.Connection[Row],
            min_size=1,
            max_size=readers,
            open=False,
            kwargs={"row_factory": dict_row, "application_name": application_name},
        )
        self._executor = ThreadPoolExecutor(readers, thread_name_prefix="tidings-pg-read")
        self.groups_committed = 0
        self.units_committed = 0
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

    def _connect(self) -> psycopg.Connection[Row]:
        return psycopg.connect(
            self.dsn,
            autocommit=True,  # transactions are opened explicitly, one per group
            row_factory=dict_row,
            application_name=self._application_name,
        )

    def _open_sync(self) -> None:
        with psycopg.connect(self.dsn, row_factory=dict_row) as conn:
            self._migrate(conn)
        self._pool.open(wait=True, timeout=30)
        for thread in self._writer_threads:
            thread.start()
        listener = psycopg.connect(self.dsn, autocommit=True, application_name="tidings-listen")
        listener.execute("LISTEN tidings_signals")
        self._listener = listener
        self._listener_thread = threading.Thread(
            target=self._listen_loop, name="tidings-pg-listen", daemon=True
        )
        self._listener_thread.start()

    def _migrate(self, conn: psycopg.Connection[Row]) -> None:
        with conn.transaction():
            self.apply_migrations(PostgresTx(self.queries, conn), "the database")

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

    # -- units of work: optimistic group commit ------------------------------------------------

    async def transact(self, unit: Callable[[Tx], T], *, route: str | None = None) -> T:
        return await self._submit(unit, None, {}, route)  # type: ignore[no-any-return]

    async def transact_query(
        self, query: str, *, route: str | None = None, **params: Any
    ) -> list[Row]:
        statements = self.queries[query].statements
        if len(statements) != 1:
            return await super().transact_query(query, route=route, **params)
        result: list[Row] = await self._submit(
            lambda tx: tx.all(query, **params), statements[0], params, route
        )
        return result

    async def _submit(
        self,
        unit: Callable[[Tx], Any],
        statement: str | None,
        params: dict[str, Any],
        route: str | None,
    ) -> Any:
        if self._closed:
            raise StoreError("the store is closed")
        loop = asyncio.get_running_loop()
        job = Job(unit, loop, loop.create_future(), statement, params)
        # Units about one conversation go to one writer: two writers never hold locks on the
        # same conversation's rows, so concurrent groups cannot deadlock over them.
        if route is None:
            self._next = (self._next + 1) % len(self._queues)
            index = self._next
        else:
            index = zlib.crc32(route.encode("utf-8")) % len(self._queues)
        self._queues[index].put(job)
        return await job.future

    def _writer_loop(self, jobs: queue.SimpleQueue[Job | object]) -> None:
        conn: psycopg.Connection[Row] | None = None
        try:
            while True:
                group, stop = next_group(jobs, self._max_group)
                if group:
                    conn = self._run_group(conn, group)
                    settle(group)
                if stop:
                    return
        finally:
            if conn is not None:
                conn.close()

    def _run_group(
        self, conn: psycopg.Connection[Row] | None, group: list[Job]
    ) -> psycopg.Connection[Row] | None:
        """Commit every unit of ``group`` it can; give each of the others its error."""
        pending = list(group)
        retries = 0
        while pending:
            if conn is not None and not conn.closed and _spoke_while_idle(conn):
                conn.close()  # terminated or broken while idle: reconnect before sending
            if conn is None or conn.closed:
                try:
                    conn = self._connect()
                except psycopg.Error as exc:
                    for job in pending:
                        job.error = classify(exc)
                    return None
            try:
                lone = pending[0]
                if len(pending) == 1 and lone.statement is not None:
                    lone.result = _fetch(conn.execute(lone.statement, lone.params))
                    return conn
                failed = self._attempt(conn, pending)
            except _CommitUnknown as unknown:
                for job in pending:
                    job.error = CommitOutcomeUnknownError(str(unknown.__cause__))
                return conn
            except psycopg.Error as exc:  # BEGIN, COMMIT or an autocommit statement failed
                _rollback(conn)
                sqlstate = getattr(exc, "sqlstate", None) or ""
                autocommitted = len(pending) == 1 and pending[0].statement is not None
                if autocommitted and sqlstate not in _TRANSIENT and _transient(exc):
                    # The statement was its own transaction and the connection went with it.
                    pending[0].error = CommitOutcomeUnknownError(str(exc))
                    return conn
                if _transient(exc) and retries < _RETRIES:
                    retries += 1
                    continue
                for job in pending:
                    job.error = classify(exc)
                return conn
            if failed is None:
                self.groups_committed += 1
                self.units_committed += len(pending)
                committed(pending, self.wakeups)
                return conn
            job, error = failed
            _rollback(conn)
            if isinstance(error, psycopg.Error) and _transient(error) and retries < _RETRIES:
                retries += 1
                continue
            job.error = classify(error) if isinstance(error, psycopg.Error) else error
            pending.remove(job)
        return conn

    def _attempt(
        self, conn: psycopg.Connection[Row], pending: list[Job]
    ) -> tuple[Job, BaseException] | None:
        """Run every unit in one transaction and commit; the first unit that failed, if any."""
        conn.execute("BEGIN")
        for job in pending:
            tx = PostgresTx(self.queries, conn)
            try:
                job.result = job.unit(tx)
                tx.flush()
            except BaseException as exc:  # the unit's caller gets it
                return job, exc
            job.took(tx)
        try:
            conn.execute("COMMIT")
        except psycopg.Error as exc:
            sqlstate = getattr(exc, "sqlstate", None) or ""
            if conn.closed or not sqlstate or sqlstate[:2] == "08" or sqlstate[:3] == "57P":
                raise _CommitUnknown() from exc
            raise  # the server answered: the transaction did not commit
        return None

    def _read_sync(self, unit: Callable[[Tx], T]) -> T:
        for attempt in range(1, _RETRIES + 1):
            try:
                with self._pool.connection() as conn:
                    conn.read_only = True
                    try:
                        with conn.transaction():
                            return unit(PostgresTx(self.queries, conn, binary=True))
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
        for jobs in self._queues:
            jobs.put(STOP)
        for thread in self._writer_threads:
            if thread.is_alive():
                await asyncio.to_thread(thread.join)
        os.write(self._stop_w, b"x")
        if self._listener_thread is not None:
            await asyncio.to_thread(self._listener_thread.join)
        os.close(self._stop_r)
        os.close(self._stop_w)
        with self._listener_lock:
            if self._listener is not None:
                self._listener.close()
        if self._liveness is not None:
            await asyncio.to_thread(_release_liveness, self._liveness)
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
