"""B16: an MCP server's request for a completion (sampling) is answered by the conversation's
model under the server's policy -- ``refuse``, ``ask`` (the default: a person decides first) or
``allow`` -- and its tokens count on the run; roots are the server's declared ones. Every
refusal is a clean MCP error.

Against ``@modelcontextprotocol/server-everything`` (npm, the TypeScript SDK): its
``trigger-sampling-request`` asks the client's model, ``get-roots-list`` asks for the roots;
it offers each only to a client that declares the capability.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.conftest import RuntimeFactory
from tests.mcp_servers import everything_stdio
from tests.waiting import eventually
from tidings import MCPServer, Profile, Rule, ScriptedModel
from tidings.conversations.questions import Question
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.types import Message

SAMPLE = "everything.trigger-sampling-request"
ROOTS = "everything.get-roots-list"
SAMPLED = "The tide turns at noon."
DONE = "Done."


async def runtime(runtimes: RuntimeFactory, server: MCPServer, tool: str,
                  arguments: dict[str, Any]) -> Runtime:
    model = ScriptedModel(rules=[
        Rule({"text_equals": "go"}, {"tool_calls": [{"name": tool, "arguments": arguments}]}),
        Rule({"tool_result": tool}, {"text": DONE}),
        # What the server asks the model: its prompt, as the server wraps it.
        Rule({"text_contains": "when is the tide"},
             {"text": SAMPLED, "usage": {"input_tokens": 7, "output_tokens": 5}}),
    ], default={"text": "?"})
    return await runtimes(models=[model], config=RuntimeConfig(mcp_servers=(server,)))


async def called(rt: Runtime, tool: str) -> tuple[str, asyncio.Future[Any]]:
    conv = (await rt.create_conversation("alice", Profile(model="scripted", tools=(tool,)))
            ).conversation_id
    return conv, asyncio.ensure_future(rt.post(conv, "go", wait=True))


def tool_result(messages: list[Message]) -> Message:
    [result] = [m for m in messages if m.role == "tool"]
    return result


async def asked(rt: Runtime, conv: str) -> Question:
    [question] = await eventually(lambda: rt.questions.list(conv, status="pending"),
                                  what="the person asked first", within_s=30)
    return question


async def test_b16_allow_the_conversations_model_answers_and_its_tokens_count_on_the_run(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtime(runtimes, everything_stdio(sampling="allow"), SAMPLE,
                       {"prompt": "when is the tide?", "maxTokens": 50})
    conv, post = await called(rt, SAMPLE)
    answer = await post
    assert answer.status == "completed"
    result = tool_result(await rt.transcript(conv))
    assert SAMPLED in result.content
    assert '"model": "scripted"' in result.content
    assert await rt.questions.list(conv) == []  # allowed: nobody was asked
    [run] = await rt.runs.list(conv)
    # Two steps of the turn and the server's sampling, each a model call of the run.
    assert run.usage.model_calls == 3
    assert run.usage.input_tokens >= 7
    assert run.usage.output_tokens >= 5


async def test_b16_ask_is_the_default_a_person_lets_the_model_answer(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtime(runtimes, everything_stdio(), SAMPLE, {"prompt": "when is the tide?"})
    conv, post = await called(rt, SAMPLE)
    question = await asked(rt, conv)
    assert (question.kind, question.asker) == ("sampling", "mcp:everything")
    assert "when is the tide?" in question.message
    assert not post.done()
    await rt.questions.answer(conv, question.question_id, action="accept", decided_by="alice")
    await post
    assert SAMPLED in tool_result(await rt.transcript(conv)).content


async def test_b16_ask_declined_is_a_clean_mcp_error_and_the_model_is_not_asked(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtime(runtimes, everything_stdio(sampling="ask"), SAMPLE,
                       {"prompt": "when is the tide?"})
    conv, post = await called(rt, SAMPLE)
    question = await asked(rt, conv)
    await rt.questions.answer(conv, question.question_id, action="decline", decided_by="alice")
    answer = await post
    assert answer.status == "completed"  # the run goes on: the tool's result says why
    result = tool_result(await rt.transcript(conv))
    assert "declined" in result.content
    assert SAMPLED not in result.content
    [run] = await rt.runs.list(conv)
    assert run.usage.model_calls == 2  # only the turn's own steps


async def test_b16_refuse_the_server_is_told_tidings_does_not_sample(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtime(runtimes, everything_stdio(sampling="refuse"), ROOTS, {})
    # The server offers sampling only to a client that declares it: it is not offered here.
    assert SAMPLE not in rt.tools.names()
    assert ROOTS not in rt.tools.names()  # no roots declared: none offered either


async def test_b16_roots_are_the_servers_declared_ones(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    rt = await runtime(runtimes, everything_stdio(roots=[work]), ROOTS, {})
    conv, post = await called(rt, ROOTS)
    await post
    result = tool_result(await rt.transcript(conv)).content
    assert work.as_uri() in result
    assert "1 total" in result
