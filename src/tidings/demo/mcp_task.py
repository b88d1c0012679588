"""The demo's background MCP task: a tool of an MCP server, run by the server as its task.

The demo's own MCP server (:mod:`tidings.demo.mcp_task_server`, started as a stdio
subprocess) renders the docs. The profile lists its tool in ``background``, so the model's
call is made as a task: the call's result gives the model the task key at once and the turn
ends; the runtime follows the task on the server, and its end comes back as a task notice --
after the result, once, at a safe point -- that a woken turn answers. The check reads the
database.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import replace

from rich.console import Console

from tidings.demo.checks import Check
from tidings.demo.timeline import Snapshot, Timeline, snapshot
from tidings.mcp import MCPServer
from tidings.models.scripted import Rule, ScriptedModel
from tidings.records.results import MasterKey
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.tasks.notify import NOTIFICATION_KIND, TaskState
from tidings.types import Profile, RunStatus, StartKind

DOCS = MCPServer("docs", command=[sys.executable, "-m", "tidings.demo.mcp_task_server"])
PROFILE = Profile(model="scripted", tools=("docs.render",), background=("docs.render",))
REQUEST = "Render the docs for the release."
RENDERING = "The docs server is rendering them as a task; I will tell you when it is done."
RENDERED = "The docs are rendered: the docs server says it rendered 12 pages."
NOT_RENDERED = "The docs task ended without rendering them; I will not report it as done."

MODEL = ScriptedModel(rules=[
    Rule({"text_contains": REQUEST},
         {"tool_calls": [{"name": "docs.render", "arguments": {"pages": 12}}]}),
    Rule({"tool_result": "docs.render"}, {"text": RENDERING}),
    # What the server's task gave is fenced as untrusted output; its success is a runtime fact.
    Rule({"meta_kind": NOTIFICATION_KIND, "text_contains": '"succeeded":true'},
         {"text": RENDERED}),
    Rule({"meta_kind": NOTIFICATION_KIND}, {"text": NOT_RENDERED}),
], default={"text": "Noted."})

WAIT_S = 30.0


async def mcp_task_phase(url: str, console: Console, timeline: Timeline, key: MasterKey,
                         config: RuntimeConfig) -> tuple[Snapshot, str]:
    """Run the phase; the conversation as the database holds it, and the task's key."""
    config = replace(config, mcp_servers=(*config.mcp_servers, DOCS))
    async with Runtime.open(url, models=[MODEL], config=config, master_key=key) as rt:
        conv = (await rt.create_conversation("alice", PROFILE, title="docs")).conversation_id
        await rt.post(conv, REQUEST)
        await rt.settle(conv)
        view = await snapshot(rt.store, conv)
        timeline.show(view)
        task_key = view.tasks[0].task_key if view.tasks else ""
        deadline = time.monotonic() + WAIT_S
        with console.status("[dim]waiting for the docs server's task to end…"):
            while not any(t.task_key == task_key and t.consumed for t in view.tasks):
                if time.monotonic() > deadline:
                    console.print(f"[red]  gave up after {WAIT_S:.0f}s waiting for the task")
                    break
                await asyncio.sleep(0.05)
                await rt.settle(conv)
                view = await snapshot(rt.store, conv)
        timeline.show(view)
        for task in view.tasks:
            console.print(f"  [dim]the task's record: {task.task_key} {task.state.value}, run "
                          f"by the MCP server {task.mcp_server} as its task "
                          f"{task.mcp_task_id}[/]",
                          highlight=False)
    return view, task_key


def mcp_task_told_once(view: Snapshot, task_key: str) -> Check:
    """The MCP task's end reached the model once, as a notice after its call's result, and a
    woken turn answered it."""
    task = next((t for t in view.tasks if t.task_key == task_key), None)
    notes = [m for m in view.messages if m.meta.get("kind") == NOTIFICATION_KIND
             and m.meta.get("task_key") == task_key]
    result = next((m for m in view.messages
                   if m.role == "tool" and m.meta.get("task_key") == task_key), None)
    woken = [r for r in view.runs if r.trigger is StartKind.WAKE
             and r.status is RunStatus.COMPLETED]
    ok = (task is not None and task.mcp_task_id is not None
          and task.state is TaskState.EXITED and task.exit_code == 0 and task.consumed
          and len(notes) == 1 and result is not None and notes[0].seq > result.seq
          and len(woken) == 1 and any(m.content == RENDERED for m in view.messages))
    detail = (f"{task_key} run by the docs server as task {task and task.mcp_task_id}: one "
              f"notice (message {notes[0].seq}) after its result (message "
              f"{result and result.seq})"
              if ok else f"{task_key}: {task and task.state.value}, {len(notes)} notice(s), "
              f"{len(woken)} woken turn(s)")
    return Check("the background MCP task's end told once, after its result", ok, detail)


__all__ = ("mcp_task_phase", "mcp_task_told_once")
