"""The HTTP bodies of the event feed: one event, and a page of them for clients without SSE
(re-exported by :mod:`tidings.service.schemas`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from tidings.types import Event, FeedEvent


class EventOut(BaseModel):
    """One event of the feed: a journal row (``seq`` is the SSE id a feed resumes from), or a
    live event of an answer being written (``seq`` null: never stored)."""

    conversation_id: str
    seq: int | None
    type: str
    run_id: str | None
    data: dict[str, Any]
    at_us: int

    @classmethod
    def of(cls, e: Event | FeedEvent) -> EventOut:
        return cls(conversation_id=e.conversation_id, seq=e.seq, type=e.type, run_id=e.run_id,
                   data=dict(e.data), at_us=e.at_us)


class EventPage(BaseModel):
    items: list[EventOut]
    next_after: int = Field(description="The last seq seen: pass as ?after= (or Last-Event-ID).")

