"""The crash torture's invariant checker (issues 7 and 13): it reads a database the torture
left -- SQLite file or PostgreSQL -- with every transcript, input, task, child request, run and
delivery in it, and reports each violation with the ids involved.

Each invariant is one function over a :class:`Snapshot`, named after what it checks; a
violation's ``kind`` is that name. ``tests/crash/test_invariants.py`` builds, for each one, a
real database that breaks it on purpose and sees exactly that invariant fire -- a checker that
cannot fail proves nothing.

The checks assume everything settled (the torture's ``drain`` ran): a task still running, a
child request still open or a run still running is itself a violation. The checker trusts no
flag it can check against the transcript: "reported in a tool result", "delivered",
"consumed" and "relayed" are each held against the messages that should show them.

Task notices are found in the transcript (``meta.kind = task_notification``, ``task_key``,
``event_id``), which is where they are whether or not they came through the inputs; inputs of
origin ``task_result`` are checked where they exist (:func:`task_result_input`).

The checker is test code: it reads the tables with plain SQL, no runtime involved.
"""

from __future__ import annotations

import html
import itertools
import json
import sqlite3
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

Row = dict[str, Any]

NOTICE = "task_notification"
"""``meta.kind`` of a task's completion notice."""
KERNEL_ORIGINS = frozenset({"task_result", "child"})


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    ids: tuple[str, ...]
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} {' '.join(self.ids)}: {self.detail}"


# -- reading the database ---------------------------------------------------------------------

QUERIES = {
    "conversations": "SELECT conversation_id, status, queued_inputs FROM conversations",
    "messages": "SELECT conversation_id, seq, role, content, tool_calls, tool_call_id, "
                "tool_name, origin, input_id, meta, run_id FROM messages "
                "ORDER BY conversation_id, seq",
    "inputs": "SELECT input_id, conversation_id, queue_position, origin, kernel, delivery_mode, "
              "content, meta, state, run_id, message_seq, run_public_id, task_key "
              "FROM inputs ORDER BY conversation_id, queue_position",
    "tasks": "SELECT task_id, conversation_id, task_key, run_id, call_id, notify, lifetime, "
             "state, event_id, committed, handed_off, delivered, consumed, cancelled, "
             "reported_in_tool_result, notification_seq FROM tasks",
    "requests": "SELECT c.request_id, c.parent_conversation_id, c.child_conversation_id, "
                "c.input_id, c.task_key, c.kind, c.state, c.reply_status, c.reply, "
                "c.relayed_at_us, o.owner_run, o.consumed_in_run FROM child_requests c "
                "LEFT JOIN turn_owned_requests o ON o.request_id = c.request_id",
    "runs": "SELECT run_id, conversation_id, status, trigger, started_at_us, ended_at_us "
            "FROM runs ORDER BY conversation_id, started_at_us",
    "operations": "SELECT operation_id, kind, state FROM operations",
    "deliveries": "SELECT delivery_id, conversation_id, state, failure_code, lease_owner "
                  "FROM signal_deliveries",
    "queues": "SELECT conversation_id, backlog, dead_letters FROM signal_queues",
    "cancellations": "SELECT conversation_id, data FROM events WHERE type = 'input_cancelled'",
}


def _sqlite_path(url: str) -> str:
    if not url.startswith("sqlite:"):
        return url
    path = url.split(":", 1)[1].lstrip("/")
    return "/" + path if url.startswith("sqlite:///") else path


def is_postgres(url: str) -> bool:
    return url.startswith(("postgresql:", "postgres:"))


def read_tables(url: str, queries: dict[str, str]) -> dict[str, list[Row]]:
    """Each query's rows, read in one connection."""
    if not is_postgres(url):
        lite = sqlite3.connect(_sqlite_path(url))
        lite.row_factory = sqlite3.Row
        try:
            return {name: [dict(r) for r in lite.execute(sql).fetchall()]
                    for name, sql in queries.items()}
        finally:
            lite.close()
    with psycopg.connect(url, row_factory=dict_row) as pg:
        return {name: [dict(r) for r in pg.execute(sql).fetchall()]
                for name, sql in queries.items()}


