"""The conversation half of ``tidings demo``: real turns on the scripted model, offline.

A person's request runs a real OS process through a tool; a steer joins at the safe point; a
fact the runtime learned wakes the conversation; a stop cancels a running tool and suppresses
continuation until the person writes again.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from rich.console import Console
from rich.table import Table

from tidings.coordinator import CoordinatorConfig
from tidings.models.scripted import Rule, ScriptedModel
from tidings.runtime import Runtime, RuntimeConfig
from tidings.tools.registry import Tool, ToolContext, ToolOutput
from tidings.turns.runner import TurnConfig
from tidings.types import Profile


async def _run_process(context: ToolContext, arguments: Mapping[str, Any]) -> ToolOutput:
    """Run a short Python snippet as a real process (foreground) and return its output."""
    code = str(arguments.get("code", ""))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await process.communicate()
    except asyncio.CancelledError:
        process.kill()
        await process.wait()
        raise
    text = output.decode("utf-8", "replace").strip()
    return ToolOutput(f"exit {process.returncode}: {text}", is_error=process.returncode != 0)


MODEL = ScriptedModel(
    rules=[
        Rule({"text_contains": "run the tests"},
             {"tool_calls": [{"name": "python", "arguments": {
                 "code": "import time; time.sleep(0.5); print('42 passed')"}}]}),
        Rule({"text_contains": "watch the deploy"},
             {"tool_calls": [{"name": "python", "arguments": {
                 "code": "import time; time.sleep(30)"}}]}),
        Rule({"text_contains": "also check"}, {"text": "The tests passed; I will check the docs."}),
        Rule({"tool_result": "python"}, {"text": "The tests passed: 42 of them."}),
        Rule({"suffix_contains": "task.exited"},
             {"text": "A background task exited 0 (a runtime fact, not your command)."}),
    ],
    default={"text": "Understood."},
)


async def conversations_demo(url: str, console: Console) -> None:
    config = RuntimeConfig(
        turns=TurnConfig(slot_ttl=timedelta(seconds=5)),
        coordinator=CoordinatorConfig(sweep_interval=timedelta(seconds=1)),
    )
    tool = Tool("python", "Run a Python snippet as a process", _run_process)
    async with Runtime.open(url, models=[MODEL], tools=[tool], config=config) as rt:
        profile = Profile(model="scripted", tools=("python",))
        conv = (await rt.create_conversation("alice", profile, title="demo")).conversation_id

        console.rule("[bold]6. a turn runs a real process; a steer joins at the safe point")
        await rt.post(conv, "Please run the tests")
        await asyncio.sleep(0.2)  # the tool's process is running now
        await rt.post(conv, "also check the docs", delivery_mode="steer")
        await rt.settle(conv)

        console.rule("[bold]7. a fact the runtime learned wakes the conversation")
        await rt.store.transact(
            lambda tx: rt.outbox.publish(tx, conv, "task.exited", {"task_key": "build",
                                                                   "exit_code": 0},
                                         idempotency_key="build-exit"),
            route=conv,
        )
        await rt.settle(conv)

        console.rule("[bold]8. stop: the running tool is cancelled, continuation suppressed")
        await rt.post(conv, "Now watch the deploy")
        await asyncio.sleep(0.3)
        await rt.stop(conv)
        await rt.settle(conv)
        await rt.store.transact(
            lambda tx: rt.outbox.publish(tx, conv, "task.exited", {"task_key": "deploy",
                                                                   "exit_code": 0},
                                         idempotency_key="deploy-exit"),
            route=conv,
        )
        await rt.settle(conv)
        state = await rt.conversation(conv)
        console.print(f"  after the stop: suppressed={state.suppressed}; a new fact started "
                      "no turn")
        await rt.post(conv, "Thanks, carry on")
        await rt.settle(conv)

        transcript = Table(title=f"transcript of {conv}")
        for column in ("seq", "role", "content"):
            transcript.add_column(column)
        for m in await rt.transcript(conv):
            content = m.content or ", ".join(f"{c['name']}({c['call_id']})" for c in m.tool_calls)
            transcript.add_row(str(m.seq), m.role, content[:90])
        console.print(transcript)
        runs = Table(title="runs")
        for column in ("run", "trigger", "status", "steps", "failure"):
            runs.add_column(column)
        for r in await rt.runs(conv):
            runs.add_row(r.run_id[-12:], r.trigger.value, r.status.value, str(r.steps),
                         r.failure_code or "")
        console.print(runs)
