"""The execution coordinator (C1-C9), on both backends, through a started runtime.

Turns are held open by a tool (or a model) that waits on an :class:`asyncio.Event` the test
controls, so starts arriving "while the slot is held" are arranged, not hoped for. Signal
wake-ups go through the real path (publish, then the store's wake-up reaches the coordinator);
the helper waits until this process has seen the wake-up before the test goes on. Nothing is
asserted about how long anything takes: time bounds only stop a broken test from hanging.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from tests.conftest import Backend, RuntimeFactory
from tidings import (
    CompactionRefusedError,
    CoordinatorConfig,
    Event,
    InputState,
    ManualClock,
    Model,
    ModelReply,
    ModelRequest,
    Profile,
    Published,
    Rule,
    Run,
    RunStatus,
    ScriptedModel,
    SqliteStore,
    StartKind,
    Tool,
    ToolContext,
    Tx,
)
from tidings.models.base import DeltaCallback
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.turns.runner import TurnConfig

OWNER = "alice"
WAIT = 30.0  # bound on waiting for something the test arranged; never asserted on
FAST = RuntimeConfig(turns=TurnConfig(retry_base=timedelta(0)))

# "block" calls the gate tool; the gate's result gets "gate passed"; everything else is echoed.
GATE_RULES = (
    Rule(when={"text_equals": "block"}, reply={"tool_calls": [{"name": "gate", "arguments": {}}]}),
    Rule(when={"tool_result": "gate"}, reply={"text": "gate passed"}),
)


# -- helpers -------------------------------------------------------------------------------------


class Gate:
    """A tool that waits until the test opens it; says when it was entered and how it ended."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.calls = 0
        self.cancelled = False
        self.returned = False

    async def handler(self, ctx: ToolContext, args: Mapping[str, Any]) -> str:
        self.calls += 1
        self.entered.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        self.returned = True
        return "the gate opened"

    def tool(self) -> Tool:
        return Tool("gate", "Waits until the test opens it.", self.handler)


@dataclass
class Recording:
    """A model that records each request, counts calls in flight, and answers via ``inner``."""

    inner: Model
    name: str = ""
    requests: list[ModelRequest] = field(default_factory=list)
    in_flight: int = 0
    peak: int = 0
    called: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.name = self.name or self.inner.name

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        self.requests.append(request)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        self.called.set()
        try:
            return await self.inner.complete(request, on_delta=on_delta)
        finally:
            self.in_flight -= 1


class Counting:
    """A tool that answers at once and counts its calls."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls = 0

    async def handler(self, ctx: ToolContext, args: Mapping[str, Any]) -> str:
        self.calls += 1
        return f"{self.name} done"

    def tool(self) -> Tool:
        return Tool(self.name, f"Answers {self.name} done.", self.handler)


def after_quick(request: ModelRequest) -> bool:
    return bool(request.messages) and request.messages[-1].tool_name == "quick"


@dataclass
class Stalling:
    """Answers through ``inner``, but first, when ``when`` holds for the request (by default:
    a ``quick`` result is in), says so (``stalled``) and waits for ``resume``."""

    inner: Model
    name: str = "scripted"
    stalled: asyncio.Event = field(default_factory=asyncio.Event)
    resume: asyncio.Event = field(default_factory=asyncio.Event)
    when: Callable[[ModelRequest], bool] = after_quick

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        if self.when(request):
            self.stalled.set()
            await self.resume.wait()
        return await self.inner.complete(request, on_delta=on_delta)


async def new_conversation(rt: Runtime, profile: Profile | None = None) -> str:
    created = await rt.create_conversation(OWNER, profile or Profile(model="scripted"))
    return created.conversation_id


async def publish(
    rt: Runtime, conversation_id: str, *signals: tuple[str, dict[str, Any]]
) -> list[Published]:
    """Publish signals in one transaction and wait until this process saw the wake-up.

    The coordinator subscribed to wake-ups before this helper does, so by the time the helper's
    own copy arrives the coordinator has already been asked for a ``wake`` start. Only for a
    conversation whose signal queue was empty (a wake-up is sent on the first signal only).
    """
    wakeups = rt.store.wakeups.subscribe()
    try:
        published = await rt.store.transact(
            lambda tx: [rt.outbox.publish(tx, conversation_id, t, p) for t, p in signals],
            route=conversation_id,
        )
        async with asyncio.timeout(WAIT):
            while await wakeups.get() != conversation_id:
                pass
        await asyncio.sleep(0)
    finally:
        rt.store.wakeups.unsubscribe(wakeups)
    return published


async def reached(event: asyncio.Event) -> None:
    async with asyncio.timeout(WAIT):
        await event.wait()


async def settle(rt: Runtime, conversation_id: str) -> None:
    async with asyncio.timeout(WAIT):
        await rt.settle(conversation_id)


def yielded(events: Sequence[Event]) -> list[dict[str, Any]]:
    return [e.data for e in events if e.type == "turn_yielded"]


async def raw_events(rt: Runtime, conversation_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The journal read straight from the store (the API hides tombstoned conversations)."""

    def read(tx: Tx) -> list[tuple[str, dict[str, Any]]]:
        rows = tx.all("events_after", conversation_id=conversation_id, after_seq=0, limit=1000)
        return [(r["type"], json.loads(r["data"])) for r in rows]

    return await rt.store.read(read)


