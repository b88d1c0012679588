"""SSE ids on the A2A streams: the cursor a client resumes from.

The SDK's routes write ``SendStreamingMessage`` and ``SubscribeToTask`` as Server-Sent Events
with a ``data`` line only. :func:`with_ids` leaves everything else of those responses to the
SDK and gives each event the ``id`` its A2A event carries as ``metadata.tidings.seq`` (its
position in the conversation's journal, :mod:`~tidings.service.a2a.stream`): a stock SSE
client then keeps it as its last event id and sends it back as ``Last-Event-ID``, which
``SubscribeToTask`` resumes after. Events without a position (the answer's live deltas, error
events) go out without an ``id``, so the last id stays the last journal position -- as on
tidings' own feed (:mod:`tidings.service.sse`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response

from tidings.service.a2a.stream import SEQ

Endpoint = Callable[[Request], Awaitable[Response]]
_PAYLOADS = ("task", "statusUpdate", "artifactUpdate", "message")


def position(data: str) -> int | None:
    """The journal position an SSE ``data`` payload carries: a JSON-RPC response or an
    HTTP+JSON stream response whose event has ``metadata.tidings.seq``."""
    try:
        body = json.loads(data)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    result = body.get("result", body)
    for kind in _PAYLOADS:
        event = result.get(kind) if isinstance(result, dict) else None
        if isinstance(event, dict):
            tidings = (event.get("metadata") or {}).get("tidings") or {}
            seq = tidings.get(SEQ) if isinstance(tidings, dict) else None
            return int(seq) if isinstance(seq, int | float) else None
    return None


def _identified(item: Any) -> Any:
    """The SSE event the SDK wrote (a :class:`ServerSentEvent` or the dict it makes one of),
    with its position as ``id``."""
    if isinstance(item, ServerSentEvent):
        data, event = item.data, item.event
    elif isinstance(item, dict):
        data, event = item.get("data"), item.get("event")
    else:
        return item
    seq = position(data) if isinstance(data, str) else None
    return ServerSentEvent(data=data, event=event,
                           id=None if seq is None else str(seq))


async def _with_ids(events: AsyncIterable[Any]) -> AsyncIterator[Any]:
    try:
        async for item in events:
            yield _identified(item)
    finally:
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()


def with_ids(endpoint: Endpoint) -> Endpoint:
    """``endpoint`` whose SSE responses carry ids (see the module docstring); any other
    response is the endpoint's own."""

    async def identified(request: Request) -> Response:
        response = await endpoint(request)
        if isinstance(response, EventSourceResponse):
            response.body_iterator = _with_ids(response.body_iterator)
        return response

    return identified


__all__ = ("position", "with_ids")
