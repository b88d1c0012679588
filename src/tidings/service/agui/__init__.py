"""The AG-UI endpoint: a conversation driven by any AG-UI client (CopilotKit, ``@ag-ui/client``).

``POST /v1/agui`` takes the protocol's ``RunAgentInput`` (the ``ag-ui-protocol`` package's
model: ``threadId`` is the conversation, the run is the tidings run that the input's new user
messages start, or that its ``resume`` answers let go on) and answers with the run's AG-UI
events over Server-Sent Events, written by the package's encoder, from the conversation's feed
(:mod:`~tidings.service.agui.handler` applies the input, :mod:`~tidings.service.agui.stream`
makes the events). A tool call held for a person ends the run with the ``interrupt`` outcome;
the next input's ``resume`` decides it. Each event made from a journal event carries its
position (its SSE ``id`` and ``metadata.tidings.seq``): a client that lost its connection sends
it back (``Last-Event-ID``, or ``forwardedProps.tidings.after``) and gets the rest, each event
once.

The route is one of the service's: the token's principal acts, as owner (an operator's token
alone is refused); an unknown or another principal's thread answers 404; an invalid body 422
with the field's path; all of it before anything changes.
"""

from __future__ import annotations

import anyio
from ag_ui.core import RunAgentInput
from fastapi import APIRouter, FastAPI
from sse_starlette import EventSourceResponse

from tidings.service import sse
from tidings.service.agui.handler import admit, events
from tidings.service.auth import Principal
from tidings.service.params import LastEventId
from tidings.service.problems import documented
from tidings.service.routes import FeedsDep, RuntimeDep

PATH = "/v1/agui"

router = APIRouter(tags=["ag-ui"])


@router.post(
    PATH,
    response_class=EventSourceResponse,
    responses={
        200: {"description": "Server-Sent Events, each an AG-UI event as JSON: RUN_STARTED, "
                             "the run's TEXT_MESSAGE_*, TOOL_CALL_* and CUSTOM events, then "
                             "RUN_FINISHED (an interrupt: a held tool call) or RUN_ERROR. An "
                             "event's id is its journal position, to resume after.",
              "content": {"text/event-stream": {"schema": {"type": "string"}}}},
        **documented(400, 401, 403, 404, 409, 413, 422, 429, 500, 503),
    },
    summary="Run the agent on a conversation (AG-UI): RunAgentInput in, AG-UI events out",
)
async def run_agent(body: RunAgentInput, runtime: RuntimeDep, feeds: FeedsDep,
                    owner: Principal, last_event_id: LastEventId = None) -> EventSourceResponse:
    admitted = await admit(runtime, owner, body, last_event_id)
    shutdown = anyio.Event()
    return EventSourceResponse(
        events(runtime, feeds, admitted, shutdown=shutdown),
        ping=feeds.ping_s,
        sep="\n",
        send_timeout=30.0,
        shutdown_event=shutdown,
        shutdown_grace_period=sse.SHUTDOWN_GRACE_S,
    )


def mount(app: FastAPI) -> None:
    """Add the AG-UI route to the service's ``app``."""
    app.include_router(router)


__all__ = ("PATH", "mount", "router")
