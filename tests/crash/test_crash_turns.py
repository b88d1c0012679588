"""Runtime processes killed with SIGKILL in the middle of turns, then restarted (C1, C9, S7, S9).

Every test runs real child runtime processes (``turn_child.py``) and kills them with SIGKILL
-- no ``close()``, no ``finally`` -- while a turn is in flight. What the next holder of the
conversation's slot finds on the same database must be whole: no turn ran twice at once, no
input was lost or read twice, no tool was run again, and no signal was acknowledged by a turn
that never committed.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.conftest import (
    POSTGRES_DSN_ENV,
    Backend,
    RuntimeFactory,
    drop_postgres_database,
    fresh_postgres_database,
    postgres_admin_dsn,
)
from tests.crash.helpers import count_rows, wait_instance_released
from tests.crash.turn_child import (
    OWNER,
    SIGNAL_TYPE,
    append_line,
    crash_config,
    hang_rules,
)
from tests.crash.turn_helpers import (
    RecordingModel,
    TurnChild,
    overlapping_runs,
    pairing_problems,
    spawn_turn_child,
)
from tests.waiting import eventually
from tidings import (
    ManualClock,
    Profile,
    Runtime,
    ScriptedModel,
    Tool,
    ToolContext,
)

CONVERSATIONS = 50
ROUNDS_BEFORE = 3  # inputs each process posts to every conversation in the first phase
ROUNDS_DURING = 2  # and in the second, whose turns are slow so one process dies mid-turn


# -- C9: two processes, fifty conversations ---------------------------------------------------


@pytest.fixture(params=["postgres"])
def postgres_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh PostgreSQL database: several runtime processes share one only there (C9)."""
    admin = postgres_admin_dsn()
    if admin is None:
        pytest.skip(f"several runtime processes on one database need PostgreSQL: set "
                    f"{POSTGRES_DSN_ENV}")
    request.getfixturevalue("postgres_template")
    url = fresh_postgres_database(admin)
    try:
        yield url
    finally:
        drop_postgres_database(admin, url)


async def sql(url: str, query: str, *params: Any) -> list[dict[str, Any]]:
    async with await psycopg.AsyncConnection.connect(
        url, autocommit=True, row_factory=dict_row
    ) as conn:
        cur = await conn.execute(query, params)
        return await cur.fetchall()


async def quiet(url: str, expected_inputs: int) -> bool:
    """Every input posted so far is read and no run is running."""
    row = (await sql(
        url,
        "SELECT count(*) AS inputs,"
        "       count(*) FILTER (WHERE state = 'queued') AS queued,"
        "       (SELECT count(*) FROM runs WHERE status IN ('queued', 'running')) AS running"
        "  FROM inputs",
    ))[0]
    return bool(row["inputs"] == expected_inputs and row["queued"] == 0
                and row["running"] == 0)


async def post_everywhere(
    children: dict[str, TurnChild], conversations: Sequence[str], rounds: int, phase: str,
    tmp_path: Path,
) -> None:
    """Each child posts ``rounds`` inputs to every conversation, all at once, so the two
    processes compete for every slot; returns once both have posted everything."""
    rng = random.Random(phase)
    for tag, child in children.items():
        batch: list[list[str]] = []
        for r in range(rounds):
            order = list(conversations)
            rng.shuffle(order)
            batch += [[cid, f"{phase} {tag} round {r} to {cid}"] for cid in order]
        path = tmp_path / f"{phase}-{tag}.json"
        path.write_text(json.dumps(batch), "utf-8")
        await child.send(post=str(path), batch=phase)
    posted = await asyncio.gather(
        *(child.checkpoint("posted", within_s=30) for child in children.values())
    )
    assert [p["batch"] for p in posted] == [phase] * len(children)


