"""Traces: with OpenTelemetry installed, a turn, each model call, each tool call and each
background task is a span with the conversation and run ids; a failure is an error span; a
broken tracer never breaks a turn; and without OpenTelemetry nothing of it is imported.

Each test gives its runtime a provider of its own (``RuntimeConfig.tracer_provider``) that
exports to memory, so no global state is shared between tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from tests.conftest import Backend, RuntimeFactory
from tests.crash.helpers import wait_instance_released
from tests.waiting import eventually, wait_until
from tidings.errors import ModelError, ModelErrorKind
from tidings.models.base import DeltaCallback, ModelReply, ModelRequest
from tidings.models.scripted import Rule, ScriptedModel
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.tools.registry import Tool
from tidings.turns.plan import TurnConfig
from tidings.types import Profile, Run, RunStatus, ToolContext


@dataclass
class Traces:
    """A provider for one test, and the spans it has ended."""

    provider: TracerProvider
    exporter: InMemorySpanExporter

    def ended(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.ended() if s.name.startswith(prefix)]

    def of_run(self, run: Run) -> ReadableSpan:
        [turn] = [s for s in self.named("tidings.turn") if attrs(s)["tidings.run_id"] == run.run_id]
        return turn

    def children(self, parent: ReadableSpan, prefix: str = "") -> list[ReadableSpan]:
        return [s for s in self.ended() if s.parent is not None
                and s.parent.span_id == parent.context.span_id and s.name.startswith(prefix)]


@pytest.fixture
def traces() -> Iterator[Traces]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield Traces(provider, exporter)
    provider.shutdown()


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def has(span: ReadableSpan, expected: Mapping[str, Any]) -> None:
    """The span carries these attributes, with these values."""
    got = attrs(span)
    wrong = {k: v for k, v in expected.items() if got.get(k) != v}
    assert not wrong, f"{span.name}: expected {wrong}, has {got}"


def config(traces: Traces, **turns: Any) -> RuntimeConfig:
    return RuntimeConfig(tracer_provider=traces.provider, turns=TurnConfig(**turns))


class Counted:
    """The scripted model, reporting token counts the way an SDK adapter does."""

    name = "scripted"

    def __init__(self, inner: ScriptedModel) -> None:
        self.inner = inner

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        reply = await self.inner.complete(request, on_delta=on_delta)
        return replace(reply, model="scripted-2025", input_tokens=100 + len(request.messages),
                       output_tokens=7, stop_reason="end_turn")


class FlakyOnce:
    """Fails its first call as retryable (a rate limit), then answers."""

    name = "flaky"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        self.calls += 1
        if self.calls == 1:
            raise ModelError(ModelErrorKind.RETRYABLE, "rate limited", model=self.name)
        return ModelReply("fine now", model=self.name, input_tokens=3, output_tokens=2)


async def settled_runs(rt: Runtime, conv: str, count: int) -> list[Run]:
    async def probe() -> list[Run]:
        await rt.settle(conv)
        return await rt.runs.list(conv)

    return await eventually(
        probe, lambda runs: len(runs) >= count and all(r.status.ended for r in runs),
        what=f"{count} ended runs",
    )


async def test_b10_turn_model_calls_tool_call_and_background_task_form_one_trace(
    runtimes: RuntimeFactory, traces: Traces, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    model = Counted(ScriptedModel(rules=[
        Rule({"text_contains": "build"}, {"tool_calls": [{"name": "shell", "arguments": {
            "command": f"while [ ! -e {go} ]; do sleep 0.02; done; echo built",
            "background": True}}]}),
        Rule({"meta_kind": "task_notification"}, {"text": "The build finished."}),
        Rule({"tool_result": "shell"}, {"text": "Started; I will report back."}),
    ]))
    rt = await runtimes(models=[model], config=config(traces))
    conv = (await rt.create_conversation("alice", Profile(model="scripted", tools=("shell",)))
            ).conversation_id
    await rt.post(conv, "build it in the background")
    [first] = await settled_runs(rt, conv, 1)
    await wait_until(lambda: traces.named("tidings.turn"), what="the turn's span ended")

    turn = traces.of_run(first)
    assert turn.parent is None  # a turn is the root of its own trace
    has(turn, {
        "tidings.conversation_id": conv, "tidings.run_id": first.run_id,
        "tidings.turn.trigger": "person", "tidings.run.status": "completed",
    })
    assert turn.status.status_code is StatusCode.UNSET

    # Two model calls: the one that asked for the tool, the one that answered after it.
    calls = traces.children(turn, "chat ")
    assert len(calls) == 2
    for call in calls:
        assert call.name == "chat scripted"
        has(call, {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "scripted",
            "gen_ai.response.model": "scripted-2025", "gen_ai.usage.output_tokens": 7,
            "gen_ai.response.finish_reasons": ("end_turn",),
            "tidings.conversation_id": conv, "tidings.run_id": first.run_id,
        })
        assert attrs(call)["gen_ai.usage.input_tokens"] > 100
        assert call.status.status_code is StatusCode.UNSET

    [shell] = traces.children(turn, "execute_tool")
    [task] = await rt.tasks.list(conv)
    [result] = [m for m in await rt.transcript(conv) if m.role == "tool"]
    assert shell.name == "execute_tool shell"
    has(shell, {
        "gen_ai.tool.name": "shell", "gen_ai.tool.call.id": result.tool_call_id,
        "tidings.task_key": task.task_key, "tidings.conversation_id": conv,
        "tidings.run_id": first.run_id,
    })

    # The task's process still runs after its turn ended: its span is still open.
    assert traces.named("tidings.task") == []
    go.touch()
    await wait_until(lambda: traces.named("tidings.task"), what="the task's span ended")
    [task_span] = traces.named("tidings.task")
    assert task_span.parent is not None
    assert task_span.parent.span_id == shell.context.span_id  # started by that tool call
    assert task_span.context.trace_id == turn.context.trace_id
    has(task_span, {
        "tidings.task_key": task.task_key, "tidings.conversation_id": conv,
        "tidings.run_id": first.run_id, "tidings.task.state": "exited",
        "process.exit.code": 0,
    })
    assert task_span.status.status_code is StatusCode.UNSET
    assert (task_span.end_time or 0) > (turn.end_time or 0)

    # The task's end woke a turn: a trace of its own, with its own run id.
    [_, woken] = await settled_runs(rt, conv, 2)
    await wait_until(lambda: len(traces.named("tidings.turn")) == 2, what="the woken turn")
    woken_span = traces.of_run(woken)
    assert woken_span.parent is None
    assert attrs(woken_span)["tidings.turn.trigger"] == "wake"
    assert woken_span.context.trace_id != turn.context.trace_id
    [woken_call] = traces.children(woken_span, "chat ")
    assert attrs(woken_call)["tidings.run_id"] == woken.run_id


async def test_b10_failed_model_calls_are_error_spans(
    runtimes: RuntimeFactory, traces: Traces
) -> None:
    flaky = FlakyOnce()
    broken = ScriptedModel(name="broken", default={"error": "permanent"})
    rt = await runtimes(models=[flaky, broken],
                        config=config(traces, retry_base=timedelta(milliseconds=1)))

    # A retryable failure, then an answer: two spans of the same model, the first an error.
    conv = (await rt.create_conversation("alice", Profile(model="flaky"))).conversation_id
    await rt.post(conv, "hello")
    [run] = await settled_runs(rt, conv, 1)
    assert run.status is RunStatus.COMPLETED
    await wait_until(lambda: traces.named("tidings.turn"), what="the turn's span ended")
    turn = traces.of_run(run)
    failed, answered = sorted(traces.children(turn, "chat "),
                              key=lambda s: attrs(s)["tidings.model.attempt"])
    assert failed.status.status_code is StatusCode.ERROR
    assert "rate limited" in (failed.status.description or "")
    assert attrs(failed)["error.type"] == "retryable"
    assert [e.name for e in failed.events] == ["exception"]
    assert answered.status.status_code is StatusCode.UNSET
    assert attrs(answered)["gen_ai.usage.input_tokens"] == 3
    assert turn.status.status_code is StatusCode.UNSET

    # A permanent failure fails the run: the model call and the turn are errors.
    other = (await rt.create_conversation("bob", Profile(model="broken"))).conversation_id
    await rt.post(other, "hello")
    [failed_run] = await settled_runs(rt, other, 1)
    assert failed_run.status is RunStatus.FAILED
    await wait_until(lambda: len(traces.named("tidings.turn")) == 2, what="the failed turn")
    failed_turn = traces.of_run(failed_run)
    [call] = traces.children(failed_turn, "chat broken")
    assert call.status.status_code is StatusCode.ERROR
    assert attrs(call)["error.type"] == "permanent"
    assert failed_turn.status.status_code is StatusCode.ERROR
    assert attrs(failed_turn)["tidings.run.status"] == "failed"
    assert attrs(failed_turn)["tidings.run.failure_code"] == failed_run.failure_code


async def test_b10_failed_tool_call_is_an_error_span(
    runtimes: RuntimeFactory, traces: Traces
) -> None:
    async def explode(context: ToolContext, arguments: Mapping[str, Any]) -> str:
        raise RuntimeError("the disk is on fire")

    model = ScriptedModel(rules=[
        Rule({"text_contains": "try"}, {"tool_calls": [{"name": "explode", "arguments": {}}]}),
        Rule({"tool_result": "explode"}, {"text": "That failed."}),
    ])
    rt = await runtimes(models=[model], tools=[Tool("explode", "Fails.", explode)],
                        config=config(traces))
    conv = (await rt.create_conversation("alice", Profile(model="scripted", tools=("explode",)))
            ).conversation_id
    await rt.post(conv, "try it")
    [run] = await settled_runs(rt, conv, 1)
    assert run.status is RunStatus.COMPLETED  # a tool's failure is its result, not the turn's
    await wait_until(lambda: traces.named("tidings.turn"), what="the turn's span ended")
    [tool] = traces.children(traces.of_run(run), "execute_tool explode")
    assert tool.status.status_code is StatusCode.ERROR
    assert "the disk is on fire" in (tool.status.description or "")
    assert attrs(tool)["error.type"] == "tool_error"


class Exploding:
    """A tracer provider whose every tracer, span and method raises."""

    def get_tracer(self, name: str, /) -> Any:
        return self

    def start_span(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("kind") is not None and str(kwargs["kind"]).endswith("CLIENT"):
            return self  # a span whose every method raises
        raise RuntimeError("tracer down")

    def __getattr__(self, name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> None:
            raise RuntimeError(f"span.{name} down")
        return fail


async def test_b10_a_broken_tracer_never_breaks_a_turn(
    runtimes: RuntimeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    model = ScriptedModel(rules=[
        Rule({"text_contains": "list"}, {"tool_calls": [{"name": "shell", "arguments": {
            "command": "echo a b c"}}]}),
        Rule({"tool_result": "shell"}, {"text": "Listed."}),
    ])
    rt = await runtimes(models=[model], config=RuntimeConfig(tracer_provider=Exploding()))
    conv = (await rt.create_conversation("alice", Profile(model="scripted", tools=("shell",)))
            ).conversation_id
    with caplog.at_level("WARNING", logger="tidings.tracing"):
        await rt.post(conv, "list files")
        [run] = await settled_runs(rt, conv, 1)
    assert run.status is RunStatus.COMPLETED
    messages = await rt.transcript(conv)
    assert messages[-1].content == "Listed."
    assert "exit 0" in next(m.content for m in messages if m.role == "tool")
    assert any("tracing failed" in r.getMessage() for r in caplog.records)


NO_OTEL = """
import asyncio, importlib.abc, json, sys

