"""Remote children (P5): a child request that a remote A2A agent answers instead of a local
conversation -- the same child, the same relay, the same guarantees (M16).

``spawn`` with ``agent: NAME`` opens the request as a local spawn does -- a child conversation
(the remote child's handle: its id is the one the parent's mail names), a row in
``child_requests``, turn-owned or not -- and, in the same unit, a row in ``remote_children``
with the A2A message id and context id the brief will carry. Only after that commit is the
brief sent (``SendMessage``, returning at once); the remote task's id is then stored. The
remote's answer becomes the request's reply exactly as a local child's turn answers it, in one
unit that also marks the remote task followed to its end; the relay then gives it to the parent
once, as ``child`` mail (batching, order, stop cascade: all the relay's own).

At most once, across a crash: a brief whose send was not recorded (the process died between
sending it and storing the task id, or a send broke without an answer) is never sent blindly
again. The task it made is looked up in the context chosen for it (``ListTasks``); only when the
agent has no task there is it sent -- with the same message id. An agent that cannot list its
tasks leaves the outcome unknown: the child is ``lost``, not asked twice. An agent that refuses
a context its caller chose (tidings' own A2A server opens its contexts itself) is sent the brief
without one, once that is recorded; the context it opens is stored with its task, and a later
``send`` continues there. Such a brief whose answer was not recorded cannot be looked up: lost.

Following: each open remote task is asked about (``GetTask``) every ``poll`` until it ends;
an unreachable agent is asked again after a capped backoff; nothing is decided while it is away.
Where the agent's card says it streams, the task is also watched (``SubscribeToTask``): a state
it streams that ends the task (or makes it wait) has the follower ask at once, so the answer is
relayed as soon as it exists, and while the stream is open the polls are ``SUBSCRIBED_POLLS``
times rarer. The stream only hastens: what is written is always what ``GetTask`` answered. A
stream that drops is resumed by asking (``GetTask``), then subscribing again; after
``SUBSCRIBE_TRIES`` subscriptions in a row that said nothing, the task is only polled.
``completed`` -> the artifacts' text is the reply (``completed``); ``failed`` / ``rejected`` ->
``failed``, ``canceled`` -> ``stopped``, saying what the agent said; a task the agent no longer
knows -> ``lost``; ``input-required`` -> the reply is the agent's question (status
``input_required``), and the parent answers it with ``send`` to the child, which continues the
same remote task. A request cancelled (its parent's run stopped, or a ``cancel``) is cancelled
at the agent (``CancelTask``). Each instance follows its own; a live one adopts those of a gone
one (:meth:`RemoteChildren.adopt`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import secrets
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from tidings.agents.declaration import RemoteAgent
from tidings.agents.remote import (
    ENDED,
    INTERRUPTED,
    RemoteCannotFindError,
    RemoteRefusedError,
    RemoteTask,
    RemoteTaskUnknownError,
    RemoteUnreachableError,
)
from tidings.clock import Clock
from tidings.conversations.catalog import Conversations
from tidings.errors import InvalidInputError
from tidings.mail.relay import (
    CHILD_TASK_PREFIX,
    REPLY_LIMIT_CHARS,
    Cancelled,
    ChildRequest,
)
from tidings.records.transcript import ConversationTx
from tidings.store import Row, Store, Tx
from tidings.support.policy import backoff, frozen_environment
from tidings.tools.registry import ToolContext
from tidings.types import ConversationId, new_id

if TYPE_CHECKING:
    from tidings.agents.client import AgentClient

log = logging.getLogger("tidings.agents")

REFUSALS_BEFORE_LOST = 8
"""Protocol errors in a row (other than "no such task") before a remote task is taken for lost:
its outcome cannot be learnt."""
SUBSCRIBED_POLLS = 5
"""While a remote task's stream is open, it is asked about every this many polls (the safety
net: a stream that says nothing of the end does not hold the answer back for long)."""
SUBSCRIBE_TRIES = 3
"""Subscriptions in a row that said nothing (refused, or dropped at once) before a remote task is
only polled."""
_RETRY_BASE = timedelta(milliseconds=200)
_RETRY_CAP = timedelta(seconds=30)

_STATUS = {"completed": "completed", "failed": "failed", "rejected": "failed",
           "canceled": "stopped", "input-required": "input_required",
           "auth-required": "failed"}
"""The reply's status for each state a remote task can stop in."""


class _Lost(Exception):
    """The remote task's outcome cannot be learnt."""


