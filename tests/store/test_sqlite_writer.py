"""S1, S3: SQLite's writer on the event loop -- what its callers and the database file see.

Units run on the loop inside one open transaction per group; another process's write lock is
waited for without blocking the loop, units queued meanwhile keep their order, and the WAL is
copied back into the database file by checkpoints of the store's own, so it stays bounded.
These are SQLite's own mechanisms (PostgreSQL has no WAL file or write lock of this kind).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from tidings import DatabaseBusyError, ManualClock, Outbox, SqliteStore, StoreError, Tx
from tidings.store import open_store

CONV = "conv-a"
SRC = str(Path(__file__).resolve().parents[2] / "src")


async def _store(path: Path, **options: object) -> tuple[SqliteStore, Outbox]:
    store = await open_store(str(path), **options)
    assert isinstance(store, SqliteStore)
    ob = Outbox(store, clock=ManualClock())
    await ob.instance.start()
    return store, ob


@contextlib.asynccontextmanager
async def _locked(
    path: Path, **options: object
) -> AsyncIterator[tuple[SqliteStore, Outbox, sqlite3.Connection]]:
    """A store on ``path``, and another connection holding its write lock (its ROLLBACK frees
    it); everything closed at the end."""
    store, ob = await _store(path, **options)
    holder = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        holder.execute("BEGIN IMMEDIATE")
        yield store, ob, holder
    finally:
        holder.close()
        await ob.instance.close()
        await store.close()


async def test_s3_sqlite_units_queued_behind_another_writer_commit_in_order(
    tmp_path: Path,
) -> None:
    """While another connection holds the write lock, units queue; once it is free they all
    commit, in the order they were submitted, and the loop ran on meanwhile."""
    async with _locked(tmp_path / "queued.db") as (store, ob, holder):
        order: list[int] = []

        def unit(i: int) -> Callable[[Tx], int]:
            def run(tx: Tx) -> int:
                ob.publish(tx, CONV, "unit.done", {"i": i}, idempotency_key=f"q-{i}")
                order.append(i)
                return i

            return run

        pending = [asyncio.ensure_future(store.transact(unit(i))) for i in range(20)]
        ticks = 0
        for _ in range(5):
            await asyncio.sleep(0.002)
            ticks += 1
        assert ticks == 5
        assert not any(p.done() for p in pending), "a unit committed under another's lock"
        holder.execute("ROLLBACK")
        assert await asyncio.wait_for(asyncio.gather(*pending), timeout=10) == list(range(20))
        assert order == list(range(20))
        lease = await ob.claim(CONV, max_count=20)
        assert [d.payload["i"] for d in lease.deliveries] == list(range(20))


async def test_s1_sqlite_busy_for_longer_than_the_timeout_fails_every_queued_unit(
    tmp_path: Path,
) -> None:
    """Past the busy timeout every queued unit fails with the busy error and wrote nothing;
    the store works again once the lock is gone."""
    async with _locked(tmp_path / "busy.db", busy_timeout_ms=30) as (store, ob, holder):
        results = await asyncio.gather(*(
            store.transact(lambda tx: ob.publish(tx, CONV, "unit.lost", {}))
            for _ in range(5)
        ), return_exceptions=True)
        assert all(isinstance(r, DatabaseBusyError) for r in results), results
        holder.execute("ROLLBACK")
        assert (await ob.stats(CONV)).backlog == 0
        await store.transact(lambda tx: ob.publish(tx, CONV, "unit.kept", {}))
        assert (await ob.stats(CONV)).backlog == 1


async def test_s1_sqlite_wal_stays_bounded_and_is_copied_into_the_database(
    tmp_path: Path,
) -> None:
    """Thousands of commits leave a WAL of bounded size (it is checkpointed and written from
    its start again), and what they wrote is in the database file itself."""
    path = tmp_path / "wal.db"
    store, ob = await _store(path)
    try:
        def publish(conv: str, i: int) -> Callable[[Tx], object]:
            return lambda tx: ob.publish(tx, conv, "unit.done", {"i": i})

        for _ in range(30):
            await asyncio.gather(*(store.transact(publish(f"conv-{i % 7}", i))
                                   for i in range(100)))
            for i in range(5):  # and lone units, committed on the loop
                await store.transact(publish("conv-lone", i))
        wal = (tmp_path / "wal.db-wal").stat().st_size
        assert wal < 4 * 2**20, f"the WAL grew to {wal} bytes"
    finally:
        await ob.instance.close()
        await store.close()
    # Closed: the database file alone holds every row.
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT count(*) FROM signal_events").fetchone()[0] == 3150
    finally:
        conn.close()


async def test_s3_sqlite_store_closes_after_its_queued_units(tmp_path: Path) -> None:
    """Closing the store lets units already submitted commit; later ones are refused."""
    path = tmp_path / "close.db"
    store, ob = await _store(path)
    def publish(i: int) -> Callable[[Tx], object]:
        return lambda tx: ob.publish(tx, CONV, "unit.done", {"i": i})

    pending = [asyncio.ensure_future(store.transact(publish(i))) for i in range(30)]
    await asyncio.sleep(0)
    await ob.instance.close()
    await store.close()
    assert len(await asyncio.gather(*pending)) == 30
    with pytest.raises(StoreError):
        await store.transact(lambda tx: None)
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT count(*) FROM signal_events").fetchone()[0] == 30
    finally:
        conn.close()


class Boom(Exception):
    pass


async def test_s3_sqlite_a_failing_unit_runs_the_units_before_it_again_and_the_rest_commit(
    tmp_path: Path,
) -> None:
    """A group's units run without savepoints: when one raises, the transaction is rolled back,
    that unit alone fails, and the units that had run in it run again in a fresh transaction,
    which runs carefully (a later failure there fails alone). Every other unit commits once,
    all in one commit, with its own answer."""
    store, ob = await _store(tmp_path / "again.db")
    statements: list[str] = []
    assert store._writer is not None
    store._writer.set_trace_callback(statements.append)
    runs: dict[int, int] = {}

    def unit(i: int, failing: tuple[int, ...]) -> Callable[[Tx], int]:
        def run(tx: Tx) -> int:
            runs[i] = runs.get(i, 0) + 1
            ob.publish(tx, CONV, "unit.done", {"i": i})
            if i in failing:
                raise Boom(i)
            return i

        return run

    try:
        groups = store.groups_committed
        assert await asyncio.gather(*(store.transact(unit(i, ())) for i in range(8))) == list(
            range(8))
        assert store.groups_committed == groups + 1
        assert not [s for s in statements if s.startswith("SAVEPOINT")]

        runs.clear()
        results = await asyncio.gather(
            *(store.transact(unit(i, (11, 14))) for i in range(8, 16)), return_exceptions=True
        )
        assert [type(r) if isinstance(r, Boom) else r for r in results] == [
            8, 9, 10, Boom, 12, 13, Boom, 15]
        assert runs == {8: 2, 9: 2, 10: 2, 11: 1, 12: 1, 13: 1, 14: 1, 15: 1}
        assert store.groups_committed == groups + 2
        lease = await ob.claim(CONV, max_count=20)
        assert sorted(d.payload["i"] for d in lease.deliveries) == [
            0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 15]
    finally:
        await ob.instance.close()
        await store.close()


async def test_s3_sqlite_a_transaction_ended_under_a_unit_run_again_keeps_the_others_in_order(
    tmp_path: Path,
) -> None:
    """A unit whose failure ends the transaction itself (as a full disk or an I/O error does)
    while the group runs again: the units that had run again run once more, in order, with the
    rest behind them; each failing unit gets its own error, every other one commits once."""
    store, ob = await _store(tmp_path / "ended.db")
    runs: dict[int, int] = {}
    order: list[int] = []

    def unit(i: int) -> Callable[[Tx], int]:
        def run(tx: Tx) -> int:
            runs[i] = runs.get(i, 0) + 1
            ob.publish(tx, CONV, "unit.done", {"i": i})
            if i == 1 and runs[i] == 2:
                tx._conn.execute("ROLLBACK")  # type: ignore[attr-defined]  # the fatal error's effect
                raise Boom(i)
            if i == 2:
                raise Boom(i)
            order.append(i)
            return i

        return run

    try:
        groups = store.groups_committed
        results = await asyncio.gather(*(store.transact(unit(i)) for i in range(5)),
                                       return_exceptions=True)
        assert [type(r) if isinstance(r, Boom) else r for r in results] == [0, Boom, Boom, 3, 4]
        assert runs == {0: 3, 1: 2, 2: 1, 3: 1, 4: 1}
        assert order[-3:] == [0, 3, 4]
        assert store.groups_committed == groups + 1
        lease = await ob.claim(CONV, max_count=10)
        assert [d.payload["i"] for d in lease.deliveries] == [0, 3, 4]
    finally:
        await ob.instance.close()
        await store.close()


def _synchronous(store: SqliteStore) -> int:
    writer = store._writer  # the setting lives on the writer's connection
    assert writer is not None
    return int(writer.execute("PRAGMA synchronous").fetchone()["synchronous"])


async def test_s4_sqlite_a_claim_on_its_own_leaves_every_later_commit_durable(
    tmp_path: Path,
) -> None:
    """A claim made on its own commits without waiting for the disk; the units after it --
    an ack, a publish -- wait for it again, alone or while another process held the lock."""
    async with _locked(tmp_path / "claim.db") as (store, ob, holder):
        holder.execute("ROLLBACK")
        await store.transact(lambda tx: ob.publish(tx, CONV, "unit.done", {"i": 1}))
        lease = await ob.claim(CONV)
        assert len(lease.deliveries) == 1
        assert _synchronous(store) == 2  # FULL
        await store.transact(lambda tx: ob.ack(tx, lease))
        assert _synchronous(store) == 2
        # Another process holds the lock when the claim comes: it waits like any unit.
        await store.transact(lambda tx: ob.publish(tx, CONV, "unit.done", {"i": 2}))
        holder.execute("BEGIN IMMEDIATE")
        claiming = asyncio.ensure_future(ob.claim(CONV))
        await asyncio.sleep(0.05)
        assert not claiming.done()
        holder.execute("ROLLBACK")
        assert len((await claiming).deliveries) == 1
        assert _synchronous(store) == 2


_CLAIM_AND_DIE = """
import asyncio, os, signal, sys
from tidings import ManualClock, Outbox
from tidings.store import open_store

async def main(path):
    store = await open_store(path)
    ob = Outbox(store, clock=ManualClock())
    await ob.instance.start()
    await store.transact(lambda tx: ob.publish(tx, "conv-a", "unit.done", {}))
    lease = await ob.claim("conv-a")
    print(lease.token, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

asyncio.run(main(sys.argv[1]))
"""


async def test_s4_sqlite_a_claim_on_its_own_survives_its_process_being_killed(
    tmp_path: Path,
) -> None:
    """Not waiting for the disk is not losing it to a crash of the process: the operating
    system holds what was written, and the lease is there after a SIGKILL."""
    path = tmp_path / "killed.db"
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _CLAIM_AND_DIE, str(path), stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": SRC},
    )
    out, _ = await child.communicate()
    assert child.returncode == -signal.SIGKILL
    token = out.decode().strip()
    assert token
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT state, lease_token FROM signal_deliveries").fetchall()
    finally:
        conn.close()
    assert rows == [("leased", token)]
