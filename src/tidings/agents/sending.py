"""A remote child's message, sent to its agent at most once (P5).

At most once, across a crash: a brief whose send was not recorded (the process died between
sending it and storing the task id, or a send broke without an answer) is never sent blindly
again. The task it made is looked up in the context chosen for it (``ListTasks``); only when the
agent has no task there is it sent -- with the same message id. An agent that cannot list its
tasks leaves the outcome unknown: the child is ``lost``, not asked twice. An agent that refuses
a context its caller chose (tidings' own A2A server opens its contexts itself) is sent the brief
without one, once that is recorded; the context it opens is stored with its task, and a later
``send`` continues there. Such a brief whose answer was not recorded cannot be looked up: lost.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tidings.agents.declaration import RemoteAgent
from tidings.agents.remote import (
    RemoteCannotFindError,
    RemoteTask,
    RemoteTaskLostError,
    RemoteTaskUnknownError,
)
from tidings.clock import Clock
from tidings.store import Row, Store

if TYPE_CHECKING:
    from tidings.agents.client import AgentClient

log = logging.getLogger("tidings.agents")


class Sender:
    """Sends the message of each remote child request once (see the module docstring)."""

    def __init__(self, agents: Mapping[str, RemoteAgent], *, store: Store, clock: Clock
                 ) -> None:
        self._agents = agents
        self._store = store
        self._clock = clock
        self._fresh: set[str] = set()
        """Requests opened here whose message was never tried: sent without a look-up."""

    def opened(self, request_id: str) -> None:
        """A request was opened here: its message was never tried."""
        self._fresh.add(request_id)

    def forget(self, request_id: str) -> None:
        """The request is no longer followed here."""
        self._fresh.discard(request_id)

    async def send(self, client: AgentClient, row: Row) -> RemoteTask:
        """The message, sent at most once: a request opened here and never tried is sent; any
        other (a crash, or a send that broke without an answer, came between) is first looked
        up at the agent, and sent only when the agent has no task for it."""
        request_id = str(row["request_id"])
        task_id = row["remote_task_id"]
        context_id = str(row["context_id"])  # "": the agent opens its own
        found: RemoteTask | None = None
        if request_id not in self._fresh:
            if task_id is None and not context_id:
                raise RemoteTaskLostError(
                    "it opens its own contexts, so a message whose answer was not recorded "
                    "cannot be looked up; it is not sent again")
            try:
                found = await (client.get(str(task_id)) if task_id is not None
                               else client.find(str(row["context_id"]), str(row["message_id"])))
            except RemoteCannotFindError as exc:
                raise RemoteTaskLostError(f"could not learn whether the message reached it "
                                          f"({exc}); it is not sent again") from None
            if found is not None and task_id is not None and found.waiting:
                found = None  # the task still waits for this answer: it did not arrive
        if found is None:
            self._fresh.discard(request_id)  # from here on, a broken send is looked up first
            found = await self._sent(client, row, context_id)
        if found.task_id is None:  # answered with a message: that is the reply
            return found
        await self._store.transact(lambda tx: tx.execute(
            "remote_child_sent", request_id=request_id, remote_task_id=found.task_id,
            remote_state=found.state, context_id=found.context_id or context_id,
            now_us=self._clock.now_us()))
        return found

    async def _sent(self, client: AgentClient, row: Row, context_id: str) -> RemoteTask:
        task_id = row["remote_task_id"]

        hook = self._agents[str(row["agent"])].hook(str(row["request_id"]))
        push = None if hook is None or not row["hook_token"] else (hook, str(row["hook_token"]))

        async def send(context_id: str) -> RemoteTask:
            return await client.send(str(row["message"]), message_id=str(row["message_id"]),
                                     context_id=context_id,
                                     task_id=None if task_id is None else str(task_id),
                                     push=push)
        try:
            return await send(context_id)
        except RemoteTaskUnknownError:
            if task_id is not None or not context_id or row["kind"] != "spawn":
                raise
        # The agent does not know the context chosen for the brief (nothing was made there):
        # it opens its own. Recorded first, so a crash before the answer is stored never
        # sends the brief again.
        await self._store.transact(lambda tx: tx.execute(
            "remote_child_own_context", request_id=row["request_id"]))
        log.info("the remote agent %s opens its own contexts: the brief of child request %s "
                 "goes without one", row["agent"], row["request_id"])
        return await send("")


__all__ = ("Sender",)
