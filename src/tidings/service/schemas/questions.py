"""The HTTP bodies of questions: what an MCP server asked a person of the conversation, and the
answer (re-exported by :mod:`tidings.service.schemas`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from tidings.conversations.questions import Question
from tidings.service.schemas.request import RequestBody


class QuestionAnswer(RequestBody):
    """A person's answer to a question an MCP server asked: ``accept`` with ``content`` that
    fits the question's schema, ``decline`` or ``cancel``."""

    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = None


class QuestionOut(BaseModel):
    """A question an MCP server asked a person of the conversation, and its answer."""

    question_id: str
    conversation_id: str
    run_id: str | None = Field(description="The run whose call waits on it (a call's).")
    task_key: str | None = Field(description="The background task that asked (a task's).")
    asker: str = Field(description="Who asks: mcp:<server>.")
    kind: Literal["elicitation", "sampling"] = Field(description=(
        "elicitation: the server asks for what requested_schema describes; sampling: the "
        "server asks for the conversation's model to answer (accept lets it)."))
    message: str
    requested_schema: dict[str, Any]
    status: Literal["pending", "accepted", "declined", "cancelled", "expired"]
    answer: dict[str, Any] | None
    decided_by: str | None
    requested_at_us: int
    expires_at_us: int
    decided_at_us: int | None
    delivered_at_us: int | None = Field(description="When the answer reached the server.")

    @classmethod
    def of(cls, q: Question) -> QuestionOut:
        return cls(
            question_id=q.question_id, conversation_id=q.conversation_id, run_id=q.run_id,
            task_key=q.task_id, asker=q.asker, kind=q.kind,  # type: ignore[arg-type]
            message=q.message, requested_schema=q.requested_schema,
            status=q.status,  # type: ignore[arg-type]
            answer=q.answer, decided_by=q.decided_by, requested_at_us=q.requested_at_us,
            expires_at_us=q.expires_at_us, decided_at_us=q.decided_at_us,
            delivered_at_us=q.delivered_at_us,
        )


class QuestionList(BaseModel):
    questions: list[QuestionOut]