async def raw_run_count(rt: Runtime, conversation_id: str) -> int:
    rows = await rt.store.read(
        lambda tx: tx.all("list_runs", conversation_id=conversation_id, limit=1000)
    )
    return len(rows)


async def delivery_state(rt: Runtime, published: Published) -> tuple[str, int]:
    (row,) = await rt.outbox.delivery_states([published.delivery_id])
    return str(row["state"]), int(row["attempts"])


# -- C1 ------------------------------------------------------------------------------------------


async def test_c1_one_turn_at_a_time_across_100_conversations(runtimes: RuntimeFactory) -> None:
    limit = 16
    model = Recording(ScriptedModel(default={"echo": True, "delay_seconds": 0.01}))
    rt = await runtimes(
        models=[model],
        config=RuntimeConfig(
            turns=TurnConfig(retry_base=timedelta(0)),
            coordinator=CoordinatorConfig(max_concurrent_turns=limit),
        ),
    )
    conversations = list(await asyncio.gather(*(new_conversation(rt) for _ in range(100))))

    async def burst(conversation_id: str) -> list[str]:
        posted = await asyncio.gather(
            *(rt.post(conversation_id, f"message {n}") for n in range(3))
        )
        return [p.input_id for p in posted]

    posted = dict(
        zip(conversations, await asyncio.gather(*(burst(c) for c in conversations)), strict=True)
    )
    async with asyncio.timeout(WAIT):
        await asyncio.gather(*(rt.settle(c) for c in conversations))

    total_runs = 0
    for conversation_id, input_ids in posted.items():
        runs = sorted(await rt.runs.list(conversation_id), key=lambda r: (r.started_at_us or 0))
        total_runs += len(runs)
        assert runs, conversation_id
        assert all(r.status is RunStatus.COMPLETED for r in runs)
        for earlier, later in itertools.pairwise(runs):
            assert earlier.ended_at_us is not None
            assert later.started_at_us is not None
            assert earlier.ended_at_us <= later.started_at_us, "two turns of one conversation"
        inputs = await rt.inputs.list(conversation_id)
        assert sorted(i.input_id for i in inputs) == sorted(input_ids)
        assert all(i.state is InputState.MATERIALIZED for i in inputs)
        transcript = await rt.transcript(conversation_id)
        read = [m.input_id for m in transcript if m.role == "user"]
        assert len(read) == len(input_ids)
        assert sorted(i for i in read if i) == sorted(input_ids)  # each exactly once
        events = await rt.events(conversation_id)
        materialized = [e.data["input_id"] for e in events if e.type == "input_materialized"]
        assert sorted(materialized) == sorted(input_ids)
    assert 100 <= total_runs <= 300
    assert len(model.requests) == total_runs
    assert model.peak <= limit
    assert model.peak > 1, "different conversations should run in parallel"


# -- C2 ------------------------------------------------------------------------------------------


async def test_c2_three_starts_at_once_give_one_turn_person_first(
    runtimes: RuntimeFactory,
) -> None:
    gate = Gate()
    model = Recording(ScriptedModel(rules=GATE_RULES))
    rt = await runtimes(models=[model], tools=[gate.tool()], config=FAST)
    conv = await new_conversation(rt, Profile(model="scripted", tools=("gate",)))
    await rt.conversations.set_goal(conv, "active", "ship the release")
    await rt.post(conv, "block")
    await reached(gate.entered)

    # While the slot is held, a person writes, a signal wakes the conversation and a goal
    # checkpoint comes due: three starts, pending together.
    question = await rt.post(conv, "status?")
    (signal,) = await publish(rt, conv, ("task.exited", {"exit_code": 0}))
    await rt.conversations.checkpoint(conv)
    gate.release.set()
    await settle(rt, conv)

    runs = await rt.runs.list(conv)
    assert len(runs) == 2, "the three starts coalesce into one turn"
    turn = runs[1]
    assert turn.trigger is StartKind.PERSON
    assert turn.status is RunStatus.COMPLETED
    events = await rt.events(conv)
    started = [
        e.data for e in events
        if e.type == "turn_status" and e.run_id == turn.run_id and e.data["status"] == "running"
    ]
    # The person's turn reads the person's input and also takes the ready signal (S5).
    assert started == [{"run_public_id": turn.run_id, "status": "running", "trigger": "person",
                        "inputs": [question.input_id], "signals": 1}]
    # The automatic starts yield to the person, and say so. The wake-up is journaled here too:
    # the batch it coalesced into was recorded (a lone wake-up would not be).
    reasons = yielded(events)
    assert {"start": "goal", "reason": "person_priority"} in reasons
    assert {"start": "wake", "reason": "person_priority"} in reasons
    assert {r["reason"] for r in reasons} == {"person_priority"}
    request = model.requests[-1]
    assert request.messages[-1].content == "status?"
    assert any("task.exited" in block for block in request.suffix)
    transcript = await rt.transcript(conv)
    assert not [m for m in transcript if m.meta.get("kind") == "goal_checkpoint"]
    assert await delivery_state(rt, signal) == ("acknowledged", 1)


