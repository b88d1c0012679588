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

:class:`RemoteChildren` opens the requests, adopts those of gone instances and is the
component of the lifetime; the rest has a module each: sending the message at most once,
across a crash (:mod:`tidings.agents.sending`), following the remote task to its end -- polled,
watched, hinted by pushes, cancelled (:mod:`tidings.agents.following`) -- and what its end
makes of the request's reply (:mod:`tidings.agents.replies`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import secrets
import uuid
from collections.abc import Callable, Iterable, Sequence

from tidings.agents.declaration import RemoteAgent
from tidings.agents.following import Followers
from tidings.agents.replies import Replies
from tidings.agents.sending import Sender
from tidings.clock import Clock
from tidings.conversations.catalog import Conversations
from tidings.errors import InvalidInputError
from tidings.mail.child_requests import CHILD_TASK_PREFIX, Cancelled, ChildRequest
from tidings.records.transcript import ConversationTx
from tidings.store import Store, Tx
from tidings.support.policy import frozen_environment
from tidings.tools.registry import ToolContext
from tidings.types import ConversationId, new_id

log = logging.getLogger("tidings.agents")


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
        self._conversations = conversations
        self._instance_id = instance_id
        self._sender = Sender(self.agents, store=store, clock=clock)
        self._followers = Followers(
            self.agents, self._clients, store=store, clock=clock, instance_id=instance_id,
            sender=self._sender, rng=rng or random.Random(),
            replies=Replies(store=store, conversations=conversations, replied=replied))
        self._stopped = asyncio.Event()

    @property
    def name(self) -> str:
        return "tidings-remote-children"

    def names(self) -> tuple[str, ...]:
        return tuple(self.agents)

    def following(self) -> tuple[str, ...]:
        """The requests whose remote tasks are followed now."""
        return self._followers.following()

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
        self._sender.opened(request_id)
        self._followers.begin(request_id)
        return ChildRequest(
            request_id, ConversationId(parent_id), child_id, input_id, context.run_id,
            context.call_id, task_key, kind, "open", None, None, False,
            json.loads(environment), owner_run)

    # -- following -----------------------------------------------------------------------------

    def cancelled(self, requests: Sequence[Cancelled]) -> None:
        """Requests were cancelled (a stop's cascade, a ``cancel``): their followers look now
        (they would at their next poll anyway) and cancel the remote tasks."""
        for request in requests:
            self._followers.wake(request.request_id)

    async def adopt(self, *, limit: int = 500) -> int:
        """Remote tasks followed by gone instances, for the agents this runtime declares, are
        followed here from now on. Returns how many were adopted."""
        rows = await self._store.read(lambda tx: tx.all(
            "orphaned_remote_children", instance_id=self._instance_id(), limit=limit))
        adopted = 0
        for row in rows:
            if row["agent"] not in self.agents or self._followers.stopping:
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
                self._followers.begin(request_id)
                adopted += 1
        return adopted

    async def hinted(self, request_id: str, token: str) -> bool:
        """A push from the agent about a request's task: with the token it was given, the task
        is asked about at once (by its follower, when this process follows it). Whether the
        token is the request's; nothing is read from the push itself."""
        row = await self._store.read(lambda tx: tx.one("remote_child_hook",
                                                        request_id=request_id))
        if row is None or not secrets.compare_digest(str(row["token"]).encode(),
                                                     token.encode()):
            return False
        self._followers.wake(request_id)
        return True

    # -- the component -------------------------------------------------------------------------

    async def run(self) -> None:
        await self._stopped.wait()

    async def shutdown(self) -> None:
        """Stop following (the remote tasks stay followed in the database: the next runtime on
        it follows them again). Idempotent."""
        if self._followers.stopping:
            return
        await self._followers.shutdown()
        for client in self._clients.values():
            await client.close()
        self._stopped.set()


__all__ = ("RemoteChildren",)
