"""Two MCP figures of bench/tools.py, each beside the ``mcp`` SDK's client alone, against the
same server (bench/mcp_task_server.py: FastMCP with ``fastmcp-tasks``).

**A background task, start to notice** (``mcp_task_overhead_ratio``). The server's ``work``
tool runs as a task on the tasks extension's wire; its body sleeps a fixed time (200 ms) and
the server suggests polling every 50 ms. Over stdio, a subprocess of each side:

- tidings: a runtime on SQLite (WAL, a temp folder) with the server declared
  (``task_poll`` 50 ms as well) and a ``ScriptedModel`` that calls ``bench.work`` in the
  background when told ``go``, answers its result, and answers the task's notice. Timed from
  the wall clock just before ``rt.post(conv, "go")`` to the ``at_us`` stamp of the
  ``message_committed`` event of the woken turn's notice message (stamped in the unit that
  commits it, just before its commit): the first turn (the model's call, the task created on
  the server, journalled, its result committed, the turn's reply), the task followed on the
  server, its end recorded, the notice accepted and the woken turn taking it into the
  transcript. The woken turn's reply is timed too (``tidings_reply_*``), not in the ratio.
- the SDK: an ``mcp.Client`` that declares the extension (its one claim: the ``task`` result
  shape) calls ``work`` with ``allow_claimed=True``, then sleeps the server's
  ``pollIntervalMs`` and sends ``tasks/get`` until the task ended (its result inline). Timed
  from the call to the answer that says it ended.

Rounds alternate between the sides (a fresh conversation per tidings round; the woken turn's
reply is awaited untimed before the next round). ``mcp_task_overhead_ratio`` is
p50(tidings) / p50(SDK); the goal is at most 1.3.

**A 2 MiB result over streamable HTTP** (``mcp_large_result_mb_s``). The same server on a
loopback port; ``blob(size=2 MiB)`` returns 2,097,152 bytes of ASCII text. tidings: a runtime
(with a master key, so the result is kept whole as a result envelope) whose scripted model
calls ``big.blob`` when told ``blob``; the time from the end of the model's first step (its
call) to the start of its second (reading the result): the call over HTTP, the result's
mapping, the envelope sealed and committed with the tool message. The envelope is read back
after every round and must hold the whole text, byte for byte. Also timed: the same call
through the connection directly (``rt.mcp["big"].call``), and the SDK's client alone
(``Client`` on ``streamable_http_client`` with the SSE event limit raised as tidings raises
it, since the SDK's default of 1 MiB drops a 2 MiB result). MB/s is 10^6 bytes per second of
the p50 time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import harness  # noqa: F401  (first: it keeps bench/a2a.py from shadowing the a2a package)
from loopback import free_port, listening
from mcp import Client, StdioServerParameters
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, GetTaskRequest, GetTaskRequestParams, Result, TextContent
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict

import tidings
from tidings import MCPServer, Profile, Rule, ScriptedModel
from tidings.models.base import DeltaCallback, ModelReply, ModelRequest
from tidings.records.results import MasterKey
from tidings.runtime.root import Runtime

SERVER = Path(__file__).with_name("mcp_task_server.py")
TASK_GOAL = 1.3
LARGE_GOAL_MB_S = 20.0
WORK_MS = 200
POLL_MS = 50
LARGE_BYTES = 2 * 1024 * 1024
SSE_EVENT_LIMIT = 16 * 1024 * 1024  # what tidings allows one server-sent event
TERMINAL = ("completed", "failed", "cancelled")
NOTIFICATION_KIND = "task_notification"
TOLD = "Told of its end."
ENV = {"BENCH_TASK_WORK_MS": str(WORK_MS), "BENCH_TASK_POLL_MS": str(POLL_MS),
       "FASTMCP_LOG_LEVEL": "ERROR"}


def _now_us() -> int:
    return time.time_ns() // 1000


def _stats(values: Sequence[float], prefix: str) -> dict[str, float]:
    """p50 and p90 in ms."""
    ordered = sorted(values)
    return {f"{prefix}_p50_ms": round(statistics.median(ordered) * 1e3, 2),
            f"{prefix}_p90_ms": round(ordered[min(len(ordered) - 1,
                                                  int(len(ordered) * 0.9))] * 1e3, 2)}


# -- the SDK alone: a client that declares the tasks extension and polls tasks/get ----------


class _Created(Result):
    """The extension's flat ``CreateTaskResult``, kept as it came."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"


