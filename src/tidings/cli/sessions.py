"""The two ways the command line reaches a conversation: a running service over HTTP
(``--url``/``--token``), or an embedded runtime on the database itself (``--database``).

Both give the same things in the same shapes -- transcript messages as the HTTP API serves them
(``MessageOut``), feed events as :class:`~tidings.cli.render.FeedItem` -- so the chat and the
transcript are rendered one way, whichever transport read them.

Over HTTP the feed is the SSE route, parsed by ``httpx-sse``; a dropped connection is
reconnected with ``Last-Event-ID`` (the last journal sequence received), with a backoff up to
ten seconds, and reported to the chat as ``chat.lost`` / ``chat.resumed`` items. Embedded, the
feed is :meth:`Runtime.watch`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import quote

from tidings.cli.render import FeedItem
from tidings.runtime import Runtime
from tidings.types import Author, AuthorKind, Profile, RunStatus

PAGE = 1_000
"""The service's page size for transcripts and journal pages (a shorter page is the last)."""


class Refused(Exception):
    """The service refused a request (4xx): its problem's code and detail, as one line."""


def problem(response: Any) -> str:
    """A refusal as one line: the problem document's code and detail."""
    try:
        body = response.json()
        return f"{body['code']}: {body['detail']}"
    except (ValueError, KeyError, TypeError):
        text = response.text.strip()[:200] or response.reason_phrase
        return f"HTTP {response.status_code}: {text}"


class Session(Protocol):
    """A conversation's reads and writes, as the chat needs them."""

    async def create(self, profile: Mapping[str, Any], title: str) -> str: ...

    async def check(self, conversation_id: str) -> None:
        """Raise if the conversation is unknown (or not this principal's)."""

    async def transcript(self, conversation_id: str) -> list[dict[str, Any]]: ...

    async def journal_end(self, conversation_id: str) -> int:
        """The sequence of the newest journal event."""

    async def open_runs(self, conversation_id: str) -> dict[str, RunStatus]:
        """The runs that are not over yet, and their statuses."""

    async def post(self, conversation_id: str, text: str) -> str:
        """Post a person's input; its id."""

    async def stop_run(self, conversation_id: str, run_id: str) -> None: ...

    async def stop(self, conversation_id: str) -> None: ...

    def watch(self, conversation_id: str, after: int) -> AsyncIterator[FeedItem]: ...

    async def close(self) -> None: ...


class HttpSession:
    """A client of ``tidings serve``: the token's principal owns what it creates."""

    def __init__(self, url: str, token: str) -> None:
        import httpx

        self.url = url.rstrip("/")
        self.client = httpx.AsyncClient(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(30, read=60),
        )

    @staticmethod
    def _path(conversation_id: str, tail: str = "") -> str:
        return f"/v1/conversations/{quote(conversation_id, safe='')}{tail}"

    async def _call(self, method: str, path: str, **options: Any) -> Any:
        import httpx

        try:
            response = await self.client.request(method, path, **options)
        except httpx.HTTPError as exc:
            raise Refused(f"cannot reach {self.url}: {exc}") from None
        if response.status_code >= 400:
            raise Refused(problem(response))
        return response.json()

    async def create(self, profile: Mapping[str, Any], title: str) -> str:
        body = await self._call("POST", "/v1/conversations",
                                json={"profile": dict(profile), "title": title})
        return str(body["conversation_id"])

    async def check(self, conversation_id: str) -> None:
        await self._call("GET", self._path(conversation_id))

    async def transcript(self, conversation_id: str) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        after = 0
        while True:
            page = await self._call("GET", self._path(conversation_id, "/transcript"),
                                    params={"after_seq": after})
            messages += page["items"]
            if not page["items"]:
                return messages
            after = int(page["next_after_seq"])

    async def journal_end(self, conversation_id: str) -> int:
        after = 0
        while True:
            page = await self._call("GET", self._path(conversation_id, "/events.json"),
                                    params={"after": after})
            after = int(page["next_after"])
            if len(page["items"]) < PAGE:
                return after

    async def open_runs(self, conversation_id: str) -> dict[str, RunStatus]:
        runs = await self._call("GET", self._path(conversation_id, "/runs"))
        statuses = {str(r["run_id"]): RunStatus(r["status"]) for r in runs["items"]}
        return {run: status for run, status in statuses.items() if not status.ended}

    async def post(self, conversation_id: str, text: str) -> str:
        body = await self._call("POST", self._path(conversation_id, "/inputs"),
                                json={"content": text, "delivery_mode": "queue"})
        return str(body["input_id"])

    async def stop_run(self, conversation_id: str, run_id: str) -> None:
        await self._call("POST", self._path(conversation_id,
                                            f"/runs/{quote(run_id, safe='')}/stop"))

    async def stop(self, conversation_id: str) -> None:
        await self._call("POST", self._path(conversation_id, "/stop"))

    async def watch(self, conversation_id: str, after: int) -> AsyncIterator[FeedItem]:
        """The feed after journal sequence ``after``, reconnected until the server refuses."""
        import httpx
        from httpx_sse import aconnect_sse

        path = self._path(conversation_id, "/events")
        last = after
        delay = 0.5
        lost = False
        while True:
            headers = {"Last-Event-ID": str(last)} if last else {}
            try:
                async with aconnect_sse(self.client, "GET", path, headers=headers) as source:
                    response = source.response
                    if response.status_code >= 400:
                        await response.aread()
                        if response.status_code < 500:
                            raise Refused(problem(response))
                        raise httpx.HTTPStatusError(problem(response), request=response.request,
                                                    response=response)
                    if lost:
                        yield FeedItem(None, "chat.resumed", None, {"after": last})
                        lost = False
                    delay = 0.5
                    async for sse in source.aiter_sse():
                        # A keep-alive comment is dispatched as an event without data.
                        if not sse.data:
                            continue
                        item = _item(sse.event, sse.data)
                        if item.seq is not None:
                            last = max(last, item.seq)
                        yield item
                reason = "the server ended the feed"
            except httpx.HTTPError as exc:  # httpx-sse's SSEError is one too
                reason = str(exc) or type(exc).__name__
            if not lost:
                yield FeedItem(None, "chat.lost", None, {"reason": reason, "after": last})
                lost = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)

    async def close(self) -> None:
        await self.client.aclose()


