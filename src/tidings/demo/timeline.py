"""The demo's timeline: what happened in a conversation, read back from the database.

Turns (runs), transcript messages and background task ends are merged by their recorded time
and printed once each, relative to the start of the demo.
"""

from __future__ import annotations

import html
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.markup import escape

from tidings.clock import SystemClock
from tidings.conversations.catalog import Conversations
from tidings.store import Store
from tidings.tasks.journal import TaskRecord, task_from_row
from tidings.tasks.notify import NOTIFICATION_KIND, TaskState
from tidings.types import Event, Message, Run

NO_LATER_THAN_US = 2**62


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One conversation as the database holds it."""

    messages: list[Message]
    runs: list[Run]
    tasks: list[TaskRecord]
    events: list[Event]


async def snapshot(store: Store, conversation_id: str) -> Snapshot:
    """Read a conversation's transcript, runs and tasks (reads only; no instance needed)."""
    conversations = Conversations(store, SystemClock())
    rows = await store.read(lambda tx: tx.all(
        "conversation_tasks", conversation_id=conversation_id, before_us=NO_LATER_THAN_US,
        limit=1000,
    ))
    return Snapshot(
        messages=await conversations.transcript(conversation_id),
        runs=await conversations.runs(conversation_id),
        tasks=sorted((task_from_row(r) for r in rows), key=lambda t: t.started_at_us),
        events=await conversations.events(conversation_id),
    )


_STYLE = {"person": "cyan", "model": "green", "tool": "yellow", "runtime": "magenta",
          "process": "blue", "turn": "white", "host": "red"}


