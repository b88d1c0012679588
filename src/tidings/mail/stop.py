"""The stop of a source and its cascade (M14, M16): no more mail for a stopped run.

A source run that is stopped -- running or completed -- owes nothing any more: its children's
unrelayed replies are cancelled, its supplementary inputs still queued are removed, a
supplementary reply to it that has started is stopped, its tasks' undelivered notifications
are cancelled. What it already published stays. The cancel cascades: a child turn that was
answering a cancelled request is stopped the same way, down the tree, and owes its own
children's replies to no one.

A person's stop begins with :func:`request_stop`, the unit that asks the conversation's
running turns to stop (wherever they run) and suppresses automatic continuation. Each
conversation's part of the cascade is one unit over that locked conversation
(:func:`stop_source`, :func:`cancel_child_request`); :class:`StopCascade` walks the tree, one
unit per conversation, and never visits a run twice (a tree of requests can name the same run
on two paths).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tidings.conversations.catalog import Conversations
from tidings.errors import UnknownConversationError, UnknownRunError, UnknownTaskError
from tidings.mail import child_requests, queue
from tidings.mail.child_requests import Cancelled
from tidings.records.transcript import ConversationTx
from tidings.types import ConversationStatus, RunId, RunStatus

StopRunning = Callable[[str, str | None], Awaitable[list[RunId]]]
"""Stops what runs in a conversation (``conversation_id, owner``); returns the runs stopped."""

CancelTasks = Callable[[ConversationTx, str], None]
"""Cancels the undelivered notifications of a run's tasks, in the unit that holds the lock.

Passed in (the runtime gives ``tasks.journal.cancel_run``) because tasks deliver through the
mail: the mail does not import them back."""


def request_stop(cx: ConversationTx, *, owner: str | None) -> list[RunId]:
    """A person's stop (C6), in the unit that holds the conversation's lock: its running turns
    are asked to stop, and automatic continuation is suppressed until a person's business input
    (a maintenance compact keeps it). Returns the runs asked to stop."""
    c = cx.conversation
    if c.status is ConversationStatus.TOMBSTONED or (owner is not None and c.owner != owner):
        raise UnknownConversationError(cx.conversation_id)
    runs = [RunId(r["run_id"]) for r in cx.tx.all(
        "request_stop", conversation_id=cx.conversation_id
    )]
    cx.update(suppressed=True)
    cx.record_event("stop_requested", {"runs": list(runs)})
    return runs


@dataclass(frozen=True, slots=True)
class SourceStopped:
    """What one conversation's stop unit did."""

    cancelled_inputs: list[str]
    cancelled_requests: list[Cancelled]
    running: bool
    """The run, or a supplementary reply to it, was running: its turn must be stopped too."""


def stop_source(cx: ConversationTx, run_id: str, cancel_tasks: CancelTasks) -> SourceStopped:
    """Stop ``run_id`` as a source, in the unit that holds its conversation's lock."""
    row = cx.tx.one("get_run", run_id=run_id)
    if row is None or row["conversation_id"] != cx.conversation_id:
        raise UnknownRunError(run_id)
    cancelled = queue.cancel_supplementary(cx, run_id)  # its tasks' unread notices too
    requests = child_requests.cancel_run(cx, run_id)
    cancel_tasks(cx, run_id)
    # A supplementary reply to this source that has started is not delivered (M14).
    answering = child_requests.started_reply_to(cx, run_id)
    cx.record_event("run_stopped", {
        "run_public_id": run_id, "cancelled_inputs": cancelled,
        "cancelled_requests": [r.task_key for r in requests],
    }, run_id)
    return SourceStopped(cancelled, requests,
                         row["status"] == RunStatus.RUNNING.value or answering is not None)


def cancel_child_request(cx: ConversationTx, task_key: str) -> list[Cancelled]:
    """Cancel the request the (locked) parent opened under ``task_key``; empty when its reply
    was relayed or consumed already."""
    if cx.tx.one("child_request_by_key", parent_conversation_id=cx.conversation_id,
                 task_key=task_key) is None:
        raise UnknownTaskError(task_key)
    return child_requests.cancel_request(cx, task_key)


@dataclass(frozen=True, slots=True)
class StopCascade:
    """Stops sources and cancels requests, down the tree of child conversations."""

    conversations: Conversations
    stop_running: StopRunning
    cancel_tasks: CancelTasks
    cancelled: Callable[[list[Cancelled]], None] = lambda requests: None
    """Told of the requests a stop or a cancel cancelled, once committed: a remote child's
    task is cancelled at its agent (P5) -- a hint; its follower would see it at its next look."""

    async def stop(self, conversation_id: str, *, owner: str | None) -> list[RunId]:
        """A person's stop of the running turn: it is stopped as a source is (in cascade)."""
        runs = await self.stop_running(conversation_id, owner)
        seen: set[str] = set()
        for run_id in runs:  # the turns are stopped already; the rest is the source's
            await self.stop_run(conversation_id, run_id, owner=owner, seen=seen, stopping=False)
        return runs

    async def stop_run(
        self, conversation_id: str, run_id: str, *, owner: str | None, seen: set[str],
        stopping: bool = True,
    ) -> tuple[list[str], list[Cancelled]]:
        """Stop one source and everything below it; returns the cancelled input ids and every
        request cancelled on the way."""
        seen.add(run_id)
        unit = functools.partial(stop_source, run_id=run_id, cancel_tasks=self.cancel_tasks)
        stopped = await self.conversations.change(conversation_id, unit, owner=owner)
        if stopped.running and stopping:
            await self.stop_running(conversation_id, owner)
        requests = stopped.cancelled_requests
        return stopped.cancelled_inputs, requests + await self.cascade(requests, seen)

    async def cancel_child(
        self, parent_id: str, task_key: str, *, owner: str | None
    ) -> list[Cancelled]:
        """Cancel one request the parent opened, and cascade below it: the request first."""
        requests = await self.conversations.change(
            parent_id, functools.partial(cancel_child_request, task_key=task_key), owner=owner
        )
        return requests + await self.cascade(requests, set())

    async def cascade(self, requests: list[Cancelled], seen: set[str]) -> list[Cancelled]:
        """Below cancelled requests: a request not yet read is withdrawn from the child's
        queue; the child run that read one is stopped as a source, and so on down."""
        below: list[Cancelled] = []
        self.cancelled(requests)
        for request in requests:
            try:
                child_run = await self.conversations.change(
                    request.child_conversation_id,
                    functools.partial(child_requests.withdraw, cancelled=request),
                )
            except UnknownConversationError:
                continue  # a child deleted since: nothing below it is owed
            if child_run is not None and child_run not in seen:
                _, deeper = await self.stop_run(
                    request.child_conversation_id, child_run, owner=None, seen=seen
                )
                below += deeper
        return below


__all__ = (
    "CancelTasks", "SourceStopped", "StopCascade", "StopRunning", "cancel_child_request",
    "request_stop",
    "stop_source",
)
