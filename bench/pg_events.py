"""What writing a turn's journal rows costs PostgreSQL, and the part the A2A push trigger takes.

    python bench/pg_events.py [--quick] [--postgres-dsn DSN] [--rounds 4]

A turn writes its journal twice (the unit that starts it, the unit that ends it), each time
one ``insert_events`` statement of three rows or so, one of them the run's ``turn_status``.
On PostgreSQL that statement also sends the feed's ``NOTIFY``, checks each row's conversation
(its foreign key) and fires ``a2a_push_publish`` for the ``turn_status`` row: the trigger that
announces a run's progress to the conversation's A2A push configs -- which nearly every
conversation has none of.

On a scratch database that tidings made (a conversation, five turns), one connection sends
that statement as tidings does (prepared; three rows, the first a ``turn_status``) inside an
open transaction, rolled back after each block:

* **as shipped** -- the statement, every trigger on;
* **without the push trigger** -- the same with ``a2a_push_publish`` disabled in the block's
  transaction (rolled back with it).

The two alternate, their order swapped each round; each figure is the median of the rounds'
p50s. Then ``EXPLAIN (ANALYZE)`` of the statement, as shipped, says what PostgreSQL itself
spent in the push trigger per call (the median of many). Run this file at an earlier revision
(``PYTHONPATH`` at that revision's ``src``) for that revision's figures.

Keys: ``pg_events_insert_us`` (as shipped), ``pg_events_insert_no_push_trigger_us``,
``pg_push_trigger_us`` (their difference), ``pg_push_trigger_explain_us`` (PostgreSQL's own
figure), with the raw single-row commit p50s of the same run beside them. Progress goes to
stderr; stdout ends with one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from floor import pg
from harness import DEFAULT_DSN, Results, finish, guarded, log, raw_commits, run_main, scratch_url

from tidings.models.scripted import ScriptedModel
from tidings.runtime.root import Runtime
from tidings.store.queries import load_queries
from tidings.types import Profile

TRIGGER = "a2a_push_publish"


@dataclass(frozen=True)
class Plan:
    statements: int  # timed per block (after WARMUP)
    explains: int


QUICK = Plan(statements=1_500, explains=200)
FULL = Plan(statements=5_000, explains=1_000)
WARMUP = 200


def statement() -> str:
    """The shipped ``insert_events`` statement, in psycopg's placeholders."""
    return pg(load_queries("postgres")["insert_events"].statements[0])


class Rows:
    """A turn's three journal rows (a ``turn_status`` first), at ever new positions."""

    def __init__(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        self.seq = 1_000_000

    def params(self) -> dict[str, Any]:
        kinds = ("turn_status", "message_committed", "input_accepted")
        items = []
        for kind in kinds:
            self.seq += 1
            data = {"run_public_id": "run_bench", "status": "running", "trigger": "person",
                    "inputs": ["in_bench"], "signals": 0}
            items.append({"seq": self.seq, "type": kind, "run_id": "run_bench",
                          "data": json.dumps(data)})
        return {"conversation_id": self.conversation_id, "items": json.dumps(items),
                "now_us": time.time_ns() // 1000}


async def made_by_tidings(url: str) -> str:
    """A conversation with five turns behind it, written by tidings: the schema and the rows
    as the runtime leaves them."""
    async with Runtime.open(url, models=[ScriptedModel(default={"text": "ok"})]) as rt:
        conversation = (await rt.create_conversation("bench", Profile(model="scripted")))
        for n in range(5):
            await rt.post(conversation.conversation_id, f"turn {n}")
            await rt.settle(conversation.conversation_id)
    return conversation.conversation_id


def block(conn: psycopg.Connection[Any], sql: str, rows: Rows, count: int,
          without_trigger: bool) -> float:
    """The p50 of ``count`` statements in one transaction, rolled back (µs)."""
    samples: list[float] = []
    with conn.transaction(force_rollback=True):
        if without_trigger:
            conn.execute(f"ALTER TABLE events DISABLE TRIGGER {TRIGGER}")
        for n in range(WARMUP + count):
            params = rows.params()
            started = time.perf_counter()
            conn.execute(sql, params, prepare=True).fetchall()
            if n >= WARMUP:
                samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1e6


def explained(conn: psycopg.Connection[Any], sql: str, rows: Rows, count: int) -> float:
    """PostgreSQL's own time in the push trigger per call, the median of ``count`` (µs)."""
    found = re.compile(rf"Trigger {TRIGGER}: time=([0-9.]+) calls=([0-9]+)")
    times: list[float] = []
    with conn.transaction(force_rollback=True):
        for _ in range(count):
            plan = conn.execute("EXPLAIN (ANALYZE) " + sql, rows.params()).fetchall()
            for (line,) in plan:
                match = found.search(line)
                if match:
                    times.append(float(match.group(1)) * 1000 / int(match.group(2)))
    if not times:
        raise RuntimeError(f"EXPLAIN never reported {TRIGGER}: is it on events?")
    return statistics.median(times)


async def measure(dsn: str, plan: Plan, rounds: int) -> dict[str, Any]:
    async with scratch_url("postgres", dsn, "pgevents") as url:
        rows = Rows(await made_by_tidings(url))
        sql = statement()

        def run() -> dict[str, Any]:
            shipped: list[float] = []
            bare: list[float] = []
            with psycopg.connect(url) as conn:
                for n in range(rounds):
                    order = (False, True) if n % 2 == 0 else (True, False)
                    for without in order:
                        p50 = block(conn, sql, rows, plan.statements, without)
                        (bare if without else shipped).append(p50)
                        log(f"  round {n + 1}: {'without' if without else 'with'} the push "
                            f"trigger {p50:,.1f} µs")
                explain = explained(conn, sql, rows, plan.explains)
            return {"shipped_us": shipped, "without_trigger_us": bare,
                    "shipped_p50_us": statistics.median(shipped),
                    "without_trigger_p50_us": statistics.median(bare),
                    "trigger_explain_us": explain, "rounds": rounds,
                    "statements_per_round": plan.statements}

        return await asyncio.to_thread(run)


async def main_async(args: argparse.Namespace) -> int:
    plan = QUICK if args.quick else FULL
    started = time.perf_counter()
    results = Results()
    await raw_commits(results, ["postgres"], args.postgres_dsn)
    figure = await guarded(results, "pg_events",
                           lambda: measure(args.postgres_dsn, plan, args.rounds))
    line: dict[str, Any] = {}
    if figure is not None:
        results.figures["pg_events"] = figure
        line = {
            "pg_events_insert_us": round(figure["shipped_p50_us"], 1),
            "pg_events_insert_no_push_trigger_us": round(figure["without_trigger_p50_us"], 1),
            "pg_push_trigger_us": round(figure["shipped_p50_us"]
                                        - figure["without_trigger_p50_us"], 1),
            "pg_push_trigger_explain_us": round(figure["trigger_explain_us"], 1),
        }
        log(f"events insert {line['pg_events_insert_us']:,.1f} µs, without the push trigger "
            f"{line['pg_events_insert_no_push_trigger_us']:,.1f} µs; the trigger by EXPLAIN "
            f"{line['pg_push_trigger_explain_us']:,.1f} µs per call")
    return finish(results, started, line, {"plan": "quick" if args.quick else "full"})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="the small plan (under 2 minutes)")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN,
                        help="an admin DSN; a scratch database is made and dropped")
    parser.add_argument("--rounds", type=int, default=4,
                        help="rounds of both variants, their order swapped each round")
    return run_main(main_async, parser.parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
