"""How fast a remote A2A child's answer reaches its parent (P5): ``remote_child_relay_p50_ms``.

    python bench/a2a_children.py [--quick] [--backend sqlite|postgres|both] [--postgres-dsn DSN]

The remote agent is the test suite's (tests/a2a_agents/remote.py: the ``a2a-sdk``'s own server
classes, in a process of its own on loopback; it works ~0.2 s on each brief, then completes the
task and writes the wall-clock time it completed it). For each sample, a fresh conversation's
turn spawns the agent with a brief; the figure is the agent's completion time to the moment the
parent's ``child`` mail input was accepted (its ``accepted_at_us``, the runtime's system clock:
the same wall clock, the same machine). One sample at a time, so each is a lone answer's path:
the stream's event (or a poll) -> ``GetTask`` -> the reply written -> the relay -> the input.

Beside the default (the agent's card says it streams: ``SubscribeToTask``), the same agent
followed by polling only (``subscribe=False``, ``poll`` 1 s) on SQLite, for comparison; and the
raw single-row commit p50 of the same run, to read the machine by.

Keys: ``remote_child_relay_p50_ms`` (SQLite, streaming: the goal, <= 200 ms), ``..._p99_ms``,
``pg_remote_child_relay_p50_ms``, ``remote_child_relay_polling_p50_ms``,
``sqlite_raw_commit_p50_us``, ``pg_raw_commit_p50_us``. Progress goes to stderr; stdout ends
with one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from harness import (
    DEFAULT_DSN,
    Results,
    err,
    guarded,
    log,
    raw_pg_commit_us,
    raw_sqlite_commit_us,
    run_main,
    scratch_url,
    source_revision,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.a2a_agents import TOKEN, TOKEN_ENV, ended, remote_agent
from tidings import Origin, Profile, Rule, Runtime, ScriptedModel
from tidings.store import Row, Tx

GOAL_MS = 200.0


@dataclass(frozen=True)
class Plan:
    name: str
    streamed: int
    polled: int


QUICK = Plan("quick", streamed=25, polled=8)
FULL = Plan("full", streamed=200, polled=40)


async def relay_ms(url: str, samples: int, *, subscribe: bool) -> list[float]:
    """``samples`` lone remote children, one after the other: each one's agent completion ->
    the parent's child mail input, in ms."""
    with tempfile.TemporaryDirectory(prefix="tidings-bench-a2a-") as state, \
            remote_agent(Path(state), subscribe=subscribe,
                         poll=timedelta(seconds=1)) as agent:
        model = ScriptedModel(rules=[
            Rule({"text_equals": "go"}, {"tool_calls": [{"name": "spawn", "arguments": {
                "agent": agent.name, "brief": "a bench job"}}]}),
            Rule({"tool_result": "spawn"}, {"text": "Delegated."}),
        ], default={"text": "Read."})
        out: list[float] = []
        async with Runtime.open(url, models=[model], agents=[agent]) as rt:
            profile = Profile(model="scripted", tools=("spawn",))
            for n in range(samples + 1):  # the first warms the connections up
                conv = (await rt.create_conversation("bench", profile)).conversation_id
                await rt.post(conv, "go")
                deadline = time.monotonic() + 30
                while True:
                    mail = [i for i in await rt.inputs.list(conv) if i.origin is Origin.CHILD]
                    if mail:
                        break
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"sample {n}: no child mail within 30 s")
                    await asyncio.sleep(0.01)
                [request] = await rt.children.list(conv)
                row = await rt.store.read(functools.partial(
                    _remote_child, request_id=request.request_id))
                assert row is not None
                completed_us = ended(Path(state))[str(row["remote_task_id"])]
                if n:
                    out.append((mail[0].accepted_at_us - completed_us) / 1000)
                await rt.settle(conv)
    return out


def _remote_child(tx: Tx, *, request_id: str) -> Row | None:
    return tx.one("remote_child", request_id=request_id)


def _summary(samples: list[float]) -> dict[str, Any]:
    ordered = sorted(samples)
    return {"samples": len(ordered), "p50_ms": round(statistics.median(ordered), 1),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 1),
            "max_ms": round(ordered[-1], 1)}


async def measure(backend: str, dsn: str, samples: int, *, subscribe: bool) -> dict[str, Any]:
    """The relay's figures for ``samples`` lone remote children on a scratch database."""
    os.environ.setdefault(TOKEN_ENV, TOKEN)  # the agent's token, as tidings reads it
    async with scratch_url(backend, dsn, "a2a_children") as url:
        return _summary(await relay_ms(url, samples, subscribe=subscribe))


async def main_async(args: argparse.Namespace) -> int:
    plan = QUICK if args.quick else FULL
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    started = time.perf_counter()
    results = Results()
    results.figures["sqlite_raw_commit_p50_us"] = raw_sqlite_commit_us(1.0)
    if "postgres" in backends:
        raw = await guarded(results, "raw_pg_commit", functools.partial(
            asyncio.to_thread, raw_pg_commit_us, args.postgres_dsn, 1.0))
        if raw is not None:
            results.figures["pg_raw_commit_p50_us"] = raw
    steps = [(backend, True, plan.streamed) for backend in backends]
    if "sqlite" in backends:
        steps.append(("sqlite", False, plan.polled))
    for backend, subscribe, samples in steps:
        name = f"{'sqlite' if backend == 'sqlite' else 'pg'}_" \
               f"{'streamed' if subscribe else 'polled'}"
        figure = await guarded(results, name, functools.partial(
            measure, backend, args.postgres_dsn, samples, subscribe=subscribe))
        if figure is not None:
            results.figures[name] = figure
            log(f"{name}: p50 {figure['p50_ms']} ms, p99 {figure['p99_ms']} ms "
                f"({figure['samples']} samples)")
    figures = results.figures
    seconds = time.perf_counter() - started
    line = {
        "remote_child_relay_p50_ms": figures.get("sqlite_streamed", {}).get("p50_ms"),
        "remote_child_relay_p99_ms": figures.get("sqlite_streamed", {}).get("p99_ms"),
        "pg_remote_child_relay_p50_ms": figures.get("pg_streamed", {}).get("p50_ms"),
        "remote_child_relay_polling_p50_ms": figures.get("sqlite_polled", {}).get("p50_ms"),
        "remote_child_relay_goal_ms": GOAL_MS,
        "sqlite_raw_commit_p50_us": round(figures["sqlite_raw_commit_p50_us"], 1),
        "pg_raw_commit_p50_us": (round(figures["pg_raw_commit_p50_us"], 1)
                                 if "pg_raw_commit_p50_us" in figures else None),
        "seconds": round(seconds, 1), "errors": results.errors, "figures": figures,
        "settings": {"plan": plan.name, "command": " ".join(["python", *sys.argv]),
                     "revision": source_revision()},
    }
    err.print(f"total {seconds:.0f}s")
    print(json.dumps(line))
    return 1 if results.errors else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="the small plan (under 2 minutes)")
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN)
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args()
    log(f"bench/a2a_children.py ({'quick' if args.quick else 'full'} plan)")
    sys.exit(run_main(main_async, args))
