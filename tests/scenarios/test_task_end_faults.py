"""Nothing waits for a restart (H3, T2, T9): when the unit that records a background process's
end meets a store fault -- a busy database, a lost connection, a commit whose outcome is
unknown (and which did land) -- it is tried again with backoff until it commits, while the
runtime lives. The task ends terminal, with one terminal state, one sealed envelope and one
notification."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Backend, RuntimeFactory
from tests.crash.helpers import count_rows
from tests.waiting import eventually
from tidings import ManualClock
from tidings.errors import (
    CommitOutcomeUnknownError,
    ConnectionLostError,
    DatabaseBusyError,
    StoreError,
)
from tidings.models.scripted import Rule, ScriptedModel
from tidings.records.results import MasterKey
from tidings.runtime.root import Runtime
from tidings.store import Store, Tx
from tidings.tasks.notify import NOTIFICATION_KIND, TaskState
from tidings.tasks.service import END_RETRY_CAP, TaskEnd
from tidings.types import ConversationId, Profile

WAIT_S = 30.0  # a bound on waiting for something the test arranged; never asserted on

Fault = tuple[str, StoreError]  # ("before", error): the unit fails; ("after", ...): it landed
PLANS: dict[str, list[Fault]] = {
    "busy_and_lost": [
        ("before", DatabaseBusyError("database is locked", db_code="SQLITE_BUSY")),
        ("before", ConnectionLostError("server closed the connection unexpectedly")),
        ("before", DatabaseBusyError("database is locked", db_code="SQLITE_BUSY")),
    ],
    "unknown_after_commit": [
        ("before", ConnectionLostError("server closed the connection unexpectedly")),
        ("after", CommitOutcomeUnknownError("connection lost during COMMIT")),
    ],
}


def _model(flag: Path) -> ScriptedModel:
    # The process ends only when the test creates ``flag``: the faults are armed by then.
    return ScriptedModel(
        rules=[
            Rule({"text_contains": "start the task"},
                 {"tool_calls": [{"name": "shell", "arguments": {
                     "command": f"while [ ! -e {flag} ]; do sleep 0.02; done; echo task done",
                     "background": True}}]}),
            Rule({"meta_kind": NOTIFICATION_KIND}, {"text": "The task ended."}),
            Rule({"tool_result": "shell"}, {"text": "Started."}),
        ],
        default={"text": "ok"},
    )


def inject(
    monkeypatch: pytest.MonkeyPatch, store: Store, conversation_id: str, task_key: str,
    plan: list[Fault],
) -> list[str]:
    """Make the units that record the task's end meet ``plan``'s faults, in order; returns
    the log of what each such unit met ("before" / "after" / "committed")."""
    real = store.transact
    met: list[str] = []

    def state(tx: Tx) -> str:
        row = tx.one("get_task", conversation_id=conversation_id, task_key=task_key)
        assert row is not None
        return str(row["state"])

    async def transact(
        unit: Callable[[Tx], Any], *, route: str | None = None, durable: bool = True
    ) -> Any:
        if route != conversation_id:
            return await real(unit, route=route, durable=durable)
        ended = False

        def watched(tx: Tx) -> Any:
            nonlocal ended
            before = state(tx)
            result = unit(tx)
            ended = before == "running" and state(tx) != "running"
            if ended and plan and plan[0][0] == "before":
                met.append("before")
                raise plan.pop(0)[1]  # the unit fails: everything it wrote rolls back
            return result

        result = await real(watched, route=route, durable=durable)
        if ended and plan and plan[0][0] == "after":
            met.append("after")
            raise plan.pop(0)[1]  # it committed, but the caller is told it may not have
        if ended:
            met.append("committed")
        return result

    monkeypatch.setattr(store, "transact", transact)
    return met


async def _task_state(rt: Runtime, conversation_id: str, task_key: str) -> str:
    return (await rt.tasks.get(conversation_id, task_key)).state.value


async def _task_ended(rt: Runtime, conversation_id: str, task_key: str) -> None:
    """Until the task's end is recorded (waiting on its journal between looks)."""

    async def state() -> str:
        seen = await _task_state(rt, conversation_id, task_key)
        if seen == "running":
            await rt.background.wait_journalled([task_key], 0.05)
        return seen

    await eventually(state, lambda seen: seen != "running", what=f"task {task_key} ended",
                     within_s=WAIT_S, poll_s=0)


