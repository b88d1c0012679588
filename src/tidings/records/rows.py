"""Rows of the conversation tables as the records of ``tidings.types``, and back.

Decoding only: no SQL is run here (the store runs it, :mod:`tidings.records.transcript` writes).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from tidings.errors import InvalidInputError
from tidings.store import Row, Store
from tidings.types import (
    Author,
    AuthorKind,
    Conversation,
    ConversationId,
    ConversationStatus,
    DeliveryMode,
    Event,
    GoalStatus,
    Input,
    InputId,
    InputState,
    Message,
    MessageId,
    Origin,
    Profile,
    Run,
    RunId,
    RunStatus,
    StartKind,
    Usage,
)

APPROVAL_MODES = ("never", "writes", "always")
AUTOMATIC_TOOLS = ("read_only", "all")


def encode_profile(profile: Profile) -> str:
    if profile.approval_mode not in APPROVAL_MODES:
        raise InvalidInputError(f"approval_mode must be one of {', '.join(APPROVAL_MODES)}")
    if profile.automatic_tools not in AUTOMATIC_TOOLS:
        raise InvalidInputError(f"automatic_tools must be one of {', '.join(AUTOMATIC_TOOLS)}")
    return json.dumps(
        {
            "model": profile.model,
            "fallbacks": list(profile.fallbacks),
            "tools": list(profile.tools),
            "approval_mode": profile.approval_mode,
            "system": profile.system,
            "automatic_tools": profile.automatic_tools,
            **({"background": list(profile.background)} if profile.background else {}),
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


@functools.lru_cache(maxsize=1024)
def decode_profile(text: str) -> Profile:
    """A profile from its JSON (cached: every unit of a conversation reads the same text)."""
    data = json.loads(text)
    return Profile(
        model=data["model"],
        fallbacks=tuple(data.get("fallbacks", ())),
        tools=tuple(data.get("tools", ())),
        approval_mode=data.get("approval_mode", "never"),
        system=data.get("system", ""),
        automatic_tools=data.get("automatic_tools", "read_only"),
        background=tuple(data.get("background", ())),
    )


def conversation_from_row(row: Row) -> Conversation:
    """The conversation of a row (its own fields; the counters and the slot are not in it).

    Every unit of a conversation reads the same fields again and again, so the record is
    shared between reads of equal fields (it is immutable) instead of built per read.
    """
    return _conversation(
        row["conversation_id"], row["owner"], row["title"], row["profile"], row["status"],
        row["goal_status"], row["goal_text"], row["suppressed"], row["awaiting_person"],
        row["created_at_us"],
    )


@functools.lru_cache(maxsize=4096)
def _conversation(
    conversation_id: str, owner: str, title: str, profile: str, status: str, goal_status: str,
    goal_text: str | None, suppressed: Any, awaiting_person: Any, created_at_us: Any,
) -> Conversation:
    return Conversation(
        conversation_id=ConversationId(conversation_id),
        owner=owner,
        title=title,
        profile=decode_profile(profile),
        status=ConversationStatus(status),
        goal_status=GoalStatus(goal_status),
        goal_text=goal_text,
        suppressed=bool(suppressed),
        awaiting_person=bool(awaiting_person),
        created_at_us=int(created_at_us),
    )


def input_from_row(row: Row) -> Input:
    sender = row["sender_conversation_id"]
    run_public_id = row["run_public_id"]
    return Input(
        input_id=InputId(row["input_id"]),
        conversation_id=ConversationId(row["conversation_id"]),
        queue_position=int(row["queue_position"]),
        origin=Origin(row["origin"]),
        authored_by=Author(
            AuthorKind(row["author_kind"]), row["author_handle"], row["author_display_name"]
        ),
        sender_conversation_id=None if sender is None else ConversationId(sender),
        run_public_id=None if run_public_id is None else RunId(run_public_id),
        task_key=row["task_key"],
        delivery_mode=DeliveryMode(row["delivery_mode"]),
        content=row["content"],
        meta=json.loads(row["meta"]),
        state=InputState(row["state"]),
        run_id=None if row["run_id"] is None else RunId(row["run_id"]),
        accepted_at_us=int(row["accepted_at_us"]),
    )


def run_status(stored: str, *, awaiting_approval: bool) -> RunStatus:
    """A run's status as callers see it: a running run that holds on a call a person has not
    decided yet is ``awaiting_approval``. The database stores ``running`` for both, so every
    rule about live runs (stop, recovery, the end of a run) holds for it unchanged."""
    status = RunStatus(stored)
    if status is RunStatus.RUNNING and awaiting_approval:
        return RunStatus.AWAITING_APPROVAL
    return status


def run_from_row(row: Row) -> Run:
    """A run; rows that carry ``awaiting_approval`` and the usage columns (the run reads) give
    the derived status and the run's usage."""
    return Run(
        run_id=RunId(row["run_id"]),
        conversation_id=ConversationId(row["conversation_id"]),
        trigger=StartKind(row["trigger"]),
        status=run_status(row["status"],
                          awaiting_approval=bool(row.get("awaiting_approval"))),
        model=row["model"],
        failure_code=row["failure_code"],
        steps=int(row["steps"]),
        created_at_us=int(row["created_at_us"]),
        started_at_us=row["started_at_us"],
        ended_at_us=row["ended_at_us"],
        # A row written back by an insert or an update carries no usage: the run has not
        # ended, or its usage is written beside it (the reads join it in).
        usage=usage_from_row(row) if "model_calls" in row else Usage(),
        model_failures=tuple(json.loads(row["model_failures"]))
        if row.get("model_failures") else (),
    )


