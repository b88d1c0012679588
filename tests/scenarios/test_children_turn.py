"""M16 for turn-owned spawns: the spawning run receives its child's first report before its
reply is final -- in the spawn's own result when it comes within the wait, else in a synthesis
round -- once, and it never also becomes mail. A report that outlives the drain is mail."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

from tests.conftest import RuntimeFactory
from tests.scenarios.test_tasks import wait_for_runs
from tidings.mail.child_requests import ChildRequest, consume_in_run
from tidings.models.scripted import Rule, ScriptedModel
from tidings.records.transcript import ConversationTx
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.tools.registry import ToolContext, ToolOutput
from tidings.turns.plan import TurnConfig
from tidings.types import ConversationId, Origin, Profile, RunId, RunStatus, StartKind

MODEL = ScriptedModel(
    rules=[
        Rule({"tool_result": "spawn", "text_contains": "<task_result"},
             {"text": "It answered at once."}),
        Rule({"tool_result": "wait"}, {"text": "The wait saw it."}),
        Rule({"text_contains": "<task_result"}, {"text": "Synthesized the child's report."}),
        Rule({"tool_result": "spawn"}, {"text": "Waiting for the child."}),
        Rule({"text_contains": "delegate within"},
             {"tool_calls": [{"name": "spawn", "arguments": {
                 "brief": "count to three", "lifetime": "turn"}}]}),
        Rule({"text_contains": "delegate and wait"},
             {"tool_calls": [{"name": "spawn", "arguments": {
                 "brief": "count to three", "wait_s": 30}}]}),
        Rule({"text_contains": "delegate slowly"},
             {"tool_calls": [{"name": "spawn", "arguments": {
                 "brief": "count slowly", "lifetime": "turn"}}]}),
        Rule({"text_contains": "count to three"}, {"text": "one two three"}),
        Rule({"text_contains": "count slowly"}, {"text": "one... two", "delay_seconds": 1.0}),
    ],
    default={"text": "ok"},
)
PROFILE = Profile(model="scripted", tools=("spawn", "send", "wait"))


async def delegated(rt: Runtime, words: str) -> str:
    parent = (await rt.create_conversation("alice", PROFILE)).conversation_id
    await rt.post(parent, words)
    await wait_for_runs(rt, parent, 1)
    return parent


async def no_mail_left(rt: Runtime, parent: str) -> None:
    """The relay finds nothing to send, and the parent ran no turn of mail."""
    await rt.relay.relay_pending()
    await rt.settle(parent)
    assert [i for i in await rt.inputs.list(parent) if i.origin is Origin.CHILD] == []
    assert [r.trigger for r in await rt.runs.list(parent)] == [StartKind.PERSON]


async def test_m16_a_turn_owned_spawn_settles_in_a_synthesis_round_not_as_mail(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtimes(models=[MODEL])
    parent = await delegated(rt, "please delegate within this turn")
    (run,) = await rt.runs.list(parent)
    assert run.status is RunStatus.COMPLETED
    tail = [(m.role, m.content) for m in (await rt.transcript(parent))[-3:]]
    assert tail[0] == ("assistant", "Waiting for the child.")  # the interim answer
    assert tail[1][0] == "user"
    assert tail[1][1].startswith("<task_result ")
    assert "one two three" in tail[1][1]
    assert tail[2] == ("assistant", "Synthesized the child's report.")  # the final reply
    (request,) = await rt.relay.requests_of(parent)
    assert request.owner_run == run.run_id
    assert request.consumed_in_run == run.run_id
    assert request.relayed
    events = await rt.events(parent)
    (accepted,) = [e for e in events if e.type == "input_accepted"
                   and e.data.get("origin") == "child"]
    assert "input_id" not in accepted.data  # in-run acceptance: not a new turn
    assert accepted.data["run_public_id"] == run.run_id
    assert accepted.data["task_key"] == request.task_key
    (status,) = [e for e in events if e.type == "task_status"]
    assert status.data["resolved_by"] == {
        "kind": "conversation", "public_id": request.child_conversation_id}
    await no_mail_left(rt, parent)


async def test_m16_a_spawn_that_waits_receives_the_first_report_in_its_result(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtimes(models=[MODEL])
    parent = await delegated(rt, "please delegate and wait")
    transcript = await rt.transcript(parent)
    (spawn_result,) = [m for m in transcript if m.role == "tool"]
    assert spawn_result.content.startswith("<task_result ")
    assert "one two three" in spawn_result.content
    assert transcript[-1].content == "It answered at once."
    # No synthesis round: the report was consumed with the spawn's result.
    assert [m.role for m in transcript] == ["user", "assistant", "tool", "assistant"]
    (request,) = await rt.relay.requests_of(parent)
    assert request.consumed_in_run == (await rt.runs.list(parent))[0].run_id
    await no_mail_left(rt, parent)


async def test_m16_a_report_that_outlives_the_drain_comes_back_as_mail_once(
    runtimes: RuntimeFactory,
) -> None:
    config = RuntimeConfig(turns=TurnConfig(task_drain=timedelta(milliseconds=100)))
    rt = await runtimes(models=[MODEL], config=config)
    parent = await delegated(rt, "please delegate slowly")
    (run,) = await rt.runs.list(parent)
    assert (await rt.transcript(parent))[-1].content == "Waiting for the child."
    await wait_for_runs(rt, parent, 2)  # the child's late report wakes a mail turn
    (_, mail_run) = await rt.runs.list(parent)
    assert mail_run.trigger is StartKind.MAIL
    (mail,) = [i for i in await rt.inputs.list(parent) if i.origin is Origin.CHILD]
    assert mail.run_public_id == run.run_id
    (request,) = await rt.relay.requests_of(parent)
    assert request.consumed_in_run is None
    assert request.relayed
    assert await rt.relay.relay_pending() == 0


async def test_m16_an_open_wait_receives_the_first_report_exactly_once(
    runtimes: RuntimeFactory,
) -> None:
    # No kick, no sweep: nothing but the waits below reads the reply.
    rt = await runtimes(models=[MODEL], config=RuntimeConfig(relay_kick=False, relay_sweep=None))
    parent = (await rt.create_conversation("alice", PROFILE)).conversation_id
    await rt.post(parent, "hello")
    await wait_for_runs(rt, parent, 1)
    (run,) = await rt.runs.list(parent)
    # A turn-owned request of that run, answered; two waits look at it.
    request = await rt.relay.spawn(parent, run.run_id, "call-s", "count to three",
                                   turn_owned=True)
    assert await rt.relay.await_replies([request.request_id], 20)
    wait = rt.tools.get("wait")
    assert wait is not None
    context = ToolContext(ConversationId(parent), RunId(run.run_id), "call-w")
    seen = await asyncio.gather(*(
        wait.handler(context, {"task_key": request.task_key, "timeout_s": 5}) for _ in range(2)
    ))
    outputs = [s for s in seen if isinstance(s, ToolOutput)]
    assert all(o.meta.get("consume_child_request") == request.request_id for o in outputs)
    assert json.loads(outputs[0].content)["reply"] == "one two three"
    # Consumed by whichever result commits first; the other is told, not given it again.

    def consume(cx: ConversationTx) -> list[ChildRequest | None]:
        return [consume_in_run(cx, request.request_id, run.run_id) for _ in outputs]

    first, second = await rt.catalog.change(parent, consume)
    assert first is not None
    assert second is None
    again = await wait.handler(context, {"task_key": request.task_key, "timeout_s": 0})
    assert isinstance(again, ToolOutput)
    assert json.loads(again.content)["note"] == "received already in this turn"
    assert "consume_child_request" not in again.meta
