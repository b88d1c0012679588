"""The door: a person's input posted (and, with ``?wait=``, its answer), and the inputs in read
order."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import Request, Response, status
from pydantic import BaseModel

from tidings.runtime.root import Runtime
from tidings.service.auth import Actor, Scope
from tidings.service.params import ConversationId, WaitSeconds
from tidings.service.routes.common import READ, WRITE, FeedsDep, RuntimeDep, router
from tidings.service.schemas import AnswerOut, InputCreate, InputList, InputOut
from tidings.types import Answer, Author, AuthorKind, Origin


@router.post(
    "/{conversation_id}/inputs", status_code=status.HTTP_202_ACCEPTED, response_model=None,
    responses={
        202: {"model": InputOut, "description": "Accepted (no ?wait=): the input."},
        200: {"model": AnswerOut, "description": (
            "With ?wait=: the answer, once the run that read the input ended or awaits "
            "approval -- or, timed_out, as it stood when the wait ended.")},
        **WRITE,
    },
    summary="Post a person's input; it waits for (or steers) a turn; ?wait= waits for its answer",
)
async def post_input(
    conversation_id: ConversationId, body: InputCreate, runtime: RuntimeDep, owner: Scope,
    actor: Actor, request: Request, feeds: FeedsDep, wait: WaitSeconds = None,
) -> Response:
    async def leaving(_answer: Answer) -> bool:
        """The server is shutting down, or the client left: answer as it stands."""
        return feeds.closing or await request.is_disconnected()

    return await posted(runtime, conversation_id, body, owner, actor, wait, leaving)


async def posted(runtime: Runtime, conversation_id: str, body: InputCreate, owner: str | None,
                 actor: str, wait: float | None,
                 leaving: Callable[[Answer], Awaitable[bool]]) -> Response:
    """A person's input posted -- the input, or with ``wait`` its answer -- as the response
    (the route's and :mod:`tidings.service.quick`'s). ``leaving``: whether to stop waiting."""
    # A principal's input is its own; an operator's is recorded as the operator's.
    author = None if owner is not None else Author(AuthorKind.HUMAN, actor, actor)
    if wait is None:
        accepted = await runtime.post(
            conversation_id, body.content, origin=Origin.PERSON,
            delivery_mode=body.delivery_mode, meta=body.meta,
            idempotency_key=body.idempotency_key, owner=owner, authored_by=author)
        return _json(InputOut.of(accepted), status.HTTP_202_ACCEPTED)
    # The library's own waiting post: its wait reads nothing until the conversation changes.
    answer = await runtime.post(
        conversation_id, body.content, wait=True, timeout=wait, until=leaving,
        origin=Origin.PERSON, delivery_mode=body.delivery_mode, meta=body.meta,
        idempotency_key=body.idempotency_key, owner=owner, authored_by=author)
    return _json(AnswerOut.of(answer), status.HTTP_200_OK)


def _json(body: BaseModel, status_code: int) -> Response:
    """The body serialised by pydantic in one call. A route's return value is otherwise walked
    again, field by field, by FastAPI's ``jsonable_encoder``: the most-posted route skips it."""
    return Response(body.model_dump_json(by_alias=True), status_code,
                    media_type="application/json")


@router.get("/{conversation_id}/inputs", response_model=InputList, responses=READ,
            summary="Inputs in read order: kernel mail first, then arrival")
async def list_inputs(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope
) -> InputList:
    return InputList(items=[InputOut.of(i) for i in
                            await runtime.inputs.list(conversation_id, owner=owner)])