class RemoteChildren:
    """Opens remote child requests and follows their remote tasks; a component of the lifetime."""

    def __init__(
        self, agents: Iterable[RemoteAgent], *, store: Store, clock: Clock,
        conversations: Conversations, instance_id: Callable[[], str],
        replied: Callable[[], None], rng: random.Random | None = None,
    ) -> None:
        self.agents = {a.name: a for a in agents}
        # Imported only for agents to speak to: the a2a-sdk's client is slow to import.
        from tidings.agents.client import AgentClient

        self._clients = {name: AgentClient(a) for name, a in self.agents.items()}
        self._store = store
        self._clock = clock
        self._conversations = conversations
        self._instance_id = instance_id
        self._replied = replied
        self._rng = rng or random.Random()
        self._fresh: set[str] = set()
        """Requests opened here whose message was never tried: sent without a look-up."""
        self._followers: dict[str, asyncio.Task[None]] = {}
        self._wakes: dict[str, asyncio.Event] = {}
        self._stopping = False
        self._stopped = asyncio.Event()

    @property
    def name(self) -> str:
        return "tidings-remote-children"

    def names(self) -> tuple[str, ...]:
        return tuple(self.agents)

    def following(self) -> tuple[str, ...]:
        """The requests whose remote tasks are followed now."""
        return tuple(self._followers)

    # -- opening (from a parent's tool call) ---------------------------------------------------

    async def spawn(self, context: ToolContext, agent: str, brief: str, *, title: str = "",
                    turn_owned: bool = False) -> ChildRequest:
        """A child conversation for ``agent`` and the brief as its first request, sent once the
        request is committed."""
        declared = self.agents.get(agent)
        if declared is None:
            raise InvalidInputError(
                f"no remote agent is named {agent!r} (declared: "
                f"{', '.join(sorted(self.agents)) or 'none'})")
        declared.headers()  # its token is in the environment, or nothing is opened
        child_id = await self._conversations.create_child(
            context.conversation_id, title or f"{agent}: {brief[:60]}")
        return await self._open(context, child_id, agent, brief, kind="spawn",
                                context_id=str(uuid.uuid4()),
                                owner_run=context.run_id if turn_owned else None)

    async def send(self, context: ToolContext, child_id: str, message: str
                   ) -> ChildRequest | None:
        """Another request to a remote child this parent spawned: in its context, continuing
        its task when that waits for input. None when ``child_id`` is no remote child."""
        row = await self._store.read(lambda tx: tx.one(
            "last_remote_child_of", child_conversation_id=child_id))
        if row is None or row["parent_conversation_id"] != context.conversation_id:
            return None
        waiting = row["remote_state"] in ("input-required", "auth-required")
        return await self._open(
            context, ConversationId(child_id), str(row["agent"]), message, kind="send",
            context_id=str(row["context_id"]),
            task_id=str(row["remote_task_id"]) if waiting and row["remote_task_id"] else None)

    async def _open(self, context: ToolContext, child_id: ConversationId, agent: str, text: str,
                    *, kind: str, context_id: str, task_id: str | None = None,
                    owner_run: str | None = None) -> ChildRequest:
        parent_id = context.conversation_id
        environment = json.dumps(frozen_environment(
            await self._conversations.profile_of(parent_id)))
        request_id = new_id("creq")
        task_key = f"{CHILD_TASK_PREFIX}{secrets.token_hex(4)}"
        message_id = str(uuid.uuid4())
        input_id = f"a2a-{message_id}"  # no local input: the brief goes to the agent
        hook_token = secrets.token_urlsafe(24) if self.agents[agent].push_url else None

        def write(cx: ConversationTx) -> None:
            cx.tx.execute(
                "insert_child_request", request_id=request_id, parent_conversation_id=parent_id,
                child_conversation_id=child_id, input_id=input_id, run_public_id=context.run_id,
                call_id=context.call_id, task_key=task_key, kind=kind, environment=environment,
                now_us=cx.now_us)
            if owner_run is not None:
                cx.tx.execute("insert_turn_owned_request", request_id=request_id,
                              owner_run=owner_run)
            cx.tx.execute(
                "insert_remote_child", request_id=request_id, agent=agent,
                message_id=message_id, context_id=context_id, message=text,
                remote_task_id=task_id, instance_id=self._instance_id(), now_us=cx.now_us)
            if hook_token is not None:
                cx.tx.execute("insert_remote_child_hook", request_id=request_id,
                              token=hook_token)

        await self._conversations.change(child_id, write)
        self._fresh.add(request_id)
        self._begin(request_id)
        return ChildRequest(
            request_id, ConversationId(parent_id), child_id, input_id, context.run_id,
            context.call_id, task_key, kind, "open", None, None, False,
            json.loads(environment), owner_run)

    # -- following -----------------------------------------------------------------------------

    def cancelled(self, requests: Sequence[Cancelled]) -> None:
        """Requests were cancelled (a stop's cascade, a ``cancel``): their followers look now
        (they would at their next poll anyway) and cancel the remote tasks."""
        for request in requests:
            wake = self._wakes.get(request.request_id)
            if wake is not None:
                wake.set()

    async def adopt(self, *, limit: int = 500) -> int:
        """Remote tasks followed by gone instances, for the agents this runtime declares, are
        followed here from now on. Returns how many were adopted."""
        rows = await self._store.read(lambda tx: tx.all(
            "orphaned_remote_children", instance_id=self._instance_id(), limit=limit))
        adopted = 0
        for row in rows:
            if row["agent"] not in self.agents or self._stopping:
                continue
            request_id = str(row["request_id"])
            gone = str(row["instance_id"])

            def take(tx: Tx, request_id: str = request_id, gone: str = gone) -> int:
                return tx.execute("adopt_remote_child", request_id=request_id,
                                  instance_id=self._instance_id(), gone_instance_id=gone)

            taken = await self._store.transact(take)
            if taken:
                log.info("following the remote task of child request %s (agent %s) left by "
                         "instance %s", request_id, row["agent"], row["instance_id"])
                self._begin(request_id)
                adopted += 1
        return adopted

    def _begin(self, request_id: str) -> None:
        if self._stopping or request_id in self._followers:
            return
        self._wakes[request_id] = asyncio.Event()
        self._followers[request_id] = asyncio.create_task(
            self._follow(request_id), name=f"tidings-remote-child {request_id}")

    async def _row(self, request_id: str) -> Row | None:
        return await self._store.read(lambda tx: tx.one("remote_child", request_id=request_id))

    async def _follow(self, request_id: str) -> None:
        try:
            await self._until_ended(request_id)
        except asyncio.CancelledError:
            raise  # the runtime is closing: the next one follows the task again
        except Exception:
            log.exception("following the remote task of child request %s failed", request_id)
        finally:
            self._followers.pop(request_id, None)
            self._wakes.pop(request_id, None)
            self._fresh.discard(request_id)

    async def _until_ended(self, request_id: str) -> None:
        wake = self._wakes[request_id]
        watcher: asyncio.Task[bool] | None = None
        unreachable = refusals = silent = 0
        try:
            while True:
                wake.clear()  # before asking: a wake while the question is out is not lost
                row = await self._row(request_id)
                if row is None or row["ended_at_us"] is not None \
                        or row["instance_id"] != self._instance_id():
                    return
                agent = str(row["agent"])
                client = self._clients[agent]
                delay = self.agents[agent].poll
                try:
                    if row["state"] == "cancelled":
                        await self._cancel(client, row)
                        return
                    if row["sent_at_us"] is None:
                        now = await self._send(client, row)
                    elif row["remote_task_id"] is None:
                        raise _Lost("the agent answered with no task")  # not written so
                    else:
                        now = await client.get(str(row["remote_task_id"]))
                    unreachable = refusals = 0
                    if now.ended or now.waiting:
                        await self._reply(row, _STATUS.get(now.state, "failed"),
                                          _said(agent, now), now.state)
                        return
                    if now.task_id is not None and now.state != row["remote_state"]:
                        await self._seen(request_id, now.state)
                    if now.task_id is not None and (watcher is None or watcher.done()):
                        if watcher is not None:
                            silent = 0 if watcher.result() else silent + 1
                        watcher = None
                        if silent < SUBSCRIBE_TRIES and await client.streams():
                            watcher = asyncio.create_task(
                                self._watch(client, now.task_id, wake),
                                name=f"tidings-remote-child-stream {request_id}")
                    if watcher is not None and not watcher.done():
                        delay = delay * SUBSCRIBED_POLLS
                except RemoteTaskUnknownError as exc:
                    log.warning("the remote agent %s no longer knows task %s (child request "
                                "%s): lost: %s", agent, row["remote_task_id"], request_id, exc)
                    await self._reply(row, "lost", f"the remote agent {agent} no longer knows "
                                      f"task {row['remote_task_id']}: its outcome is unknown",
                                      "unknown")
                    return
                except _Lost as exc:
                    await self._reply(row, "lost", f"the remote agent {agent}: {exc}", "unknown")
                    return
                except RemoteRefusedError as exc:
                    refusals += 1
                    if refusals >= REFUSALS_BEFORE_LOST:
                        await self._reply(row, "lost", f"the remote agent {agent} kept refusing "
                                          f"to say how its task goes: {exc}", "unknown")
                        return
                    delay = backoff(refusals, self._rng, base=_RETRY_BASE, cap=_RETRY_CAP)
                except (RemoteUnreachableError, InvalidInputError) as exc:
                    unreachable += 1
                    if unreachable == 1:
                        log.warning("the remote agent %s cannot be asked now (child request "
                                    "%s): %s; asking again", agent, request_id, exc)
                    delay = backoff(unreachable, self._rng, base=_RETRY_BASE, cap=_RETRY_CAP)
                await self._clock.wait(wake, delay.total_seconds())
        finally:
            if watcher is not None and not watcher.done():
                watcher.cancel()
                with contextlib.suppress(BaseException):
                    await watcher

    async def hinted(self, request_id: str, token: str) -> bool:
        """A push from the agent about a request's task: with the token it was given, the task
        is asked about at once (by its follower, when this process follows it). Whether the
        token is the request's; nothing is read from the push itself."""
        row = await self._store.read(lambda tx: tx.one("remote_child_hook",
                                                        request_id=request_id))
        if row is None or not secrets.compare_digest(str(row["token"]).encode(),
                                                     token.encode()):
            return False
        wake = self._wakes.get(request_id)
        if wake is not None:
            wake.set()
        return True

    async def _seen(self, request_id: str, state: str) -> None:
        """The remote task's state as last seen, kept for whoever looks (the console)."""
        await self._store.transact(lambda tx: tx.execute(
            "remote_child_state", request_id=request_id, remote_state=state))

    @staticmethod
    async def _watch(client: AgentClient, task_id: str, wake: asyncio.Event) -> bool:
        """Watch the remote task's stream until it tells an end or a wait (then the follower is
        woken to ask), or drops (woken too: it asks, then subscribes again). Whether the stream
        said anything."""
        said = False
        try:
            async with contextlib.aclosing(client.watch(task_id)) as states:
                async for state in states:
                    said = True
                    if state in ENDED or state in INTERRUPTED:
                        break
        except Exception as exc:  # the follower's question says what is wrong, if anything
            log.debug("the stream of remote task %s ended: %s", task_id, exc)
        finally:
            wake.set()
        return said

    async def _send(self, client: AgentClient, row: Row) -> RemoteTask:
        """The message, sent at most once: a request opened here and never tried is sent; any
        other (a crash, or a send that broke without an answer, came between) is first looked
        up at the agent, and sent only when the agent has no task for it."""
        request_id = str(row["request_id"])
        task_id = row["remote_task_id"]
        context_id = str(row["context_id"])  # "": the agent opens its own
        found: RemoteTask | None = None
        if request_id not in self._fresh:
            if task_id is None and not context_id:
                raise _Lost("it opens its own contexts, so a message whose answer was not "
                            "recorded cannot be looked up; it is not sent again")
            try:
                found = await (client.get(str(task_id)) if task_id is not None
                               else client.find(str(row["context_id"]), str(row["message_id"])))
            except RemoteCannotFindError as exc:
                raise _Lost(f"could not learn whether the message reached it ({exc}); it is "
                            "not sent again") from None
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

        hook = self.agents[str(row["agent"])].hook(str(row["request_id"]))
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

    async def _cancel(self, client: AgentClient, row: Row) -> None:
        """The request was cancelled: so is its remote task (nothing is sent if the message
        never went); then it is no longer followed."""
        task_id = row["remote_task_id"]
        if task_id is not None and row["sent_at_us"] is not None:
            with contextlib.suppress(RemoteTaskUnknownError):
                await client.cancel(str(task_id))
            log.info("cancelled the remote task %s of child request %s (agent %s)", task_id,
                     row["request_id"], row["agent"])
        await self._store.transact(lambda tx: tx.execute(
            "end_remote_child", request_id=row["request_id"], remote_state="canceled",
            now_us=self._clock.now_us()))

    async def _reply(self, row: Row, status: str, text: str, state: str) -> None:
        """The remote's answer is the request's reply -- once, as a local child's turn answers
        it -- in the unit that ends the following; the relay is kicked."""
        def write(cx: ConversationTx) -> None:
            cx.tx.execute("reply_child_request", input_id=row["input_id"], reply_status=status,
                          reply=text[:REPLY_LIMIT_CHARS], reply_run_id=None, now_us=cx.now_us)
            cx.tx.execute("end_remote_child", request_id=row["request_id"], remote_state=state,
                          now_us=cx.now_us)

        await self._conversations.change(str(row["child_conversation_id"]), write)
        self._replied()

    # -- the component -------------------------------------------------------------------------

    async def run(self) -> None:
        await self._stopped.wait()

    async def shutdown(self) -> None:
        """Stop following (the remote tasks stay followed in the database: the next runtime on
        it follows them again). Idempotent."""
        if self._stopping:
            return
        self._stopping = True
        work = list(self._followers.values())
        for item in work:
            item.cancel()
        if work:
            await asyncio.gather(*work, return_exceptions=True)
        for client in self._clients.values():
            await client.close()
        self._stopped.set()


def _said(agent: str, task: RemoteTask) -> str:
    """The reply's text: the answer, or what the agent said of its task's end."""
    if task.state == "completed":
        return task.text
    said = f": {task.text}" if task.text else ""
    if task.state == "input-required":
        return f"the remote agent {agent} asks{said} (answer it with send to this child)"
    return f"the remote agent {agent}'s task ended {task.state}{said}"


__all__ = ("RemoteChildren",)
