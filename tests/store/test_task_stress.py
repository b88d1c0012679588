"""T3/T4 under load: many tasks whose processes end at random moments against their tool
results committing at random moments, with steers and other steps' tool calls in between, all
racing through the real store. Every task is announced exactly once, after its result, and the
transcript stays paired. Each unit delivers what is due through the door and reads it at once,
as a turn does at its safe point."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import TypeVar

from tests.conftest import Backend
from tidings.clock import SystemClock
from tidings.conversations.catalog import Conversations
from tidings.mail.door import Door
from tidings.models.base import ToolCall
from tidings.records.transcript import ConversationTx
from tidings.store import Store, Tx, open_store
from tidings.tasks import journal
from tidings.tasks.notify import NOTIFICATION_KIND, TaskState
from tidings.types import Profile

T = TypeVar("T")
CONVERSATIONS = 20
RUN = "run_stress"


def joiner(door: Door) -> Callable[[ConversationTx], list[int]]:
    """A safe point of a turn: what is due is delivered through the door and read at once."""
    return lambda cx: journal.join(cx, door, RUN)


async def unit(store: Store, conv: str, body: Callable[[ConversationTx], T]) -> T:
    clock = SystemClock()

    def run(tx: Tx) -> T:
        cx = ConversationTx.lock(tx, conv, clock)
        result = body(cx)
        cx.save()
        return result

    return await store.transact(run, route=conv)


async def one_task(store: Store, conv: str, lock: asyncio.Lock, n: int,
                   rng: random.Random) -> None:
    """A tool call starts task n; its process ends and its result commits in a random order,
    while steers arrive. A conversation runs one step at a time (the lock stands for its slot).
    """
    join = joiner(Door(store, SystemClock()))
    key = f"t{n}"
    call = f"call_{n}"
    async with lock:
        def begin(cx: ConversationTx) -> None:
            cx.append_assistant("", tool_calls=[ToolCall(call, "shell", {"n": n})])
            journal.start(cx, task_key=key, command=f"job {n}", instance_id="inst_stress",
                          call_id=call)

        await unit(store, conv, begin)

        async def finish() -> None:
            await asyncio.sleep(rng.random() * 0.01)

            def body(cx: ConversationTx) -> None:
                task = journal.get(cx, key)
                assert task is not None
                journal.finish(cx, task, state=rng.choice([TaskState.EXITED, TaskState.KILLED]),
                               exit_code=0)
                join(cx)

            await unit(store, conv, body)

        async def commit() -> None:
            await asyncio.sleep(rng.random() * 0.01)

            def body(cx: ConversationTx) -> None:
                cx.append_tool_result(call, f"started {key}", tool_name="shell")
                task = journal.get(cx, key)
                assert task is not None
                journal.mark_committed(cx, task)
                join(cx)
                if rng.random() < 0.3:
                    cx.append_user(f"steer after {key}")

            await unit(store, conv, body)

        await asyncio.gather(finish(), commit())
    if rng.random() < 0.2:
        await unit(store, conv, join)


async def run_stress(url: str, tasks: int) -> None:
    store = await open_store(url)
    try:
        conversations = Conversations(store, SystemClock())
        convs = [(await conversations.create("s", Profile(model="m"))).conversation_id
                 for _ in range(CONVERSATIONS)]
        locks = {c: asyncio.Lock() for c in convs}
        rng = random.Random(1234)
        await asyncio.gather(*(
            one_task(store, convs[n % CONVERSATIONS], locks[convs[n % CONVERSATIONS]], n,
                     random.Random(rng.random()))
            for n in range(tasks)
        ))
        for conv in convs:  # the sweep's safe point: whatever is left is delivered now
            await unit(store, conv, joiner(Door(store, SystemClock())))
        announced: dict[str, int] = {}
        for conv in convs:
            messages = await conversations.transcript(conv, limit=1000)
            open_calls: set[str] = set()
            results_seen: set[str] = set()
            for m in messages:
                if m.role == "assistant":
                    assert not open_calls
                    open_calls |= {c["call_id"] for c in m.tool_calls}
                elif m.role == "tool":
                    open_calls.discard(m.tool_call_id or "")
                    results_seen.add(m.tool_call_id or "")
                else:
                    assert not open_calls, "a user-role message inside a call/result pair"
                    if m.meta.get("kind") == NOTIFICATION_KIND:
                        key = m.meta["task_key"]
                        announced[key] = announced.get(key, 0) + 1
                        assert f"call_{key[1:]}" in results_seen, "announced before its result"
        assert announced == {f"t{n}": 1 for n in range(tasks)}
    finally:
        await store.close()


async def test_t3_t4_many_racing_tasks_each_announced_once_after_their_result(
    backend: Backend,
) -> None:
    await run_stress(backend.url, 1000 if backend.name == "sqlite" else 300)