def _short(text: str, limit: int = 110) -> str:
    """``text`` on one line, cut at a word's end (never inside a word) past ``limit``."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut) + " …"


_MAIL = re.compile(r'<task_result task="([^"]*)" status="([^"]*)" conversation="([^"]*)">'
                   r"(.*)</task_result>", re.DOTALL)

_TRIGGER = {"person": "a person wrote", "wake": "woken by a background task's end",
            "mail": "a child's reply came", "agent": "an agent wrote",
            "goal": "its goal goes on"}
"""Why a turn started, in words (the trigger's name when it is not listed)."""


def _command(text: str) -> str:
    return text.replace(sys.executable, "python3")


def _accepted(data: dict[str, Any]) -> str:
    return (f"[bold]restart[/] recorded: {escape(str(data.get('status')))} (operation "
            f"{escape(str(data.get('operation_id')))}, reason: "
            f"{escape(str(data.get('reason', '')))}); the next instance completes it")


def _completed(data: dict[str, Any]) -> str:
    interrupted = ", ".join(f"{t['task_key']} ({t['state']})"
                            for t in data.get("interrupted_tasks", ())) or "nothing"
    return (f"[bold]restart completed[/] by instance {escape(str(data.get('instance_id')))} "
            f"(the one before: {escape(str(data.get('previous_instance')))}); the task it cut "
            f"short: {escape(interrupted)} [dim](the conversation is told, which wakes it)[/]")


_LIFECYCLE: dict[str, Callable[[dict[str, Any]], str]] = {
    "restart_accepted": _accepted,
    "restart_completed": _completed,
}


class Timeline:
    """Prints each turn, message and task end once, ordered by when it was recorded."""

    def __init__(self, console: Console, start_us: int) -> None:
        self.console = console
        self.start_us = start_us
        self._shown: set[tuple[str, str]] = set()
        self.turns = 0
        """How many turns it has shown (numbered from 1)."""
        self.tasks: dict[str, TaskState] = {}
        """The background tasks whose end it has shown, and how each ended."""

    def note(self, at_us: int, actor: str, text: str) -> None:
        """A line of the demo's own (a host action: a process started or killed)."""
        self._line(at_us, actor, escape(text))

    def _line(self, at_us: int, actor: str, markup: str) -> None:
        seconds = (at_us - self.start_us) / 1e6
        style = _STYLE.get(actor, "white")
        self.console.print(f"[dim]{seconds:7.2f}s[/]  [bold {style}]{actor:<8}[/] {markup}",
                           highlight=False)

    def show(self, view: Snapshot) -> None:
        """Print what is new in ``view`` since the last call."""
        tasks_by_key = {t.task_key: t for t in view.tasks}
        items: list[tuple[int, int, str, str]] = []
        for run in view.runs:
            if ("run", run.run_id) in self._shown or run.started_at_us is None:
                continue
            self._shown.add(("run", run.run_id))
            self.turns += 1
            took = ("" if run.ended_at_us is None
                    else f" in {(run.ended_at_us - run.started_at_us) / 1000:.0f} ms")
            if run.usage.model_calls:
                took += (f", {run.usage.model_calls} model call(s), "
                         f"{run.usage.input_tokens} tokens in, {run.usage.output_tokens} out")
            why = _TRIGGER.get(run.trigger.value, run.trigger.value)
            items.append((run.started_at_us, 0, "turn",
                          f"[dim]turn {self.turns} starts ({why}) → "
                          f"{run.status.value}{took}[/]"))
        for m in view.messages:
            if ("msg", f"{m.conversation_id}:{m.seq}") in self._shown:
                continue
            self._shown.add(("msg", f"{m.conversation_id}:{m.seq}"))
            items.append((m.created_at_us, 1, *self._message(m, tasks_by_key)))
        noticed = {str(m.meta.get("task_key")): m.created_at_us for m in view.messages
                   if m.meta.get("kind") == NOTIFICATION_KIND}
        for t in view.tasks:
            if t.ended_at_us is None or ("task", t.task_key) in self._shown:
                continue
            self._shown.add(("task", t.task_key))
            self.tasks[t.task_key] = t.state
            how = "" if t.exit_code is None else f", exit {t.exit_code}"
            how += f" by {t.signal}" if t.signal else ""
            took = "" if t.duration_ms is None else f" after {t.duration_ms / 1000:.1f}s"
            # The end and its notice commit together: show the end first.
            at_us = min(t.ended_at_us, noticed.get(t.task_key, t.ended_at_us))
            items.append((at_us, 0, "process",
                          escape(f"{t.task_key} ended: {t.state.value}{how}{took}")))
        for e in view.events:
            key = ("event", f"{e.conversation_id}:{e.seq}")
            if e.type not in _LIFECYCLE or key in self._shown:
                continue
            self._shown.add(key)
            items.append((e.at_us, 1, "runtime", _LIFECYCLE[e.type](e.data)))
        for at_us, _, actor, markup in sorted(items, key=lambda i: (i[0], i[1])):
            self._line(at_us, actor, markup)

    def _message(self, m: Message, tasks: dict[str, TaskRecord]) -> tuple[str, str]:
        kind = m.meta.get("kind")
        if m.role == "assistant" and m.tool_calls:
            calls = []
            for call in m.tool_calls:
                args = dict(call.get("arguments", {}))
                command = _command(str(args.pop("command", "")))
                flags = ", ".join(f"{k}={json.dumps(v)}" for k, v in args.items())
                calls.append(f"{call['name']}({flags})" + (f": {command}" if command else ""))
            return "model", "calls " + escape(_short("; ".join(calls)))
        if m.role == "assistant":
            return "model", escape(f"“{_short(m.content)}”")
        if m.role == "tool":
            return "tool", escape(_short(m.content.splitlines()[0] if m.content else ""))
        if kind == NOTIFICATION_KIND:
            task = tasks.get(str(m.meta.get("task_key")))
            facts = "" if task is None else (
                f", exit {task.exit_code}" if task.exit_code is not None else "")
            excerpt = "" if task is None or not task.excerpt else (
                f", output {task.excerpt.decode('utf-8', 'replace').strip()!r}")
            return "runtime", (
                f"[bold]tells the model[/]: background task "
                f"{escape(str(m.meta.get('task_key')))} ended "
                f"({escape(str(m.meta.get('state')))}{escape(facts + excerpt)}) "
                "[dim](the runtime's own words, placed after the tool's result)[/]"
            )
        if kind is not None:
            return "runtime", escape(f"[{kind}] {_short(m.content)}")
        if (mail := _MAIL.fullmatch(m.content.strip())) is not None:
            key, status, child, body = (html.unescape(part) for part in mail.groups())
            return "runtime", escape(f"reply from child conversation {child} ({key}, "
                                     f"{status}): “{_short(body, 60)}”")
        if m.origin is not None and m.origin.is_kernel:
            return "runtime", escape(f"the runtime says: {_short(m.content)}")
        return "person", escape(f"“{_short(m.content)}”")
