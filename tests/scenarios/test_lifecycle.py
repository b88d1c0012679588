"""L2-L4 through the runtime: a restart is an operation completed by the next instance, which
wakes the asking conversation once; automatic turns get the read-only overlay."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest

import tidings
from tests.conftest import Backend, RuntimeFactory
from tests.scenarios.test_tasks import wait_for_runs
from tests.waiting import eventually, wait_until, wakeup_reaches
from tidings.errors import RuntimeLockedError
from tidings.models.base import DeltaCallback, ModelReply, ModelRequest
from tidings.models.scripted import Rule, ScriptedModel
from tidings.records import operations
from tidings.records.outbox import Outbox
from tidings.records.results import MasterKey
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.store import Tx
from tidings.tools.registry import Tool, ToolContext, ToolOutput
from tidings.turns.runner import TurnConfig
from tidings.types import OperationState, Profile, Published, RunStatus

MODEL = ScriptedModel(
    rules=[
        Rule({"text_contains": "long job"},
             {"tool_calls": [{"name": "shell", "arguments": {
                 "command": "sleep 30", "background": True}}]}),
        Rule({"text_contains": "restart please"},
             {"tool_calls": [{"name": "restart", "arguments": {"reason": "new config"}}]}),
        Rule({"suffix_contains": "restart_completed"}, {"text": "I am back after the restart."}),
        Rule({"tool_result": "restart"}, {"text": "Restart accepted."}),
        Rule({"tool_result": "shell"}, {"text": "Started."}),
    ],
    default={"text": "ok"},
)
PROFILE = Profile(model="scripted", tools=("shell", "restart", "task_status"))


async def test_l2_restart_is_accepted_then_completed_once_by_the_next_instance(
    runtimes: RuntimeFactory,
) -> None:
    key = MasterKey.generate()
    first = await runtimes(models=[MODEL], master_key=key)
    conv = (await first.create_conversation("alice", PROFILE)).conversation_id
    await first.post(conv, "long job")
    await wait_for_runs(first, conv, 1)
    await first.post(conv, "restart please")
    await wait_for_runs(first, conv, 2)
    assert first.restart_requested.is_set()
    answer = [m for m in await first.transcript(conv) if m.role == "tool"][-1]
    assert "accepted, not completed" in answer.content
    operation_id = answer.meta["operation_id"]
    assert (await operations.get(first.store, operation_id)).state is OperationState.ACCEPTED
    restart_run = (await first.runs.list(conv))[-1].run_id
    await first.close()  # the host honours the request: this instance goes

    second = await runtimes(models=[MODEL], master_key=key)
    await wait_for_runs(second, conv, 3)
    for _ in range(200):  # the killed task's notification may wake a turn of its own too
        await second.settle(conv)
        if any(m.content == "I am back after the restart." for m in await second.transcript(conv)):
            break
    operation = await operations.get(second.store, operation_id)
    assert operation.state is OperationState.COMPLETED
    completed = [e for e in await second.events(conv) if e.type == "restart_completed"]
    assert len(completed) == 1
    facts = completed[0].data
    assert facts["requested"]["run_id"] == restart_run  # correlated with the asking call
    assert facts["requested"]["reason"] == "new config"
    assert facts["previous_instance"] != second.instance_id
    # The background task the restart interrupted is reported honestly, never as success.
    assert [t["state"] for t in facts["interrupted_tasks"]] == ["killed"]
    runs = await second.runs.list(conv)
    assert all(r.status is RunStatus.COMPLETED for r in runs)
    transcript = await second.transcript(conv)
    assert [m.content for m in transcript].count("I am back after the restart.") == 1
    await second.close()

    # Yet another instance finds nothing left to complete: exactly one completion turn.
    third = await runtimes(models=[MODEL], master_key=key)
    await third.settle(conv)
    assert len(await third.runs.list(conv)) == len(runs)
    assert len([e for e in await third.events(conv) if e.type == "restart_completed"]) == 1


async def test_s9_unsettled_operations_of_a_gone_instance_are_unknown_but_restarts_wait(
    runtimes: RuntimeFactory,
) -> None:
    first = await runtimes(models=[MODEL])
    conv = (await first.create_conversation("alice", PROFILE)).conversation_id
    other = await first.store.transact(
        lambda tx: operations.accept(tx, first.instance, "deploy", conv)
    )
    restart = await first.request_restart(conv, reason="operator")
    await first.close()
    second = await runtimes(models=[MODEL])
    assert (await operations.get(second.store, other.operation_id)).state is (
        OperationState.OUTCOME_UNKNOWN
    )
    assert (await operations.get(second.store, restart.operation_id)).state is (
        OperationState.COMPLETED
    )


class _Recorder:
    """A model that records the tools each request offered."""

    name = "recorder"

    def __init__(self) -> None:
        self.offered: list[tuple[str, ...]] = []

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        self.offered.append(tuple(t.name for t in request.tools))
        return ModelReply(text="noted")


async def test_l4_automatic_turns_get_the_read_only_overlay(runtimes: RuntimeFactory) -> None:
    recorder = _Recorder()
    rt = await runtimes(models=[recorder])
    profile = Profile(model="recorder", tools=("shell", "restart", "task_status", "wait"))
    conv = (await rt.create_conversation("alice", profile)).conversation_id
    await rt.post(conv, "hello")
    await wait_for_runs(rt, conv, 1)
    await rt.store.transact(lambda tx: rt.outbox.publish(
        tx, conv, "task.exited", {"exit_code": 0}, idempotency_key="fact-1"))
    await wait_for_runs(rt, conv, 2)
    person, woken = recorder.offered
    assert person == ("shell", "restart", "task_status", "wait")
    assert woken == ("task_status", "wait")  # no write, no new permission
    # A6: the wake-up's latency and both turns' latencies were recorded.
    assert rt.metrics.histogram_count("tidings_wake_seconds", {"trigger": "wake"}) == 1
    assert rt.metrics.histogram_count(
        "tidings_turn_seconds", {"status": "completed", "trigger": "person"}) == 1


async def test_l4_overlay_can_be_switched_off_per_profile(runtimes: RuntimeFactory) -> None:
    recorder = _Recorder()
    rt = await runtimes(models=[recorder])
    profile = Profile(model="recorder", tools=("shell", "task_status"), automatic_tools="all")
    conv = (await rt.create_conversation("alice", profile)).conversation_id
    await rt.store.transact(lambda tx: rt.outbox.publish(
        tx, conv, "task.exited", {"exit_code": 0}, idempotency_key="fact-1"))
    await wait_for_runs(rt, conv, 1)
    assert recorder.offered == [("shell", "task_status")]


async def test_l1_a_locked_boot_claims_and_delivers_nothing_until_unlocked(
    runtimes: RuntimeFactory, backend: Backend,
) -> None:
    key = MasterKey.generate()
    first = await runtimes(models=[MODEL], master_key=key)
    conv = (await first.create_conversation("alice", PROFILE)).conversation_id
    restart = await first.request_restart(conv, reason="rotate")
    await first.close()
    async with Outbox.open(backend.url) as producer:  # another process learns a fact
        await producer.store.transact(lambda tx: producer.publish(
            tx, conv, "task.exited", {"exit_code": 0}, idempotency_key="fact-1"))

    async with Runtime.open(backend.url, models=[MODEL], locked=True) as locked:
        assert locked.locked
        assert locked.instance_id  # booted and migrated: it has its instance id
        with pytest.raises(RuntimeLockedError):
            await locked.post(conv, "hello")
        with pytest.raises(RuntimeLockedError):
            await locked.request_restart(conv)
        # Nothing that could claim or deliver was started: none of the runtime's loops
        # (wake-ups, sweeps; all named tidings-...) runs, nor a turn.
        loops = [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("tidings-")]
        assert loops == []
        assert not locked.coordinator.active(conv)
        stats = await locked.signals.stats(conv)
        assert (stats.ready, stats.leased) == (1, 0)  # nothing claimed
        assert await locked.runs.list(conv) == []  # nothing delivered, no turn
        assert (await operations.get(locked.store, restart.operation_id)).state is (
            OperationState.ACCEPTED  # not completed by a locked instance
        )
        assert len(await locked.transcript(conv)) == 0  # reading is allowed

        await locked.unlock(key)
        assert not locked.locked
        await wait_for_runs(locked, conv, 1)
        assert (await locked.signals.stats(conv)).backlog == 0
        assert (await operations.get(locked.store, restart.operation_id)).state is (
            OperationState.COMPLETED
        )
        await locked.unlock(key)  # idempotent


async def test_l2_a_tool_the_restart_interrupts_is_outcome_unknown_and_not_repeated(
    runtimes: RuntimeFactory,
) -> None:
    started: list[str] = []
    release = asyncio.Event()

    async def migrate(context: ToolContext, arguments: Mapping[str, Any]) -> ToolOutput:
        started.append(context.call_id)
        await release.wait()  # still running when the runtime goes
        return ToolOutput("migrated")

    model = ScriptedModel(rules=[
        Rule({"text_contains": "migrate"}, {"tool_calls": [{"name": "migrate", "arguments": {}}]}),
        Rule({"suffix_contains": "restart_completed"}, {"text": "Back; the migration's outcome "
                                                                "is unknown."}),
    ], default={"text": "ok"})
    tool = Tool("migrate", "Migrate.", migrate)
    key = MasterKey.generate()
    first = await runtimes(models=[model], tools=[tool], master_key=key)
    conv = (await first.create_conversation(
        "alice", Profile(model="scripted", tools=("migrate",)))).conversation_id
    await first.post(conv, "migrate the database")
    await wait_until(lambda: started, what="the migrate tool running")
    await first.request_restart(conv, reason="deploy")
    await first.close()  # the host honours it while the tool runs

    second = await runtimes(models=[model], tools=[tool], master_key=key)
    await wait_for_runs(second, conv, 2)
    result = next(m for m in await second.transcript(conv) if m.role == "tool")
    assert result.meta["status"] == "outcome_unknown"
    assert "not repeated" in result.content
    assert (await second.runs.list(conv))[0].status is RunStatus.STOPPED
    assert started == [started[0]]  # never run again
    completed = [e for e in await second.events(conv) if e.type == "restart_completed"]
    assert len(completed) == 1
    assert (await second.transcript(conv))[-1].content.startswith("Back;")


async def test_a1_tidings_open_is_the_composition_root(backend: Backend) -> None:
    async with tidings.open(backend.url, models=[MODEL]) as rt:
        assert isinstance(rt, Runtime)
        first = rt.instance_id
        conv = (await rt.create_conversation("alice", PROFILE)).conversation_id
        await rt.post(conv, "hello")
        await wait_for_runs(rt, conv, 1)
    async with tidings.open(backend.url, models=[MODEL]) as again:
        assert again.instance_id != first  # each boot has its own instance id
        assert [m.role for m in await again.transcript(conv)] == ["user", "assistant"]


async def test_l3_config_approval_and_job_events_stay_passive(runtimes: RuntimeFactory) -> None:
    recorder = _Recorder()
    rt = await runtimes(models=[recorder])
    conv = (await rt.create_conversation("alice", Profile(model="recorder"))).conversation_id
    async with wakeup_reaches(rt, conv):  # the first one's wake-up reaches the coordinator
        for n, kind in enumerate(("config.changed", "approval.decided", "job.progress")):

            def passive(tx: Tx, kind: str = kind, n: int = n) -> Published:
                return rt.outbox.publish(tx, conv, kind, {"n": n},
                                         idempotency_key=f"passive-{n}")

            await rt.store.transact(passive)
    await rt.settle(conv)  # ...and its decision is made
    assert await rt.runs.list(conv) == []  # nothing woke the agent
    assert (await rt.signals.stats(conv)).backlog == 3  # and nothing was dropped
    # A background completion wakes it; its turn reads the passive facts too.
    await rt.store.transact(lambda tx: rt.outbox.publish(
        tx, conv, "task.exited", {"exit_code": 0}, idempotency_key="fact-1"))
    await wait_for_runs(rt, conv, 1)
    assert (await rt.signals.stats(conv)).backlog == 0


async def test_l3_work_a_continuation_started_does_not_wake_the_agent_again(
    runtimes: RuntimeFactory,
) -> None:
    model = ScriptedModel(rules=[
        Rule({"tool_result": "shell"}, {"text": "started a follow-up"}),
        Rule({"suffix_contains": "task.exited"}, {"tool_calls": [{"name": "shell", "arguments": {
            "command": "echo follow-up", "background": True}}]}),
        Rule({"meta_kind": "task_notification"}, {"text": "read the follow-up"}),
        Rule({"text_contains": "anything new"}, {"text": "read the follow-up"}),
    ], default={"text": "ok"})
    rt = await runtimes(models=[model], master_key=MasterKey.generate())
    # The overlay is off, so the woken turn may start work; that work still wakes nothing.
    profile = Profile(model="scripted", tools=("shell",), automatic_tools="all")
    conv = (await rt.create_conversation("alice", profile)).conversation_id
    await rt.store.transact(lambda tx: rt.outbox.publish(
        tx, conv, "task.exited", {"exit_code": 0}, idempotency_key="fact-1"))
    await wait_for_runs(rt, conv, 1)
    (task,) = await eventually(lambda: rt.tasks.list(conv), lambda ts: ts and ts[0].delivered,
                               what="the follow-up's notification delivered")
    assert task.delivered
    # Its end is journalled and the wake-up it asked for decided; a settle re-checks by the
    # same rule, so a turn it would start runs before the count below.
    assert await rt.background.wait_journalled([task.task_key], 20)
    await rt.settle(conv)
    assert len(await rt.runs.list(conv)) == 1  # delivered, but no recursive wake-up
    assert not (await rt.tasks.get(conv, task.task_key)).consumed
    await rt.post(conv, "anything new?")  # the next direct turn reads it
    await wait_for_runs(rt, conv, 2)
    assert (await rt.tasks.get(conv, task.task_key)).consumed


@pytest.mark.parametrize("goal", ["paused", "blocked"])
async def test_c3_a_paused_or_blocked_goal_holds_automatic_continuation(
    runtimes: RuntimeFactory, goal: str,
) -> None:
    recorder = _Recorder()
    rt = await runtimes(models=[recorder])
    conv = (await rt.create_conversation("alice", Profile(model="recorder"))).conversation_id
    await rt.conversations.set_goal(conv, goal, "ship it")
    async with wakeup_reaches(rt, conv):
        await rt.store.transact(lambda tx: rt.outbox.publish(
            tx, conv, "task.exited", {"exit_code": 0}, idempotency_key="fact-1"))
    await rt.settle(conv)  # the wake-up's decision is made
    assert await rt.runs.list(conv) == []  # held: the fact waits
    await rt.conversations.set_goal(conv, "active")
    await rt.conversations.checkpoint(conv)  # resuming the goal lets the continuation run
    await wait_for_runs(rt, conv, 1)
    assert (await rt.signals.stats(conv)).backlog == 0


async def test_m11_a_long_history_sends_the_newest_window_and_says_so(
    runtimes: RuntimeFactory,
) -> None:
    recorder = _Recorder()
    config = RuntimeConfig(turns=TurnConfig(history_messages=4))
    rt = await runtimes(models=[recorder], config=config)
    conv = (await rt.create_conversation("alice", Profile(model="recorder"))).conversation_id
    for n in range(4):
        await rt.post(conv, f"message {n}")
        await wait_for_runs(rt, conv, n + 1)
    trimmed = [e for e in await rt.events(conv) if e.type == "context_trimmed"]
    runs = await rt.runs.list(conv)
    # Turns 1-3 fit the window of 4 messages; turn 4 had 6 before its input: trimmed, not
    # refused (reaching the window's end is not overflow).
    assert [e.run_id for e in trimmed] == [runs[3].run_id]
    assert trimmed[0].data["messages_total"] == 6
    assert trimmed[0].data["messages_sent"] == 4
    assert all(r.status is RunStatus.COMPLETED for r in runs)


def _sized(name: str, context_chars: int | None) -> ScriptedModel:
    return ScriptedModel(
        rules=[Rule({"text_contains": "explode"}, {"error": "retryable"})],
        default={"text": f"answered by {name}"}, name=name, context_chars=context_chars,
    )


async def test_m11_a_fresh_turn_sends_the_newest_history_that_fits(
    runtimes: RuntimeFactory,
) -> None:
    small = _sized("small", 3_000)
    rt = await runtimes(models=[small])
    conv = (await rt.create_conversation("alice", Profile(model="small"))).conversation_id
    for n in range(6):
        await rt.post(conv, f"note {n}: " + "x" * 900)
        await wait_for_runs(rt, conv, n + 1)
    runs = await rt.runs.list(conv)
    assert all(r.status is RunStatus.COMPLETED for r in runs)  # cut, never held
    trimmed = [e for e in await rt.events(conv) if e.type == "context_trimmed"]
    assert trimmed  # said so
    assert trimmed[-1].data["fit_chars"] == 3_000
    assert trimmed[-1].data["messages_sent"] < trimmed[-1].data["messages_total"]


async def test_m11_a_retry_whose_history_exceeds_the_fit_is_held_not_cut(
    runtimes: RuntimeFactory,
) -> None:
    small, large = _sized("small", 3_000), _sized("large", None)
    config = RuntimeConfig(turns=TurnConfig(model_attempts=1, retry_base=timedelta(0)))
    rt = await runtimes(models=[small, large], config=config)
    conv = (await rt.create_conversation(
        "alice", Profile(model="small", fallbacks=("large",)))).conversation_id
    for n in range(4):
        await rt.post(conv, f"note {n}: " + "x" * 900)
        await wait_for_runs(rt, conv, n + 1)
    await rt.post(conv, "now explode")  # both models fail: the run needs attention
    await wait_for_runs(rt, conv, 5)
    failed = (await rt.runs.list(conv))[-1]
    assert failed.status is RunStatus.NEEDS_ATTENTION

    await rt.runs.retry(conv, failed.run_id, model="small", owner="alice")
    await wait_for_runs(rt, conv, 6)
    held = (await rt.runs.list(conv))[-1]
    # The retry prepares its request again: its history does not fit the small model, and it
    # is held rather than sent cut.
    assert (held.status, held.failure_code) == (RunStatus.NEEDS_ATTENTION,
                                                "history_exceeds_fit")
    assert small.calls == 4 + 1  # the held retry called no model

    await rt.runs.retry(conv, held.run_id, model="large", owner="alice")
    await wait_for_runs(rt, conv, 7)
    done = (await rt.runs.list(conv))[-1]
    assert (done.status, done.model) == (RunStatus.COMPLETED, "large")
    assert (await rt.transcript(conv))[-1].content == "answered by large"


async def test_l2_closing_right_after_an_answer_leaves_the_run_completed_and_warns_of_nothing(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """A host that closes as soon as it has its answer: the turn's end may still be settling
    when the shutdown reaches it. The run stays completed, and the log does not cry a lost
    slot that nobody lost."""
    caplog.set_level("WARNING", logger="tidings")
    for _ in range(3):
        async with tidings.open(backend.url, models=[ScriptedModel()]) as rt:
            conv = (await rt.create_conversation("alice", Profile(model="scripted")))
            answer = await rt.post(conv.conversation_id, "hello", wait=True)
            assert answer.reply == "hello"
        async with tidings.open(backend.url, models=[ScriptedModel()]) as rt:
            runs = await rt.runs.list(conv.conversation_id, owner="alice")
            assert [r.status for r in runs] == [RunStatus.COMPLETED]
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == []
