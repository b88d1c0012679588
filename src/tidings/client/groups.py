"""The :class:`~tidings.Client`'s verbs by what they act on, as the runtime groups its own:
``client.conversations``, ``client.inputs``, ``client.runs``, ``client.tasks``,
``client.results``, ``client.approvals``, ``client.questions`` and ``client.signals``. Each makes
its requests through the client's :class:`~tidings.client.calls.Calls`.

Each group's ``list`` comes last: below it, ``list`` in an annotation would name the method."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from tidings.client.calls import ROOT, Calls
from tidings.service.schemas import (
    ApprovalList,
    ApprovalOut,
    ConversationOut,
    ConversationPage,
    DeadLetterList,
    DeadLetterOut,
    InputList,
    InputOut,
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
    TaskOut,
    TaskPage,
)
from tidings.types import GoalStatus


class ClientConversations:
    """The principal's conversations: listed, archived, their profile and goal set."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    async def archive(self, conversation: str) -> ConversationOut:
        """No more callers' input; the kernel's mail still runs."""
        return await self._calls.call(ConversationOut, "POST",
                                      self._calls.path(conversation, "/archive"))

    async def unarchive(self, conversation: str) -> ConversationOut:
        """Undo an archive: callers' input is taken again."""
        return await self._calls.call(ConversationOut, "POST",
                                      self._calls.path(conversation, "/unarchive"))

    async def set_profile(self, conversation: str,
                          profile: Mapping[str, Any] | str) -> ConversationOut:
        """Change the conversation's profile (its JSON or a configured profile's name), checked
        as at create; the next turn uses it."""
        body = {"profile": profile if isinstance(profile, str) else dict(profile)}
        return await self._calls.call(ConversationOut, "PUT",
                                      self._calls.path(conversation, "/profile"), json=body)

    async def set_goal(self, conversation: str, status: GoalStatus | str,
                       text: str | None = None) -> ConversationOut:
        body = {"status": GoalStatus(status).value, "text": text}
        return await self._calls.call(ConversationOut, "PUT",
                                      self._calls.path(conversation, "/goal"), json=body)

    async def checkpoint(self, conversation: str) -> None:
        """Ask for an automatic turn toward the active goal."""
        await self._calls.request("POST", self._calls.path(conversation, "/goal/checkpoint"))

    async def list(self, *, after: str = "", limit: int = 100,
                   newest_first: bool = False) -> ConversationPage:
        """The principal's conversations, a page at a time (pass ``next_after`` on)."""
        params = {"after": after, "limit": limit, "order": "newest" if newest_first else "oldest"}
        return await self._calls.call(ConversationPage, "GET", ROOT, params=params)


class ClientInputs:
    """A conversation's inputs (posting one is the client's own ``post``)."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    async def list(self, conversation: str) -> list[InputOut]:
        """The conversation's inputs in read order."""
        found = await self._calls.call(InputList, "GET",
                                       self._calls.path(conversation, "/inputs"))
        return found.items


class ClientRuns:
    """A conversation's runs: listed, read, stopped, retried."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    async def get(self, conversation: str, run_id: str) -> RunOut:
        return await self._calls.call(RunOut, "GET", self._calls.run(conversation, run_id))

    async def stop(self, conversation: str, run_id: str) -> RunStopped:
        """Stop a source run, running or completed: no more mail for it."""
        return await self._calls.call(RunStopped, "POST",
                                      self._calls.run(conversation, run_id, "/stop"))

    async def retry(self, conversation: str, run_id: str, *, model: str | None = None) -> InputOut:
        """Retry a run that failed or needs attention, optionally with another model."""
        return await self._calls.call(InputOut, "POST",
                                      self._calls.run(conversation, run_id, "/retry"),
                                      json={"model": model})

    async def list(self, conversation: str) -> list[RunOut]:
        return (await self._calls.call(RunList, "GET",
                                       self._calls.path(conversation, "/runs"))).items


class ClientTasks:
    """A conversation's background tasks."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    async def get(self, conversation: str, task_key: str) -> TaskOut:
        tail = f"/tasks/{quote(task_key, safe='')}"
        return await self._calls.call(TaskOut, "GET", self._calls.path(conversation, tail))

    async def list(self, conversation: str, *, before_us: int | None = None,
                   limit: int = 100) -> TaskPage:
        """Background tasks, newest first (pass ``next_before_us`` on)."""
        params: dict[str, Any] = {"limit": limit}
        if before_us is not None:
            params["before_us"] = before_us
        return await self._calls.call(TaskPage, "GET", self._calls.path(conversation, "/tasks"),
                                      params=params)


