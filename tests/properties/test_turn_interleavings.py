"""One turn at a time, strict pairing and delivery modes under random interleavings (hypothesis).

Each example opens a fresh SQLite database in its own event loop and drives a real
:class:`~tidings.runtime.root.Runtime` through a generated list of actions: a person posting a
``queue`` or ``steer`` input, opening (or failing) a pending tool call, stopping the
conversation, publishing a signal (a wake-up), a goal checkpoint, a compaction attempt, and
settling. The scripted model answers by the newest message: an input (or a goal) carrying
``call:1`` or ``call:2`` calls the ``gate`` tool once or twice in one step, a signal whose
payload asks for it calls the gate once, a tool result gets a text answer, anything else gets
text. Every gate call waits on its own :class:`asyncio.Event`, which only an action of the
example sets -- so a tool is pending exactly as long as the example says.

After an action the example waits (bounded, never asserted) until the conversation is idle or
every call of the current step is pending at a gate: nothing could move then. Some actions skip
that wait, so the next one lands while the runtime is still between commits.

At the end every gate is opened, the conversation settles, and the database must show what a
user relies on: strict pairing (M3), no two runs overlapping and none left running (C1), every
posted input materialised once, read in arrival order, a steer only at a turn start or right
after a step's tool results and a queued input only at a turn start (M2, M3), stopped runs with
no answer and their cut-off calls answered ``cancelled`` (C6), gap-free journal sequences, no
automatic start between a stop and a person's next post (C6), and compaction refused while a
tool is pending and accepted whenever the conversation is idle (C7).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import sqlite3
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.waiting import eventually, wait_until
from tidings import (
    CompactionRefusedError,
    Event,
    Input,
    Message,
    ModelReply,
    ModelRequest,
    Profile,
    Rule,
    Run,
    RunStatus,
    ScriptedModel,
    SqliteStore,
    Tool,
    ToolContext,
    Tx,
)
from tidings.models.base import DeltaCallback
from tidings.records.outbox import OutboxConfig
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.scheduler.coordinator import CoordinatorConfig
from tidings.turns.runner import TurnConfig

OWNER = "alice"
PROFILE = Profile(model="scripted", tools=("gate",), system="You are a test agent.")
WAIT = 20.0  # bound on waiting for the runtime to get somewhere; a liveness guard, never timed
POLL = 0.001
CONFIG = RuntimeConfig(
    turns=TurnConfig(retry_base=timedelta(0), max_steps=64),
    # Nothing periodic may start work behind the example's back.
    coordinator=CoordinatorConfig(sweep_interval=timedelta(hours=1)),
    # A stopped wake-up turn gives its signal back: claimable again almost at once.
    outbox=OutboxConfig(
        backoff_base=timedelta(milliseconds=1), backoff_cap=timedelta(milliseconds=2),
        sweep_interval=timedelta(hours=1), heartbeat_interval=timedelta(hours=1),
    ),
)

SIGNAL_CALLS = "signal-calls-gate"
RULES = [
    Rule(when={"meta_kind": "compaction"}, reply={"text": "summary of everything"}),
    Rule(when={"tool_result": "gate"}, reply={"text": "gates done"}),
    Rule(when={"suffix_contains": SIGNAL_CALLS},
         reply={"tool_calls": [{"name": "gate", "arguments": {"n": 0}}]}),
    Rule(when={"text_contains": "call:2"},
         reply={"tool_calls": [{"name": "gate", "arguments": {"n": 1}},
                               {"name": "gate", "arguments": {"n": 2}}]}),
    Rule(when={"text_contains": "call:1"},
         reply={"tool_calls": [{"name": "gate", "arguments": {"n": 1}}]}),
]
Directive = Literal["text", "call:1", "call:2"]

# -- the actions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Post:
    """A person posts ``directive`` as a ``queue`` or ``steer`` input."""

    directive: Directive
    mode: Literal["queue", "steer"]
    wait: bool = True


@dataclass(frozen=True)
class Open:
    """The pending gate number ``pick`` (modulo how many are pending) returns, or raises."""

    pick: int
    fail: bool
    wait: bool = True


@dataclass(frozen=True)
class Stop:
    wait: bool = True


@dataclass(frozen=True)
class Publish:
    """A signal for the conversation: it wakes the conversation unless suppressed. The turn
    that reads a ``calls`` signal among its runtime facts calls the gate."""

    calls: bool
    wait: bool = True


@dataclass(frozen=True)
class Checkpoint:
    """The goal is set active with ``directive`` as its text, then a goal checkpoint asks for
    an automatic start (whose notice carries the directive)."""

    directive: Directive
    wait: bool = True


@dataclass(frozen=True)
class Compact:
    wait: bool = True


@dataclass(frozen=True)
class Settle:
    """Open every gate as it comes until the conversation is idle."""


Action = Post | Open | Stop | Publish | Checkpoint | Compact | Settle

directives = st.sampled_from(["text", "call:1", "call:2"])
waits = st.sampled_from([True, True, True, False])
actions: st.SearchStrategy[Action] = st.one_of(
    st.builds(Post, directives, st.sampled_from(["queue", "steer"]), waits),
    st.builds(Post, st.sampled_from(["call:1", "call:2"]), st.just("queue"), waits),
    st.builds(Open, st.integers(0, 3), st.booleans(), waits),
    st.builds(Open, st.integers(0, 3), st.just(False), waits),
    st.builds(Stop, waits),
    st.builds(Stop, waits),
    st.builds(Publish, st.booleans(), waits),
    st.builds(Checkpoint, directives, waits),
    st.builds(Compact, waits),
    st.just(Settle()),
)

# -- the gate tool and the model ------------------------------------------------------------


@dataclass
class GateCall:
    """One call of the gate tool; ``outcome`` is how its handler ended."""

    run_id: str
    call_id: str
    release: asyncio.Event = field(default_factory=asyncio.Event)
    fail: bool = False
    outcome: Literal["pending", "opened", "failed", "cancelled"] = "pending"


class Harness:
    """The gate tool, and the scripted model wrapped to remember its last step's calls:
    together they tell when every call of the current step waits at a gate."""

    name = "scripted"

    def __init__(self) -> None:
        self.inner = ScriptedModel(rules=RULES, default={"text": "plain answer"})
        self.pending: list[GateCall] = []
        self.calls: list[GateCall] = []
        self.step: set[str] = set()
        self.entered: set[str] = set()

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        reply = await self.inner.complete(request, on_delta=on_delta)
        self.step = {c.call_id for c in reply.tool_calls}
        self.entered = set()
        return reply

    async def gate(self, ctx: ToolContext, args: Mapping[str, Any]) -> str:
        call = GateCall(ctx.run_id, ctx.call_id)
        self.pending.append(call)
        self.calls.append(call)
        self.entered.add(ctx.call_id)
        try:
            await call.release.wait()
        except asyncio.CancelledError:
            call.outcome = "cancelled"
            raise
        finally:
            if call in self.pending:
                self.pending.remove(call)
        if call.fail:
            call.outcome = "failed"
            raise RuntimeError("the gate was told to fail")
        call.outcome = "opened"
        return f"opened {ctx.call_id}"

    def tool(self) -> Tool:
        return Tool("gate", "Waits until the test opens it.", self.gate)

    def blocked(self) -> bool:
        """Every call of the current step waits at a gate: nothing moves until one opens."""
        return bool(self.pending) and self.step <= self.entered

    def open(self, pick: int, *, fail: bool) -> None:
        if self.pending:
            call = self.pending.pop(pick % len(self.pending))
            call.fail = fail
            call.release.set()


# -- one example ----------------------------------------------------------------------------


@dataclass
class Example:
    rt: Runtime
    conversation_id: str
    harness: Harness
    posted: list[Input] = field(default_factory=list)
    idle: bool = False  # the last wait ended with the conversation settled, nothing since
    moving: bool = False  # the last action did not wait: the runtime may be between commits
    signals: int = 0
    compactions: int = 0
    refusals: int = 0

    async def progress(self) -> None:
        """Wait until the conversation is idle or blocked at its gates (bounded)."""
        self.moving = False
        settle = asyncio.ensure_future(self.rt.settle(self.conversation_id))
        try:
            await wait_until(lambda: settle.done() or self.harness.blocked(),
                             what="the runtime settled or reached a gate", within_s=WAIT,
                             poll_s=POLL)
            if settle.done():
                settle.result()
                self.idle = True
        finally:
            if not settle.done():
                settle.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await settle

    async def apply(self, action: Action) -> None:
        if isinstance(action, Settle):
            await self.drain()
            return
        was_idle, self.idle = self.idle, False
        if isinstance(action, Post):
            self.posted.append(await self.rt.post(
                self.conversation_id, f"{action.directive} #{len(self.posted)}",
                delivery_mode=action.mode,
            ))
        elif isinstance(action, Open):
            self.harness.open(action.pick, fail=action.fail)
        elif isinstance(action, Stop):
            pending = bool(self.harness.pending)
            stopped = await self.rt.stop(self.conversation_id)
            # A tool waiting at a gate means a run is running, and the stop must find it.
            assert stopped or not pending, "stop found no running run while a tool was pending"
            self.idle = was_idle and not pending
        elif isinstance(action, Publish):
            await self.publish(action.calls)
        elif isinstance(action, Checkpoint):
            await self.rt.conversations.set_goal(self.conversation_id, "active", action.directive)
            await self.rt.conversations.checkpoint(self.conversation_id)
        else:
            await self.compact(was_idle=was_idle)
        if action.wait:
            await self.progress()
        else:
            self.moving = True
            for _ in range(3):
                await asyncio.sleep(0)

    async def publish(self, calls: bool) -> None:
        self.signals += 1
        key = f"signal-{self.signals}"
        payload = {"exit_code": 0, "note": SIGNAL_CALLS if calls else "quiet"}

        def unit(tx: Tx) -> None:
            self.rt.outbox.publish(
                tx, self.conversation_id, "task.exited", payload, idempotency_key=key
            )

        await self.rt.store.transact(unit, route=self.conversation_id)

    async def compact(self, *, was_idle: bool) -> None:
        """C7: refused while a tool is pending; accepted when the conversation is idle."""
        pending = bool(self.harness.pending)
        try:
            await self.rt.conversations.compact(self.conversation_id)
        except CompactionRefusedError:
            assert not was_idle, "compaction refused although the conversation was idle"
            self.refusals += 1
            return
        assert not pending, "compaction accepted while a tool call was pending"
        self.compactions += 1
        self.idle = was_idle

    async def drain(self) -> None:
        """Open every gate as it comes until the conversation settles."""

        async def step() -> bool:
            while self.harness.pending:
                self.harness.open(0, fail=False)
            self.idle = False
            await self.progress()
            return self.idle

        await eventually(step, what="the conversation settled", within_s=WAIT, poll_s=0)


@dataclass(frozen=True)
class Outcome:
    """What an example left in the database, and what it got to (for the statistics)."""

    messages: list[Message]
    runs: list[Run]
    inputs: list[Input]
    events: list[Event]
    suppressed: bool
    seen: list[str]


# -- the invariants -------------------------------------------------------------------------


def check_pairing(messages: Sequence[Message]) -> None:
    """Every call is answered once, before any other user or assistant message (M3)."""
    open_calls: dict[str, str | None] = {}  # call id -> the run that made the call
    for m in messages:
        if m.role == "tool":
            assert m.tool_call_id in open_calls, f"result {m.seq} answers no open call"
            assert open_calls.pop(m.tool_call_id) == m.run_id, f"result {m.seq} of another run"
            continue
        assert not open_calls, f"{m.role} message {m.seq} between calls {open_calls} and results"
        open_calls = {c["call_id"]: m.run_id for c in m.tool_calls}
        assert len(open_calls) == len(m.tool_calls), f"duplicate call ids at {m.seq}"
    assert not open_calls, f"calls {sorted(open_calls)} never answered"


def check_runs(runs: Sequence[Run]) -> None:
    """None left running; one at a time (C1)."""
    for run in runs:
        assert run.status in (RunStatus.COMPLETED, RunStatus.STOPPED), run
        assert run.started_at_us is not None, run
        assert run.ended_at_us is not None, run
        assert run.started_at_us <= run.ended_at_us, run
    ordered = sorted(runs, key=lambda r: (r.started_at_us or 0, r.ended_at_us or 0))
    for before, after in itertools.pairwise(ordered):
        assert (before.ended_at_us or 0) <= (after.started_at_us or 0), f"{before} overlaps {after}"


def check_inputs(
    messages: Sequence[Message], inputs: Sequence[Input], posted: Sequence[Input],
    events: Sequence[Event],
) -> None:
    """Each posted input is one user message of the run that read it; a turn reads what it
    took in arrival order; a steer joins only at a turn start or right after a step's tool
    results, a queued input only at a turn start (M2, M3)."""
    assert sorted(i.input_id for i in inputs) == sorted(i.input_id for i in posted)
    at: dict[str, list[int]] = {}
    for index, m in enumerate(messages):
        if m.input_id is not None:
            assert m.role == "user", m
            at.setdefault(m.input_id, []).append(index)
    taken = {
        e.data["run_public_id"]: e.data["inputs"] for e in events
        if e.type == "turn_status" and e.data["status"] == "running"
    }
    started_with: dict[str, list[str]] = {}
    for item in inputs:
        assert item.state.value == "materialized", item
        assert len(at.get(item.input_id, [])) == 1, f"{item.input_id} written at {at}"
        index = at[item.input_id][0]
        m = messages[index]
        assert m.run_id is not None, m
        assert m.run_id == item.run_id, (m, item)
        before = index - 1
        while (before >= 0 and messages[before].input_id is not None
               and messages[before].run_id == m.run_id):
            before -= 1
        prev = messages[before] if before >= 0 else None
        turn_start = prev is None or prev.run_id != m.run_id
        after_results = prev is not None and prev.role == "tool" and prev.run_id == m.run_id
        if item.delivery_mode.value == "queue":
            assert turn_start, f"queued input {item.content!r} joined its turn mid-way"
        else:
            assert turn_start or after_results, f"steer {item.content!r} after {prev}"
        if turn_start:
            started_with.setdefault(m.run_id, []).append(item.input_id)
        else:
            assert item.input_id not in taken[m.run_id], f"{item} read twice by {m.run_id}"
    position: dict[str, int] = {i.input_id: i.queue_position for i in inputs}
    for run_id, ids in started_with.items():
        ordered = sorted(ids, key=lambda i: at[i][0])
        assert ordered == taken[run_id], f"run {run_id} took {taken[run_id]}, wrote {ordered}"
        assert ordered == sorted(ids, key=lambda i: position[i]), f"{run_id} read out of order"
    for mode in ("queue", "steer"):
        order = sorted((i for i in inputs if i.delivery_mode.value == mode),
                       key=lambda i: i.queue_position)
        seqs = [at[i.input_id][0] for i in order]
        assert seqs == sorted(seqs), f"{mode} inputs out of arrival order"


def check_stops(
    messages: Sequence[Message], runs: Sequence[Run], calls: Sequence[GateCall]
) -> None:
    """A stopped run answers nothing; the calls it cut off are answered ``cancelled`` (C6)."""
    by_id = {r.run_id: r for r in runs}
    for m in messages:
        run = by_id.get(m.run_id) if m.run_id is not None else None
        if m.role == "assistant" and not m.tool_calls:
            assert run is None or run.status is RunStatus.COMPLETED, f"{run} answered: {m}"
        if m.role == "tool" and m.meta.get("status") == "cancelled":
            assert run is not None, m
            assert run.status is RunStatus.STOPPED, (run, m)
    for run in runs:
        if run.status is RunStatus.STOPPED:
            assert run.failure_code == "stopped", run
    results: dict[tuple[str | None, str | None], Message] = {
        (m.run_id, m.tool_call_id): m for m in messages if m.role == "tool"
    }
    for call in calls:
        assert call.outcome != "pending", call
        result = results.get((call.run_id, call.call_id))
        assert result is not None, f"no result for {call}"
        if call.outcome == "cancelled":
            assert result.meta.get("status") == "cancelled", (call, result)
        elif result.meta.get("status") != "cancelled":
            assert (call.outcome == "failed") == bool(result.meta.get("is_error")), (call, result)


def check_events(events: Sequence[Event], runs: Sequence[Run], suppressed: bool) -> None:
    """Gap-free journal; each run journals its start and its end; no automatic start between
    a stop and a person's next post, and the conversation is suppressed exactly then (C6)."""
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    final = {r.run_id: r.status.value for r in runs}
    started: dict[str, str] = {}
    ended: dict[str, str] = {}
    held = False  # a stop came after the last person's post
    for e in events:
        if e.type == "stop_requested":
            held = True
        elif e.type == "input_accepted" and e.data["origin"] == "person":
            held = False
        elif e.type == "turn_status" and e.data["status"] == "running":
            started[e.data["run_public_id"]] = e.data["trigger"]
            assert not (held and e.data["trigger"] in ("wake", "goal")), (
                f"automatic start {e} after a stop, before a person's post"
            )
        elif e.type == "turn_status":
            ended[e.data["run_public_id"]] = e.data["status"]
        elif e.type == "turn_yielded" and e.data["reason"] == "suppressed":
            assert held, f"{e} although a person posted after the last stop"
    assert started.keys() == final.keys()
    assert ended == final
    assert suppressed == held, f"suppressed={suppressed}, but a stop came last={held}"


