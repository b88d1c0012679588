"""A harness for crash tests: a real Python process, a checkpoint, then SIGKILL.

A child runs ``tests/crash/child.py`` (with ``sys.executable``) against a database URL. At the
instant a test cares about, it prints one JSON line ``{"checkpoint": name, ...}`` on stdout and
then blocks; the parent reads up to that line and kills the child with SIGKILL -- no cleanup,
no ``close()``, no ``finally`` -- exactly what a power cut or the OOM killer does to a process.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import signal
import sqlite3
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg

from tests.waiting import eventually, first_line

CHILD_SCRIPT = Path(__file__).with_name("child.py")


class ChildFailedError(AssertionError):
    """The child exited or stayed silent before reaching its checkpoint."""


class Child:
    """A running child process whose stdout announces checkpoints."""

    def __init__(self, proc: asyncio.subprocess.Process, stderr_path: Path) -> None:
        self.proc = proc
        self._stderr_path = stderr_path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self) -> str:
        try:
            return self._stderr_path.read_text("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def forget(self) -> None:
        """Remove the captured stderr file."""
        self._stderr_path.unlink(missing_ok=True)

    async def checkpoint(self, name: str, *, within_s: float = 30.0) -> dict[str, Any]:
        """Read stdout until the line announcing checkpoint ``name``; return its fields."""
        assert self.proc.stdout is not None

        def announced(line: bytes) -> dict[str, Any] | None:
            with contextlib.suppress(ValueError):
                fields = json.loads(line)
                if isinstance(fields, dict) and fields.get("checkpoint") == name:
                    return fields
            return None

        try:
            found = await first_line(self.proc.stdout, announced,
                                     what=f"child {self.pid} reaches {name!r}", within_s=within_s)
        except AssertionError as failed:
            raise ChildFailedError(f"{failed}\n{self.stderr()}") from None
        if found is None:
            await self.proc.wait()
            raise ChildFailedError(
                f"child {self.pid} exited with {self.proc.returncode} before {name!r}\n"
                f"{self.stderr()}"
            )
        return found

    async def kill(self) -> None:
        """SIGKILL the child and reap it; its open files and sockets are closed by the kernel."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def finish(self, *, within_s: float = 60.0) -> int:
        """Wait for a child that is expected to exit on its own; its exit status."""
        try:
            return await asyncio.wait_for(self.proc.wait(), within_s)
        except TimeoutError:
            await self.kill()
            raise ChildFailedError(
                f"child {self.pid} did not finish in {within_s} s\n{self.stderr()}"
            ) from None


@contextlib.asynccontextmanager
async def spawn(mode: str, url: str, *args: str) -> AsyncIterator[Child]:
    """Start ``child.py mode url args...``; SIGKILL and reap it on exit, whatever happened."""
    async with spawn_script(CHILD_SCRIPT, mode, url, *args) as child:
        yield child


@contextlib.asynccontextmanager
async def spawn_script(script: Path, *args: str) -> AsyncIterator[Child]:
    """Start the Python script ``script args...`` as a child; SIGKILL and reap it on exit,
    whatever happened."""
    fd, name = tempfile.mkstemp(prefix="tidings-child-", suffix=".stderr")
    stderr_path = Path(name)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(script), *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=fd,
        )
    finally:
        os.close(fd)
    child = Child(proc, stderr_path)
    try:
        yield child
    finally:
        await child.kill()
        if child.proc.stdout is not None:
            # Drain what is left so the pipe transport is closed cleanly.
            await child.proc.stdout.read()
        child.forget()


async def wait_instance_released(url: str, instance_id: str, *, within_s: float = 15.0) -> None:
    """Wait until the database no longer sees ``instance_id``'s liveness mark.

    On SQLite the flock goes with the process, before ``wait()`` returns. On PostgreSQL the
    server notices the dropped connection on its own schedule (milliseconds); this waits for
    that real event -- it is not a deadline, which tests never wait for.
    """

    async def released() -> bool:
        return await _instance_released(url, instance_id)

    await eventually(released, what=f"instance {instance_id} no longer holds its liveness mark",
                     within_s=within_s)


async def _instance_released(url: str, instance_id: str) -> bool:
    if url.startswith(("postgresql://", "postgres://")):
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (instance_id,)
            )
            row = await cur.fetchone()
            free = bool(row and row[0])
            if free:
                await conn.execute(
                    "SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (instance_id,)
                )
            return free
    lock_path = Path(url.removeprefix("sqlite:///"))
    lock_path = lock_path.with_name(lock_path.name + ".instances") / f"{instance_id}.lock"
    try:
        fd = os.open(lock_path, os.O_RDWR)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def count_rows(url: str, table: str, where: str = "TRUE") -> int:
    """Count rows straight from the database, behind the outbox's back (crash forensics)."""
    query = f"SELECT count(*) FROM {table} WHERE {where}"
    if url.startswith(("postgresql://", "postgres://")):
        with psycopg.connect(url) as conn:
            row = conn.execute(query).fetchone()
            return int(row[0]) if row else 0
    conn3 = sqlite3.connect(url.removeprefix("sqlite:///"))
    try:
        return int(conn3.execute(query.replace("TRUE", "1")).fetchone()[0])
    finally:
        conn3.close()
