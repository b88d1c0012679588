"""The history a turn sends is the transcript's newest window, whoever wrote it.

Each process keeps a bounded window cache (read incrementally, extended with what it committed
itself); these tests hold the cache to the database: two runtimes on one database take turns
in one conversation, with a window small enough to slide, and every request must carry exactly
the newest committed messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.conftest import RuntimeFactory
from tidings.models.base import DeltaCallback, ModelReply, ModelRequest, PromptMessage
from tidings.models.scripted import Rule, ScriptedModel
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.tools.registry import Tool, ToolContext
from tidings.turns.context import history_window, prompt_message
from tidings.turns.runner import TurnConfig
from tidings.types import Profile


class Recording:
    """A scripted model that keeps every request it was sent."""

    def __init__(self) -> None:
        self.name = "scripted"
        self.inner = ScriptedModel(
            rules=[Rule({"text_contains": "tool"}, {"tool_calls": [{"name": "echo"}]}),
                   Rule({"tool_result": "echo"}, {"text": "tool done"})],
            default={"echo": True},
        )
        self.requests: list[ModelRequest] = []

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        self.requests.append(request)
        return await self.inner.complete(request, on_delta=on_delta)


async def echo(context: ToolContext, arguments: Mapping[str, Any]) -> str:
    return "echoed"


def _comparable(messages: list[PromptMessage]) -> list[tuple[str, str, str | None]]:
    return [(m.role, m.content, m.tool_call_id) for m in messages]


async def expected_window(rt: Runtime, conv: str, limit: int) -> list[PromptMessage]:
    committed = await rt.transcript(conv)
    return history_window([prompt_message(m) for m in committed[-limit:]])


async def test_c9_history_window_is_exact_across_two_processes(runtimes: RuntimeFactory) -> None:
    limit = 5
    config = RuntimeConfig(turns=TurnConfig(history_messages=limit))
    tools = [Tool("echo", "echo", echo)]
    first_model, second_model = Recording(), Recording()
    first = await runtimes(models=[first_model], tools=tools, config=config)
    second = await runtimes(models=[second_model], tools=tools, config=config)
    conv = (await first.create_conversation(
        "alice", Profile(model="scripted", tools=("echo",))
    )).conversation_id
    texts = ["one", "use the tool", "three", "four", "tool again", "six", "seven", "tool 8"]
    for number, text in enumerate(texts):
        rt, model = (first, first_model) if number % 3 != 1 else (second, second_model)
        before = await expected_window(rt, conv, limit)
        sent_before = len(model.requests)
        await rt.post(conv, text)
        await rt.settle(conv)
        request = model.requests[sent_before]
        # The first request of the turn: the window, then the new input.
        assert _comparable(list(request.messages[:-1])) == _comparable(before), number
        assert request.messages[-1].content == text
    runs = await first.runs.list(conv)
    assert len(runs) == len(texts)
    assert all(r.status.value == "completed" for r in runs)


async def test_c7_compaction_restarts_the_cached_window(runtimes: RuntimeFactory) -> None:
    model = Recording()
    rt = await runtimes(models=[model])
    conv = (await rt.create_conversation("alice", Profile(model="scripted"))).conversation_id
    for text in ("a", "b"):
        await rt.post(conv, text)
        await rt.settle(conv)
    summary_seq = await rt.conversations.compact(conv)
    await rt.post(conv, "after")
    await rt.settle(conv)
    last = model.requests[-1]
    assert [m.content for m in last.messages][-1] == "after"
    assert last.messages[0].meta.get("kind") == "compaction_summary"
    assert len(last.messages) == 2
    assert (await rt.transcript(conv))[summary_seq - 1].meta["kind"] == "compaction_summary"
