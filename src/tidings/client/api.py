""":class:`Client`: the library's verbs over HTTP, against ``tidings serve`` (or an app that
mounts the service), typed with the service's own response models."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from types import TracebackType
from typing import Any, Literal, TypeVar, overload
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from tidings.client.feed import FeedLost, FeedResumed, follow
from tidings.client.lean import Lean, LeanError
from tidings.client.problems import ServiceUnreachableError, error_of, problem_of
from tidings.client.wire import Transport
from tidings.client.wire import transport as default_transport
from tidings.service.schemas import (
    AnswerOut,
    ApprovalList,
    ApprovalOut,
    ConversationOut,
    ConversationPage,
    DeadLetterList,
    DeadLetterOut,
    EventOut,
    EventPage,
    InputList,
    InputOut,
    InstanceList,
    InstanceOut,
    PushDeadLetterList,
    PushDeadLetterOut,
    QuestionList,
    QuestionOut,
    QueueStatsOut,
    ResultList,
    ResultPageOut,
    RunList,
    RunOut,
    RunStopped,
    Stopped,
    TaskOut,
    TaskPage,
    Transcript,
)
from tidings.types import GoalStatus

M = TypeVar("M", bound=BaseModel)

ROOT = "/v1/conversations"

FEED_READ_S = 60.0
"""How long the feed may be silent before it is taken as lost (the service pings sooner)."""


class Client:
    """An async client of the tidings HTTP service, acting as the principal of ``token``.

    Use it as ``async with tidings.Client(url, token) as client:`` (or call :meth:`aclose`).
    Every method answers the service's own pydantic model; a refusal raises the library's own
    :class:`~tidings.TidingsError` subclass -- ``UnknownConversationError`` for an unknown (or
    another principal's) conversation, ``InputQueueFullError``, ``ApprovalDecidedError``, ... --
    with the problem's detail as its message; a refusal no library error names raises
    :class:`ServiceError`, and a service that cannot be reached :class:`ServiceUnreachableError`.
    """

    def __init__(
        self, url: str, token: str, *, timeout_s: float = 30.0,
        max_reconnect_delay_s: float = 10.0, transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.max_reconnect_delay_s = max_reconnect_delay_s
        self._transport = transport or default_transport()
        self._http = httpx.AsyncClient(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"},
            timeout=timeout_s, transport=self._transport,
        )
        # A post's headers, merged once: the client's (its token, httpx's defaults) and JSON.
        self._post_headers = httpx.Headers(self._http.headers)
        self._post_headers["Content-Type"] = "application/json"
        # Posts go on connections of their own (see tidings.client.lean), unless the client was
        # given a transport or the environment names a proxy (httpx honours it).
        self._lean: Lean | None = None
        self._lean_headers = [("Authorization", f"Bearer {token}"),
                              ("Content-Type", "application/json"),
                              ("User-Agent", "tidings-client")]
        if transport is None and isinstance(self._transport, Transport):
            with contextlib.suppress(ValueError):
                self._lean = Lean(self.url, self._transport.ssl_context)
                self._lean.head("POST", "/", self._lean_headers, 0)  # a token a head can carry

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._lean is not None:
            self._lean.close()
        await self._http.aclose()

    # -- conversations -------------------------------------------------------------------------

    async def create(self, profile: Mapping[str, Any] | str, *, title: str = "") -> ConversationOut:
        """Open a conversation: ``profile`` is a profile's JSON (``{"model": ...}``) or the
        name of a profile in the service's config."""
        body = {"profile": profile if isinstance(profile, str) else dict(profile), "title": title}
        return await self._call(ConversationOut, "POST", ROOT, json=body)

    async def conversation(self, conversation: str) -> ConversationOut:
        return await self._call(ConversationOut, "GET", self._path(conversation))

    async def conversations(self, *, after: str = "", limit: int = 100,
                            newest_first: bool = False) -> ConversationPage:
        """The principal's conversations, a page at a time (pass ``next_after`` on)."""
        params = {"after": after, "limit": limit, "order": "newest" if newest_first else "oldest"}
        return await self._call(ConversationPage, "GET", ROOT, params=params)

    async def archive(self, conversation: str) -> ConversationOut:
        """No more callers' input; the kernel's mail still runs."""
        return await self._call(ConversationOut, "POST", self._path(conversation, "/archive"))

    async def unarchive(self, conversation: str) -> ConversationOut:
        """Undo an archive: callers' input is taken again."""
        return await self._call(ConversationOut, "POST", self._path(conversation, "/unarchive"))

    async def set_profile(self, conversation: str,
                          profile: Mapping[str, Any] | str) -> ConversationOut:
        """Change the conversation's profile (its JSON or a configured profile's name), checked
        as at create; the next turn uses it."""
        body = {"profile": profile if isinstance(profile, str) else dict(profile)}
        return await self._call(ConversationOut, "PUT", self._path(conversation, "/profile"),
                                json=body)

    async def set_goal(self, conversation: str, status: GoalStatus | str,
                       text: str | None = None) -> ConversationOut:
        body = {"status": GoalStatus(status).value, "text": text}
        return await self._call(ConversationOut, "PUT", self._path(conversation, "/goal"),
                                json=body)

    async def checkpoint(self, conversation: str) -> None:
        """Ask for an automatic turn toward the active goal."""
        await self._request("POST", self._path(conversation, "/goal/checkpoint"))

    # -- the door ------------------------------------------------------------------------------

    @overload
    async def post(self, conversation: str, content: str, *, wait: None = None,
                   steer: bool = False, idempotency_key: str | None = None,
                   meta: Mapping[str, Any] | None = None) -> InputOut: ...

    @overload
    async def post(self, conversation: str, content: str, *, wait: float,
                   steer: bool = False, idempotency_key: str | None = None,
                   meta: Mapping[str, Any] | None = None) -> AnswerOut: ...

    async def post(self, conversation: str, content: str, *, wait: float | None = None,
                   steer: bool = False, idempotency_key: str | None = None,
                   meta: Mapping[str, Any] | None = None) -> InputOut | AnswerOut:
        """Post a person's input: the accepted input -- or, with ``wait`` seconds, the answer
        (the run that read it and its reply, or ``timed_out`` as things stood)."""
        body: dict[str, Any] = {"content": content,
                                "delivery_mode": "steer" if steer else "queue"}
        if idempotency_key is not None:
            body["idempotency_key"] = idempotency_key
        if meta is not None:
            body["meta"] = dict(meta)
        # The most-made request, built here in one step: the client's headers merged once (at
        # construction), the body encoded as httpx would.
        model: type[InputOut | AnswerOut] = InputOut if wait is None else AnswerOut
        target = self._path(conversation, "/inputs") + ("" if wait is None else f"?wait={wait:g}")
        payload = json.dumps(body, ensure_ascii=False, separators=(",", ":"),
                             allow_nan=False).encode()
        read_s = self.timeout_s if wait is None else wait + self.timeout_s
        if self._lean is not None:
            return model.model_validate_json(await self._lean_post(target, payload, read_s))
        request = httpx.Request(
            "POST", f"{self.url}{target}", headers=self._post_headers, content=payload,
            extensions={"timeout": httpx.Timeout(self.timeout_s, read=read_s).as_dict()},
        )
        response = await self._sent(request, direct=True)
        return model.model_validate_json(response.content)

    async def _lean_post(self, target: str, payload: bytes, read_s: float) -> bytes:
        """POST ``payload`` to ``target`` on the lean connections: the answer's body, or the
        refusal's error."""
        assert self._lean is not None
        head = self._lean.head("POST", target, self._lean_headers, len(payload))
        try:
            status, headers, answer = await self._lean.exchange(
                head + payload, connect_s=self.timeout_s, answer_s=read_s)
        except LeanError as exc:
            raise ServiceUnreachableError(self.url, str(exc)) from None
        if status >= 400:
            raise error_of(problem_of(httpx.Response(status, headers=headers, content=answer)))
        return answer

    async def inputs(self, conversation: str) -> list[InputOut]:
        """The conversation's inputs in read order."""
        found = await self._call(InputList, "GET", self._path(conversation, "/inputs"))
        return found.items

    # -- the feed and the transcript -------------------------------------------------------------

    @overload
    def watch(self, conversation: str, after_seq: int = 0, *,
              notices: Literal[False] = False) -> AsyncGenerator[EventOut]: ...

    @overload
    def watch(self, conversation: str, after_seq: int = 0, *,
              notices: Literal[True]) -> AsyncGenerator[EventOut | FeedLost | FeedResumed]: ...

    def watch(self, conversation: str, after_seq: int = 0, *,
              notices: bool = False) -> AsyncGenerator[EventOut | FeedLost | FeedResumed]:
        """The conversation's events after journal sequence ``after_seq``, as they happen, for
        as long as it is iterated: a dropped connection or a restarted server is reconnected
        with ``Last-Event-ID``, losing and repeating nothing. With ``notices`` it also yields a
        :class:`FeedLost` at each loss and a :class:`FeedResumed` when connected again."""
        events = follow(self._http, self._path(conversation, "/events"), after_seq,
                        max_delay_s=self.max_reconnect_delay_s,
                        timeouts=httpx.Timeout(self.timeout_s, read=FEED_READ_S))
        return events if notices else _events_only(events)

    async def events(self, conversation: str, after_seq: int = 0) -> EventPage:
        """One page of the journal after ``after_seq`` (pass ``next_after`` on)."""
        return await self._call(EventPage, "GET", self._path(conversation, "/events.json"),
                                params={"after": after_seq})

    async def transcript(self, conversation: str, after_seq: int = 0) -> Transcript:
        """One page of messages after ``after_seq`` (pass ``next_after_seq`` on; an empty page
        is the end)."""
        return await self._call(Transcript, "GET", self._path(conversation, "/transcript"),
                                params={"after_seq": after_seq})

    # -- runs ------------------------------------------------------------------------------------

    async def runs(self, conversation: str) -> list[RunOut]:
        return (await self._call(RunList, "GET", self._path(conversation, "/runs"))).items

    async def run(self, conversation: str, run_id: str) -> RunOut:
        return await self._call(RunOut, "GET", self._run(conversation, run_id))

    async def stop_run(self, conversation: str, run_id: str) -> RunStopped:
        """Stop a source run, running or completed: no more mail for it."""
        return await self._call(RunStopped, "POST", self._run(conversation, run_id, "/stop"))

    async def retry(self, conversation: str, run_id: str, *, model: str | None = None) -> InputOut:
        """Retry a run that failed or needs attention, optionally with another model."""
        return await self._call(InputOut, "POST", self._run(conversation, run_id, "/retry"),
                                json={"model": model})

    async def stop(self, conversation: str) -> Stopped:
        """Stop the conversation's running and queued turns."""
        return await self._call(Stopped, "POST", self._path(conversation, "/stop"))

    # -- tasks and results -----------------------------------------------------------------------

    async def tasks(self, conversation: str, *, before_us: int | None = None,
                    limit: int = 100) -> TaskPage:
        """Background tasks, newest first (pass ``next_before_us`` on)."""
        params: dict[str, Any] = {"limit": limit}
        if before_us is not None:
            params["before_us"] = before_us
        return await self._call(TaskPage, "GET", self._path(conversation, "/tasks"),
                                params=params)

    async def task(self, conversation: str, task_key: str) -> TaskOut:
        return await self._call(TaskOut, "GET",
                                self._path(conversation, f"/tasks/{quote(task_key, safe='')}"))

    async def results(self, conversation: str, *, after: str = "", limit: int = 100) -> ResultList:
        """The conversation's result envelopes (its owner's token; pass ``next_after`` on)."""
        return await self._call(ResultList, "GET", self._path(conversation, "/results"),
                                params={"after": after, "limit": limit})

    async def result(self, conversation: str, result_id: str, *, offset: int = 0,
                     limit_bytes: int | None = None) -> ResultPageOut:
        """One page of a result from byte ``offset`` (pass ``next_offset`` on; null at the
        end)."""
        params: dict[str, Any] = {"offset": offset}
        if limit_bytes is not None:
            params["limit_bytes"] = limit_bytes
        return await self._call(
            ResultPageOut, "GET", self._path(conversation, f"/results/{quote(result_id, safe='')}"),
            params=params)

    # -- approvals and questions -----------------------------------------------------------------

    async def approvals(self, conversation: str, *, status: str = "",
                        limit: int = 100) -> list[ApprovalOut]:
        """Approvals of held tool calls, newest first; ``status`` filters (``pending``)."""
        found = await self._call(ApprovalList, "GET", self._path(conversation, "/approvals"),
                                 params=_filter(status, limit))
        return found.approvals

    async def decide(self, conversation: str, approval_id: str, *, approve: bool) -> ApprovalOut:
        """Approve or deny a held tool call."""
        tail = f"/approvals/{quote(approval_id, safe='')}/decision"
        return await self._call(ApprovalOut, "POST", self._path(conversation, tail),
                                json={"approve": approve})

    async def questions(self, conversation: str, *, status: str = "",
                        limit: int = 100) -> list[QuestionOut]:
        """Questions the conversation's MCP servers asked, newest first."""
        found = await self._call(QuestionList, "GET", self._path(conversation, "/questions"),
                                 params=_filter(status, limit))
        return found.questions

    async def answer(self, conversation: str, question_id: str,
                     action: str, content: Mapping[str, Any] | None = None) -> QuestionOut:
        """Answer a question: ``accept`` with ``content`` fitting its schema, or ``decline`` or
        ``cancel``."""
        body: dict[str, Any] = {"action": action}
        if content is not None:
            body["content"] = dict(content)
        tail = f"/questions/{quote(question_id, safe='')}/answer"
        return await self._call(QuestionOut, "POST", self._path(conversation, tail), json=body)

    # -- signals and instances (an operator's token, but a conversation's stats) -------------

    async def signal_stats(self, conversation: str | None = None) -> QueueStatsOut:
        """The signal deliveries' backlog, retries and dead letters: one conversation's, or
        (an operator's token) every conversation's."""
        path = "/v1/signals/stats" if conversation is None else self._path(
            conversation, "/signals/stats")
        return await self._call(QueueStatsOut, "GET", path)

    async def dead_letters(self, *, limit: int = 100) -> list[DeadLetterOut]:
        """Deliveries that failed for good, of every conversation (an operator's token)."""
        found = await self._call(DeadLetterList, "GET", "/v1/dead-letters",
                                 params={"limit": limit})
        return found.items

    async def push_dead_letters(self, *, limit: int = 100) -> list[PushDeadLetterOut]:
        """A2A push notifications that failed for good (an operator's token)."""
        found = await self._call(PushDeadLetterList, "GET", "/v1/push-dead-letters",
                                 params={"limit": limit})
        return found.items

    async def instances(self, *, limit: int = 100) -> list[InstanceOut]:
        """The runtimes that booted over the service's database, newest first (an operator's
        token)."""
        return (await self._call(InstanceList, "GET", "/v1/instances",
                                 params={"limit": limit})).items

    # -- the wire --------------------------------------------------------------------------------

    @staticmethod
    def _path(conversation: str, tail: str = "") -> str:
        return f"{ROOT}/{quote(conversation, safe='')}{tail}"

    def _run(self, conversation: str, run_id: str, tail: str = "") -> str:
        return self._path(conversation, f"/runs/{quote(run_id, safe='')}{tail}")

    async def _request(self, method: str, path: str, **options: Any) -> httpx.Response:
        return await self._sent(self._http.build_request(method, path, **options))

    async def _sent(self, request: httpx.Request, *, direct: bool = False) -> httpx.Response:
        """The response to ``request``, read whole. ``direct``: a request built whole, through
        the client's transport itself -- httpx's client layer (auth, redirects, cookies, event
        hooks) has nothing to do for it, and skipping it is a fifth of a post's CPU."""
        try:
            if direct and self._transport is not None:
                response = await self._transport.handle_async_request(request)
                response.request = request
                try:
                    await response.aread()  # and closed: the connection goes back to the pool
                except BaseException:
                    await response.aclose()
                    raise
            else:
                response = await self._http.send(request)
        except httpx.TransportError as exc:
            raise ServiceUnreachableError(self.url, str(exc) or type(exc).__name__) from None
        if response.status_code >= 400:
            raise error_of(problem_of(response))
        return response

    async def _call(self, model: type[M], method: str, path: str, **options: Any) -> M:
        response = await self._request(method, path, **options)
        return model.model_validate_json(response.content)


def _filter(status: str, limit: int) -> dict[str, Any]:
    return {"limit": limit} | ({"status": status} if status else {})


async def _events_only(
    feed: AsyncGenerator[EventOut | FeedLost | FeedResumed],
) -> AsyncGenerator[EventOut]:
    async with aclosing(feed):  # the reader stopped: the connection closes now, not at GC
        async for item in feed:
            if isinstance(item, EventOut):
                yield item


__all__ = ("Client",)
