"""Approvals (L5): the conversation's held tool calls, and a person's decision on one."""

from __future__ import annotations

from tidings.service.auth import Actor, Scope
from tidings.service.params import ApprovalId, ConversationId, Limit, StatusFilter
from tidings.service.routes.common import READ, WRITE, RuntimeDep, router
from tidings.service.schemas import ApprovalList, ApprovalOut, Decision


@router.get("/{conversation_id}/approvals", response_model=ApprovalList, responses=READ,
            summary="Approvals of held tool calls, newest first")
async def list_approvals(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope,
    status_filter: StatusFilter = "",
    limit: Limit = 100,
) -> ApprovalList:
    approvals = await runtime.approvals.list(conversation_id, owner=owner, status=status_filter,
                                             limit=limit)
    return ApprovalList(approvals=[ApprovalOut.of(a) for a in approvals])


@router.post("/{conversation_id}/approvals/{approval_id}/decision",
             response_model=ApprovalOut, responses=WRITE,
             summary="Approve or deny a held tool call (terminal; repeating it changes nothing)")
async def decide(
    conversation_id: ConversationId, approval_id: ApprovalId, body: Decision, runtime: RuntimeDep,
    owner: Scope, actor: Actor,
) -> ApprovalOut:
    decided = await runtime.approvals.decide(conversation_id, approval_id, approve=body.approve,
                                             decided_by=actor, owner=owner)
    return ApprovalOut.of(decided)

