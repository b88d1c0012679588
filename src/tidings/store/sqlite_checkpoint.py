"""SQLite's checkpoints: the WAL copied back into the database file, off the event loop.

The writer's automatic checkpoint is off: it would run inside a ``COMMIT`` on the event loop,
copying and fsyncing up to a thousand pages (1.5-3 ms here). Instead, once enough rows were
written, a checkpoint runs on a connection of its own, on the writer's thread, between two
groups (:meth:`tidings.store.sqlite_writer.LoopWriter._checkpoint_if_due`): units that arrive
meanwhile queue (the loop runs on). No unit is written while it runs, so it copies the whole WAL
and the next group writes the WAL from its start again: a commit then overwrites pages the file
already has, which costs about half of appending new ones (a WAL that only grows makes every
fsync carry the file's new size).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path

log = logging.getLogger("tidings.store")

CHECKPOINT_CHANGES = 500
"""Rows changed between two checkpoints of the WAL (about SQLite's own default, 1,000 pages)."""


class Checkpointer:
    """Runs a passive checkpoint of one database file when enough rows changed since the last."""

    def __init__(self, path: Path, connect: Callable[[], sqlite3.Connection]) -> None:
        self._path = path
        self._connect = connect  # the checkpoints' own connection, opened on first use
        self._conn: sqlite3.Connection | None = None
        self._checkpointed_at = 0  # the writer's total_changes when the last one began

    def due(self, changes: int) -> bool:
        """Whether ``changes`` (the writer's total so far) is enough for another checkpoint."""
        return changes - self._checkpointed_at >= CHECKPOINT_CHANGES

    def start(self, executor: Executor, changes: int) -> asyncio.Future[None]:
        """Run a checkpoint on ``executor`` (the writer's thread); a failure is logged."""
        self._checkpointed_at = changes
        running = asyncio.get_running_loop().run_in_executor(executor, self._checkpoint)
        running.add_done_callback(self._done)
        return running

    def _checkpoint(self) -> None:
        if self._conn is None:
            self._conn = self._connect()
        self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def _done(self, done: asyncio.Future[None]) -> None:
        if not done.cancelled() and done.exception() is not None:
            log.warning("WAL checkpoint of %s failed: %s", self._path, done.exception())

    def close(self) -> None:
        """Close the checkpoints' connection (none is running: the writer's thread is done)."""
        if self._conn is not None:
            self._conn.close()