class _Raw(Result):
    model_config = ConfigDict(extra="allow")


async def _unresolved(created: _Created, context: ClaimContext) -> CallToolResult:
    raise RuntimeError("called with allow_claimed=True: the task is polled by the bench")


class _BareTasks(ClientExtension):
    """The least a client needs to be given tasks: the extension declared, its result shape."""

    identifier = "io.modelcontextprotocol/tasks"

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=_Created, resolve=_unresolved,
                            protocol_versions=frozenset(MODERN_PROTOCOL_VERSIONS))]


async def _sdk_task(client: Client, label: str) -> float:
    """One task through the SDK: seconds from the call to the answer saying it ended."""
    t0 = time.perf_counter()
    created = await client.session.call_tool("work", {"label": label}, allow_claimed=True)
    if not isinstance(created, _Created):
        raise RuntimeError(f"the server did not run the call as a task: {created!r}")
    task: Mapping[str, Any] = created.model_extra or {}
    task_id = str(task["taskId"])
    while task.get("status") not in TERMINAL:
        await asyncio.sleep(int(task.get("pollIntervalMs") or POLL_MS) / 1000)
        got = await client.session.send_request(
            GetTaskRequest(params=GetTaskRequestParams(task_id=task_id)), _Raw)
        task = got.model_extra or {}
    elapsed = time.perf_counter() - t0
    text = str(task.get("result", {}).get("content", [{}])[0].get("text"))
    if task.get("status") != "completed" or text != f"done {label}":
        raise RuntimeError(f"the SDK's task ended {task.get('status')}: {text!r}")
    return elapsed


# -- tidings: a runtime with the server declared --------------------------------------------


def _task_model() -> ScriptedModel:
    return ScriptedModel(rules=[
        Rule({"meta_kind": NOTIFICATION_KIND}, {"text": TOLD}),
        Rule({"tool_result": "bench.work"}, {"text": "Started."}),
        Rule({"text_equals": "go"}, {"tool_calls": [
            {"name": "bench.work", "arguments": {"label": "tidings"}}]}),
    ], default={"text": "ok"})


def _message(event: Any) -> Mapping[str, Any]:
    message = event.data.get("message")
    return message if isinstance(message, Mapping) else {}


async def _tidings_task(rt: Runtime, profile: Profile) -> dict[str, float]:
    """One background task through a turn: seconds from the post to the notice's commit (and
    to the task's start, and to the woken turn's reply), from the journal's stamps."""
    conv = (await rt.create_conversation("bench", profile)).conversation_id
    feed = rt.watch(conv)
    posted_us = _now_us()
    await rt.post(conv, "go")
    started_us = notice_us = reply_us = 0
    async with asyncio.timeout(60):
        async for event in feed:
            if event.type != "message_committed":
                continue
            message = _message(event)
            if message.get("role") == "tool" and message.get("tool_name") == "bench.work":
                started_us = started_us or event.at_us
            elif message.get("origin") == "task_result":  # the notice, as the model reads it
                notice_us = event.at_us
                if "done tidings" not in str(message.get("content")):
                    raise RuntimeError(f"the task did not end well: {message!r}")
            elif notice_us and message.get("content") == TOLD:
                reply_us = event.at_us
                break
    with contextlib.suppress(Exception):
        await feed.aclose()
    await rt.settle(conv)
    if not (started_us and notice_us and reply_us):
        raise RuntimeError("the task's start, notice or reply was not seen in the feed")
    return {"tidings": (notice_us - posted_us) / 1e6, "started": (started_us - posted_us) / 1e6,
            "reply": (reply_us - posted_us) / 1e6}


