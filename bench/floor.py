"""The floor, measured on this machine in the same run: a turn's two durable units written by
hand on tidings' own schema, with nothing of the runtime around them.

    python bench/floor.py [--quick] [--backend sqlite|postgres|both] [--postgres-dsn DSN]

A turn here is what a serial turn of ``bench/turns.py`` writes, row for row, into the same
tables and indexes (the schema tidings' migrations build, SQLite's 1 KiB pages included):

* **begin** (durable before the model is called): the conversation's counters and slot taken
  with one ``UPDATE ... RETURNING``; the person's input; the run; two journal rows;
* **end**: the counters and slot given back with one ``UPDATE ... RETURNING``; the input
  marked read; the person's message and the answer; the run ended; its usage; four journal
  rows.

Each unit is one transaction (SQLite ``BEGIN IMMEDIATE`` ... ``COMMIT`` with synchronous=FULL;
PostgreSQL a warm connection, the counters in one round trip and the rest pipelined with
``COMMIT``). No model, no history, no Python beyond building the parameters: what is left of a
turn when the runtime is taken away. Beside it, the raw single-row commit of the same run.

Keys: ``sqlite_floor_turn_us``, ``pg_floor_turn_us`` (p50 of begin + end), the p50 of each
unit, and ``*_raw_commit_p50_us``. Progress goes to stderr; stdout ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from harness import (
    DEFAULT_DSN,
    log,
    raw_pg_commit_us,
    raw_sqlite_commit_us,
    run_main,
    scratch_url,
    source_revision,
)

import tidings
from tidings import Profile, ScriptedModel

OWNER = "bench"

TAKE = (
    "UPDATE conversations SET queued_inputs = queued_inputs + 1,"
    " last_queue_position = last_queue_position + 1, last_event_seq = last_event_seq + 2,"
    " slot_token = :token, slot_deadline_us = :deadline, slot_instance = :instance,"
    " slot_run = :run, updated_at_us = :now WHERE conversation_id = :conv"
    " RETURNING last_queue_position, last_event_seq, last_message_seq"
)
INPUT = (
    "INSERT INTO inputs (input_id, conversation_id, queue_position, origin, kernel, author_kind,"
    " author_handle, author_display_name, delivery_mode, content, meta, state, accepted_at_us)"
    " VALUES (:input, :conv, :position, 'person', 0, 'human', 'person', '', 'queue', :words,"
    " '{}', 'queued', :now)"
)
RUN = (
    "INSERT INTO runs (run_id, conversation_id, trigger, status, instance_id, created_at_us,"
    " started_at_us) VALUES (:run, :conv, 'person', 'running', :instance, :now, :now)"
)
EVENTS = "INSERT INTO events (conversation_id, seq, type, run_id, data, at_us) VALUES "
GIVE = (
    "UPDATE conversations SET queued_inputs = queued_inputs - 1,"
    " last_message_seq = last_message_seq + 2, last_event_seq = last_event_seq + 4,"
    " slot_token = NULL, slot_deadline_us = NULL, slot_instance = NULL, slot_run = NULL,"
    " updated_at_us = :now WHERE conversation_id = :conv AND slot_token = :token"
    " RETURNING last_message_seq, last_event_seq"
)
READ = (
    "UPDATE inputs SET state = 'materialized', run_id = :run, materialized_at_us = :now,"
    " message_seq = :seq WHERE input_id = :input AND state = 'queued'"
)
MESSAGES = (
    "INSERT INTO messages (conversation_id, seq, message_id, run_id, role, content, origin,"
    " input_id, meta, created_at_us) VALUES"
    " (:conv, :seq, :m1, :run, 'user', :words, 'person', :input, :meta1, :now),"
    " (:conv, :seq2, :m2, :run, 'assistant', :words, NULL, NULL, :meta2, :now)"
)
END = (
    "UPDATE runs SET status = 'completed', model = 'scripted', steps = 1, ended_at_us = :now"
    " WHERE run_id = :run AND status IN ('queued', 'running')"
)
USAGE = (
    "INSERT INTO run_usage (conversation_id, run_id, model_calls, input_tokens, output_tokens,"
    " cache_read_tokens, cache_write_tokens) VALUES (:conv, :run, 1, 11, 2, 0, 0)"
)


def events(count: int) -> str:
    rows = ", ".join(f"(:conv, :e{n}, :t{n}, :run, :d{n}, :now)" for n in range(count))
    return EVENTS + rows


EVENTS_2, EVENTS_4 = events(2), events(4)


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class Turn:
    """The parameters of one turn and the SQL of its two units, for either dialect."""

    def __init__(self, conv: str, instance: str, n: int) -> None:
        now = time.time_ns() // 1000
        self.p: dict[str, Any] = {
            "conv": conv, "instance": instance, "now": now, "deadline": now + 30_000_000,
            "token": uuid.uuid4().hex, "run": new_id("run"), "input": new_id("in"),
            "words": f"message {n}", "m1": new_id("msg"), "m2": new_id("msg"),
            "meta1": '{"authored_by":{"kind":"human","handle":"person","display_name":""}}',
            "meta2": '{"model":"scripted","step":1}',
        }

    def begun(self, taken: tuple[int, int, int]) -> dict[str, Any]:
        position, event_seq, _ = taken
        p = self.p
        return {**p, "position": position,
                "e0": event_seq - 1, "t0": "input_accepted",
                "d0": json.dumps({"input_id": p["input"], "origin": "person",
                                  "queue_position": position, "delivery_mode": "queue"}),
                "e1": event_seq, "t1": "turn_status",
                "d1": json.dumps({"run_public_id": p["run"], "status": "running",
                                  "trigger": "person", "inputs": [p["input"]]})}

    def ended(self, given: tuple[int, int]) -> dict[str, Any]:
        message_seq, event_seq = given
        p = self.p
        first = event_seq - 3
        return {**p, "seq": message_seq - 1, "seq2": message_seq,
                "e0": first, "t0": "message_committed",
                "d0": json.dumps({"message_seq": message_seq - 1}),
                "e1": first + 1, "t1": "input_materialized",
                "d1": json.dumps({"input_id": p["input"], "run_public_id": p["run"],
                                  "message_seq": message_seq - 1}),
                "e2": first + 2, "t2": "message_committed",
                "d2": json.dumps({"message_seq": message_seq}),
                "e3": first + 3, "t3": "turn_status",
                "d3": json.dumps({"run_public_id": p["run"], "status": "completed"})}


BEGIN_WRITES = (INPUT, RUN, EVENTS_2)
END_WRITES = (READ, MESSAGES, END, USAGE, EVENTS_4)
Fill = Callable[[Any], dict[str, Any]]


def sqlite_unit(conn: sqlite3.Connection, counters: str, params: dict[str, Any], fill: Fill,
                writes: tuple[str, ...]) -> float:
    """One unit: the counters with ``RETURNING``, then the writes their values fill in."""
    t0 = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    filled = fill(conn.execute(counters, params).fetchone())
    for statement in writes:
        conn.execute(statement, filled)
    conn.execute("COMMIT")
    return time.perf_counter() - t0


def pg_unit(conn: psycopg.Connection[Any], counters: str, params: dict[str, Any], fill: Fill,
            writes: tuple[str, ...]) -> float:
    """The same on PostgreSQL: the counters in one round trip, the writes with ``COMMIT``."""
    t0 = time.perf_counter()
    with conn.pipeline() as pipe:
        conn.execute("BEGIN")
        cursor = conn.execute(pg(counters), params)
        pipe.sync()
        filled = fill(cursor.fetchone())
        for statement in writes:
            conn.execute(pg(statement), filled)
        conn.execute("COMMIT")
    return time.perf_counter() - t0


def sqlite_turn(conn: sqlite3.Connection, conv: str, instance: str, n: int) -> tuple[float, float]:
    turn = Turn(conv, instance, n)
    return (sqlite_unit(conn, TAKE, turn.p, turn.begun, BEGIN_WRITES),
            sqlite_unit(conn, GIVE, turn.p, turn.ended, END_WRITES))


def pg_turn(conn: psycopg.Connection[Any], conv: str, instance: str, n: int) -> tuple[float, float]:
    turn = Turn(conv, instance, n)
    return (pg_unit(conn, TAKE, turn.p, turn.begun, BEGIN_WRITES),
            pg_unit(conn, GIVE, turn.p, turn.ended, END_WRITES))


_PG: dict[str, str] = {}


def pg(statement: str) -> str:
    """``:name`` placeholders as psycopg's ``%(name)s`` (``::`` casts left alone)."""
    if statement not in _PG:
        _PG[statement] = re.sub(r"(?<!:):(\w+)", r"%(\1)s", statement)
    return _PG[statement]


