"""Questions: what something outside the conversation asks a person -- an MCP server's
elicitation during a call or for a task, or its request for a model completion under the
``ask`` policy -- held durably on the conversation until a person answers it, once.

- A question is asked in one unit that commits it and a ``question_asked`` event; asking the
  same thing again (the same ``ask_key``: one call's request, one task's input request) is the
  same question, so a process that restarts and hears the request again does not ask twice.
- The answer is a person's: it enters only through :meth:`Questions.decide`, on behalf of one
  who owns the conversation, never from anything the runtime or a model does. It is
  ``accepted`` (with content valid against the requested schema), ``declined`` or
  ``cancelled``; a question nobody answers in time is ``expired``. Each is terminal: the same
  answer again is answered with the question as it is, a different one is refused with
  :class:`QuestionDecidedError`.
- A question whose asker is gone expires with it: the run that waits on it ended (stopped,
  failed, interrupted by a crash), or the task that asked ended. A crash while a question is
  pending leaves it pending (a task's question is still asked after the restart) or expired
  (the call that asked died with its process); never answered.

Waiting is a hint plus a poll, as for approvals: an answer in this process wakes its waiter at
once, one given through another instance is seen at the next poll.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from tidings.clock import Clock, to_us
from tidings.errors import InvalidInputError, QuestionDecidedError, UnknownQuestionError
from tidings.records.rows import listed
from tidings.records.transcript import ConversationTx
from tidings.store import Row, Store, Tx
from tidings.types import new_id

STATUSES = ("pending", "accepted", "declined", "cancelled", "expired")
ACTIONS = {"accept": "accepted", "decline": "declined", "cancel": "cancelled"}
"""A person's answer, and the status it leaves."""
KINDS = ("elicitation", "sampling")
MESSAGE_LIMIT = 8_192
SCHEMA_LIMIT = 32_768
ANSWER_LIMIT = 65_536


@dataclass(frozen=True, slots=True)
class QuestionConfig:
    """How long a question waits for a person, and how often a waiter looks."""

    ttl: timedelta = timedelta(hours=1)
    poll: timedelta = timedelta(milliseconds=250)


@dataclass(frozen=True, slots=True)
class Question:
    """One question to a person of a conversation, and its answer once there is one.

    ``run_id``: the run whose call waits on it (none for a task's question); ``task_id``: the
    task that asked (none for a call's). ``asker`` names who asks (``mcp:<server>``)."""

    question_id: str
    conversation_id: str
    run_id: str | None
    task_id: str | None
    asker: str
    kind: str
    message: str
    requested_schema: dict[str, Any]
    status: str
    answer: dict[str, Any] | None
    decided_by: str | None
    requested_at_us: int
    expires_at_us: int
    decided_at_us: int | None
    delivered_at_us: int | None

    @property
    def action(self) -> str | None:
        """``accept``, ``decline`` or ``cancel`` once a person answered (an expired question
        reads as ``cancel``: nobody accepted); ``None`` while pending."""
        if self.status == "pending":
            return None
        return {"accepted": "accept", "declined": "decline"}.get(self.status, "cancel")


def question_from_row(row: Row) -> Question:
    return Question(
        question_id=row["question_id"], conversation_id=row["conversation_id"],
        run_id=row["run_id"], task_id=row["task_id"], asker=row["asker"], kind=row["kind"],
        message=row["message"], requested_schema=json.loads(row["requested_schema"]),
        status=row["status"],
        answer=None if row["answer"] is None else json.loads(row["answer"]),
        decided_by=row["decided_by"], requested_at_us=int(row["requested_at_us"]),
        expires_at_us=int(row["expires_at_us"]), decided_at_us=row["decided_at_us"],
        delivered_at_us=row["delivered_at_us"],
    )


def expire_run_questions(cx: ConversationTx, run_id: str) -> None:
    """The run is over: the questions its calls wait on can never be answered to them."""
    cx.tx.run_later("expire_run_questions", run_id=run_id, now_us=cx.now_us)


def form_validator(schema: Mapping[str, Any]) -> Draft202012Validator:
    """The validator of a requested schema: an object schema (what a form can ask)."""
    if schema.get("type") != "object":
        raise InvalidInputError("a question's requested schema must be of type 'object'")
    try:
        Draft202012Validator.check_schema(dict(schema))
    except SchemaError as exc:
        raise InvalidInputError(f"a question's requested schema is not valid: {exc.message}"
                                ) from None
    return Draft202012Validator(dict(schema))


