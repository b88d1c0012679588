"""The performance report: run every benchmark and write its figures into docs/performance.md.

    python bench/report.py [--quick] [--only NAME,...] [--rounds N] [--no-doc] [--json PATH]
    python bench/report.py --from-json bench/last-report.json   # render again, run nothing

(names: outbox, turns, tasks, mail, torture, scale, peers, load, service)

First the physical limits of this machine, measured here: raw single-row commits on SQLite at
``synchronous=FULL`` and ``NORMAL``, one row per transaction and 100 per transaction, and on
PostgreSQL the same two. Then each bench runs as its own process (``--quick`` is passed on),
one after the other, each bounded by a timeout; the last JSON line each prints is kept.

The figures are absolute (µs, messages/s). Each goal is set against "the floor": a minimal
implementation of the same durable paths on tidings' own schema, measured side by side with
tidings at revision 3cf4b42 on a quiet disk. Beside every figure the report prints the raw
single-row commit p50 that the same bench run measured, so a reader can tell a slow unit of
work from a slow disk or a busy machine.

``bench/floor.py`` measures the floor again in the same report, figure by figure: beside each of
tidings' turn overhead, CPU per turn at 100 conversations, wake and outbox end to end (1 and 100
conversations), on both backends, the report prints tidings ÷ the floor and its goal (times at
most 1.25, rates at least 0.85), and says when a raw SQLite commit p50 of those runs was over
200 µs (figures not to be quoted). ``--rounds 3`` runs the floor and those benches alternately,
three times: their figures are the medians, each quotient the median of the rounds' quotients.

The report -- the limits, the goals table, the other benches' figures, and any bench that
failed (named, with the end of its output) -- replaces what lies between the ``report:begin``
and ``report:end`` markers of docs/performance.md (the hand-written text around them stays),
and the whole of it is written to ``bench/last-report.json``. A bench that fails, times out or
prints no JSON is named in the report; the others still run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from harness import DEFAULT_DSN, log, run_main, source_revision

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "performance.md"
BEGIN, END = "<!-- report:begin -->", "<!-- report:end -->"
BENCHES = ("floor", "outbox", "turns", "tasks", "mail", "torture", "scale", "peers", "load",
           "service", "a2a_children", "feed_idle", "rtt", "pg_events")


def sqlite_commits_per_s(synchronous: str, rows: int, seconds: float = 1.0) -> float:
    with tempfile.TemporaryDirectory(prefix="report-raw-") as folder:
        conn = sqlite3.connect(os.path.join(folder, "raw.db"), isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("CREATE TABLE t (n INTEGER, body TEXT)")
        count, end = 0, time.perf_counter() + seconds
        t0 = time.perf_counter()
        while time.perf_counter() < end:
            conn.execute("BEGIN")
            conn.executemany("INSERT INTO t VALUES (?, 'x')", [(i,) for i in range(rows)])
            conn.execute("COMMIT")
            count += 1
        elapsed = time.perf_counter() - t0
        conn.close()
    return count / elapsed


def pg_commits_per_s(dsn: str, rows: int, seconds: float = 1.0) -> float:
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TEMP TABLE t (n integer, body text)")
        conn.commit()
        count, end = 0, time.perf_counter() + seconds
        t0 = time.perf_counter()
        with conn.cursor() as cur:
            while time.perf_counter() < end:
                cur.executemany("INSERT INTO t VALUES (%s, 'x')", [(i,) for i in range(rows)])
                conn.commit()
                count += 1
        return count / (time.perf_counter() - t0)


def limits(dsn: str) -> dict[str, float | None]:
    found: dict[str, float | None] = {}
    for sync in ("FULL", "NORMAL"):
        for rows in (1, 100):
            found[f"sqlite_{sync.lower()}_{rows}_per_commit"] = sqlite_commits_per_s(sync, rows)
    for rows in (1, 100):
        try:
            found[f"pg_{rows}_per_commit"] = pg_commits_per_s(dsn, rows)
        except psycopg.Error:
            found[f"pg_{rows}_per_commit"] = None
    return found


#: Wall-clock bound per bench: a hung bench is stopped and named. Its process group gets SIGINT
#: first (every bench unwinds on KeyboardInterrupt, removing its scratch databases and stopping
#: the servers it started), then SIGTERM, then SIGKILL.
TIMEOUT_S = {"quick": 900.0, "full": 3600.0}


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _stop(process: subprocess.Popen[str]) -> None:
    """End a bench that ran out of time, with the processes it started."""
    for sig, grace in ((signal.SIGINT, 30.0), (signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


def run_bench(name: str, quick: bool, dsn: str, timeout: float) -> dict[str, Any]:
    command = [sys.executable, str(ROOT / "bench" / f"{name}.py")]
    if quick:
        command.append("--quick")
    command += ["--postgres-dsn", dsn]
    started = time.perf_counter()
    result: dict[str, Any] = {"loadavg_before": _loadavg()}
    try:
        process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
    except OSError as exc:
        return {**result, "exit": None, "seconds": 0.0, "error": f"did not start: {exc}"}
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(process)
        stdout, stderr = process.communicate()
        result["error"] = f"timed out after {timeout:.0f} s"
    result.update(exit=process.returncode, seconds=round(time.perf_counter() - started, 1),
                  loadavg_after=_loadavg())
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                result["json"] = json.loads(line)
            except ValueError:
                continue
            break
    if "json" not in result or process.returncode != 0:
        tail = (stderr or stdout).strip()[-1500:]
        result["error"] = "; ".join(
            filter(None, [result.get("error"), f"exit {process.returncode}"
                          if process.returncode else None,
                          None if "json" in result else "no JSON line"])) + "\n" + tail
    return result


def merged(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One bench's rounds as one run: each top-level number of its JSON the median over the
    rounds that have it (the rest as the last round printed it), the run times summed, the
    errors of every round."""
    last = runs[-1]
    datas = [r["json"] for r in runs if isinstance(r.get("json"), dict)]
    result: dict[str, Any] = {**last, "seconds": round(sum(r.get("seconds") or 0 for r in runs), 1),
                              "loadavg_before": runs[0].get("loadavg_before"),
                              "exit": max((r.get("exit") or 0) for r in runs)}
    errors = [f"round {n + 1}: {r['error']}" for n, r in enumerate(runs) if r.get("error")]
    result.pop("error", None)
    if errors:
        result["error"] = "\n".join(errors)
    if datas:
        data = dict(datas[-1])
        for key in {k for d in datas for k in d}:
            values = [d[key] for d in datas
                      if isinstance(d.get(key), (int, float)) and not isinstance(d[key], bool)]
            if values:
                data[key] = statistics.median(values)
        result["json"] = data
    return result


