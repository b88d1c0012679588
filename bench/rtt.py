"""A turn on PostgreSQL 1 ms away: tidings' serial turn and the floor, through a loopback proxy
that delays each direction by 0.5 ms.

    python bench/rtt.py [--quick] [--postgres-dsn DSN] [--delay-ms 0.5] [--rounds 3]
                        [--proxy process|thread] [--no-direct]

On loopback a round trip to PostgreSQL costs ~20 µs, so a unit of work that waits for the
database's answer many times before its commit looks as cheap as one that sends everything at
once. Over a network it is not: every round trip costs the network's latency. This bench puts
``bench/rtt_proxy.py`` between the client and the server (127.0.0.1:PORT -> 127.0.0.1:5432, each
chunk forwarded 0.5 ms after it was read, in both directions) and measures, through it:

* **floor**   -- ``bench/floor.py``'s turn: its two units written by hand, the counters in one
                 round trip and the rest pipelined with ``COMMIT`` (two round trips per unit);
* **tidings** -- ``bench/turns.py``'s serial turn (``post`` then ``settle``, one conversation,
                 its history window full, the scripted model): its overhead, wall minus model.

The two alternate, their order swapped each round (three rounds); each figure is the median of
the rounds' p50s, every connection of both (the runtime's pool and listener too) goes through the
proxy. Unless ``--no-direct``, each round also measures both directly (no proxy), so the round
trips a turn waits for can be estimated: (through the proxy - direct) / the round trip the proxy
adds (``SELECT 1`` through it minus directly, measured before and after).

The proxy runs in a child process by default (``--proxy thread``: a thread of this process, on an
event loop of its own; it then shares the interpreter lock with the runtime it measures).

Keys: ``pg_turn_overhead_us_rtt1ms`` (tidings), ``pg_floor_turn_us_rtt1ms`` (the floor),
``pg_turn_overhead_ratio_rtt1ms`` (their quotient; goal <= 1.25), ``proxy_delay_p50_us`` (the
one-way delay the proxy achieved, per chunk), ``proxy_added_rtt_us``, the raw single-row commit
p50 directly (``pg_raw_commit_p50_us``) and through the proxy (``pg_raw_commit_p50_us_rtt1ms``),
the round trips per turn estimated from the times (``pg_floor_round_trips_est``,
``pg_turn_round_trips_est``: on a busy machine each trip through the proxy costs more than the
idle ``SELECT 1`` says, and the estimate runs high -- the floor's is 4) and, unless
``--no-direct``, the direct figures; where ``bench/turns.py``'s serial turn counts the store's
round trips, they are passed on (``pg_round_trips_per_unit_rtt1ms``,
``pg_units_per_turn_rtt1ms``). Progress goes to stderr; stdout ends with one JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import floor
import psycopg
import turns
from harness import (
    DEFAULT_DSN,
    Results,
    finish,
    guarded,
    log,
    raw_pg_commit_us,
    raw_sqlite_commit_us,
    run_main,
    scratch_url,
)
from rtt_proxy import ProxyProcess, RttProxy

GOAL = 1.25


@dataclasses.dataclass(frozen=True)
class Plan:
    floor_turns: int  # measured floor turns per round (floor.measure warms up 50 more)
    floor_raw_s: float  # floor.bench_postgres measures the raw commit twice, this long each
    raw_s: float  # the direct raw commit, before and after
    serial: turns.Plan  # tidings' serial turn: warm-up, samples, seconds
    counted_turns: int  # turns of each whose round trips the proxy counts (before the rounds)


QUICK = Plan(floor_turns=150, floor_raw_s=0.3, raw_s=1.0, serial=dataclasses.replace(
    turns.QUICK, serial_warmup=20, serial_turns=150, serial_seconds=3.0), counted_turns=100)
FULL = Plan(floor_turns=1000, floor_raw_s=1.0, raw_s=3.0, serial=dataclasses.replace(
    turns.FULL, serial_warmup=50, serial_turns=1000, serial_seconds=15.0), counted_turns=500)


def select_one_us(dsn: str, count: int = 300) -> float:
    """The p50 of ``SELECT 1`` on a warm connection: one round trip and nothing else."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(30):
            conn.execute("SELECT 1").fetchone()
        samples = []
        for _ in range(count):
            t0 = time.perf_counter()
            conn.execute("SELECT 1").fetchone()
            samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1e6


