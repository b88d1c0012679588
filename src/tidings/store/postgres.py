"""PostgreSQL: the scale-out backend. Several runtime processes on several hosts, one database.

Units of work are group-committed by a few writer threads (:mod:`tidings.store.postgres_writer`
says how, and what a caller is told when a connection dies during ``COMMIT``); statements,
transactions and error classification are :mod:`tidings.store.postgres_tx`. This module opens
and closes the store and holds the connections that are neither:

- reads run on a small pool of read-only connections in autocommit: each statement is its own
  read-only transaction (one round trip, no ``BEGIN``/``COMMIT``), which is what a read
  committed transaction gives a unit anyway, a fresh snapshot per statement; a read is run
  again after a lost connection (it changes nothing);
- wake-ups: the publish statement NOTIFYs ``tidings_signals``; one listener connection per
  process LISTENs and fans the conversation ids out in-process
  (:mod:`tidings.store.postgres_listen`, which also connects again when it dies);
- the feed: journal hints (NOTIFYed by the statement that writes a conversation's events, so
  they are sent at commit) and live messages (deltas of answers being written, sent on a
  connection of their own, :mod:`tidings.store.postgres_feed`) arrive on ``tidings_feed`` at
  the same listener, which hands them to :attr:`Store.feed`;
- another connection holds a session advisory lock keyed by the instance id: the lock is the
  instance's liveness mark, and it vanishes with the process (or its connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from tidings.errors import StoreError
from tidings.store.base import Row, Store, Tx, bind
from tidings.store.feed import LIVE_PREFIX, PAYLOAD_BYTES
from tidings.store.jobs import Answerer, Job
from tidings.store.postgres_feed import FeedPublisher
from tidings.store.postgres_listen import Listener
from tidings.store.postgres_tx import (
    RETRIES,
    PostgresTx,
    classify,
    pg_queries,
    to_psycopg,
    transient,
)
from tidings.store.postgres_writer import GroupWriter
from tidings.types import ConversationId, InstanceId

T = TypeVar("T")

# classify, PostgresTx and to_psycopg are imported from here by callers and tests.
__all__ = (
    "PostgresStore", "PostgresTx", "classify", "describe_postgres_schema", "to_psycopg",
)


def _read_only(conn: psycopg.Connection[Any]) -> None:
    """A reader's connection: every statement on it is a read-only transaction."""
    conn.execute("SET default_transaction_read_only = on")


def _release_liveness(conn: psycopg.Connection[Any]) -> None:
    # Release the liveness mark before returning: a server notices a closed session a moment
    # later, and whoever reconciles next must already see this instance gone.
    with contextlib.suppress(psycopg.Error):
        conn.execute("SELECT pg_advisory_unlock_all()")
    conn.close()


class PostgresStore(Store):
    """A PostgreSQL database shared by any number of runtime processes."""

    dialect = "postgres"
    feed_reaches_peers = True
    feed_payload_bytes = PAYLOAD_BYTES - len(LIVE_PREFIX)

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
        self.queries = pg_queries(self.queries)
        self.dsn = dsn
        self._application_name = application_name
        self._writer = GroupWriter(
            queries=self.queries, connect=self._connect, wakeups=self.wakeups, feed=self.feed,
            writers=writers, max_group=max_group,
        )
        self._publisher = FeedPublisher(dsn)
        self._pool: ConnectionPool[psycopg.Connection[Row]] = ConnectionPool(
            dsn,
            connection_class=psycopg.Connection[Row],
            min_size=1,
            max_size=readers,
            open=False,
            kwargs={
                "row_factory": dict_row, "application_name": application_name,
                "autocommit": True,
            },
            configure=_read_only,
        )
        self._executor = ThreadPoolExecutor(readers, thread_name_prefix="tidings-pg-read")
        self._listener = Listener(dsn, self.wakeups, self.feed)
        self._liveness: psycopg.Connection[Any] | None = None
        self._held: set[str] = set()
        self._closed = False
        # Callers are answered on their loop a slice per pass (jobs.Answerer), as SQLite's are.
        self._answerers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Answerer] = (
            weakref.WeakKeyDictionary())

    @property
    def groups_committed(self) -> int:
        """Transactions the writers committed (a bench figure)."""
        return self._writer.groups_committed

    @property
    def units_committed(self) -> int:
        """Units of work in those transactions (a bench figure)."""
        return self._writer.units_committed

    @property
    def round_trips(self) -> int:
        """The times the writers waited for the server's answer (a statement, or a pipeline up
        to its sync), over all their units: a bench figure, per unit over ``units_committed``."""
        return self._writer.round_trips

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
        self._writer.start()
        self._listener.start()

    def _migrate(self, conn: psycopg.Connection[Row]) -> None:
        with conn.transaction():
            self.apply_migrations(PostgresTx(self.queries, conn), "the database")

    # -- units of work: group-committed by the writers ---------------------------------------

    async def transact(
        self, unit: Callable[[Tx], T], *, route: str | None = None, durable: bool = True
    ) -> T:
        return await self._submit(unit, None, {}, route, durable)  # type: ignore[no-any-return]

    claims_in_one_statement = True

    async def transact_query(
        self, query: str, *, route: str | None = None, durable: bool = True, **params: Any
    ) -> list[Row]:
        statements = self.queries[query].statements
        if len(statements) != 1:
            return await super().transact_query(query, route=route, durable=durable, **params)
        # Bound here too: run alone, the statement goes to the driver without a Tx.
        bound = bind(dict(params), refuse_nul=True, adapt_list=lambda value: value)
        result: list[Row] = await self._submit(
            lambda tx: tx.all(query, **params), statements[0], bound, route, durable
        )
        return result

    async def _submit(
        self,
        unit: Callable[[Tx], Any],
        statement: str | None,
        params: dict[str, Any],
        route: str | None,
        durable: bool,
    ) -> Any:
        if self._closed:
            raise StoreError("the store is closed")
        loop = asyncio.get_running_loop()
        answerer = self._answerers.get(loop)
        if answerer is None:
            answerer = self._answerers[loop] = Answerer()
        job = Job(unit, loop, loop.create_future(), statement, params, durable=durable,
                  answerer=answerer)
        self._writer.submit(job, route)
        return await job.future

    def _read_sync(self, unit: Callable[[Tx], T]) -> T:
        for attempt in range(1, RETRIES + 1):
            try:
                with self._pool.connection() as conn:
                    return unit(PostgresTx(self.queries, conn, binary=True))
            except psycopg.Error as exc:
                # A read changes nothing, so running it again after a lost connection is safe.
                if transient(exc) and attempt < RETRIES:
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

    async def publish_feed(self, messages: Sequence[str]) -> None:
        if not self._closed:
            await self._publisher.publish(messages)

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
        rows, _ = tx._run(  # after what the unit queued, inside its transaction
            "SELECT pg_try_advisory_xact_lock(hashtextextended(%(instance_id)s, 0)) AS free",
            {"instance_id": instance_id},
        )
        return not (rows and rows[0]["free"])

    # -- closing -------------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._listener.end()
        await self._publisher.close()
        await self._writer.stop()
        answerer = self._answerers.get(asyncio.get_running_loop())
        if answerer is not None:
            answerer.flush()  # every caller learns its outcome now, not in later passes
        await self._listener.stop()
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
