"""Conversation routes (A2): parse, call the :class:`~tidings.runtime.root.Runtime`, serialise.

Every route acts for the token's principal and passes it as ``owner=``: another principal's
conversation -- its inputs, transcript, runs, tasks, results and feed -- answers exactly like an
unknown id (the runtime raises the same error for both, and the same error makes the same
problem document). An operator's token reaches every conversation (``owner=None``); only a
principal opens one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Literal

import anyio
from fastapi import APIRouter, Depends, Request, Response, status
from pydantic import BaseModel
from sse_starlette import EventSourceResponse

from tidings.errors import InstanceNotRunningError, UnknownRunError
from tidings.runtime.root import Runtime
from tidings.service import sse
from tidings.service.auth import Actor, Principal, Scope
from tidings.service.params import (
    AfterSeq,
    ApprovalId,
    BeforeUs,
    ConversationId,
    Cursor,
    LastEventId,
    Limit,
    LimitBytes,
    Offset,
    OptionalAfterSeq,
    Order,
    QuestionId,
    ResultId,
    RunId,
    StatusFilter,
    TaskKey,
    WaitSeconds,
)
from tidings.service.problems import HTTPProblem, documented
from tidings.service.schemas import (
    Accepted,
    AnswerOut,
    ApprovalList,
    ApprovalOut,
    CancelledRequestOut,
    ChildCancelled,
    ChildRequestList,
    ChildRequestOut,
    Compacted,
    ConversationCreate,
    ConversationOut,
    ConversationPage,
    ConversationSummaryOut,
    DeadLetterList,
    DeadLetterOut,
    Decision,
    EventOut,
    EventPage,
    GoalUpdate,
    InputCreate,
    InputList,
    InputOut,
    MessageOut,
    ProfileChange,
    QuestionAnswer,
    QuestionList,
    QuestionOut,
    QueueStatsOut,
    RestartAccepted,
    RestartCreate,
    ResultList,
    ResultPageOut,
    ResultRefOut,
    RetryCreate,
    RunList,
    RunOut,
    RunStopped,
    Stopped,
    TaskOut,
    TaskPage,
    Transcript,
)
from tidings.support.policy import MAX_INT64
from tidings.types import Answer, Author, AuthorKind, Origin


# The dependencies are coroutines: FastAPI runs a plain function in a worker thread, a hop
# (and a wait for the interpreter lock) per request for a lookup.
async def _runtime(request: Request) -> Runtime:
    runtime = request.app.state.runtime
    if runtime is None:  # an embedded app whose lifespan has not started, or has ended
        raise InstanceNotRunningError("the runtime is not running: the app has not started "
                                      "or has shut down")
    assert isinstance(runtime, Runtime)
    return runtime


async def _feeds(request: Request) -> sse.Feeds:
    feeds = request.app.state.feeds
    assert isinstance(feeds, sse.Feeds)
    return feeds


RuntimeDep = Annotated[Runtime, Depends(_runtime)]
FeedsDep = Annotated[sse.Feeds, Depends(_feeds)]

# What every conversation route may answer besides its success.
READ = documented(401, 403, 404, 422, 500, 503)
WRITE = documented(400, 401, 403, 404, 409, 413, 422, 429, 500, 503)

router = APIRouter(prefix="/v1/conversations", tags=["conversations"])


# -- conversations -----------------------------------------------------------------------------


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
    found = await runtime.conversation_summaries(owner, after=after, limit=limit,
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
        act = runtime.archive if verb == "archive" else runtime.unarchive
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
    return ConversationOut.of(await runtime.set_profile(conversation_id, profile, owner=owner))


@router.delete("/{conversation_id}", response_model=ConversationOut, responses=WRITE,
               summary="Tombstone: from now on the conversation is unknown to every reader")
async def delete_conversation(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope
) -> ConversationOut:
    return ConversationOut.of(await runtime.tombstone(conversation_id, owner=owner))


# -- the door ----------------------------------------------------------------------------------


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
                            await runtime.inputs(conversation_id, owner=owner)])


# -- goal, stop, compaction --------------------------------------------------------------------


@router.put("/{conversation_id}/goal", response_model=ConversationOut, responses=WRITE)
async def set_goal(
    conversation_id: ConversationId, body: GoalUpdate, runtime: RuntimeDep, owner: Scope
) -> ConversationOut:
    return ConversationOut.of(
        await runtime.set_goal(conversation_id, body.status, body.text, owner=owner)
    )


@router.post("/{conversation_id}/goal/checkpoint", status_code=status.HTTP_202_ACCEPTED,
             response_model=Accepted, responses=WRITE,
             summary="Ask for an automatic turn toward the active goal")
async def checkpoint(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope
) -> Accepted:
    await runtime.checkpoint(conversation_id, owner=owner)
    return Accepted()


@router.post("/{conversation_id}/stop", response_model=Stopped, responses=WRITE,
             summary="Stop the conversation's running and queued turns")
async def stop(conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope) -> Stopped:
    return Stopped(run_ids=list(await runtime.stop(conversation_id, owner=owner)))


@router.post("/{conversation_id}/compact", response_model=Compacted, responses=WRITE,
             summary="Summarise the history (refused while a turn is active or queued)")
async def compact(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope
) -> Compacted:
    return Compacted(message_seq=await runtime.compact(conversation_id, owner=owner))


@router.post("/{conversation_id}/runs/{run_id}/stop", response_model=RunStopped,
             responses=WRITE,
             summary="Stop a run, running or finished: no more child replies or notices for it")
async def stop_run(
    conversation_id: ConversationId, run_id: RunId, runtime: RuntimeDep, owner: Scope
) -> RunStopped:
    cancelled = await runtime.stop_run(conversation_id, run_id, owner=owner)
    return RunStopped(cancelled_inputs=cancelled)


@router.get("/{conversation_id}/children", response_model=ChildRequestList, responses=READ,
            summary="The requests this conversation opened in its children")
async def children(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope,
    limit: Limit = 100,
) -> ChildRequestList:
    requests = await runtime.children_of(conversation_id, owner=owner, limit=limit)
    return ChildRequestList(items=[ChildRequestOut.of(r) for r in requests])


@router.post("/{conversation_id}/children/{task_key}/cancel", response_model=ChildCancelled,
             responses=WRITE,
             summary="Cancel a spawn or send: no one waits for its reply any more, down the tree")
async def cancel_child(
    conversation_id: ConversationId, task_key: TaskKey, runtime: RuntimeDep, owner: Scope
) -> ChildCancelled:
    cancelled = await runtime.cancel_child(conversation_id, task_key, owner=owner)
    return ChildCancelled(cancelled=[
        CancelledRequestOut(task_key=c.task_key, child_conversation_id=c.child_conversation_id)
        for c in cancelled
    ])


@router.post("/{conversation_id}/runs/{run_id}/retry", status_code=status.HTTP_202_ACCEPTED,
             response_model=InputOut, responses=WRITE,
             summary="Retry a run that failed or needs attention, optionally naming a model")
async def retry_run(
    conversation_id: ConversationId, run_id: RunId, body: RetryCreate, runtime: RuntimeDep,
    owner: Scope, actor: Actor,
) -> InputOut:
    accepted = await runtime.retry(
        conversation_id, run_id, model=body.model, owner=owner,
        authored_by=None if owner is not None else Author(AuthorKind.HUMAN, actor, actor),
    )
    return InputOut.of(accepted)


@router.post("/{conversation_id}/restart", status_code=status.HTTP_202_ACCEPTED,
             response_model=RestartAccepted, responses=WRITE,
             summary="Restart the runtime: accepted now, completed by the next instance")
async def restart(
    conversation_id: ConversationId, body: RestartCreate, runtime: RuntimeDep, owner: Scope
) -> RestartAccepted:
    operation = await runtime.request_restart(
        conversation_id, owner=owner, reason=body.reason, idempotency_key=body.idempotency_key
    )
    return RestartAccepted(operation_id=operation.operation_id)


# -- approvals (L5) ----------------------------------------------------------------------------


@router.get("/{conversation_id}/approvals", response_model=ApprovalList, responses=READ,
            summary="Approvals of held tool calls, newest first")
async def list_approvals(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope,
    status_filter: StatusFilter = "",
    limit: Limit = 100,
) -> ApprovalList:
    approvals = await runtime.approvals_of(conversation_id, owner=owner, status=status_filter,
                                           limit=limit)
    return ApprovalList(approvals=[ApprovalOut.of(a) for a in approvals])


@router.post("/{conversation_id}/approvals/{approval_id}/decision",
             response_model=ApprovalOut, responses=WRITE,
             summary="Approve or deny a held tool call (terminal; repeating it changes nothing)")
async def decide(
    conversation_id: ConversationId, approval_id: ApprovalId, body: Decision, runtime: RuntimeDep,
    owner: Scope, actor: Actor,
) -> ApprovalOut:
    decided = await runtime.decide(conversation_id, approval_id, approve=body.approve,
                                   decided_by=actor, owner=owner)
    return ApprovalOut.of(decided)


# -- questions ---------------------------------------------------------------------------------


@router.get("/{conversation_id}/questions", response_model=QuestionList, responses=READ,
            summary="Questions the conversation's MCP servers asked its people, newest first")
async def list_questions(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope,
    status_filter: StatusFilter = "",
    limit: Limit = 100,
) -> QuestionList:
    questions = await runtime.questions_of(conversation_id, owner=owner, status=status_filter,
                                           limit=limit)
    return QuestionList(questions=[QuestionOut.of(q) for q in questions])


@router.post("/{conversation_id}/questions/{question_id}/answer",
             response_model=QuestionOut, responses=WRITE,
             summary="Answer a question (once: accept with content that fits its schema, "
                     "decline or cancel; repeating it changes nothing)")
async def answer_question(
    conversation_id: ConversationId, question_id: QuestionId, body: QuestionAnswer,
    runtime: RuntimeDep, owner: Scope, actor: Actor,
) -> QuestionOut:
    answered = await runtime.answer(conversation_id, question_id, action=body.action,
                                    content=body.content, decided_by=actor, owner=owner)
    return QuestionOut.of(answered)


# -- transcript and runs -----------------------------------------------------------------------


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
    return RunList(items=[RunOut.of(r) for r in await runtime.runs(conversation_id, owner=owner)])


@router.get("/{conversation_id}/runs/{run_id}", response_model=RunOut, responses=READ)
async def get_run(
    conversation_id: ConversationId, run_id: RunId, runtime: RuntimeDep, owner: Scope
) -> RunOut:
    await runtime.conversation(conversation_id, owner=owner)
    run = await runtime.run(run_id, owner=owner)
    if run.conversation_id != conversation_id:
        raise UnknownRunError(run_id)
    return RunOut.of(run)


# -- tasks and results -------------------------------------------------------------------------


@router.get("/{conversation_id}/tasks", response_model=TaskPage, responses=READ)
async def list_tasks(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope,
    before_us: BeforeUs = None, limit: Limit = 100,
) -> TaskPage:
    tasks = await runtime.task_list(conversation_id, owner=owner, before_us=before_us,
                                    limit=limit)
    return TaskPage(
        items=[TaskOut.of(t) for t in tasks],
        next_before_us=tasks[-1].started_at_us if len(tasks) == limit else None,
    )


@router.get("/{conversation_id}/tasks/{task_key}", response_model=TaskOut, responses=READ)
async def get_task(
    conversation_id: ConversationId, task_key: TaskKey, runtime: RuntimeDep, owner: Scope
) -> TaskOut:
    return TaskOut.of(await runtime.task(conversation_id, task_key, owner=owner))


# Output is the owner's: an operator's token reads a conversation's task facts, not the output
# its results hold (403 unless the token is also the owner's).
@router.get("/{conversation_id}/results", response_model=ResultList, responses=READ,
            summary="The conversation's result envelopes (its owner's token)")
async def list_results(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Principal, after: Cursor = "",
    limit: Limit = 100,
) -> ResultList:
    refs = await runtime.result_list(conversation_id, owner=owner, after=after, limit=limit)
    return ResultList(
        items=[ResultRefOut.of(r) for r in refs],
        next_after=refs[-1].result_id if len(refs) == limit else None,
    )


@router.get("/{conversation_id}/results/{result_id}", response_model=ResultPageOut,
            responses=READ,
            summary="One page of a result; unknown and foreign ids answer the same 404")
async def get_result_page(
    conversation_id: ConversationId, result_id: ResultId, runtime: RuntimeDep, owner: Principal,
    offset: Offset = 0,
    limit_bytes: LimitBytes = None,
) -> ResultPageOut:
    page = await runtime.result_page(conversation_id, result_id, owner=owner, offset=offset,
                                     limit_bytes=limit_bytes)
    return ResultPageOut.of(page)


# -- signals -----------------------------------------------------------------------------------


@router.get("/{conversation_id}/signals/stats", response_model=QueueStatsOut, responses=READ,
            tags=["signals"])
async def conversation_signal_stats(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope
) -> QueueStatsOut:
    return QueueStatsOut.of(await runtime.signal_stats(conversation_id, owner=owner))


@router.get("/{conversation_id}/dead-letters", response_model=DeadLetterList, responses=READ,
            tags=["signals"])
async def conversation_dead_letters(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope, limit: Limit = 100
) -> DeadLetterList:
    letters = await runtime.dead_letters(conversation_id, owner=owner, limit=limit)
    return DeadLetterList(items=[DeadLetterOut.of(d) for d in letters])


# -- the event feed ----------------------------------------------------------------------------


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


__all__ = ("router",)
