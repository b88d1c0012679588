"""L1 through the Python API: on a runtime that booted locked, every mutating call answers
``runtime_locked`` and changes nothing -- no row, no event -- while reads stay allowed; once
unlocked, the same calls work.

Each case builds the same small world on a fresh database first (a failed run, a completed run
that asked a child, a held call that the shutdown expired, a dead letter), then opens the
database locked.
"""

from __future__ import annotations

import asyncio
import inspect
import sqlite3
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, get_type_hints

import psycopg
import pytest

from tests.conftest import Backend
from tests.waiting import eventually
from tidings.clock import ManualClock, SystemClock
from tidings.errors import RuntimeLockedError
from tidings.models.scripted import Rule, ScriptedModel
from tidings.records.outbox import Outbox, OutboxConfig
from tidings.records.results import MasterKey
from tidings.runtime.groups import Group
from tidings.runtime.root import Runtime
from tidings.tools.registry import Tool, ToolContext, ToolOutput
from tidings.types import GoalStatus, Profile, RunStatus

KEY = MasterKey.generate()
WAIT_S = 20.0  # a bound on waiting for what the test arranged; never asserted on
pytestmark = pytest.mark.xdist_group("torture")  # never beside the crash torture (see pyproject)

MODEL = ScriptedModel(
    rules=[
        Rule({"text_contains": "fail please"}, {"error": "permanent"}),
        Rule({"tool_result": "deploy"}, {"text": "deployed"}),
        Rule({"text_contains": "deploy it"},
             {"tool_calls": [{"name": "deploy", "arguments": {"target": "prod"}}]}),
        Rule({"tool_result": "spawn"}, {"text": "Delegated."}),
        Rule({"text_contains": "please ask"},
             {"tool_calls": [{"name": "spawn", "arguments": {"brief": "count to three"}}]}),
        Rule({"text_contains": "count to three"}, {"text": "one two three"}),
    ],
    default={"text": "ok"},
)
PROFILE = Profile(model="scripted", tools=("deploy", "spawn"))


async def _deploy(context: ToolContext, arguments: Mapping[str, Any]) -> ToolOutput:
    return ToolOutput("deployed")


TOOLS = (Tool("deploy", "Deploy.", _deploy, needs_approval=True),)


@dataclass(frozen=True)
class World:
    """What exists before the runtime is opened locked."""

    conversation_id: str
    failed_run: str
    completed_run: str
    task_key: str
    approval_id: str
    dead_letter: int
    question_id: str


async def pending_approval(rt: Runtime, conversation_id: str) -> str:
    found: list[str] = []

    async def held() -> bool:
        found[:] = [a.approval_id for a in await rt.approvals.list(conversation_id,
                                                                   status="pending")]
        return bool(found)

    await eventually(held, what="a pending approval", within_s=WAIT_S)
    return found[0]


async def build_world(url: str) -> World:
    """A conversation with a failed run, a completed run whose child replied (relayed), and a
    held call; the runtime then closes (the held run is stopped, its approval expires)."""
    async with Runtime.open(url, models=[MODEL], tools=TOOLS, master_key=KEY) as rt:
        conv = (await rt.create_conversation("alice", PROFILE)).conversation_id
        await rt.post(conv, "fail please")
        await rt.settle(conv)
        await rt.post(conv, "please ask")

        async def relayed() -> bool:
            await rt.settle(conv)
            requests = await rt.relay.requests_of(conv)
            return bool(requests) and all(r.relayed for r in requests)

        await eventually(relayed, what="the child's reply relayed", within_s=WAIT_S)
        await rt.post(conv, "deploy it")
        approval_id = await pending_approval(rt, conv)
        question = await rt.question_records.ask(  # as an MCP server's task asks a person
            conv, asker="mcp:desk", kind="elicitation", ask_key="world-question",
            message="How many seats?", task_id="bg-world",
            schema={"type": "object", "properties": {"seats": {"type": "integer"}}})
        runs = await rt.runs.list(conv)
        (request,) = await rt.relay.requests_of(conv)
    failed = next(r.run_id for r in runs if r.status is RunStatus.FAILED)
    return World(conv, failed, request.run_public_id, request.task_key, approval_id,
                 await dead_letter(url, conv), question.question_id)