@pytest.mark.postgres_only
async def test_c9_two_processes_serve_50_conversations_without_overlap(
    postgres_url: str, tmp_path: Path
) -> None:
    url = postgres_url
    async with Runtime.open(url, models=[ScriptedModel()]) as setup:
        conversations = [
            (await setup.create_conversation(OWNER, Profile(model="scripted"))).conversation_id
            for _ in range(CONVERSATIONS)
        ]

    async with spawn_turn_child("serve", url) as a, spawn_turn_child("serve", url) as b:
        ready = await asyncio.gather(a.checkpoint("ready"), b.checkpoint("ready"))
        instance = {"a": ready[0]["instance_id"], "b": ready[1]["instance_id"]}
        children = {"a": a, "b": b}

        # Phase 1: both processes post to every conversation and serve every slot.
        await post_everywhere(children, conversations, ROUNDS_BEFORE, "fast", tmp_path)
        total = 2 * CONVERSATIONS * ROUNDS_BEFORE
        await eventually(lambda: quiet(url, total), what="phase 1 read every input",
                         within_s=30, poll_s=0.05)

        runs = await sql(url, "SELECT * FROM runs")
        assert overlapping_runs(runs) == []
        assert {r["status"] for r in runs} == {"completed"}
        assert {r["instance_id"] for r in runs} == set(instance.values())  # both took turns
        assert {r["conversation_id"] for r in runs} == set(conversations)

        # Phase 2: slow turns; one process dies while several of its turns are in flight.
        await post_everywhere(children, conversations, ROUNDS_DURING, "slow", tmp_path)
        total += 2 * CONVERSATIONS * ROUNDS_DURING

        async def victim_busy() -> bool:
            rows = await sql(
                url, "SELECT count(*) AS n FROM runs WHERE status = 'running'"
                     " AND instance_id = %s", instance["a"],
            )
            return bool(rows[0]["n"] >= 3)

        await eventually(victim_busy, what="process a has turns in flight", within_s=15,
                         poll_s=0.05)
        await a.kill()
        await wait_instance_released(url, instance["a"])
        in_flight = {
            r["run_id"] for r in await sql(
                url, "SELECT run_id FROM runs WHERE status = 'running' AND instance_id = %s",
                instance["a"],
            )
        }
        assert in_flight, "process a died with no turn in flight"

        # The survivor finishes every conversation: its sweep finds the dead holder's liveness
        # mark free and voids its slots.
        await eventually(lambda: quiet(url, total), what="the survivor read every input",
                         within_s=30, poll_s=0.05)

        runs = await sql(url, "SELECT * FROM runs")
        assert overlapping_runs(runs) == []
        killed = {r["run_id"]: (r["status"], r["failure_code"]) for r in runs
                  if r["instance_id"] == instance["a"] and r["status"] != "completed"}
        assert set(killed.values()) == {("failed", "interrupted")}
        assert in_flight <= set(killed)
        # Each conversation the dead process held was taken over by the survivor, no sooner
        # than the dead run was closed.
        ended = {r["run_id"]: r["ended_at_us"] for r in runs}
        conversation_of = {r["run_id"]: r["conversation_id"] for r in runs}
        taken_over = {
            run_id for run_id in killed
            if any(r["instance_id"] == instance["b"] and r["status"] == "completed"
                   and r["conversation_id"] == conversation_of[run_id]
                   and r["started_at_us"] >= ended[run_id] for r in runs)
        }
        assert taken_over == set(killed)
        others = {(r["status"], r["failure_code"]) for r in runs if r["run_id"] not in killed}
        assert others == {("completed", None)}

        # Every input was read exactly once: one transcript row and one journal entry each.
        inputs = await sql(url, "SELECT input_id, state, run_id FROM inputs")
        assert len(inputs) == total
        assert {i["state"] for i in inputs} == {"materialized"}
        assert not {i["run_id"] for i in inputs} & set(killed)
        rows = await sql(
            url, "SELECT input_id, count(*) AS n FROM messages"
                 " WHERE input_id IS NOT NULL GROUP BY input_id",
        )
        assert {r["input_id"]: r["n"] for r in rows} == {i["input_id"]: 1 for i in inputs}
        events = await sql(url, "SELECT data FROM events WHERE type = 'input_materialized'")
        read = Counter(json.loads(e["data"])["input_id"] for e in events)
        assert read == Counter({i["input_id"]: 1 for i in inputs})

        # The survivor still closes cleanly.
        await b.send(exit=True)
        await b.checkpoint("closed", within_s=30)
        assert await b.finish() == 0, b.stderr()


# -- S9: a tool was running when the process died ---------------------------------------------


