"""Following a remote child's task to its end (P5): asked about, watched, hinted by pushes.

Each open remote task is asked about (``GetTask``) every ``poll`` until it ends; an unreachable
agent is asked again after a capped backoff; nothing is decided while it is away. Where the
agent's card says it streams, the task is also watched (``SubscribeToTask``): a state it streams
that ends the task (or makes it wait) has the follower ask at once, so the answer is relayed as
soon as it exists, and while the stream is open the polls are ``SUBSCRIBED_POLLS`` times rarer.
The stream only hastens: what is written is always what ``GetTask`` answered. A stream that
drops is resumed by asking (``GetTask``), then subscribing again; after ``SUBSCRIBE_TRIES``
subscriptions in a row that said nothing, the task is only polled. A push from the agent, with
the token it was given, has the task asked about at once too.

An end (or a wait for the parent's answer) is recorded as the request's reply
(:mod:`tidings.agents.replies`); a task the agent no longer knows -> ``lost``, as is one whose
agent keeps refusing to say how it goes (``REFUSALS_BEFORE_LOST``). A request cancelled (its
parent's run stopped, or a ``cancel``) is cancelled at the agent (``CancelTask``). A message
never sent is sent first, at most once (:mod:`tidings.agents.sending`). Each instance follows
its own; a live one adopts those of a gone one
(:meth:`~tidings.agents.children.RemoteChildren.adopt`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from tidings.agents.declaration import RemoteAgent
from tidings.agents.remote import (
    ENDED,
    INTERRUPTED,
    RemoteRefusedError,
    RemoteTaskLostError,
    RemoteTaskUnknownError,
    RemoteUnreachableError,
)
from tidings.agents.replies import STATUS, Replies, reply_text
from tidings.agents.sending import Sender
from tidings.clock import Clock
from tidings.errors import InvalidInputError
from tidings.store import Row, Store
from tidings.support.policy import backoff

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


class Followers:
    """One follower (an asyncio task) for each remote task followed here, until it ends."""

    def __init__(
        self, agents: Mapping[str, RemoteAgent], clients: Mapping[str, AgentClient], *,
        store: Store, clock: Clock, instance_id: Callable[[], str], sender: Sender,
        replies: Replies, rng: random.Random,
    ) -> None:
        self._agents = agents
        self._clients = clients
        self._store = store
        self._clock = clock
        self._instance_id = instance_id
        self._sender = sender
        self._replies = replies
        self._rng = rng
        self._followers: dict[str, asyncio.Task[None]] = {}
        self._wakes: dict[str, asyncio.Event] = {}
        self.stopping = False
        """No request is followed from now on (the lifetime is closing)."""

    def following(self) -> tuple[str, ...]:
        """The requests whose remote tasks are followed now."""
        return tuple(self._followers)

    def begin(self, request_id: str) -> None:
        """Follow the request's remote task (unless it is followed already, or closing)."""
        if self.stopping or request_id in self._followers:
            return
        self._wakes[request_id] = asyncio.Event()
        self._followers[request_id] = asyncio.create_task(
            self._follow(request_id), name=f"tidings-remote-child {request_id}")

    def wake(self, request_id: str) -> None:
        """The request's follower, if it is here, asks now rather than at its next poll."""
        wake = self._wakes.get(request_id)
        if wake is not None:
            wake.set()

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
            self._sender.forget(request_id)

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
                delay = self._agents[agent].poll
                try:
                    if row["state"] == "cancelled":
                        await self._cancel(client, row)
                        return
                    if row["sent_at_us"] is None:
                        now = await self._sender.send(client, row)
                    elif row["remote_task_id"] is None:
                        # not written so
                        raise RemoteTaskLostError("the agent answered with no task")
                    else:
                        now = await client.get(str(row["remote_task_id"]))
                    unreachable = refusals = 0
                    if now.ended or now.waiting:
                        await self._replies.reply(row, STATUS.get(now.state, "failed"),
                                                  reply_text(agent, now), now.state)
                        return
                    if now.task_id is not None and now.state != row["remote_state"]:
                        await self._replies.seen(request_id, now.state)
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
                    await self._replies.reply(
                        row, "lost", f"the remote agent {agent} no longer knows task "
                        f"{row['remote_task_id']}: its outcome is unknown", "unknown")
                    return
                except RemoteTaskLostError as exc:
                    await self._replies.reply(row, "lost", f"the remote agent {agent}: {exc}",
                                              "unknown")
                    return
                except RemoteRefusedError as exc:
                    refusals += 1
                    if refusals >= REFUSALS_BEFORE_LOST:
                        await self._replies.reply(
                            row, "lost", f"the remote agent {agent} kept refusing to say how "
                            f"its task goes: {exc}", "unknown")
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

    async def shutdown(self) -> None:
        """Stop following: every follower is cancelled and awaited (the remote tasks stay
        followed in the database: the next runtime on it follows them again)."""
        self.stopping = True
        work = list(self._followers.values())
        for item in work:
            item.cancel()
        if work:
            await asyncio.gather(*work, return_exceptions=True)


__all__ = ("REFUSALS_BEFORE_LOST", "SUBSCRIBED_POLLS", "SUBSCRIBE_TRIES", "Followers")
