"""L5 and B2 through the runtime: a run holding on a call a person has not decided reads
``awaiting_approval`` -- in the run reads and on the feed -- and a wait for the conversation
ends on it; once every held call is decided (or expired) the run is ``running`` again and goes
on as before."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from tests.conftest import RuntimeFactory
from tests.waiting import eventually
from tidings.conversations.approvals import ApprovalConfig
from tidings.models.scripted import Rule, ScriptedModel
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.scheduler.coordinator import CoordinatorConfig
from tidings.tools.registry import Tool, ToolContext, ToolOutput
from tidings.types import Profile, Run, RunStatus

WAIT_S = 20.0  # a bound on waiting for what the test arranged; never asserted on

MODEL = ScriptedModel(
    rules=[
        Rule({"tool_result": "deploy"}, {"text": "Done with the deploy request."}),
        Rule({"text_contains": "deploy twice"},
             {"tool_calls": [{"name": "deploy", "arguments": {"target": "eu"}},
                             {"name": "deploy", "arguments": {"target": "us"}}]}),
        Rule({"text_contains": "deploy it"},
             {"tool_calls": [{"name": "deploy", "arguments": {"target": "prod"}}]}),
    ],
    default={"text": "ok"},
)
PROFILE = Profile(model="scripted", tools=("deploy",), approval_mode="writes")


class Deploys:
    def __init__(self) -> None:
        self.applied: list[Mapping[str, Any]] = []

    def tool(self) -> Tool:
        async def run(context: ToolContext, arguments: Mapping[str, Any]) -> ToolOutput:
            self.applied.append(arguments)
            return ToolOutput("deployed")

        return Tool("deploy", "Deploy.", run)


async def settle(rt: Runtime, conv: str) -> list[Run]:
    """``rt.settle`` bounded: a wait that never ends fails the test instead of hanging it."""
    return await asyncio.wait_for(rt.settle(conv), WAIT_S)


async def turn_statuses(rt: Runtime, conv: str) -> list[dict[str, Any]]:
    return [e.data for e in await rt.events(conv) if e.type == "turn_status"]


async def ended(rt: Runtime, run_id: str) -> Run:
    found: list[Run] = []

    async def over() -> bool:
        found[:] = [await rt.runs.get(run_id)]
        return found[0].status.ended

    await eventually(over, what=f"run {run_id} ended", within_s=WAIT_S)
    return found[0]


async def test_l5_awaiting_approval_is_the_held_runs_status_and_ends_a_settle(
    runtimes: RuntimeFactory,
) -> None:
    deploys = Deploys()
    rt = await runtimes(models=[MODEL], tools=[deploys.tool()])
    conv = (await rt.create_conversation("alice", PROFILE)).conversation_id
    await rt.post(conv, "deploy it")

    held = await settle(rt, conv)  # returns: what runs here waits for a person
    [run] = held
    assert run.status is RunStatus.AWAITING_APPROVAL
    assert (await rt.runs.get(run.run_id)).status is RunStatus.AWAITING_APPROVAL
    assert [r.status for r in await rt.runs.list(conv)] == [RunStatus.AWAITING_APPROVAL]
    [approval] = await rt.approvals.list(conv, status="pending")
    assert approval.run_id == run.run_id
    statuses = await turn_statuses(rt, conv)
    assert [s["status"] for s in statuses] == ["running", "awaiting_approval"]
    assert statuses[1]["approvals"] == [approval.approval_id]
    assert deploys.applied == []
    assert await settle(rt, conv) == held  # it stays held: settling again returns again

    await rt.approvals.decide(conv, approval.approval_id, approve=True, decided_by="alice")
    # Decided: the run is running again from the decision's commit on (or already done).
    assert (await rt.runs.get(run.run_id)).status in (RunStatus.RUNNING, RunStatus.COMPLETED)
    assert await settle(rt, conv) == []  # now it settles as a conversation does
    assert (await rt.runs.get(run.run_id)).status is RunStatus.COMPLETED
    assert deploys.applied == [{"target": "prod"}]
    statuses = await turn_statuses(rt, conv)
    assert [s["status"] for s in statuses] == [
        "running", "awaiting_approval", "running", "completed"]
    assert statuses[2] == {"run_public_id": run.run_id, "status": "running",
                           "approval_id": approval.approval_id}


async def test_l5_awaiting_approval_a_denied_call_resumes_the_run_which_continues(
    runtimes: RuntimeFactory,
) -> None:
    deploys = Deploys()
    rt = await runtimes(models=[MODEL], tools=[deploys.tool()])
    conv = (await rt.create_conversation("alice", PROFILE)).conversation_id
    await rt.post(conv, "deploy it")
    [run] = await settle(rt, conv)
    [approval] = await rt.approvals.list(conv, status="pending")
    await rt.approvals.decide(conv, approval.approval_id, approve=False, decided_by="alice")
    assert await settle(rt, conv) == []
    assert (await rt.runs.get(run.run_id)).status is RunStatus.COMPLETED
    assert deploys.applied == []
    assert [s["status"] for s in await turn_statuses(rt, conv)] == [
        "running", "awaiting_approval", "running", "completed"]
    result = next(m for m in await rt.transcript(conv) if m.role == "tool")
    assert result.content.startswith("denied by alice")


async def test_l5_awaiting_approval_an_expired_approval_resumes_the_run(
    runtimes: RuntimeFactory,
) -> None:
    deploys = Deploys()
    config = RuntimeConfig(approvals=ApprovalConfig(ttl=timedelta(milliseconds=300),
                                                    poll=timedelta(milliseconds=20)))
    rt = await runtimes(models=[MODEL], tools=[deploys.tool()], config=config)
    conv = (await rt.create_conversation("alice", PROFILE)).conversation_id
    await rt.post(conv, "deploy it")
    [run] = await settle(rt, conv)
    assert run.status is RunStatus.AWAITING_APPROVAL
    done = await ended(rt, run.run_id)  # nobody decides: the approval expires
    assert done.status is RunStatus.COMPLETED
    assert deploys.applied == []
    [approval] = await rt.approvals.list(conv)
    assert approval.status == "expired"
    statuses = await turn_statuses(rt, conv)
    assert [s["status"] for s in statuses] == [
        "running", "awaiting_approval", "running", "completed"]
    assert statuses[2]["approval_id"] == approval.approval_id


async def test_l5_awaiting_approval_lasts_until_the_last_held_call_of_the_step_is_decided(
    runtimes: RuntimeFactory,
) -> None:
    deploys = Deploys()
    rt = await runtimes(models=[MODEL], tools=[deploys.tool()])
    conv = (await rt.create_conversation("alice", PROFILE)).conversation_id
    await rt.post(conv, "deploy twice")
    [run] = await settle(rt, conv)

    async def both_pending() -> bool:
        return len(await rt.approvals.list(conv, status="pending")) == 2

    await eventually(both_pending, what="two pending approvals", within_s=WAIT_S)
    first, second = await rt.approvals.list(conv, status="pending")
    await rt.approvals.decide(conv, first.approval_id, approve=True, decided_by="alice")
    # One call is still held: the run still waits for a person, and a settle still ends.
    assert [r.run_id for r in await settle(rt, conv)] == [run.run_id]
    assert (await rt.runs.get(run.run_id)).status is RunStatus.AWAITING_APPROVAL
    await rt.approvals.decide(conv, second.approval_id, approve=True, decided_by="alice")
    assert await settle(rt, conv) == []
    assert (await rt.runs.get(run.run_id)).status is RunStatus.COMPLETED
    assert sorted(d["target"] for d in deploys.applied) == ["eu", "us"]
    statuses = [s["status"] for s in await turn_statuses(rt, conv)]
    assert statuses == ["running", "awaiting_approval", "running", "completed"]


async def test_l5_awaiting_approval_a_held_run_is_stopped_like_a_running_one(
    runtimes: RuntimeFactory,
) -> None:
    deploys = Deploys()
    rt = await runtimes(models=[MODEL], tools=[deploys.tool()])
    conv = (await rt.create_conversation("alice", PROFILE)).conversation_id
    await rt.post(conv, "deploy it")
    [run] = await settle(rt, conv)
    await rt.post(conv, "and then say hi")  # queued behind the held run
    assert [r.run_id for r in await settle(rt, conv)] == [run.run_id]

    assert await rt.stop(conv) == [run.run_id]
    assert (await ended(rt, run.run_id)).status is RunStatus.STOPPED
    assert deploys.applied == []
    [approval] = await rt.approvals.list(conv)
    assert approval.status == "expired"  # it can never apply now
    assert await settle(rt, conv) == []
    runs = await rt.runs.list(conv)
    assert [r.status for r in runs] == [RunStatus.STOPPED, RunStatus.COMPLETED]


async def test_l5_c1_held_calls_lend_their_place_to_the_other_conversations(
    runtimes: RuntimeFactory,
) -> None:
    """Room for one turn at a time: two runs holding on calls nobody has decided yet do not
    keep a third conversation from being answered. Decided, each takes its place back and
    ends; and the places stay exact -- afterwards no two turns ever ran at once."""
    deploys = Deploys()
    slow = ScriptedModel(rules=list(MODEL.rules),
                         default={"text": "ok", "delay_seconds": 0.05})
    rt = await runtimes(models=[slow], tools=[deploys.tool()], config=RuntimeConfig(
        coordinator=CoordinatorConfig(max_concurrent_turns=1)))
    held = [(await rt.create_conversation("alice", PROFILE)).conversation_id for _ in range(2)]
    await rt.post(held[0], "deploy twice")
    await rt.post(held[1], "deploy it")
    for conv in held:
        assert [r.status for r in await settle(rt, conv)] == [RunStatus.AWAITING_APPROVAL]
    other = (await rt.create_conversation("alice", PROFILE)).conversation_id
    await rt.post(other, "hello")
    assert await settle(rt, other) == []
    [answered] = await rt.runs.list(other)
    assert answered.status is RunStatus.COMPLETED

    for conv in held:
        for approval in await rt.approvals.list(conv):
            await rt.approvals.decide(conv, approval.approval_id, approve=True, decided_by="alice")
    for conv in held:
        [run] = await rt.runs.list(conv)
        assert (await ended(rt, run.run_id)).status is RunStatus.COMPLETED
    assert len(deploys.applied) == 3

    # Three conversations at once, one place: their turns one after another.
    for conv in [*held, other]:
        await rt.post(conv, "hello again")
    for conv in [*held, other]:
        await settle(rt, conv)
    runs = sorted([max(await rt.runs.list(conv), key=lambda r: r.started_at_us or 0)
                   for conv in [*held, other]], key=lambda r: r.started_at_us or 0)
    for earlier, later in itertools.pairwise(runs):
        assert earlier.ended_at_us is not None
        assert later.started_at_us is not None
        assert earlier.ended_at_us <= later.started_at_us, "two turns ran at once"
