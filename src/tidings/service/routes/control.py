"""The acts on a conversation's work: its goal and a checkpoint toward it, stopping it,
compacting it, stopping a run, the requests it opened in its children (listed, cancelled),
retrying a run, and a restart."""

from __future__ import annotations

from fastapi import status

from tidings.service.auth import Actor, Scope
from tidings.service.params import ConversationId, Limit, RunId, TaskKey
from tidings.service.routes.common import READ, WRITE, RuntimeDep, router
from tidings.service.schemas import (
    Accepted,
    CancelledRequestOut,
    ChildCancelled,
    ChildRequestList,
    ChildRequestOut,
    Compacted,
    ConversationOut,
    GoalUpdate,
    InputOut,
    RestartAccepted,
    RestartCreate,
    RetryCreate,
    RunStopped,
    Stopped,
)
from tidings.types import Author, AuthorKind


@router.put("/{conversation_id}/goal", response_model=ConversationOut, responses=WRITE)
async def set_goal(
    conversation_id: ConversationId, body: GoalUpdate, runtime: RuntimeDep, owner: Scope
) -> ConversationOut:
    return ConversationOut.of(
        await runtime.conversations.set_goal(conversation_id, body.status, body.text, owner=owner)
    )


@router.post("/{conversation_id}/goal/checkpoint", status_code=status.HTTP_202_ACCEPTED,
             response_model=Accepted, responses=WRITE,
             summary="Ask for an automatic turn toward the active goal")
async def checkpoint(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope
) -> Accepted:
    await runtime.conversations.checkpoint(conversation_id, owner=owner)
    return Accepted()


@router.post("/{conversation_id}/stop", response_model=Stopped, responses=WRITE,
             summary="Stop the conversation's running and queued turns")
async def stop(conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope) -> Stopped:
    return Stopped(run_ids=list(await runtime.stop(conversation_id, owner=owner)))


@router.post("/{conversation_id}/compact", response_model=Compacted, responses=WRITE,
             summary="Summarise the history (refused while a turn is active or queued)")
async def compact(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope
) -> Compacted:
    return Compacted(message_seq=await runtime.conversations.compact(conversation_id, owner=owner))


@router.post("/{conversation_id}/runs/{run_id}/stop", response_model=RunStopped,
             responses=WRITE,
             summary="Stop a run, running or finished: no more child replies or notices for it")
async def stop_run(
    conversation_id: ConversationId, run_id: RunId, runtime: RuntimeDep, owner: Scope
) -> RunStopped:
    cancelled = await runtime.runs.stop(conversation_id, run_id, owner=owner)
    return RunStopped(cancelled_inputs=cancelled)


@router.get("/{conversation_id}/children", response_model=ChildRequestList, responses=READ,
            summary="The requests this conversation opened in its children")
async def children(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope,
    limit: Limit = 100,
) -> ChildRequestList:
    requests = await runtime.children.list(conversation_id, owner=owner, limit=limit)
    return ChildRequestList(items=[ChildRequestOut.of(r) for r in requests])


@router.post("/{conversation_id}/children/{task_key}/cancel", response_model=ChildCancelled,
             responses=WRITE,
             summary="Cancel a spawn or send: no one waits for its reply any more, down the tree")
async def cancel_child(
    conversation_id: ConversationId, task_key: TaskKey, runtime: RuntimeDep, owner: Scope
) -> ChildCancelled:
    cancelled = await runtime.children.cancel(conversation_id, task_key, owner=owner)
    return ChildCancelled(cancelled=[
        CancelledRequestOut(task_key=c.task_key, child_conversation_id=c.child_conversation_id)
        for c in cancelled
    ])


@router.post("/{conversation_id}/runs/{run_id}/retry", status_code=status.HTTP_202_ACCEPTED,
             response_model=InputOut, responses=WRITE,
             summary="Retry a run that failed or needs attention, optionally naming a model")
async def retry_run(
    conversation_id: ConversationId, run_id: RunId, body: RetryCreate, runtime: RuntimeDep,
    owner: Scope, actor: Actor,
) -> InputOut:
    accepted = await runtime.runs.retry(
        conversation_id, run_id, model=body.model, owner=owner,
        authored_by=None if owner is not None else Author(AuthorKind.HUMAN, actor, actor),
    )
    return InputOut.of(accepted)


@router.post("/{conversation_id}/restart", status_code=status.HTTP_202_ACCEPTED,
             response_model=RestartAccepted, responses=WRITE,
             summary="Restart the runtime: accepted now, completed by the next instance")
async def restart(
    conversation_id: ConversationId, body: RestartCreate, runtime: RuntimeDep, owner: Scope
) -> RestartAccepted:
    operation = await runtime.request_restart(
        conversation_id, owner=owner, reason=body.reason, idempotency_key=body.idempotency_key
    )
    return RestartAccepted(operation_id=operation.operation_id)

