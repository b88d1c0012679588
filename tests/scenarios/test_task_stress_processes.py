"""T3/T4 under load with real OS processes, through the whole runtime (issue 4).

Many conversations run in parallel. Each person input makes the model start one background
``shell`` task (a real process, sleeping a random 0-300 ms); in the same step the model may also
call ``nap``, a host tool that sleeps a random 0-300 ms before its result returns, so the step's
results -- the shell call's among them -- commit at a random moment before or after the process
ends. The model's later steps think for a random while, some steps call ``nap`` again, and
steers arrive at random moments (from outside, and from inside running tools). Several inputs
read by one turn give several shell calls in one step. Some tasks are turn-lifetime (their turn
waits for them, M4), most conversation-lifetime.

Then, from the database and the transcripts: every task ended (exit 0) and was announced by
exactly one ``task_notification`` carrying its event id, after its tool result, never inside a
call/result pair, and every notification was consumed once the turns settled.

The plan (sleeps, naps, thinking times, steers) comes from a seeded ``random.Random``: set
``TIDINGS_STRESS_SEED`` to replay one; the OS and the event loop still decide the interleaving.
At most ``MAX_PROCESSES`` processes are started and not yet ended at any moment.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import random
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.conftest import Backend, RuntimeFactory
from tidings.models.base import DeltaCallback, ModelReply, ModelRequest, PromptMessage, ToolCall
from tidings.models.scripted import Rule, ScriptedModel
from tidings.runtime.root import Runtime
from tidings.store import Tx
from tidings.tasks.journal import TaskRecord
from tidings.tasks.notify import NOTIFICATION_KIND, TaskState
from tidings.tasks.supervisor import ProcessOutcome, ProcessState
from tidings.tools.registry import Tool, ToolContext
from tidings.types import Message, Profile, Run, RunStatus

log = logging.getLogger(__name__)
SEED = int(os.environ.get("TIDINGS_STRESS_SEED", "4004"))
SIZES = {"sqlite": (50, 20), "postgres": (30, 10)}  # conversations x tasks each
MAX_PROCESSES = 64
WAIT_S = 120.0
STALL_S = 20.0
THINKS = 8  # classes of model thinking time: k * THINK_STEP_S
THINK_STEP_S = 0.02
NAP_MORE = 4  # classes of a follow-up nap: m * 40 ms
JOB = re.compile(r"job (\d+)")
COMMAND = re.compile(r"echo 'done (\d+) ")


# -- the plan -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Nap:
    ms: int
    then: str  # "[think k]" (the model answers after k * THINK_STEP_S) or "[nap m]" (naps again)
    steer: bool  # the tool posts a steer into its own running turn


@dataclass(frozen=True)
class Job:
    """What one person input makes the model do: one background shell task, maybe naps."""

    n: int
    conversation: int
    sleep_ms: int
    lifetime: str
    think: int  # how long the model thinks when it reads this task's notification
    naps: tuple[Nap, ...]
    shell_at: int  # the shell call's position among the step's calls
    gap_ms: int  # pause before the input is posted

    @property
    def command(self) -> str:
        return f"sleep {self.sleep_ms / 1000:.3f}; echo 'done {self.n} [think {self.think}]'"

    def calls(self) -> list[tuple[str, dict[str, Any]]]:
        calls: list[tuple[str, dict[str, Any]]] = [
            ("nap", {"ms": nap.ms, "then": nap.then, "steer": nap.steer}) for nap in self.naps
        ]
        calls.insert(self.shell_at, ("shell", {
            "command": self.command, "background": True, "lifetime": self.lifetime,
        }))
        return calls


@dataclass(frozen=True)
class Plan:
    jobs: tuple[Job, ...]
    steers: Mapping[int, tuple[tuple[int, int], ...]]  # conversation -> (at_ms, think)

    def of(self, conversation: int) -> list[Job]:
        return [j for j in self.jobs if j.conversation == conversation]


def make_plan(seed: int, conversations: int, per: int) -> Plan:
    rng = random.Random(seed)
    jobs: list[Job] = []
    steers: dict[int, tuple[tuple[int, int], ...]] = {}
    for c in range(conversations):
        for i in range(per):
            naps = tuple(
                Nap(rng.randint(0, 300),
                    f"[nap {rng.randint(1, NAP_MORE)}]" if rng.random() < 0.25
                    else f"[think {rng.randrange(THINKS)}]",
                    rng.random() < 0.2)
                for _ in range(rng.choice((0, 1, 1, 1, 2)))
            )
            jobs.append(Job(
                n=c * per + i, conversation=c, sleep_ms=rng.randint(0, 300),
                lifetime="turn" if rng.random() < 0.15 else "conversation",
                think=rng.randrange(THINKS), naps=naps, shell_at=rng.randint(0, len(naps)),
                gap_ms=rng.randint(0, 150),
            ))
        steers[c] = tuple(sorted(
            (rng.randint(0, per * 120), rng.randrange(THINKS))
            for _ in range(rng.randint(per // 4, per // 2))
        ))
    return Plan(tuple(jobs), steers)


# -- the model and the host tool ----------------------------------------------------------------


def scripted_rules() -> list[Rule]:
    """How the scripted model answers everything but a person's job input."""
    rules = [
        Rule({"tool_result": "nap", "text_contains": f"[nap {m}]"},
             {"tool_calls": [{"name": "nap", "arguments": {"ms": 40 * m, "then": "[think 0]"}}]})
        for m in range(1, NAP_MORE + 1)
    ]
    # A nap's result, a notification (its fenced output names the class) or a steer.
    rules += [
        Rule({"text_contains": f"[think {k}]"},
             {"text": f"Noted ({k}).", "delay_seconds": k * THINK_STEP_S})
        for k in range(THINKS)
    ]
    rules.append(Rule({"tool_result": "shell"}, {"text": "Started.", "delay_seconds": 0.01}))
    return rules


