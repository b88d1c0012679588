"""The child process of the crash tests: ``child.py MODE URL [ARGS...]``.

Each mode does some outbox work against the database at URL, announces a checkpoint on
stdout as one JSON line ``{"checkpoint": ..., ...}`` and then blocks until it is SIGKILLed
(it never closes its outbox). The ``claimer`` mode instead runs to completion, logging every
claim and ack, for the multi-process concurrency test.

The crash modes use a ManualClock that starts where the parent's does, so deadlines agree
between the two processes; ``claimer`` runs on the system clock, like a real deployment.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TextIO

from tidings import (
    Lease,
    ManualClock,
    Outbox,
    OutboxConfig,
    StaleLeaseError,
    SystemClock,
    Tx,
    open_store,
)
from tidings.records import operations

BLOCK_SECONDS = 120  # a safety net: a child whose parent vanished does not linger forever


def announce(checkpoint: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"checkpoint": checkpoint, **fields}) + "\n")
    sys.stdout.flush()


def lease_fields(lease: Lease) -> dict[str, Any]:
    return {
        "token": lease.token,
        "conversation_id": lease.conversation_id,
        "deadline_us": lease.deadline_us,
        "deliveries": [dataclasses.asdict(d) for d in lease.deliveries],
    }


async def started(url: str, config: OutboxConfig | None = None) -> Outbox:
    store = await open_store(url)
    outbox = Outbox(store, clock=ManualClock(), config=config)
    await outbox.instance.start()
    return outbox


async def block() -> None:
    await asyncio.sleep(BLOCK_SECONDS)
    raise SystemExit("the parent never killed this child")


async def publish_committed(url: str, conversation_id: str, key: str) -> None:
    """Publish and commit, announce ``committed``, then wait to be killed."""
    ob = await started(url)
    published = await ob.store.transact(
        lambda tx: ob.publish(
            tx, conversation_id, "task.exited", {"task_key": "t1"}, idempotency_key=key
        )
    )
    announce(
        "committed", instance_id=ob.instance.instance_id, event_id=published.event_id,
        delivery_id=published.delivery_id,
    )
    await block()


async def publish_uncommitted(url: str, conversation_id: str, key: str) -> None:
    """Publish inside a unit and die inside it, before its commit."""
    ob = await started(url)

    def unit(tx: Tx) -> None:
        published = ob.publish(
            tx, conversation_id, "task.exited", {"task_key": "t1"}, idempotency_key=key
        )
        announce("published_not_committed", instance_id=ob.instance.instance_id,
                 event_id=published.event_id)
        time.sleep(BLOCK_SECONDS)  # holds the transaction open until SIGKILL

    await ob.store.transact(unit)
    raise SystemExit("the parent never killed this child")


async def accept_then_call(url: str, owner: str, key: str) -> None:
    """Accept an operation, commit, announce that the external tool is about to run."""
    ob = await started(url)
    operation = await ob.store.transact(
        lambda tx: operations.accept(tx, ob.instance, "tool.shell", owner, idempotency_key=key)
    )
    announce(
        "about_to_call_external_tool", instance_id=ob.instance.instance_id,
        operation_id=operation.operation_id,
    )
    await block()  # the "external tool" is running when the process dies


async def claim_and_hold(url: str, conversation_id: str) -> None:
    """Claim a lease, announce it, and hold it (between claim and consume) until killed."""
    ob = await started(url)
    lease = await ob.claim(conversation_id, owner="run-child")
    announce("claimed", instance_id=ob.instance.instance_id, **lease_fields(lease))
    await block()


async def consume_and_die(url: str, conversation_id: str, transcript: str) -> None:
    """Claim, then die inside the consumer's unit after its writes and ack, before commit."""
    ob = await started(url)
    lease = await ob.claim(conversation_id, owner="run-child")

    def unit(tx: Tx) -> None:
        # The turn's own durable write (a stand-in transcript row) and the ack, one unit.
        ob.publish(tx, transcript, "turn.completed", {"run": "run-child"},
                   idempotency_key="turn-1")
        ob.ack(tx, lease)
        announce("acked_not_committed", instance_id=ob.instance.instance_id, **lease_fields(lease))
        time.sleep(BLOCK_SECONDS)  # holds the transaction open until SIGKILL

    await ob.store.transact(unit)
    raise SystemExit("the parent never killed this child")