def _rows(url: str, sql: str) -> list[Row]:
    return read_tables(url, {"rows": sql})["rows"]


def _json(value: Any, default: Any) -> Any:
    if value is None or value == "":
        return default
    loaded = json.loads(value) if isinstance(value, str) else value
    return loaded if isinstance(loaded, type(default)) else default


def _meta(row: Row, key: str = "meta") -> dict[str, Any]:
    value: dict[str, Any] = _json(row.get(key), {})
    return value


class Snapshot:
    """Every row the invariants read, with the indexes they share."""

    def __init__(self, tables: dict[str, list[Row]]) -> None:
        self.conversations = {c["conversation_id"]: c for c in tables["conversations"]}
        self.messages = tables["messages"]
        for m in self.messages:
            m["meta"] = _meta(m)
            m["tool_calls"] = _json(m["tool_calls"], [])
        self.transcripts: dict[str, list[Row]] = defaultdict(list)
        for m in self.messages:
            self.transcripts[m["conversation_id"]].append(m)
        # Indexes over the transcripts (a torture's conversations hold thousands of messages).
        self.at_seq = {(m["conversation_id"], m["seq"]): m for m in self.messages}
        self.tool_results: dict[tuple[str, Any, Any], list[int]] = defaultdict(list)
        """The seqs of the tool results for (conversation, tool call, run), in order."""
        self.relayed: dict[tuple[str, Any], list[Row]] = defaultdict(list)
        """The messages of a conversation that show a relayed child request's mail."""
        self.shown_in_run: dict[tuple[str, Any], list[Row]] = defaultdict(list)
        """The messages of a conversation that show a child request within a run."""
        for m in self.messages:
            conv, meta = m["conversation_id"], m["meta"]
            if m["role"] == "tool":
                self.tool_results[(conv, m["tool_call_id"], m["run_id"])].append(m["seq"])
                if meta.get("consume_child_request") is not None:
                    self.shown_in_run[(conv, meta["consume_child_request"])].append(m)
            if m["role"] == "user" and meta.get("request_id") is not None:
                self.shown_in_run[(conv, meta["request_id"])].append(m)
            if meta.get("relayed_request") is not None:
                self.relayed[(conv, meta["relayed_request"])].append(m)
        self.inputs = tables["inputs"]
        for i in self.inputs:
            i["meta"] = _meta(i)
        self.tasks = tables["tasks"]
        self.task_by_key = {(t["conversation_id"], t["task_key"]): t for t in self.tasks}
        self.requests = tables["requests"]
        self.runs = tables["runs"]
        self.run_by_id = {r["run_id"]: r for r in self.runs}
        self.last_completed_answer: dict[str, int] = {}
        """The seq of each conversation's last assistant message of a completed run."""
        for m in self.messages:
            if m["role"] == "assistant" and \
                    self.run_by_id.get(m["run_id"], {}).get("status") == "completed":
                conv = m["conversation_id"]
                self.last_completed_answer[conv] = max(
                    m["seq"], self.last_completed_answer.get(conv, m["seq"]))
        self.operations = tables["operations"]
        self.deliveries = tables["deliveries"]
        self.queues = tables["queues"]
        self.cancellations = [(c["conversation_id"], _json(c["data"], {}))
                              for c in tables["cancellations"]]
        self.notices: dict[tuple[str, str], list[Row]] = defaultdict(list)
        """A task's notices in its conversation's transcript, by (conversation, task_key)."""
        self.reports: dict[tuple[str, str], list[Row]] = defaultdict(list)
        """The tool results that showed a task's terminal state to the model (T8)."""
        for m in self.messages:
            meta = m["meta"]
            if m["role"] == "user" and meta.get("kind") == NOTICE:
                self.notices[(m["conversation_id"], str(meta.get("task_key")))].append(m)
            if m["role"] == "tool" and isinstance(meta.get("reported_task_key"), str):
                self.reports[(m["conversation_id"], meta["reported_task_key"])].append(m)
        self.child_mail = [i for i in self.inputs if i.get("origin") == "child"]
        self.mail_by_request: dict[str, list[Row]] = defaultdict(list)
        for i in self.child_mail:
            self.mail_by_request[str(i["meta"].get("relayed_request"))].append(i)

    @classmethod
    def load(cls, url: str) -> Snapshot:
        return cls(read_tables(url, QUERIES))

    def shown_first(self, task: Row) -> bool:
        """Whether a tool result showed the task's end to the model before any notice did."""
        key = (task["conversation_id"], task["task_key"])
        reports, notices = self.reports.get(key), self.notices.get(key)
        if not reports:
            return False
        return not notices or reports[0]["seq"] < notices[0]["seq"]

    def tombstoned(self, conversation_id: str) -> bool:
        c = self.conversations.get(conversation_id)
        return c is not None and c["status"] == "tombstoned"