class ClientResults:
    """A conversation's result envelopes, read a page of bytes at a time."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    async def page(self, conversation: str, result_id: str, *, offset: int = 0,
                   limit_bytes: int | None = None) -> ResultPageOut:
        """One page of a result from byte ``offset`` (pass ``next_offset`` on; null at the
        end)."""
        params: dict[str, Any] = {"offset": offset}
        if limit_bytes is not None:
            params["limit_bytes"] = limit_bytes
        tail = f"/results/{quote(result_id, safe='')}"
        return await self._calls.call(ResultPageOut, "GET", self._calls.path(conversation, tail),
                                      params=params)

    async def list(self, conversation: str, *, after: str = "", limit: int = 100) -> ResultList:
        """The conversation's result envelopes (its owner's token; pass ``next_after`` on)."""
        return await self._calls.call(ResultList, "GET",
                                      self._calls.path(conversation, "/results"),
                                      params={"after": after, "limit": limit})


class ClientApprovals:
    """Approvals of a conversation's held tool calls."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    async def decide(self, conversation: str, approval_id: str, *, approve: bool) -> ApprovalOut:
        """Approve or deny a held tool call."""
        tail = f"/approvals/{quote(approval_id, safe='')}/decision"
        return await self._calls.call(ApprovalOut, "POST", self._calls.path(conversation, tail),
                                      json={"approve": approve})

    async def list(self, conversation: str, *, status: str = "",
                   limit: int = 100) -> list[ApprovalOut]:
        """Approvals of held tool calls, newest first; ``status`` filters (``pending``)."""
        found = await self._calls.call(ApprovalList, "GET",
                                       self._calls.path(conversation, "/approvals"),
                                       params=_filter(status, limit))
        return found.approvals


class ClientQuestions:
    """Questions a conversation's MCP servers asked."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    async def answer(self, conversation: str, question_id: str,
                     action: str, content: Mapping[str, Any] | None = None) -> QuestionOut:
        """Answer a question: ``accept`` with ``content`` fitting its schema, or ``decline`` or
        ``cancel``."""
        body: dict[str, Any] = {"action": action}
        if content is not None:
            body["content"] = dict(content)
        tail = f"/questions/{quote(question_id, safe='')}/answer"
        return await self._calls.call(QuestionOut, "POST", self._calls.path(conversation, tail),
                                      json=body)

    async def list(self, conversation: str, *, status: str = "",
                   limit: int = 100) -> list[QuestionOut]:
        """Questions the conversation's MCP servers asked, newest first."""
        found = await self._calls.call(QuestionList, "GET",
                                       self._calls.path(conversation, "/questions"),
                                       params=_filter(status, limit))
        return found.questions


class ClientSignals:
    """The signal deliveries (an operator's token, but a conversation's stats) and the dead
    letters."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    async def stats(self, conversation: str | None = None) -> QueueStatsOut:
        """The signal deliveries' backlog, retries and dead letters: one conversation's, or
        (an operator's token) every conversation's."""
        path = "/v1/signals/stats" if conversation is None else self._calls.path(
            conversation, "/signals/stats")
        return await self._calls.call(QueueStatsOut, "GET", path)

    async def dead_letters(self, *, limit: int = 100) -> list[DeadLetterOut]:
        """Deliveries that failed for good, of every conversation (an operator's token)."""
        found = await self._calls.call(DeadLetterList, "GET", "/v1/dead-letters",
                                       params={"limit": limit})
        return found.items

    async def push_dead_letters(self, *, limit: int = 100) -> list[PushDeadLetterOut]:
        """A2A push notifications that failed for good (an operator's token)."""
        found = await self._calls.call(PushDeadLetterList, "GET", "/v1/push-dead-letters",
                                       params={"limit": limit})
        return found.items


def _filter(status: str, limit: int) -> dict[str, Any]:
    return {"limit": limit} | ({"status": status} if status else {})


__all__ = ("ClientApprovals", "ClientConversations", "ClientInputs", "ClientQuestions",
           "ClientResults", "ClientRuns", "ClientSignals", "ClientTasks")