async def conversation(url: str) -> tuple[str, str]:
    """A conversation made by tidings (the schema and its row as the runtime writes them)."""
    async with tidings.open(url, models=[ScriptedModel()]) as rt:
        made = await rt.create_conversation(OWNER, Profile(model="scripted"))
        instance = rt.instance_id
    return made.conversation_id, instance


def measure(turn: Callable[[int], tuple[float, float]], turns: int) -> dict[str, float]:
    for n in range(min(50, turns)):
        turn(n)
    begins: list[float] = []
    ends: list[float] = []
    totals: list[float] = []
    for n in range(turns):
        begin, end = turn(n)
        begins.append(begin)
        ends.append(end)
        totals.append(begin + end)
    return {"turn_p50_us": statistics.median(totals) * 1e6,
            "begin_p50_us": statistics.median(begins) * 1e6,
            "end_p50_us": statistics.median(ends) * 1e6, "turns": turns}


async def bench_sqlite(turns: int, raw_s: float) -> dict[str, Any]:
    async with scratch_url("sqlite", "", "floor") as url:
        conv, instance = await conversation(url)
        conn = sqlite3.connect(url, isolation_level=None)
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        try:
            raw = [raw_sqlite_commit_us(raw_s)]
            figures = measure(lambda n: sqlite_turn(conn, conv, instance, n), turns)
            raw.append(raw_sqlite_commit_us(raw_s))
        finally:
            conn.close()
    return {**figures, "raw_commit_p50_us": statistics.mean(raw)}