def usage_from_row(row: Row) -> Usage:
    """The usage columns of a run row, or of a conversation's sums (``conversation_usage``)."""
    return Usage(
        model_calls=int(row["model_calls"]),
        input_tokens=int(row["input_tokens"]),
        output_tokens=int(row["output_tokens"]),
        cache_read_tokens=int(row["cache_read_tokens"]),
        cache_write_tokens=int(row["cache_write_tokens"]),
    )


def message_from_row(row: Row) -> Message:
    origin = row["origin"]
    return Message(
        conversation_id=ConversationId(row["conversation_id"]),
        seq=int(row["seq"]),
        message_id=MessageId(row["message_id"]),
        run_id=None if row["run_id"] is None else RunId(row["run_id"]),
        role=row["role"],
        content=row["content"],
        tool_calls=tuple(json.loads(row["tool_calls"])) if row["tool_calls"] else (),
        tool_call_id=row["tool_call_id"],
        tool_name=row["tool_name"],
        origin=None if origin is None else Origin(origin),
        input_id=None if row["input_id"] is None else InputId(row["input_id"]),
        meta=json.loads(row["meta"]),
        created_at_us=int(row["created_at_us"]),
    )


def event_from_row(row: Row) -> Event:
    return Event(
        conversation_id=ConversationId(row["conversation_id"]),
        seq=int(row["seq"]),
        type=row["type"],
        run_id=None if row["run_id"] is None else RunId(row["run_id"]),
        data=json.loads(row["data"]),
        at_us=int(row["at_us"]),
    )

async def listed(store: Store, query: str, conversation_id: str, *, status: str,
                 statuses: Sequence[str], limit: int) -> list[Row]:
    """A conversation's rows of one kind (``query``), as the query orders them: those in
    ``status`` (one of ``statuses``; empty: every one), at most ``limit`` (1-1000)."""
    if status and status not in statuses:
        raise InvalidInputError(f"status must be one of {', '.join(statuses)}")
    if not 1 <= limit <= 1_000:
        raise InvalidInputError("limit must be between 1 and 1000")
    return await store.read(lambda tx: tx.all(query, conversation_id=conversation_id,
                                              status=status, limit=limit))

