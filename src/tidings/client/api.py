""":class:`Client`: the library's verbs over HTTP, against ``tidings serve`` (or an app that
mounts the service), typed with the service's own response models."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from types import TracebackType
from typing import Any, Literal, overload

import httpx

from tidings.client.calls import ROOT, Calls
from tidings.client.feed import FeedLost, FeedResumed, follow
from tidings.client.groups import (
    ClientApprovals,
    ClientConversations,
    ClientInputs,
    ClientQuestions,
    ClientResults,
    ClientRuns,
    ClientSignals,
    ClientTasks,
)
from tidings.service.schemas import (
    AnswerOut,
    ConversationOut,
    EventOut,
    EventPage,
    InputOut,
    InstanceList,
    InstanceOut,
    Stopped,
    Transcript,
)

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

    A conversation's own verbs are the client's (``create``, ``post``, ``watch``, ...); the
    rest are grouped as the runtime groups them: ``client.conversations``, ``client.inputs``,
    ``client.runs``, ``client.tasks``, ``client.results``, ``client.approvals``,
    ``client.questions`` and ``client.signals``.
    """

    def __init__(
        self, url: str, token: str, *, timeout_s: float = 30.0,
        max_reconnect_delay_s: float = 10.0, transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.max_reconnect_delay_s = max_reconnect_delay_s
        self._calls = calls = Calls(self.url, token, timeout_s=timeout_s, transport=transport)
        self.conversations = ClientConversations(calls)
        self.inputs = ClientInputs(calls)
        self.runs = ClientRuns(calls)
        self.tasks = ClientTasks(calls)
        self.results = ClientResults(calls)
        self.approvals = ClientApprovals(calls)
        self.questions = ClientQuestions(calls)
        self.signals = ClientSignals(calls)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._calls.aclose()

    # -- a conversation --------------------------------------------------------------------------

    async def create(self, profile: Mapping[str, Any] | str, *, title: str = "") -> ConversationOut:
        """Open a conversation: ``profile`` is a profile's JSON (``{"model": ...}``) or the
        name of a profile in the service's config."""
        body = {"profile": profile if isinstance(profile, str) else dict(profile), "title": title}
        return await self._calls.call(ConversationOut, "POST", ROOT, json=body)

    async def conversation(self, conversation: str) -> ConversationOut:
        return await self._calls.call(ConversationOut, "GET", self._calls.path(conversation))

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
        # The body encoded as httpx would; the request made in one step (see Calls.post).
        model: type[InputOut | AnswerOut] = InputOut if wait is None else AnswerOut
        target = self._calls.path(conversation, "/inputs") + (
            "" if wait is None else f"?wait={wait:g}")
        payload = json.dumps(body, ensure_ascii=False, separators=(",", ":"),
                             allow_nan=False).encode()
        read_s = self.timeout_s if wait is None else wait + self.timeout_s
        return model.model_validate_json(await self._calls.post(target, payload, read_s))

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
        events = follow(self._calls.http, self._calls.path(conversation, "/events"), after_seq,
                        max_delay_s=self.max_reconnect_delay_s,
                        timeouts=httpx.Timeout(self.timeout_s, read=FEED_READ_S))
        return events if notices else _events_only(events)

    async def events(self, conversation: str, after_seq: int = 0) -> EventPage:
        """One page of the journal after ``after_seq`` (pass ``next_after`` on)."""
        return await self._calls.call(EventPage, "GET",
                                      self._calls.path(conversation, "/events.json"),
                                      params={"after": after_seq})

    async def transcript(self, conversation: str, after_seq: int = 0) -> Transcript:
        """One page of messages after ``after_seq`` (pass ``next_after_seq`` on; an empty page
        is the end)."""
        return await self._calls.call(Transcript, "GET",
                                      self._calls.path(conversation, "/transcript"),
                                      params={"after_seq": after_seq})

    async def stop(self, conversation: str) -> Stopped:
        """Stop the conversation's running and queued turns."""
        return await self._calls.call(Stopped, "POST", self._calls.path(conversation, "/stop"))

    # -- the service -----------------------------------------------------------------------------

    async def instances(self, *, limit: int = 100) -> list[InstanceOut]:
        """The runtimes that booted over the service's database, newest first (an operator's
        token)."""
        return (await self._calls.call(InstanceList, "GET", "/v1/instances",
                                       params={"limit": limit})).items


async def _events_only(
    feed: AsyncGenerator[EventOut | FeedLost | FeedResumed],
) -> AsyncGenerator[EventOut]:
    async with aclosing(feed):  # the reader stopped: the connection closes now, not at GC
        async for item in feed:
            if isinstance(item, EventOut):
                yield item


__all__ = ("Client",)