# -- C3 ------------------------------------------------------------------------------------------


async def checkpoint_with_goal(runtimes: RuntimeFactory, status: str) -> tuple[Runtime, str]:
    model = ScriptedModel()
    rt = await runtimes(models=[model], config=FAST)
    conv = await new_conversation(rt)
    await rt.conversations.set_goal(conv, status, "tidy the garden")
    await rt.conversations.checkpoint(conv)
    await settle(rt, conv)
    assert model.calls == 0
    return rt, conv


async def test_c3_automatic_start_yields_when_goal_paused(runtimes: RuntimeFactory) -> None:
    rt, conv = await checkpoint_with_goal(runtimes, "paused")
    assert await rt.runs.list(conv) == []
    assert yielded(await rt.events(conv)) == [{"start": "goal", "reason": "goal_paused"}]
    assert rt.coordinator.yields == {"goal_paused": 1}


async def test_c3_automatic_start_yields_when_goal_blocked(runtimes: RuntimeFactory) -> None:
    rt, conv = await checkpoint_with_goal(runtimes, "blocked")
    assert await rt.runs.list(conv) == []
    assert yielded(await rt.events(conv)) == [{"start": "goal", "reason": "goal_blocked"}]


@pytest.mark.parametrize("status", ["none", "done"])
async def test_c3_automatic_start_yields_when_goal_not_active(
    runtimes: RuntimeFactory, status: str
) -> None:
    rt, conv = await checkpoint_with_goal(runtimes, status)
    assert await rt.runs.list(conv) == []
    assert yielded(await rt.events(conv)) == [{"start": "goal", "reason": f"goal_{status}"}]


async def test_c3_checkpoint_of_active_goal_runs_a_goal_turn(runtimes: RuntimeFactory) -> None:
    model = Recording(ScriptedModel(rules=[
        Rule(when={"meta_kind": "goal_checkpoint"}, reply={"text": "working on it"}),
    ]))
    rt = await runtimes(models=[model], config=FAST)
    conv = await new_conversation(rt)
    await rt.conversations.set_goal(conv, "active", "tidy the garden")
    await rt.conversations.checkpoint(conv)
    await settle(rt, conv)
    (run,) = await rt.runs.list(conv)
    assert run.trigger is StartKind.GOAL
    assert run.status is RunStatus.COMPLETED
    notice, answer = await rt.transcript(conv)
    assert (notice.role, notice.meta) == ("user", {"kind": "goal_checkpoint"})
    assert "tidy the garden" in notice.content
    assert (answer.role, answer.content) == ("assistant", "working on it")
    assert answer.run_id == run.run_id
    assert yielded(await rt.events(conv)) == []


async def test_c3_automatic_start_yields_when_tombstoned(runtimes: RuntimeFactory) -> None:
    model = ScriptedModel()
    rt = await runtimes(models=[model], config=FAST)
    conv = await new_conversation(rt)
    await rt.conversations.set_goal(conv, "active", "tidy the garden")
    await rt.conversations.tombstone(conv)
    # The conversation is gone for callers; a checkpoint timer and a late signal still fire.
    (signal,) = await publish(rt, conv, ("task.exited", {"exit_code": 0}))
    rt.coordinator.request(conv, StartKind.GOAL)
    await settle(rt, conv)
    assert model.calls == 0
    assert await raw_run_count(rt, conv) == 0
    journal = await raw_events(rt, conv)
    assert ("turn_yielded", {"start": "goal", "reason": "deleted"}) in journal
    assert {d["reason"] for t, d in journal if t == "turn_yielded"} == {"deleted"}
    assert await delivery_state(rt, signal) == ("ready", 0)


# -- C4 ------------------------------------------------------------------------------------------


async def test_c4_duplicate_wakeups_coalesce_and_stale_wakeup_starts_nothing(
    runtimes: RuntimeFactory,
) -> None:
    model = ScriptedModel(rules=[Rule(when={"suffix_contains": "runtime_facts"},
                                      reply={"text": "noted"})])
    rt = await runtimes(models=[model], config=FAST)
    conv = await new_conversation(rt)

    # A wake-up with no signal behind it is stale: it starts nothing, and says so.
    rt.coordinator.request(conv, StartKind.WAKE)
    await settle(rt, conv)
    assert await rt.runs.list(conv) == []
    assert yielded(await rt.events(conv)) == [{"start": "wake", "reason": "nothing_to_do"}]

    # One signal, a storm of wake-ups: one turn.
    (signal,) = await publish(rt, conv, ("task.exited", {"exit_code": 0}))
    for _ in range(50):
        rt.coordinator.request(conv, StartKind.WAKE, record=False)
    await settle(rt, conv)
    (run,) = await rt.runs.list(conv)
    assert run.trigger is StartKind.WAKE
    assert run.status is RunStatus.COMPLETED
    assert model.calls == 1
    assert await delivery_state(rt, signal) == ("acknowledged", 1)

    # Once consumed, more wake-ups for it are stale too.
    for _ in range(5):
        rt.coordinator.request(conv, StartKind.WAKE)
    await settle(rt, conv)
    assert len(await rt.runs.list(conv)) == 1
    assert model.calls == 1
    assert rt.coordinator.turns_started == 1