@contextlib.asynccontextmanager
async def _scratch() -> AsyncIterator[str]:
    folder = tempfile.mkdtemp(prefix="tidings-bench-mcp-")
    try:
        yield f"sqlite:///{os.path.join(folder, 'mcp.db')}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def measure_task(*, rounds: int = 30, warmup: int = 2) -> dict[str, Any]:
    """p50 and p90 of a background task, start to notice, on each side, and their ratio."""
    server = MCPServer("bench", command=[sys.executable, str(SERVER)], env=ENV,
                       task_poll=timedelta(milliseconds=POLL_MS))
    profile = Profile(model="scripted", tools=("bench.work",), background=("bench.work",))
    samples: dict[str, list[float]] = {"tidings": [], "started": [], "reply": [], "sdk": []}
    async with _scratch() as url, \
            tidings.open(url, models=[_task_model()], mcp_servers=[server]) as rt, \
            Client(StdioServerParameters(command=sys.executable, args=[str(SERVER)],
                                         env=ENV), cache=None,
                   extensions=[_BareTasks()]) as client:
        await client.list_tools()
        for _ in range(warmup):
            await _tidings_task(rt, profile)
            await _sdk_task(client, "warm")
        for r in range(rounds):
            for side in (("tidings", "sdk") if r % 2 == 0 else ("sdk", "tidings")):
                if side == "sdk":
                    samples["sdk"].append(await _sdk_task(client, f"r{r}"))
                else:
                    for key, value in (await _tidings_task(rt, profile)).items():
                        samples[key].append(value)
            print(f"task round {r + 1}/{rounds}", file=sys.stderr)
    figures: dict[str, Any] = {"rounds": rounds, "work_ms": WORK_MS, "poll_ms": POLL_MS}
    for key, values in samples.items():
        figures.update(_stats(values, key))
    ratio = statistics.median(samples["tidings"]) / statistics.median(samples["sdk"])
    return {"mcp_task_overhead_ratio": round(ratio, 3), "goal": TASK_GOAL, "figures": figures}


# -- a 2 MiB result over streamable HTTP ----------------------------------------------------


class _StepClock:
    """The scripted model, with the start and end of each step stamped."""

    def __init__(self, inner: ScriptedModel) -> None:
        self.inner = inner
        self.name = inner.name
        self.starts: list[float] = []
        self.ends: list[float] = []

    async def complete(self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
                       ) -> ModelReply:
        self.starts.append(time.perf_counter())
        try:
            return await self.inner.complete(request, on_delta=on_delta)
        finally:
            self.ends.append(time.perf_counter())


@contextlib.contextmanager
def _http_server() -> Iterator[str]:
    port = free_port()
    with listening([sys.executable, str(SERVER), "--http", str(port)], port, env=ENV,
                   what="the HTTP bench server"):
        yield f"http://127.0.0.1:{port}/mcp"


