"""A conversation: opened, listed, read, archived and unarchived, its profile changed, and
tombstoned."""

from __future__ import annotations

from typing import Literal

from fastapi import status

from tidings.service.auth import Principal, Scope
from tidings.service.params import ConversationId, Cursor, Limit, Order
from tidings.service.routes.common import READ, WRITE, RuntimeDep, router
from tidings.service.schemas import (
    ConversationCreate,
    ConversationOut,
    ConversationPage,
    ConversationSummaryOut,
    ProfileChange,
)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ConversationOut,
             responses=WRITE, summary="Open a conversation owned by the token's principal")
async def create_conversation(
    body: ConversationCreate, runtime: RuntimeDep, owner: Principal
) -> ConversationOut:
    conversation = await runtime.create_conversation(
        owner, body.profile if isinstance(body.profile, str) else body.profile.to_profile(),
        title=body.title,
    )
    return ConversationOut.of(conversation)


@router.get("", response_model=ConversationPage, responses=READ,
            summary="The principal's conversations (an operator's: every one), by id, with "
                    "their last activity and newest run")
async def list_conversations(
    runtime: RuntimeDep, owner: Scope, after: Cursor = "", limit: Limit = 100,
    order: Order = "oldest",
) -> ConversationPage:
    found = await runtime.conversations.summaries(owner, after=after, limit=limit,
                                                  newest_first=order == "newest")
    return ConversationPage(
        items=[ConversationSummaryOut.of_summary(s) for s in found],
        next_after=found[-1].conversation.conversation_id if len(found) == limit else None,
    )


@router.get("/{conversation_id}", response_model=ConversationOut, responses=READ)
async def get_conversation(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope
) -> ConversationOut:
    return ConversationOut.of(await runtime.conversation(conversation_id, owner=owner))


def _status_route(verb: Literal["archive", "unarchive"], summary: str) -> None:
    """``POST /{conversation_id}/{verb}``: the runtime's method of that name."""

    async def change(
        conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope
    ) -> ConversationOut:
        act = (runtime.conversations.archive if verb == "archive"
               else runtime.conversations.unarchive)
        return ConversationOut.of(await act(conversation_id, owner=owner))

    router.post(f"/{{conversation_id}}/{verb}", response_model=ConversationOut, responses=WRITE,
                summary=summary, name=f"{verb}_conversation")(change)


_status_route("archive", "Archive: no more callers' input; the kernel's mail still runs")
_status_route("unarchive", "Undo an archive: callers' input is taken again")


@router.put("/{conversation_id}/profile", response_model=ConversationOut, responses=WRITE,
            summary="Change the conversation's profile (checked as at create; the next turn "
                    "uses it)")
async def change_profile(
    conversation_id: ConversationId, body: ProfileChange, runtime: RuntimeDep, owner: Scope
) -> ConversationOut:
    profile = body.profile if isinstance(body.profile, str) else body.profile.to_profile()
    return ConversationOut.of(
        await runtime.conversations.set_profile(conversation_id, profile, owner=owner))


@router.delete("/{conversation_id}", response_model=ConversationOut, responses=WRITE,
               summary="Tombstone: from now on the conversation is unknown to every reader")
async def delete_conversation(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope
) -> ConversationOut:
    return ConversationOut.of(await runtime.conversations.tombstone(conversation_id, owner=owner))

