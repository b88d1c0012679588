"""Built-in tools over tasks and results (A5): ``task_status``, ``wait``, ``task_output``,
``tool_result_get``, ``tool_result_list``.

A tool result that shows a task's terminal state to the model carries ``reported_task_key`` in
its meta; the turn marks the task reported in the unit that commits that result, so no
completion notification follows for it (T8) -- so that result also states what the task's
stored output had to drop, if anything (R1). Pages are sized so that the whole page, as the
tool's JSON result, fits what the model reads of a tool result; a page of a truncated result
says what the result is missing. Reading never starts work (R4), and every read is scoped to the
calling conversation (R2).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from tidings.errors import InvalidInputError, UnknownResultError
from tidings.mail.child_requests import CHILD_TASK_PREFIX, request_from_row
from tidings.records.results import Results, dropped_from
from tidings.store import Store
from tidings.tasks.journal import TaskRecord, task_from_row
from tidings.tasks.notify import TaskState
from tidings.tools.registry import TOOL_RESULT_LIMIT, Tool, ToolContext, ToolOutput

MAX_WAIT_S = 60.0
_POLL_S = 0.05
PAGE_LIMIT_BYTES = 48 * 1024
"""The default and largest page a tool reads; smaller when escaping would not fit the page in
a tool result (:data:`TOOL_RESULT_LIMIT`)."""
_MIN_PAGE_BYTES = 4


def _key(arguments: Mapping[str, Any], name: str = "task_key") -> str:
    value = arguments.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"{name} must be a non-empty string")
    return value


def _facts(task: TaskRecord) -> dict[str, Any]:
    mcp = None if task.mcp_server is None else {
        "server": task.mcp_server, "tool": task.mcp_tool, "task_id": task.mcp_task_id}
    return {
        "task_key": task.task_key,
        "state": task.state.value,
        "succeeded": task.state is TaskState.EXITED and task.exit_code == 0,
        "exit_code": task.exit_code,
        "signal": task.signal,
        "duration_ms": task.duration_ms,
        "stdout_bytes": task.stdout_bytes,
        "stderr_bytes": task.stderr_bytes,
        "result_id": task.result_id,
    } | ({} if mcp is None else {"mcp_task": mcp})


def task_tools(store: Store, results: Callable[[], Results | None]) -> list[Tool]:
    async def read_task(context: ToolContext, task_key: str) -> TaskRecord:
        row = await store.read(lambda tx: tx.one(
            "get_task", conversation_id=context.conversation_id, task_key=task_key))
        if row is None:
            raise InvalidInputError(f"no task {task_key!r} in this conversation")
        return task_from_row(row)

    async def report(task: TaskRecord) -> ToolOutput:
        meta: dict[str, Any] = {}
        facts = _facts(task)
        if task.state.terminal:
            meta["reported_task_key"] = task.task_key
            # This result may be all the model hears of the end (no notice follows): it says
            # what the stored output lacks, as a notice would.
            result_id = task.result_id
            if result_id is not None and task.excerpt_truncated:
                dropped = await store.read(lambda tx: dropped_from(tx, result_id))
                if dropped:
                    facts["output_dropped"] = [
                        f"the stored result {d.statement()}" for d in dropped
                    ]
        return ToolOutput(json.dumps(facts), meta=meta)

    async def task_status(context: ToolContext, arguments: Mapping[str, Any]) -> ToolOutput:
        return await report(await read_task(context, _key(arguments)))

    async def wait_child(context: ToolContext, task_key: str, deadline: float) -> ToolOutput:
        """A child's reply, observed: the wait consumes nothing, the reply's mail still comes
        (M17). The exception is the first report of a turn-owned spawn of this very run: the
        open wait receives it, once, and the run's reply does not get it again (M16)."""
        while True:
            row = await store.read(lambda tx: tx.one(
                "child_request_by_key", parent_conversation_id=context.conversation_id,
                task_key=task_key))
            if row is None:
                raise InvalidInputError(f"no task {task_key!r} in this conversation")
            request = request_from_row(row)
            if request.state != "open" or time.monotonic() >= deadline:
                break
            await asyncio.sleep(_POLL_S)
        facts = {
            "task_key": task_key, "child_conversation_id": request.child_conversation_id,
            "state": request.state, "status": request.reply_status, "reply": request.reply,
        }
        meta: dict[str, Any] = {"task_key": task_key}
        if request.owner_run == context.run_id and request.state == "replied":
            if request.consumed_in_run is not None:
                facts["reply"] = None
                facts["note"] = "received already in this turn"
            else:
                meta["consume_child_request"] = request.request_id
        return ToolOutput(json.dumps(facts), meta=meta)

    async def wait(context: ToolContext, arguments: Mapping[str, Any]) -> ToolOutput:
        task_key = _key(arguments)
        timeout = arguments.get("timeout_s", 30)
        if not isinstance(timeout, int | float) or not 0 <= timeout <= MAX_WAIT_S:
            raise InvalidInputError(f"timeout_s must be between 0 and {MAX_WAIT_S:.0f}")
        deadline = time.monotonic() + float(timeout)
        if task_key.startswith(CHILD_TASK_PREFIX):
            return await wait_child(context, task_key, deadline)
        while True:
            task = await read_task(context, task_key)
            if task.state.terminal or time.monotonic() >= deadline:
                return await report(task)
            await asyncio.sleep(_POLL_S)

    def need_results() -> Results:
        opened = results()
        if opened is None:
            raise InvalidInputError("results are not available: no master key is configured")
        return opened

    async def page(context: ToolContext, result_id: str, arguments: Mapping[str, Any]
                   ) -> ToolOutput:
        offset = arguments.get("offset", 0)
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise InvalidInputError("offset must be an integer")
        limit = arguments.get("limit_bytes", PAGE_LIMIT_BYTES)
        if (not isinstance(limit, int) or isinstance(limit, bool)
                or not _MIN_PAGE_BYTES <= limit <= PAGE_LIMIT_BYTES):
            raise InvalidInputError(
                f"limit_bytes must be between {_MIN_PAGE_BYTES} and {PAGE_LIMIT_BYTES}")
        opened = need_results()
        while True:
            try:
                found = await opened.page(context.conversation_id, result_id, offset=offset,
                                          limit_bytes=limit)
            except UnknownResultError:
                return ToolOutput(f"no result {result_id!r}", is_error=True)
            body: dict[str, Any] = {
                "result_id": found.result_id, "status": found.status, "offset": found.offset,
                "next_offset": found.next_offset, "size_bytes": found.size_bytes,
            }
            if found.dropped:
                body["dropped"] = [d.statement() for d in found.dropped]
            body["text"] = found.text
            content = json.dumps(body, ensure_ascii=False)
            size = len(content.encode("utf-8"))
            if size <= TOOL_RESULT_LIMIT or limit <= _MIN_PAGE_BYTES:
                return ToolOutput(content)
            # Escaping grew the page past what the model reads: a smaller page, never a cut one.
            limit = max(_MIN_PAGE_BYTES, limit * (TOOL_RESULT_LIMIT - 1024) // size)

    async def task_output(context: ToolContext, arguments: Mapping[str, Any]) -> ToolOutput:
        task = await read_task(context, _key(arguments))
        if task.result_id is None:
            return ToolOutput(json.dumps({"task_key": task.task_key, "state": task.state.value,
                                          "output": None}))
        return await page(context, task.result_id, arguments)

    async def tool_result_get(context: ToolContext, arguments: Mapping[str, Any]) -> ToolOutput:
        return await page(context, _key(arguments, "result_id"), arguments)

    async def tool_result_list(context: ToolContext, arguments: Mapping[str, Any]
                               ) -> ToolOutput:
        refs = await need_results().list(context.conversation_id)
        return ToolOutput(json.dumps([
            {"result_id": r.result_id, "task_key": r.task_key, "status": r.status,
             "size_bytes": r.size_bytes, "lifetime": r.lifetime.value,
             "expires_at_us": r.expires_at_us}
            | ({"dropped": [d.statement() for d in r.dropped]} if r.dropped else {})
            for r in refs
        ]))

    key_schema = {"type": "object", "properties": {"task_key": {"type": "string"}},
                  "required": ["task_key"]}
    return [
        Tool("task_status", "The state of a background task.", task_status,
             parameters=key_schema, read_only=True),
        Tool("wait", "Wait (at most timeout_s, 60 at most) for a background task to end, or "
             "for a child conversation's reply (observed, not consumed).",
             wait, parameters={"type": "object", "properties": {
                 "task_key": {"type": "string"}, "timeout_s": {"type": "number"}},
                 "required": ["task_key"]}, read_only=True),
        Tool("task_output", "A page of a background task's output (stdout, then stderr after "
             "a [stderr] line); pass next_offset as offset for the next page.", task_output,
             parameters={"type": "object", "properties": {
                 "task_key": {"type": "string"}, "offset": {"type": "integer"},
                 "limit_bytes": {"type": "integer"}},
                 "required": ["task_key"]}, read_only=True),
        Tool("tool_result_get", "A page of a stored result; pass next_offset as offset for "
             "the next page.", tool_result_get,
             parameters={"type": "object", "properties": {
                 "result_id": {"type": "string"}, "offset": {"type": "integer"},
                 "limit_bytes": {"type": "integer"}},
                 "required": ["result_id"]}, read_only=True),
        Tool("tool_result_list", "This conversation's stored results.", tool_result_list,
             read_only=True),
    ]
