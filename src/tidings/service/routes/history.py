"""What the conversation's turns wrote and did: its transcript and its runs."""

from __future__ import annotations

from tidings.errors import UnknownRunError
from tidings.service.auth import Scope
from tidings.service.params import AfterSeq, ConversationId, RunId
from tidings.service.routes.common import READ, RuntimeDep, router
from tidings.service.schemas import MessageOut, RunList, RunOut, Transcript


@router.get("/{conversation_id}/transcript", response_model=Transcript, responses=READ)
async def transcript(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope,
    after_seq: AfterSeq = 0,
) -> Transcript:
    messages = await runtime.transcript(conversation_id, after_seq=after_seq, owner=owner)
    return Transcript(
        conversation_id=conversation_id,
        items=[MessageOut.of(m) for m in messages],
        next_after_seq=messages[-1].seq if messages else after_seq,
    )


@router.get("/{conversation_id}/runs", response_model=RunList, responses=READ)
async def list_runs(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope
) -> RunList:
    runs = await runtime.runs.list(conversation_id, owner=owner)
    return RunList(items=[RunOut.of(r) for r in runs])


@router.get("/{conversation_id}/runs/{run_id}", response_model=RunOut, responses=READ)
async def get_run(
    conversation_id: ConversationId, run_id: RunId, runtime: RuntimeDep, owner: Scope
) -> RunOut:
    await runtime.conversation(conversation_id, owner=owner)
    run = await runtime.runs.get(run_id, owner=owner)
    if run.conversation_id != conversation_id:
        raise UnknownRunError(run_id)
    return RunOut.of(run)