def _item(kind: str, data: str) -> FeedItem:
    try:
        event = json.loads(data)
    except ValueError:
        event = None
    if not isinstance(event, dict):
        return FeedItem(None, kind, None, {})
    seq = event.get("seq")
    body = event.get("data")
    return FeedItem(seq if isinstance(seq, int) else None, str(event.get("type") or kind),
                    event.get("run_id"), body if isinstance(body, dict) else {})


def message_json(message: Any) -> dict[str, Any]:
    """A transcript message as the HTTP API serves it."""
    from tidings.service.schemas import MessageOut

    return MessageOut.of(message).model_dump(mode="json")


def profile_of(body: Mapping[str, Any]) -> Profile:
    """A profile from its JSON (the HTTP API's ``profile`` object), checked the same way."""
    from tidings.service.schemas import ProfileBody

    return ProfileBody.model_validate(dict(body)).to_profile()


class LocalSession:
    """An embedded runtime on the database: it runs the turns itself, and its reads and writes
    are the library's (any conversation of the database; what it creates is ``owner``'s)."""

    def __init__(self, runtime: Runtime, *, owner: str) -> None:
        self.runtime = runtime
        self.owner = owner
        self.author = Author(AuthorKind.HUMAN, owner, owner)

    async def create(self, profile: Mapping[str, Any], title: str) -> str:
        created = await self.runtime.create_conversation(self.owner, profile_of(profile),
                                                         title=title)
        return created.conversation_id

    async def check(self, conversation_id: str) -> None:
        await self.runtime.conversation(conversation_id)

    async def transcript(self, conversation_id: str) -> list[dict[str, Any]]:
        return await transcript_pages(self.runtime, conversation_id)

    async def journal_end(self, conversation_id: str) -> int:
        after = 0
        while True:
            page = await self.runtime.events(conversation_id, after_seq=after)
            if page:
                after = page[-1].seq
            if len(page) < PAGE:
                return after

    async def open_runs(self, conversation_id: str) -> dict[str, RunStatus]:
        return {r.run_id: r.status for r in await self.runtime.runs(conversation_id)
                if not r.status.ended}

    async def post(self, conversation_id: str, text: str) -> str:
        posted = await self.runtime.post(conversation_id, text, authored_by=self.author)
        return posted.input_id

    async def stop_run(self, conversation_id: str, run_id: str) -> None:
        await self.runtime.stop_run(conversation_id, run_id)

    async def stop(self, conversation_id: str) -> None:
        await self.runtime.stop(conversation_id)

    async def watch(self, conversation_id: str, after: int) -> AsyncIterator[FeedItem]:
        watch = self.runtime.watch(conversation_id, after_seq=after)
        try:
            async for event in watch:
                yield FeedItem(event.seq, event.type, event.run_id, dict(event.data))
        finally:
            await watch.aclose()  # the chat stopped reading: let the feed go at once

    async def close(self) -> None:
        pass


class Transcripts(Protocol):
    async def transcript(self, conversation_id: str, *, after_seq: int = 0) -> Sequence[Any]: ...


async def transcript_pages(reader: Transcripts, conversation_id: str) -> list[dict[str, Any]]:
    """Every message of a conversation, page by page, as the HTTP API serves them."""
    messages: list[dict[str, Any]] = []
    after = 0
    while page := await reader.transcript(conversation_id, after_seq=after):
        messages += [message_json(m) for m in page]
        after = page[-1].seq
    return messages


@contextlib.asynccontextmanager
async def http_session(url: str, token: str) -> AsyncIterator[HttpSession]:
    session = HttpSession(url, token)
    try:
        yield session
    finally:
        await session.close()


__all__ = (
    "HttpSession", "LocalSession", "Refused", "Session", "http_session", "message_json",
    "problem", "profile_of", "transcript_pages",
)
