"""The crash torture's driver (issue 7): real runtime processes, killed with SIGKILL at random
moments and restarted on the same database, then a drain and the invariant checker.

``run_torture(url, kills=..., processes=...)`` sets the torture's conversations up, starts
``processes`` churning workers (:mod:`tests.crash.torture_worker`, each a process forked by
:mod:`tests.crash.forked`), and until ``kills`` kills were made: picks a worker at random,
waits a random moment -- inside a turn, a tool, a relay, a boot's recovery, wherever it falls;
most moments are counted from the worker's boot, so that a slow machine's long boots do not
leave it too little time to work -- SIGKILLs it and starts another in its place. Then every
worker is killed, one drain process finishes what they left, and
:func:`tests.crash.invariants.check` reads the database. Used by ``tests/crash/test_torture.py``
(CI) and ``bench/torture.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tests.crash.forked import Forked, fork_worker
from tests.crash.invariants import Report, Violation, check

DRAIN_TIMEOUT_S = 120.0
DRAINS = 4
"""Drain instances at most: each completes the restarts the one before it accepted."""
IN_BOOT = 0.2
"""The share of kills whose moment is counted from the worker's start, so that it may fall
inside its boot (its recovery); the others count from its boot's end."""
BOOT_S = 60.0
"""How long a kill waits for its victim's boot at most."""


@dataclass
class TortureResult:
    kills: int
    processes: int
    seconds: float
    report: Report
    kills_before_ready: int = 0
    refused_inputs: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def violations(self) -> list[Violation]:
        return self.report.violations


@dataclass
class _Worker:
    process: Forked
    ready: asyncio.Event
    refused: int = 0
    reader: asyncio.Task[None] | None = None

    async def follow(self) -> None:
        assert self.process.stdout is not None
        async for raw in self.process.stdout:
            line = json.loads(raw) if raw.strip().startswith(b"{") else {}
            if line.get("ready"):
                self.ready.set()
            elif "refused" in line:
                self.refused += 1


async def _start(url: str, seed: int) -> _Worker:
    worker = _Worker(await fork_worker(url, seed, "churn"), asyncio.Event())
    worker.reader = asyncio.create_task(worker.follow())
    return worker


async def _kill(worker: _Worker) -> bool:
    """SIGKILL; returns whether it had finished booting."""
    ready = worker.ready.is_set()
    worker.process.kill()
    await worker.process.wait()
    if worker.reader is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(worker.reader, 5)
    return ready


async def run_torture(
    url: str,
    *,
    kills: int,
    processes: int = 1,
    seed: int = 0,
    min_s: float = 0.3,
    max_s: float = 1.6,
    log: Callable[[str], None] | None = None,
    workload: Mapping[str, int] | None = None,
) -> TortureResult:
    """``kills`` SIGKILLs at random moments, then the drain and the invariant checker.

    ``workload``: counts of the checker's (tasks, child requests, runs, ...) the database must
    exceed before the kills stop -- past ``kills`` they go on, ten at a time, up to three times
    as many, so that a slow machine still tortures as much work as a quick one.
    """
    started = time.monotonic()
    rng = random.Random(seed)
    setup = await fork_worker(url, seed, "setup")
    _, err = await setup.communicate()
    if setup.returncode != 0:
        raise RuntimeError(f"torture setup failed: {err.decode()[-2000:]}")
    workers = [await _start(url, seed * 1000 + i) for i in range(processes)]
    done = before_ready = refused = 0
    spawned = processes
    try:
        while done < kills or (done < 3 * kills and not (
                done % 10 == 0 and _worked(check(url).counts, workload))):
            victim = rng.randrange(processes)
            if rng.random() >= IN_BOOT:
                # Most kills fall while the worker works: its moment is counted from its boot,
                # however long booting takes on this machine.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(workers[victim].ready.wait(), BOOT_S)
            await asyncio.sleep(rng.uniform(min_s, max_s))
            if not await _kill(workers[victim]):
                before_ready += 1
            refused += workers[victim].refused
            done += 1
            if log is not None and done % 10 == 0:
                log(f"  {done}/{kills} kills")
            workers[victim] = await _start(url, seed * 1000 + spawned)
            spawned += 1
    finally:
        for worker in workers:
            await _kill(worker)  # the last ones die the same way, not cleanly
            refused += worker.refused
    for _ in range(DRAINS):
        drain = await fork_worker(url, seed, "drain")
        try:
            out, err = await asyncio.wait_for(drain.communicate(), DRAIN_TIMEOUT_S)
        except TimeoutError:
            drain.kill()
            out, err = await drain.communicate()
        report = check(url)
        # A restart the drain itself accepted (a queued "please restart" it answered) is
        # completed by the next instance, as in production: start one.
        if drain.returncode != 0 or any(v.kind != "operation" for v in report.violations):
            break
        if not report.violations:
            break
    if drain.returncode != 0:
        report.violations.append(Violation(
            "drain", (), f"exit {drain.returncode}: {out.decode()[-1500:]} "
                         f"{err.decode()[-1500:]}"))
    return TortureResult(done, processes, time.monotonic() - started, report,
                         kills_before_ready=before_ready, refused_inputs=refused)


def _worked(counts: Mapping[str, int], workload: Mapping[str, int] | None) -> bool:
    return workload is None or all(counts[k] > n for k, n in workload.items())


__all__ = ("TortureResult", "run_torture")
