"""The performance report: run every benchmark and write its figures into docs/performance.md.

    python bench/report.py [--quick] [--only NAME,...] [--no-doc] [--json PATH]
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
           "service")


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
         "µs", "~1,100", "275", "<=", 345),
    Goal("outbox", "SQLite outbox end to end, 100 conversations", "sqlite_e2e_100_msgs",
         "msg/s", "6,368", "10,642", ">=", 9000),
    Goal("outbox", "SQLite outbox end to end, 1 conversation", "sqlite_e2e_1_msgs", "msg/s",
         "1,011", "1,668", ">=", 1400),
    Goal("tasks", "SQLite wake p50 (process exit → woken model call)", "sqlite_wake_p50_us",
         "µs", "1,715", "915", "<=", 1150),
    Goal("turns", "PostgreSQL turn overhead p50", "pg_turn_overhead_us", "µs", "3,338", "804",
         "<=", 1000, here="pg_floor_turn_us"),
    Goal("outbox", "PostgreSQL outbox end to end, 100 conversations", "pg_e2e_100_msgs",
         "msg/s", "3,051", "4,670", ">=", 4000),
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
)

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
        "this report: a turn's two units written by hand on the same schema, on this machine "
        "today, its raw commit beside it:",
        "",
        *goal_rows(report),
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
        f" --only {','.join(names)}" if args.only else "")
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
    for name in names:
        log(f"bench/{name}.py{' --quick' if args.quick else ''}")
        run = await asyncio.to_thread(run_bench, name, args.quick, args.postgres_dsn, timeout)
        report["benches"][name] = run
        outcome = "failed: " + run["error"].splitlines()[0] if run.get("error") else "done"
        log(f"  {outcome} in {run['seconds']} s")
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
