"""L5 through the runtime: a tool call that needs approval holds its run until a person
decides; applying is fenced; terminal decisions stand."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest

from tests.conftest import RuntimeFactory
from tests.scenarios.test_awaiting_approval import ended
from tests.scenarios.test_tasks import wait_for_runs
from tests.waiting import eventually, wait_until
from tidings.conversations.approvals import Approval, ApprovalConfig
from tidings.errors import (
    ApprovalDecidedError,
    UnknownApprovalError,
    UnknownConversationError,
)
from tidings.models.scripted import Rule, ScriptedModel
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.tools.registry import Tool, ToolContext, ToolOutput
from tidings.types import Profile, RunStatus

MODEL = ScriptedModel(
    rules=[
        Rule({"tool_result": "deploy"}, {"text": "Done with the deploy request."}),
        Rule({"text_contains": "deploy"},
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


async def held(rt: Runtime, conv: str, within_s: float = 10.0) -> Approval:
    pending = await eventually(lambda: rt.approvals.list(conv, status="pending"),
                               what="an approval requested", within_s=within_s, poll_s=0.01)
    return pending[0]


async def test_l5_a_call_that_needs_approval_holds_its_run_until_approved(
    runtimes: RuntimeFactory,
) -> None:
    deploys = Deploys()
    rt = await runtimes(models=[MODEL], tools=[deploys.tool()])
    conv = (await rt.create_conversation("alice", PROFILE)).conversation_id
    await rt.post(conv, "deploy it")
    approval = await held(rt, conv)
    assert approval.tool_name == "deploy"
    assert approval.arguments == {"target": "prod"}
    await wait_until(  # the run looked at the approval, found it pending, and holds
        lambda: rt.metrics.counter_value("tidings_approval_waits_total") == 1,
        what="the run holding its call for a decision")
    assert deploys.applied == []  # held: nothing ran
    (run,) = await rt.runs.list(conv)
    assert run.status is RunStatus.AWAITING_APPROVAL
    statuses = [e.data.get("status") for e in await rt.events(conv) if e.type == "turn_status"]
    assert statuses == ["running", "awaiting_approval"]  # visible on the feed

    decided = await rt.approvals.decide(conv, approval.approval_id, approve=True,
                                        decided_by="alice")
    assert decided.status == "approved"
    await wait_for_runs(rt, conv, 1)
    assert deploys.applied == [{"target": "prod"}]
    (run,) = await rt.runs.list(conv)
    assert run.status is RunStatus.COMPLETED
    after = (await rt.approvals.list(conv))[0]
    assert after.status == "applied"
    # A late denial is refused and the outcome stands.
    with pytest.raises(ApprovalDecidedError):
        await rt.approvals.decide(conv, approval.approval_id, approve=False, decided_by="bob")
    assert (await rt.approvals.list(conv))[0].status == "applied"
    # The same approval again applies nothing twice.
    again = await rt.approvals.decide(conv, approval.approval_id, approve=True, decided_by="alice")
    assert again.status == "applied"
    await rt.settle(conv)
    assert len(deploys.applied) == 1


async def test_l5_two_racing_approvals_apply_once(runtimes: RuntimeFactory) -> None:
    deploys = Deploys()
    rt = await runtimes(models=[MODEL], tools=[deploys.tool()])
    conv = (await rt.create_conversation("alice", PROFILE)).conversation_id
    await rt.post(conv, "deploy it")
    approval = await held(rt, conv)
    results = await asyncio.gather(*(
        rt.approvals.decide(conv, approval.approval_id, approve=True, decided_by=f"person-{i}")
        for i in range(5)
    ))
    assert {r.approval_id for r in results} == {approval.approval_id}
    await wait_for_runs(rt, conv, 1)
    assert len(deploys.applied) == 1


async def test_l5_a_denied_call_is_not_run_and_the_denial_stands(
    runtimes: RuntimeFactory,
) -> None:
    deploys = Deploys()
    rt = await runtimes(models=[MODEL], tools=[deploys.tool()])
    conv = (await rt.create_conversation("alice", PROFILE)).conversation_id
    await rt.post(conv, "deploy it")
    approval = await held(rt, conv)
    await rt.approvals.decide(conv, approval.approval_id, approve=False, decided_by="alice")
    await wait_for_runs(rt, conv, 1)
    assert deploys.applied == []
    result = next(m for m in await rt.transcript(conv) if m.role == "tool")
    assert result.content.startswith("denied by alice")
    with pytest.raises(ApprovalDecidedError):
        await rt.approvals.decide(conv, approval.approval_id, approve=True, decided_by="mallory")
    assert deploys.applied == []


async def test_l5_an_unanswered_approval_expires_and_the_call_is_not_run(
    runtimes: RuntimeFactory,
) -> None:
    deploys = Deploys()
    config = RuntimeConfig(approvals=ApprovalConfig(ttl=timedelta(milliseconds=200),
                                                    poll=timedelta(milliseconds=20)))
    rt = await runtimes(models=[MODEL], tools=[deploys.tool()], config=config)
    conv = (await rt.create_conversation("alice", PROFILE)).conversation_id
    await rt.post(conv, "deploy it")
    approval = await held(rt, conv)
    await ended(rt, approval.run_id)  # a wait for the runs ends on the hold: wait for its end
    assert deploys.applied == []
    assert (await rt.approvals.list(conv))[0].status == "expired"
    with pytest.raises(ApprovalDecidedError):
        await rt.approvals.decide(conv, approval.approval_id, approve=True, decided_by="alice")


async def test_l5_another_principal_cannot_decide(runtimes: RuntimeFactory) -> None:
    deploys = Deploys()
    rt = await runtimes(models=[MODEL], tools=[deploys.tool()])
    conv = (await rt.create_conversation("alice", PROFILE)).conversation_id
    await rt.post(conv, "deploy it")
    approval = await held(rt, conv)
    with pytest.raises(UnknownConversationError):
        await rt.approvals.decide(conv, approval.approval_id, approve=True, decided_by="bob",
                                  owner="bob")
    with pytest.raises(UnknownApprovalError):
        await rt.approvals.decide(conv, "appr_nope", approve=True, decided_by="alice")
    assert (await rt.approvals.list(conv))[0].status == "pending"
    await rt.stop(conv)
    await ended(rt, approval.run_id)  # a wait for the runs ends on the hold: wait for its end
    # The stopped run can never apply it: it expires, and a late approval is refused.
    assert (await rt.approvals.list(conv))[0].status == "expired"
    with pytest.raises(ApprovalDecidedError):
        await rt.approvals.decide(conv, approval.approval_id, approve=True, decided_by="alice")
    assert deploys.applied == []


async def test_l5_read_only_tools_need_no_approval_in_writes_mode(
    runtimes: RuntimeFactory,
) -> None:
    calls: list[str] = []

    async def look(context: ToolContext, arguments: Mapping[str, Any]) -> str:
        calls.append("look")
        return "seen"

    model = ScriptedModel(rules=[
        Rule({"text_contains": "look"}, {"tool_calls": [{"name": "look", "arguments": {}}]}),
        Rule({"tool_result": "look"}, {"text": "looked"}),
    ], default={"text": "ok"})
    rt = await runtimes(models=[model], tools=[Tool("look", "Look.", look, read_only=True)])
    profile = Profile(model="scripted", tools=("look",), approval_mode="writes")
    conv = (await rt.create_conversation("alice", profile)).conversation_id
    await rt.post(conv, "look around")
    await wait_for_runs(rt, conv, 1)
    assert calls == ["look"]
    assert await rt.approvals.list(conv) == []
