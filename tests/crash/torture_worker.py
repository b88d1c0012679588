"""One runtime process of the crash torture (issue 7): ``torture_worker.py URL SEED MODE``.

``setup`` creates the torture's conversations and exits. ``churn`` opens a runtime on URL and
drives a random workload against those conversations until it is SIGKILLed: a person's words
(queued), steers, background tasks (short, long, failing, timing out, turn-owned), children
(conversation-owned and turn-owned), a published signal now and then, and a restart. ``drain``
opens the runtime with no workload, lets it finish what the killed instances left (recovery,
relays, supplementary turns) until nothing is pending, and exits 0.

The model is scripted (no network): rules answer by the newest message, and every answer is a
little slow so that kills land inside turns as well as between them.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import sys
from datetime import timedelta

from tests.waiting import eventually
from tidings import Profile, Runtime
from tidings.models.scripted import Rule, ScriptedModel
from tidings.runtime.root import RuntimeConfig
from tidings.turns.plan import TurnConfig
from tidings.types import ConversationStatus, DeliveryMode, RunStatus

OWNER = "torture"
CONVERSATIONS = 6
TOOLS = ("shell", "spawn", "send", "wait", "restart")
SLOT_TTL = timedelta(seconds=1)
DRAIN_LIMIT_S = 60.0

MODEL = ScriptedModel(
    rules=[
        Rule({"tool_result": "shell"}, {"text": "started", "delay_seconds": 0.01}),
        Rule({"tool_result": "spawn"}, {"text": "delegated", "delay_seconds": 0.01}),
        Rule({"tool_result": "restart"}, {"text": "restarting"}),
        Rule({"text_contains": "<task_result"}, {"text": "got the report", "delay_seconds": 0.02}),
        Rule({"meta_kind": "task_notification"}, {"text": "noted", "delay_seconds": 0.02}),
        Rule({"text_contains": "bg short"}, {"tool_calls": [{"name": "shell", "arguments": {
            "command": "sleep 0.05; echo short", "background": True}}]}),
        Rule({"text_contains": "bg long"}, {"tool_calls": [{"name": "shell", "arguments": {
            "command": "sleep 1.5; echo long", "background": True}}]}),
        Rule({"text_contains": "bg fail"}, {"tool_calls": [{"name": "shell", "arguments": {
            "command": "echo failing >&2; exit 3", "background": True}}]}),
        Rule({"text_contains": "bg timeout"}, {"tool_calls": [{"name": "shell", "arguments": {
            "command": "sleep 5", "background": True, "timeout_s": 0.3}}]}),
        Rule({"text_contains": "bg turn"}, {"tool_calls": [{"name": "shell", "arguments": {
            "command": "sleep 0.2; echo turn", "background": True, "lifetime": "turn"}}]}),
        Rule({"text_contains": "fg run"}, {"tool_calls": [{"name": "shell", "arguments": {
            "command": "sleep 0.1; echo fg"}}]}),
        Rule({"text_contains": "spawn turn"}, {"tool_calls": [{"name": "spawn", "arguments": {
            "brief": "count briefly", "lifetime": "turn"}}]}),
        Rule({"text_contains": "spawn child"}, {"tool_calls": [{"name": "spawn", "arguments": {
            "brief": "count briefly"}}]}),
        Rule({"text_contains": "please restart"}, {"tool_calls": [{"name": "restart",
                                                                    "arguments": {}}]}),
        Rule({"text_contains": "count briefly"}, {"text": "one two three",
                                                   "delay_seconds": 0.05}),
    ],
    default={"text": "ok", "delay_seconds": 0.02},
)

WORDS = (
    ("chat", 30), ("bg short", 14), ("bg long", 5), ("bg fail", 5), ("bg timeout", 3),
    ("bg turn", 5), ("fg run", 6), ("spawn child", 8), ("spawn turn", 5), ("please restart", 1),
)


def announce(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def config() -> RuntimeConfig:
    return RuntimeConfig(turns=TurnConfig(slot_ttl=SLOT_TTL, task_drain=timedelta(seconds=3)))


async def conversations(rt: Runtime) -> list[str]:
    page = await rt.catalog.list_owned(OWNER, limit=100)
    return sorted(c.conversation_id for c in page if c.title.startswith("torture"))


async def setup(url: str) -> None:
    async with Runtime.open(url, models=[MODEL], config=config()) as rt:
        if not await conversations(rt):
            for n in range(CONVERSATIONS):
                await rt.create_conversation(OWNER, Profile(model="scripted", tools=TOOLS),
                                             title=f"torture {n}")


async def churn(url: str, seed: int) -> None:
    rng = random.Random(seed)
    async with Runtime.open(url, models=[MODEL], config=config()) as rt:
        targets = await conversations(rt)
        announce(json.dumps({"ready": True, "conversations": len(targets)}))
        n = 0
        words = [w for w, _ in WORDS]
        weights = [k for _, k in WORDS]
        while True:
            n += 1
            conv = rng.choice(targets)
            roll = rng.random()
            try:
                if roll < 0.08:
                    await rt.post(conv, f"steer {seed}-{n}", delivery_mode=DeliveryMode.STEER)
                elif roll < 0.12:
                    await rt.store.transact(functools.partial(
                        rt.outbox.publish, conversation_id=conv, type=f"job.torture.{n}",
                        payload={"n": n}, idempotency_key=f"sig-{seed}-{n}"))
                else:
                    word = rng.choices(words, weights)[0]
                    await rt.post(conv, f"{word} {seed}-{n}")
            except Exception as exc:  # a full queue, a refused input: the workload goes on
                announce(json.dumps({"refused": type(exc).__name__}))
            await asyncio.sleep(rng.uniform(0.005, 0.04))


async def pending(rt: Runtime, targets: list[str]) -> list[str]:
    """What is still owed somewhere (empty: the database is quiescent)."""
    left: list[str] = []
    seen: set[str] = set()
    queue = list(targets)
    while queue:
        conv = queue.pop()
        if conv in seen:
            continue
        seen.add(conv)
        c = await rt.conversation(conv)
        if c.status is ConversationStatus.TOMBSTONED:
            continue
        if any(i.state.value == "queued" for i in await rt.inputs.list(conv)):
            left.append(f"{conv}: queued input")
        if any(r.status is RunStatus.RUNNING for r in await rt.runs.list(conv)):
            left.append(f"{conv}: running run")
        if any(t.state.value == "running" for t in await rt.tasks.list(conv)):
            left.append(f"{conv}: running task")
        for request in await rt.relay.requests_of(conv, limit=1000):
            queue.append(request.child_conversation_id)
            if request.state == "open":
                left.append(f"{conv}: open child request {request.task_key}")
            elif request.state == "replied" and not request.relayed:
                left.append(f"{conv}: unrelayed reply {request.task_key}")
    return left


async def drain(url: str) -> None:
    async with Runtime.open(url, models=[MODEL], config=config()) as rt:
        targets = await conversations(rt)
        left: list[str] = []

        async def nudged() -> list[str]:
            """What is still pending; if anything, after nudging it on (a relay and a sweep)."""
            left[:] = await pending(rt, targets)
            if left:
                await rt.relay.relay_pending()
                await rt.coordinator.sweep()
            return left

        try:
            await eventually(nudged, lambda still: not still, what="every conversation drained",
                             within_s=DRAIN_LIMIT_S, poll_s=0.2)
        except AssertionError:
            announce(json.dumps({"drained": False, "left": left[:20]}))
            raise SystemExit(3) from None
        announce(json.dumps({"drained": True}))


def run(url: str, seed: int, mode: str) -> None:
    if mode == "setup":
        asyncio.run(setup(url))
    elif mode == "churn":
        asyncio.run(churn(url, seed))
    elif mode == "drain":
        asyncio.run(drain(url))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


def main() -> None:
    run(sys.argv[1], int(sys.argv[2]), sys.argv[3])


if __name__ == "__main__":
    main()
