"""SQLite's connections, transactions and error classification.

A connection is opened with ``isolation_level=None`` (the store says ``BEGIN`` itself) and
``check_same_thread=False`` (the writer's commit and the checkpoints run on the writer's thread),
with foreign keys on, temporary tables in memory and the store's ``synchronous`` setting; a
reader's is ``query_only``. Errors are classified by SQLite's result code name, never by text.
Lists travel as JSON text and are opened in SQL with ``json_each()``.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any, Literal

from tidings.errors import (
    CorruptDatabaseError,
    DatabaseBusyError,
    DatabasePathError,
    DiskFullError,
    IntegrityViolationError,
    ReadOnlyDatabaseError,
    StoreError,
)
from tidings.store.base import Query, Row, Tx

Synchronous = Literal["FULL", "NORMAL"]

PAGE_SIZE = 1024
"""The page size of a database file tidings creates (bytes)."""

_BUSY = {"SQLITE_BUSY", "SQLITE_LOCKED"}
_FULL = {"SQLITE_FULL"}
_READONLY = {"SQLITE_READONLY"}
_CORRUPT = {"SQLITE_CORRUPT", "SQLITE_NOTADB"}


def classify(exc: sqlite3.Error) -> StoreError:
    """Map an sqlite3 error to a TidingsError by its result code name, never by its text."""
    name = getattr(exc, "sqlite_errorname", None) or ""
    base = "_".join(name.split("_")[:2])  # SQLITE_CONSTRAINT_UNIQUE -> SQLITE_CONSTRAINT
    if base in _BUSY:
        return DatabaseBusyError(str(exc), db_code=name)
    if base in _FULL:
        return DiskFullError(str(exc), db_code=name)
    if base in _READONLY:
        return ReadOnlyDatabaseError(str(exc), db_code=name)
    if base in _CORRUPT:
        return CorruptDatabaseError(str(exc), db_code=name)
    if base == "SQLITE_CONSTRAINT":
        return IntegrityViolationError(str(exc), db_code=name)
    return StoreError(str(exc), db_code=name or None)


def check_path(path: Path) -> None:
    """Refuse, naming the path and the reason, a database file that cannot be opened where it
    was asked for (B7). Directories are never created: a mistyped one must not become a new,
    empty database beside the real one."""
    shown = str(path)
    if path.is_dir():
        raise DatabasePathError(shown, "it is a directory; give the path of a file inside it")
    parent = path.parent
    if not parent.exists():
        raise DatabasePathError(
            shown, f"the directory {str(parent)!r} does not exist (tidings does not create "
            "directories: create it, or correct the path)")
    if not parent.is_dir():
        raise DatabasePathError(shown, f"{str(parent)!r} is not a directory")
    if path.exists():
        if not os.access(path, os.R_OK | os.W_OK):
            raise DatabasePathError(shown, "permission denied: the file is not readable and "
                                    "writable by this user")
    elif not os.access(parent, os.W_OK | os.X_OK):
        raise DatabasePathError(
            shown, f"permission denied: this user cannot create files in {str(parent)!r}")


def connect(
    path: Path, *, synchronous: Synchronous, busy_timeout_ms: int, readonly: bool = False
) -> sqlite3.Connection:
    """A connection to ``path`` with the store's settings (raises ``sqlite3.Error``)."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=0)
    try:
        conn.row_factory = _dict_row
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA temp_store = MEMORY")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        if readonly:
            conn.execute("PRAGMA query_only = ON")
    except BaseException:
        conn.close()
        raise
    return conn


class SqliteTx(Tx):
    def __init__(self, queries: dict[str, Query], conn: sqlite3.Connection) -> None:
        super().__init__(queries)
        self._conn = conn

    def _adapt_list(self, value: list[Any] | tuple[Any, ...]) -> Any:
        # Lists travel as JSON text and are opened in SQL with json_each().
        return json.dumps(list(value))

    def _run(self, statement: str, params: dict[str, Any]) -> tuple[list[Row], int]:
        cursor = self._conn.execute(statement, params)
        rows = cursor.fetchall() if cursor.description is not None else []
        return rows, cursor.rowcount


def _dict_row(cursor: sqlite3.Cursor, values: tuple[Any, ...]) -> Row:
    return {col[0]: value for col, value in zip(cursor.description, values, strict=True)}