async def floor_turn(dsn: str, plan: Plan) -> dict[str, Any]:
    return await floor.bench_postgres(dsn, plan.floor_turns, plan.floor_raw_s)


async def tidings_turn(dsn: str, plan: Plan, workdir: Path) -> dict[str, Any]:
    backend = turns.Backend(name="postgres", key="pg", admin_dsn=dsn, workdir=workdir)
    async with scratch_url("postgres", dsn, "rtt") as url:
        return await turns.serial(backend, url, plan=plan.serial, turns=plan.serial.serial_turns)


Counts = Callable[[], dict[int, int]]


def per_turn(before: dict[int, int], after: dict[int, int], count: int) -> dict[str, Any]:
    """Round trips waited for per turn, over every connection and by connection (the busiest
    first, those with none left out)."""
    spent = sorted(((after[k] - before.get(k, 0)) / count for k in after), reverse=True)
    return {"per_turn": sum(spent), "by_connection": [round(x, 2) for x in spent if x]}


async def counted_floor(dsn: str, counts: Counts, count: int) -> dict[str, Any]:
    """The floor's turns through the proxy, with the round trips the proxy saw."""
    async with scratch_url("postgres", dsn, "rtt") as url:
        conv, instance = await floor.conversation(url)
        with psycopg.connect(url, autocommit=True) as conn:
            for n in range(20):
                floor.pg_turn(conn, conv, instance, n)
            before = counts()
            for n in range(20, 20 + count):
                floor.pg_turn(conn, conv, instance, n)
            after = counts()
    return per_turn(before, after, count)


async def counted_tidings(dsn: str, counts: Counts, count: int, workdir: Path) -> dict[str, Any]:
    """tidings' serial turns through the proxy (as ``turns.serial`` takes them), with the
    round trips the proxy saw on every connection of the runtime."""
    backend = turns.Backend(name="postgres", key="pg", admin_dsn=dsn, workdir=workdir)
    async with scratch_url("postgres", dsn, "rtt") as url, turns.open_runtime(
            backend, url, turns.timed_model()) as rt:
        conv = (await rt.create_conversation(turns.OWNER, turns.PROFILE)).conversation_id
        await turns.seed_history(rt, conv, turns.HISTORY)
        for n in range(20):
            await turns.turn(rt, conv, n)
        before = counts()
        for n in range(20, 20 + count):
            await turns.turn(rt, conv, n)
        after = counts()
    return per_turn(before, after, count)


def median_of(rounds: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rounds if r.get(key) is not None]
    return statistics.median(values) if values else None