def _get(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _num(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)):
        return f"{value:,.{digits}f}"
    return str(value)


_OPS: dict[str, tuple[str, Callable[[float, float], bool]]] = {
    "<=": ("≤", lambda v, b: v <= b),
    ">=": ("≥", lambda v, b: v >= b),
    "<": ("<", lambda v, b: v < b),
    "==": ("", lambda v, b: v == b),
}


@dataclass(frozen=True)
class Goal:
    """One figure of the goals table: an absolute value against the floor."""

    bench: str
    label: str
    key: str
    unit: str
    before: str  # tidings at revision 3cf4b42, quiet machine
    floor: str  # the floor, same run as ``before``
    op: str
    bound: float
    digits: int = 0
    here: str = ""  # the key of bench/floor.py's figure for it: the floor on this machine, now

    @property
    def backend(self) -> str:
        return "pg" if self.key.startswith("pg_") else "sqlite"

    def goal(self) -> str:
        sign, _ = _OPS[self.op]
        shown = f"{self.bound:,.0f}" if self.bound % 1 == 0 else f"{self.bound:g}"
        return " ".join(filter(None, [sign, shown, self.unit]))


GOALS: tuple[Goal, ...] = (
    Goal("turns", "SQLite turn overhead p50 (scripted model, no tool)",
         "sqlite_turn_overhead_us", "µs", "1,645", "618", "<=", 775,
         here="sqlite_floor_turn_us"),
    Goal("turns", "SQLite CPU per turn at 100 conversations", "sqlite_cpu_per_turn_us_100",
         "µs", "~1,100", "275", "<=", 345, here="sqlite_floor_cpu_per_turn_us_100"),
    Goal("outbox", "SQLite outbox end to end, 100 conversations", "sqlite_e2e_100_msgs",
         "msg/s", "6,368", "10,642", ">=", 9000, here="sqlite_floor_e2e_100_msgs"),
    Goal("outbox", "SQLite outbox end to end, 1 conversation", "sqlite_e2e_1_msgs", "msg/s",
         "1,011", "1,668", ">=", 1400, here="sqlite_floor_e2e_1_msgs"),
    Goal("tasks", "SQLite wake p50 (process exit → woken model call)", "sqlite_wake_p50_us",
         "µs", "1,715", "915", "<=", 1150, here="sqlite_floor_wake_us"),
    Goal("turns", "PostgreSQL turn overhead p50", "pg_turn_overhead_us", "µs", "3,338", "804",
         "<=", 1000, here="pg_floor_turn_us"),
    Goal("outbox", "PostgreSQL outbox end to end, 100 conversations", "pg_e2e_100_msgs",
         "msg/s", "3,051", "4,670", ">=", 4000, here="pg_floor_e2e_100_msgs"),
    Goal("turns", "SQLite event-loop lag p99, 100 busy conversations", "sqlite_loop_lag_p99_ms",
         "ms", "", "", "<=", 5, 1),
    Goal("turns", "PostgreSQL event-loop lag p99, 100 busy conversations",
         "pg_loop_lag_p99_ms", "ms", "", "", "<=", 5, 1),
    Goal("service", "SQLite HTTP overhead (`tidings serve` ÷ library, same turns, p50)",
         "sqlite_http_overhead_ratio", "", "", "", "<=", 1.5, 2),
    Goal("service", "PostgreSQL HTTP overhead (same)", "pg_http_overhead_ratio", "", "", "",
         "<=", 1.5, 2),
    Goal("scale", "PostgreSQL scale-out CPU efficiency, 2 processes",
         "pg_scale_cpu_efficiency_2", "", "", "", ">=", 0.85, 2),
    Goal("scale", "PostgreSQL scale-out CPU efficiency, 4 processes",
         "pg_scale_cpu_efficiency_4", "", "", "", ">=", 0.85, 2),
    Goal("scale", "overlapping turns (PostgreSQL, all configurations)",
         "pg_scale_overlapping_turns", "", "", "", "==", 0),
    Goal("a2a_children", "remote A2A child: agent completed → the parent's mail input, p50 "
         "(SQLite)", "remote_child_relay_p50_ms", "ms", "", "", "<=", 200, 1),
)