# -- the invariants ---------------------------------------------------------------------------

Invariant = Callable[[Snapshot], Iterator[Violation]]
INVARIANTS: dict[str, Invariant] = {}


def invariant(check: Invariant) -> Invariant:
    INVARIANTS[check.__name__] = check
    return check


def _v(kind: str, *ids: object, detail: str) -> Violation:
    return Violation(kind, tuple(str(i) for i in ids), detail)


# Tasks and their notices (T2-T8) ---------------------------------------------------------------

@invariant
def task_settled(db: Snapshot) -> Iterator[Violation]:
    """No task is left running once everything settled (T2, T9: a lost process is ``lost``)."""
    for t in db.tasks:
        if t["state"] == "running":
            yield _v("task_settled", t["conversation_id"], t["task_key"],
                     detail="left running after the drain")


@invariant
def task_once(db: Snapshot) -> Iterator[Violation]:
    """At most one notice per task in its conversation's transcript (T4, T6, M17)."""
    for (conv, key), notices in db.notices.items():
        if len(notices) > 1:
            yield _v("task_once", conv, key,
                     detail=f"notified {len(notices)} times, at {[m['seq'] for m in notices]}")


@invariant
def task_notice_matches(db: Snapshot) -> Iterator[Violation]:
    """Every notice names an ended task of its own conversation, by that end's stable event id
    (T2, T6)."""
    for (conv, key), notices in db.notices.items():
        task = db.task_by_key.get((conv, key))
        for m in notices:
            if task is None:
                yield _v("task_notice_matches", conv, key,
                         detail=f"a notice at seq {m['seq']} for no task of this conversation")
            elif task["state"] == "running":
                yield _v("task_notice_matches", conv, key,
                         detail=f"a notice at seq {m['seq']} for a task still running")
            elif m["meta"].get("event_id") != task["event_id"]:
                yield _v("task_notice_matches", conv, key,
                         detail=f"the notice at seq {m['seq']} names event "
                                f"{m['meta'].get('event_id')}, the task ended as "
                                f"{task['event_id']}")


@invariant
def task_owed(db: Snapshot) -> Iterator[Violation]:
    """A settled ``on_exit`` task the model did not read in a tool result is notified and its
    notice handled (T3, T5); a cancelled or ``never`` task is not notified at all."""
    for t in db.tasks:
        key = (t["conversation_id"], t["task_key"])
        seen = len(db.notices.get(key, ()))
        if t["state"] == "running":
            continue  # task_settled says so
        if t["cancelled"] or t["notify"] != "on_exit":
            if seen:
                why = "cancelled" if t["cancelled"] else f"notify={t['notify']}"
                yield _v("task_owed", *key, detail=f"{why}, yet notified {seen}x")
            continue
        if db.shown_first(t):
            continue  # T8: owed nothing (task_after_read checks no notice followed)
        if not seen:
            yield _v("task_owed", *key, detail=f"{t['state']} task owed a notice, never notified")
        elif not t["consumed"]:
            yield _v("task_owed", *key,
                     detail=f"notified, never consumed (delivered {bool(t['delivered'])})")