@dataclass
class StressModel(ScriptedModel):
    """The scripted model, plus: every person job input among the newest messages (those after
    the last assistant message) gets its planned calls -- several inputs, several shell calls in
    one step. Call ids are unique over the whole test."""

    jobs: Mapping[int, Job] = field(default_factory=dict)
    started: Counter[int] = field(default_factory=Counter)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        jobs = [self.jobs[int(m.group(1))] for m in map(_job_input, _newest(request.messages))
                if m is not None]
        if not jobs:
            reply = await super().complete(request, on_delta=on_delta)
            return ModelReply(
                reply.text,
                tuple(ToolCall(self._id(), c.name, c.arguments) for c in reply.tool_calls),
                model=reply.model, stop_reason=reply.stop_reason,
            )
        self.calls += 1
        self.started.update(j.n for j in jobs)
        calls = tuple(ToolCall(self._id(), name, args) for j in jobs for name, args in j.calls())
        return ModelReply("", calls, model=request.model, stop_reason="tool_use")

    def _id(self) -> str:
        return f"call_{next(self._ids)}"


def _newest(messages: Sequence[PromptMessage]) -> Sequence[PromptMessage]:
    last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
    return messages[last + 1:]


def _job_input(message: PromptMessage) -> re.Match[str] | None:
    if message.role != "user" or message.meta.get("kind"):
        return None
    return JOB.fullmatch(message.content)


@dataclass
class Napper:
    """``nap``: sleeps, may post a steer into its own running turn, names what comes next."""

    runtime: Runtime | None = None
    steers: int = 0

    async def handler(self, ctx: ToolContext, args: Mapping[str, Any]) -> str:
        if args.get("steer") and self.runtime is not None:
            self.steers += 1
            await self.runtime.post(ctx.conversation_id, f"steer from {ctx.call_id} [think 1]",
                                    delivery_mode="steer")
        await asyncio.sleep(int(args["ms"]) / 1000)
        return f"rested {args['ms']} ms; then {args['then']}"

    def tool(self) -> Tool:
        return Tool("nap", "Sleeps a while.", self.handler, read_only=True)


# -- checks ---------------------------------------------------------------------------------


async def whole_transcript(rt: Runtime, conv: str) -> list[Message]:
    messages: list[Message] = []
    while True:
        page = await rt.transcript(conv, after_seq=messages[-1].seq if messages else 0)
        messages += page
        if len(page) < 1000:
            return messages