async def test_c9_sigkill_mid_tool_answers_outcome_unknown_on_restart(
    backend: Backend, clock: ManualClock, runtimes: RuntimeFactory, tmp_path: Path
) -> None:
    marker = tmp_path / "hang.calls"
    async with spawn_turn_child("tool_hang", backend.url, str(marker)) as child:
        dead = await child.checkpoint("tool_running")
        await child.kill()
    await wait_instance_released(backend.url, dead["instance_id"])
    cid, call_id = dead["conversation_id"], dead["call_id"]

    async def hang_again(ctx: ToolContext, args: Any) -> str:
        append_line(str(marker), f"{ctx.call_id} (run again after the restart)")
        return "ran"

    # The dead turn holds the slot, far from its deadline.
    assert count_rows(backend.url, "runs", "status = 'running'") == 1
    assert count_rows(backend.url, "conversations", f"slot_run = '{dead['run_id']}'") == 1

    model = RecordingModel(hang_rules("I cannot tell whether the tool took effect."))
    rt = await runtimes(
        models=[model], tools=[Tool("hang", "Runs until the process dies.", hang_again)],
        clock=clock, config=crash_config(),
    )
    # Its liveness mark is free, so the new instance voided the slot as it booted: with no
    # clock advance, the dead turn is closed.
    await rt.settle(cid)

    results = [m for m in await rt.transcript(cid) if m.tool_call_id == call_id]
    assert [(m.role, m.meta.get("status")) for m in results] == [("tool", "outcome_unknown")]
    [run] = await rt.runs.list(cid)
    assert (run.status, run.failure_code) == ("failed", "interrupted")
    assert marker.read_text("utf-8").splitlines() == [call_id]  # never run again
    assert model.requests == []

    await rt.post(cid, "Did it work?", owner=OWNER)
    await rt.settle(cid)
    old, new = await rt.runs.list(cid)
    assert (old.run_id, old.status) == (dead["run_id"], "failed")
    assert (new.status, new.failure_code) == ("completed", None)
    transcript = await rt.transcript(cid)
    assert [(m.role, m.content) for m in transcript[-2:]] == [
        ("user", "Did it work?"), ("assistant", "I cannot tell whether the tool took effect."),
    ]
    assert [m.role for m in model.requests[0].messages][-3:] == ["assistant", "tool", "user"]
    assert marker.read_text("utf-8").splitlines() == [call_id]
    assert pairing_problems(transcript) == []
    interrupted = [e.data for e in await rt.events(cid) if e.type == "turn_status"
                   and e.data.get("failure_code") == "interrupted"]
    assert interrupted == [
        {"run_public_id": dead["run_id"], "status": "failed", "failure_code": "interrupted"}
    ]


# -- S7: the model was answering when the process died ----------------------------------------


async def test_s7_sigkill_before_final_commit_keeps_signals_and_inputs(
    backend: Backend, clock: ManualClock, runtimes: RuntimeFactory
) -> None:
    async with spawn_turn_child("model_hang", backend.url) as child:
        dead = await child.checkpoint("model_blocked")
        await child.kill()
    await wait_instance_released(backend.url, dead["instance_id"])
    cid, input_id, event_id = dead["conversation_id"], dead["input_id"], dead["event_id"]
    # The killed turn had claimed the signal and taken the person's input.
    assert len(dead["suffix"]) == 1
    assert event_id in dead["suffix"][0]
    assert dead["messages"][-1] == "What did the background task do?"

    # What the dead turn left: its run running, the input queued, the signal claimed once by
    # the turn that died and not acknowledged.
    assert count_rows(backend.url, "runs", "status = 'running'") == 1
    assert count_rows(backend.url, "inputs", f"input_id = '{input_id}' AND state = 'queued'") == 1
    assert count_rows(
        backend.url, "signal_deliveries",
        f"delivery_id = {int(dead['delivery_id'])} AND attempts = 1 AND state = 'leased'",
    ) == 1

    model = RecordingModel(ScriptedModel(default={"text": "It exited with code 0."}))
    rt = await runtimes(models=[model], clock=clock, config=crash_config())
    # Its liveness mark is free: the new instance voided its slot and lease as it booted, and
    # (with no clock advance) the next turn starts at once.
    await rt.settle(cid)

    # The signal was delivered again, as a runtime fact in the suffix of the new turn.
    [request] = model.requests
    assert len(request.suffix) == 1
    assert event_id in request.suffix[0]
    assert SIGNAL_TYPE in request.suffix[0]
    assert all(event_id not in m.content for m in request.messages)
    assert request.messages[-1].content == "What did the background task do?"

    old, new = await rt.runs.list(cid)
    assert (old.status, old.failure_code) == ("failed", "interrupted")  # the dead turn
    assert (new.status, new.trigger) == ("completed", "person")
    [state] = await rt.outbox.delivery_states([dead["delivery_id"]])
    assert (state["state"], state["attempts"]) == ("acknowledged", 2)
    assert (await rt.outbox.stats(cid)).backlog == 0

    # The person's input was read once, by the turn that committed.
    [read] = await rt.inputs.list(cid)
    assert (read.input_id, read.state, read.run_id) == (input_id, "materialized", new.run_id)
    transcript = await rt.transcript(cid)
    assert [(m.role, m.input_id) for m in transcript] == [
        ("user", input_id), ("assistant", None),
    ]
    assert transcript[-1].content == "It exited with code 0."
    assert transcript[-1].run_id == new.run_id
    materialized = [e.data["input_id"] for e in await rt.events(cid)
                    if e.type == "input_materialized"]
    assert materialized == [input_id]