def acking(ob: Outbox, lease: Lease) -> Callable[[Tx], None]:
    """The consumer's unit: here it only acknowledges."""
    return lambda tx: ob.ack(tx, lease)


def log(out: TextIO, **fields: Any) -> None:
    out.write(json.dumps(fields) + "\n")


async def claimer(
    url: str, out: TextIO, conversations: int, seed: int, ttl_ms: int, stall: float
) -> None:
    """Claim from every conversation until all signals are acknowledged; log each step.

    Now and then (probability ``stall``) it stalls past its lease deadline before acking,
    so other processes reclaim and the stale ack must be refused.
    """
    ttl = timedelta(milliseconds=ttl_ms)
    config = OutboxConfig(lease_ttl=ttl, max_attempts=1_000, claim_max_count=4)
    store = await open_store(url)
    ob = Outbox(store, clock=SystemClock(), config=config)
    await ob.instance.start()
    rng = random.Random(seed)
    names = [f"conv-{i:03d}" for i in range(conversations)]
    ttl_us = ttl_ms * 1_000
    give_up = time.monotonic() + 45
    pid = os.getpid()
    claims = acks = stale = 0
    try:
        announce("ready", instance_id=ob.instance.instance_id)
        while time.monotonic() < give_up:
            rng.shuffle(names)
            claimed_any = False
            for name in names:
                lease = await ob.claim(name)
                if not lease.deliveries:
                    continue
                claimed_any = True
                claims += 1
                for d in lease.deliveries:
                    log(out, ev="claim", pid=pid, delivery_id=d.delivery_id,
                        token=lease.token, claim_us=lease.deadline_us - ttl_us,
                        deadline_us=lease.deadline_us, attempts=d.attempts, seq=d.seq)
                if rng.random() < stall:
                    await asyncio.sleep(ttl.total_seconds() * 1.5)
                try:
                    await ob.store.transact(acking(ob, lease))
                except StaleLeaseError:
                    stale += 1
                    for d in lease.deliveries:
                        log(out, ev="stale", pid=pid, delivery_id=d.delivery_id,
                            token=lease.token, at_us=time.time_ns() // 1000)
                    continue
                acks += 1
                for d in lease.deliveries:
                    log(out, ev="ack", pid=pid, delivery_id=d.delivery_id,
                        token=lease.token, at_us=time.time_ns() // 1000)
            if not claimed_any:
                if (await ob.stats()).backlog == 0:
                    break
                await asyncio.sleep(0.02)  # the rest is leased by other processes
        announce("done", claims=claims, acks=acks, stale=stale)
    finally:
        await ob.instance.close()
        await ob.store.close()


def main() -> None:
    mode, url, *args = sys.argv[1:]
    if mode == "publish":
        asyncio.run(publish_committed(url, args[0], args[1]))
    elif mode == "publish_uncommitted":
        asyncio.run(publish_uncommitted(url, args[0], args[1]))
    elif mode == "accept":
        asyncio.run(accept_then_call(url, args[0], args[1]))
    elif mode == "claim":
        asyncio.run(claim_and_hold(url, args[0]))
    elif mode == "consume":
        asyncio.run(consume_and_die(url, args[0], args[1]))
    elif mode == "claimer":
        with open(args[0], "a", encoding="utf-8", buffering=1) as out:
            asyncio.run(claimer(url, out, int(args[1]), int(args[2]), int(args[3]),
                                float(args[4])))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
