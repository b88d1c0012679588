"""Questions: what the conversation's MCP servers asked its people, and a person's answer."""

from __future__ import annotations

from tidings.service.auth import Actor, Scope
from tidings.service.params import ConversationId, Limit, QuestionId, StatusFilter
from tidings.service.routes.common import READ, WRITE, RuntimeDep, router
from tidings.service.schemas import QuestionAnswer, QuestionList, QuestionOut


@router.get("/{conversation_id}/questions", response_model=QuestionList, responses=READ,
            summary="Questions the conversation's MCP servers asked its people, newest first")
async def list_questions(
    conversation_id: ConversationId, runtime: RuntimeDep, owner: Scope,
    status_filter: StatusFilter = "",
    limit: Limit = 100,
) -> QuestionList:
    questions = await runtime.questions.list(conversation_id, owner=owner, status=status_filter,
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
    answered = await runtime.questions.answer(conversation_id, question_id, action=body.action,
                                              content=body.content, decided_by=actor, owner=owner)
    return QuestionOut.of(answered)