async def bench_postgres(dsn: str, turns: int, raw_s: float) -> dict[str, Any]:
    async with scratch_url("postgres", dsn, "floor") as url:
        conv, instance = await conversation(url)
        with psycopg.connect(url, autocommit=True) as conn:
            raw = [raw_pg_commit_us(url, raw_s)]
            figures = measure(lambda n: pg_turn(conn, conv, instance, n), turns)
            raw.append(raw_pg_commit_us(url, raw_s))
    return {**figures, "raw_commit_p50_us": statistics.mean(raw)}


async def main_async(args: argparse.Namespace) -> int:
    turns = 1000 if args.quick else 5000
    raw_s = 1.0 if args.quick else 3.0
    out: dict[str, Any] = {"quick": args.quick, "revision": source_revision()}
    for backend, key in (("sqlite", "sqlite"), ("postgres", "pg")):
        if args.backend not in (backend, "both"):
            continue
        log(f"floor turn on {backend} ({turns} turns)")
        figures = (await bench_sqlite(turns, raw_s) if backend == "sqlite"
                   else await bench_postgres(args.postgres_dsn, turns, raw_s))
        log(f"  {figures['turn_p50_us']:,.0f} µs per turn (begin {figures['begin_p50_us']:,.0f},"
            f" end {figures['end_p50_us']:,.0f}); raw commit {figures['raw_commit_p50_us']:,.0f}")
        out[f"{key}_floor_turn_us"] = figures["turn_p50_us"]
        out[f"{key}_floor_begin_us"] = figures["begin_p50_us"]
        out[f"{key}_floor_end_us"] = figures["end_p50_us"]
        out[f"{key}_raw_commit_p50_us"] = figures["raw_commit_p50_us"]
    print(json.dumps(out))
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the small plan (under a minute)")
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN)
    return parser.parse_args(argv)


def main() -> int:
    return run_main(main_async, parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
