"""The crash-torture run (issue 7): kill the runtime with SIGKILL, many times, and count what
broke.

    python bench/torture.py [--quick] [--backend sqlite|postgres|both] [--kills N]
                            [--postgres-dsn DSN] [--seed S]

On each backend a fresh database (SQLite: a temp file; PostgreSQL: a scratch database on the
DSN) gets the torture's workload from real runtime processes -- one on SQLite, two on
PostgreSQL, either of which can be the one killed: a person's words, steers, background tasks
(short, long, failing, timing out, turn-owned), foreground tools, children (conversation- and
turn-owned), signals and restarts. A driver SIGKILLs a process at a random moment (0.05-1.2 s
apart) and starts another in its place; after the last kill one process drains what is left,
and the invariant checker (``tests/crash/invariants.py``) reads the database and every
transcript. ``--quick`` makes 50 kills per backend; the full run 1,000.

The table shows kills, violations by kind, and what the workload produced (turns, tasks,
children, calls answered outcome_unknown) so that "0 violations" is read against how much was
exercised; the baseline is the kills per minute the machine sustains. The last stdout line is
one JSON object with ``sqlite_kills``, ``sqlite_violations``, ``pg_kills``, ``pg_violations``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from harness import (
    DEFAULT_DSN,
    Results,
    fmt,
    guarded,
    log,
    run_main,
    scratch_url,
    source_revision,
)
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.crash.torture import TortureResult, run_torture

QUICK_KILLS = 50
FULL_KILLS = 1_000


async def torture(backend: str, dsn: str, kills: int, seed: int) -> TortureResult:
    async with scratch_url(backend, dsn, "torture") as url:
        return await run_torture(url, kills=kills, processes=2 if backend == "postgres" else 1,
                                 seed=seed, min_s=0.05, max_s=1.2, log=log)


def figures(result: TortureResult) -> dict[str, Any]:
    kinds = Counter(v.kind for v in result.violations)
    return {
        "kills": result.kills,
        "processes": result.processes,
        "violations": len(result.violations),
        "violations_by_kind": dict(kinds),
        "first_violations": [str(v) for v in result.violations[:20]],
        "kills_before_ready": result.kills_before_ready,
        "seconds": result.seconds,
        "kills_per_minute": result.kills / result.seconds * 60 if result.seconds else None,
        **result.report.counts,
    }


async def main_async(args: argparse.Namespace) -> int:
    kills = args.kills or (QUICK_KILLS if args.quick else FULL_KILLS)
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    started = time.perf_counter()
    results = Results()
    for backend in backends:
        prefix = "sqlite" if backend == "sqlite" else "pg"
        log(f"{backend}: {kills} kills")

        async def step(backend: str = backend) -> TortureResult:
            return await torture(backend, args.postgres_dsn, kills, args.seed)

        result = await guarded(results, f"{prefix}_torture", step)
        if result is not None:
            results.figures[prefix] = figures(result)
    summary: dict[str, Any] = {}
    for prefix in ("sqlite", "pg"):
        got = results.figures.get(prefix, {})
        summary[f"{prefix}_kills"] = got.get("kills")
        summary[f"{prefix}_violations"] = got.get("violations")
    summary.update({
        "seconds": round(time.perf_counter() - started, 1),
        "errors": results.errors,
        "figures": results.figures,
        "settings": {"kills": kills, "seed": args.seed, "command": " ".join(sys.argv),
                     "revision": source_revision()},
    })
    print_table(results, kills)
    print(json.dumps(summary))
    failed = bool(results.errors) or any(
        results.figures.get(p, {}).get("violations") for p in ("sqlite", "pg"))
    return 1 if failed else 0


def print_table(results: Results, kills: int) -> None:
    out = Console(file=sys.stdout, width=110)
    table = Table(title=f"crash torture: {kills} SIGKILLs per backend, then a drain and the "
                        "invariant checker")
    table.add_column("figure")
    table.add_column("SQLite (1 process)", justify="right")
    table.add_column("PostgreSQL (2 processes)", justify="right")
    table.add_column("goal", justify="right")
    rows = (
        ("kills", "kills", "≥ 50 quick, 1,000 full"), ("violations", "violations", "0"),
        ("kills before the process was ready (in its boot)", "kills_before_ready", ""),
        ("kills per minute (the baseline: what the machine sustains)", "kills_per_minute", ""),
        ("turns (runs)", "runs", ""), ("messages", "messages", ""),
        ("background tasks", "tasks", ""), ("task notifications", "notifications", ""),
        ("child requests", "child_requests", ""), ("child mail relayed", "child_mail", ""),
        ("calls answered outcome_unknown", "outcome_unknown", ""),
        ("operations (restarts)", "operations", ""), ("dead letters", "dead_letters", ""),
        ("seconds", "seconds", ""),
    )
    for label, key, goal in rows:
        cells = []
        for prefix in ("sqlite", "pg"):
            value = results.figures.get(prefix, {}).get(key)
            cells.append(fmt(value, 1 if isinstance(value, float) else 0))
        table.add_row(label, *cells, goal)
    for prefix in ("sqlite", "pg"):
        for line in results.figures.get(prefix, {}).get("first_violations", []):
            table.add_row(f"[red]{prefix}: {line[:90]}[/red]", "", "", "")
    out.print(table)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_KILLS} kills per backend")
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--kills", type=int, default=0, help="kills per backend")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN)
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv)


def main() -> int:
    return run_main(main_async, parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
