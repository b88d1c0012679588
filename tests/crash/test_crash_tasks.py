"""T9: a task whose runtime was killed is ``lost`` after restart -- never a success -- and the
model is told so once, at a safe point."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time

from tests.conftest import Backend
from tidings.models.scripted import Rule, ScriptedModel
from tidings.runtime import Runtime
from tidings.tasks.notify import NOTIFICATION_KIND
from tidings.types import RunStatus, StartKind

CHILD = """
import asyncio, json, sys
from tidings import Profile, Rule, Runtime, ScriptedModel

MODEL = ScriptedModel(rules=[
    Rule({"text_contains": "deploy"}, {"tool_calls": [{"name": "shell", "arguments": {
        "command": "sleep 60", "background": True}}]}),
    Rule({"tool_result": "shell"}, {"text": "Deploy started."}),
])

async def main() -> None:
    async with Runtime.open(sys.argv[1], models=[MODEL]) as rt:
        conv = (await rt.create_conversation("alice", Profile(model="scripted", tools=("shell",)))
                ).conversation_id
        await rt.post(conv, "deploy it")
        await rt.settle(conv)
        print(json.dumps({"conversation_id": conv}), flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""

RESTARTED = ScriptedModel(
    rules=[Rule({"meta_kind": "task_notification"}, {"text": "The deploy's outcome is unknown."})],
    default={"text": "ok"},
)


async def test_t9_task_of_a_killed_runtime_is_lost_after_restart(backend: Backend) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, backend.url, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), 30)
        assert line, (await child.stderr.read()).decode() if child.stderr else "no output"
        conv = json.loads(line)["conversation_id"]
    finally:
        with contextlib.suppress(ProcessLookupError):
            child.kill()  # SIGKILL: no shutdown code runs
        await child.wait()

    async with Runtime.open(backend.url, models=[RESTARTED]) as rt:
        deadline = time.monotonic() + 20
        while True:
            await rt.settle(conv)
            messages = await rt.transcript(conv)
            if messages and messages[-1].content == "The deploy's outcome is unknown.":
                break
            assert time.monotonic() < deadline, [(m.role, m.content[:60]) for m in messages]
            await asyncio.sleep(0.05)
        notes = [m for m in messages if m.meta.get("kind") == NOTIFICATION_KIND]
        assert len(notes) == 1
        assert notes[0].meta["state"] == "lost"
        assert '"succeeded":false' in notes[0].content
        runs = await rt.runs(conv)
        assert runs[-1].trigger is StartKind.WAKE
        assert runs[-1].status is RunStatus.COMPLETED
        # A second restart finds nothing more to say.
    async with Runtime.open(backend.url, models=[RESTARTED]) as again:
        await again.settle(conv)
        assert len([m for m in await again.transcript(conv)
                    if m.meta.get("kind") == NOTIFICATION_KIND]) == 1
