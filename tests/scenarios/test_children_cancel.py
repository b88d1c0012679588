"""M14 and M16 cancels: a cancel owes nothing below the canceller -- the child turn answering a
cancelled request is stopped, its own requests are cancelled, a grandchild's reply never wakes
the cancelled child -- while the canceller is told what it cancelled. Stopping a source stops
its supplementary reply that has started."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.conftest import RuntimeFactory
from tests.scenarios.test_tasks import wait_for_runs
from tests.waiting import eventually
from tidings.errors import UnknownTaskError
from tidings.models.scripted import Rule, ScriptedModel
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.tools.registry import ToolContext, ToolOutput
from tidings.types import ConversationId, Origin, Profile, RunId, RunStatus, StartKind

MODEL = ScriptedModel(
    rules=[
        Rule({"text_contains": "<task_result"}, {"text": "Read the report.", "delay_seconds": 3}),
        Rule({"tool_result": "spawn"}, {"text": "Delegated."}),
        Rule({"text_contains": "delegate deeper"},
             {"tool_calls": [{"name": "spawn", "arguments": {
                 "brief": "count slowly", "lifetime": "turn"}}]}),
        Rule({"text_contains": "please delegate"},
             {"tool_calls": [{"name": "spawn", "arguments": {"brief": "delegate deeper"}}]}),
        Rule({"text_contains": "please ask"},
             {"tool_calls": [{"name": "spawn", "arguments": {"brief": "count to three"}}]}),
        Rule({"text_contains": "count to three"}, {"text": "one two three"}),
        Rule({"text_contains": "count slowly"}, {"text": "one... two", "delay_seconds": 30}),
    ],
    default={"text": "ok"},
)
PROFILE = Profile(model="scripted", tools=("spawn", "send", "cancel"))


async def until_a_run(rt: Runtime, conversation: str, status: RunStatus) -> None:
    """Until some run of the conversation has ``status``."""
    await eventually(lambda: rt.runs.list(conversation),
                     lambda runs: any(r.status is status for r in runs),
                     what=f"a {status.value} run in {conversation}")


async def test_m16_a_cancel_cascades_and_the_canceller_is_told_what_it_cancelled(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtimes(models=[MODEL])
    parent = (await rt.create_conversation("alice", PROFILE)).conversation_id
    await rt.post(parent, "please delegate")
    await wait_for_runs(rt, parent, 1)
    (request,) = await rt.relay.requests_of(parent)
    child = request.child_conversation_id
    await until_a_run(rt, child, RunStatus.RUNNING)  # the child waits on its grandchild
    for _ in range(400):
        if await rt.relay.requests_of(child):
            break
        await asyncio.sleep(0.05)
    (deeper,) = await rt.relay.requests_of(child)
    grandchild = deeper.child_conversation_id
    await until_a_run(rt, grandchild, RunStatus.RUNNING)

    (run,) = await rt.runs.list(parent)
    cancel = rt.tools.get("cancel")
    assert cancel is not None
    told = await cancel.handler(
        ToolContext(ConversationId(parent), RunId(run.run_id), "call-c"),
        {"task_key": request.task_key},
    )
    assert isinstance(told, ToolOutput)
    cancelled = json.loads(told.content)["cancelled"]
    assert cancelled == [  # the canceller is told, down the tree
        {"task_key": request.task_key, "conversation": child},
        {"task_key": deeper.task_key, "conversation": grandchild},
    ]
    await until_a_run(rt, child, RunStatus.STOPPED)
    await until_a_run(rt, grandchild, RunStatus.STOPPED)
    await rt.relay.relay_pending()
    await rt.settle(child)
    await rt.settle(parent)
    # The grandchild's cancelled reply never wakes the cancelled child; nothing reaches the
    # parent.
    assert [r.trigger for r in await rt.runs.list(child)] == [StartKind.AGENT]
    assert [i for i in await rt.inputs.list(child) if i.origin is Origin.CHILD] == []
    assert [i for i in await rt.inputs.list(parent) if i.origin is Origin.CHILD] == []
    assert [r.state for r in await rt.relay.requests_of(child)] == ["cancelled"]
    assert [r.state for r in await rt.relay.requests_of(parent)] == ["cancelled"]
    # Cancelling again: nothing is owed any more, and the canceller is told so.
    assert await rt.children.cancel(parent, request.task_key) == []
    with pytest.raises(UnknownTaskError):
        await rt.children.cancel(parent, "child-00000000")


async def test_m16_a_cancelled_request_not_yet_read_is_withdrawn(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtimes(models=[MODEL])
    parent = (await rt.create_conversation("alice", PROFILE)).conversation_id
    await rt.post(parent, "hello")
    await wait_for_runs(rt, parent, 1)
    (run,) = await rt.runs.list(parent)
    busy = await rt.relay.spawn(parent, run.run_id, "call-1", "count slowly")
    child = busy.child_conversation_id
    await until_a_run(rt, child, RunStatus.RUNNING)  # busy with the brief
    queued = await rt.relay.send(parent, child, run.run_id, "call-2", "count to three")
    (cancelled,) = await rt.children.cancel(parent, queued.task_key)
    assert cancelled.task_key == queued.task_key
    brief = next(i for i in await rt.inputs.list(child) if i.input_id == queued.input_id)
    assert brief.state.value == "cancelled"  # withdrawn from the queue: never read
    # The turn busy with the brief is not the cancelled request's: it runs on.
    assert [r.status for r in await rt.runs.list(child)] == [RunStatus.RUNNING]
    assert [r.state for r in await rt.relay.requests_of(parent)] == ["open", "cancelled"]


async def test_m14_stopping_a_source_stops_its_supplementary_reply_that_started(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtimes(models=[MODEL])
    parent = (await rt.create_conversation("alice", PROFILE)).conversation_id
    await rt.post(parent, "please ask")
    # The child answers; the parent's mail turn starts and reads slowly.
    for _ in range(400):
        runs = await rt.runs.list(parent)
        if len(runs) == 2 and runs[1].status is RunStatus.RUNNING:
            break
        await asyncio.sleep(0.05)
    (source, mail_run) = await rt.runs.list(parent)
    assert mail_run.trigger is StartKind.MAIL
    await rt.runs.stop(parent, source.run_id, owner="alice")
    await rt.settle(parent)
    (_, mail_run) = await rt.runs.list(parent)
    assert mail_run.status is RunStatus.STOPPED  # the started reply is not delivered
    assert (await rt.runs.get(source.run_id)).status is RunStatus.COMPLETED  # its answer remains
    assert "Read the report." not in [m.content for m in await rt.transcript(parent)]


async def test_m9_worker_finals_of_two_runs_share_a_combined_report_that_a_stop_keeps(
    runtimes: RuntimeFactory,
) -> None:
    # The relay runs when the test says: no kick, no sweep of its own.
    rt = await runtimes(models=[MODEL], config=RuntimeConfig(relay_kick=False, relay_sweep=None))
    parent = (await rt.create_conversation("alice", PROFILE)).conversation_id
    for words in ("hello", "hello again"):
        await rt.post(parent, words)
        await wait_for_runs(rt, parent, 1)
    await rt.settle(parent)
    first, second = await rt.runs.list(parent)
    requests = [await rt.relay.spawn(parent, run.run_id, f"call-{n}", "count to three")
                for n, run in enumerate((first, second))]
    assert await rt.relay.await_replies([r.request_id for r in requests], 20)
    assert await rt.relay.relay_pending() == 2  # in one unit: one mail turn reads both
    await until_a_run(rt, parent, RunStatus.RUNNING)
    (*_, combined) = await rt.runs.list(parent)
    assert combined.trigger is StartKind.MAIL
    # Stopping one source while the combined report is being written retracts nothing.
    await rt.runs.stop(parent, first.run_id, owner="alice")
    await wait_for_runs(rt, parent, 3)
    assert (await rt.runs.get(combined.run_id)).status is RunStatus.COMPLETED
    mails = [i for i in await rt.inputs.list(parent) if i.origin is Origin.CHILD]
    assert {m.run_id for m in mails} == {combined.run_id}  # both read by the one reply
    reply = (await rt.transcript(parent))[-1]
    assert reply.content == "Read the report."
    # Its singular sender fields are empty; callback_sources lists every source.
    assert reply.meta["sender_conversation_public_id"] is None
    assert reply.meta["run_public_id"] is None
    assert reply.meta["task_key"] is None
    sources = reply.meta["callback_sources"]
    assert [s["run_public_id"] for s in sources] == [first.run_id, second.run_id]
    assert [s["callback_result"] for s in sources] == [r.request_id for r in requests]
