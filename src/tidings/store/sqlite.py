"""SQLite: the embedded default. One file in WAL mode, one writer, group commit on the loop.

Units of work run on the event loop and are group-committed by the store's one writer
(:mod:`tidings.store.sqlite_writer` says how, and when a group commits on the writer's thread);
the WAL is copied back into the database file by checkpoints of the store's own
(:mod:`tidings.store.sqlite_checkpoint`); connections, transactions and error classification
are :mod:`tidings.store.sqlite_tx`. This module opens, migrates and closes the store and holds
what is neither:

- reads run on the loop too, in a snapshot of a read-only connection (WAL readers never block
  the writer);
- an instance's liveness mark is an exclusive ``flock`` held on a sidecar file for the
  process's life: it vanishes with the process.

Durability: ``synchronous=FULL`` (the default) fsyncs the WAL at every commit, so a committed
unit survives power loss. ``synchronous=NORMAL`` fsyncs only at checkpoints: a crash of the
process loses nothing, but a power loss or OS crash can roll back the commits made since the
last checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tidings.errors import DatabasePathError, StoreError
from tidings.store.base import Store, Tx
from tidings.store.jobs import Job
from tidings.store.sqlite_checkpoint import Checkpointer
from tidings.store.sqlite_tx import (
    PAGE_SIZE,
    SqliteTx,
    Synchronous,
    check_path,
    classify,
    connect,
)
from tidings.store.sqlite_writer import LoopWriter
from tidings.types import InstanceId

T = TypeVar("T")

# classify is imported from here by tests, as PostgreSQL's is from its store's module.
__all__ = ("SqliteStore", "classify", "describe_sqlite_schema")


class SqliteStore(Store):
    """A SQLite database file in WAL mode with a group-committing writer on the event loop."""

    dialect = "sqlite"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "FULL",
        busy_timeout_ms: int = 5_000,
        max_group: int = 512,
    ) -> None:
        super().__init__()
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError("synchronous must be FULL or NORMAL")
        self.path = Path(path)
        self.synchronous: Synchronous = synchronous
        self._busy_timeout_ms = busy_timeout_ms
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reader: sqlite3.Connection | None = None
        self._loop_writer = LoopWriter(
            queries=self.queries, wakeups=self.wakeups, feed=self.feed,
            checkpoints=Checkpointer(self.path, self._connect),
            synchronous=synchronous, busy_timeout_ms=busy_timeout_ms, max_group=max_group,
        )
        self._closed = False
        self._instance_locks: dict[str, int] = {}

    @property
    def _writer(self) -> sqlite3.Connection | None:
        """The writer's connection, once the store is open (tests read its settings)."""
        return self._loop_writer.conn

    @property
    def groups_committed(self) -> int:
        """Transactions the writer committed (a bench figure)."""
        return self._loop_writer.groups_committed

    @property
    def units_committed(self) -> int:
        """Units of work in those transactions (a bench figure)."""
        return self._loop_writer.units_committed

    # -- opening -------------------------------------------------------------------------------

    def _connect(self, *, readonly: bool = False) -> sqlite3.Connection:
        return connect(self.path, synchronous=self.synchronous,
                       busy_timeout_ms=self._busy_timeout_ms, readonly=readonly)

    def _open_sync(self) -> None:
        check_path(self.path)
        try:
            conn = self._connect()
        except sqlite3.Error as exc:
            if getattr(exc, "sqlite_errorname", "") == "SQLITE_CANTOPEN":
                raise DatabasePathError(
                    str(self.path), f"SQLite cannot open it ({exc}): check the path, its "
                    "permissions and the file system") from exc
            raise classify(exc) from exc
        try:
            # A new file gets 1 KiB pages (an existing one keeps its own: this is ignored once
            # the file holds a page). A unit writes a few small rows into several tables and
            # indexes; every page it touches is a WAL frame of its commit, and a 4 KiB frame
            # costs more to write and fsync than a 1 KiB one (measured: commits 7-25 % cheaper).
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            if mode is None or next(iter(mode.values())).lower() != "wal":
                raise StoreError(f"could not put {self.path} in WAL mode")
            self._migrate(conn)
        except sqlite3.Error as exc:
            conn.close()
            raise classify(exc) from exc
        except BaseException:
            conn.close()
            raise
        try:
            # The writer never waits inside SQLite for another process's lock: that would
            # block the event loop. Its BEGIN is retried instead (see
            # LoopWriter._begin_when_free). Nor does it checkpoint inside its commits (see
            # LoopWriter._checkpoint_if_due).
            conn.execute("PRAGMA busy_timeout = 0")
            conn.execute("PRAGMA wal_autocheckpoint = 0")
            self._reader = self._connect(readonly=True)
        except sqlite3.Error as exc:
            conn.close()
            raise classify(exc) from exc
        self._loop_writer.conn = conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            self.apply_migrations(SqliteTx(self.queries, conn), str(self.path))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @classmethod
    async def open(cls, path: str | os.PathLike[str], **options: Any) -> SqliteStore:
        store = cls(path, **options)
        await asyncio.to_thread(store._open_sync)
        return store

    # -- units of work: the writer's (sqlite_writer.py), on the store's event loop ------------

    def _loop_for(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif loop is not self._loop:
            raise StoreError("this SQLite store belongs to another event loop")
        return loop

    async def transact(
        self, unit: Callable[[Tx], T], *, route: str | None = None, durable: bool = True
    ) -> T:
        return await self.submit(unit, route=route, durable=durable)

    def submit(
        self, unit: Callable[[Tx], T], *, route: str | None = None, durable: bool = True
    ) -> asyncio.Future[T]:
        # One writer, in submission order: every route is already ordered. The unit runs now,
        # in the caller's step, unless units are waiting already.
        if self._closed:
            raise StoreError("the store is closed")
        loop = self._loop_for()
        future: asyncio.Future[T] = loop.create_future()
        self._loop_writer.submit(Job(unit, loop, future, durable=durable))
        return future

    # -- readers: on the loop, in a snapshot of their own ----------------------------------------

    async def read(self, unit: Callable[[Tx], T]) -> T:
        if self._closed:
            raise StoreError("the store is closed")
        self._loop_for()
        conn = self._reader
        assert conn is not None
        try:
            conn.execute("BEGIN")
        except sqlite3.Error as exc:
            raise classify(exc) from exc
        try:
            return unit(SqliteTx(self.queries, conn))
        except sqlite3.Error as exc:
            raise classify(exc) from exc
        finally:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("COMMIT")

    # -- instance liveness: an exclusive flock held on a sidecar file for the process's life --

    def _lock_dir(self) -> Path:
        return self.path.with_name(self.path.name + ".instances")

    async def hold_instance(self, instance_id: InstanceId) -> None:
        folder = self._lock_dir()
        folder.mkdir(exist_ok=True)
        fd = os.open(folder / f"{instance_id}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._instance_locks[instance_id] = fd

    def instance_alive(self, tx: Tx, instance_id: InstanceId) -> bool:
        if instance_id in self._instance_locks:
            return True
        lock_path = self._lock_dir() / f"{instance_id}.lock"
        try:
            fd = os.open(lock_path, os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True  # another process holds it: that instance is running
        finally:
            os.close(fd)  # closing drops our lock, if we took it
        with contextlib.suppress(FileNotFoundError):
            lock_path.unlink()
        return False

    # -- closing -------------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._loop_writer.close()  # queued units commit, every caller is answered
        for conn in (self._reader, self._writer):
            if conn is not None:
                conn.close()
        for instance_id, fd in self._instance_locks.items():
            with contextlib.suppress(FileNotFoundError):
                (self._lock_dir() / f"{instance_id}.lock").unlink()
            os.close(fd)
        self._instance_locks.clear()

    # -- schema --------------------------------------------------------------------------------

    async def describe_schema(self) -> dict[str, Any]:
        return await asyncio.to_thread(describe_sqlite_schema, self.path)


def describe_sqlite_schema(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Tables, columns, indexes (with predicates) and foreign keys, normalised for comparison."""
    conn = sqlite3.connect(path)
    try:
        described: dict[str, Any] = {}
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' AND name != 'schema_migrations' ORDER BY name"
            )
        ]
        for table in tables:
            columns = [
                (r[1], r[2].upper(), bool(r[3]), r[4], r[5])
                for r in conn.execute(f"PRAGMA table_xinfo('{table}')")
            ]
            fks = sorted(
                (r[2], r[3], r[4], r[6])
                for r in conn.execute(f"PRAGMA foreign_key_list('{table}')")
            )
            described[f"table {table}"] = {"columns": columns, "foreign_keys": fks}
        for name, table, sql in conn.execute(
            "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index' "
            "AND name NOT LIKE 'sqlite_%' ORDER BY name"
        ):
            described[f"index {name}"] = {"table": table, "sql": " ".join(sql.split())}
        for name, table in conn.execute(
            "SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' "
            "AND name LIKE 'sqlite_autoindex_%' ORDER BY name"
        ):
            cols = [r[2] for r in conn.execute(f"PRAGMA index_info('{name}')")]
            described[f"unique {table}({','.join(cols)})"] = True
        return described
    finally:
        conn.close()