def pairing_violations(messages: Sequence[Message]) -> list[str]:
    """Every call answered exactly once, by the results right after its assistant message; no
    user-role message (notification, steer, input) while any call is open."""
    problems: list[str] = []
    open_calls: dict[str, int] = {}
    answered: set[str] = set()
    for m in messages:
        if m.role == "assistant":
            if open_calls:
                problems.append(f"seq {m.seq}: assistant message while {sorted(open_calls)} open")
            for call in m.tool_calls:
                open_calls[str(call["call_id"])] = m.seq
        elif m.role == "tool":
            call_id = m.tool_call_id or ""
            if call_id in open_calls:
                del open_calls[call_id]
                answered.add(call_id)
            else:
                twice = " (answered twice)" if call_id in answered else ""
                problems.append(f"seq {m.seq}: result for {call_id} with no open call{twice}")
        elif open_calls:
            kind = m.meta.get("kind") or f"input {m.content[:40]!r}"
            problems.append(f"seq {m.seq}: user-role {kind} inside the pair(s) "
                            f"{sorted(open_calls)}")
    if open_calls:
        problems.append(f"never answered: {sorted(open_calls)}")
    return problems


def logged_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the runtime logged as an error -- a unit the store refused (a pairing violation, a
    task's end not recorded) shows here first."""
    return [
        f"{r.name}: {r.getMessage()}"
        + (f" ({type(r.exc_info[1]).__name__}: {r.exc_info[1]})"
           if r.exc_info and r.exc_info[1] is not None else "")
        for r in caplog.records if r.levelno >= logging.ERROR
    ]


async def all_tasks(rt: Runtime, convs: Sequence[str]) -> list[TaskRecord]:
    lists = await asyncio.gather(*(rt.tasks.list(c, limit=1000) for c in convs))
    return [t for tasks in lists for t in tasks]


async def all_runs(rt: Runtime, convs: Sequence[str]) -> list[Run]:
    lists = await asyncio.gather(*(rt.runs.list(c) for c in convs))
    return [r for runs in lists for r in runs]


async def unconsumed_keys(rt: Runtime, conv: str) -> list[str]:
    def read(tx: Tx) -> list[str]:
        return [str(r["task_key"]) for r in tx.all("unconsumed_tasks", conversation_id=conv)]

    return await rt.store.read(read)


@dataclass
class Load:
    """Drives the plan into a runtime: job inputs (bounded by the process permits) and steers."""

    rt: Runtime
    plan: Plan
    convs: list[str]
    permits: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(MAX_PROCESSES))
    outcomes: dict[str, ProcessOutcome] = field(default_factory=dict)
    in_flight: int = 0
    peak: int = 0

    def ended(self, task_key: str, outcome: ProcessOutcome) -> None:
        """The supervisor's observer: one call per process end."""
        self.outcomes[task_key] = outcome
        self.in_flight -= 1
        self.permits.release()

    async def post_jobs(self, c: int) -> None:
        for job in self.plan.of(c):
            await asyncio.sleep(job.gap_ms / 1000)
            await self.permits.acquire()  # given back as the process this input asks for ends
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            await self.rt.post(self.convs[c], f"job {job.n}")

    async def post_steers(self, c: int) -> None:
        start = time.monotonic()
        for j, (at_ms, think) in enumerate(self.plan.steers[c]):
            await asyncio.sleep(max(0.0, start + at_ms / 1000 - time.monotonic()))
            await self.rt.post(self.convs[c], f"steer {c}.{j} [think {think}]",
                               delivery_mode="steer")

    async def run(self) -> None:
        await asyncio.gather(*(self.post_jobs(c) for c in range(len(self.convs))),
                             *(self.post_steers(c) for c in range(len(self.convs))))


# -- the test -----------------------------------------------------------------------------------


