"""The PostgreSQL databases of one test process: clones of the migrated template, reused.

Dropping a database makes PostgreSQL take a checkpoint -- every dirty page of every database
written out and synced -- and cloning one copies the template. Done for each of the suite's
thousand PostgreSQL tests, the two cost 0.2-0.7 s per test under the suite's load, and the
checkpoints slow every test that commits beside them. So a database a test is done with is
renamed (a process the test left behind can no longer reach it), emptied and handed to the next
test, on a thread of this process; one whose schema the test changed is dropped.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid

import psycopg
from psycopg import sql

SIGNATURE = """
SELECT c.relkind::text || ' ' || n.nspname || '.' || c.relname
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
   AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp%'
UNION ALL
SELECT 'function ' || n.nspname || '.' || p.proname
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
UNION ALL
SELECT 'trigger ' || tgname FROM pg_trigger WHERE NOT tgisinternal
UNION ALL
SELECT 'migration ' || version || ' ' || name FROM schema_migrations
ORDER BY 1
"""
"""What a test may not change for its database to be reused: its relations, functions,
triggers and applied migrations."""

RESTART_SEQUENCES = """
SELECT setval(s.seqrelid::regclass, s.seqstart, false) FROM pg_sequence s
"""
"""Every sequence back to its start: those of a column and any other."""

KEPT = frozenset({"schema_migrations"})
"""The template's tables that hold rows of their own (emptying them would undo migrations)."""


def new_name() -> str:
    return f"tidings_t_{uuid.uuid4().hex[:12]}"


def with_dbname(dsn: str, dbname: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    info["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(
        "", **{key: str(value) for key, value in info.items() if value is not None}
    )


def create(admin: str, template: str | None) -> str:
    """A new database, empty or cloned from ``template``; its name."""
    name = new_name()
    with psycopg.connect(admin, autocommit=True) as conn:
        clause = (sql.SQL(" TEMPLATE {}").format(sql.Identifier(template)) if template
                  else sql.SQL(""))
        conn.execute(sql.SQL("CREATE DATABASE {}{}").format(sql.Identifier(name), clause))
    return name


def drop(admin: str, name: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))


class Clones:
    """Clones of ``template`` for this process's tests: :meth:`take` one, :meth:`give_back` it
    when the test ends, :meth:`close` when the process's last test has."""

    def __init__(self, admin: str, template: str) -> None:
        self._admin = admin
        self._template = template
        with psycopg.connect(with_dbname(admin, template), autocommit=True) as conn:
            self._signature = [row[0] for row in conn.execute(SIGNATURE)]
            self._tables = [row[0] for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")
                if row[0] not in KEPT]
        self._ours: set[str] = set()
        self._ready: queue.Queue[str] = queue.Queue()
        self._returned: queue.Queue[str | None] = queue.Queue()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name="test-databases", daemon=True)
        self._thread.start()

    def take(self) -> str:
        """The name of an empty clone of the template: one given back before, else a new one."""
        try:
            return self._ready.get_nowait()
        except queue.Empty:
            name = create(self._admin, self._template)
            self._ours.add(name)
            return name

    def give_back(self, name: str) -> None:
        self._returned.put(name)

    def close(self) -> None:
        self._returned.put(None)
        self._thread.join()
        while not self._ready.empty():
            drop(self._admin, self._ready.get_nowait())
        if self._failure is not None:
            raise self._failure

    def _serve(self) -> None:
        while (name := self._returned.get()) is not None:
            try:
                if name in self._ours:
                    self._ours.discard(name)
                    recycled = self._recycle(name)
                    if recycled is not None:
                        self._ours.add(recycled)
                        self._ready.put(recycled)
                else:
                    drop(self._admin, name)
            except BaseException as exc:  # reported by close()
                self._failure = exc

    def _recycle(self, name: str) -> str | None:
        """Cut the database off from its test, rename and empty it; None if it was dropped."""
        renamed = new_name()
        with psycopg.connect(self._admin, autocommit=True) as conn:
            for _ in range(100):
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                             "WHERE datname = %s", (name,))
                try:
                    conn.execute(sql.SQL("ALTER DATABASE {} RENAME TO {}").format(
                        sql.Identifier(name), sql.Identifier(renamed)))
                    break
                except psycopg.errors.ObjectInUse:  # a connection came back meanwhile
                    time.sleep(0.02)
            else:
                drop(self._admin, name)
                return None
        try:
            with psycopg.connect(with_dbname(self._admin, renamed), autocommit=True) as conn:
                conn.execute("SET lock_timeout = '5s'")
                if [row[0] for row in conn.execute(SIGNATURE)] == self._signature:
                    conn.execute(sql.SQL("TRUNCATE {} CASCADE").format(
                        sql.SQL(", ").join(sql.Identifier(t) for t in self._tables)))
                    conn.execute(RESTART_SEQUENCES)
                    return renamed
        except psycopg.Error:
            pass  # a lock still held, the migrations' table gone: dropped as changed
        drop(self._admin, renamed)
        return None


__all__ = ("Clones", "create", "drop", "with_dbname")