@invariant
def task_after_read(db: Snapshot) -> Iterator[Violation]:
    """No notice for a task whose end the model already read in a tool result: it waited for
    the task, or read its status, and the result showed the terminal state (T8)."""
    for key, notices in db.notices.items():
        reports = db.reports.get(key)
        if not reports:
            continue
        late = [m["seq"] for m in notices if m["seq"] > reports[0]["seq"]]
        if late:
            yield _v("task_after_read", *key,
                     detail=f"read in the tool result at seq {reports[0]['seq']}, "
                            f"then notified at {late}")


@invariant
def task_reported_flag(db: Snapshot) -> Iterator[Violation]:
    """The journal's ``reported_in_tool_result`` is set exactly when a tool result showed the
    task's end before any notice (T8): a flag with no such result would have silenced a notice
    that was owed; a result the flag missed leaves a notice owed that must not come."""
    for t in db.tasks:
        shown, flagged = db.shown_first(t), bool(t["reported_in_tool_result"])
        if flagged and not shown:
            yield _v("task_reported_flag", t["conversation_id"], t["task_key"],
                     detail="marked reported in a tool result, but no tool result showed its "
                            "end before a notice")
        elif shown and not flagged:
            yield _v("task_reported_flag", t["conversation_id"], t["task_key"],
                     detail="a tool result showed its end, the journal does not know")


@invariant
def task_after_call(db: Snapshot) -> Iterator[Violation]:
    """A task's notice comes after its originating tool call's result (T3, T4)."""
    for t in db.tasks:
        notices = db.notices.get((t["conversation_id"], t["task_key"]))
        if not notices or t["call_id"] is None:
            continue
        results = db.tool_results.get((t["conversation_id"], t["call_id"], t["run_id"]), [])
        first = notices[0]["seq"]
        if not results:
            yield _v("task_after_call", t["conversation_id"], t["task_key"],
                     detail=f"notified at seq {first}, its call {t['call_id']} has no result")
        elif first < results[0]:
            yield _v("task_after_call", t["conversation_id"], t["task_key"],
                     detail=f"notified at seq {first}, before its call's result at "
                            f"{results[0]}")


@invariant
def task_delivered(db: Snapshot) -> Iterator[Violation]:
    """``delivered`` is set exactly when the notice was written (they commit together, T4),
    and ``notification_seq`` points at that notice. A delivered notice still queued as a
    ``task_result`` input counts as written."""
    queued = {(i["conversation_id"], i["task_key"]) for i in db.inputs
              if i["origin"] == "task_result" and i["state"] == "queued"}
    for t in db.tasks:
        key = (t["conversation_id"], t["task_key"])
        notices = db.notices.get(key, [])
        if t["delivered"] and not notices and key not in queued:
            yield _v("task_delivered", *key, detail="delivered, but no notice was written")
        elif notices and not t["delivered"]:
            yield _v("task_delivered", *key,
                     detail=f"a notice at seq {notices[0]['seq']}, not marked delivered")
        seq = t["notification_seq"]
        if seq is not None and seq not in {m["seq"] for m in notices}:
            yield _v("task_delivered", *key,
                     detail=f"notification_seq {seq} is not a notice of this task")


@invariant
def task_consumed(db: Snapshot) -> Iterator[Violation]:
    """A notice is consumed only when a model step that saw it succeeded: a committed
    assistant reply of a completed run follows it (T5)."""
    for t in db.tasks:
        if not t["consumed"]:
            continue
        key = (t["conversation_id"], t["task_key"])
        notices = db.notices.get(key)
        if not notices:
            yield _v("task_consumed", *key, detail="consumed, but never notified")
            continue
        if db.last_completed_answer.get(t["conversation_id"], -1) <= notices[0]["seq"]:
            yield _v("task_consumed", *key,
                     detail=f"consumed, but no completed run answered after its notice at seq "
                            f"{notices[0]['seq']}")


