"""The conversation's tasks, and the result envelopes that hold their output."""

from __future__ import annotations

from tidings.service.auth import Principal, Scope
from tidings.service.params import (
    BeforeUs,
    ConversationId,
    Cursor,
    Limit,
    LimitBytes,
    Offset,
    ResultId,
    TaskKey,
)
from tidings.service.routes.common import READ, RuntimeDep, router
from tidings.service.schemas import ResultList, ResultPageOut, ResultRefOut, TaskOut, TaskPage


@router.get("/{conversation_id}/tasks", response_model=TaskPage, responses=READ)
async def list_tasks(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope,
    before_us: BeforeUs = None, limit: Limit = 100,
) -> TaskPage:
    tasks = await runtime.tasks.list(conversation_id, owner=owner, before_us=before_us,
                                     limit=limit)
    return TaskPage(
        items=[TaskOut.of(t) for t in tasks],
        next_before_us=tasks[-1].started_at_us if len(tasks) == limit else None,
    )


@router.get("/{conversation_id}/tasks/{task_key}", response_model=TaskOut, responses=READ)
async def get_task(
    conversation_id: ConversationId, task_key: TaskKey, runtime: RuntimeDep, owner: Scope
) -> TaskOut:
    return TaskOut.of(await runtime.tasks.get(conversation_id, task_key, owner=owner))


# Output is the owner's: an operator's token reads a conversation's task facts, not the output
# its results hold (403 unless the token is also the owner's).
@router.get("/{conversation_id}/results", response_model=ResultList, responses=READ,
            summary="The conversation's result envelopes (its owner's token)")
async def list_results(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Principal, after: Cursor = "",
    limit: Limit = 100,
) -> ResultList:
    refs = await runtime.results.list(conversation_id, owner=owner, after=after, limit=limit)
    return ResultList(
        items=[ResultRefOut.of(r) for r in refs],
        next_after=refs[-1].result_id if len(refs) == limit else None,
    )


@router.get("/{conversation_id}/results/{result_id}", response_model=ResultPageOut,
            responses=READ,
            summary="One page of a result; unknown and foreign ids answer the same 404")
async def get_result_page(
    conversation_id: ConversationId, result_id: ResultId, runtime: RuntimeDep, owner: Principal,
    offset: Offset = 0,
    limit_bytes: LimitBytes = None,
) -> ResultPageOut:
    page = await runtime.results.page(conversation_id, result_id, owner=owner, offset=offset,
                                      limit_bytes=limit_bytes)
    return ResultPageOut.of(page)

