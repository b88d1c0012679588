"""The performance report (issue 7): run every benchmark and write its figures into
docs/performance.md.

    python bench/report.py [--quick] [--only NAME,...]

(names: outbox, turns, tasks, mail, torture, scale, peers, load, service)

First the physical limits of this machine, measured here: raw single-row commits on SQLite at
``synchronous=FULL`` and ``NORMAL``, one row per transaction and 100 per transaction, and on
PostgreSQL the same two. Then each bench runs as its own process (``--quick`` is passed on);
the last JSON line each prints is kept. The report -- the limits, every headline figure with
its goal, the peers as ratios -- replaces what lies between the ``report:begin`` and
``report:end`` markers of docs/performance.md (the hand-written reading of the figures around
them stays), and the whole of it is written to ``bench/last-report.json``. A bench that fails
is named in the report; the others still run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from harness import DEFAULT_DSN, log, run_main, source_revision

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "performance.md"
BEGIN, END = "<!-- report:begin -->", "<!-- report:end -->"
BENCHES = ("outbox", "turns", "tasks", "mail", "torture", "scale", "peers", "load", "service")


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


def run_bench(name: str, quick: bool, dsn: str) -> dict[str, Any]:
    command = [sys.executable, str(ROOT / "bench" / f"{name}.py")]
    if quick:
        command.append("--quick")
    command += ["--postgres-dsn", dsn]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    result: dict[str, Any] = {"exit": done.returncode,
                              "seconds": round(time.perf_counter() - started, 1)}
    if lines:
        result["json"] = json.loads(lines[-1])
    else:
        result["error"] = (done.stderr or done.stdout)[-1500:]
    return result


def _get(data: dict[str, Any], *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)  # type: ignore[assignment]
    return data


def _num(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


Headline = tuple[str, str, tuple[str, ...], str, Callable[[Any], bool] | None]

HEADLINES: tuple[Headline, ...] = (
    ("outbox", "publish → claim → ack, 1 conversation, ratio to raw commits (SQLite / PG)",
     ("sqlite_e2e_1_ratio", "pg_e2e_1_ratio"), "≥ 0.25", lambda v: v >= 0.25),
    ("outbox", "same, 100 conversations (SQLite ≥ 2, PG ≥ 1)",
     ("sqlite_e2e_100_ratio", "pg_e2e_100_ratio"), "≥ 2 / ≥ 1", None),
    ("turns", "turn overhead, in raw commits (SQLite / PG)",
     ("sqlite_turn_overhead_ratio", "pg_turn_overhead_ratio"), "≤ 4", lambda v: v <= 4),
    ("turns", "100 conversations ÷ 1, turns/s (SQLite / PG)",
     ("sqlite_turns_100_vs_1", "pg_turns_100_vs_1"), "≥ 2.5", lambda v: v >= 2.5),
    ("tasks", "woken model call p50, in raw commits (SQLite / PG)",
     ("sqlite_wake_ratio_p50", "pg_wake_ratio_p50"), "≤ 5", lambda v: v <= 5),
    ("tasks", "result envelopes, MB/s (SQLite / PG)",
     ("sqlite_envelope_mb_s", "pg_envelope_mb_s"), "≥ 100", lambda v: v >= 100),
    ("mail", "relay path per reply, in raw SQLite commits (SQLite / PG)",
     ("sqlite_relay_cost_in_commits", "pg_relay_cost_in_commits"), "≤ 3", lambda v: v <= 3),
    ("torture", "SIGKILLs survived (SQLite / PG)", ("sqlite_kills", "pg_kills"), "", None),
    ("torture", "violations found (SQLite / PG)", ("sqlite_violations", "pg_violations"), "0",
     lambda v: v == 0),
    ("scale", "2 and 4 processes on PG, ratio to 1 process", ("scale_2_ratio", "scale_4_ratio"),
     "≥ 1.6 / ≥ 2.5", None),
    ("scale", "overlapping turns", ("overlapping_turns",), "0", lambda v: v == 0),
    ("scale", "turns per CPU-second (runtime + PG), 2 and 4 processes ÷ 1",
     ("pg_scale_cpu_efficiency_2", "pg_scale_cpu_efficiency_4"), "≥ 0.85",
     lambda v: v >= 0.85),
    ("peers", "tidings ÷ huey, ÷ persist-queue (SQLite)",
     ("sqlite_vs_huey", "sqlite_vs_persist_queue"), "≥ 2", lambda v: v >= 2),
    ("peers", "tidings ÷ procrastinate (PG)", ("pg_vs_procrastinate",), "≥ 5",
     lambda v: v >= 5),
    ("load", "`tidings serve`, 200 watchers + 50 posters: 5xx (SQLite / PG)",
     ("sqlite_5xx", "pg_5xx"), "0", lambda v: v == 0),
    ("load", "inputs acknowledged but not on file (SQLite / PG)",
     ("sqlite_lost_inputs", "pg_lost_inputs"), "0", lambda v: v == 0),
    ("load", "server RSS growth over the measured window, MiB (SQLite / PG)",
     ("sqlite_rss_growth_mib", "pg_rss_growth_mib"), "≤ 20 (quick)", lambda v: v <= 20),
    ("load", "post p50 / p99, ms (SQLite)", ("sqlite_post_p50_ms", "sqlite_post_p99_ms"), "",
     None),
    ("load", "post p50 / p99, ms (PG)", ("pg_post_p50_ms", "pg_post_p99_ms"), "", None),
    ("load", "event lag to watchers p99, ms (SQLite / PG)",
     ("sqlite_lag_p99_ms", "pg_lag_p99_ms"), "", None),
    ("service", "turn through `tidings serve` (post + SSE feed) ÷ the library, p50 (SQLite / PG)",
     ("sqlite_http_overhead_ratio", "pg_http_overhead_ratio"), "≤ 1.5", lambda v: v <= 1.5),
)


def render(report: dict[str, Any]) -> str:
    lim = report["limits"]
    lines = [
        BEGIN,
        "",
        f"## The report (`bench/report.py{' --quick' if report['quick'] else ''}`)",
        "",
        f"Written by `{report['command']}` at revision `{report['revision']}` on "
        f"{report['when']} ({report['machine']}); every bench's JSON is in "
        "`bench/last-report.json`.",
        "",
        "**The machine's limits, measured here** (commits per second):",
        "",
        "| | 1 row per commit | 100 rows per commit |",
        "| --- | --- | --- |",
        f"| SQLite, WAL, synchronous=FULL | {_num(lim.get('sqlite_full_1_per_commit'), 0)} | "
        f"{_num(lim.get('sqlite_full_100_per_commit'), 0)} |",
        f"| SQLite, WAL, synchronous=NORMAL | {_num(lim.get('sqlite_normal_1_per_commit'), 0)}"
        f" | {_num(lim.get('sqlite_normal_100_per_commit'), 0)} |",
        f"| PostgreSQL (INSERT + COMMIT) | {_num(lim.get('pg_1_per_commit'), 0)} | "
        f"{_num(lim.get('pg_100_per_commit'), 0)} |",
        "",
        "**Headline figures** (✓ met, ✗ not met; each ratio's denominator was measured in the "
        "same bench run):",
        "",
        "| bench | figure | value | goal | |",
        "| --- | --- | --- | --- | --- |",
    ]
    for bench, label, keys, goal, ok in HEADLINES:
        run = report["benches"].get(bench, {})
        data = run.get("json", {})
        values = [data.get(k) if isinstance(data, dict) else None for k in keys]
        shown = " / ".join(_num(v) for v in values)
        if "error" in run or (run and not data):
            shown, verdict = "failed (see the JSON)", "✗"
        elif ok is None or any(v is None for v in values):
            verdict = ""
        else:
            verdict = "✓" if all(ok(v) for v in values) else "✗"
        lines.append(f"| `{bench}` | {label} | {shown} | {goal} | {verdict} |")
    lines += ["", "Bench run times: " + ", ".join(
        f"{name} {run.get('seconds', '-')} s" for name, run in report["benches"].items()), "",
        END]
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


async def main_async(args: argparse.Namespace) -> int:
    names = [n for n in args.only.split(",") if n] if args.only else list(BENCHES)
    log("the machine's limits")
    report: dict[str, Any] = {
        "quick": args.quick, "revision": source_revision(),
        "command": "python bench/report.py" + (" --quick" if args.quick else ""),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
                   f"{platform.python_version()}",
        "limits": limits(args.postgres_dsn), "benches": {},
    }
    for name in names:
        log(f"bench/{name}.py{' --quick' if args.quick else ''}")
        report["benches"][name] = await asyncio.to_thread(
            run_bench, name, args.quick, args.postgres_dsn)
        log(f"  done in {report['benches'][name]['seconds']} s")
    (ROOT / "bench" / "last-report.json").write_text(json.dumps(report, indent=1), "utf-8")
    write_doc(render(report))
    print(json.dumps({"limits": report["limits"], "benches": {
        n: {"exit": r["exit"], "seconds": r["seconds"]} for n, r in report["benches"].items()}}))
    return 0 if all(r["exit"] == 0 for r in report["benches"].values()) else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="every bench's quick plan")
    parser.add_argument("--only", default="", help=f"a subset of {','.join(BENCHES)}")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN)
    return parser.parse_args(argv)


def main() -> int:
    return run_main(main_async, parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