@invariant
def task_result_input(db: Snapshot) -> Iterator[Violation]:
    """Every task notice came through the door (H1): its transcript message is the reading of
    a ``task_result`` input of that task, and a task has one live such input, of a task of that
    conversation (T4)."""
    by_id = {i["input_id"]: i for i in db.inputs}
    for key, notices in db.notices.items():
        for m in notices:
            item = by_id.get(m["input_id"])
            if item is None or item["origin"] != "task_result" or item["task_key"] != key[1]:
                yield _v("task_result_input", *key,
                         detail=f"the notice at seq {m['seq']} is no task_result input's reading")
    live = Counter((i["conversation_id"], i["task_key"]) for i in db.inputs
                   if i["origin"] == "task_result" and i["state"] != "cancelled")
    for key, n in live.items():
        if key not in db.task_by_key:
            yield _v("task_result_input", *key, detail="a task_result input for no task")
        if n > 1:
            yield _v("task_result_input", *key, detail=f"{n} task_result inputs for one task")


# Tool calls (T4, S9) ----------------------------------------------------------------------------

@invariant
def replayed(db: Snapshot) -> Iterator[Violation]:
    """No tool call ran again: one call started at most one task, and no run made the same
    call twice (an interrupted call is answered ``outcome_unknown``, never repeated; S9)."""
    started = Counter((t["conversation_id"], str(t["run_id"]), str(t["call_id"]))
                      for t in db.tasks if t["call_id"] is not None)
    for key, n in started.items():
        if n > 1:
            yield _v("replayed", *key, detail=f"one call started {n} tasks: it ran again")
    made: Counter[tuple[str, str, str]] = Counter()
    for m in db.messages:
        if m["role"] == "assistant" and m["run_id"] is not None:
            for c in m["tool_calls"]:
                made[(m["conversation_id"], m["run_id"], str(c.get("call_id")))] += 1
    for key, n in made.items():
        if n > 1:
            yield _v("replayed", *key, detail=f"the run made this call {n} times")


@invariant
def pairing(db: Snapshot) -> Iterator[Violation]:
    """No user-role or assistant message between a tool call and its result -- a notice
    included (T4) -- and every call has exactly one result."""
    for conv, rows in db.transcripts.items():
        open_calls: set[str] = set()
        for m in rows:
            if m["role"] == "tool":
                call = str(m["tool_call_id"])
                if call not in open_calls:
                    # A result for no open call: a replayed or doubled answer. (Call ids may
                    # repeat across a conversation -- the scripted model derives them from the
                    # request -- so a result pairs with the call open right now.)
                    yield _v("pairing", conv, call,
                             detail=f"a result for no open call at seq {m['seq']}")
                open_calls.discard(call)
                continue
            if open_calls:
                yield _v("pairing", conv, m["seq"],
                         detail=f"{m['role']} message inside open calls {sorted(open_calls)}")
            if m["role"] == "assistant" and m["tool_calls"]:
                open_calls = {str(c["call_id"]) for c in m["tool_calls"]}
        if open_calls:
            yield _v("pairing", conv, detail=f"calls never answered: {sorted(open_calls)}")


# Inputs (M1-M3, M17) ----------------------------------------------------------------------------

@invariant
def input_once(db: Snapshot) -> Iterator[Violation]:
    """An input is read at most once: a materialized input is in its transcript as exactly one
    message, at its ``message_seq``; no message names an input that was not read (M1, M17)."""
    state = {i["input_id"]: i for i in db.inputs}
    for conv, rows in db.transcripts.items():
        named = Counter(m["input_id"] for m in rows if m["input_id"] is not None)
        for input_id, n in named.items():
            item = state.get(input_id)
            if item is None or item["conversation_id"] != conv:
                yield _v("input_once", conv, input_id, detail="a message for no input of it")
            elif item["state"] != "materialized":
                yield _v("input_once", conv, input_id,
                         detail=f"in the transcript, but the input is {item['state']}")
            elif n > 1:
                yield _v("input_once", conv, input_id, detail=f"read {n} times")
    for i in db.inputs:
        if i["state"] != "materialized":
            continue
        at = db.at_seq.get((i["conversation_id"], i["message_seq"]))
        if at is None or at["input_id"] != i["input_id"]:
            yield _v("input_once", i["conversation_id"], i["input_id"],
                     detail=f"materialized at seq {i['message_seq']}, no such message of it")


