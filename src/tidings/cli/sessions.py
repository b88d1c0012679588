"""The two ways the command line reaches a conversation: a running service over HTTP
(``--url``/``--token``), or an embedded runtime on the database itself (``--database``).

Both give the same things in the same shapes -- transcript messages as the HTTP API serves them
(``MessageOut``), feed events as :class:`~tidings.cli.render.FeedItem` -- so the chat and the
transcript are rendered one way, whichever transport read them.

Over HTTP every call is :class:`tidings.Client`'s: the feed is its ``watch``, reconnected with
``Last-Event-ID`` after a dropped connection, its losses and returns reported to the chat as
``chat.lost`` / ``chat.resumed`` items. Embedded, the feed is :meth:`Runtime.watch`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from tidings.cli.render import FeedItem
from tidings.types import Author, AuthorKind, Profile, RunStatus

if TYPE_CHECKING:  # the runtime is imported by the commands that open a database
    from tidings.runtime.root import Runtime

PAGE = 1_000
"""The service's page size for transcripts and journal pages (a shorter page is the last)."""


class Session(Protocol):
    """A conversation's reads and writes, as the chat needs them."""

    async def create(self, profile: Mapping[str, Any] | str, title: str) -> str:
        """A new conversation of the profile (its JSON, or a configured profile's name)."""

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

    async def questions(self, conversation_id: str, status: str = "") -> list[dict[str, Any]]:
        """The conversation's questions, newest first, as the HTTP API serves them
        (``QuestionOut``); ``status`` filters (``pending``)."""

    async def answer(self, conversation_id: str, question_id: str, action: str,
                     content: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """A person's answer to a question (``accept`` with ``content``, ``decline``,
        ``cancel``); the question as it then is."""

    async def approvals(self, conversation_id: str, status: str = "") -> list[dict[str, Any]]:
        """The conversation's approvals of held tool calls, newest first, as the HTTP API
        serves them (``ApprovalOut``); ``status`` filters (``pending``)."""

    async def decide(self, conversation_id: str, approval_id: str, *,
                     approve: bool) -> dict[str, Any]:
        """A person's decision on a held call; the approval as it then is."""

    def running_here(self) -> list[str]:
        """The background tasks this process runs, which end when it quits (``task command``
        each); none over HTTP, where the service runs them."""

    def watch(self, conversation_id: str, after: int) -> AsyncIterator[FeedItem]: ...

    async def close(self) -> None: ...


class HttpSession:
    """A client of ``tidings serve`` through :class:`tidings.Client`: the token's principal owns
    what it creates, and a refusal is the library's own error."""

    def __init__(self, url: str, token: str) -> None:
        from tidings.client import Client

        self.client = Client(url, token)

    async def create(self, profile: Mapping[str, Any] | str, title: str) -> str:
        return (await self.client.create(profile, title=title)).conversation_id

    async def check(self, conversation_id: str) -> None:
        await self.client.conversation(conversation_id)

    async def transcript(self, conversation_id: str) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        after = 0
        while (page := await self.client.transcript(conversation_id, after)).items:
            messages += [m.model_dump(mode="json") for m in page.items]
            after = page.next_after_seq
        return messages

    async def journal_end(self, conversation_id: str) -> int:
        after = 0
        while True:
            page = await self.client.events(conversation_id, after)
            after = page.next_after
            if len(page.items) < PAGE:
                return after

    async def open_runs(self, conversation_id: str) -> dict[str, RunStatus]:
        return {r.run_id: r.status for r in await self.client.runs.list(conversation_id)
                if not r.status.ended}

    async def post(self, conversation_id: str, text: str) -> str:
        return (await self.client.post(conversation_id, text)).input_id

    async def stop_run(self, conversation_id: str, run_id: str) -> None:
        await self.client.runs.stop(conversation_id, run_id)

    async def stop(self, conversation_id: str) -> None:
        await self.client.stop(conversation_id)

    async def questions(self, conversation_id: str, status: str = "") -> list[dict[str, Any]]:
        return [q.model_dump(mode="json") for q in
                await self.client.questions.list(conversation_id, status=status)]

    async def answer(self, conversation_id: str, question_id: str, action: str,
                     content: Mapping[str, Any] | None = None) -> dict[str, Any]:
        answered = await self.client.questions.answer(conversation_id, question_id, action,
                                                      content)
        return answered.model_dump(mode="json")

    async def approvals(self, conversation_id: str, status: str = "") -> list[dict[str, Any]]:
        return [a.model_dump(mode="json") for a in
                await self.client.approvals.list(conversation_id, status=status)]

    async def decide(self, conversation_id: str, approval_id: str, *,
                     approve: bool) -> dict[str, Any]:
        decided = await self.client.approvals.decide(conversation_id, approval_id, approve=approve)
        return decided.model_dump(mode="json")

    def running_here(self) -> list[str]:
        return []

    async def watch(self, conversation_id: str, after: int) -> AsyncIterator[FeedItem]:
        """The feed after journal sequence ``after``, reconnected by the client until the
        server refuses; a lost connection is a ``chat.lost`` item, its return ``chat.resumed``."""
        from tidings.client import FeedLost, FeedResumed

        async with contextlib.aclosing(
                self.client.watch(conversation_id, after, notices=True)) as feed:
            async for item in feed:
                if isinstance(item, FeedLost):
                    yield FeedItem(None, "chat.lost", None,
                                   {"reason": item.reason, "after": item.after_seq})
                elif isinstance(item, FeedResumed):
                    yield FeedItem(None, "chat.resumed", None, {"after": item.after_seq})
                else:
                    yield FeedItem(item.seq, item.type, item.run_id, dict(item.data))

    async def close(self) -> None:
        await self.client.aclose()


def message_json(message: Any) -> dict[str, Any]:
    """A transcript message as the HTTP API serves it."""
    from tidings.service.schemas import MessageOut

    return MessageOut.of(message).model_dump(mode="json")


def question_json(question: Any) -> dict[str, Any]:
    """A question as the HTTP API serves it."""
    from tidings.service.schemas import QuestionOut

    return QuestionOut.of(question).model_dump(mode="json")


def approval_json(approval: Any) -> dict[str, Any]:
    """An approval as the HTTP API serves it."""
    from tidings.service.schemas import ApprovalOut

    return ApprovalOut.of(approval).model_dump(mode="json")


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

    async def create(self, profile: Mapping[str, Any] | str, title: str) -> str:
        created = await self.runtime.create_conversation(
            self.owner, profile if isinstance(profile, str) else profile_of(profile),
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
        return {r.run_id: r.status for r in await self.runtime.runs.list(conversation_id)
                if not r.status.ended}

    async def post(self, conversation_id: str, text: str) -> str:
        posted = await self.runtime.post(conversation_id, text, authored_by=self.author)
        return posted.input_id

    async def stop_run(self, conversation_id: str, run_id: str) -> None:
        await self.runtime.runs.stop(conversation_id, run_id)

    async def stop(self, conversation_id: str) -> None:
        await self.runtime.stop(conversation_id)

    async def questions(self, conversation_id: str, status: str = "") -> list[dict[str, Any]]:
        return [question_json(q) for q in
                await self.runtime.questions.list(conversation_id, status=status)]

    async def answer(self, conversation_id: str, question_id: str, action: str,
                     content: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return question_json(await self.runtime.questions.answer(
            conversation_id, question_id, action=action, content=content,
            decided_by=self.owner))

    async def approvals(self, conversation_id: str, status: str = "") -> list[dict[str, Any]]:
        return [approval_json(a) for a in
                await self.runtime.approvals.list(conversation_id, status=status)]

    async def decide(self, conversation_id: str, approval_id: str, *,
                     approve: bool) -> dict[str, Any]:
        return approval_json(await self.runtime.approvals.decide(
            conversation_id, approval_id, approve=approve, decided_by=self.owner))

    def running_here(self) -> list[str]:
        return [" ".join((p.task_key, p.spec.command or " ".join(p.spec.argv)))
                for p in self.runtime.supervisor.running()]

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
    "HttpSession", "LocalSession", "Session", "approval_json", "http_session", "message_json",
    "profile_of",
    "question_json", "transcript_pages",
)
