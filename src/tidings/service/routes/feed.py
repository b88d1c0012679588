"""The event feed: Server-Sent Events that resume after ``Last-Event-ID`` or ``?after=``, and
the same events as a JSON page for clients without SSE."""

from __future__ import annotations

import anyio
from sse_starlette import EventSourceResponse

from tidings.service import sse
from tidings.service.auth import Scope
from tidings.service.params import AfterSeq, ConversationId, LastEventId, OptionalAfterSeq
from tidings.service.problems import HTTPProblem
from tidings.service.routes.common import READ, FeedsDep, RuntimeDep, router
from tidings.service.schemas import EventOut, EventPage
from tidings.support.policy import MAX_INT64


def _resume_point(last_event_id: str | None, after: int | None) -> int:
    """``Last-Event-ID`` (a reconnecting client's) wins over ``?after=`` (its first URL)."""
    if last_event_id is not None and last_event_id.strip():
        text = last_event_id.strip()
        # The header's pattern admits at most 19 ASCII digits; some of those are too large.
        if not (text.isascii() and text.isdigit() and len(text) <= 19
                and int(text) <= MAX_INT64):
            raise HTTPProblem(422, "invalid_input",
                              f"Last-Event-ID must be a journal sequence (0 to {MAX_INT64})")
        return int(text)
    return after or 0


@router.get(
    "/{conversation_id}/events",
    response_class=EventSourceResponse,
    responses={
        200: {"description": "Server-Sent Events: id = journal seq, event = type, "
                             "data = an EventOut as JSON; live events (message_delta, "
                             "message_discarded) have no id and a null seq.",
              "content": {"text/event-stream": {"schema": {"type": "string"}}}},
        **READ,
    },
    summary="The event feed (SSE); resumes after Last-Event-ID or ?after=",
)
async def events(
    conversation_id: ConversationId, runtime: RuntimeDep, feeds: FeedsDep, owner: Scope,
    after: OptionalAfterSeq = None,
    last_event_id: LastEventId = None,
) -> EventSourceResponse:
    start = _resume_point(last_event_id, after)
    # Check before answering: a foreign or unknown id gets its 404, not a stream.
    await runtime.conversation(conversation_id, owner=owner)
    shutdown = anyio.Event()
    return EventSourceResponse(
        sse.feed(runtime, feeds, conversation_id, owner=owner, after=start, shutdown=shutdown),
        ping=feeds.ping_s,
        send_timeout=30.0,
        shutdown_event=shutdown,
        shutdown_grace_period=sse.SHUTDOWN_GRACE_S,  # the feed ends itself: a whole response
    )


@router.get("/{conversation_id}/events.json", response_model=EventPage, responses=READ,
            summary="The event feed as a JSON page, for clients without SSE")
async def events_page(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope,
    after: AfterSeq = 0,
) -> EventPage:
    rows = await runtime.events(conversation_id, after_seq=after, owner=owner)
    return EventPage(items=[EventOut.of(e) for e in rows],
                     next_after=rows[-1].seq if rows else after)