@invariant
def kernel_mail(db: Snapshot) -> Iterator[Violation]:
    """Only the kernel's origins are kernel rows (they read first, M2), and kernel mail is
    always queued, never steered (M3)."""
    for i in db.inputs:
        kernel = i["origin"] in KERNEL_ORIGINS
        if bool(i["kernel"]) != kernel:
            yield _v("kernel_mail", i["conversation_id"], i["input_id"],
                     detail=f"origin {i['origin']} with kernel={i['kernel']}")
        elif kernel and i["delivery_mode"] != "queue":
            yield _v("kernel_mail", i["conversation_id"], i["input_id"],
                     detail=f"kernel mail delivered as {i['delivery_mode']}")


@invariant
def queue_counter(db: Snapshot) -> Iterator[Violation]:
    """A conversation's count of queued inputs (which bounds its queue, M1) is the truth."""
    queued = Counter(i["conversation_id"] for i in db.inputs if i["state"] == "queued")
    for conv, c in db.conversations.items():
        if int(c["queued_inputs"]) != queued.get(conv, 0):
            yield _v("queue_counter", conv, detail=f"counts {c['queued_inputs']} queued "
                                                   f"inputs, holds {queued.get(conv, 0)}")


# Children (M14, M16, M17) -----------------------------------------------------------------------

@invariant
def child_owed(db: Snapshot) -> Iterator[Violation]:
    """Every request a parent opened is answered, and every reply owed is relayed (M16)."""
    for r in db.requests:
        ids = (r["parent_conversation_id"], r["request_id"])
        if r["state"] == "open":
            yield _v("child_owed", *ids, detail="left open after the drain")
        elif (r["state"] == "replied" and r["relayed_at_us"] is None
              and not db.tombstoned(r["parent_conversation_id"])):
            yield _v("child_owed", *ids, detail="replied, never relayed")


@invariant
def child_cancelled(db: Snapshot) -> Iterator[Violation]:
    """A cancelled request is owed to no one: never mailed, never consumed, never marked
    relayed (M14, M16)."""
    for r in db.requests:
        if r["state"] != "cancelled":
            continue
        mails = len(db.mail_by_request.get(r["request_id"], ()))
        if mails or r["relayed_at_us"] is not None or r["consumed_in_run"]:
            yield _v("child_cancelled", r["parent_conversation_id"], r["request_id"],
                     detail=f"cancelled, yet mailed {mails}x, relayed_at "
                            f"{r['relayed_at_us']}, consumed in {r['consumed_in_run']}")


@invariant
def child_mail_once(db: Snapshot) -> Iterator[Violation]:
    """A relayed reply is one ``child`` mail in its parent -- marker and mail commit together
    -- unless the run that owned it consumed it (then never mail, M17), or the parent was
    tombstoned (then owed nothing); no mail names a request no parent opened (M16)."""
    known = {r["request_id"]: r for r in db.requests}
    for m in db.child_mail:
        if str(m["meta"].get("relayed_request")) not in known:
            yield _v("child_mail_once", m["input_id"], str(m["meta"].get("relayed_request")),
                     detail="mail for no request a parent opened")
    for r in db.requests:
        if r["state"] == "cancelled":
            continue  # child_cancelled
        ids = (r["parent_conversation_id"], r["request_id"])
        mails = len(db.mail_by_request.get(r["request_id"], ()))
        if r["consumed_in_run"]:
            if mails:
                yield _v("child_mail_once", *ids,
                         detail=f"consumed in its run and also mailed {mails}x")
        elif r["relayed_at_us"] is None:
            if mails:
                yield _v("child_mail_once", *ids, detail=f"mailed {mails}x, never marked")
        elif db.tombstoned(r["parent_conversation_id"]):
            continue
        elif mails != 1:
            yield _v("child_mail_once", *ids, detail=f"relayed as {mails} mails")


