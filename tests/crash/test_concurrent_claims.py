"""Several runtime processes claim from the same conversations of one PostgreSQL database.

Four real processes (``child.py claimer``) race over 100 conversations holding 2,000 signals.
Each claims, logs every claim (token, claim time, deadline), sometimes stalls past its
deadline so another process reclaims, and acks. The logs and the database together must show
that no delivery was ever under two live leases, and that each was acknowledged exactly once.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import drop_postgres_database, fresh_postgres_database
from tests.crash.helpers import Child, count_rows, spawn
from tidings import ManualClock, Outbox, OutboxConfig, Tx

PROCESSES = 4
CONVERSATIONS = 100
SIGNALS = 2_000
LEASE_TTL_MS = 300
STALL = 0.05  # share of claims whose holder stalls past its deadline before acking


@pytest.fixture
def postgres_url(postgres_template: str) -> Iterator[str]:
    """A fresh PostgreSQL database: this test is about several processes on one server."""
    url = fresh_postgres_database(postgres_template)
    try:
        yield url
    finally:
        drop_postgres_database(postgres_template, url)


def read_log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line]


@pytest.mark.postgres_only
async def test_s5_s6_four_processes_claim_concurrently_on_postgres(
    postgres_url: str, tmp_path: Path
) -> None:
    async with Outbox.open(postgres_url, clock=ManualClock()) as ob:

        def publish_all(tx: Tx) -> list[int]:
            return [
                ob.publish(
                    tx, f"conv-{i % CONVERSATIONS:03d}", "task.exited", {"task_key": f"t{i}"}
                ).delivery_id
                for i in range(SIGNALS)
            ]

        published = set(await ob.store.transact(publish_all))
    assert len(published) == SIGNALS

    logs = [tmp_path / f"claimer-{n}.log" for n in range(PROCESSES)]
    async with (
        spawn("claimer", postgres_url, str(logs[0]), str(CONVERSATIONS), "0",
              str(LEASE_TTL_MS), str(STALL)) as c0,
        spawn("claimer", postgres_url, str(logs[1]), str(CONVERSATIONS), "1",
              str(LEASE_TTL_MS), str(STALL)) as c1,
        spawn("claimer", postgres_url, str(logs[2]), str(CONVERSATIONS), "2",
              str(LEASE_TTL_MS), str(STALL)) as c2,
        spawn("claimer", postgres_url, str(logs[3]), str(CONVERSATIONS), "3",
              str(LEASE_TTL_MS), str(STALL)) as c3,
    ):
        children: list[Child] = [c0, c1, c2, c3]
        summaries = await asyncio.gather(*(c.checkpoint("done", within_s=55) for c in children))
        statuses = await asyncio.gather(*(c.finish() for c in children))
    assert statuses == [0] * PROCESSES, [c.stderr() for c in children]
    assert all(s["claims"] > 0 for s in summaries), summaries  # every process took part

    entries = [entry for path in logs for entry in read_log(path)]
    claims: dict[int, list[dict[str, Any]]] = defaultdict(list)
    acks: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for entry in entries:
        if entry["ev"] == "claim":
            claims[entry["delivery_id"]].append(entry)
        elif entry["ev"] == "ack":
            acks[entry["delivery_id"]].append(entry)

    # No delivery was ever under two live leases: each lease began at or after the deadline
    # of the one before it.
    overlapping = []
    for held in claims.values():
        held.sort(key=lambda c: c["claim_us"])
        overlapping += [
            (before, after) for before, after in pairwise(held)
            if after["claim_us"] < before["deadline_us"] or after["token"] == before["token"]
        ]
    assert overlapping == []
    assert any(len(held) > 1 for held in claims.values())  # some stalls were reclaimed
    assert sum(s["stale"] for s in summaries) > 0

    # Every delivery was acknowledged exactly once, by the holder of its last lease.
    assert set(acks) == published
    assert {d: len(a) for d, a in acks.items() if len(a) != 1} == {}
    assert {
        d: (acks[d][0]["token"], held[-1]["token"]) for d, held in claims.items()
        if acks[d][0]["token"] != held[-1]["token"]
    } == {}
    assert {
        d: [c["attempts"] for c in held] for d, held in claims.items()
        if [c["attempts"] for c in held] != list(range(1, len(held) + 1))
    } == {}

    # The database agrees with the logs.
    assert count_rows(postgres_url, "signal_deliveries") == SIGNALS
    assert count_rows(postgres_url, "signal_deliveries", "state = 'acknowledged'") == SIGNALS
    async with Outbox.open(
        postgres_url, clock=ManualClock(), config=OutboxConfig()
    ) as ob:
        stats = await ob.stats()
        assert (stats.backlog, stats.dead_letters) == (0, 0)
        rows = await ob.delivery_states(sorted(published))
    assert {r["delivery_id"]: r["attempts"] for r in rows} == {
        delivery_id: len(held) for delivery_id, held in claims.items()
    }
