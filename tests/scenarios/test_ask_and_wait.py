"""B2 through the runtime: ``post(..., wait=True)`` answers with the run that read the input --
the turn it started, the later turn it waited for in the queue, the running turn it steered --
that run's status and its reply, once the run ends or holds for a person; bounded by a timeout
that answers as things stand and never loses the input."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any

import pytest

from tests.conftest import RuntimeFactory, drop_postgres_database, fresh_postgres_database
from tests.waiting import eventually, wait_until
from tidings import Answer
from tidings.errors import InvalidInputError, UnknownConversationError
from tidings.models.base import DeltaCallback, ModelReply, ModelRequest
from tidings.models.scripted import Rule, ScriptedModel
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.tools.registry import Tool, ToolContext, ToolOutput
from tidings.types import Input, InputState, Profile, RunStatus

WAIT_S = 20.0  # a bound on waiting for what the test arranged; never asserted on

SCRIPT = ScriptedModel(
    rules=[
        Rule({"text_contains": "fail now"}, {"error": "permanent"}),
        Rule({"text_contains": "use the gate"},
             {"tool_calls": [{"name": "gate", "arguments": {}}]}),
        Rule({"tool_result": "gate"}, {"text": "Through the gate."}),
        Rule({"tool_result": "deploy"}, {"text": "Deployed."}),
        Rule({"text_contains": "deploy it"},
             {"tool_calls": [{"name": "deploy", "arguments": {"target": "prod"}}]}),
    ],
    default={"echo": True},
)
PROFILE = Profile(model="scripted", tools=("gate",))


class Held:
    """The script, except that a newest message saying "hold" waits until :attr:`gate` opens
    (the turn is running and has written nothing yet)."""

    name = "scripted"

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        newest = request.messages[-1] if request.messages else None
        if newest is not None and newest.role == "user" and "hold" in newest.content:
            self.entered.set()
            await self.gate.wait()
        return await SCRIPT.complete(request, on_delta=on_delta)


class Gate:
    """A tool that runs until the test opens it (the turn is between its call and result)."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.running = asyncio.Event()

    def tool(self) -> Tool:
        async def run(context: ToolContext, arguments: Mapping[str, Any]) -> ToolOutput:
            self.running.set()
            await self.open.wait()
            return ToolOutput("opened")

        return Tool("gate", "Wait at the gate.", run)


def deploy_tool() -> Tool:
    async def run(context: ToolContext, arguments: Mapping[str, Any]) -> ToolOutput:
        return ToolOutput("deployed")

    return Tool("deploy", "Deploy.", run)


async def within(event: asyncio.Event, what: str) -> None:
    try:
        await asyncio.wait_for(event.wait(), WAIT_S)
    except TimeoutError:
        raise AssertionError(f"not within {WAIT_S} s: {what}") from None


async def final_reply(rt: Runtime, conv: str, run_id: str) -> str:
    """The run's last assistant message without tool calls, from the transcript."""
    replies = [m.content for m in await rt.transcript(conv)
               if m.run_id == run_id and m.role == "assistant" and not m.tool_calls]
    return replies[-1]


