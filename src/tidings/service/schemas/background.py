"""The HTTP bodies of background work: child requests, tasks and result envelopes, converted
explicitly from the runtime's records (re-exported by :mod:`tidings.service.schemas`)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from tidings.mail.child_requests import ChildRequest
from tidings.records.results import Drop, ResultPage, ResultRef
from tidings.tasks.journal import TaskRecord


class ChildRequestOut(BaseModel):
    """A request this conversation opened in a child (a spawn or a send) and its fate."""

    request_id: str
    task_key: str
    kind: str = Field(description="spawn or send")
    child_conversation_id: str
    run_public_id: str = Field(description="The run whose call opened it.")
    state: str = Field(description="open, replied or cancelled")
    reply_status: str | None
    relayed: bool = Field(description="Relayed as child mail, or consumed in its run.")
    owner_run: str | None = Field(description="A turn-owned spawn: the run it settles in.")
    consumed_in_run: str | None
    agent: str | None = Field(
        default=None, description="A remote child: the remote A2A agent answering it "
        "(its child conversation is only its handle); null for a local child.")
    remote_task_id: str | None = Field(
        default=None, description="A remote child: the agent's task, once the brief was "
        "answered.")
    remote_state: str | None = Field(
        default=None, description="A remote child: its task's A2A state as last seen "
        "(submitted, working, input-required, completed, failed, canceled, rejected; unknown "
        "when lost).")

    @classmethod
    def of(cls, r: ChildRequest) -> ChildRequestOut:
        return cls(
            request_id=r.request_id, task_key=r.task_key, kind=r.kind,
            child_conversation_id=r.child_conversation_id, run_public_id=r.run_public_id,
            state=r.state, reply_status=r.reply_status, relayed=r.relayed,
            owner_run=r.owner_run, consumed_in_run=r.consumed_in_run, agent=r.agent,
            remote_task_id=r.remote_task_id, remote_state=r.remote_state,
        )


class ChildRequestList(BaseModel):
    items: list[ChildRequestOut] = Field(description="Oldest first.")


class CancelledRequestOut(BaseModel):
    task_key: str
    child_conversation_id: str


class ChildCancelled(BaseModel):
    """What a cancel owed to no one any more: the request, then what lay below it."""

    cancelled: list[CancelledRequestOut]


class MCPTaskOut(BaseModel):
    """An MCP server's task: the server, its tool, and the id the server gave the task."""

    server: str
    tool: str
    task_id: str


class TaskOut(BaseModel):
    """A task's facts; the output excerpt is untrusted text (invalid UTF-8 replaced)."""

    task_key: str
    conversation_id: str
    run_id: str | None
    call_id: str | None
    command: str
    notify: str
    lifetime: str
    state: str
    exit_code: int | None
    signal: str | None
    event_id: str | None
    committed: bool
    handed_off: bool
    delivered: bool
    consumed: bool
    cancelled: bool
    reported_in_tool_result: bool
    continuation_error: str | None
    result_id: str | None
    stdout_bytes: int
    stderr_bytes: int
    excerpt: str
    excerpt_truncated: bool
    duration_ms: int | None
    started_at_us: int
    ended_at_us: int | None
    mcp: MCPTaskOut | None = Field(
        default=None, description="Where the task runs when an MCP server runs it.")

    @classmethod
    def of(cls, t: TaskRecord) -> TaskOut:
        return cls(
            task_key=t.task_key, conversation_id=t.conversation_id, run_id=t.run_id,
            call_id=t.call_id, command=t.command, notify=t.notify.value, lifetime=t.lifetime,
            state=t.state.value, exit_code=t.exit_code, signal=t.signal, event_id=t.event_id,
            committed=t.committed, handed_off=t.handed_off, delivered=t.delivered,
            consumed=t.consumed, cancelled=t.cancelled,
            reported_in_tool_result=t.reported_in_tool_result,
            continuation_error=t.continuation_error, result_id=t.result_id,
            stdout_bytes=t.stdout_bytes, stderr_bytes=t.stderr_bytes,
            excerpt=t.excerpt.decode("utf-8", "replace"), excerpt_truncated=t.excerpt_truncated,
            duration_ms=t.duration_ms, started_at_us=t.started_at_us, ended_at_us=t.ended_at_us,
            mcp=None if t.mcp_server is None else MCPTaskOut(
                server=t.mcp_server, tool=t.mcp_tool or "", task_id=t.mcp_task_id or ""),
        )


class TaskPage(BaseModel):
    items: list[TaskOut] = Field(description="Newest first.")
    next_before_us: int | None = Field(
        description="Pass as ?before_us= for the next page; null at the end."
    )


class DropOut(BaseModel):
    """Bytes ``[from_byte, to_byte)`` of one stream that the result could not keep."""

    stream: str
    from_byte: int
    to_byte: int
    dropped_bytes: int
    statement: str

    @classmethod
    def of(cls, d: Drop) -> DropOut:
        return cls(stream=d.stream, from_byte=d.from_byte, to_byte=d.to_byte,
                   dropped_bytes=d.dropped_bytes, statement=d.statement())


class ResultRefOut(BaseModel):
    result_id: str
    conversation_id: str
    lifetime: str = Field(description="durable (until expires_at_us) or process_local.")
    status: str = Field(description="stored (whole), truncated (see dropped) or failed.")
    size_bytes: int
    expires_at_us: int | None
    failure_code: str | None
    task_key: str | None
    dropped: list[DropOut] = Field(
        default_factory=list, description="What the result is missing; empty when whole.")

    @classmethod
    def of(cls, r: ResultRef) -> ResultRefOut:
        return cls(
            result_id=r.result_id, conversation_id=r.conversation_id, lifetime=r.lifetime.value,
            status=r.status, size_bytes=r.size_bytes, expires_at_us=r.expires_at_us,
            failure_code=r.failure_code, task_key=r.task_key,
            dropped=[DropOut.of(d) for d in r.dropped],
        )


class ResultList(BaseModel):
    items: list[ResultRefOut]
    next_after: str | None


class ResultPageOut(BaseModel):
    """Bytes ``[offset, next_offset)`` of the result, as text; never splits a code point."""

    result_id: str
    offset: int
    next_offset: int | None = Field(description="null on the last page.")
    size_bytes: int
    text: str
    status: str = Field(default="stored",
                        description="stored (whole) or truncated (see dropped).")
    dropped: list[DropOut] = Field(
        default_factory=list, description="What the whole result is missing.")

    @classmethod
    def of(cls, p: ResultPage) -> ResultPageOut:
        return cls(result_id=p.result_id, offset=p.offset, next_offset=p.next_offset,
                   size_bytes=p.size_bytes, text=p.text, status=p.status,
                   dropped=[DropOut.of(d) for d in p.dropped])
