"""The webhook worker: POSTs each owed push notification to its config's URL, at least once.

It is one of the runtime's components (a :class:`~tidings.support.lifetime.Loop`): its work,
:meth:`Webhooks.serve`, is cancelled at shutdown -- an attempt cut short is tried again, the
notification id the same. The POSTs themselves run on a thread and event loop of their own
(:class:`~tidings.push.sender.Sender`), so that a busy runtime loop does not delay each of
their steps. It wakes on the store's
journal hints -- a commit of this process, or (PostgreSQL) of any process of the cluster -- and
by itself every ``poll``, or when the earliest backoff ends. Only the hints of conversations
that have a push config wake it (the set is read again at every ``poll``, and a config put in
this process joins it at once): a commit elsewhere cannot owe a notification, and a runtime
without A2A push configs reads nothing per commit. A config put in another process is seen
within a ``poll`` here (that process's own worker hears of it at once). It leases the due head
of each
config's queue (:class:`~tidings.push.deliveries.PushDeliveries`) and sends them concurrently,
one config at a time in journal order, claiming more while attempts wait on their receivers
(at most ``claim_max_count`` under way).

Each attempt:

- resolves the URL's host again and connects to the address it checked
  (:func:`~tidings.push.targets.resolve`), so DNS rebinding reaches no private address; one
  that resolves to a private address (not allowed) is a dead letter at once, ``private_target``;
- POSTs the A2A body (:func:`~tidings.push.notifications.body`) with the notification's stable
  id (``X-A2A-Notification-Id``), the config's token (``X-A2A-Notification-Token``) and its
  authentication (``Authorization: <scheme> <credentials>``), within ``attempt_timeout``;
- follows no redirect: a 3xx is a failed attempt (``redirect``), as is any answer but 2xx
  (``http_<status>``), a timeout (``timeout``) or a connection that fails (``unreachable``).

Any number of processes may run it on one database: a lease is taken once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping

import httpx

from tidings.clock import Clock, to_us
from tidings.errors import InvalidInputError, PrivateTargetError
from tidings.push.deliveries import PushDeliveries, PushDelivery
from tidings.push.notifications import NOTIFICATION_ID_HEADER, TOKEN_HEADER, body
from tidings.push.sealing import unseal
from tidings.push.sender import Sender
from tidings.push.targets import resolve
from tidings.records.results import MasterKey
from tidings.store import Row, Store
from tidings.support.lifetime import Loop
from tidings.support.metrics import Metrics

log = logging.getLogger("tidings.push")

SENT = "tidings_push_notifications_total"
PURGE_EVERY = 600
"""Passes between two purges of delivered notifications past retention."""


class Webhooks(Loop):
    """The delivery worker (see the module docstring)."""

    def __init__(self, store: Store, clock: Clock, deliveries: PushDeliveries, *,
                 metrics: Metrics | None = None,
                 master_key: Callable[[], MasterKey | None] = lambda: None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        super().__init__("tidings-webhooks")
        self.store = store
        self.clock = clock
        self.deliveries = deliveries
        self.config = deliveries.config
        self.metrics = metrics
        self.master_key = master_key
        """Opens the configs' sealed secrets (:mod:`tidings.push.sealing`)."""
        self._transport = transport
        self._wake = asyncio.Event()
        self._flying: set[asyncio.Task[None]] = set()
        """Attempts under way: the worker claims more while they wait on their receivers."""
        self._watched: frozenset[str] | None = None
        """The conversations that have a push config, as last read (None: not read yet)."""
        self._watched_read_at = 0.0

    def watch(self, conversation_id: str) -> None:
        """A push config was put in ``conversation_id``: its commits wake the worker now."""
        if self._watched is not None:
            self._watched = self._watched | {conversation_id}
        self._wake.set()

    def _hinted(self, hints: Mapping[str, int], _written: Mapping[str, object]) -> None:
        watched = self._watched
        if watched is None or not watched.isdisjoint(hints):
            self._wake.set()

    async def serve(self) -> None:
        """Deliver until cancelled."""
        subscription = self.store.feed.subscribe(self._hinted, lambda _live: None)
        sender = Sender(timeout_s=self.config.attempt_timeout.total_seconds(),
                        transport=self._transport)
        try:
            await asyncio.to_thread(sender.start)
            passes = 0
            while True:
                passes += 1
                try:
                    await self._pass(sender)
                    if passes % PURGE_EVERY == 0:
                        await self.deliveries.purge()
                except Exception:  # the database away: the next pass tries again
                    log.exception("push notifications: a pass failed")
                    await self.clock.sleep(self.config.poll.total_seconds())
        finally:
            self.store.feed.unsubscribe(subscription)
            for task in self._flying:  # cut short: tried again when their leases end
                task.cancel()
            await asyncio.gather(*self._flying, return_exceptions=True)
            await asyncio.shield(asyncio.to_thread(sender.close))

    async def _pass(self, sender: Sender) -> None:
        self._wake.clear()
        poll_s = self.config.poll.total_seconds()
        if self._watched is None or time.monotonic() - self._watched_read_at >= poll_s:
            self._watched_read_at = time.monotonic()
            self._watched = await self.deliveries.watched_conversations()
        room = self.config.claim_max_count - len(self._flying)
        due = await self.deliveries.next_due_us() if room > 0 else None
        now = self.clock.now_us()
        wait_us = to_us(self.config.poll)
        if due is not None and due <= now:
            claimed, configs = await self.deliveries.claim(room)
            if claimed:
                targets = {(c["task_id"], c["owner"], c["config_id"]): c for c in configs}
                for delivery in claimed:
                    task = asyncio.create_task(self._attempt(sender, delivery, targets))
                    self._flying.add(task)
                    task.add_done_callback(self._landed)
                return  # more may be due: look again at once
            due = await self.deliveries.next_due_us()
        if due is not None and due > now:
            wait_us = min(wait_us, due - now)
        await self.clock.wait(self._wake, max(wait_us, 1_000) / 1e6)

    def _landed(self, task: asyncio.Task[None]) -> None:
        self._flying.discard(task)
        self._wake.set()  # its config's next notification may be due now
        if not task.cancelled() and task.exception() is not None:
            log.error("push notifications: an attempt failed", exc_info=task.exception())

    async def _attempt(self, sender: Sender, delivery: PushDelivery,
                       targets: Mapping[tuple[str, str, str], Row]) -> None:
        config = targets.get((delivery.task_id, delivery.owner, delivery.config_id))
        if config is None:  # deleted meanwhile: its deliveries went with it
            return
        code = await sender.run(lambda client: self._post(client, delivery, config))
        if code is None:
            if await self.deliveries.ack(delivery):
                self._count("delivered")
            return
        state = await self.deliveries.release(delivery, code,
                                              permanent=code == "private_target")
        self._count("dead_letter" if state == "dead_letter" else "failed")
        if state == "dead_letter":
            log.warning("push notification %s to %s is a dead letter (%s, %d attempts)",
                        delivery.notification_id, delivery.config_id, code, delivery.attempts)

    async def _post(self, client: httpx.AsyncClient, delivery: PushDelivery,
                    config: Row) -> str | None:
        """One attempt, on the sender's loop; None when the receiver took it, else the
        failure's code."""
        try:
            target = await resolve(str(config["url"]),
                                   allow_private=self.config.allow_private)
        except PrivateTargetError:
            return "private_target"
        except InvalidInputError:
            return "unresolved"
        key = self.master_key()
        token, credentials = (unseal(key, str(config[column]), owner=delivery.owner,
                                     config_id=delivery.config_id)
                              for column in ("token", "auth_credentials"))
        if token is None or credentials is None:
            return "sealed"  # no key opens them yet (a locked runtime): tried again later
        headers = {"Host": target.host_header(), "Content-Type": "application/json",
                   NOTIFICATION_ID_HEADER: delivery.notification_id}
        if token:
            headers[TOKEN_HEADER] = token
        if config["auth_scheme"] and credentials:
            headers["Authorization"] = f"{config['auth_scheme']} {credentials}"
        extensions = ({"sni_hostname": target.host}
                      if target.url.startswith("https:") else {})
        try:
            # The whole attempt, not each read: it ends well within its lease.
            async with asyncio.timeout(self.config.attempt_timeout.total_seconds()):
                response = await client.post(
                    target.connect_url(), content=json.dumps(body(delivery)).encode(),
                    headers=headers, extensions=extensions)
        except (httpx.TimeoutException, TimeoutError):
            return "timeout"
        except httpx.HTTPError:
            return "unreachable"
        if 200 <= response.status_code < 300:
            return None
        if 300 <= response.status_code < 400:
            return "redirect"
        return f"http_{response.status_code}"

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.count(SENT, "Push-notification attempts, by outcome.",
                               labels={"outcome": outcome})


__all__ = ("Webhooks",)