def _expected() -> str:
    lines = [f"{n:08d} " + "x" * 54 + "\n" for n in range(LARGE_BYTES // 64 + 1)]
    return "".join(lines)[:LARGE_BYTES]


async def _turn_call(rt: Runtime, model: _StepClock, profile: Profile, whole: str
                     ) -> tuple[float, float]:
    """One turn that calls ``big.blob``: seconds from the model's call to its reading the
    result, and the whole turn; the kept result checked whole."""
    conv = (await rt.create_conversation("bench", profile)).conversation_id
    model.starts.clear()
    model.ends.clear()
    t0 = time.perf_counter()
    await rt.post(conv, "blob")
    await rt.settle(conv)
    turn = time.perf_counter() - t0
    [result] = [m for m in await rt.transcript(conv) if m.role == "tool"]
    if result.meta.get("is_error") or "dropped_bytes" in result.meta:
        raise RuntimeError(f"the 2 MiB result did not arrive whole: {result.content[:300]!r}")
    ref, data = await rt.results.get(conv, result.meta["kept_result_id"])
    if ref.size_bytes != LARGE_BYTES or data.decode() != whole:
        raise RuntimeError(f"the kept result is not the 2 MiB sent ({ref.size_bytes} bytes)")
    return model.starts[1] - model.ends[0], turn


async def _direct_call(rt: Runtime, whole: str) -> float:
    t0 = time.perf_counter()
    output = await rt.mcp["big"].call("blob", {"size": LARGE_BYTES})
    elapsed = time.perf_counter() - t0
    if output.is_error or output.content != whole:
        raise RuntimeError(f"the connection's call did not give 2 MiB: {output.content[:300]!r}")
    return elapsed


async def _sdk_call(client: Client, whole: str) -> float:
    t0 = time.perf_counter()
    result = await client.call_tool("blob", {"size": LARGE_BYTES})
    elapsed = time.perf_counter() - t0
    [block] = result.content
    if result.is_error or not isinstance(block, TextContent) or block.text != whole:
        raise RuntimeError("the SDK's call did not give 2 MiB")
    return elapsed


async def measure_large(*, rounds: int = 15, warmup: int = 2) -> dict[str, Any]:
    """MB/s of a 2 MiB result over streamable HTTP: in a turn, through the connection, and
    through the SDK's client alone."""
    whole = _expected()
    model = _StepClock(ScriptedModel(rules=[
        Rule({"tool_result": "big.blob"}, {"text": "Read it."}),
        Rule({"text_equals": "blob"}, {"tool_calls": [
            {"name": "big.blob", "arguments": {"size": LARGE_BYTES}}]}),
    ], default={"text": "ok"}))
    profile = Profile(model=model.name, tools=("big.blob",))
    samples: dict[str, list[float]] = {"turn_call": [], "turn": [], "connection": [], "sdk": []}
    with _http_server() as url:
        async with _scratch() as db, \
                tidings.open(db, models=[model], mcp_servers=[MCPServer("big", url=url)],
                             master_key=MasterKey.generate()) as rt, \
                Client(streamable_http_client(url, max_sse_event_size=SSE_EVENT_LIMIT),
                       cache=None) as client:
            await client.list_tools()
            for _ in range(warmup):
                await _turn_call(rt, model, profile, whole)
                await _direct_call(rt, whole)
                await _sdk_call(client, whole)
            for r in range(rounds):
                call, turn = await _turn_call(rt, model, profile, whole)
                samples["turn_call"].append(call)
                samples["turn"].append(turn)
                samples["connection"].append(await _direct_call(rt, whole))
                samples["sdk"].append(await _sdk_call(client, whole))
                print(f"large round {r + 1}/{rounds}", file=sys.stderr)
    figures: dict[str, Any] = {"rounds": rounds, "bytes": LARGE_BYTES}
    for key, values in samples.items():
        figures.update(_stats(values, key))
        figures[f"{key}_mb_s"] = round(LARGE_BYTES / statistics.median(values) / 1e6, 1)
    return {"mcp_large_result_mb_s": figures["turn_call_mb_s"],
            "mcp_large_result_sdk_mb_s": figures["sdk_mb_s"],
            "mcp_large_result_connection_mb_s": figures["connection_mb_s"],
            "goal_mb_s": LARGE_GOAL_MB_S, "figures": figures}


async def _main(quick: bool) -> None:
    import json
    task = await measure_task(rounds=10 if quick else 30)
    print(json.dumps(task))
    large = await measure_large(rounds=5 if quick else 15)
    print(json.dumps(large))


if __name__ == "__main__":
    asyncio.run(_main("--quick" in sys.argv))
