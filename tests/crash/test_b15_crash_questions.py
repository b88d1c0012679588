"""B15 across a SIGKILL: a crash while an MCP server's question waits for a person leaves it
pending (a task's: the task still asks after the restart) or expired (a call's: the call died
with the process), never answered.

The desk (tests/mcp_servers/desk.py, FastMCP + ``fastmcp-tasks``) runs on loopback HTTP, apart
from tidings, so its tasks outlive the tidings process that is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.conftest import Backend
from tests.crash.helpers import spawn_script, wait_instance_released
from tests.mcp_servers import DESK
from tests.mcp_servers.loopback import served
from tests.waiting import eventually
from tidings import MCPServer, QuestionDecidedError, Rule, ScriptedModel
from tidings.conversations.questions import Question
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.tasks.notify import NOTIFICATION_KIND
from tidings.types import Message, RunStatus

CHILD = Path(__file__).with_name("mcp_task_child.py")
TOLD = "Told of its end."
WAIT = 20.0
POLL = timedelta(milliseconds=100)


@contextlib.asynccontextmanager
async def restarted(backend: Backend, server: MCPServer) -> AsyncIterator[Runtime]:
    model = ScriptedModel(rules=[Rule({"meta_kind": NOTIFICATION_KIND}, {"text": TOLD})],
                          default={"text": "ok"})
    async with Runtime.open(backend.url, models=[model],
                            config=RuntimeConfig(mcp_servers=(server,))) as rt:
        yield rt


async def killed_while_asking(backend: Backend, server: MCPServer, tool: str,
                              arguments: dict[str, object], *, foreground: bool,
                              ) -> dict[str, str]:
    """A child runtime calls ``tool``; once the server's question waits for a person, the
    child is SIGKILLed. What it announced."""
    declared = json.dumps({"name": server.name, "url": server.url})
    args = (backend.url, declared, tool, json.dumps(arguments), *(("--asked",) * foreground))
    async with spawn_script(CHILD, *args) as child:
        announced = await child.checkpoint("started" if not foreground else "asked",
                                           within_s=WAIT)
        if not foreground:  # the task asks on its own, once the turn ended
            async with restarted_reader(backend) as rt:
                await eventually(lambda: rt.questions.list(announced["conversation_id"]),
                                 what="the task's question", within_s=WAIT)
        await child.kill()  # SIGKILL: no shutdown code runs
    await wait_instance_released(backend.url, announced["instance_id"])
    return announced


@contextlib.asynccontextmanager
async def restarted_reader(backend: Backend) -> AsyncIterator[Runtime]:
    """A runtime that only reads (no MCP server: it follows no task)."""
    async with Runtime.open(backend.url, models=[ScriptedModel()]) as rt:
        yield rt


async def test_b15_a_crash_while_a_calls_question_waits_leaves_it_expired_never_answered(
    backend: Backend, tmp_path: Path,
) -> None:
    with served(DESK, "desk", env={"DESK_DIR": str(tmp_path)}, task_poll=POLL) as server:
        asked = await killed_while_asking(backend, server, "desk.book", {"date": "June 1"},
                                          foreground=True)
        conv, question_id = asked["conversation_id"], asked["question_id"]
        async with restarted(backend, server) as rt:
            # The call died with its process: its run ends interrupted, its question expires.
            async def left() -> list[Question]:
                await rt.settle(conv)
                return await rt.questions.list(conv)

            [question] = await eventually(left, lambda qs: qs[0].status != "pending",
                                          what="the dead call's question expired",
                                          within_s=WAIT)
            assert (question.question_id, question.status) == (question_id, "expired")
            assert (question.answer, question.decided_by) == (None, None)
            with pytest.raises(QuestionDecidedError):
                await rt.questions.answer(conv, question_id, action="accept", content={"seats": 2},
                                          decided_by="alice")
            [run] = await rt.runs.list(conv)
            assert (run.status, run.failure_code) == (RunStatus.FAILED, "interrupted")
    assert "booked" not in (tmp_path / "runs.log").read_text()


async def test_b15_a_crash_while_a_tasks_question_waits_leaves_it_pending_and_answerable(
    backend: Backend, tmp_path: Path,
) -> None:
    with served(DESK, "desk", env={"DESK_DIR": str(tmp_path)}, task_poll=POLL) as server:
        started = await killed_while_asking(backend, server, "desk.order", {"item": "chair"},
                                            foreground=False)
        conv = started["conversation_id"]
        async with restarted(backend, server) as rt:
            [question] = await rt.questions.list(conv)
            assert (question.status, question.task_id) == ("pending", started["task_key"])
            await asyncio.sleep(1)  # the restarted runtime follows the task: it asks again
            assert [q.question_id for q in await rt.questions.list(conv)] == [
                question.question_id]  # ...the same question, not a second one
            await rt.questions.answer(conv, question.question_id, action="accept",
                                      content={"street": "Birch 3"}, decided_by="alice")

            async def told() -> list[Message]:
                await rt.settle(conv)
                return await rt.transcript(conv)

            messages = await eventually(told, lambda ms: ms[-1].content == TOLD,
                                        what="the task's notice", within_s=WAIT)
            [note] = [m for m in messages if m.meta.get("kind") == NOTIFICATION_KIND]
            assert "ordered chair to Birch 3" in note.content
