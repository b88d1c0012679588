"""What an MCP server asks of tidings: a person's answer (elicitation), a completion of the
conversation's model (sampling), the roots it may work in.

Every such request is asked *for* someone: the call that is running (a tool call of a turn),
or the task that asked (a background call the server runs as its task). Which one is known
exactly when the request travels with the call -- on the 2026-07-28 wire, where the SDK
answers the call's input requests inside the call itself, and for a task's input requests,
which tidings reads from the task -- or from the request's related-task mark; on the older
wire, where a server sends its request beside the call, it is the connection's only call in
flight. A request that cannot be placed is refused: it is never asked in the wrong
conversation.

- **Elicitation** is a durable question on the conversation
  (:mod:`tidings.conversations.questions`),
  answered by a person, once; the call waits for it (its idle timeout paused while it
  waits). A URL-mode request is a question whose message names the URL.
- **Sampling** follows the server's policy: ``refuse`` (a clean MCP error), ``ask`` (a
  question of kind ``sampling`` first: a person accepts or declines), ``allow``. The
  conversation's models answer as a step of the run does, and the tokens count on the run.
  Sampling is answered only during a call of a turn: a task's request has no run to count on
  and is refused.
- **Roots** are the server's declared ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from mcp.client.session import ClientRequestContext
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitRequestURLParams,
    ElicitResult,
    ErrorData,
    ListRootsResult,
    Root,
    TextContent,
)
from pydantic import TypeAdapter, ValidationError

from tidings.conversations.questions import Question, Questions
from tidings.errors import TidingsError
from tidings.mcp.declaration import MCPServer
from tidings.models.base import ModelRequest, PromptMessage
from tidings.tools.registry import Sampler

log = logging.getLogger("tidings.mcp")

RELATED_TASK = "io.modelcontextprotocol/related-task"
USER_REFUSED = -1
"""The MCP error code of a request a person declined (the SDK's convention for sampling)."""
NO_FORM = {"type": "object", "properties": {}}
"""What a question that asks only yes or no requests."""


@dataclass(eq=False)
class Asker:
    """Whom a server's request is asked for: one call of a run, or one task."""

    conversation_id: str
    key: str
    """Names the call or the task in every question it asks (its ask keys begin with it)."""
    run_id: str | None = None
    task_id: str | None = None
    alive: asyncio.Event | None = None
    """Set while a question waits: the call's idle timeout does not run out meanwhile."""
    sample: Sampler | None = None
    asked: int = field(default=0)


_CURRENT: ContextVar[Asker | None] = ContextVar("tidings_mcp_asker", default=None)
_ELICIT: TypeAdapter[ElicitRequestParams] = TypeAdapter(ElicitRequestParams)


class Asking:
    """One server's requests to tidings, each placed and answered (see the module)."""

    def __init__(self, server: MCPServer, questions: Questions | None) -> None:
        self.server = server
        self._questions = questions
        self._calls: set[Asker] = set()
        self._tasks: dict[str, Asker] = {}

    @property
    def asker_name(self) -> str:
        return f"mcp:{self.server.name}"

    @contextlib.contextmanager
    def calling(self, asker: Asker | None) -> Iterator[None]:
        """While a call is made for ``asker``: what the server asks during it is its."""
        if asker is None:
            yield
            return
        token = _CURRENT.set(asker)
        self._calls.add(asker)
        try:
            yield
        finally:
            self._calls.discard(asker)
            _CURRENT.reset(token)

    @contextlib.contextmanager
    def task(self, mcp_task_id: str, asker: Asker) -> Iterator[None]:
        """While tidings reads a task's result: what the server asks for it is the task's."""
        self._tasks[mcp_task_id] = asker
        token = _CURRENT.set(asker)
        try:
            yield
        finally:
            _CURRENT.reset(token)
            if self._tasks.get(mcp_task_id) is asker:
                del self._tasks[mcp_task_id]

    def _who(self, context: ClientRequestContext, params: Any) -> Asker | None:
        current = _CURRENT.get()
        if current is not None:
            return current
        for meta in (getattr(params, "meta", None), context.meta):
            related = _related_task(meta)
            if related is not None and related in self._tasks:
                return self._tasks[related]
        candidates = {*self._calls, *self._tasks.values()}
        if len(candidates) == 1:
            return next(iter(candidates))
        return None

    # -- the SDK's callbacks ------------------------------------------------------------------

    async def elicit(self, context: ClientRequestContext, params: ElicitRequestParams
                     ) -> ElicitResult | ErrorData:
        asker = self._who(context, params)
        if asker is None or self._questions is None:
            return self._unplaced("elicitation", asker is None)
        try:
            question = await self.ask(asker, params)
        except TidingsError as exc:
            return ErrorData(code=INVALID_REQUEST, message=exc.message)
        return _elicit_result(question)

    async def sample(self, context: ClientRequestContext, params: CreateMessageRequestParams
                     ) -> CreateMessageResult | ErrorData:
        policy = self.server.sampling
        if policy == "refuse":
            return ErrorData(code=INVALID_REQUEST, message=(
                f"tidings does not let MCP server {self.server.name!r} ask for completions "
                "(its sampling policy is 'refuse')"))
        asker = self._who(context, params)
        if asker is None or asker.sample is None:
            return ErrorData(code=INVALID_REQUEST, message=(
                "tidings answers a completion request only during a call of a turn, and "
                "cannot tell which call this one belongs to" if asker is None else
                "tidings answers a completion request only during a call of a turn: a "
                "background task's request has no run to answer it"))
        try:
            request = _model_request(params)
        except ValueError as exc:
            return ErrorData(code=INVALID_REQUEST, message=str(exc))
        if policy == "ask":
            if self._questions is None:
                return self._unplaced("sampling", False)
            try:
                question = await self._ask(asker, "sampling", _sampling_question(params),
                                           NO_FORM, _digest(params))
            except TidingsError as exc:
                return ErrorData(code=INVALID_REQUEST, message=exc.message)
            if question.status != "accepted":
                return ErrorData(code=USER_REFUSED, message=(
                    f"a person of the conversation {question.status} the request"
                    if question.status != "expired" else "nobody answered the request in time"))
        try:
            reply = await asker.sample(request)
        except TidingsError as exc:
            return ErrorData(code=INTERNAL_ERROR, message=exc.message)
        return CreateMessageResult(role="assistant", content=TextContent(type="text",
                                                                         text=reply.text),
                                   model=reply.model or request.model,
                                   stop_reason=_stop_reason(reply.stop_reason))

    async def roots(self, context: ClientRequestContext) -> ListRootsResult | ErrorData:
        return ListRootsResult(roots=[Root(uri=uri, name=uri.rsplit("/", 1)[-1] or uri)  # type: ignore[arg-type]
                                      for uri in self.server.roots])

    async def task_ended(self, conversation_id: str, task_key: str) -> None:
        """The task ended: what it still asks can never be answered to it."""
        if self._questions is not None:
            await self._questions.expire_task(conversation_id, task_key)

    # -- asking a person ----------------------------------------------------------------------

    async def ask(self, asker: Asker, params: ElicitRequestParams) -> Question:
        """The elicitation as a question of ``asker``'s conversation, once answered (or
        expired)."""
        return await self._ask(asker, "elicitation", *_shown(params), _digest(params))

    async def answer_current(self, task_id: str, requests: Mapping[str, Any]
                             ) -> dict[str, Any]:
        """A foreground call's task waits for input: its requests are the call's."""
        asker = _CURRENT.get()
        if asker is None or self._questions is None:
            return {key: {"action": "cancel"} for key in requests}
        return await self.answer_inputs(asker, requests, f"task:{task_id}:")

    async def answer_inputs(self, asker: Asker, requests: Mapping[str, Any],
                            tag: str = "") -> dict[str, Any]:
        """A task's input requests (the tasks extension's ``inputRequests``), each answered:
        what ``tasks/update`` sends back. Only elicitation is answered there; anything else
        is declined with a cancel."""
        responses: dict[str, Any] = {}
        for key, payload in requests.items():
            method = payload.get("method") if isinstance(payload, Mapping) else None
            params = payload.get("params") if isinstance(payload, Mapping) else None
            result: ElicitResult
            if method == "elicitation/create" and isinstance(params, Mapping):
                try:
                    parsed = _ELICIT.validate_python(dict(params))
                    question = await self._ask(asker, "elicitation", *_shown(parsed),
                                               f"{tag}input:{key}")
                    result = _elicit_result(question)
                except (ValidationError, TidingsError) as exc:
                    log.warning("MCP server %s: input request %s of %s cannot be asked: %s",
                                self.server.name, key, asker.key, exc)
                    result = ElicitResult(action="cancel")
            else:
                log.warning("MCP server %s asks %s for %r, which tidings answers only during "
                            "a call: cancelled", self.server.name, asker.key, method)
                result = ElicitResult(action="cancel")
            responses[key] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        return responses

    async def _ask(self, asker: Asker, kind: str, message: str, schema: Mapping[str, Any],
                   tag: str) -> Question:
        assert self._questions is not None
        asker.asked += 1
        question = await self._questions.ask(
            asker.conversation_id, asker=self.asker_name, kind=kind,
            ask_key=f"{asker.key}:{tag}", message=message, schema=schema,
            run_id=asker.run_id, task_id=asker.task_id)
        alive = asker.alive
        answered = await self._questions.wait(
            question.question_id, waiting=None if alive is None else alive.set)
        if answered.delivered_at_us is None:
            await self._questions.delivered(answered)
        return answered

    def _unplaced(self, what: str, unplaced: bool) -> ErrorData:
        if unplaced:
            log.warning("MCP server %s asked for %s outside any call tidings can place: "
                        "refused", self.server.name, what)
            return ErrorData(code=INVALID_REQUEST, message=(
                f"tidings cannot tell which conversation this {what} is for (no call of "
                "this server is in flight, or several are): refused"))
        return ErrorData(code=INVALID_REQUEST, message=f"tidings takes no {what} here")


def _related_task(meta: Any) -> str | None:
    if meta is None:
        return None
    data = meta if isinstance(meta, Mapping) else (getattr(meta, "model_extra", None) or {})
    related = data.get(RELATED_TASK)
    task_id = related.get("taskId") if isinstance(related, Mapping) else None
    return task_id if isinstance(task_id, str) else None


def _shown(params: ElicitRequestParams) -> tuple[str, Mapping[str, Any]]:
    if isinstance(params, ElicitRequestURLParams):
        return f"{params.message}\n\nOpen: {params.url}", NO_FORM
    assert isinstance(params, ElicitRequestFormParams)
    return params.message, params.requested_schema


def _digest(params: Any) -> str:
    """What names one request among a caller's: its content (the same request asked again
    after a restart is the same question)."""
    dumped = params.model_dump(by_alias=True, mode="json", exclude_none=True, exclude={"meta"})
    text = json.dumps(dumped, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _elicit_result(question: Question) -> ElicitResult:
    action = question.action or "cancel"
    if action == "accept":
        return ElicitResult(action="accept", content=question.answer or {})
    return ElicitResult(action=action)  # type: ignore[arg-type]


def _model_request(params: CreateMessageRequestParams) -> ModelRequest:
    messages: list[PromptMessage] = []
    for message in params.messages:
        blocks = message.content if isinstance(message.content, list) else [message.content]
        texts = []
        for block in blocks:
            if not isinstance(block, TextContent):
                raise ValueError(f"tidings passes text to its models; this request holds "
                                 f"{getattr(block, 'type', type(block).__name__)} content")
            texts.append(block.text)
        messages.append(PromptMessage("user" if message.role == "user" else "assistant",
                                      "\n".join(texts)))
    if not messages:
        raise ValueError("the request holds no messages")
    return ModelRequest(model="", system=params.system_prompt or "", tools=(),
                        messages=tuple(messages), max_output_tokens=max(1, params.max_tokens))


def _sampling_question(params: CreateMessageRequestParams) -> str:
    last = params.messages[-1] if params.messages else None
    text = ""
    if last is not None:
        blocks = last.content if isinstance(last.content, list) else [last.content]
        text = " ".join(b.text for b in blocks if isinstance(b, TextContent))
    return (f"The MCP server asks the conversation's model to answer "
            f"({len(params.messages)} message(s), at most {params.max_tokens} tokens): "
            f"{text[:2_000]}")


def _stop_reason(reason: str | None) -> str:
    return {"tool_calls": "toolUse", "length": "maxTokens", "max_tokens": "maxTokens"}.get(
        reason or "", "endTurn")


__all__ = ("Asker", "Asking")