class Questions:
    """Asking, waiting, answering and reading questions."""

    def __init__(self, store: Store, clock: Clock, config: QuestionConfig | None = None) -> None:
        self.store = store
        self.clock = clock
        self.config = config or QuestionConfig()
        self._answered: dict[str, asyncio.Event] = {}

    # -- asking -------------------------------------------------------------------------------

    async def ask(
        self, conversation_id: str, *, asker: str, kind: str, ask_key: str, message: str,
        schema: Mapping[str, Any], run_id: str | None = None, task_id: str | None = None,
    ) -> Question:
        """The question, asked once: a second ask with the same ``ask_key`` returns the first
        (whatever became of it). A schema no form could answer is refused."""
        if kind not in KINDS:
            raise InvalidInputError(f"kind must be one of {', '.join(KINDS)}")
        form_validator(schema)
        text = json.dumps(dict(schema), ensure_ascii=False)
        if len(text) > SCHEMA_LIMIT:
            raise InvalidInputError(f"a question's schema is over {SCHEMA_LIMIT} characters")
        message = message[:MESSAGE_LIMIT]

        def unit(tx: Tx) -> Question:
            cx = ConversationTx.lock(tx, conversation_id, self.clock)
            question_id = new_id("qst")
            tx.execute(
                "insert_question", question_id=question_id, conversation_id=conversation_id,
                run_id=run_id, task_id=task_id, asker=asker, kind=kind, ask_key=ask_key,
                message=message, requested_schema=text, now_us=cx.now_us,
                expires_at_us=cx.now_us + to_us(self.config.ttl))
            row = tx.one("question_by_key", ask_key=ask_key)
            assert row is not None
            question = question_from_row(row)
            if question.question_id == question_id:  # asked now, not before
                cx.record_event("question_asked", {
                    "question_id": question_id, "asker": asker, "kind": kind,
                    "message": message, "requested_schema": dict(schema),
                    "run_public_id": run_id, "task_id": task_id,
                }, run_id)
                cx.save()
            return question

        return await self.store.transact(unit, route=conversation_id)

    # -- waiting ------------------------------------------------------------------------------

    async def wait(self, question_id: str, *,
                   waiting: Callable[[], None] | None = None) -> Question:
        """Wait until the question is answered or has expired; returns it as it then is.
        ``waiting`` is called at each look while it is pending (a sign of life for whoever
        waits on the waiter)."""
        event = self._answered.setdefault(question_id, asyncio.Event())
        poll = to_us(self.config.poll) / 1e6
        try:
            while True:
                question = await self.get(question_id)
                if question.status != "pending":
                    return question
                if self.clock.now_us() >= question.expires_at_us:
                    await self._expire(question)
                    continue
                if waiting is not None:
                    waiting()
                await self.clock.wait(event, poll)
                event.clear()
        finally:
            self._answered.pop(question_id, None)

    async def delivered(self, question: Question) -> None:
        """The answer reached the asker (recorded once)."""
        await self.store.transact(lambda tx: tx.execute(
            "deliver_question", question_id=question.question_id, now_us=self.clock.now_us()),
            route=question.conversation_id)

    async def expire_task(self, conversation_id: str, task_id: str) -> None:
        """The task that asked ended: its pending questions can never be answered to it."""
        def unit(tx: Tx) -> None:
            cx = ConversationTx.lock(tx, conversation_id, self.clock)
            for row in tx.all("expire_task_questions", task_id=task_id, now_us=cx.now_us):
                cx.record_event("question_answered", {"question_id": row["question_id"],
                                                      "status": "expired"}, None)
            cx.save()

        await self.store.transact(unit, route=conversation_id)

    async def _expire(self, question: Question) -> None:
        def unit(tx: Tx) -> None:
            cx = ConversationTx.lock(tx, question.conversation_id, self.clock)
            self._expire_in(cx, question)
            cx.save()

        await self.store.transact(unit, route=question.conversation_id)

    @staticmethod
    def _expire_in(cx: ConversationTx, question: Question) -> None:
        if cx.tx.one("decide_question", question_id=question.question_id, status="expired",
                     answer=None, decided_by=None, now_us=cx.now_us) is not None:
            cx.record_event("question_answered", {"question_id": question.question_id,
                                                  "status": "expired"}, question.run_id)

    # -- a person's answer --------------------------------------------------------------------

    async def decide(
        self, conversation_id: str, question_id: str, *, action: str,
        content: Mapping[str, Any] | None = None, decided_by: str, owner: str | None = None,
    ) -> Question:
        """A person's answer: ``accept`` (with ``content`` valid against the requested
        schema), ``decline`` or ``cancel``. Unknown and foreign ids are the same error."""
        if not decided_by or len(decided_by) > 200:
            raise InvalidInputError("decided_by names the person answering (1-200 characters)")
        if action not in ACTIONS:
            raise InvalidInputError(f"action must be one of {', '.join(ACTIONS)}")
        if action != "accept" and content:
            raise InvalidInputError(f"an answer that is {ACTIONS[action]} carries no content")
        wanted = ACTIONS[action]
        answer = dict(content or {}) if action == "accept" else None
        text = None if answer is None else json.dumps(answer, ensure_ascii=False)
        if text is not None and len(text) > ANSWER_LIMIT:
            raise InvalidInputError(f"an answer is at most {ANSWER_LIMIT} characters")

        def unit(tx: Tx) -> Question:
            cx = ConversationTx.lock(tx, conversation_id, self.clock)
            row = tx.one("get_question", question_id=question_id)
            if row is None or row["conversation_id"] != conversation_id or (
                owner is not None and cx.conversation.owner != owner
            ):
                raise UnknownQuestionError(question_id)
            current = question_from_row(row)
            if current.status != "pending":
                return current
            if cx.now_us >= current.expires_at_us:
                self._expire_in(cx, current)
                cx.save()
                return question_from_row(tx.one("get_question", question_id=question_id) or row)
            if answer is not None:
                answer.update({k: v for k, v in _defaults(current).items() if k not in answer})
                _validate(current, answer)
                answer.update(_integers(current, answer))
            text = None if answer is None else json.dumps(answer, ensure_ascii=False)
            tx.one("decide_question", question_id=question_id, status=wanted, answer=text,
                   decided_by=decided_by, now_us=cx.now_us)
            cx.record_event("question_answered", {"question_id": question_id, "status": wanted,
                                                  "decided_by": decided_by}, current.run_id)
            cx.save()
            return question_from_row(tx.one("get_question", question_id=question_id) or row)

        decided = await self.store.transact(unit, route=conversation_id)
        event = self._answered.get(question_id)
        if event is not None:
            event.set()
        if decided.status != wanted or (answer is not None and not _same(decided, answer)):
            raise QuestionDecidedError(question_id, decided.status)
        return decided

    # -- reading ------------------------------------------------------------------------------

    async def get(self, question_id: str) -> Question:
        row = await self.store.read(lambda tx: tx.one("get_question", question_id=question_id))
        if row is None:
            raise UnknownQuestionError(question_id)
        return question_from_row(row)

    async def list(
        self, conversation_id: str, *, status: str = "", limit: int = 100
    ) -> list[Question]:
        rows = await listed(self.store, "conversation_questions", conversation_id,
                            status=status, statuses=STATUSES, limit=limit)
        return [question_from_row(r) for r in rows]