async def dead_letter(url: str, conversation_id: str) -> int:
    """A signal to the conversation whose one attempt failed: a dead letter; its id."""
    clock = ManualClock(SystemClock().now_us())
    async with Outbox.open(url, clock=clock, config=OutboxConfig(max_attempts=1)) as outbox:
        published = await outbox.store.transact(lambda tx: outbox.publish(
            tx, conversation_id, "job.finished", {"n": 1}, idempotency_key="dead-1"))
        lease = await outbox.claim(conversation_id, owner="run-dead")
        await outbox.release(lease, "model_unavailable")
    return int(published.delivery_id)


def database_rows(url: str) -> dict[str, list[str]]:
    """Every row of every table, read behind the runtime's back (to see that nothing moved)."""
    if url.startswith(("postgresql://", "postgres://")):
        with psycopg.connect(url) as conn:
            tables = [str(r[0]) for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
            return {t: sorted(repr(r) for r in conn.execute(f"SELECT * FROM {t}"))
                    for t in tables}
    db = sqlite3.connect(url.removeprefix("sqlite:///"))
    try:
        tables = [str(r[0]) for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: sorted(repr(r) for r in db.execute(f"SELECT * FROM {t}")) for t in tables}
    finally:
        db.close()


Call = Callable[[Runtime, World], Awaitable[object]]


async def _decide_fresh(rt: Runtime, w: World) -> object:
    """After the unlock: a new held call, approved (the world's approval expired)."""
    await rt.post(w.conversation_id, "deploy it")
    approval_id = await pending_approval(rt, w.conversation_id)
    return await rt.approvals.decide(w.conversation_id, approval_id, approve=True,
                                     decided_by="alice")


async def _compact_idle(rt: Runtime, w: World) -> object:
    await rt.settle(w.conversation_id)
    return await rt.conversations.compact(w.conversation_id)


# Every mutating method of the facade: (its call on the locked runtime, its call once unlocked).
MUTATIONS: dict[str, tuple[Call, Call]] = {
    "create_conversation": (lambda rt, w: rt.create_conversation("alice", PROFILE),) * 2,
    "conversations.archive": (lambda rt, w: rt.conversations.archive(w.conversation_id),) * 2,
    "conversations.unarchive": (
        lambda rt, w: rt.conversations.unarchive(w.conversation_id),) * 2,
    "conversations.tombstone": (
        lambda rt, w: rt.conversations.tombstone(w.conversation_id),) * 2,
    "conversations.set_profile": (lambda rt, w: rt.conversations.set_profile(
        w.conversation_id, Profile(model="scripted", system="terse")),) * 2,
    "post": (lambda rt, w: rt.post(w.conversation_id, "hello"),) * 2,
    "runs.retry": (lambda rt, w: rt.runs.retry(w.conversation_id, w.failed_run),) * 2,
    "conversations.set_goal": (lambda rt, w: rt.conversations.set_goal(
        w.conversation_id, GoalStatus.ACTIVE, "ship"),) * 2,
    "conversations.checkpoint": (
        lambda rt, w: rt.conversations.checkpoint(w.conversation_id),) * 2,
    "stop": (lambda rt, w: rt.stop(w.conversation_id),) * 2,
    "runs.stop": (lambda rt, w: rt.runs.stop(w.conversation_id, w.completed_run),) * 2,
    "children.cancel": (lambda rt, w: rt.children.cancel(w.conversation_id, w.task_key),) * 2,
    "conversations.compact": (
        lambda rt, w: rt.conversations.compact(w.conversation_id), _compact_idle),
    "approvals.decide": (lambda rt, w: rt.approvals.decide(
        w.conversation_id, w.approval_id, approve=True, decided_by="alice"), _decide_fresh),
    "questions.answer": (lambda rt, w: rt.questions.answer(
        w.conversation_id, w.question_id, action="accept", content={"seats": 2},
        decided_by="alice"),) * 2,
    "request_restart": (lambda rt, w: rt.request_restart(w.conversation_id, reason="x"),) * 2,
    "signals.retry": (lambda rt, w: rt.signals.retry(w.dead_letter),) * 2,
    "signals.discard": (lambda rt, w: rt.signals.discard(w.dead_letter),) * 2,
}

READS = frozenset({
    "conversation", "transcript", "events", "settle", "instances",
    "conversations.list", "conversations.summaries",
    "inputs.list", "inputs.get", "inputs.answer_of",
    "runs.list", "runs.get", "runs.transcript",
    "children.list", "approvals.list", "questions.list",
    "tasks.list", "tasks.get", "results.list", "results.page", "results.get",
    "signals.stats", "signals.dead_letters", "signals.dead_letter",
})
LIFECYCLE = frozenset({"start", "unlock", "close"})


def _public(kind: type) -> set[str]:
    return {name for name, member in inspect.getmembers(kind)
            if not name.startswith("_") and inspect.iscoroutinefunction(member)}


def test_l1_the_table_names_every_public_method_of_the_runtime() -> None:
    """A new public method -- the runtime's or one of its groups' -- is classified here,
    mutation or read, or this fails."""
    groups = {name: kind for name, kind in get_type_hints(Runtime).items()
              if isinstance(kind, type) and issubclass(kind, Group)}
    assert len(groups) == 9
    public = _public(Runtime) | {f"{name}.{method}" for name, kind in groups.items()
                                 for method in _public(kind)}
    assert public == set(MUTATIONS) | READS | LIFECYCLE


@pytest.mark.parametrize("name", sorted(MUTATIONS))
async def test_l1_a_locked_runtime_refuses_every_mutation_and_changes_nothing(
    backend: Backend, name: str,
) -> None:
    world = await build_world(backend.url)
    locked_call, unlocked_call = MUTATIONS[name]
    async with Runtime.open(backend.url, models=[MODEL], tools=TOOLS, locked=True) as rt:
        before = database_rows(backend.url)
        with pytest.raises(RuntimeLockedError) as refused:
            await locked_call(rt, world)
        assert refused.value.code == "runtime_locked"
        assert database_rows(backend.url) == before  # no row, no event, nothing claimed
        assert not rt.restart_requested.is_set()

        await rt.unlock(KEY)
        await unlocked_call(rt, world)  # the same call works once unlocked


async def test_l1_reads_stay_allowed_and_settle_starts_nothing_while_locked(
    backend: Backend,
) -> None:
    world = await build_world(backend.url)
    conv = world.conversation_id
    async with Outbox.open(backend.url) as producer:  # another process learns a fact
        await producer.store.transact(lambda tx: producer.publish(
            tx, conv, "task.exited", {"exit_code": 0}, idempotency_key="fact-1"))
    async with Runtime.open(backend.url, models=[MODEL], tools=TOOLS, locked=True) as rt:
        before = database_rows(backend.url)
        runs = await rt.runs.list(conv)
        assert (await rt.runs.get(world.failed_run)).status is RunStatus.FAILED
        assert (await rt.conversation(conv)).owner == "alice"
        assert [c.conversation_id for c in await rt.conversations.list("alice")]
        assert await rt.inputs.list(conv)
        assert await rt.transcript(conv)
        assert isinstance(await rt.runs.transcript(conv, world.failed_run), list)
        assert await rt.events(conv)
        assert [a.approval_id for a in await rt.approvals.list(conv)] == [world.approval_id]
        assert [r.task_key for r in await rt.children.list(conv)] == [world.task_key]
        assert await rt.tasks.list(conv) == []
        assert (await rt.signals.stats(conv)).ready == 1
        assert [d.delivery_id for d in await rt.signals.dead_letters(conv)] == [world.dead_letter]
        assert (await rt.signals.dead_letter(world.dead_letter)).payload == {"n": 1}
        assert [s.conversation.conversation_id for s in await rt.conversations.summaries(None)]
        assert [i.state for i in await rt.instances()]
        # Waiting on a locked runtime returns: it would run nothing, so nothing is started --
        # not even the turn the ready signal above asks for.
        assert await asyncio.wait_for(rt.settle(conv), WAIT_S) == []
        assert await rt.runs.list(conv) == runs
        assert database_rows(backend.url) == before