def _stopped_source(db: Snapshot, item: Row) -> bool:
    """Whether stopping the mail's source run withdrew it (M14): an ``input_cancelled`` of the
    parent names it with that run, and the run is stopped."""
    source = item["run_public_id"]
    run = db.run_by_id.get(source)
    if run is None or run["status"] != "stopped":
        return False
    return any(conv == item["conversation_id"] and data.get("run_public_id") == source
               and item["input_id"] in data.get("input_ids", ())
               for conv, data in db.cancellations)


@invariant
def child_mail_read(db: Snapshot) -> Iterator[Violation]:
    """A relayed reply reaches its parent's model: its mail is not cancelled (unless a stop of
    its source run withdrew it, M14) and, once read, the reply's text is in the parent's
    transcript exactly once, as ``child`` mail; while queued it is not there yet (M16)."""
    for r in db.requests:
        mails = db.mail_by_request.get(r["request_id"])
        if not mails:
            continue  # child_owed, child_mail_once
        ids = (r["parent_conversation_id"], r["request_id"])
        for item in mails:
            if item["state"] == "cancelled" and not _stopped_source(db, item):
                yield _v("child_mail_read", *ids,
                         detail=f"relayed, but its mail {item['input_id']} was cancelled")
        read = sum(1 for item in mails if item["state"] == "materialized")
        shown = db.relayed.get((r["parent_conversation_id"], r["request_id"]), [])
        if len(shown) != read:
            yield _v("child_mail_read", *ids,
                     detail=f"mail read {read}x, in the parent's transcript {len(shown)}x")
        head = f'<task_result task="{html.escape(r["task_key"])}"'
        reply = html.escape(r["reply"] or "", quote=False)
        for m in shown:
            if m["origin"] != "child" or not m["content"].startswith(head) \
                    or reply not in m["content"]:
                yield _v("child_mail_read", *ids,
                         detail=f"the message at seq {m['seq']} is not the child's reply")


@invariant
def child_in_run(db: Snapshot) -> Iterator[Violation]:
    """A turn-owned reply consumed in its run reached that run exactly once -- in a wait's or
    the spawn's result, or its synthesis round -- and is marked relayed (M16)."""
    for r in db.requests:
        run = r["consumed_in_run"]
        if not run:
            continue
        ids = (r["parent_conversation_id"], r["request_id"])
        shown = db.shown_in_run.get((r["parent_conversation_id"], r["request_id"]), [])
        if len(shown) != 1 or shown[0]["run_id"] != run:
            yield _v("child_in_run", *ids,
                     detail=f"consumed in {run}, shown {len(shown)}x, in runs "
                            f"{[m['run_id'] for m in shown]}")
        elif r["relayed_at_us"] is None:
            yield _v("child_in_run", *ids, detail=f"consumed in {run}, not marked relayed")


# Runs (C1, S7) ----------------------------------------------------------------------------------

@invariant
def overlap(db: Snapshot) -> Iterator[Violation]:
    """No two turns of one conversation overlap in time, and none is left running (C1, C9)."""
    by_conversation: dict[str, list[Row]] = defaultdict(list)
    for r in db.runs:
        if r["status"] in ("queued", "running"):
            yield _v("overlap", r["conversation_id"], r["run_id"],
                     detail=f"left {r['status']} after the drain")
        if r["started_at_us"] is not None:
            by_conversation[r["conversation_id"]].append(r)
    for conv, rows in by_conversation.items():
        rows.sort(key=lambda r: (r["started_at_us"], r["run_id"]))
        for before, after in itertools.pairwise(rows):
            end = before["ended_at_us"]
            if end is None or end > after["started_at_us"]:
                yield _v("overlap", conv, before["run_id"], after["run_id"],
                         detail=f"ended {end}, next started {after['started_at_us']}")