def observe(
    messages: Sequence[Message], runs: Sequence[Run], inputs: Sequence[Input],
    calls: Sequence[GateCall], example: Example,
) -> list[str]:
    """What the example got to, for ``--hypothesis-show-statistics``."""
    seen = [f"run: {run.trigger.value} {run.status.value}" for run in runs]
    seen += [f"gate: {call.outcome}" for call in calls]
    modes = {i.input_id: i.delivery_mode.value for i in inputs}
    for index, m in enumerate(messages):
        if m.input_id is not None:
            prev = messages[index - 1] if index else None
            joined = prev is not None and prev.role == "tool" and prev.run_id == m.run_id
            where = "after a step's results" if joined else "at a turn start"
            seen.append(f"{modes[m.input_id]} materialised {where}")
    seen.append(f"compaction refused: {example.refusals > 0}")
    return seen


@contextlib.asynccontextmanager
async def opened(harness: Harness) -> AsyncIterator[tuple[Runtime, str]]:
    """A runtime on a fresh SQLite file, and a conversation with an active goal."""
    with tempfile.TemporaryDirectory(prefix="tidings-interleave-") as directory:
        async with Runtime.open(
            str(Path(directory) / "tidings.db"), models=[harness], tools=[harness.tool()],
            config=CONFIG, store_options={"synchronous": "NORMAL"},
        ) as rt:
            conversation = await rt.create_conversation(OWNER, PROFILE, title="interleavings")
            await rt.conversations.set_goal(conversation.conversation_id, "active",
                                            "keep the gates busy")
            yield rt, conversation.conversation_id


