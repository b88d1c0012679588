"""B15: what an MCP server asks a person is a durable question on the conversation, decided once
by a person, with the requested schema validated; declined and expired are answers too;
nothing automatic ever answers it.

Against servers no one here wrote:
- the desk (tests/mcp_servers/desk.py), written with FastMCP and ``fastmcp-tasks`` on the
  2026-07-28 revision: ``book`` asks during its call (``input_required``, answered inside the
  call), ``order`` asks while it runs as a task (answered with ``tasks/update``);
- ``@modelcontextprotocol/server-everything`` (npm, the TypeScript SDK, 2025-11-25): its
  ``trigger-elicitation-request`` sends ``elicitation/create`` beside the call.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RuntimeFactory
from tests.mcp_servers import desk_stdio, everything_stdio
from tests.waiting import eventually
from tidings import (
    InvalidInputError,
    MCPServer,
    Profile,
    QuestionDecidedError,
    Rule,
    ScriptedModel,
    UnknownConversationError,
    UnknownQuestionError,
)
from tidings.conversations.questions import Question, QuestionConfig
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.tasks.notify import NOTIFICATION_KIND
from tidings.types import Message

DONE = "Done."
DOCS = (Path(__file__).resolve().parents[2] / "docs" / "mcp.md").read_text("utf-8")
TOLD = "Told of its end."
BOOK = "desk.book"
ORDER = "desk.order"


async def runtime(runtimes: RuntimeFactory, server: MCPServer, tool: str,
                  arguments: dict[str, Any], **config: Any) -> Runtime:
    model = ScriptedModel(rules=[
        Rule({"text_equals": "go"}, {"tool_calls": [{"name": tool, "arguments": arguments}]}),
        Rule({"tool_result": tool}, {"text": DONE}),
        Rule({"meta_kind": NOTIFICATION_KIND}, {"text": TOLD}),
    ], default={"text": "ok"})
    return await runtimes(models=[model], config=RuntimeConfig(mcp_servers=(server,), **config))


async def asked(rt: Runtime, tool: str, *, background: bool = False
                ) -> tuple[str, asyncio.Future[Any], Question]:
    """A conversation whose turn called ``tool``, the waiting post, and the question asked."""
    conv = (await rt.create_conversation("alice", Profile(
        model="scripted", tools=(tool,), background=(tool,) if background else ()))
    ).conversation_id
    post = asyncio.ensure_future(rt.post(conv, "go", wait=True))

    async def pending() -> list[Question]:
        if post.done():
            post.result()  # a post that ended without a question fails here, saying why
        return await rt.questions.list(conv, status="pending")

    [question] = await eventually(pending, what="the server's question", within_s=30)
    return conv, post, question


def tool_result(messages: list[Message]) -> Message:
    [result] = [m for m in messages if m.role == "tool"]
    return result


async def test_b15_an_elicitation_during_a_call_is_a_durable_question_answered_once(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    rt = await runtime(runtimes, desk_stdio(tmp_path), BOOK, {"date": "May 1"})
    conv, post, question = await asked(rt, BOOK)
    assert (question.kind, question.asker, question.message) == (
        "elicitation", "mcp:desk", "How many seats on May 1?")
    assert question.run_id is not None
    assert question.task_id is None
    assert question.requested_schema["properties"]["seats"]["type"] == "integer"
    [event] = [e for e in await rt.events(conv) if e.type == "question_asked"]
    assert event.data["question_id"] == question.question_id
    assert not post.done()  # the call waits for a person

    # An answer off the schema changes nothing: the question still waits.
    with pytest.raises(InvalidInputError, match="seats"):
        await rt.questions.answer(conv, question.question_id, action="accept",
                                  content={"seats": "two"}, decided_by="alice")
    assert (await rt.questions.list(conv))[0].status == "pending"

    answered = await rt.questions.answer(conv, question.question_id, action="accept",
                                         content={"seats": 2}, decided_by="alice")
    assert (answered.status, answered.answer, answered.decided_by) == (
        "accepted", {"seats": 2}, "alice")
    answer = await post
    assert (answer.status, answer.reply) == ("completed", DONE)
    result = tool_result(await rt.transcript(conv))
    assert result.content == "booked 2 seats on May 1"

    # Decided once: the same answer again changes nothing; a different one is refused.
    again = await rt.questions.answer(conv, question.question_id, action="accept",
                                      content={"seats": 2}, decided_by="alice")
    assert again.decided_at_us == answered.decided_at_us
    with pytest.raises(QuestionDecidedError):
        await rt.questions.answer(conv, question.question_id, action="decline", decided_by="alice")
    [final] = await rt.questions.list(conv)
    assert final.status == "accepted"
    assert final.delivered_at_us is not None
    assert [e.data["status"] for e in await rt.events(conv)
            if e.type == "question_answered"] == ["accepted"]


async def test_b15_declined_is_an_answer_the_server_hears(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    rt = await runtime(runtimes, desk_stdio(tmp_path), BOOK, {"date": "May 2"})
    conv, post, question = await asked(rt, BOOK)
    with pytest.raises(InvalidInputError):  # a decline carries nothing
        await rt.questions.answer(conv, question.question_id, action="decline",
                                  content={"seats": 1}, decided_by="alice")
    await rt.questions.answer(conv, question.question_id, action="decline", decided_by="alice")
    await post
    result = tool_result(await rt.transcript(conv))
    assert result.content == "not done: the person chose decline"


async def test_b15_a_question_nobody_answers_expires_and_the_server_hears_cancel(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    rt = await runtime(runtimes, desk_stdio(tmp_path), BOOK, {"date": "May 3"},
                       questions=QuestionConfig(ttl=timedelta(seconds=1),
                                                poll=timedelta(milliseconds=50)))
    conv, post, question = await asked(rt, BOOK)
    await post
    result = tool_result(await rt.transcript(conv))
    assert result.content == "not done: the person chose cancel"
    [expired] = await rt.questions.list(conv)
    assert (expired.status, expired.decided_by, expired.answer) == ("expired", None, None)
    with pytest.raises(QuestionDecidedError):  # too late: nothing is decided any more
        await rt.questions.answer(conv, question.question_id, action="accept", content={"seats": 1},
                                  decided_by="alice")


async def test_b15_a_stopped_run_leaves_its_question_expired_never_answered(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    rt = await runtime(runtimes, desk_stdio(tmp_path), BOOK, {"date": "May 4"})
    conv, post, _question = await asked(rt, BOOK)
    await rt.stop(conv, owner="alice")
    answer = await post
    assert answer.status == "stopped"
    [left] = await eventually(lambda: rt.questions.list(conv),
                              lambda qs: qs[0].status != "pending", what="the question expired")
    assert (left.status, left.answer) == ("expired", None)


async def test_b15_only_the_owner_sees_and_answers_a_question(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    rt = await runtime(runtimes, desk_stdio(tmp_path), BOOK, {"date": "May 5"})
    conv, post, question = await asked(rt, BOOK)
    with pytest.raises(UnknownConversationError):  # another's conversation is unknown to one
        await rt.questions.answer(conv, question.question_id, action="decline",
                                  decided_by="mallory", owner="mallory")
    with pytest.raises(UnknownConversationError):
        await rt.questions.list(conv, owner="mallory")
    with pytest.raises(UnknownQuestionError):
        await rt.questions.answer(conv, "qst_unknown", action="decline", decided_by="alice")
    assert (await rt.questions.list(conv))[0].status == "pending"
    await rt.questions.answer(conv, question.question_id, action="cancel", decided_by="alice")
    await post


async def test_b15_a_task_waiting_for_input_asks_and_is_answered_with_tasks_update(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    rt = await runtime(runtimes, desk_stdio(tmp_path), ORDER, {"item": "lamp"})
    conv, post, question = await asked(rt, ORDER, background=True)
    answer = await post  # the turn ended: the task asks on its own
    assert answer.reply == DONE
    [task] = await rt.tasks.list(conv)
    assert (question.task_id, question.run_id) == (task.task_key, None)
    assert question.message == "Where should the lamp go?"
    await rt.questions.answer(conv, question.question_id, action="accept",
                              content={"street": "Elm 1"}, decided_by="alice")

    async def told() -> list[Message]:
        await rt.settle(conv)
        return await rt.transcript(conv)

    messages = await eventually(told, lambda ms: ms[-1].content == TOLD,
                                what="the task's notice", within_s=30)
    [note] = [m for m in messages if m.meta.get("kind") == NOTIFICATION_KIND]
    assert "ordered lamp to Elm 1" in note.content
    assert (await rt.questions.list(conv))[0].status == "accepted"


async def test_b15_a_foreground_task_call_asks_as_the_call(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    rt = await runtime(runtimes, desk_stdio(tmp_path), ORDER, {"item": "desk"})
    conv, post, question = await asked(rt, ORDER)
    assert question.run_id is not None
    assert question.task_id is None
    await rt.questions.answer(conv, question.question_id, action="accept",
                              content={"street": "Oak 2"}, decided_by="alice")
    await post
    assert tool_result(await rt.transcript(conv)).content == "ordered desk to Oak 2"


async def test_b15_core_wire_elicitation_beside_the_call_is_a_question(
    runtimes: RuntimeFactory,
) -> None:
    tool = "everything.trigger-elicitation-request"
    rt = await runtime(runtimes, everything_stdio(), tool, {})
    conv, post, question = await asked(rt, tool)
    assert question.requested_schema["required"] == ["name"]
    with pytest.raises(InvalidInputError, match="name"):
        await rt.questions.answer(conv, question.question_id, action="accept",
                                  content={"check": True}, decided_by="alice")
    await rt.questions.answer(conv, question.question_id, action="accept",
                              content={"name": "Ann", "check": True}, decided_by="alice")
    await post
    result = tool_result(await rt.transcript(conv))
    assert "Name: Ann" in result.content


async def test_b15_the_docs_answer_example_answers_the_pending_question(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    section = DOCS.split("\n## When a server asks\n", 1)[1].split("\n## ", 1)[0]
    [example] = [part.split("```", 1)[0] for part in section.split("```python\n")[1:]]
    rt = await runtime(runtimes, desk_stdio(tmp_path), BOOK, {"date": "May 6"})
    conv, post, _ = await asked(rt, BOOK)
    code = "async def example(rt, conv):\n" + "".join(f"    {line}\n"
                                                     for line in example.splitlines())
    scope: dict[str, Any] = {}
    exec(compile(code, "docs/mcp.md", "exec"), scope)
    await scope["example"](rt, conv)
    await post
    assert tool_result(await rt.transcript(conv)).content == "booked 2 seats on May 6"