async def test_b2_wait_returns_the_run_and_reply_of_a_simple_turn(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtimes(models=[SCRIPT], tools=[Gate().tool()])
    conv = (await rt.create_conversation("alice", PROFILE)).conversation_id

    answer = await rt.post(conv, "hello there", wait=True, timeout=WAIT_S)

    assert isinstance(answer, Answer)
    assert not answer.timed_out
    assert answer.status is RunStatus.COMPLETED
    assert answer.reply == "hello there"
    [run] = await rt.runs.list(conv)
    assert answer.run == run
    assert answer.input.state is InputState.MATERIALIZED
    assert answer.input.run_id == run.run_id
    assert answer.input.content == "hello there"
    assert await final_reply(rt, conv, run.run_id) == "hello there"
    # Without wait, post still returns the accepted input, unchanged.
    plain = await rt.post(conv, "again")
    assert isinstance(plain, Input)


async def test_b2_queued_behind_a_running_turn_resolves_to_the_later_run(
    runtimes: RuntimeFactory,
) -> None:
    model = Held()
    rt = await runtimes(models=[model], tools=[Gate().tool()])
    conv = (await rt.create_conversation("alice", PROFILE)).conversation_id
    first = await rt.post(conv, "hold this")
    await within(model.entered, "the first turn is running")

    second = asyncio.create_task(rt.post(conv, "and then this", wait=True, timeout=WAIT_S))
    await wait_until(lambda: rt.answers.waiting == 1, what="the second post is waiting")
    assert not second.done()  # its input waits in the queue: nothing has answered it
    model.gate.set()
    answer = await asyncio.wait_for(second, WAIT_S)

    read_first = (await rt.inputs.list(conv))[0]
    assert read_first.input_id == first.input_id
    assert read_first.run_id is not None
    assert answer.status is RunStatus.COMPLETED
    assert not answer.timed_out
    assert answer.run is not None
    assert answer.run.run_id != read_first.run_id  # a later run read it, not the running one
    assert answer.input.run_id == answer.run.run_id
    assert answer.reply == "and then this"
    assert [r.run_id for r in await rt.runs.list(conv)] == [read_first.run_id, answer.run.run_id]


async def test_b2_a_steer_resolves_to_the_running_run_that_read_it(
    runtimes: RuntimeFactory,
) -> None:
    gate = Gate()
    rt = await runtimes(models=[SCRIPT], tools=[gate.tool()])
    conv = (await rt.create_conversation("alice", PROFILE)).conversation_id
    first = await rt.post(conv, "use the gate")
    await within(gate.running, "the turn's tool is running")

    steer = asyncio.create_task(
        rt.post(conv, "also mind the step", delivery_mode="steer", wait=True, timeout=WAIT_S))
    await wait_until(lambda: rt.answers.waiting == 1, what="the steer is waiting")
    gate.open.set()
    answer = await asyncio.wait_for(steer, WAIT_S)

    [run] = await rt.runs.list(conv)  # the steer joined the running turn: no turn of its own
    assert answer.status is RunStatus.COMPLETED
    assert not answer.timed_out
    assert answer.run == run
    assert [i.run_id for i in await rt.inputs.list(conv)] == [run.run_id, run.run_id]
    assert (await rt.inputs.list(conv))[0].input_id == first.input_id
    # The run's reply came after the steer joined it, at the safe point after the tool.
    assert answer.reply == "also mind the step" == await final_reply(rt, conv, run.run_id)


async def test_b2_a_held_call_ends_the_wait_with_awaiting_approval(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtimes(models=[SCRIPT], tools=[deploy_tool()])
    profile = Profile(model="scripted", tools=("deploy",), approval_mode="writes")
    conv = (await rt.create_conversation("alice", profile)).conversation_id

    answer = await rt.post(conv, "deploy it", wait=True, timeout=WAIT_S, idempotency_key="d1")

    assert answer.status is RunStatus.AWAITING_APPROVAL
    assert not answer.timed_out
    assert answer.reply is None  # it has not answered yet: it waits for a person
    [approval] = await rt.approvals.list(conv, status="pending")
    assert answer.run is not None
    assert approval.run_id == answer.run.run_id
    assert answer.input.run_id == answer.run.run_id

    await rt.approvals.decide(conv, approval.approval_id, approve=True, decided_by="alice")
    # The same post again (same key) writes nothing and waits for the same input's answer.
    again = await rt.post(conv, "deploy it", wait=True, timeout=WAIT_S, idempotency_key="d1")
    assert again.input.input_id == answer.input.input_id
    assert again.status is RunStatus.COMPLETED
    assert again.run is not None
    assert again.run.run_id == answer.run.run_id
    assert again.reply == "Deployed."
    assert len(await rt.inputs.list(conv)) == 1


async def test_b2_a_failed_run_answers_failed_with_its_failure(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtimes(models=[SCRIPT], tools=[Gate().tool()])
    conv = (await rt.create_conversation("alice", PROFILE)).conversation_id

    answer = await rt.post(conv, "fail now", wait=True, timeout=WAIT_S)

    assert answer.status is RunStatus.FAILED
    assert not answer.timed_out
    assert answer.run is not None
    assert answer.run.failure_code == (await rt.runs.get(answer.run.run_id)).failure_code
    assert answer.run.failure_code  # the failure is named
    assert answer.reply is None
    assert answer.input.run_id == answer.run.run_id


async def test_b2_timeout_answers_as_it_stands_and_the_input_is_answered_afterwards(
    runtimes: RuntimeFactory,
) -> None:
    model = Held()
    rt = await runtimes(models=[model], tools=[Gate().tool()])
    conv = (await rt.create_conversation("alice", PROFILE)).conversation_id

    running = await rt.post(conv, "hold on", wait=True, timeout=0.2, idempotency_key="k1")
    queued = await rt.post(conv, "behind it", wait=True, timeout=0.2, idempotency_key="k2")

    # The first: its turn took it and is running (it writes the input at its first commit).
    assert running.timed_out
    assert running.status is RunStatus.RUNNING
    assert running.run is not None
    assert running.reply is None
    assert running.input.state is InputState.QUEUED
    assert [r.run_id for r in await rt.runs.list(conv)] == [running.run.run_id]
    # The second: it waits in the queue; no run has it yet.
    assert queued.timed_out
    assert queued.status is InputState.QUEUED
    assert queued.run is None
    assert queued.reply is None

    model.gate.set()
    first = await rt.post(conv, "hold on", wait=True, timeout=WAIT_S, idempotency_key="k1")
    second = await rt.post(conv, "behind it", wait=True, timeout=WAIT_S, idempotency_key="k2")
    assert first.input.input_id == running.input.input_id
    assert first.status is RunStatus.COMPLETED
    assert first.reply == "hold on"
    assert first.run is not None
    assert first.run.run_id == running.run.run_id
    assert second.input.input_id == queued.input.input_id
    assert second.status is RunStatus.COMPLETED
    assert second.reply == "behind it"
    assert second.run is not None
    assert second.run.run_id != first.run.run_id
    inputs = await rt.inputs.list(conv)
    assert [(i.content, i.state) for i in inputs] == [
        ("hold on", InputState.MATERIALIZED), ("behind it", InputState.MATERIALIZED)]


async def test_b2_an_input_withdrawn_unread_answers_cancelled(runtimes: RuntimeFactory) -> None:
    model = Held()
    rt = await runtimes(models=[model], tools=[Gate().tool()])
    parent = (await rt.create_conversation(
        "alice", Profile(model="scripted", tools=("spawn", "send", "cancel")))).conversation_id
    await rt.post(parent, "hello", wait=True, timeout=WAIT_S)
    [run] = await rt.runs.list(parent)
    busy = await rt.relay.spawn(parent, run.run_id, "call-1", "hold the line")
    child = busy.child_conversation_id
    await within(model.entered, "the child is busy with its brief")
    asked = await rt.relay.send(parent, child, run.run_id, "call-2", "count to three")
    [brief] = [i for i in await rt.inputs.list(child) if i.input_id == asked.input_id]
    waiting = asyncio.create_task(rt.answers.wait(brief, WAIT_S))
    await wait_until(lambda: rt.answers.waiting == 1, what="the wait on the request began")

    await rt.children.cancel(parent, asked.task_key)
    answer = await asyncio.wait_for(waiting, WAIT_S)

    assert answer.status is InputState.CANCELLED
    assert not answer.timed_out
    assert answer.run is None
    assert answer.reply is None
    model.gate.set()


async def test_b2_another_principal_cannot_wait_on_a_foreign_conversation(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtimes(models=[SCRIPT], tools=[Gate().tool()])
    conv = (await rt.create_conversation("alice", PROFILE)).conversation_id

    with pytest.raises(UnknownConversationError) as foreign:
        await rt.post(conv, "let me in", wait=True, timeout=WAIT_S, owner="bob")
    with pytest.raises(UnknownConversationError) as unknown:
        await rt.post("conv_nobody", "let me in", wait=True, timeout=WAIT_S, owner="bob")
    assert foreign.value.code == unknown.value.code == "unknown_conversation"
    assert await rt.inputs.list(conv) == []  # nothing was written


async def test_b2_a_bad_timeout_is_refused_before_anything_is_written(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtimes(models=[SCRIPT], tools=[Gate().tool()])
    conv = (await rt.create_conversation("alice", PROFILE)).conversation_id
    for bad in (-1.0, float("nan")):
        with pytest.raises(InvalidInputError):
            await rt.post(conv, "hello", wait=True, timeout=bad)
    assert await rt.inputs.list(conv) == []


async def test_b2_a_wait_wakes_when_this_process_commits_the_runs_end(
    runtimes: RuntimeFactory,
) -> None:
    """Its own poll, and its timeout, are an hour away: only the wake-up of the commit that
    ends the run can end the wait within the test's bound."""
    model = Held()
    rt = await runtimes(models=[model], tools=[Gate().tool()],
                        config=RuntimeConfig(answer_poll=timedelta(hours=1)))
    conv = (await rt.create_conversation("alice", PROFILE)).conversation_id
    waiting = asyncio.create_task(rt.post(conv, "hold it", wait=True, timeout=3600))
    await within(model.entered, "the turn is running")
    await wait_until(lambda: rt.answers.waiting == 1, what="the post is waiting")
    model.gate.set()
    answer = await asyncio.wait_for(waiting, WAIT_S)

    assert not answer.timed_out
    assert answer.status is RunStatus.COMPLETED
    assert answer.reply == "hold it"


async def test_b2_a_repeated_post_of_an_answered_input_answers_at_once(
    runtimes: RuntimeFactory,
) -> None:
    """The repeat commits nothing new: its wait must still look, and find the answer, at once
    (its poll is an hour away)."""
    rt = await runtimes(models=[SCRIPT], tools=[Gate().tool()],
                        config=RuntimeConfig(answer_poll=timedelta(hours=1)))
    conv = (await rt.create_conversation("alice", PROFILE)).conversation_id
    first = await rt.post(conv, "hello", wait=True, timeout=WAIT_S, idempotency_key="k")

    again = await asyncio.wait_for(
        rt.post(conv, "hello", wait=True, timeout=3600, idempotency_key="k"), WAIT_S)

    assert not again.timed_out
    assert again.status is RunStatus.COMPLETED
    assert again.reply == "hello"
    assert again.run == first.run


async def test_b2_a_wait_looks_when_the_conversation_changed_after_its_input_was_read(
    runtimes: RuntimeFactory,
) -> None:
    """A wait given the conversation's mark from before the run's end committed must read,
    not sleep on the queued input it was handed (its poll is an hour away)."""
    model = Held()
    rt = await runtimes(models=[model], tools=[Gate().tool()],
                        config=RuntimeConfig(answer_poll=timedelta(hours=1)))
    conv = (await rt.create_conversation("alice", PROFILE)).conversation_id
    item = await rt.post(conv, "hold it")
    await within(model.entered, "the turn is running")
    before = rt.store.wakeups.mark(conv)
    model.gate.set()
    await rt.settle(conv)
    assert rt.store.wakeups.mark(conv) != before  # the run's end committed here

    answer = await asyncio.wait_for(
        rt.answers.wait(item, timeout=3600, mark=before), WAIT_S)

    assert not answer.timed_out
    assert answer.status is RunStatus.COMPLETED
    assert answer.reply == "hold it"


async def test_b2_a_post_made_the_moment_its_answer_arrived_starts_its_turn_in_its_own_commit(
    runtimes: RuntimeFactory,
) -> None:
    """A caller that posts again as soon as it has its answer finds the last turn's driver
    still finishing: the input and the start of its turn still commit as one unit (their
    journal entries carry that unit's time), not the input alone and the start later."""
    rt = await runtimes(models=[SCRIPT], tools=[Gate().tool()])
    conv = (await rt.create_conversation("alice", PROFILE)).conversation_id
    for n in range(6):
        answer = await rt.post(conv, f"turn {n}", wait=True, timeout=WAIT_S)
        assert answer.reply == f"turn {n}"

    events = await rt.events(conv)
    starts = [(e, events[i + 1]) for i, e in enumerate(events) if e.type == "input_accepted"]
    assert len(starts) == 6
    for accepted, following in starts:
        assert (following.type, following.data.get("status")) == ("turn_status", "running")
        assert following.at_us == accepted.at_us  # written by the same unit


@pytest.fixture
def postgres_url(postgres_template: str) -> Iterator[str]:
    """A fresh PostgreSQL database: two runtimes share one only there (a cluster)."""
    url = fresh_postgres_database(postgres_template)
    try:
        yield url
    finally:
        drop_postgres_database(postgres_template, url)


@pytest.mark.postgres_only
async def test_b2_a_run_another_instance_executes_ends_the_wait(postgres_url: str) -> None:
    """The waiting runtime learns of the other instance's commits by polling only (its store's
    watchers hear only its own units)."""
    model = Held()
    async with contextlib.AsyncExitStack() as stack:
        executor = await stack.enter_async_context(Runtime.open(postgres_url, models=[model],
                                                                    tools=[Gate().tool()]))
        waiter = await stack.enter_async_context(Runtime.open(postgres_url, models=[SCRIPT],
                                                                  tools=[Gate().tool()]))
        conv = (await executor.create_conversation("alice", PROFILE)).conversation_id
        item = await executor.post(conv, "hold it there")  # the executor's turn takes it
        await within(model.entered, "the executor's turn is running")

        # Its timeout is an hour away: only a look of its own ends it within the test's bound.
        waiting = asyncio.create_task(waiter.answers.wait(item, 3600))
        seen = await eventually(lambda: waiter.answers.read(item),
                                lambda a: a.status is RunStatus.RUNNING,
                                what="the waiter sees the executor's run")
        await wait_until(lambda: waiter.answers.waiting == 1, what="the waiter is waiting")
        model.gate.set()
        answer = await asyncio.wait_for(waiting, WAIT_S)

    assert answer.status is RunStatus.COMPLETED
    assert not answer.timed_out
    assert answer.run is not None
    assert seen.run is not None
    assert answer.run.run_id == seen.run.run_id
    assert answer.reply == "hold it there"