@invariant
def run_reply(db: Snapshot) -> Iterator[Violation]:
    """A completed run committed its reply: a final assistant message of its own (S7)."""
    replied = {m["run_id"] for m in db.messages
               if m["role"] == "assistant" and not m["tool_calls"]}
    for r in db.runs:
        if r["status"] == "completed" and r["run_id"] not in replied:
            yield _v("run_reply", r["conversation_id"], r["run_id"],
                     detail="completed with no reply in the transcript")


# The outbox (S7-S10, L2) ------------------------------------------------------------------------

@invariant
def delivery_ack(db: Snapshot) -> Iterator[Violation]:
    """A signal a turn claimed is acknowledged only with that turn's writes: its run completed,
    with its reply committed (S7)."""
    replied = {m["run_id"] for m in db.messages
               if m["role"] == "assistant" and not m["tool_calls"]}
    for d in db.deliveries:
        run = db.run_by_id.get(d["lease_owner"])
        if d["state"] != "acknowledged" or run is None:
            continue  # not acknowledged, or not a turn's claim
        if run["status"] != "completed" or run["run_id"] not in replied:
            yield _v("delivery_ack", d["conversation_id"], d["delivery_id"],
                     detail=f"acknowledged, but its run {run['run_id']} is {run['status']} "
                            f"({'with' if run['run_id'] in replied else 'without'} a reply)")


@invariant
def dead_letter(db: Snapshot) -> Iterator[Violation]:
    """Every dead letter carries a non-sensitive failure code (S8)."""
    for d in db.deliveries:
        if d["state"] == "dead_letter" and not d["failure_code"]:
            yield _v("dead_letter", d["delivery_id"], detail="no failure code")


@invariant
def backlog_counter(db: Snapshot) -> Iterator[Violation]:
    """A queue's backlog (which bounds publication, S10) and dead-letter count are the truth."""
    live = Counter(d["conversation_id"] for d in db.deliveries
                   if d["state"] in ("ready", "leased"))
    dead = Counter(d["conversation_id"] for d in db.deliveries if d["state"] == "dead_letter")
    for q in db.queues:
        conv = q["conversation_id"]
        if (int(q["backlog"]), int(q["dead_letters"])) != (live.get(conv, 0), dead.get(conv, 0)):
            yield _v("backlog_counter", conv,
                     detail=f"counts backlog {q['backlog']} and {q['dead_letters']} dead, "
                            f"holds {live.get(conv, 0)} and {dead.get(conv, 0)}")


@invariant
def operation(db: Snapshot) -> Iterator[Violation]:
    """No operation is left ``accepted``: each was completed or settled (S9, L2)."""
    for o in db.operations:
        if o["state"] == "accepted":
            yield _v("operation", o["operation_id"], detail=f"{o['kind']} left accepted")


# -- the report -------------------------------------------------------------------------------


@dataclass
class Report:
    violations: list[Violation]
    counts: dict[str, int]

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def fired(self) -> set[str]:
        """The invariants that found a violation."""
        return {v.kind for v in self.violations}


def check_snapshot(db: Snapshot) -> Report:
    violations = [v for check in INVARIANTS.values() for v in check(db)]
    counts = {
        "messages": len(db.messages), "tasks": len(db.tasks),
        "child_requests": len(db.requests), "child_mail": len(db.child_mail),
        "runs": len(db.runs), "operations": len(db.operations),
        "inputs": len(db.inputs), "deliveries": len(db.deliveries),
        "dead_letters": sum(1 for d in db.deliveries if d["state"] == "dead_letter"),
        "notifications": sum(len(n) for n in db.notices.values()),
        "reported_in_tool_result": sum(1 for r in db.reports.values() if r),
        "consumed_in_run": sum(1 for r in db.requests if r["consumed_in_run"]),
        "outcome_unknown": sum(1 for m in db.messages if m["role"] == "tool"
                               and m["meta"].get("status") == "outcome_unknown"),
    }
    return Report(violations, counts)


def check(url: str) -> Report:
    """Every violation in the database at ``url``, with what was looked at."""
    return check_snapshot(Snapshot.load(url))


__all__ = ("INVARIANTS", "Report", "Snapshot", "Violation", "check", "check_snapshot")
