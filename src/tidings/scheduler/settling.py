"""Settling: waiting until a conversation has nothing more to do here without a person.

A conversation is settled when this process has nothing pending or running for it (the
coordinator is idle there), or when what runs there waits for a person: a turn holding on a
call that needs approval (L5) ends the wait too, and the runs awaiting approval are the answer.
"""

from __future__ import annotations

from tidings.conversations.approvals import Approvals
from tidings.conversations.catalog import Conversations
from tidings.scheduler.coordinator import Coordinator
from tidings.support.lifetime import first_of
from tidings.types import Run, RunStatus


async def settle(
    conversation_id: str, *, coordinator: Coordinator, approvals: Approvals,
    conversations: Conversations,
) -> list[Run]:
    """Wait until the conversation is settled; return its runs ``awaiting_approval`` then
    (empty when nothing waits for a person)."""
    if not approvals.holding(conversation_id):
        await first_of(coordinator.idle(conversation_id), approvals.hold_begun(conversation_id))
        if not approvals.holding(conversation_id):
            return []
    return [r for r in await conversations.runs(conversation_id)
            if r.status is RunStatus.AWAITING_APPROVAL]


__all__ = ("settle",)