@dataclass(frozen=True)
class Ratio:
    """A figure of tidings over the same figure of ``bench/floor.py`` in the same report."""

    label: str
    bench: str
    key: str
    floor_key: str
    unit: str
    op: str  # "<=" for times (tidings at most bound times the floor's), ">=" for rates
    bound: float

    @property
    def backend(self) -> str:
        return "pg" if self.key.startswith("pg_") else "sqlite"


def _ratios() -> tuple[Ratio, ...]:
    found: list[Ratio] = []
    for prefix, name in (("sqlite", "SQLite"), ("pg", "PostgreSQL")):
        found += [
            Ratio(f"{name} turn overhead p50", "turns", f"{prefix}_turn_overhead_us",
                  f"{prefix}_floor_turn_us", "µs", "<=", 1.25),
            Ratio(f"{name} CPU per turn, 100 conversations", "turns",
                  f"{prefix}_cpu_per_turn_us_100", f"{prefix}_floor_cpu_per_turn_us_100", "µs",
                  "<=", 1.25),
            Ratio(f"{name} wake p50 (process exit → woken model call)", "tasks",
                  f"{prefix}_wake_p50_us", f"{prefix}_floor_wake_us", "µs", "<=", 1.25),
            Ratio(f"{name} outbox end to end, 1 conversation", "outbox", f"{prefix}_e2e_1_msgs",
                  f"{prefix}_floor_e2e_1_msgs", "msg/s", ">=", 0.85),
            Ratio(f"{name} outbox end to end, 100 conversations", "outbox",
                  f"{prefix}_e2e_100_msgs", f"{prefix}_floor_e2e_100_msgs", "msg/s", ">=", 0.85),
        ]
    return tuple(found)


#: tidings ÷ the floor measured in the same report, per figure the goals name.
RATIOS = _ratios()
#: The benches whose figures are read against the floor: ``--rounds`` runs them alternately.
ROUND_BENCHES = ("floor", "turns", "tasks", "outbox")
#: Above this raw SQLite commit p50 (µs) in a run, its figures are not quoted.
QUOTABLE_RAW_US = 200.0


#: An other figure: (bench, label, JSON paths, digits, goal text, per-value checks). A path is a
#: top-level key or a tuple into the bench's JSON. A check is (op, bound) or None (no goal).
Check = tuple[str, float] | None
Path_ = str | tuple[str, ...]
Other = tuple[str, str, tuple[Path_, ...], int, str, tuple[Check, ...]]