async def test_t3_t4_stress_real_processes_exactly_one_notification_each(
    backend: Backend, runtimes: RuntimeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tidings")
    conversations, per = SIZES[backend.name]
    expected = conversations * per
    plan = make_plan(SEED, conversations, per)
    where = f"seed {SEED}, {backend.name}, {conversations} conversations x {per} tasks"
    began = time.monotonic()
    deadline = began + WAIT_S

    model = StressModel(rules=scripted_rules(), default={"text": "ok"},
                        jobs={j.n: j for j in plan.jobs})
    napper = Napper()
    rt = await runtimes(models=[model], tools=[napper.tool()])
    napper.runtime = rt
    profile = Profile(model="scripted", tools=("shell", "nap"))
    convs = [(await rt.create_conversation(f"owner{c}", profile)).conversation_id
             for c in range(conversations)]
    load = Load(rt, plan, list(convs))
    rt.background.observers.append(load.ended)

    async def stuck(what: str) -> AssertionError:
        """A bounded wait ran out: say what was left, and what the runtime complained of."""
        tasks = await all_tasks(rt, convs)
        runs = Counter((r.trigger.value, r.status.value) for r in await all_runs(rt, convs))
        running = sorted(t.task_key for t in tasks if not t.state.terminal)
        never = sorted(set(range(expected)) - set(model.started))
        records = [f"{r.levelname} {r.name}: {r.getMessage()}" for r in caplog.records]
        return AssertionError(
            f"{where}: {what} after {time.monotonic() - began:.0f} s: {len(tasks)} of {expected} "
            f"tasks journalled, {len(running)} not terminal {running[:10]}; jobs the model never "
            f"started {never[:10]}; runs {dict(runs)}; {len(records)} log records {records[:5]}"
        )

    try:
        await asyncio.wait_for(load.run(), WAIT_S)
    except TimeoutError:
        raise await stuck("the inputs were not all posted") from None
    posted_at = time.monotonic()

    # Every task journalled and terminal, then every conversation settled: bounded, and a wait
    # that makes no progress for STALL_S fails at once.
    progress, moved_at = (-1, -1), time.monotonic()
    while True:
        tasks = await all_tasks(rt, convs)
        ended = sum(t.state.terminal for t in tasks)
        if len(tasks) == ended == expected:
            break
        errors = logged_errors(caplog)
        assert not errors, f"{where}: {len(errors)} errors logged: {errors[:5]}"
        if (len(tasks), ended) != progress:
            progress, moved_at = (len(tasks), ended), time.monotonic()
        if time.monotonic() > min(deadline, moved_at + STALL_S):
            raise await stuck("the tasks did not all end")
        await asyncio.sleep(0.1)
    settling = {c: asyncio.ensure_future(rt.settle(c)) for c in convs}
    await asyncio.wait(settling.values(), timeout=max(1.0, deadline - time.monotonic()))
    for future in settling.values():
        future.cancel()
    unsettled = [c for c, future in settling.items() if not future.done() or future.cancelled()]
    if unsettled:
        left = [await unconsumed_keys(rt, c) for c in unsettled[:5]]
        raise await stuck(f"{len(unsettled)} of {conversations} conversations not settled "
                          f"{unsettled[:5]}, their unconsumed notifications {left}")
    settled_at = time.monotonic()

    # -- the tasks: each job started one, and each ended by itself with exit 0 ----------------
    tasks = await all_tasks(rt, convs)
    by_key = {(str(t.conversation_id), t.task_key): t for t in tasks}
    jobs_started = Counter(int(found.group(1)) for t in tasks
                           if (found := COMMAND.search(t.command)) is not None)
    assert jobs_started == Counter(range(expected)), (
        f"{where}: each job must start exactly one task: missing "
        f"{sorted(set(range(expected)) - set(jobs_started))[:20]}, doubled "
        f"{sorted(n for n, k in jobs_started.items() if k > 1)[:20]}"
    )
    not_ok = [(t.task_key, t.state.value, t.exit_code) for t in tasks
              if (t.state, t.exit_code) != (TaskState.EXITED, 0)]
    assert not not_ok, f"{where}: {len(not_ok)} of {expected} tasks did not exit 0: {not_ok[:20]}"
    bad_ends = Counter(o.state.value for o in load.outcomes.values()
                       if o.state is not ProcessState.EXITED)
    assert len(load.outcomes) == expected, (
        f"{where}: {len(load.outcomes)} process ends observed for {expected} tasks"
    )
    assert not bad_ends, f"{where}: processes that did not exit by themselves: {dict(bad_ends)}"

    # -- the transcripts: one notification per task, after its result, never inside a pair ----
    notes: dict[tuple[str, str], list[Message]] = {}
    results: dict[tuple[str, str], Message] = {}
    strays: list[str] = []
    pairing: list[str] = []
    messages_total = 0
    for conv in convs:
        messages = await whole_transcript(rt, conv)
        messages_total += len(messages)
        pairing += [f"{conv} {p}" for p in pairing_violations(messages)]
        for m in messages:
            task_key = str(m.meta.get("task_key"))
            if m.role == "tool" and m.tool_name == "shell":
                results[(conv, task_key)] = m
            elif m.meta.get("kind") == NOTIFICATION_KIND:
                task = by_key.get((conv, task_key))
                if task is None or m.meta.get("event_id") != task.event_id:
                    strays.append(f"{conv} seq {m.seq} {task_key} {m.meta.get('event_id')}")
                else:
                    notes.setdefault((conv, task_key), []).append(m)
    missing = [k for k in by_key if k not in notes]
    doubled = {k: [m.seq for m in v] for k, v in notes.items() if len(v) > 1}
    assert not missing, (
        f"{where}: {len(notes)} of {expected} tasks announced; {len(missing)} never: "
        f"{missing[:10]}"
    )
    assert not doubled, (
        f"{where}: {len(doubled)} of {expected} tasks announced more than once (seqs): "
        f"{list(doubled.items())[:10]}"
    )
    assert not strays, (
        f"{where}: {len(strays)} notifications match no task's event id: {strays[:10]}"
    )
    assert not pairing, (
        f"{where}: {len(pairing)} pairing violations in {messages_total} messages: {pairing[:10]}"
    )
    misplaced = []
    for key, [note] in notes.items():
        task = by_key[key]
        result = results.get(key)
        if (
            result is None or note.seq <= result.seq or task.notification_seq != note.seq
            or task.event_id is None or task.event_id not in note.content
        ):
            misplaced.append((key, None if result is None else result.seq, note.seq,
                              task.notification_seq))
    assert not misplaced, (
        f"{where}: {len(misplaced)} of {expected} notifications not after their tool result, or "
        f"not the journal's (key, result seq, note seq, journal seq): {misplaced[:10]}"
    )

    # -- the journal's flags: every notification delivered and consumed once turns settled ----
    flags = Counter(
        (t.committed, t.handed_off, t.delivered, t.consumed, t.cancelled,
         t.reported_in_tool_result, t.continuation_error) for t in tasks
    )
    assert flags == Counter({(True, True, True, True, False, False, None): expected}), (
        f"{where}: after settling, (committed, handed_off, delivered, consumed, cancelled, "
        f"reported, continuation_error): count = {dict(flags)}"
    )
    unconsumed = {c: keys for c in convs if (keys := await unconsumed_keys(rt, c))}
    assert not unconsumed, f"{where}: unconsumed notifications left: {unconsumed}"
    runs = await all_runs(rt, convs)
    statuses = Counter((r.trigger.value, r.status.value) for r in runs)
    assert all(r.status is RunStatus.COMPLETED for r in runs), (
        f"{where}: {len(runs)} runs by (trigger, status): {dict(statuses)}"
    )
    errors = logged_errors(caplog)
    assert not errors, f"{where}: {len(errors)} errors logged: {errors[:5]}"

    # The plan still races the two facts T3 joins: some ends were journalled before their
    # tool result committed, some after it (at least 1 % each way: how the two mix follows the
    # machine's speed and load -- 36 of 1,000 on a slow, loaded one, fewer than 20 once with
    # five test workers on two CPUs).
    before = 0
    for key, result in results.items():
        ended_us = by_key[key].ended_at_us
        before += ended_us is not None and ended_us < result.created_at_us
    assert min(before, expected - before) >= expected // 100, (
        f"{where}: {before} of {expected} ends journalled before their tool result committed: "
        "the plan no longer races the two"
    )
    log.info(
        "%s: %d processes (at most %d in flight), runs %s, %d messages, %d ends journalled "
        "before their result; steers: %d from tools, %d from outside; lifetimes %s; posted in "
        "%.1f s, settled at %.1f s, checked at %.1f s; %d warnings",
        where, expected, load.peak, dict(statuses), messages_total, before, napper.steers,
        sum(map(len, plan.steers.values())), dict(Counter(t.lifetime for t in tasks)),
        posted_at - began, settled_at - began, time.monotonic() - began, len(caplog.records),
    )
