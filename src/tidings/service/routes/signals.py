"""The conversation's signals: its delivery queue's figures and its dead letters."""

from __future__ import annotations

from tidings.service.auth import Scope
from tidings.service.params import ConversationId, Limit
from tidings.service.routes.common import READ, RuntimeDep, router
from tidings.service.schemas import DeadLetterList, DeadLetterOut, QueueStatsOut


@router.get("/{conversation_id}/signals/stats", response_model=QueueStatsOut, responses=READ,
            tags=["signals"])
async def conversation_signal_stats(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope
) -> QueueStatsOut:
    return QueueStatsOut.of(await runtime.signals.stats(conversation_id, owner=owner))


@router.get("/{conversation_id}/dead-letters", response_model=DeadLetterList, responses=READ,
            tags=["signals"])
async def conversation_dead_letters(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope, limit: Limit = 100
) -> DeadLetterList:
    letters = await runtime.signals.dead_letters(conversation_id, owner=owner, limit=limit)
    return DeadLetterList(items=[DeadLetterOut.of(d) for d in letters])