class NoOpenTelemetry(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError(f"{name} is not installed here")
        return None

sys.meta_path.insert(0, NoOpenTelemetry())

from tidings import Profile, Rule, Runtime, ScriptedModel
from tidings.support.tracing import Tracing

MODEL = ScriptedModel(rules=[
    Rule({"text_contains": "list"}, {"tool_calls": [{"name": "shell", "arguments": {
        "command": "echo a b c"}}]}),
    Rule({"tool_result": "shell"}, {"text": "Listed."}),
])

async def main() -> None:
    async with Runtime.open(sys.argv[1], models=[MODEL]) as rt:
        conv = (await rt.create_conversation("alice", Profile(model="scripted", tools=("shell",)))
                ).conversation_id
        await rt.post(conv, "list the files")
        await rt.settle(conv)
        runs = await rt.runs.list(conv)
        messages = await rt.transcript(conv)
        print(json.dumps({
            "statuses": [r.status.value for r in runs],
            "last": messages[-1].content,
            "tracing": rt.tracing.enabled or Tracing().enabled,
            "imported": sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"),
        }))

asyncio.run(main())
"""


async def test_b10_without_opentelemetry_nothing_is_imported_and_turns_work(
    backend: Backend,
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", NO_OTEL, backend.url, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    seen = json.loads(out.decode().strip().splitlines()[-1])
    assert seen == {"statuses": ["completed"], "last": "Listed.", "tracing": False,
                    "imported": []}


KILLED = """
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
        [task] = await rt.tasks.list(conv)
        print(json.dumps({"conversation_id": conv, "instance_id": rt.instance_id,
                          "task_key": task.task_key, "run_id": task.run_id}), flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_b10_task_lost_with_its_runtime_gets_a_root_span_after_restart(
    backend: Backend, traces: Traces
) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", KILLED, backend.url, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), 60)
        assert line, (await child.stderr.read()).decode() if child.stderr else "no output"
        started = json.loads(line)
    finally:
        with contextlib.suppress(ProcessLookupError):
            child.kill()  # SIGKILL: the span the child started is gone with it
        await child.communicate()
    await wait_instance_released(backend.url, started["instance_id"])

    restarted = ScriptedModel(default={"text": "The deploy's outcome is unknown."})
    async with Runtime.open(backend.url, models=[restarted], config=config(traces)) as rt:
        await wait_until(lambda: traces.named("tidings.task"), what="the lost task's span")
        [task] = traces.named("tidings.task")
        assert task.parent is None
        has(task, {
            "tidings.task_key": started["task_key"],
            "tidings.conversation_id": started["conversation_id"],
            "tidings.run_id": started["run_id"], "tidings.task.state": "lost",
            "error.type": "lost",
        })
        assert task.status.status_code is StatusCode.ERROR
        await settled_runs(rt, started["conversation_id"], 2)


DOCS = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


async def test_b10_the_console_example_of_the_docs_prints_the_spans_of_a_turn(
    backend: Backend, tmp_path: Path
) -> None:
    text = DOCS.read_text("utf-8")
    example = text.split("```python\n", 1)[1].split("```", 1)[0]
    assert 'tidings.open("sqlite:///agent.db"' in example
    example = example.replace("sqlite:///agent.db", backend.url)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", example, cwd=tmp_path, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    printed = out.decode()
    for name in ("tidings.turn", "chat scripted"):
        assert f'"name": "{name}"' in printed, printed
    assert '"service.name": "my-agent"' in printed
