"""B3 through the runtime: a scripted model calls ``@tidings.tool`` functions. Good arguments
reach the function and its result the transcript; bad ones reach the model as a typed error
naming the fields and the function is not called; the flags and the context take effect."""

from __future__ import annotations

import json
import threading
from typing import Annotated, Any

import pytest

import tidings
from tests.conftest import RuntimeFactory
from tests.scenarios.test_approvals import held
from tests.scenarios.test_tasks import wait_for_runs
from tidings import InvalidInputError, Message, Profile, Rule, ScriptedModel, ToolContext
from tidings.models.base import DeltaCallback, ModelReply, ModelRequest, ToolSpec
from tidings.runtime.root import Runtime
from tidings.types import ConversationId, RunId


class Weather:
    """A decorated tool that records every call it gets, sync or async."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.threads: list[str] = []

    def sync(self) -> tidings.Tool:
        @tidings.tool
        def weather(city: Annotated[str, "The city"], days: int = 1,
                    ctx: ToolContext | None = None) -> dict[str, Any]:
            """The weather in a city."""
            self.calls.append({"city": city, "days": days})
            self.threads.append(threading.current_thread().name)
            assert ctx is not None
            return {"city": city, "sky": "clear", "days": days, "conversation": ctx.conversation_id,
                    "run": ctx.run_id, "call": ctx.call_id}

        return weather

    def asynchronous(self) -> tidings.Tool:
        @tidings.tool
        async def weather(city: str, days: int = 1, *, ctx: ToolContext) -> str:
            """The weather in a city."""
            self.calls.append({"city": city, "days": days})
            return json.dumps({"city": city, "sky": "clear", "days": days,
                               "conversation": ctx.conversation_id, "run": ctx.run_id,
                               "call": ctx.call_id})

        return weather


def model(arguments: dict[str, Any]) -> ScriptedModel:
    """Calls ``weather`` with ``arguments`` and answers with what the tool returned."""
    return ScriptedModel([
        Rule({"tool_result": "weather"}, {"echo": True}),
        Rule({"text_contains": "weather"},
             {"tool_calls": [{"name": "weather", "arguments": arguments}]}),
    ], default={"text": "ok"})


async def turn(rt: Runtime, profile: Profile) -> tuple[str, list[Message]]:
    conv = (await rt.create_conversation("alice", profile)).conversation_id
    await rt.post(conv, "the weather please", wait=True)
    await wait_for_runs(rt, conv, 1)
    return conv, await rt.transcript(conv)


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_b3_a_typed_tool_gets_its_arguments_and_context_and_its_result_reaches_the_model(
    runtimes: RuntimeFactory, kind: str,
) -> None:
    weather = Weather()
    typed = weather.sync() if kind == "sync" else weather.asynchronous()
    rt = await runtimes(models=[model({"city": "Delft", "days": "2"})], tools=[typed])
    conv, messages = await turn(rt, Profile(model="scripted", tools=("weather",)))
    assert weather.calls == [{"city": "Delft", "days": 2}]  # validated: "2" became 2
    if kind == "sync":
        assert weather.threads != [threading.current_thread().name]  # not on the loop
    call = next(m for m in messages if m.role == "assistant" and m.tool_calls)
    result = next(m for m in messages if m.role == "tool")
    (run,) = await rt.runs.list(conv)
    assert json.loads(result.content) == {
        "city": "Delft", "sky": "clear", "days": 2, "conversation": conv, "run": run.run_id,
        "call": call.tool_calls[0]["call_id"]}
    assert result.meta.get("is_error") is False
    assert messages[-1].role == "assistant"
    assert messages[-1].content == result.content  # the model read the function's result


async def test_b3_invalid_arguments_reach_the_model_as_a_typed_error_and_nothing_runs(
    runtimes: RuntimeFactory,
) -> None:
    weather = Weather()
    rt = await runtimes(models=[model({"town": 42})], tools=[weather.sync()])
    _, messages = await turn(rt, Profile(model="scripted", tools=("weather",)))
    assert weather.calls == []
    result = next(m for m in messages if m.role == "tool")
    assert result.meta.get("is_error") is True
    assert result.meta.get("error") == "invalid_arguments"
    body = json.loads(result.content)
    assert body["error"] == "invalid_arguments"
    assert {tuple(f["loc"]): f["type"] for f in body["fields"]} == {
        ("city",): "missing", ("town",): "extra_forbidden"}
    assert json.loads(messages[-1].content) == body  # what the model was shown


class Recording:
    """The scripted model, keeping the tools each request offered."""

    name = "scripted"

    def __init__(self, inner: ScriptedModel) -> None:
        self.inner = inner
        self.offered: list[tuple[ToolSpec, ...]] = []

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        self.offered.append(request.tools)
        return await self.inner.complete(request, on_delta=on_delta)


async def test_b3_the_model_is_offered_the_schema_built_from_the_signature(
    runtimes: RuntimeFactory,
) -> None:
    recording = Recording(model({"city": "Delft"}))
    rt = await runtimes(models=[recording], tools=[Weather().sync()])
    await turn(rt, Profile(model="scripted", tools=("weather",)))
    (spec,) = recording.offered[0]
    assert (spec.name, spec.description) == ("weather", "The weather in a city.")
    assert spec.parameters == {
        "type": "object", "additionalProperties": False, "required": ["city"],
        "properties": {"city": {"type": "string", "description": "The city"},
                       "days": {"type": "integer", "default": 1}}}  # ctx is not offered


async def test_b3_a_needs_approval_tool_is_held_until_a_person_approves(
    runtimes: RuntimeFactory,
) -> None:
    ran: list[str] = []

    @tidings.tool(needs_approval=True)
    def weather(city: str) -> str:
        """The weather in a city."""
        ran.append(city)
        return f"clear in {city}"

    rt = await runtimes(models=[model({"city": "Delft"})], tools=[weather])
    conv = (await rt.create_conversation("alice", Profile(model="scripted",
                                                          tools=("weather",)))).conversation_id
    answer = await rt.post(conv, "the weather please", wait=True)
    assert answer.status == "awaiting_approval"
    approval = await held(rt, conv)
    assert (approval.tool_name, approval.arguments) == ("weather", {"city": "Delft"})
    assert ran == []
    await rt.approvals.decide(conv, approval.approval_id, approve=True, decided_by="alice")
    await wait_for_runs(rt, conv, 1)
    assert ran == ["Delft"]
    assert (await rt.transcript(conv))[-1].content == "clear in Delft"


async def test_b3_a_read_only_tool_runs_where_writes_need_approval(
    runtimes: RuntimeFactory,
) -> None:
    ran: list[str] = []

    @tidings.tool(read_only=True)
    def weather(city: str) -> str:
        """The weather in a city."""
        ran.append(city)
        return f"clear in {city}"

    rt = await runtimes(models=[model({"city": "Delft"})], tools=[weather])
    _, messages = await turn(rt, Profile(model="scripted", tools=("weather",),
                                         approval_mode="writes"))
    assert ran == ["Delft"]  # no approval asked: it only reads
    assert messages[-1].content == "clear in Delft"
    assert weather.read_only
    writes = rt.tools.get("weather")
    assert writes is not None
    assert writes.read_only


async def test_b3_an_exception_in_the_function_is_the_tool_error_the_model_reads(
    runtimes: RuntimeFactory,
) -> None:
    @tidings.tool
    async def weather(city: str) -> str:
        """The weather in a city."""
        raise LookupError(f"no station near {city}")

    rt = await runtimes(models=[model({"city": "Atlantis"})], tools=[weather])
    _, messages = await turn(rt, Profile(model="scripted", tools=("weather",)))
    result = next(m for m in messages if m.role == "tool")
    assert result.meta.get("is_error") is True
    assert result.content == "error: LookupError: no station near Atlantis"


async def test_b3_a_typed_tool_starts_a_background_task_through_its_context(
    runtimes: RuntimeFactory,
) -> None:
    keys: list[str] = []

    @tidings.tool
    async def build(target: str, ctx: ToolContext) -> str:
        """Build a target in the background."""
        key = await ctx.start_task(["sh", "-c", f"echo built {target}"])
        keys.append(key)
        return f"started {key}"

    model = ScriptedModel([
        Rule({"meta_kind": "task_notification"}, {"text": "The build finished."}),
        Rule({"tool_result": "build"}, {"text": "Started."}),
        Rule({"text_contains": "build"},
             {"tool_calls": [{"name": "build", "arguments": {"target": "docs"}}]}),
    ])
    rt = await runtimes(models=[model], tools=[build])
    conv = (await rt.create_conversation("alice", Profile(model="scripted", tools=("build",)))
            ).conversation_id
    answer = await rt.post(conv, "build the docs", wait=True)
    assert answer.reply == "Started."
    await wait_for_runs(rt, conv, 2)  # the task's end woke a second turn
    (key,) = keys
    messages = await rt.transcript(conv)
    result = next(m for m in messages if m.role == "tool")
    assert result.content == f"started {key}"
    assert result.meta.get("task_key") == key  # the result that committed names the task
    notice = next(m for m in messages if m.meta.get("kind") == "task_notification")
    assert key in notice.content
    assert messages[-1].content == "The build finished."
    (task,) = await rt.tasks.list(conv)
    assert task.task_key == key
    assert task.state.value == "exited"
    assert task.exit_code == 0


async def test_b3_a_context_outside_a_turn_cannot_start_a_task() -> None:
    context = ToolContext(ConversationId("conv_1"), RunId("run_1"), "call_1")
    with pytest.raises(InvalidInputError, match="only in a turn"):
        await context.start_task("true")