class SettleProbe:
    """Counts the settle's own reads, and can hold a turn's units after they committed."""

    def __init__(self, rt: Runtime) -> None:
        self.reads = 0
        self.hold_after_commit = False
        self.committed = asyncio.Event()
        self.release = asyncio.Event()
        self.relaying: asyncio.Future[None] | None = None
        store_read = rt.store.read

        async def read(unit: Any) -> Any:
            if "Coordinator.idle" in getattr(unit, "__qualname__", ""):
                self.reads += 1
            return await store_read(unit)

        store_submit = rt.store.submit

        def submit(
            unit: Any, *, route: str | None = None, durable: bool = True
        ) -> asyncio.Future[Any]:
            inner = store_submit(unit, route=route, durable=durable)
            if not (self.hold_after_commit and "TurnWriter.commit" in unit.__qualname__):
                return inner
            self.hold_after_commit = False
            outer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

            async def relay() -> None:
                try:
                    result = await inner
                except BaseException as exc:
                    outer.set_exception(exc)
                    return
                self.committed.set()
                await reached(self.release)
                outer.set_result(result)

            self.relaying = asyncio.ensure_future(relay())
            return outer

        setattr(rt.store, "read", read)  # noqa: B010 -- this runtime only
        setattr(rt.store, "submit", submit)  # noqa: B010


async def test_c4_a_settle_begun_before_the_turns_end_takes_its_last_units_word(
    runtimes: RuntimeFactory,
) -> None:
    """The turn's last unit read under the lock that nothing waits, after the settle began:
    that read is the settle's, and none follows it."""
    gate = Gate()
    rt = await runtimes(models=[ScriptedModel(rules=list(GATE_RULES))], tools=[gate.tool()],
                        config=FAST)
    conv = await new_conversation(rt, Profile(model="scripted", tools=("gate",)))
    probe = SettleProbe(rt)
    await rt.post(conv, "hello")
    await settle(rt, conv)
    assert probe.reads == 0
    assert len(await rt.runs.list(conv)) == 1

    # Work committed while the turn runs, by a writer that tells this coordinator nothing
    # (another process's door): the turn's last unit finds it, and the settle waits for it.
    await rt.post(conv, "block")
    await reached(gate.entered)
    runs = await _settle_over_a_post_from_elsewhere(rt, conv, gate.release)
    assert len(runs) == 3
    assert all(r.status is RunStatus.COMPLETED for r in runs)
    assert (await rt.inputs.list(conv))[-1].state is InputState.MATERIALIZED
    assert probe.reads == 0


async def _settle_over_a_post_from_elsewhere(
    rt: Runtime, conv: str, release: asyncio.Event
) -> list[Run]:
    """Another process's door posts (no wake-up here) while the turn is held; a settle begins,
    then the turn is let go: the settle returns once the conversation is settled."""
    await rt.door.post(conv, "from elsewhere")
    settling = asyncio.create_task(settle(rt, conv))
    await asyncio.sleep(0.01)
    release.set()
    await settling
    return await rt.runs.list(conv)


async def test_c4_a_settle_begun_after_the_last_unit_read_reads_again(
    runtimes: RuntimeFactory,
) -> None:
    """Work committed after the turn's last unit read, and before the settle began, is not
    covered by that read: the settle reads for itself and waits for the turn it starts."""
    rt = await runtimes(models=[ScriptedModel()], config=FAST)
    conv = await new_conversation(rt)
    probe = SettleProbe(rt)
    probe.hold_after_commit = True
    await rt.post(conv, "first")
    await reached(probe.committed)  # the turn's end is durable; its driver has not seen it
    runs = await _settle_over_a_post_from_elsewhere(rt, conv, probe.release)
    assert len(runs) == 2
    assert all(r.status is RunStatus.COMPLETED for r in runs)
    assert all(i.state is InputState.MATERIALIZED for i in await rt.inputs.list(conv))
    assert probe.reads >= 1


# -- C5 ------------------------------------------------------------------------------------------


async def test_c5_hanging_model_delays_no_other_conversation(runtimes: RuntimeFactory) -> None:
    hang = Recording(ScriptedModel(name="hang", default={"delay_seconds": 60, "text": "late"}))
    fast = ScriptedModel(name="fast")
    rt = await runtimes(models=[hang, fast], config=FAST)
    stuck = await new_conversation(rt, Profile(model="hang"))
    other = await new_conversation(rt, Profile(model="fast"))
    await rt.post(stuck, "are you there?")
    await reached(hang.called)

    for n in range(3):
        await rt.post(other, f"quick {n}")
        await settle(rt, other)
    runs = await rt.runs.list(other)
    assert [r.status for r in runs] == [RunStatus.COMPLETED] * 3
    assert [m.content for m in await rt.transcript(other) if m.role == "assistant"] == [
        "quick 0", "quick 1", "quick 2"
    ]
    # ...while the other conversation's turn is still waiting for its model.
    assert rt.coordinator.active(stuck)
    (waiting,) = await rt.runs.list(stuck)
    assert waiting.status is RunStatus.RUNNING

    assert await rt.stop(stuck) == [waiting.run_id]
    await settle(rt, stuck)
    assert (await rt.runs.get(waiting.run_id)).status is RunStatus.STOPPED