@pytest.mark.parametrize("plan_name", sorted(PLANS))
async def test_h3_end_of_a_task_is_retried_through_store_faults_until_it_commits(
    backend: Backend, runtimes: RuntimeFactory, clock: ManualClock,
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, plan_name: str,
) -> None:
    flag = tmp_path / "end.flag"
    rt = await runtimes(models=[_model(flag)], clock=clock, master_key=MasterKey.generate())
    cid = (await rt.create_conversation("alice", Profile(model="scripted", tools=("shell",)))
           ).conversation_id
    await rt.post(cid, "please start the task")
    await rt.settle(cid)
    [task] = await rt.tasks.list(cid)
    assert task.state.value == "running"

    plan = list(PLANS[plan_name])
    faults = len(plan)
    met = inject(monkeypatch, rt.store, cid, task.task_key, plan)
    flag.touch()  # the process ends; recording its end meets every fault of the plan


    async def recording() -> tuple[list[str], str | None]:
        """The faults met so far and the task's state (not read while faults are left), after
        a wait on its journal unless every fault was met and its end recorded."""
        state = None if plan else await _task_state(rt, cid, task.task_key)
        if state in (None, "running"):
            await rt.background.wait_journalled([task.task_key], 0.05)
            clock.advance(END_RETRY_CAP)  # a retry's cool-down passes on the test's clock
        return list(met), state

    await eventually(recording, lambda seen: seen[1] not in (None, "running"),
                     what="every fault met and the task's end recorded", within_s=WAIT_S,
                     poll_s=0)
    await rt.background.wait_journalled([task.task_key], WAIT_S)
    assert len([m for m in met if m != "committed"]) == faults

    # A unit whose commit landed unseen may have taken the slot for a turn no one runs: that
    # slot is recovered when its lease runs out (the slot ttl).
    clock.advance(rt.config.turns.slot_ttl + timedelta(seconds=1))
    await rt.coordinator.sweep()
    await rt.settle(cid)

    ended = await rt.tasks.get(cid, task.task_key)
    assert (ended.state.value, ended.exit_code) == ("exited", 0)
    assert ended.delivered
    assert ended.consumed
    transcript = await rt.transcript(cid)
    notices = [m for m in transcript if m.meta.get("kind") == NOTIFICATION_KIND]
    assert len(notices) == 1
    assert "task done" in notices[0].content
    assert [m.content for m in transcript if m.role == "assistant"].count("The task ended.") == 1
    assert count_rows(backend.url, "result_envelopes", f"task_key = '{task.task_key}'") == 1
    # One end, counted once: a retry that found its own earlier commit landed counts it.
    assert _ended_total(rt) == 1


def _ended_total(rt: Runtime) -> float:
    return sum(rt.metrics.counter_value("tidings_tasks_ended_total", {"state": s.value})
               for s in TaskState if s.terminal)


async def test_t2_record_end_of_an_ended_task_answers_not_recorded_and_counts_once(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    """A second end of a task already terminal -- a duplicate report, an end that lost to a
    reconcile -- leaves the first end standing, says that it recorded nothing, and is not
    counted as another end."""
    flag = tmp_path / "end.flag"
    flag.touch()
    rt = await runtimes(models=[_model(flag)], master_key=MasterKey.generate())
    cid = (await rt.create_conversation("alice", Profile(model="scripted", tools=("shell",)))
           ).conversation_id
    await rt.post(cid, "please start the task")
    await rt.settle(cid)
    [task] = await rt.tasks.list(cid)
    await _task_ended(rt, cid, task.task_key)
    await rt.settle(cid)
    ended = await rt.tasks.get(cid, task.task_key)
    assert ended.state is TaskState.EXITED
    assert _ended_total(rt) == 1

    again = await rt.background.ends.record_end(
        ConversationId(cid), task.task_key, TaskEnd(TaskState.KILLED, signal="SIGKILL"))

    assert again is False
    assert _ended_total(rt) == 1
    assert rt.metrics.counter_value("tidings_tasks_ended_total", {"state": "killed"}) == 0
    after = await rt.tasks.get(cid, task.task_key)
    assert (after.state, after.event_id) == (TaskState.EXITED, ended.event_id)
