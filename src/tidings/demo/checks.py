"""The demo's summary: the promise checked against what the database holds.

Each check is a pure function over a :class:`~tidings.demo.timeline.Snapshot` (the transcript,
the runs, the task journal and the event journal of one conversation, as the database holds
them) and returns a :class:`Check`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from rich.markup import escape

from tidings.conversations.lifecycle import RESTART_COMPLETED
from tidings.demo.timeline import Snapshot
from tidings.feed import MESSAGE_DELTA
from tidings.mail.child_requests import ChildRequest
from tidings.store import Store, Tx
from tidings.tasks.notify import NOTIFICATION_KIND, Notify, TaskState
from tidings.types import FeedEvent, Input, Message, Origin, StartKind


@dataclass(frozen=True, slots=True)
class Check:
    """One line of the summary: ``ok`` and why."""

    name: str
    ok: bool
    detail: str


def _notes(messages: Iterable[Message]) -> list[Message]:
    return [m for m in messages if m.meta.get("kind") == NOTIFICATION_KIND]


def _owed(view: Snapshot) -> list[str]:
    """Event ids of ended tasks that owe the model one notification."""
    return [
        t.event_id for t in view.tasks
        if t.event_id is not None and t.state is not TaskState.RUNNING
        and t.notify is Notify.ON_EXIT and not t.cancelled and not t.reported_in_tool_result
    ]


def notified_once(view: Snapshot) -> Check:
    counts = Counter(str(m.meta.get("event_id")) for m in _notes(view.messages))
    owed = _owed(view)
    wrong = {e: counts.get(e, 0) for e in owed if counts.get(e, 0) != 1}
    stray = [e for e in counts if e not in owed]
    ok = bool(owed) and not wrong and not stray
    detail = (f"{len(owed)} ended tasks, one notice each"
              if ok else f"counts per event id {wrong or dict(counts)}, unowed {stray}")
    return Check("every ended task notified exactly once", ok, detail)


def placed_after_result(view: Snapshot) -> Check:
    results = {m.tool_call_id: m.seq for m in view.messages if m.role == "tool"}
    tasks = {t.task_key: t for t in view.tasks}
    bad: list[int] = []
    for note in _notes(view.messages):
        task = tasks.get(str(note.meta.get("task_key")))
        result_seq = None if task is None else results.get(task.call_id)
        if result_seq is None or note.seq <= result_seq:
            bad.append(note.seq)
    ok = not bad
    return Check("every notice placed after its task's tool result", ok,
                 "each comes later in the transcript than the result of the call that started "
                 "its task" if ok else f"misplaced notices at messages {bad}")


def through_the_door(view: Snapshot) -> Check:
    notes = _notes(view.messages)
    runs = {r.run_id for r in view.runs}
    bad = [m.seq for m in notes if m.origin is not Origin.TASK_RESULT or m.input_id is None
           or m.run_id not in runs]
    ok = bool(notes) and not bad
    return Check("every notice came in as an input of the conversation", ok,
                 f"{len(notes)} notices, each an input read by a turn that names it" if ok
                 else f"notices that came in some other way at messages {bad or 'none'}")


def never_between_call_and_result(view: Snapshot) -> Check:
    by_seq = {m.seq: m for m in view.messages}
    results = {m.tool_call_id: m.seq for m in view.messages if m.role == "tool"}
    bad: list[int] = []
    for m in view.messages:
        if m.role != "assistant" or not m.tool_calls:
            continue
        last = max((results.get(c["call_id"], m.seq) for c in m.tool_calls), default=m.seq)
        bad.extend(s for s in range(m.seq + 1, last + 1)
                   if s in by_seq and by_seq[s].role != "tool")
    ok = not bad
    return Check("nothing placed between a tool call and its result", ok,
                 "every call is followed directly by its results" if ok
                 else f"messages inside an open call at messages {bad}")


def consumed(view: Snapshot) -> Check:
    delivered = [t for t in view.tasks if t.delivered]
    unhandled = [t.task_key for t in delivered if not t.consumed]
    ok = bool(delivered) and not unhandled
    return Check("every notice handed to the model was read", ok,
                 f"{len(delivered)} handed over, each read by the turn that saw it" if ok
                 else f"handed over but not read: {unhandled or 'none handed over'}")


def build_succeeded(view: Snapshot, task_key: str) -> Check:
    task = next((t for t in view.tasks if t.task_key == task_key), None)
    ok = (task is not None and task.state is TaskState.EXITED and task.exit_code == 0
          and task.consumed)
    return Check("the build's end answered in a woken turn", ok,
                 f"{task_key}: exited 0, its notice read" if ok
                 else f"{task_key}: {task and (task.state.value, task.exit_code)}")


def interrupted_honestly(view: Snapshot, task_key: str, how: str) -> Check:
    task = next((t for t in view.tasks if t.task_key == task_key), None)
    note = next((m for m in _notes(view.messages) if m.meta.get("task_key") == task_key), None)
    ok = (task is not None and task.state in (TaskState.KILLED, TaskState.LOST)
          and note is not None and '"succeeded":false' in note.content)
    state = "missing" if task is None else task.state.value
    return Check(f"the task interrupted by the {how} not recorded as success", ok,
                 f"{task_key}: {state}; its notice says it did not succeed" if ok
                 else f"{task_key}: state {state}, notice {'found' if note else 'missing'}")


def runs_never_overlap(view: Snapshot) -> Check:
    runs = sorted(view.runs, key=lambda r: (r.started_at_us or 0, r.run_id))
    open_runs = [r.run_id for r in runs if not r.status.ended]
    overlaps = [
        (a.run_id, b.run_id) for a, b in pairwise(runs)
        if a.ended_at_us is None or (b.started_at_us or 0) < a.ended_at_us
    ]
    ok = not overlaps and not open_runs
    return Check("no two turns of the conversation overlap in time", ok,
                 f"{len(runs)} turns, each started after the previous one ended" if ok
                 else f"overlapping {overlaps}, still open {open_runs}")


def pairing_intact(view: Snapshot) -> Check:
    calls: dict[str, int] = {}
    for m in view.messages:
        if m.role == "assistant":
            for c in m.tool_calls:
                calls[str(c["call_id"])] = m.seq
    answers = Counter(m.tool_call_id for m in view.messages if m.role == "tool")
    unanswered = [c for c in calls if answers.get(c, 0) != 1]
    orphans = [
        m.seq for m in view.messages
        if m.role == "tool" and calls.get(str(m.tool_call_id), m.seq) >= m.seq
    ]
    ok = not unanswered and not orphans
    return Check("every tool call answered by exactly one result", ok,
                 f"{len(calls)} tool calls, each with exactly one later result" if ok
                 else f"unanswered {unanswered}, results without an earlier call {orphans}")


@dataclass(frozen=True, slots=True)
class RestartRecord:
    """What the database holds about one restart operation."""

    operation_id: str
    operation_state: str | None
    delivery_state: str | None
    delivery_attempts: int


async def restart_record(store: Store, conversation_id: str, operation_id: str) -> RestartRecord:
    """Read the restart operation and its ``restart_completed`` delivery."""

    def read(tx: Tx) -> RestartRecord:
        operation = tx.one("get_operation", operation_id=operation_id)
        # The completing instance publishes under this key (tidings.conversations.lifecycle).
        event = tx.one("event_by_key", conversation_id=conversation_id,
                       idempotency_key=f"restart-completed-{operation_id}")
        states = [] if event is None else tx.all(
            "delivery_states", delivery_ids=[int(event["delivery_id"])])
        return RestartRecord(
            operation_id,
            None if operation is None else str(operation["state"]),
            str(states[0]["state"]) if states else None,
            int(states[0]["attempts"]) if states else 0,
        )

    return await store.read(read)


def restart_completed_once(view: Snapshot, record: RestartRecord, answer: str) -> Check:
    completions = [e for e in view.events if e.type == RESTART_COMPLETED
                   and e.data.get("operation_id") == record.operation_id]
    answers = sum(1 for m in view.messages if m.role == "assistant" and m.content == answer)
    ok = (len(completions) == 1 and record.operation_state == "completed"
          and record.delivery_state == "acknowledged" and record.delivery_attempts == 1
          and answers == 1)
    return Check("the restart completed, and answered exactly once", ok,
                 f"operation {record.operation_id} completed; the conversation was told once, "
                 "on the first try, and one turn answered" if ok
                 else f"{len(completions)} completion(s), operation {record.operation_state}, "
                 f"delivery {record.delivery_state} after {record.delivery_attempts} "
                 f"attempt(s), {answers} answer(s)")


def nothing_replayed(view: Snapshot) -> Check:
    """Interrupted tools are never repeated: tool calls come only from a person's turns, and
    each background call started exactly one task."""
    triggers = {r.run_id: r.trigger for r in view.runs}
    automatic = [m.seq for m in view.messages if m.role == "assistant" and m.tool_calls
                 and m.run_id is not None and triggers.get(m.run_id) is not StartKind.PERSON]
    calls = sum(1 for m in view.messages if m.role == "assistant"
                for c in m.tool_calls if c.get("arguments", {}).get("background"))
    ok = not automatic and calls == len(view.tasks)
    return Check("no tool re-run after a crash or restart", ok,
                 f"{calls} background calls started {len(view.tasks)} tasks; woken turns "
                 "called no tool" if ok
                 else f"tool calls in automatic turns at messages {automatic}; {calls} background "
                 f"calls, {len(view.tasks)} tasks")


def delegated_once_in_one_turn(view: Snapshot, requests: Sequence[ChildRequest],
                               inputs: Sequence[Input]) -> Check:
    """Each child's reply passed on exactly once, both answered in one turn."""
    name = "both children's replies passed on once and answered in one turn"
    mails = [i for i in inputs if i.origin is Origin.CHILD]
    mail_runs = {i.run_id for i in mails}
    mail_turns = [r for r in view.runs if r.trigger is StartKind.MAIL]
    ok = (
        len(requests) == 2 and all(r.relayed for r in requests) and len(mails) == 2
        and sorted(m.task_key or "" for m in mails) == sorted(r.task_key for r in requests)
        and len(mail_turns) == 1 and mail_runs == {mail_turns[0].run_id}
    )
    return Check(name, ok, f"{len(requests)} children asked, {len(mails)} replies came in, "
                           f"{len(mail_turns)} turn read them")


