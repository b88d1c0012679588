"""What an A2A message says, and what one sent to a task that waits for input decides.

- A message's words are its text parts, and its data parts as JSON, one a line; files are
  refused (a conversation holds words).
- A message naming a ``taskId`` that waits for input decides it: ``approve`` / ``deny`` (text,
  or a data part ``{"decision": ...}``) for held tool calls; a data part ``{"action":
  "accept", "content": {...}}`` (or the text ``decline`` / ``cancel``) for a question.
"""

from __future__ import annotations

import json
from typing import Any

from a2a.types.a2a_pb2 import Message, TaskState
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    InvalidParamsError,
    UnsupportedOperationError,
)
from google.protobuf.json_format import MessageToDict

from tidings.errors import (
    ApprovalDecidedError,
    InvalidInputError,
    QuestionDecidedError,
    UnknownApprovalError,
    UnknownQuestionError,
)
from tidings.service.a2a.stores import Caller, find_input
from tidings.service.a2a.tasks import read_task
from tidings.types import Input

_APPROVE = {"approve", "approved", "yes", "allow"}
_DENY = {"deny", "denied", "no", "reject"}
_ANSWER_ACTIONS = {"accept", "decline", "cancel"}


def content_of(message: Message) -> str:
    """The words of an A2A message: its text parts, and its data parts as JSON, one a line.
    Files are refused (a conversation holds words)."""
    lines: list[str] = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            lines.append(part.text)
        elif kind == "data":
            lines.append(json.dumps(MessageToDict(part.data), ensure_ascii=False))
        else:
            raise ContentTypeNotSupportedError(
                f"a {kind or 'empty'} part: this agent takes text and data parts")
    text = "\n".join(lines)
    if not text.strip():
        raise InvalidParamsError("the message has no words")
    return text


def _decision(message: Message) -> dict[str, Any]:
    """What a message sent to an input-required task decides (see the module docstring)."""
    for part in message.parts:
        if part.WhichOneof("content") == "data":
            data = MessageToDict(part.data)
            if isinstance(data, dict):
                return data
        elif part.WhichOneof("content") == "text":
            word = part.text.strip().lower()
            if word in _APPROVE:
                return {"decision": "approve"}
            if word in _DENY:
                return {"decision": "deny"}
            if word in ("decline", "cancel"):
                return {"action": word}
    return {}


async def decide(caller: Caller, message: Message) -> Input:
    """A message to a task that waits for input decides what it waits for."""
    runtime, owner = caller.runtime, caller.principal
    item = await find_input(caller, message.task_id)
    if message.context_id and message.context_id != item.conversation_id:
        raise InvalidParamsError(f"task {item.input_id!r} is not in context "
                                 f"{message.context_id!r}")
    task = await read_task(runtime, item, owner=owner, history=False)
    if task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
        raise UnsupportedOperationError(
            f"task {item.input_id!r} does not wait for input: send a new message in its "
            "context instead")
    run_id = task.metadata["tidings"]["run_id"]
    decision = _decision(message)
    conversation_id = item.conversation_id
    try:
        if "decision" in decision:
            word = str(decision["decision"]).lower()
            if word not in _APPROVE | _DENY:
                raise InvalidParamsError('a decision is "approve" or "deny"')
            for approval in await runtime.approvals.list(conversation_id, owner=owner,
                                                         status="pending"):
                if approval.run_id == run_id:
                    await runtime.approvals.decide(conversation_id, approval.approval_id,
                                                   approve=word in _APPROVE, decided_by=owner,
                                                   owner=owner)
        elif "action" in decision:
            action = str(decision["action"]).lower()
            if action not in _ANSWER_ACTIONS:
                raise InvalidParamsError('an action is "accept", "decline" or "cancel"')
            content = decision.get("content")
            for question in await runtime.questions.list(conversation_id, owner=owner,
                                                         status="pending"):
                if question.run_id == run_id:
                    await runtime.questions.answer(
                        conversation_id, question.question_id, action=action,
                        content=content if isinstance(content, dict) else None,
                        decided_by=owner, owner=owner)
                    break  # one answer per message: each question has its own form
        else:
            raise InvalidParamsError(
                'this task waits for a decision: "approve" or "deny" for a tool call, or '
                'a data part {"action": "accept", "content": {...}} for a question')
    except (ApprovalDecidedError, QuestionDecidedError, UnknownApprovalError,
            UnknownQuestionError, InvalidInputError) as exc:
        raise InvalidParamsError(exc.message) from None
    return item


__all__ = ("content_of", "decide")