OTHERS: tuple[Other, ...] = (
    ("turns", "turns/s at 1 / 100 conversations, SQLite", ("sqlite_tps_1", "sqlite_tps_100"), 0,
     "", ()),
    ("turns", "turns/s at 1 / 100 conversations, PostgreSQL", ("pg_tps_1", "pg_tps_100"), 0,
     "", ()),
    ("turns", "turn overhead p99, µs (SQLite / PG)",
     ("sqlite_turn_overhead_p99_us", "pg_turn_overhead_p99_us"), 0, "", ()),
    ("turns", "PostgreSQL process CPU per turn at 100 conversations, µs",
     ("pg_cpu_per_turn_us_100",), 0, "", ()),
    ("turns", "PostgreSQL round trips per unit, serial turns (and units per turn)",
     ("pg_round_trips_per_unit", "pg_units_per_turn"), 2, "≤ 2", (("<=", 2), None)),
    ("turns", "idle memory per conversation, bytes (SQLite / PG)",
     ("sqlite_idle_bytes_per_conversation", "pg_idle_bytes_per_conversation"), 0, "< 2,048",
     (("<", 2048), ("<", 2048))),
    ("turns", "CPU with idle conversations, % of a CPU (SQLite / PG)",
     ("sqlite_idle_cpu_percent", "pg_idle_cpu_percent"), 2, "no polling", ()),
    ("outbox", "PostgreSQL outbox end to end, 1 conversation, msg/s", ("pg_e2e_1_msgs",), 0,
     "", ()),
    ("outbox", "client CPU per message at 100 conversations, µs (SQLite / PG)",
     ("sqlite_cpu_per_msg_us_100", "pg_cpu_per_msg_us_100"), 0, "", ()),
    ("outbox", "claim flatness, 100k ÷ 1k ready (SQLite / PG)",
     ("sqlite_claim_flatness", "pg_claim_flatness"), 2, "≤ 1.25 / ≤ 1.5",
     (("<=", 1.25), ("<=", 1.5))),
    ("outbox", "claim after 20,000 acknowledged ÷ before (PG, autovacuum off)",
     ("pg_churn_ratio",), 2, "≤ 1.5", (("<=", 1.5),)),
    ("outbox", "peak RSS growth filling and claiming, MiB (SQLite / PG)",
     ("sqlite_peak_memory_growth_mib", "pg_peak_memory_growth_mib"), 1, "holds none", ()),
    ("tasks", "PostgreSQL wake p50, µs", ("pg_wake_p50_us",), 0, "", ()),
    ("tasks", "result envelopes, MB/s (SQLite / PG)",
     ("sqlite_envelope_mb_s", "pg_envelope_mb_s"), 0, "≥ 100", ((">=", 100), (">=", 100))),
    ("mail", "relays/s, child replies to their parent (SQLite / PG)",
     ("sqlite_relays_per_s", "pg_relays_per_s"), 0, "", ()),
    ("mail", "relay path per reply, µs (SQLite / PG)",
     (("figures", "sqlite_fan_in", "drain", "us_per_reply_path"),
      ("figures", "pg_fan_in", "drain", "us_per_reply_path")), 0, "", ()),
    ("mail", "last reply → the parent reads it, p50 µs (SQLite / PG)",
     ("sqlite_mail_latency_p50_us", "pg_mail_latency_p50_us"), 0, "", ()),
    ("mail", "replies relayed by the sweep instead of a kick (SQLite / PG)",
     ("sqlite_relayed_by_sweep", "pg_relayed_by_sweep"), 0, "0", (("==", 0), ("==", 0))),
    ("torture", "SIGKILLs survived (SQLite / PG)", ("sqlite_kills", "pg_kills"), 0, "", ()),
    ("torture", "violations found (SQLite / PG)", ("sqlite_violations", "pg_violations"), 0, "0",
     (("==", 0), ("==", 0))),
    ("scale", "turns/s, 2 and 4 processes ÷ 1 (PG, 2 CPUs)", ("scale_2_ratio", "scale_4_ratio"),
     2, "", ()),
    ("peers", "tidings ÷ huey, ÷ persist-queue (SQLite)",
     ("sqlite_vs_huey", "sqlite_vs_persist_queue"), 2, "≥ 2", ((">=", 2), (">=", 2))),
    ("peers", "tidings ÷ procrastinate (PG)", ("pg_vs_procrastinate",), 2, "≥ 5", ((">=", 5),)),
    ("load", "`tidings serve`, 200 watchers + 50 posters: 5xx (SQLite / PG)",
     ("sqlite_5xx", "pg_5xx"), 0, "0", (("==", 0), ("==", 0))),
    ("load", "inputs acknowledged but not on file (SQLite / PG)",
     ("sqlite_lost_inputs", "pg_lost_inputs"), 0, "0", (("==", 0), ("==", 0))),
    ("load", "server RSS growth over the measured window, MiB (SQLite / PG)",
     ("sqlite_rss_growth_mib", "pg_rss_growth_mib"), 1, "≤ 20 (quick)",
     (("<=", 20), ("<=", 20))),
    ("load", "post p50 / p99, ms (SQLite)", ("sqlite_post_p50_ms", "sqlite_post_p99_ms"), 0, "",
     ()),
    ("load", "post p50 / p99, ms (PG)", ("pg_post_p50_ms", "pg_post_p99_ms"), 0, "", ()),
    ("load", "event lag to watchers p99, ms (SQLite / PG)",
     ("sqlite_lag_p99_ms", "pg_lag_p99_ms"), 0, "", ()),
    ("service", "library turn p50, µs (SQLite / PG)",
     ("sqlite_library_turn_p50_us", "pg_library_turn_p50_us"), 0, "", ()),
    ("service", "waiting post (`?wait=`) ÷ library, p50 (SQLite / PG)",
     ("sqlite_http_wait_overhead_ratio", "pg_http_wait_overhead_ratio"), 2, "", ()),
    ("service", "the feed way read by a bare HTTP/1.1 client (no httpx) ÷ library, p50 "
     "(SQLite / PG)",
     ("sqlite_http_bare_overhead_ratio", "pg_http_bare_overhead_ratio"), 2, "", ()),
    ("a2a_children", "remote A2A child relay p50, ms: PostgreSQL / SQLite polling only (1 s)",
     ("pg_remote_child_relay_p50_ms", "remote_child_relay_polling_p50_ms"), 1, "", ()),
    ("feed_idle", "`tidings serve` with 200 idle SSE watchers, % of a CPU (SQLite / PG)",
     ("feed_idle_cpu_pct_200", "pg_feed_idle_cpu_pct_200"), 2, "≤ 2",
     (("<=", 2), ("<=", 2))),
    ("feed_idle", "`tidings serve` with no watcher, % of a CPU (SQLite / PG)",
     ("feed_idle_cpu_pct_0", "pg_feed_idle_cpu_pct_0"), 2, "", ()),
    ("rtt", "PostgreSQL 1 ms away: turn ÷ the floor's through the same proxy",
     ("pg_turn_overhead_ratio_rtt1ms",), 2, "≤ 1.25", (("<=", 1.25),)),
    ("rtt", "PostgreSQL 1 ms away: turn / floor, µs",
     ("pg_turn_overhead_us_rtt1ms", "pg_floor_turn_us_rtt1ms"), 0, "", ()),
    ("pg_events", "PostgreSQL: a turn's journal statement, p50 µs, with / without the A2A push "
     "trigger", ("pg_events_insert_us", "pg_events_insert_no_push_trigger_us"), 0, "", ()),
    ("pg_events", "PostgreSQL: the server's time in the A2A push trigger per call, µs",
     ("pg_push_trigger_explain_us",), 0, "", ()),
)


