"""The demo's delegation to a remote A2A agent (P5): a child that is another agent.

The editor is a small agent written with the ``a2a-sdk``'s own server classes (an
``AgentExecutor`` behind the SDK's request handler, its JSON-RPC and Agent Card routes), served
in this process on a loopback port: nothing leaves the machine. The conversation's model spawns
it with ``agent: editor``; tidings sends the brief once, watches the remote task
(``SubscribeToTask``: the editor's card says it streams), and relays the editor's answer to the
parent once, as ``child`` mail, which a mail turn answers. The check reads the database and
what the editor received.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import uvicorn
from a2a.helpers.proto_helpers import get_message_text, new_task
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    TaskState,
)
from rich.console import Console
from starlette.applications import Starlette

from tidings.agents import RemoteAgent
from tidings.demo.checks import Check
from tidings.demo.timeline import Snapshot, Timeline, snapshot
from tidings.mail.child_requests import ChildRequest
from tidings.models.scripted import Rule, ScriptedModel
from tidings.records.results import MasterKey
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.types import Input, Origin, Profile, StartKind

AGENT = "editor"
PROFILE = Profile(model="scripted", tools=("spawn",))
REQUEST = "Have the editor polish the release notes."
BRIEF = "Polish the release notes: 12 changes, 2 breaking; 3 open issues, none blocking."
POLISHED = "Release 2.0: twelve changes (two breaking), three known issues, none blocking."
ASKED = "The editor is on it; its answer will come back to this conversation."
EDITED = "The editor's polished notes are in; the release notes are ready."
WORK_SECONDS = 0.5

MODEL = ScriptedModel(rules=[
    Rule({"text_contains": REQUEST}, {"tool_calls": [{"name": "spawn", "arguments": {
        "agent": AGENT, "brief": BRIEF}}]}),
    Rule({"tool_result": "spawn"}, {"text": ASKED}),
    Rule({"text_contains": POLISHED}, {"text": EDITED}),
], default={"text": "Noted."})

WAIT_S = 30.0


@dataclass
class Editor(AgentExecutor):
    """Works a moment on each brief, then completes its task with the polished notes."""

    received: list[str] = field(default_factory=list)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        self.received.append(get_message_text(context.message))
        task = context.current_task or new_task(
            task_id=context.task_id or "", context_id=context.context_id or "",
            state=TaskState.TASK_STATE_SUBMITTED)
        if context.current_task is None:
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        await asyncio.sleep(WORK_SECONDS)
        await updater.add_artifact([Part(text=POLISHED)], name="answer")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


@contextlib.asynccontextmanager
async def served_editor() -> AsyncIterator[tuple[RemoteAgent, Editor]]:
    """The editor on a loopback port of this process, for the block: its declaration."""
    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listening.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{listening.getsockname()[1]}"
    card = AgentCard(
        name=AGENT, description="Polishes release notes.", version="1.0",
        supported_interfaces=[AgentInterface(protocol_binding="JSONRPC", url=f"{url}/",
                                             protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id="edit", name="edit", description="Polishes text.",
                           tags=["edit"])])
    editor = Editor()
    handler = DefaultRequestHandler(editor, InMemoryTaskStore(), card)
    app = Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", log_config=None))
    serving = asyncio.create_task(server.serve(sockets=[listening]))
    try:
        while not server.started:
            if serving.done():
                await serving  # it could not start: say why
            await asyncio.sleep(0.01)
        yield RemoteAgent(AGENT, url), editor
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(serving, 5)
        listening.close()


@dataclass(frozen=True, slots=True)
class Delegated:
    """What the phase leaves for its check."""

    view: Snapshot
    requests: Sequence[ChildRequest]
    inputs: Sequence[Input]
    received: Sequence[str]


async def a2a_phase(url: str, console: Console, timeline: Timeline, key: MasterKey,
                    config: RuntimeConfig) -> Delegated:
    """Run the phase: the conversation as the database holds it, its child requests and
    inputs, and what the editor received."""
    async with served_editor() as (agent, editor):
        timeline.note(time.time_ns() // 1000, "host", f"A2A agent {AGENT!r} (a2a-sdk) serving on "
                      f"{agent.url}, its card saying it streams")
        async with Runtime.open(url, models=[MODEL], config=config, master_key=key,
                                agents=[agent]) as rt:
            conv = (await rt.create_conversation("alice", PROFILE, title="editor")
                    ).conversation_id
            await rt.post(conv, REQUEST)
            deadline = time.monotonic() + WAIT_S
            with console.status("[dim]waiting for the editor's answer…"):
                while True:
                    await rt.settle(conv)
                    view = await snapshot(rt.store, conv)
                    if any(m.content == EDITED for m in view.messages):
                        break
                    if time.monotonic() > deadline:
                        console.print(f"[red]  gave up after {WAIT_S:.0f}s waiting for the "
                                      "editor")
                        break
                    await asyncio.sleep(0.05)
            timeline.show(view)
            requests = await rt.children.list(conv)
            inputs = await rt.inputs.list(conv)
            for request in requests:
                passed = ("passed on to this conversation once" if request.relayed
                          else "not passed on yet")
                console.print(f"  [dim]{request.task_key}: remote child {AGENT} (known here "
                              f"as {request.child_conversation_id}) {request.state}, its reply "
                              f"{request.reply_status} and {passed}[/]", highlight=False)
    return Delegated(view, requests, inputs, tuple(editor.received))


def delegated_to_a_remote_agent_once(done: Delegated) -> Check:
    """P5: the editor received the brief once; its answer reached the parent once, as child
    mail, read by one mail turn that answered it."""
    mails = [i for i in done.inputs if i.origin is Origin.CHILD]
    mail_turns = [r for r in done.view.runs if r.trigger is StartKind.MAIL]
    answers = [m for m in done.view.messages if m.content == EDITED]
    ok = (list(done.received) == [BRIEF] and len(done.requests) == 1
          and done.requests[0].relayed and done.requests[0].reply_status == "completed"
          and len(mails) == 1 and POLISHED in mails[0].content
          and len(mail_turns) == 1 and mails[0].run_id == mail_turns[0].run_id
          and len(answers) == 1)
    return Check("a remote A2A agent's answer passed on to its parent once", ok,
                 f"the agent got the brief {len(done.received)} time(s); {len(mails)} reply "
                 f"reached the parent, {len(mail_turns)} turn read it, {len(answers)} answer")


__all__ = ("a2a_phase", "delegated_to_a_remote_agent_once")