async def main_async(args: argparse.Namespace) -> int:
    plan = QUICK if args.quick else FULL
    started = time.perf_counter()
    results = Results()
    figures = results.figures
    dsn = args.postgres_dsn
    figures["sqlite_raw_commit_p50_us"] = raw_sqlite_commit_us(1.0)
    raw_direct = [raw_pg_commit_us(dsn, plan.raw_s)]
    proxy: RttProxy | ProxyProcess = (RttProxy if args.proxy == "thread" else ProxyProcess)(
        args.delay_ms / 1e3)
    port = proxy.start()
    log(f"proxy on 127.0.0.1:{port} ({args.proxy}), {args.delay_ms} ms each way")
    via = psycopg.conninfo.make_conninfo(dsn, host="127.0.0.1", port=str(port))
    pings = [(select_one_us(dsn), select_one_us(via))]
    rounds: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="tidings-bench-rtt-") as folder:
            workdir = Path(folder)
            steps: list[tuple[str, Callable[[], Awaitable[dict[str, Any]]]]] = [
                ("floor_rtt", lambda: floor_turn(via, plan)),
                ("tidings_rtt", lambda: tidings_turn(via, plan, workdir)),
            ]
            if args.direct:
                steps += [("floor_direct", lambda: floor_turn(dsn, plan)),
                          ("tidings_direct", lambda: tidings_turn(dsn, plan, workdir))]
            for label, count_step in (
                    ("floor", lambda: counted_floor(via, proxy.counts, plan.counted_turns)),
                    ("tidings", lambda: counted_tidings(via, proxy.counts, plan.counted_turns,
                                                        workdir))):
                counted = await guarded(results, f"counted_{label}", count_step)
                if counted is not None:
                    figures[f"counted_{label}"] = counted
                    log(f"  {label}: {counted['per_turn']:.2f} round trips per turn "
                        f"(by connection {counted['by_connection']})")
            for n in range(args.rounds):
                order = steps if n % 2 == 0 else steps[1::-1] + steps[:1:-1]
                measured: dict[str, Any] = {}
                for name, step in order:
                    value = await guarded(results, f"round{n + 1}_{name}", step)
                    if value is None:
                        continue
                    us = value["turn_p50_us"] if "turn_p50_us" in value else value[
                        "overhead_p50_us"]
                    measured[name] = us
                    if name == "floor_rtt":
                        measured["raw_rtt"] = value["raw_commit_p50_us"]
                    if name == "tidings_rtt":  # where bench/turns.py counts them
                        for key in ("round_trips_per_unit", "units_per_turn"):
                            measured[key] = value.get(key)
                    log(f"  round {n + 1} {name}: {us:,.0f} µs per turn")
                if measured.get("floor_rtt") and measured.get("tidings_rtt"):
                    measured["ratio"] = measured["tidings_rtt"] / measured["floor_rtt"]
                rounds.append(measured)
    finally:
        pings.append((select_one_us(dsn), select_one_us(via)))
        proxy.stop()
    raw_direct.append(raw_pg_commit_us(dsn, plan.raw_s))
    figures["rounds"] = rounds
    figures["select_one_us"] = pings
    figures.update(proxy.stats())
    figures["pg_raw_commit_p50_us"] = statistics.mean(raw_direct)
    added = statistics.mean(v - d for d, v in pings)
    ours = median_of(rounds, "tidings_rtt")
    theirs = median_of(rounds, "floor_rtt")
    direct = {"tidings": median_of(rounds, "tidings_direct"),
              "floor": median_of(rounds, "floor_direct")}

    def round_trips(through: float | None, plain: float | None) -> float | None:
        return None if through is None or plain is None else (through - plain) / added

    line = {
        "pg_turn_overhead_us_rtt1ms": ours,
        "pg_floor_turn_us_rtt1ms": theirs,
        "pg_turn_overhead_ratio_rtt1ms": ours / theirs if ours and theirs else None,
        "pg_turn_overhead_ratio_rtt1ms_goal": GOAL,
        "pg_turn_overhead_us_direct": direct["tidings"],
        "pg_floor_turn_us_direct": direct["floor"],
        "pg_turn_round_trips_est": round_trips(ours, direct["tidings"]),
        "pg_floor_round_trips_est": round_trips(theirs, direct["floor"]),
        "pg_turn_round_trips_counted": figures.get("counted_tidings", {}).get("per_turn"),
        "pg_floor_round_trips_counted": figures.get("counted_floor", {}).get("per_turn"),
        "pg_round_trips_per_unit_rtt1ms": median_of(rounds, "round_trips_per_unit"),
        "pg_units_per_turn_rtt1ms": median_of(rounds, "units_per_turn"),
        "proxy_delay_p50_us": figures.get("proxy_delay_p50_us"),
        "proxy_added_rtt_us": added,
        "pg_raw_commit_p50_us_rtt1ms": median_of(rounds, "raw_rtt"),
        "round_ratios": [r.get("ratio") for r in rounds],
    }
    log(f"tidings {fmt_us(ours)} vs floor {fmt_us(theirs)} per turn through the proxy "
        f"(ratio {line['pg_turn_overhead_ratio_rtt1ms'] or 0:.2f}, goal <= {GOAL}); "
        f"the proxy adds {added:,.0f} µs per round trip")
    return finish(results, started, line, {
        "quick": args.quick, "rounds": args.rounds, "delay_ms": args.delay_ms,
        "proxy": args.proxy, "direct": args.direct, "postgres_dsn": dsn,
        "plan": dataclasses.asdict(plan)})


def fmt_us(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} µs"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="the small plan (under 2 minutes)")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN)
    parser.add_argument("--delay-ms", type=float, default=0.5,
                        help="each way (default 0.5; the keys say rtt1ms whatever it is)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--proxy", choices=("process", "thread"), default="process",
                        help="where the proxy runs (default: a child process)")
    parser.add_argument("--no-direct", dest="direct", action="store_false",
                        help="skip the direct (no proxy) figures")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(run_main(main_async, parse_args()))
