"""The crash torture's invariant checker (issue 7): it reads a database the torture left --
SQLite file or PostgreSQL -- and every transcript in it, and reports each violation with the
ids involved.

Checked, once everything settled (the torture's ``drain`` ran):

* ``task_notified``: every settled task that is owed a notification (``on_exit``, not
  cancelled, not already shown in a tool result) was notified and consumed exactly once, and
  no task was notified twice;
* ``child_relayed``: every reply a parent opened is relayed exactly once -- as one ``child``
  mail, or consumed in its turn-owned run and then never mail; a cancelled one not at all; no
  mail names a request that does not exist (nothing unowed is relayed);
* ``pairing``: no user-role or assistant message between a tool call and its result, and every
  call has exactly one result (an interrupted call is answered ``outcome_unknown`` once);
* ``replayed``: no tool call started a background task twice (nothing interrupted ran again);
* ``overlap``: no two turns of one conversation overlap in time, and none is left running;
* ``operation``: no operation is left ``accepted`` (each restart was completed or settled);
* ``dead_letter``: every dead letter carries a failure code.

The checker is test code: it reads the tables with plain SQL, no runtime involved.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    ids: tuple[str, ...]
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} {' '.join(self.ids)}: {self.detail}"


def _rows(url: str, sql: str) -> list[Row]:
    if not url.startswith(("postgresql:", "postgres:")):
        path = url
        if url.startswith("sqlite:"):
            path = url.split(":", 1)[1].lstrip("/")
            path = "/" + path if url.startswith("sqlite:///") else path
        lite = sqlite3.connect(path)
        lite.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in lite.execute(sql).fetchall()]
        finally:
            lite.close()
    with psycopg.connect(url, row_factory=dict_row) as pg:
        return [dict(r) for r in pg.execute(sql).fetchall()]


def _meta(row: Row, key: str = "meta") -> dict[str, Any]:
    value = row.get(key)
    if not value:
        return {}
    loaded = json.loads(value) if isinstance(value, str) else value
    return loaded if isinstance(loaded, dict) else {}


@dataclass
class Report:
    violations: list[Violation]
    counts: dict[str, int]

    @property
    def ok(self) -> bool:
        return not self.violations


def check(url: str) -> Report:
    """Every violation in the database at ``url``, with what was looked at."""
    messages = _rows(url, "SELECT conversation_id, seq, role, tool_calls, tool_call_id, meta, "
                          "run_id FROM messages ORDER BY conversation_id, seq")
    tasks = _rows(url, "SELECT * FROM tasks")
    requests = _rows(url, "SELECT c.*, o.owner_run, o.consumed_in_run FROM child_requests c "
                          "LEFT JOIN turn_owned_requests o ON o.request_id = c.request_id")
    mail = _rows(url, "SELECT input_id, conversation_id, meta, state FROM inputs "
                      "WHERE origin = 'child'")
    runs = _rows(url, "SELECT run_id, conversation_id, status, started_at_us, ended_at_us "
                      "FROM runs ORDER BY conversation_id, started_at_us")
    operations = _rows(url, "SELECT operation_id, kind, state FROM operations")
    dead = _rows(url, "SELECT delivery_id, failure_code FROM signal_deliveries "
                      "WHERE state = 'dead_letter'")
    violations: list[Violation] = []
    violations += _tasks(tasks, messages)
    violations += _children(requests, mail)
    violations += _pairing(messages)
    violations += _overlap(runs)
    violations += [Violation("operation", (o["operation_id"],), f"{o['kind']} left accepted")
                   for o in operations if o["state"] == "accepted"]
    violations += [Violation("dead_letter", (str(d["delivery_id"]),), "no failure code")
                   for d in dead if not d["failure_code"]]
    counts = {
        "messages": len(messages), "tasks": len(tasks), "child_requests": len(requests),
        "child_mail": len(mail), "runs": len(runs), "operations": len(operations),
        "dead_letters": len(dead),
        "notifications": sum(1 for m in messages
                             if _meta(m).get("kind") == "task_notification"),
        "outcome_unknown": sum(1 for m in messages if m["role"] == "tool"
                               and _meta(m).get("status") == "outcome_unknown"),
    }
    return Report(violations, counts)


def _tasks(tasks: list[Row], messages: list[Row]) -> list[Violation]:
    notes: Counter[tuple[str, str]] = Counter(
        (m["conversation_id"], str(meta.get("task_key")))
        for m in messages if (meta := _meta(m)).get("kind") == "task_notification"
    )
    found: list[Violation] = []
    for t in tasks:
        key = (t["conversation_id"], t["task_key"])
        seen = notes.get(key, 0)
        if seen > 1:
            found.append(Violation("task_notified", key, f"notified {seen} times"))
        owed = (t["state"] != "running" and t["notify"] == "on_exit" and not t["cancelled"]
                and not t["reported_in_tool_result"])
        if owed and seen != 1:
            found.append(Violation("task_notified", key,
                                   f"{t['state']} task notified {seen} times, owed once"))
        if owed and not (t["delivered"] and t["consumed"]):
            found.append(Violation("task_notified", key, "delivered "
                                   f"{bool(t['delivered'])}, consumed {bool(t['consumed'])}"))
        if t["state"] == "running":
            found.append(Violation("task_notified", key, "left running after the drain"))
    started: Counter[tuple[str, str, str]] = Counter(
        (t["conversation_id"], str(t["run_id"]), str(t["call_id"]))
        for t in tasks if t["call_id"] is not None
    )
    found += [Violation("replayed", key, f"one call started {n} tasks: it ran again")
              for key, n in started.items() if n > 1]
    return found


def _children(requests: list[Row], mail: list[Row]) -> list[Violation]:
    relayed = Counter(str(_meta(m).get("relayed_request")) for m in mail)
    known = {r["request_id"] for r in requests}
    found = [Violation("child_relayed", (m["input_id"], str(_meta(m).get("relayed_request"))),
                       "mail for no request a parent opened")
             for m in mail if _meta(m).get("relayed_request") not in known]
    for r in requests:
        ids = (r["parent_conversation_id"], r["request_id"])
        mails = relayed.get(r["request_id"], 0)
        if r["state"] == "open":
            found.append(Violation("child_relayed", ids, "left open after the drain"))
        elif r["state"] == "cancelled":
            if mails:
                found.append(Violation("child_relayed", ids, f"cancelled but mailed {mails}x"))
        elif r["consumed_in_run"]:
            if mails:
                found.append(Violation("child_relayed", ids,
                                       f"consumed in its run and also mailed {mails}x"))
        elif r["relayed_at_us"] is None:
            found.append(Violation("child_relayed", ids, "replied, never relayed"))
        elif mails != 1:
            found.append(Violation("child_relayed", ids, f"relayed as {mails} mails"))
    return found


def _pairing(messages: list[Row]) -> list[Violation]:
    found: list[Violation] = []
    by_conversation: dict[str, list[Row]] = defaultdict(list)
    for m in messages:
        by_conversation[m["conversation_id"]].append(m)
    for conv, rows in by_conversation.items():
        open_calls: set[str] = set()
        for m in rows:
            if m["role"] == "tool":
                call = str(m["tool_call_id"])
                if call not in open_calls:
                    # A result for no open call: a replayed or doubled answer. (Call ids may
                    # repeat across a conversation -- the scripted model derives them from the
                    # request -- so a result pairs with the call open right now.)
                    found.append(Violation("pairing", (conv, call),
                                           f"a result for no open call at seq {m['seq']}"))
                open_calls.discard(call)
                continue
            if open_calls:
                found.append(Violation("pairing", (conv, str(m["seq"])),
                                       f"{m['role']} message inside open calls "
                                       f"{sorted(open_calls)}"))
            if m["role"] == "assistant" and m["tool_calls"]:
                calls = json.loads(m["tool_calls"]) if isinstance(m["tool_calls"], str) \
                    else m["tool_calls"]
                open_calls = {str(c["call_id"]) for c in calls}
        if open_calls:
            found.append(Violation("pairing", (conv,), f"calls never answered: "
                                                       f"{sorted(open_calls)}"))
    return found


def _overlap(runs: list[Row]) -> list[Violation]:
    found: list[Violation] = []
    by_conversation: dict[str, list[Row]] = defaultdict(list)
    for r in runs:
        if r["status"] in ("queued", "running"):
            found.append(Violation("overlap", (r["conversation_id"], r["run_id"]),
                                   f"left {r['status']} after the drain"))
        if r["started_at_us"] is not None:
            by_conversation[r["conversation_id"]].append(r)
    for conv, rows in by_conversation.items():
        rows.sort(key=lambda r: (r["started_at_us"], r["run_id"]))
        for before, after in itertools.pairwise(rows):
            end = before["ended_at_us"]
            if end is None or end > after["started_at_us"]:
                found.append(Violation("overlap", (conv, before["run_id"], after["run_id"]),
                                       f"ended {end}, next started {after['started_at_us']}"))
    return found


__all__ = ("Report", "Violation", "check")
