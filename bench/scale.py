"""Scale-out on PostgreSQL (issue 7): 1, 2 and 4 runtime processes on one database serving
1,000 conversations.

    python bench/scale.py [--quick] [--postgres-dsn DSN] [--processes 1,2,4]

For each configuration a fresh scratch database gets 1,000 conversations; then P runtime
processes (``bench/scale_worker.py``) each take every P-th conversation and run closed-loop
users (64 in all, split between the processes) that post a person's words and wait for the
turn that answers it, for the same number of seconds. Figures per configuration: turns per
second over all processes, the ratio to one process (the baseline, measured in the same run),
turn latency p50/p99 (post -> answer committed), the machine's CPU busy share while it ran,
and overlapping turns found afterwards in the database by the crash torture's checker (goal
0). The model is the scripted one, answering at once: what is measured is the kernel and the
database, not a provider.

The last stdout line is one JSON object with ``turns_per_s`` per configuration,
``scale_2_ratio``, ``scale_4_ratio`` and ``overlapping_turns``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from harness import (
    DEFAULT_DSN,
    Results,
    fmt,
    guarded,
    log,
    machine_cpu_s,
    pct_us,
    run_main,
    scratch_url,
    source_revision,
)
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.crash.invariants import check

WORKER = str(Path(__file__).with_name("scale_worker.py"))
CONVERSATIONS = 1_000
USERS = 64
GOALS = {2: 1.6, 4: 2.5}


async def _spawn(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, WORKER, *args, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        limit=64 * 1024 * 1024,  # a worker's last line holds every latency it measured
    )


async def configuration(dsn: str, processes: int, seconds: float) -> dict[str, Any]:
    async with scratch_url("postgres", dsn, f"scale{processes}") as url:
        setup = await _spawn(url, "setup", str(CONVERSATIONS))
        _, err = await setup.communicate()
        if setup.returncode != 0:
            raise RuntimeError(err.decode()[-2000:])
        workers = [await _spawn(url, str(i), str(processes), str(USERS // processes))
                   for i in range(processes)]
        try:
            for worker in workers:
                assert worker.stdout is not None
                line = await asyncio.wait_for(worker.stdout.readline(), 60)
                if not line:
                    assert worker.stderr is not None
                    raise RuntimeError((await worker.stderr.read()).decode()[-2000:])
            busy0, total0 = machine_cpu_s()
            for worker in workers:
                assert worker.stdin is not None
                worker.stdin.write(f"{seconds}\n".encode())
                await worker.stdin.drain()
            outputs = [json.loads(await asyncio.wait_for(w.stdout.readline(), seconds + 120))
                       for w in workers if w.stdout is not None]
            busy1, total1 = machine_cpu_s()
            for worker in workers:
                await asyncio.wait_for(worker.wait(), 60)
        finally:
            for worker in workers:
                with contextlib.suppress(ProcessLookupError):
                    worker.kill()
        report = check(url)
    latencies = [s for o in outputs for s in o["latencies"]]
    turns = sum(int(o["turns"]) for o in outputs)
    return {
        "processes": processes,
        "turns": turns,
        "turns_per_s": turns / seconds,
        "latency_p50_ms": pct_us(latencies, 0.5) / 1e3,
        "latency_p99_ms": pct_us(latencies, 0.99) / 1e3,
        "latency_mean_ms": statistics.mean(latencies) * 1e3 if latencies else None,
        "cpu_busy": (busy1 - busy0) / (total1 - total0) if total1 > total0 else None,
        "overlapping_turns": sum(1 for v in report.violations if v.kind == "overlap"),
        "other_violations": [str(v) for v in report.violations if v.kind != "overlap"][:10],
        "per_process_turns": [int(o["turns"]) for o in outputs],
    }


async def main_async(args: argparse.Namespace) -> int:
    seconds = 8.0 if args.quick else 30.0
    counts = [int(p) for p in args.processes.split(",")]
    started = time.perf_counter()
    results = Results()
    for processes in counts:
        log(f"{processes} process(es), {seconds:.0f} s")

        async def step(processes: int = processes) -> dict[str, Any]:
            return await configuration(args.postgres_dsn, processes, seconds)

        figure = await guarded(results, f"scale_{processes}", step)
        if figure is not None:
            results.figures[str(processes)] = figure
    base = results.figures.get("1", {}).get("turns_per_s")
    for figure in results.figures.values():
        figure["ratio"] = figure["turns_per_s"] / base if base else None
    summary: dict[str, Any] = {
        "turns_per_s": {k: f["turns_per_s"] for k, f in results.figures.items()},
        **{f"scale_{k}_ratio": f["ratio"] for k, f in results.figures.items() if k != "1"},
        "overlapping_turns": sum(f["overlapping_turns"] for f in results.figures.values()),
        "seconds": round(time.perf_counter() - started, 1),
        "errors": results.errors,
        "figures": results.figures,
        "settings": {"conversations": CONVERSATIONS, "users": USERS, "run_seconds": seconds,
                     "command": " ".join(sys.argv), "revision": source_revision()},
    }
    print_table(results, seconds)
    print(json.dumps(summary))
    return 1 if results.errors else 0


def print_table(results: Results, seconds: float) -> None:
    out = Console(file=sys.stdout, width=110)
    table = Table(title=f"scale-out on PostgreSQL: {CONVERSATIONS:,} conversations, {USERS} "
                        f"closed-loop users, {seconds:.0f} s per configuration")
    table.add_column("processes", justify="right")
    table.add_column("turns/s", justify="right")
    table.add_column("ratio to 1 process", justify="right")
    table.add_column("goal", justify="right")
    table.add_column("p50 ms", justify="right")
    table.add_column("p99 ms", justify="right")
    table.add_column("machine CPU busy", justify="right")
    table.add_column("overlapping turns", justify="right")
    for key, f in results.figures.items():
        goal = GOALS.get(int(key))
        table.add_row(key, fmt(f["turns_per_s"], 1), fmt(f["ratio"], 2),
                      f"≥ {goal}" if goal else "baseline", fmt(f["latency_p50_ms"], 1),
                      fmt(f["latency_p99_ms"], 1),
                      f"{f['cpu_busy'] * 100:.0f} %" if f["cpu_busy"] is not None else "-",
                      fmt(f["overlapping_turns"]))
    out.print(table)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="8 s per configuration")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN)
    parser.add_argument("--processes", default="1,2,4")
    return parser.parse_args(argv)


def main() -> int:
    return run_main(main_async, parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