def streamed(events: Sequence[FeedEvent], text: str) -> Check:
    """The answer ``text`` reached a watcher piece by piece before its message committed.

    Over what a watcher saw, not the database: the pieces are never written there."""
    pieces = [e for e in events if e.type == MESSAGE_DELTA]
    commit = next((i for i, e in enumerate(events) if e.type == "message_committed"
                   and e.data["message"]["role"] == "assistant"
                   and e.data["message"]["content"] == text), None)
    built = ""
    for piece in pieces:
        if piece.data["offset"] == len(built):
            built += piece.data["text"]
    ok = (len(pieces) > 1 and commit is not None and built == text
          and all(events.index(p) < commit for p in pieces))
    return Check("an answer streamed to a watcher, then saved whole", ok,
                 f"{len(pieces)} pieces seen before the whole message was saved" if ok
                 else f"{len(pieces)} pieces built {built!r}; committed at {commit}")


def mcp_tool_answered(view: Snapshot, tool: str, answer: str, *, server_ended: bool) -> Check:
    """The model called a tool of an MCP server the runtime ran over stdio; the server's result
    reached the transcript after the call, the answer followed it, and the server's process
    ended with the runtime."""
    calls = [(m.seq, c) for m in view.messages if m.role == "assistant"
             for c in m.tool_calls if c["name"] == tool]
    results = [m for m in view.messages if m.role == "tool" and m.tool_name == tool]
    replies = [m.seq for m in view.messages if m.role == "assistant" and m.content == answer]
    ok = (len(calls) == 1 and len(results) == 1 and len(replies) == 1
          and results[0].tool_call_id == calls[0][1]["call_id"]
          and not results[0].meta.get("is_error") and bool(results[0].meta.get("mcp_server"))
          and calls[0][0] < results[0].seq < replies[0] and server_ended)
    result = results[0].content if results else None
    return Check("a tool of an MCP server called over stdio, its result answered", ok,
                 f"{tool} answered {result!r}; the server's process ended with the runtime"
                 if ok else f"{len(calls)} call(s), results {result!r}, {len(replies)} "
                 f"answer(s), server ended: {server_ended}")


def render(checks: Iterable[Check]) -> list[str]:
    """Rich markup lines: ✓ or ✗, the check, and why."""
    return [
        f"{'[green]✓' if c.ok else '[red]✗'}[/] {escape(c.name)} [dim]— {escape(c.detail)}[/]"
        for c in checks
    ]