def _defaults(question: Question) -> dict[str, Any]:
    """What the question's form holds before a person changes it: each field's default."""
    properties = question.requested_schema.get("properties")
    if not isinstance(properties, Mapping):
        return {}
    return {name: field["default"] for name, field in properties.items()
            if isinstance(field, Mapping) and "default" in field}


def _integers(question: Question, answer: Mapping[str, Any]) -> dict[str, int]:
    """The fields the schema types ``integer`` that arrived as whole floats (2.0: JSON written
    by a protocol that knows only numbers), as the integers they are."""
    properties = question.requested_schema.get("properties")
    if not isinstance(properties, Mapping):
        return {}
    return {name: int(value) for name, value in answer.items()
            if isinstance(value, float) and value.is_integer()
            and isinstance(properties.get(name), Mapping)
            and properties[name].get("type") == "integer"}


def _same(question: Question, answer: Mapping[str, Any]) -> bool:
    """Whether ``answer`` (defaults filled or not) is the answer the question holds."""
    held = question.answer or {}
    return {**_defaults(question), **answer} == held


def _validate(question: Question, answer: dict[str, Any]) -> None:
    """An accepted answer is what the question asked for; else nothing is decided."""
    errors = sorted(form_validator(question.requested_schema).iter_errors(answer),
                    key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "the answer"
        raise InvalidInputError(f"the answer does not fit the question's schema: {where}: "
                                f"{first.message}")


__all__ = ("ACTIONS", "STATUSES", "Question", "QuestionConfig", "Questions",
           "expire_run_questions", "form_validator")
