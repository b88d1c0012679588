"""``tidings demo``: the whole mission, offline, on the embedded default, as a timeline.

1. A person asks for a build; the scripted model starts it with ``shell`` (background) and
   ends its turn.
2. The build ends; its ``task_notification`` lands after the tool result, wakes the
   conversation, and the answer consumes it.
3. Delegation: the model spawns two child conversations; their replies come back as
   ``task_result`` mail, relayed once each, and are answered together in one supplementary
   turn.
4. A crash mid-task: a child process running the runtime is SIGKILLed while its deploy runs;
   a new instance finds the task ``lost`` and the model is told so, once.
5. A restart the agent asks for, mid-task: a child process commits a ``restart`` operation
   ("accepted, not completed") and exits; the next instance completes it, and one
   ``restart_completed`` turn answers, with the interrupted task reported honestly.
6. A tool of an MCP server: the runtime starts the demo's server (shipped in the package)
   over stdio, and the model calls its tool; the server's process ends with the runtime.
7. Underneath: the signal outbox's idempotency, fenced leases and dead letters.
8. A background MCP task: an MCP server's tool, run by the server as its task; its end comes
   back as a task notice, once (:mod:`tidings.demo.mcp_task`).
9. A remote A2A agent as a child: an agent written with the ``a2a-sdk``, served on loopback in
   this process; its answer comes back as child mail, once (:mod:`tidings.demo.a2a_remote`).

It ends with checks made by reading the database; :func:`run_demo` returns whether all held.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable

from rich.console import Console

from tidings.clock import SystemClock
from tidings.demo import checks
from tidings.demo.a2a_remote import a2a_phase, delegated_to_a_remote_agent_once
from tidings.demo.mcp_task import mcp_task_phase, mcp_task_told_once
from tidings.demo.mcp_tool import ANSWER as MCP_ANSWER
from tidings.demo.mcp_tool import TOOL as MCP_TOOL
from tidings.demo.mcp_tool import mcp_phase
from tidings.demo.outbox_tour import outbox_tour
from tidings.demo.restart import restart_child, run_child
from tidings.demo.script import (
    BUILD_REQUEST,
    COMBINED,
    DELEGATION_PROFILE,
    DELEGATION_REQUEST,
    MODEL,
    OWNER,
    PAUSE,
    PROFILE,
    RESTARTED,
    STARTED,
    demo_config,
)
from tidings.demo.timeline import Snapshot, Timeline, snapshot
from tidings.records import operations
from tidings.records.results import MASTER_KEY_ENV, MasterKey
from tidings.runtime.root import Runtime
from tidings.store import open_store
from tidings.tasks.notify import TaskState
from tidings.types import FeedEvent, RunStatus

__all__ = ("restart_child", "run_demo")

WAIT_S = 30.0


def _now() -> int:
    return SystemClock().now_us()


async def _read(url: str, conversation_id: str) -> Snapshot:
    store = await open_store(url)
    try:
        return await snapshot(store, conversation_id)
    finally:
        await store.close()


async def _wait(
    rt: Runtime, conversation_id: str, done: Callable[[Snapshot], bool], console: Console,
    what: str,
) -> Snapshot:
    """Poll the database until ``done`` holds and no run is open (or give up, and say so)."""
    deadline = time.monotonic() + WAIT_S
    with console.status(f"[dim]{what}…"):
        while True:
            await rt.settle(conversation_id)
            view = await snapshot(rt.store, conversation_id)
            idle = all(r.status not in (RunStatus.RUNNING, RunStatus.QUEUED) for r in view.runs)
            if idle and done(view):
                return view
            if time.monotonic() > deadline:
                console.print(f"[red]  gave up after {WAIT_S:.0f}s {what}")
                return view
            await asyncio.sleep(0.05)


async def _watch_turn(rt: Runtime, conversation_id: str) -> list[FeedEvent]:
    """What a watcher of the conversation sees until its first turn ends."""
    seen: list[FeedEvent] = []
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(WAIT_S):
            async for event in rt.watch(conversation_id):
                seen.append(event)
                if event.type == "turn_status" and RunStatus(event.data["status"]).ended:
                    break
    return seen


def _handled(task_key: str) -> Callable[[Snapshot], bool]:
    def check(view: Snapshot) -> bool:
        return any(t.task_key == task_key and t.consumed for t in view.tasks)

    return check


async def run_demo(url: str, console: Console) -> bool:
    """Run every phase on the database at ``url``; print the timeline and the checks."""
    timeline = Timeline(console, _now())
    key = MasterKey.generate()
    child_env = {MASTER_KEY_ENV: key.secret.hex()}
    config = demo_config()
    console.print(f"[dim]database {url} · scripted model · offline[/]")

    console.rule("[bold]1. A person asks; the model starts a background build and ends its turn")
    opening = _now()
    async with Runtime.open(url, models=[MODEL], tools=[PAUSE], config=config,
                            master_key=key) as rt:
        timeline.note(opening, "host", f"runtime instance {rt.instance_id} up (pid {os.getpid()})")
        conv = (await rt.create_conversation(OWNER, PROFILE, title="demo")).conversation_id
        watching = asyncio.create_task(_watch_turn(rt, conv))
        await rt.post(conv, BUILD_REQUEST)
        await rt.settle(conv)
        watched = await watching
        view = await snapshot(rt.store, conv)
        timeline.show(view)
        pieces = [e for e in watched if e.seq is None]
        if pieces:
            timeline.note(pieces[-1].at_us, "model", f"the answer reached a watcher in "
                          f"{len(pieces)} pieces as it was written, before it was saved")
        [build] = view.tasks
        console.rule("[bold]2. The build ends; its notification wakes the conversation")
        view = await _wait(rt, conv, _handled(build.task_key), console,
                           "waiting for the background build to end")
        timeline.show(view)
        journal = next(t for t in view.tasks if t.task_key == build.task_key)
        result = next(m.seq for m in view.messages if m.tool_call_id == journal.call_id)
        handed = ("handed to the model and read" if journal.delivered and journal.consumed
                  else "handed to the model, not yet read" if journal.delivered
                  else "not yet handed to the model")
        console.print(f"  [dim]the task's record: {journal.task_key} {journal.state.value}; "
                      f"its notice was {handed}, as message {journal.notification_seq} of the "
                      f"transcript, after the tool's result (message {result})[/]",
                      highlight=False)

        console.rule("[bold]3. Delegation: two child conversations report back in one turn")
        lead = (await rt.create_conversation(OWNER, DELEGATION_PROFILE, title="delegation")
                ).conversation_id
        await rt.post(lead, DELEGATION_REQUEST)

        def combined(view: Snapshot) -> bool:
            return any(m.content == COMBINED for m in view.messages)

        lead_view = await _wait(rt, lead, combined, console,
                                "waiting for both helpers to report")
        timeline.show(lead_view)
        requests = await rt.relay.requests_of(lead)
        lead_inputs = await rt.inputs.list(lead)
        for request in requests:
            passed = ("passed on to this conversation once" if request.relayed
                      else "not passed on yet")
            console.print(f"  [dim]{request.task_key}: child {request.child_conversation_id} "
                          f"{request.state}; its reply {passed}[/]", highlight=False)
    timeline.note(_now(), "host", f"instance {rt.instance_id} shut down")

    console.rule("[bold]4. A crash mid-task: the runtime process is killed with SIGKILL")
    spawned = _now()
    crashed, kill = await run_child(url, conv, crash=True, env=child_env)
    try:
        timeline.note(spawned, "host", f"child process {crashed.facts['pid']} starts instance "
                      f"{crashed.facts['instance_id']}")
        timeline.show(await _read(url, conv))
    finally:
        await kill()
    timeline.note(_now(), "host", f"SIGKILL to process {crashed.facts['pid']} while "
                  f"{crashed.facts['task_key']} runs: no shutdown code runs")
    opening = _now()
    async with Runtime.open(url, models=[MODEL], tools=[PAUSE], config=config,
                            master_key=key) as rt:
        timeline.note(opening, "host", f"new instance {rt.instance_id} up; it finds the killed "
                      "one gone and takes over its unfinished work")
        view = await _wait(rt, conv, _handled(crashed.facts["task_key"]), console,
                           "waiting for the lost task to be reported")
        timeline.show(view)

    console.rule("[bold]5. A restart the agent asks for, mid-task")
    spawned = _now()
    restarted, _ = await run_child(url, conv, crash=False, env=child_env)
    exited = _now()
    operation_id = str(restarted.facts["operation_id"])
    timeline.note(spawned, "host", f"child process {restarted.facts['pid']} starts instance "
                  f"{restarted.facts['instance_id']}")
    timeline.show(await _read(url, conv))
    timeline.note(exited, "host", f"the host honours the request: process "
                  f"{restarted.facts['pid']} shuts its runtime down and exits "
                  f"(code {restarted.returncode}); operation {operation_id} is still "
                  f"{restarted.facts['operation_state']}")

    def restart_done(view: Snapshot) -> bool:
        return (_handled(restarted.facts["task_key"])(view)
                and any(m.content == RESTARTED for m in view.messages))

    opening = _now()
    async with Runtime.open(url, models=[MODEL], tools=[PAUSE], config=config,
                            master_key=key) as rt:
        timeline.note(opening, "host", f"new instance {rt.instance_id} up; once initialised it "
                      "completes the restart")
        view = await _wait(rt, conv, restart_done, console,
                           "waiting for the restart's completion turn")
        timeline.show(view)
        operation = await operations.get(rt.store, operation_id)
        console.print(f"  [dim]operation {operation_id}: accepted → {operation.state.value} "
                      f"by instance {rt.instance_id}[/]", highlight=False)

    console.rule("[bold]6. A tool of an MCP server, over stdio")
    mcp = await mcp_phase(url, config=config, master_key=key, timeline=timeline, now=_now)

    console.rule("[bold]7. Underneath: the signal outbox")
    results = await outbox_tour(url, console)

    console.rule("[bold]8. A background MCP task: the docs server renders as its task")
    mcp_view, mcp_task_key = await mcp_task_phase(url, console, timeline, key, config)

    console.rule("[bold]9. A remote A2A agent as a child: the editor answers over A2A")
    delegated = await a2a_phase(url, console, timeline, key, config)

    console.rule("[bold]Checks, made by reading the database")
    store = await open_store(url)
    try:
        view = await snapshot(store, conv)
        record = await checks.restart_record(store, conv, operation_id)
    finally:
        await store.close()
    results = [
        checks.notified_once(view),
        checks.placed_after_result(view),
        checks.through_the_door(view),
        checks.never_between_call_and_result(view),
        checks.consumed(view),
        checks.build_succeeded(view, build.task_key),
        checks.interrupted_honestly(view, crashed.facts["task_key"], "crash"),
        checks.interrupted_honestly(view, restarted.facts["task_key"], "restart"),
        checks.nothing_replayed(view),
        checks.restart_completed_once(view, record, RESTARTED),
        checks.runs_never_overlap(view),
        checks.pairing_intact(view),
        checks.delegated_once_in_one_turn(lead_view, requests, lead_inputs),
        checks.streamed(watched, STARTED),
        checks.mcp_tool_answered(mcp.view, MCP_TOOL, MCP_ANSWER, server_ended=mcp.server_ended),
        *results,
        mcp_task_told_once(mcp_view, mcp_task_key),
        delegated_to_a_remote_agent_once(delegated),
    ]
    for line in checks.render(results):
        console.print(line, highlight=False)
    failed = [c for c in results if not c.ok]
    # Counted from what the timeline showed, so the two always agree.
    cut = sum(1 for state in timeline.tasks.values()
              if state in (TaskState.LOST, TaskState.KILLED))
    console.print(
        f"\n{len(results) - len(failed)} of {len(results)} checks passed · "
        f"{timeline.turns} turns, {len(timeline.tasks)} background tasks ({cut} cut short by "
        "the crash and the restart)",
        style="bold green" if not failed else "bold red", highlight=False,
    )
    return not failed
