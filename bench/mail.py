"""The kernel-mail benchmark (issue #6): a fan-out to child conversations and the relay of
their replies back to the parent.

    python bench/mail.py [--quick] [--backend sqlite|postgres|both] [--postgres-dsn DSN]

Measured on each backend, in one runtime per backend (SQLite: a temp file, WAL,
synchronous=FULL; PostgreSQL: a scratch database created and dropped through the DSN), with the
runtime's relay sweep at its default of one minute. Per round a fresh parent conversation
opens N child requests (``rt.relay.spawn(parent, "run_bench", call_id, brief)``: the host
stands in for a parent run). Every child's turn starts and waits at a gate inside its model
call, so the fan-out is over before the first reply; then the gate opens and every child
answers at once (the model replies instantly). The relay gives each reply to the parent as
child mail, which wakes the parent into supplementary (MAIL) turns of up to 16 receipts.

Modes (one runtime, rounds in this order, after an unreported warm-up round):

* ``kick`` (the headline; as the runtime wires it): each reply's commit calls
  ``runner.obligations.on_child_reply`` -> ``relay.kick()``. Figures:

  - latency: from the LAST child reply's commit (its ``replied_at`` stamp, taken inside the
    unit that commits it) to the parent's model reading the last ``<task_result>`` it had not
    read; p50/p99 over rounds. Also each reply -> the parent reads it, p50/p99 over replies;
  - relays per second: N / (the last relay's commit, as the relay's caller saw it - the first
    reply's commit stamp), and the time per relayed reply over one raw single-row SQLite
    commit -- a window the children's own reply commits share with the relay;
  - commits counted: the store's own counters over the same window (``groups_committed``:
    transactions that reached the disk; ``units_committed``: units of work in them), per
    relayed reply -- every writer's: the children's replies and the parent's mail turns too;
  - who relayed: a kick's pass, the runtime's minute sweep, or this benchmark's fallback sweep
    when nothing moved for ``--stall-seconds`` (the latency then counts that wait: what the
    sweep interval would have added, up to a minute).

* ``drain`` (kick off): once every reply committed, one ``relay_pending()`` (what the sweep
  runs) relays them while the parent's mail turns run; relays/s, commits per relay, and the
  goal's figure, **the relay path**: from the pass's start to the parent's model reading the
  last receipt (the relay units and the mail turns that take the receipts, batched), per
  reply, over one raw SQLite commit (goal <= 3).
* ``held`` (kick off, the parent's slot held): the same pass with no mail turn running -- the
  relay path alone. The mail turns run after the slot is released.
* ``child_kicks`` (one round): only a child's reply kicks (the kick a parent's own mail turn
  gives, see the README, is left out) and the replies are spread over 1 ms per child, so
  replies commit while a relay pass runs. A reply that no kick relays waits for the fallback
  sweep and shows in the latency.

raw: single-row SQLite commits (WAL, synchronous=FULL) on a plain connection before and after:
the denominator. A raw PostgreSQL INSERT+COMMIT is measured too, for context.

Progress goes to stderr; stdout gets the table and, last, one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from types import FrameType
from typing import Any

import psycopg
from harness import (
    DEFAULT_DSN,
    Results,
    err,
    fmt,
    guarded,
    log,
    now_us,
    raw_sqlite_commit_us,
    scratch_url,
    source_revision,
)
from rich.console import Console
from rich.table import Table

from tidings.models.base import DeltaCallback, ModelReply, ModelRequest
from tidings.records.transcript import ConversationTx
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.scheduler.coordinator import CoordinatorConfig
from tidings.types import Profile, StartKind

GOAL_COST_COMMITS = 3.0
SWEEP_INTERVAL = timedelta(minutes=1)  # the runtime's default relay sweep, kept as it is
STAGGER_S_PER_CHILD = 0.001  # child_kicks: the replies spread over 1 ms per child
TASK_RESULT = re.compile(r'<task_result task="([^"]+)"')
out = Console(highlight=False, width=140)


@dataclass(frozen=True)
class Plan:
    name: str
    children: int
    rounds: int
    drain_rounds: int
    raw_seconds: float


QUICK = Plan("quick", children=50, rounds=3, drain_rounds=1, raw_seconds=1.0)
FULL = Plan("full", children=200, rounds=5, drain_rounds=2, raw_seconds=2.0)


class FanModel:
    """One model for the parent and its children (a child gets its parent's profile).

    A request that holds child mail is the parent's: note when each ``<task_result>`` is first
    read, answer at once. Any other request is a child's brief: wait at the gate, then answer at
    once."""

    name = "bench"

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.waiting = 0
        self.seen: dict[str, int] = {}
        self.spread_s = 0.0
        self.rng = random.Random(6)

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        keys = [k for m in request.messages if m.role == "user"
                for k in TASK_RESULT.findall(m.content)]
        if keys:
            now = now_us()
            for key in keys:
                self.seen.setdefault(key, now)
            return ModelReply("noted")
        self.waiting += 1
        try:
            await self.gate.wait()
        finally:
            self.waiting -= 1
        if self.spread_s:
            await asyncio.sleep(self.rng.uniform(0, self.spread_s))
        return ModelReply("done")


def turn_conversation() -> str | None:
    """The conversation of the turn whose end called ``on_child_reply`` (read off the caller's
    frames: ``TurnRunner._finish_*`` holds the turn's ``plan``)."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            return None
        conversation_id = getattr(frame.f_locals.get("plan"), "conversation_id", None)
        if isinstance(conversation_id, str):
            return conversation_id
        frame = frame.f_back
    return None


@dataclass
class Probe:
    """Hooks on one runtime: who kicked, relay commits, who relayed, the store's counters.

    ``mode``: ``kick`` (as the runtime wires it), ``child_kicks`` (only a child's reply kicks,
    see the README) or ``off`` (nothing kicks)."""

    rt: Runtime
    mode: str = "kick"
    parents: set[str] = field(default_factory=set)
    child_replies: int = 0
    parent_kicks: int = 0
    kicks_during_pass: int = 0
    relay_times: list[int] = field(default_factory=list)
    counters_at_last_relay: tuple[int, int] = (0, 0)
    relayed_by: dict[str, int] = field(default_factory=dict)
    relay_calls: dict[str, int] = field(default_factory=dict)

    def install(self) -> None:
        relay = self.rt.relay
        original_start_with = relay._start_with

        async def pending(*, limit: int = 200) -> int:
            # Who asked, seen from the task that runs the pass: the kick's task (the relay's
            # own ``_kicked``), or the runtime's relay sweep (the task named tidings-relay).
            task = asyncio.current_task()
            source = ("kick" if task is not None and task is relay._kicked
                      else "sweep" if task is not None and task.get_name() == "tidings-relay"
                      else "other")
            return await self.relay_pass(source, limit)

        async def start_with(conversation_id: str, kind: StartKind,
                             write: Callable[[Any], Any]) -> Any:
            result = await original_start_with(conversation_id, kind, write)
            if kind is StartKind.MAIL and result:
                # One unit relays all of a parent's pending replies: ``result`` counts them.
                self.relay_times.extend([now_us()] * int(result))
                self.counters_at_last_relay = self.counters()
            return result

        relay.relay_pending = pending  # type: ignore[method-assign]
        relay._start_with = start_with
        self.rt.runner.obligations.on_child_reply = self.replied

    def counters(self) -> tuple[int, int]:
        store = self.rt.store
        return (int(getattr(store, "groups_committed", 0)),
                int(getattr(store, "units_committed", 0)))

    def replied(self) -> None:
        """``runner.obligations.on_child_reply``: after a turn that answered a request committed."""
        from_parent = turn_conversation() in self.parents
        if from_parent:
            self.parent_kicks += 1
        else:
            self.child_replies += 1
        if self.mode == "off" or (self.mode == "child_kicks" and from_parent):
            return
        running = self.rt.relay._kicked
        if running is not None and not running.done():
            self.kicks_during_pass += 1  # no second pass starts (the pass may go round again)
        self.rt.relay.kick()

    async def relay_pass(self, source: str, limit: int = 200) -> int:
        relay = self.rt.relay
        relayed = await type(relay).relay_pending(relay, limit=limit)
        self.relay_calls[source] = self.relay_calls.get(source, 0) + 1
        self.relayed_by[source] = self.relayed_by.get(source, 0) + relayed
        return relayed

    def reset(self, mode: str) -> None:
        self.mode = mode
        self.child_replies = self.parent_kicks = self.kicks_during_pass = 0
        self.relay_times.clear()
        self.relayed_by.clear()
        self.relay_calls.clear()


def raw_pg_commit_us(dsn: str, seconds: float) -> float:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE raw (id BIGSERIAL PRIMARY KEY, v TEXT)")
        samples: list[float] = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            conn.execute("BEGIN")
            conn.execute("INSERT INTO raw (v) VALUES ('payload-of-a-small-row')")
            conn.execute("COMMIT")
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples) * 1e6


def pct(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def wait_until(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.002)


async def one_round(
    rt: Runtime, model: FanModel, probe: Probe, children: int, mode: str, stall_seconds: float,
) -> dict[str, Any]:
    """One fan-out and fan-in. ``mode``: ``kick`` / ``child_kicks`` (the relay is kicked) or
    ``drain`` / ``held`` (nothing kicks; once every reply committed, one relay pass -- with the
    parent free to run its mail turns, or with its slot held so that the pass runs alone)."""
    parent = (await rt.create_conversation("bench", Profile(model="bench"))).conversation_id
    probe.parents.add(parent)
    model.gate.clear()
    model.spread_s = children * STAGGER_S_PER_CHILD if mode == "child_kicks" else 0.0
    probe.reset(mode if mode in ("kick", "child_kicks") else "off")
    t0 = time.perf_counter()
    keys = []
    for i in range(children):
        request = await rt.relay.spawn(parent, "run_bench", f"call-{i}", f"brief {i}: answer")
        keys.append(request.task_key)
    spawn_s = time.perf_counter() - t0
    await wait_until(lambda: model.waiting == children, 60,
                     f"only {model.waiting} of {children} children reached their model")
    if mode == "held":
        def hold(cx: ConversationTx) -> None:
            cx.slot.take("held-by-bench", cx.now_us + 60_000_000, rt.instance_id, "run_hold")

        await rt.catalog.change(parent, hold)

    def all_read() -> bool:
        return all(k in model.seen for k in keys)

    before = probe.counters()
    model.gate.set()
    fallback_sweeps = 0
    pass_window: tuple[int, int] | None = None
    pass_counters: tuple[tuple[int, int], tuple[int, int]] | None = None
    if mode in ("kick", "child_kicks"):
        # Kicks only. When nothing moved for --stall-seconds, a sweep relays what is left (as
        # the runtime's minute sweep would, sooner) and the round counts it.
        while not all_read():
            mark = (len(probe.relay_times), probe.child_replies)

            def moved(mark: tuple[int, int] = mark) -> bool:
                return all_read() or (len(probe.relay_times), probe.child_replies) != mark

            try:
                await wait_until(moved, stall_seconds, "stalled")
            except TimeoutError:
                if probe.child_replies < children:
                    raise TimeoutError(
                        f"{probe.child_replies} of {children} children replied") from None
                fallback_sweeps += 1
                await probe.relay_pass("fallback_sweep", max(200, children))
    else:
        await wait_until(lambda: probe.child_replies == children, 60,
                         f"{probe.child_replies} of {children} children replied")
        for child in await rt.relay.requests_of(parent, limit=max(100, children)):
            await rt.settle(child.child_conversation_id)  # no child turn left to share a commit
        start_counters, start = probe.counters(), now_us()
        await probe.relay_pass("sweep", max(200, children))
        pass_window, pass_counters = (start, now_us()), (start_counters, probe.counters())
        if mode == "held":
            def release(cx: ConversationTx) -> None:
                cx.slot.release("held-by-bench")

            await rt.catalog.change(parent, release)
            rt.coordinator.request(parent, None)
        await wait_until(all_read, 60, "the parent never read every reply")
    await rt.settle(parent)

    rows = await rt.store.read(lambda tx: tx.all(
        "child_requests_of_parent", parent_conversation_id=parent, limit=1_000))
    replied_at = {r["task_key"]: int(r["replied_at_us"]) for r in rows}
    relayed_at = [int(r["relayed_at_us"]) for r in rows if r["relayed_at_us"] is not None]
    if len(replied_at) != children or len(relayed_at) != children:
        raise AssertionError(f"{len(replied_at)} replied, {len(relayed_at)} relayed, "
                             f"of {children}")
    first_reply, last_reply = min(replied_at.values()), max(replied_at.values())
    relayed = len(probe.relay_times)
    if pass_window is None or pass_counters is None:
        window_us = max(probe.relay_times) - first_reply
        (g0, u0), (g1, u1) = before, probe.counters_at_last_relay
    else:
        window_us = pass_window[1] - pass_window[0]
        (g0, u0), (g1, u1) = pass_counters
    mail_turns = sum(1 for r in await rt.runs.list(parent) if r.trigger is StartKind.MAIL)
    probe.parents.discard(parent)
    return {
        "mode": mode,
        "children": children,
        "spawn_s": spawn_s,
        "replies_window_us": last_reply - first_reply,
        # From the last reply's commit (its replied_at stamp, taken inside the committing
        # unit) to the parent's model reading the last reply it had not read.
        "latency_us": max(model.seen[k] for k in keys) - last_reply,
        "reply_to_read_us": [model.seen[k] - replied_at[k] for k in keys],
        "reply_to_relay_stamp_max_us": max(relayed_at) - last_reply,
        "relayed": relayed,
        "relay_window_us": window_us,
        # The relay path, with every reply committed before it starts (drain/held): from the
        # relay pass's start to the parent's model reading the last receipt -- the relay units
        # and the mail turns that take the receipts, batched.
        "path_us": (max(model.seen[k] for k in keys) - pass_window[0]
                    if pass_window is not None else None),
        "relays_per_s": relayed / window_us * 1e6 if window_us > 0 else None,
        "groups_committed": g1 - g0,
        "units_committed": u1 - u0,
        "mail_turns": mail_turns,
        "relayed_by": dict(probe.relayed_by),
        "relay_calls": dict(probe.relay_calls),
        "kicks_from_children": probe.child_replies,
        "kicks_from_parent_turns": probe.parent_kicks,
        "kicks_during_pass": probe.kicks_during_pass,
        "fallback_sweeps": fallback_sweeps,
    }


async def fan_in(backend: str, dsn: str, plan: Plan, children: int,
                 stall_seconds: float) -> dict[str, Any]:
    async with scratch_url(backend, dsn, "mail") as url:
        model = FanModel()
        config = RuntimeConfig(
            coordinator=CoordinatorConfig(max_concurrent_turns=max(256, 2 * children + 8)),
            relay_sweep=SWEEP_INTERVAL,
        )
        async with Runtime.open(url, models=[model], config=config) as rt:
            probe = Probe(rt)
            probe.install()
            # A warm-up round (not reported): connections, statements, page cache.
            await one_round(rt, model, probe, min(children, 20), "kick", stall_seconds)
            rounds: dict[str, list[dict[str, Any]]] = {}
            for mode, count in (("kick", plan.rounds), ("drain", plan.drain_rounds),
                                ("held", plan.drain_rounds), ("child_kicks", 1)):
                for i in range(count):
                    log(f"  {backend} {mode} round {i + 1}/{count}: {children} children")
                    rounds.setdefault(mode, []).append(
                        await one_round(rt, model, probe, children, mode, stall_seconds))
            return summarize(rounds)


def summarize(by_mode: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for mode, rounds in by_mode.items():
        latencies = [float(r["latency_us"]) for r in rounds]
        per_reply = [float(x) for r in rounds for x in r.pop("reply_to_read_us")]
        relayed = sum(r["relayed"] for r in rounds)
        window_us = sum(r["relay_window_us"] for r in rounds)
        totals: dict[str, dict[str, int]] = {"relayed_by": {}, "relay_calls": {}}
        for r in rounds:
            for key, counts in totals.items():
                for source, n in r[key].items():
                    counts[source] = counts.get(source, 0) + n
        summary[mode] = {
            "rounds": len(rounds),
            "children": rounds[0]["children"],
            "latency_p50_us": pct(latencies, 0.5),
            "latency_p99_us": pct(latencies, 0.99),
            "latency_max_us": max(latencies),
            "reply_to_read_p50_us": pct(per_reply, 0.5),
            "reply_to_read_p99_us": pct(per_reply, 0.99),
            "relays_per_s": relayed / window_us * 1e6,
            "us_per_relay": window_us / relayed,
            "groups_per_relay": sum(r["groups_committed"] for r in rounds) / relayed,
            "units_per_relay": sum(r["units_committed"] for r in rounds) / relayed,
            "mail_turns_per_round": statistics.mean(r["mail_turns"] for r in rounds),
            "us_per_reply_path": (
                sum(r["path_us"] for r in rounds) / sum(r["children"] for r in rounds)
                if all(r["path_us"] is not None for r in rounds) else None
            ),
            **totals,
            **{key: sum(r[key] for r in rounds) for key in (
                "kicks_from_children", "kicks_from_parent_turns", "kicks_during_pass",
                "fallback_sweeps")},
            "round_figures": rounds,
        }
    return summary


async def main_async(args: argparse.Namespace) -> int:
    plan = QUICK if args.quick else FULL
    children = args.children or plan.children
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    started = time.perf_counter()
    results = Results()
    raw_before = raw_sqlite_commit_us(plan.raw_seconds)
    if "postgres" in backends:
        with contextlib.suppress(psycopg.Error):
            results.figures["raw_pg_commit_us"] = raw_pg_commit_us(args.postgres_dsn, 1.0)
    for backend in backends:
        prefix = "sqlite" if backend == "sqlite" else "pg"

        async def step(backend: str = backend) -> dict[str, Any]:
            return await fan_in(backend, args.postgres_dsn, plan, children, args.stall_seconds)

        figure = await guarded(results, f"{prefix}_fan_in", step)
        if figure is not None:
            results.figures[f"{prefix}_fan_in"] = figure
    raw_after = raw_sqlite_commit_us(plan.raw_seconds)
    raw_us = (raw_before + raw_after) / 2
    results.figures["raw_sqlite_commit_us_before"] = raw_before
    results.figures["raw_sqlite_commit_us_after"] = raw_after

    def get(prefix: str, key: str, mode: str = "kick") -> Any:
        return results.figures.get(f"{prefix}_fan_in", {}).get(mode, {}).get(key)

    def cost(prefix: str, mode: str = "kick", key: str = "us_per_relay") -> float | None:
        value = get(prefix, key, mode)
        return None if value is None else float(value) / raw_us

    summary: dict[str, Any] = {
        "sqlite_relays_per_s": get("sqlite", "relays_per_s"),
        "pg_relays_per_s": get("pg", "relays_per_s"),
        # The relay path (the goal's figure): relay units plus the mail turns that read the
        # receipts, per reply, over one raw SQLite commit.
        "sqlite_relay_cost_in_commits": cost("sqlite", "drain", "us_per_reply_path"),
        "pg_relay_cost_in_commits": cost("pg", "drain", "us_per_reply_path"),
        "sqlite_relay_cost_commits": cost("sqlite", "drain", "us_per_reply_path"),
        "pg_relay_cost_commits": cost("pg", "drain", "us_per_reply_path"),
        # As wired, first reply -> last relay: the children's own reply commits share the
        # window with the relay.
        "sqlite_fan_in_cost_in_commits": cost("sqlite"),
        "pg_fan_in_cost_in_commits": cost("pg"),
        "sqlite_relay_commits_counted": get("sqlite", "groups_per_relay"),
        "pg_relay_commits_counted": get("pg", "groups_per_relay"),
        "sqlite_mail_latency_p50_us": get("sqlite", "latency_p50_us"),
        "sqlite_mail_latency_p99_us": get("sqlite", "latency_p99_us"),
        "pg_mail_latency_p50_us": get("pg", "latency_p50_us"),
        "pg_mail_latency_p99_us": get("pg", "latency_p99_us"),
        "sqlite_relay_alone_cost_commits": cost("sqlite", "held"),
        "pg_relay_alone_cost_commits": cost("pg", "held"),
        "sqlite_relayed_by_sweep": (get("sqlite", "relayed_by") or {}).get("sweep", 0)
        if get("sqlite", "relayed_by") is not None else None,
        "pg_relayed_by_sweep": (get("pg", "relayed_by") or {}).get("sweep", 0)
        if get("pg", "relayed_by") is not None else None,
        "raw_sqlite_commit_us": raw_us,
        "raw_pg_commit_us": results.figures.get("raw_pg_commit_us"),
        "sweep_interval_s": SWEEP_INTERVAL.total_seconds(),
    }
    print_table(results, plan, children, raw_us)
    seconds = time.perf_counter() - started
    out.print(f"total {seconds:.0f}s")
    line = {**summary, "seconds": round(seconds, 1), "errors": results.errors,
            "figures": results.figures,
            "settings": {"plan": plan.name, "children": children, "rounds": plan.rounds,
                         "drain_rounds": plan.drain_rounds, "stall_seconds": args.stall_seconds,
                         "sqlite_synchronous": "FULL",
                         "relay_sweep_interval_s": SWEEP_INTERVAL.total_seconds(),
                         "command": " ".join(["python", *sys.argv]),
                         "revision": source_revision()}}
    print(json.dumps(line))
    return 1 if results.errors else 0


def print_table(results: Results, plan: Plan, children: int, raw_us: float) -> None:
    title = (f"kernel mail: 1 parent -> {children} children -> replies relayed; {plan.name} "
             f"plan, {plan.rounds} rounds; raw SQLite commit {raw_us:,.0f} µs; relay sweep "
             f"every {SWEEP_INTERVAL.total_seconds():.0f} s")
    table = Table(title=title)
    for column in ("figure", "SQLite", "PostgreSQL", "goal"):
        table.add_column(column, justify="left" if column == "figure" else "right")

    def value(prefix: str, mode: str, key: str) -> Any:
        figure = results.figures.get(f"{prefix}_fan_in")
        if figure is None or mode not in figure:
            return None
        found = figure[mode]
        for part in key.split("."):
            found = found.get(part, 0) if isinstance(found, dict) else None
        return found

    def row(label: str, mode: str, key: str, digits: int = 0, goal: str = "",
            per_raw: bool = False) -> None:
        cells = []
        for prefix in ("sqlite", "pg"):
            v = value(prefix, mode, key)
            if per_raw and v is not None:
                v = float(v) / raw_us
            cells.append(fmt(v, digits))
        table.add_row(label, *cells, goal)

    sweep = f"{SWEEP_INTERVAL.total_seconds():.0f} s"
    table.add_row("[b]kick on (as wired), the headline[/b]", "", "", "")
    row("last reply -> parent reads it, p50 (µs)", "kick", "latency_p50_us",
        goal=f"≪ the {sweep} sweep")
    row("last reply -> parent reads it, p99 (µs)", "kick", "latency_p99_us")
    row("each reply -> parent reads it, p50 (µs)", "kick", "reply_to_read_p50_us")
    row("each reply -> parent reads it, p99 (µs)", "kick", "reply_to_read_p99_us")
    row("relays per second (first reply -> last relay)", "kick", "relays_per_s", 1)
    row("µs per relayed reply, children's replies in the window", "kick", "us_per_relay")
    row("  in raw SQLite commits", "kick", "us_per_relay", 2, per_raw=True)
    row("commits counted per relay (every writer)", "kick", "groups_per_relay", 2)
    row("units of work per relay (every writer)", "kick", "units_per_relay", 2)
    row("parent mail turns per round", "kick", "mail_turns_per_round", 1)
    row("relayed by a kick", "kick", "relayed_by.kick", goal="all")
    row(f"relayed by the {sweep} sweep", "kick", "relayed_by.sweep", goal="0")
    row("relayed by the stall fallback", "kick", "relayed_by.fallback_sweep", goal="0")
    row("kicks from children's replies", "kick", "kicks_from_children")
    row("kicks from the parent's mail turns", "kick", "kicks_from_parent_turns")
    row("kicks while a relay pass ran", "kick", "kicks_during_pass")
    table.add_row("[b]only children's replies kick, replies spread 1 ms per child[/b]", "", "",
                  "")
    row("last reply -> parent reads it (µs)", "child_kicks", "latency_max_us")
    row("relayed by the stall fallback (sweep)", "child_kicks", "relayed_by.fallback_sweep",
        goal="0")
    table.add_row("[b]kick off: one relay pass after every reply[/b]", "", "", "")
    row("relay path: relay + mail turns reading, µs per reply", "drain", "us_per_reply_path")
    row("  relay cost in raw SQLite commits", "drain", "us_per_reply_path", 2,
        f"<= {GOAL_COST_COMMITS:.0f}", per_raw=True)
    row("parent's mail turns running: relays/s", "drain", "relays_per_s", 1)
    row("  cost in raw SQLite commits", "drain", "us_per_relay", 2, per_raw=True)
    row("  commits counted per relay", "drain", "groups_per_relay", 2)
    row("  units of work per relay", "drain", "units_per_relay", 2)
    row("parent busy (the pass alone): relays/s", "held", "relays_per_s", 1)
    row("  cost in raw SQLite commits", "held", "us_per_relay", 2, per_raw=True)
    row("  commits counted per relay", "held", "groups_per_relay", 2)
    table.add_row("raw SQLite commit (µs, WAL, FULL)", fmt(raw_us), "", "denominator")
    pg_raw = results.figures.get("raw_pg_commit_us")
    if pg_raw is not None:
        table.add_row("raw PostgreSQL commit (µs, for context)", "", fmt(pg_raw), "")
    out.print(table)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="the small plan (under two minutes)")
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN)
    parser.add_argument("--children", type=int, default=0,
                        help="children per round (default: 50 quick, 200 full)")
    parser.add_argument("--stall-seconds", type=float, default=5.0,
                        help="with no reply or relay for this long, sweep as the runtime's "
                             "minute sweep would (and count it)")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    log(f"bench/mail.py ({'quick' if args.quick else 'full'} plan)")
    err.print("")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
