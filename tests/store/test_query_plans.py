"""S2: a query about one conversation reaches its rows through an index, never by reading a
whole table -- or a conversation's whole history.

A plan that scans works on a test's small database and grows slower with every conversation,
input and delivery a deployment keeps; the user sees turns and feeds slow down over months.
Each dialect's planner is asked directly: SQLite's ``EXPLAIN QUERY PLAN``, PostgreSQL's
``EXPLAIN`` with sequential scans priced out (a plan that still scans has no index to use).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator

import psycopg

from tests.conftest import Backend
from tidings.store import open_store
from tidings.store.queries import load_queries

# Listings whose conversation filter is optional (``:conversation_id`` may be empty): they walk
# a small partial index of open or dead rows either way.
OPTIONAL_FILTER = frozenset({"dead_letters", "open_runs"})


def _about_one_conversation(dialect: str) -> Iterator[tuple[str, str]]:
    for name, query in sorted(load_queries(dialect).items()):
        if name in OPTIONAL_FILTER:
            continue
        for statement in query.statements:
            if ":conversation_id" in statement:
                yield name, statement


async def _migrated(backend: Backend) -> None:
    store = await open_store(backend.url)
    await store.close()


def _sqlite_plan(conn: sqlite3.Connection, statement: str) -> list[str]:
    params = dict.fromkeys(re.findall(r":(\w+)", statement))
    return [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + statement, params)]


def _postgres_plan(conn: psycopg.Connection[tuple[str]], statement: str) -> list[str]:
    """The generic plan: the one made for any parameters (NULLs would be folded away)."""
    numbers: dict[str, int] = {}

    def placeholder(match: re.Match[str]) -> str:
        return f"${numbers.setdefault(match.group(1), len(numbers) + 1)}"

    numbered = re.sub(r"(?<!:):(\w+)", placeholder, statement)
    conn.execute(f"PREPARE probe AS {numbered}")
    nulls = ", ".join(["NULL"] * len(numbers))
    execute = f"EXECUTE probe({nulls})" if numbers else "EXECUTE probe"
    try:
        return [str(row[0]) for row in conn.execute(f"EXPLAIN {execute}")]
    finally:
        conn.execute("DEALLOCATE probe")


def _postgres_scans(plan: list[str]) -> list[str]:
    """Sequential scans: with them priced out, one is left only where no index applies. (Which
    index PostgreSQL walks is its statistics' call, and an empty test database has none.)"""
    return [step.strip() for step in plan if "Seq Scan" in step]


def _postgres(backend: Backend) -> psycopg.Connection[tuple[str]]:
    conn = psycopg.connect(backend.url, autocommit=True, prepare_threshold=None)
    conn.execute("SET enable_seqscan = off")
    conn.execute("SET plan_cache_mode = force_generic_plan")
    return conn


async def test_s2_queries_about_one_conversation_never_scan_a_table(backend: Backend) -> None:
    await _migrated(backend)
    scans: dict[str, list[str]] = {}
    if backend.name == "sqlite":
        with sqlite3.connect(backend.url) as conn:
            for name, statement in _about_one_conversation("sqlite"):
                plan = _sqlite_plan(conn, statement)
                bad = [step for step in plan if step.startswith("SCAN ")
                       and "USING" not in step and "CONSTANT ROW" not in step
                       and "VIRTUAL TABLE" not in step]
                if bad:
                    scans[name] = bad
    else:
        with _postgres(backend) as conn:
            for name, statement in _about_one_conversation("postgres"):
                bad = _postgres_scans(_postgres_plan(conn, statement))
                if bad:
                    scans[name] = bad
    assert scans == {}


async def test_s2_the_feed_finds_announced_inputs_by_id_not_by_conversation(
    backend: Backend,
) -> None:
    """The feed fills each ``input_accepted`` it hands out with the input's text: that lookup
    must go by the inputs' ids, not walk every input the conversation ever had."""
    await _migrated(backend)
    statement, = load_queries(backend.name)["inputs_content_by_id"].statements
    if backend.name == "sqlite":
        with sqlite3.connect(backend.url) as conn:
            plan = _sqlite_plan(conn, statement)
        assert any("inputs USING INDEX sqlite_autoindex_inputs_1 (input_id=?)" in step
                   for step in plan), plan
    else:
        with _postgres(backend) as conn:
            plan = _postgres_plan(conn, statement)
        # PostgreSQL weighs indexes by its statistics; here it only must not scan.
        assert _postgres_scans(plan) == [], plan


async def test_s2_the_wake_check_reads_only_the_conversations_open_deliveries(
    backend: Backend,
) -> None:
    """Run at every turn's end: it must use the index of open deliveries, not read every
    delivery ever acknowledged."""
    await _migrated(backend)
    statement, = load_queries(backend.name)["has_ready_signals"].statements
    if backend.name == "sqlite":
        with sqlite3.connect(backend.url) as conn:
            plan = _sqlite_plan(conn, statement)
        assert any("signal_deliveries_queue" in step for step in plan), plan
    else:
        with _postgres(backend) as conn:
            plan = _postgres_plan(conn, statement)
        assert _postgres_scans(plan) == [], plan