PACED = RuntimeConfig(turns=TurnConfig(retry_base=timedelta(0)),
                      coordinator=CoordinatorConfig(turn_start_budget=timedelta(0)))
"""Every turn but the first of a pass of the loop waits for a later pass."""


async def test_c5_turns_that_start_together_all_run_when_paced(runtimes: RuntimeFactory) -> None:
    model = ScriptedModel()
    rt = await runtimes(models=[model], config=PACED)
    convs = [await new_conversation(rt) for _ in range(30)]
    for round_ in range(2):
        await asyncio.gather(*(rt.post(c, f"hello {n}.{round_}") for n, c in enumerate(convs)))
        for conv in convs:
            await settle(rt, conv)
    for n, conv in enumerate(convs):
        runs = await rt.runs.list(conv)
        assert [r.status for r in runs] == [RunStatus.COMPLETED] * 2
        assert [m.content for m in await rt.transcript(conv) if m.role == "assistant"] == [
            f"hello {n}.0", f"hello {n}.1"]
    assert model.calls == 60


async def test_c5_closing_while_paced_turns_wait_ends_each_run_and_warns_of_nothing(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """Closing the moment thirty turns have begun (as the posts return, most of them are still
    waiting for their pass): a turn that has not started ends as stopped by the shutdown, as
    one that has; none is left running for the next process to recover, and no slot is
    reported lost."""
    caplog.set_level("WARNING", logger="tidings")
    async with Runtime.open(backend.url, models=[ScriptedModel()], config=PACED) as rt:
        convs = [await new_conversation(rt) for _ in range(30)]
        await asyncio.gather(*(rt.post(c, f"hello {n}") for n, c in enumerate(convs)))
    async with Runtime.open(backend.url, models=[ScriptedModel()], config=FAST) as rt:
        statuses = []
        for conv in convs:
            await settle(rt, conv)
            statuses += [(r.status, r.failure_code) for r in await rt.runs.list(conv)]
    assert len(statuses) == 30
    assert set(statuses) <= {(RunStatus.COMPLETED, None), (RunStatus.STOPPED, "shutdown")}
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == []


# -- C6 ------------------------------------------------------------------------------------------


async def test_c6_stop_suppresses_continuation_person_lifts_compact_keeps(
    runtimes: RuntimeFactory,
) -> None:
    gate = Gate()
    model = Recording(ScriptedModel(rules=GATE_RULES))
    rt = await runtimes(models=[model], tools=[gate.tool()], config=FAST)
    conv = await new_conversation(rt, Profile(model="scripted", tools=("gate",)))
    await rt.conversations.set_goal(conv, "active", "tidy the garden")
    await rt.post(conv, "block")
    await reached(gate.entered)

    (stopped,) = await rt.stop(conv)
    await settle(rt, conv)
    run = await rt.runs.get(stopped)
    assert (run.status, run.failure_code) == (RunStatus.STOPPED, "stopped")
    assert gate.cancelled
    assert (await rt.conversation(conv)).suppressed
    calls = len(model.requests)

    # Suppressed: a new signal, an explicit wake-up, a goal checkpoint and the sweep start
    # nothing.
    (signal,) = await publish(rt, conv, ("task.exited", {"exit_code": 0}))
    await settle(rt, conv)
    rt.coordinator.request(conv, StartKind.WAKE)
    await rt.conversations.checkpoint(conv)
    await settle(rt, conv)
    assert await rt.coordinator.sweep() == 0
    await settle(rt, conv)
    assert len(await rt.runs.list(conv)) == 1
    assert len(model.requests) == calls
    reasons = yielded(await rt.events(conv))
    assert {"start": "wake", "reason": "suppressed"} in reasons
    assert {"start": "goal", "reason": "suppressed"} in reasons
    assert await delivery_state(rt, signal) == ("ready", 0)

    # A maintenance compaction keeps the suppression.
    await rt.conversations.compact(conv)
    assert (await rt.conversation(conv)).suppressed
    assert len(await rt.runs.list(conv)) == 1

    # A person's word lifts it, and their turn runs (and takes the waiting signal).
    said = await rt.post(conv, "carry on")
    await settle(rt, conv)
    assert not (await rt.conversation(conv)).suppressed
    runs = await rt.runs.list(conv)
    assert [(r.trigger, r.status) for r in runs[1:]] == [
        (StartKind.PERSON, RunStatus.COMPLETED)
    ]
    events = await rt.events(conv)
    assert [e.data for e in events if e.type == "continuation_resumed"] == [
        {"input_id": said.input_id}
    ]
    assert await delivery_state(rt, signal) == ("acknowledged", 1)


async def test_c6_stop_with_no_turn_running_still_suppresses(runtimes: RuntimeFactory) -> None:
    model = ScriptedModel()
    rt = await runtimes(models=[model], config=FAST)
    conv = await new_conversation(rt)
    assert await rt.stop(conv) == []
    assert (await rt.conversation(conv)).suppressed
    (signal,) = await publish(rt, conv, ("task.exited", {"exit_code": 0}))
    await settle(rt, conv)
    assert await rt.runs.list(conv) == []
    assert model.calls == 0
    assert rt.coordinator.yields == {"suppressed": 1}
    assert await delivery_state(rt, signal) == ("ready", 0)
    assert [e.data for e in await rt.events(conv) if e.type == "stop_requested"] == [{"runs": []}]


@contextlib.asynccontextmanager
async def writer_held(rt: Runtime, conversation_id: str) -> AsyncIterator[None]:
    """Hold the conversation's writer while inside: units submitted meanwhile queue behind it
    and commit as one group once it lets go, their callers answered in submission order.
    SQLite's units run on the loop, so another connection holds its write lock; PostgreSQL's
    writer thread is held by a unit that waits."""
    if isinstance(rt.store, SqliteStore):
        holder = sqlite3.connect(rt.store.path, isolation_level=None, timeout=0)
        holder.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        return
    inside, hold = threading.Event(), threading.Event()

    def busy(tx: Tx) -> None:
        inside.set()
        hold.wait(WAIT)

    holding = asyncio.create_task(rt.store.transact(busy, route=conversation_id))
    await asyncio.to_thread(inside.wait, WAIT)
    try:
        yield
    finally:
        hold.set()
        await holding


async def test_c6_stop_just_as_a_turn_begins_stops_that_turn(runtimes: RuntimeFactory) -> None:
    # The answer takes a while: should the two units below commit apart (a slow machine splits
    # the queued units over two passes), the turn is still running when the stop reaches it,
    # rather than already answered -- a stop that came too late is not what this is about.
    slow = ScriptedModel(default={"text": "too late", "delay_seconds": 30.0})
    rt = await runtimes(models=[slow], config=FAST)
    conv = await new_conversation(rt)
    await rt.door.post(conv, "hello")  # queued; no turn asked for yet
    # The turn's slot-taking unit and the stop's unit commit as one group: both callers resume
    # in the same loop pass.
    async with writer_held(rt, conv):
        rt.coordinator.request(conv, StartKind.PERSON)
        await asyncio.sleep(0)  # the driver submits its slot-taking unit
        stopping = asyncio.create_task(rt.stop(conv))
        await asyncio.sleep(0)  # the stop submits its unit behind it
    stopped = await stopping
    if len(stopped) != 1:
        pytest.fail(f"precondition: the stop should find the new run, found {stopped}")
    await settle(rt, conv)

    run = await rt.runs.get(stopped[0])
    slot = await rt.store.read(lambda tx: tx.one("get_conversation", conversation_id=conv))
    assert slot is not None
    assert (run.status, run.failure_code, slot["slot_token"]) == (
        RunStatus.STOPPED, "stopped", None
    )


async def test_c6_a_stop_committed_with_the_answer_leaves_the_run_completed_and_warns_of_nothing(
    runtimes: RuntimeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A person's stop and the turn's answer commit together (the stop's unit first): the stop
    reaches a turn whose end has committed. The answer stands, the slot is free, and the log
    does not report a lost slot that nobody lost."""
    caplog.set_level("WARNING", logger="tidings")
    model = Stalling(ScriptedModel(default={"text": "the answer"}), when=lambda _: True)
    rt = await runtimes(models=[model], config=FAST)
    conv = await new_conversation(rt)
    await rt.post(conv, "hello")
    await reached(model.stalled)
    # The stop's unit, then the turn's last unit, commit as one group, their callers answered
    # in that order.
    async with writer_held(rt, conv):
        stopping = asyncio.create_task(rt.stop(conv))
        await asyncio.sleep(0)  # the stop submits its unit
        model.resume.set()
        for _ in range(20):  # the model answers; the turn's last unit queues behind the stop's
            await asyncio.sleep(0)
    stopped = await stopping
    await settle(rt, conv)

    runs = await rt.runs.list(conv)
    if stopped != [runs[0].run_id]:  # the stop's unit found the run still running
        pytest.fail(f"precondition: the stop's unit should commit before the turn's end "
                    f"(stopped {stopped})")
    slot = await rt.store.read(lambda tx: tx.one("get_conversation", conversation_id=conv))
    assert slot is not None
    assert [(r.status, r.failure_code) for r in runs] == [(RunStatus.COMPLETED, None)]
    assert slot["slot_token"] is None
    assert (await rt.transcript(conv))[-1].content == "the answer"
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


# -- C7 ------------------------------------------------------------------------------------------


async def test_c7_compaction_refused_while_turn_active_or_start_queued(
    runtimes: RuntimeFactory,
) -> None:
    gate = Gate()
    model = Recording(ScriptedModel(rules=[
        *GATE_RULES,
        Rule(when={"meta_kind": "compaction"}, reply={"text": "SUMMARY: one, two, a gate"}),
        Rule(when={"meta_kind": "goal_checkpoint"}, reply={"text": "on it"}),
    ]))
    rt = await runtimes(models=[model], tools=[gate.tool()], config=FAST)
    conv = await new_conversation(rt, Profile(model="scripted", tools=("gate",)))
    for text in ("one", "two"):
        await rt.post(conv, text)
        await settle(rt, conv)

    # A turn is active.
    await rt.post(conv, "block")
    await reached(gate.entered)
    with pytest.raises(CompactionRefusedError) as refused:
        await rt.conversations.compact(conv)
    assert refused.value.code == "compaction_refused"
    assert refused.value.reason == "a turn is active"
    gate.release.set()
    await settle(rt, conv)

    # A start is queued in this process (a goal checkpoint asked for, not begun yet).
    await rt.conversations.set_goal(conv, "active", "three")
    rt.coordinator.request(conv, StartKind.GOAL)
    with pytest.raises(CompactionRefusedError) as refused:
        await rt.conversations.compact(conv)
    assert refused.value.reason == "a start is queued"
    await settle(rt, conv)
    await rt.conversations.set_goal(conv, "done")

    # A start is queued in the database (an input no coordinator here has seen).
    await rt.door.post(conv, "four")  # admitted without asking for a turn
    with pytest.raises(CompactionRefusedError) as refused:
        await rt.conversations.compact(conv)
    assert refused.value.reason == "a start is queued"
    rt.coordinator.request(conv, StartKind.PERSON)
    await settle(rt, conv)
    assert [r.trigger for r in await rt.runs.list(conv)][-2:] == [StartKind.GOAL, StartKind.PERSON]

    before = await rt.transcript(conv)
    assert not [m for m in before if m.meta.get("kind") == "compaction_summary"]
    assert not [e for e in await rt.events(conv) if e.type == "context_compacted"]
    seq = await rt.conversations.compact(conv)

    summary = (await rt.transcript(conv, after_seq=seq - 1))[0]
    assert summary.seq == seq == before[-1].seq + 1
    assert (summary.role, summary.content) == ("user", "SUMMARY: one, two, a gate")
    assert summary.meta["kind"] == "compaction_summary"
    compacted = [e.data for e in await rt.events(conv) if e.type == "context_compacted"]
    assert compacted == [{"message_seq": seq, "summarized_messages": len(before)}]
    summarizing = model.requests[-1]
    assert [m.content for m in summarizing.messages[:-1]] == [m.content for m in before]

    await rt.post(conv, "five")
    await settle(rt, conv)
    request = model.requests[-1]
    assert [(m.role, m.content) for m in request.messages] == [
        ("user", "SUMMARY: one, two, a gate"), ("user", "five")
    ]
    assert request.messages[0].meta["kind"] == "compaction_summary"


# -- C8 ------------------------------------------------------------------------------------------


async def test_c8_retries_exhausted_wait_for_person(runtimes: RuntimeFactory) -> None:
    model = Recording(ScriptedModel(rules=[
        Rule(when={"text_equals": "first"}, reply={"error": "retryable"}),
    ]))
    rt = await runtimes(
        models=[model],
        config=RuntimeConfig(turns=TurnConfig(model_attempts=3, retry_base=timedelta(0))),
    )
    conv = await new_conversation(rt)
    await rt.conversations.set_goal(conv, "active", "tidy the garden")
    await rt.post(conv, "first")
    await settle(rt, conv)

    (failed,) = await rt.runs.list(conv)
    assert (failed.status, failed.failure_code) == (
        RunStatus.NEEDS_ATTENTION, "model_retries_exhausted"
    )
    assert len(model.requests) == 3
    assert (await rt.conversation(conv)).awaiting_person
    transcript = await rt.transcript(conv)
    assert [(m.role, m.content) for m in transcript] == [("user", "first")]  # read, unanswered
    finished = [e.data for e in await rt.events(conv)
                if e.type == "turn_status" and e.data["status"] == "needs_attention"]
    assert [[e["attempt"] for e in f["errors"]] for f in finished] == [[1, 2, 3]]

    # Automatic advancement waits: a signal's wake-up, a checkpoint and the sweep yield.
    (signal,) = await publish(rt, conv, ("task.exited", {"exit_code": 0}))
    await settle(rt, conv)
    assert rt.coordinator.yields.get("awaiting_person", 0) >= 1
    rt.coordinator.request(conv, StartKind.WAKE)
    await rt.conversations.checkpoint(conv)
    await settle(rt, conv)
    assert await rt.coordinator.sweep() == 0
    await settle(rt, conv)
    assert len(await rt.runs.list(conv)) == 1
    assert len(model.requests) == 3
    reasons = yielded(await rt.events(conv))
    assert {"start": "wake", "reason": "awaiting_person"} in reasons
    assert {"start": "goal", "reason": "awaiting_person"} in reasons
    assert await delivery_state(rt, signal) == ("ready", 0)

    # A person writes: the conversation runs again.
    await rt.post(conv, "second")
    await settle(rt, conv)
    assert not (await rt.conversation(conv)).awaiting_person
    runs = await rt.runs.list(conv)
    assert [(r.trigger, r.status) for r in runs[1:]] == [
        (StartKind.PERSON, RunStatus.COMPLETED)
    ]
    assert [(m.role, m.content) for m in await rt.transcript(conv, after_seq=1)] == [
        ("user", "second"), ("assistant", "second")
    ]
    assert await delivery_state(rt, signal) == ("acknowledged", 1)


# -- C9 ------------------------------------------------------------------------------------------


async def test_c9_expired_slot_recovered_and_open_call_answered_outcome_unknown(
    runtimes: RuntimeFactory, clock: ManualClock
) -> None:
    gate = Gate()
    profile = Profile(model="scripted", tools=("gate",))
    first = await runtimes(
        models=[ScriptedModel(rules=GATE_RULES)], tools=[gate.tool()], clock=clock, config=FAST
    )
    conv = await new_conversation(first, profile)
    await first.post(conv, "block")
    await reached(gate.entered)
    (held,) = await first.runs.list(conv)

    # A second process on the same database. The first one stalls (its tool never returns and
    # it never extends its slot) until the slot's lease expires.
    backup_gate = Gate()
    second = await runtimes(
        models=[ScriptedModel()], tools=[backup_gate.tool()], clock=clock, config=FAST
    )
    assert await second.coordinator.sweep() == 0  # the slot is held and not expired yet
    clock.advance(TurnConfig().slot_ttl + timedelta(seconds=1))
    assert await second.coordinator.sweep() == 1
    await settle(second, conv)

    call, result = (await second.transcript(conv))[1:]
    (opened,) = call.tool_calls
    assert (result.role, result.tool_call_id, result.tool_name) == (
        "tool", opened["call_id"], "gate"
    )
    assert result.meta["status"] == "outcome_unknown"
    interrupted = await second.runs.get(held.run_id)
    assert (interrupted.status, interrupted.failure_code) == (RunStatus.FAILED, "interrupted")
    assert first.coordinator.active(conv)  # the first process still believes it runs

    # The first process wakes up: its tool returns, but its writes are fenced off.
    seen = await second.transcript(conv)
    gate.release.set()
    await settle(first, conv)
    assert gate.returned
    assert await second.transcript(conv) == seen
    assert await second.runs.get(held.run_id) == interrupted
    assert not first.coordinator.active(conv)

    # The conversation goes on in the second process; the interrupted tool is never re-run.
    await second.post(conv, "after")
    await settle(second, conv)
    runs = await second.runs.list(conv)
    assert [(r.trigger, r.status) for r in runs] == [
        (StartKind.PERSON, RunStatus.FAILED), (StartKind.PERSON, RunStatus.COMPLETED)
    ]
    assert (gate.calls, backup_gate.calls) == (1, 0)
    assert [(m.role, m.content) for m in (await second.transcript(conv))[-2:]] == [
        ("user", "after"), ("assistant", "after")
    ]


async def test_c9_a_turn_that_lost_its_slot_writes_nothing_and_runs_no_more_tools(
    runtimes: RuntimeFactory, clock: ManualClock
) -> None:
    quick, probe = Counting("quick"), Counting("probe")
    model = Stalling(ScriptedModel(rules=[
        Rule(when={"text_equals": "go"},
             reply={"tool_calls": [{"name": "quick", "arguments": {}}]}),
        Rule(when={"tool_result": "quick"},
             reply={"tool_calls": [{"name": "probe", "arguments": {}}]}),
        Rule(when={"tool_result": "probe"}, reply={"text": "all done"}),
    ]))
    first = await runtimes(
        models=[model], tools=[quick.tool(), probe.tool()], clock=clock, config=FAST
    )
    conv = await new_conversation(first, Profile(model="scripted", tools=("quick", "probe")))
    await first.post(conv, "go")
    await reached(model.stalled)  # step 1 is committed; step 2's model call stalls
    (held,) = await first.runs.list(conv)

    second = await runtimes(models=[ScriptedModel()], clock=clock, config=FAST)
    clock.advance(TurnConfig().slot_ttl + timedelta(seconds=1))
    assert await second.coordinator.sweep() == 1
    await settle(second, conv)
    seen = await second.transcript(conv)
    assert [(m.role, m.tool_name) for m in seen] == [
        ("user", None), ("assistant", None), ("tool", "quick")
    ]
    assert (await second.runs.get(held.run_id)).failure_code == "interrupted"

    # The stalled model now asks for another tool: the first process may not write the call,
    # so the tool never runs.
    model.resume.set()
    await settle(first, conv)
    assert (quick.calls, probe.calls) == (1, 0)
    assert await second.transcript(conv) == seen
    ended = await second.runs.get(held.run_id)
    assert (ended.status, ended.failure_code) == (RunStatus.FAILED, "interrupted")


async def test_c9_stop_reaches_a_turn_running_in_another_process(
    runtimes: RuntimeFactory,
) -> None:
    # A short slot: the holder renews it (and reads stop requests) every third of it.
    config = RuntimeConfig(
        turns=TurnConfig(retry_base=timedelta(0), slot_ttl=timedelta(milliseconds=1500))
    )
    gate = Gate()
    first = await runtimes(
        models=[ScriptedModel(rules=GATE_RULES)], tools=[gate.tool()], config=config
    )
    conv = await new_conversation(first, Profile(model="scripted", tools=("gate",)))
    await first.post(conv, "block")
    await reached(gate.entered)
    second = await runtimes(models=[ScriptedModel()], config=config)

    (stopped,) = await second.stop(conv)
    assert not second.coordinator.active(conv)
    await settle(first, conv)
    assert gate.cancelled
    run = await second.runs.get(stopped)
    assert (run.status, run.failure_code) == (RunStatus.STOPPED, "stopped")
    result = (await second.transcript(conv))[-1]
    assert (result.role, result.meta["status"]) == ("tool", "cancelled")
    assert (await second.conversation(conv)).suppressed