def raw_commit_us(data: Any, backend: str) -> float | None:
    """The raw single-row commit p50 a bench measured in its own run, in µs."""
    for key in (f"{backend}_raw_commit_p50_us", f"{backend}_raw_commit_us",
                f"raw_{backend}_commit_us"):
        value = _get(data, key)
        if isinstance(value, (int, float)):
            return float(value)
    return None


def _state(report: dict[str, Any], bench: str) -> tuple[dict[str, Any] | None, str]:
    """(the bench's JSON, or None) and what to show when there is no value."""
    run = report["benches"].get(bench)
    if run is None:
        return None, "not run"
    data = run.get("json")
    if not isinstance(data, dict):
        return None, "failed"
    return data, "-"


def _check(check: Check, value: Any) -> bool | None:
    if check is None or not isinstance(value, (int, float)):
        return None
    op, bound = check
    return _OPS[op][1](float(value), bound)


def _verdict(results: list[bool | None]) -> str:
    if not results or any(r is None for r in results):
        return ""
    return "✓" if all(results) else "✗"


def goal_rows(report: dict[str, Any]) -> list[str]:
    lines = ["| figure | value | raw commit p50, same run | tidings 3cf4b42 | floor | floor here "
             "| goal | met | bench |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    floors, _ = _state(report, "floor")
    for g in GOALS:
        data, missing = _state(report, g.bench)
        value = _get(data, g.key)
        raw = raw_commit_us(data, g.backend)
        shown = (f"{_num(value, g.digits)} {g.unit}".strip()
                 if isinstance(value, (int, float)) else missing)
        verdict = _verdict([_check((g.op, g.bound), value)])
        before = f"{g.before} {g.unit}".strip() if g.before else ""
        floor = f"{g.floor} {g.unit}".strip() if g.floor else ""
        here = _get(floors, g.here) if g.here else None
        here_raw = _get(floors, f"{g.backend}_raw_commit_p50_us")
        here_shown = (f"{_num(here)} {g.unit} (raw {_num(here_raw)} µs)"
                      if isinstance(here, (int, float)) else "")
        lines.append(f"| {g.label} | {shown} | {_num(raw) + ' µs' if raw else '-'} | {before} "
                     f"| {floor} | {here_shown} | {g.goal()} | {verdict} | `{g.bench}` |")
    return lines


def _runs(report: dict[str, Any], bench: str) -> list[dict[str, Any]]:
    """The bench's runs in this report: one per round with ``--rounds``, else its one run."""
    rounds = report.get("rounds")
    if rounds:
        return [r[bench] for r in rounds if bench in r]
    run = report["benches"].get(bench)
    return [] if run is None else [run]


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _with_unit(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{_num(value)} {unit}"


def ratio_rows(report: dict[str, Any]) -> list[str]:
    """tidings ÷ the floor beside each figure the goals name; with rounds, the median of the
    rounds' quotients (each round's tidings figure over the floor of the same round)."""
    lines = ["| figure | tidings | floor here | tidings ÷ floor | goal | met | rounds |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    floors = _runs(report, "floor")
    for r in RATIOS:
        runs = _runs(report, r.bench)
        quotients: list[float] = []
        mine: list[float] = []
        theirs: list[float] = []
        for floor_run in floors:
            floor = _get(floor_run.get("json"), r.floor_key)
            if isinstance(floor, (int, float)):
                theirs.append(float(floor))
        for n, run in enumerate(runs):
            value = _get(run.get("json"), r.key)
            floor = _get(floors[n].get("json"), r.floor_key) if n < len(floors) else None
            if isinstance(value, (int, float)):
                mine.append(float(value))
            if isinstance(value, (int, float)) and isinstance(floor, (int, float)) and floor:
                quotients.append(float(value) / float(floor))
        quotient = _median(quotients)
        verdict = _verdict([_check((r.op, r.bound), quotient)])
        shown = (f"{_num(quotient, 2)}" if quotient is not None
                 else ("not run" if not runs or not floors else "-"))
        sign, _ = _OPS[r.op]
        each = ", ".join(_num(q, 2) for q in quotients) if len(quotients) > 1 else ""
        lines.append(f"| {r.label} | {_with_unit(_median(mine), r.unit)} "
                     f"| {_with_unit(_median(theirs), r.unit)} | {shown} | {sign} {r.bound:g} "
                     f"| {verdict} | {each} |")
    return lines


def quotable(report: dict[str, Any]) -> list[str]:
    """Whether the figures read against the floor may be quoted: every run of those benches
    measured a raw SQLite commit p50 of at most ``QUOTABLE_RAW_US``."""
    over: list[str] = []
    seen = 0
    for bench in ROUND_BENCHES:
        for n, run in enumerate(_runs(report, bench)):
            raw = raw_commit_us(run.get("json"), "sqlite")
            if raw is None:
                continue
            seen += 1
            if raw > QUOTABLE_RAW_US:
                where = f"`{bench}`" + (f" round {n + 1}" if report.get("rounds") else "")
                over.append(f"{where} {raw:,.0f} µs")
    if not seen:
        return ["No raw SQLite commit was measured beside these figures: **not quotable**."]
    if over:
        return [f"**Not quotable:** the raw SQLite commit p50 was over {QUOTABLE_RAW_US:.0f} µs "
                f"in {', '.join(over)}."]
    return [f"Quotable: every run above measured a raw SQLite commit p50 of at most "
            f"{QUOTABLE_RAW_US:.0f} µs."]


def other_rows(report: dict[str, Any]) -> list[str]:
    lines = ["| bench | figure | value | goal | met |", "| --- | --- | --- | --- | --- |"]
    for bench, label, paths, digits, goal, checks in OTHERS:
        data, missing = _state(report, bench)
        values = [_get(data, *((p,) if isinstance(p, str) else p)) for p in paths]
        if data is None or all(v is None for v in values):
            shown, verdict = missing, ""
        else:
            shown = " / ".join(_num(v, digits) for v in values)
            verdict = _verdict([_check(c, v) for c, v in zip(checks, values, strict=False)])
        lines.append(f"| `{bench}` | {label} | {shown} | {goal} | {verdict} |")
    return lines


def raw_rows(report: dict[str, Any]) -> list[str]:
    """The raw commit p50 each bench measured in its own run."""
    lines = ["| bench | SQLite | PostgreSQL | load average, start → end | run time |",
             "| --- | --- | --- | --- | --- |"]
    for name, run in report["benches"].items():
        data = run.get("json")
        cells = [raw_commit_us(data, b) for b in ("sqlite", "pg")]
        load = f"{_num(run.get('loadavg_before'), 1)} → {_num(run.get('loadavg_after'), 1)}"
        lines.append(f"| `{name}` | {' | '.join(_num(c) + ' µs' if c else '-' for c in cells)} "
                     f"| {load} | {_num(run.get('seconds'))} s |")
    return lines


def failures(report: dict[str, Any]) -> list[str]:
    """Every bench that failed, and every step a bench reported as failed, by name."""
    lines: list[str] = []
    for name, run in report["benches"].items():
        if run.get("error"):
            first = run["error"].strip().splitlines()
            tail = first[-1] if len(first) > 1 else ""
            lines.append(f"- `{name}`: {first[0]}" + (f" — `{tail[:200]}`" if tail else ""))
        steps = _get(run.get("json"), "errors")
        if isinstance(steps, dict):
            lines += [f"- `{name}`, step `{step}`: `{str(why)[:200]}`"
                      for step, why in steps.items()]
    return lines


def render(report: dict[str, Any]) -> str:
    lim = report["limits"]
    lines = [
        BEGIN,
        "",
        f"## The report (`{report['command']}`)",
        "",
        f"Written by `{report['command']}` at revision `{report['revision']}` on "
        f"{report['when']} ({report['machine']}, load average "
        f"{_num(report.get('loadavg_before'), 1)} → {_num(report.get('loadavg_after'), 1)}); "
        f"every bench's JSON is in `{report.get('json_path', 'bench/last-report.json')}`.",
        "",
        "**The machine's limits, measured here** (commits per second):",
        "",
        "| | 1 row per commit | 100 rows per commit |",
        "| --- | --- | --- |",
        f"| SQLite, WAL, synchronous=FULL | {_num(lim.get('sqlite_full_1_per_commit'))} | "
        f"{_num(lim.get('sqlite_full_100_per_commit'))} |",
        f"| SQLite, WAL, synchronous=NORMAL | {_num(lim.get('sqlite_normal_1_per_commit'))}"
        f" | {_num(lim.get('sqlite_normal_100_per_commit'))} |",
        f"| PostgreSQL (INSERT + COMMIT) | {_num(lim.get('pg_1_per_commit'))} | "
        f"{_num(lim.get('pg_100_per_commit'))} |",
        "",
        "**Goals** (✓ met, ✗ not met). The raw commit is the single-row commit p50 the same bench "
        "measured in the same run; the 3cf4b42 and floor figures were measured side by side on a "
        "quiet disk (raw SQLite commit p50 about 65 µs). \"Floor here\" is `bench/floor.py` in "
        "this report: the same figure (turn, CPU per turn at 100 conversations, wake, outbox end "
        "to end) done by hand on the same schema, on this machine today, its raw commit beside "
        "it:",
        "",
        *goal_rows(report),
        "",
        "**tidings ÷ the floor**, each figure over the same figure of `bench/floor.py` in this "
        "report (times: at most 1.25; rates: at least 0.85)" + (
            f", the median of {len(report['rounds'])} rounds run alternately (the floor, then "
            "tidings' benches), each round's tidings over its own floor"
            if report.get("rounds") else "") + ":",
        "",
        *ratio_rows(report),
        "",
        *quotable(report),
        "",
        "**Other figures:**",
        "",
        *other_rows(report),
        "",
        "**Raw single-row commit p50 in each bench's run, and the machine's load:**",
        "",
        *raw_rows(report),
        "",
    ]
    failed = failures(report)
    if failed:
        lines += ["**Failed** (the figures of a failed bench or step read `failed` or `-`):", "",
                  *failed, ""]
    lines.append(END)
    return "\n".join(lines)


def write_doc(section: str) -> None:
    text = DOC.read_text("utf-8")
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        text = head + section + tail
    else:
        title, _, body = text.partition("\n")
        text = f"{title}\n\n{section}\n{body}"
    DOC.write_text(text, "utf-8")


def _shown_path(path: str) -> str:
    resolved = Path(path).resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(path)


def load_report(path: str) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(Path(path).read_text("utf-8"))
    report.setdefault("benches", {})
    report.setdefault("limits", {})
    return report


def save_report(report: dict[str, Any], path: str) -> None:
    Path(path).write_text(json.dumps(report, indent=1), "utf-8")


async def main_async(args: argparse.Namespace) -> int:
    if args.from_json:
        write_doc(render(load_report(args.from_json)))
        log(f"docs/performance.md rendered again from {args.from_json}")
        return 0
    names = [n for n in args.only.split(",") if n] if args.only else list(BENCHES)
    unknown = sorted(set(names) - set(BENCHES))
    if unknown:
        log(f"unknown bench(es): {', '.join(unknown)} (known: {', '.join(BENCHES)})")
        return 2
    timeout = args.timeout or TIMEOUT_S["quick" if args.quick else "full"]
    command = "python bench/report.py" + (" --quick" if args.quick else "") + (
        f" --only {','.join(names)}" if args.only else "") + (
        f" --rounds {args.rounds}" if args.rounds > 1 else "")
    report: dict[str, Any] = {
        "quick": args.quick, "revision": source_revision(), "command": command,
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
                   f"{platform.python_version()}",
        "loadavg_before": _loadavg(), "timeout_s": timeout,
        "json_path": _shown_path(args.json),
    }
    log("the machine's limits")
    report["limits"] = limits(args.postgres_dsn)
    report["benches"] = {}

    async def one(name: str, label: str = "") -> dict[str, Any]:
        log(f"bench/{name}.py{' --quick' if args.quick else ''}{label}")
        run = await asyncio.to_thread(run_bench, name, args.quick, args.postgres_dsn, timeout)
        outcome = "failed: " + run["error"].splitlines()[0] if run.get("error") else "done"
        log(f"  {outcome} in {run['seconds']} s")
        return run

    alternating = [n for n in ROUND_BENCHES if n in names] if args.rounds > 1 else []
    if alternating:
        rounds = [{name: await one(name, f" (round {n + 1} of {args.rounds})")
                   for name in alternating} for n in range(args.rounds)]
        report["rounds"] = rounds
        report["benches"].update({name: merged([r[name] for r in rounds])
                                  for name in alternating})
    for name in names:
        if name not in alternating:
            report["benches"][name] = await one(name)
    report["benches"] = {name: report["benches"][name] for name in names}
    report["loadavg_after"] = _loadavg()
    save_report(report, args.json)
    if not args.no_doc:
        write_doc(render(report))
    print(json.dumps({"limits": report["limits"], "benches": {
        n: {"exit": r["exit"], "seconds": r["seconds"], **({"error": r["error"][:300]}
                                                          if r.get("error") else {})}
        for n, r in report["benches"].items()}}))
    return 0 if all(not r.get("error") for r in report["benches"].values()) else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="every bench's quick plan")
    parser.add_argument("--only", default="", help=f"a subset of {','.join(BENCHES)}")
    parser.add_argument("--rounds", type=int, default=1,
                        help=f"run {', '.join(ROUND_BENCHES)} this many times, alternately; "
                             "their figures are the medians and each quotient to the floor "
                             "the median of the rounds' (3 to quote a figure)")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN)
    parser.add_argument("--timeout", type=float, default=0.0,
                        help="seconds per bench before it is stopped and named "
                             f"(default {TIMEOUT_S['quick']:.0f} quick, "
                             f"{TIMEOUT_S['full']:.0f} full)")
    parser.add_argument("--json", default=str(ROOT / "bench" / "last-report.json"),
                        help="where the whole report goes (default bench/last-report.json)")
    parser.add_argument("--no-doc", action="store_true",
                        help="leave docs/performance.md alone (the JSON is still written)")
    parser.add_argument("--from-json", default="", metavar="PATH",
                        help="run nothing: render docs/performance.md again from a report's "
                             "JSON")
    return parser.parse_args(argv)


def main() -> int:
    return run_main(main_async, parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