async def run_example(script: Sequence[Action]) -> Outcome:
    harness = Harness()
    async with opened(harness) as (rt, conversation_id):
        example = Example(rt, conversation_id, harness)
        for action in script:
            await example.apply(action)
        await example.drain()
        await example.compact(was_idle=True)
        conversation = await rt.conversation(conversation_id)
        outcome = Outcome(
            await rt.transcript(conversation_id),
            await rt.runs.list(conversation_id),
            await rt.inputs.list(conversation_id),
            await rt.events(conversation_id),
            conversation.suppressed,
            [],
        )
        check_pairing(outcome.messages)
        check_runs(outcome.runs)
        check_inputs(outcome.messages, outcome.inputs, example.posted, outcome.events)
        check_stops(outcome.messages, outcome.runs, harness.calls)
        check_events(outcome.events, outcome.runs, outcome.suppressed)
        outcome.seen.extend(
            observe(outcome.messages, outcome.runs, outcome.inputs, harness.calls, example)
        )
        return outcome


@settings(
    max_examples=int(os.environ.get("TIDINGS_INTERLEAVINGS_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(script=st.lists(actions, min_size=4, max_size=24))
def test_c1_c6_c7_m2_m3_random_interleavings_keep_pairing_and_one_turn_at_a_time(
    script: list[Action],
) -> None:
    for seen in asyncio.run(run_example(script)).seen:
        event(seen)


@pytest.mark.parametrize("directive", ["call:1", "call:2"])
def test_m3_steer_during_a_pending_tool_joins_right_after_its_results(
    directive: Directive,
) -> None:
    """The interleaving the property draws at random, written out: a steer posted while the
    step's tools are pending is read by the same run, right after their results."""
    script: list[Action] = [Post(directive, "queue"), Post("text", "steer"), Settle()]
    outcome = asyncio.run(run_example(script))
    calls = 2 if directive == "call:2" else 1
    assert [
        (m.role, m.meta.get("is_error") if m.role == "tool" else m.content.split(" #")[0])
        for m in outcome.messages
    ] == [
        ("user", directive),
        ("assistant", ""),
        *[("tool", False)] * calls,
        ("user", "text"),
        ("assistant", "plain answer"),
        ("user", "summary of everything"),  # the closing compaction
    ]
    assert len({m.run_id for m in outcome.messages if m.run_id is not None}) == 1


# -- two interleavings the property found, written out ------------------------------------


async def test_c6_a_post_between_stop_and_the_stopped_turns_end_lifts_suppression() -> None:
    harness = Harness()
    async with opened(harness) as (rt, conversation_id):
        await rt.post(conversation_id, "call:1")
        await Example(rt, conversation_id, harness).progress()
        assert harness.blocked()
        await rt.stop(conversation_id)
        # Lands before the stopped turn's last commit (nothing was awaited since the stop).
        await rt.post(conversation_id, "carry on")
        await rt.settle(conversation_id)
        await rt.conversations.checkpoint(conversation_id)
        await rt.settle(conversation_id)
        runs = await rt.runs.list(conversation_id)
        assert [(r.trigger.value, r.status.value) for r in runs][:2] == [
            ("person", "stopped"), ("person", "completed")
        ]
        assert not (await rt.conversation(conversation_id)).suppressed
        assert [r.trigger.value for r in runs][2:] == ["goal"]


class HeldHarness(Harness):
    """The harness, but the model waits for ``release`` before it answers."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = asyncio.Event()
        self.release = asyncio.Event()

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        self.asked.set()
        await self.release.wait()
        return await super().complete(request, on_delta=on_delta)


async def test_c6_a_stop_during_the_first_commit_ends_the_run_stopped() -> None:
    harness = HeldHarness()
    async with opened(harness) as (rt, conversation_id):
        await rt.post(conversation_id, "call:1")
        await asyncio.wait_for(harness.asked.wait(), WAIT)
        # Hold SQLite's write lock from another connection, so that the stop's unit and then
        # the turn's first commit (its input and its tool call) queue and commit in one group,
        # in that order: the stop cancels the turn while it awaits a commit that has already
        # happened.
        assert isinstance(rt.store, SqliteStore)
        holder = sqlite3.connect(rt.store.path, isolation_level=None, timeout=0)
        try:
            holder.execute("BEGIN IMMEDIATE")
            stopping = asyncio.ensure_future(rt.stop(conversation_id))
            await asyncio.sleep(0)  # the stop's unit is queued
            harness.release.set()
            for _ in range(5):
                await asyncio.sleep(0)  # the model answered; the turn's commit is queued
            holder.execute("ROLLBACK")
        finally:
            holder.close()
        assert len(await stopping) == 1
        await rt.settle(conversation_id)
        runs = await rt.runs.list(conversation_id)
        assert [(r.status.value, r.failure_code) for r in runs] == [("stopped", "stopped")]
        messages = await rt.transcript(conversation_id)
        assert [(m.role, m.meta.get("status")) for m in messages] == [
            ("user", None), ("assistant", None), ("tool", "cancelled")
        ]
        assert harness.calls == []  # the gate never ran
        await rt.conversations.compact(conversation_id)  # the slot is free
