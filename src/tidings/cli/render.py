"""How ``tidings chat`` and ``tidings transcript`` show a conversation: one rendering of
messages and of feed events, whichever way they were read (HTTP or an embedded runtime).

Who said what is never in doubt: the person's words are ``you>`` (or ``person>``), the agent's
``agent>``, a tool call is folded to one line and its result to its first lines (saying how to
see the whole: ``tidings transcript --full``), and everything the runtime
says on its own -- a background task's notice, a child conversation's reply, a run that failed
or was stopped -- starts with ``[runtime]``. What the chat client itself reports (a lost
connection) starts with ``[chat]``.

Text is made safe and folded by :mod:`tidings.cli.text`; the lines for what waits on a person
(a held call, a question) are :mod:`tidings.cli.words`'; all of it is printed on a
:class:`~tidings.cli.screen.Screen`. This module re-exports their names.

The agent's answer is printed piece by piece as ``message_delta`` events bring it; the
committed message is the truth: when it differs from what was streamed, the committed text is
printed again, and a draft that is discarded is said to be.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidings.cli.forms import properties
from tidings.cli.screen import Screen
from tidings.cli.text import (
    WHOLE_HINT,
    by_runtime,
    escape,
    fold,
    result_lines,
    runtime_summary,
    short,
)
from tidings.cli.words import (
    answer_words,
    call_words,
    decision_words,
    progress_words,
    question_words,
)
from tidings.types import Origin, RunStatus


@dataclass(frozen=True, slots=True)
class FeedItem:
    """One event of a conversation's feed, as either transport reads it: ``seq`` is the
    journal sequence (None for a live event: a streamed piece, a discarded draft)."""

    seq: int | None
    type: str
    run_id: str | None
    data: Mapping[str, Any]


AGENT = "[bold cyan]agent>[/] "


class View:
    """Renders messages and feed events on a :class:`Screen`; knows what it already showed.

    ``mine``: the ids of the inputs this chat posted (the person's own lines, already on the
    screen as they typed them); ``posting``: lines being posted, whose ids are not known yet
    (the feed may bring the message before the post has answered).
    """

    def __init__(self, screen: Screen, *, person: str = "you", full: bool = False) -> None:
        self.screen = screen
        self.person = person
        self.full = full
        """Tool results whole, rather than their first lines."""
        self.mine: set[str] = set()
        self.posting: list[str] = []
        self.seen_inputs: set[str] = set()
        self.shown_seq = 0
        """The newest transcript message shown: a message is shown once."""
        self.drafts: dict[tuple[str, int], str] = {}

    # -- messages -------------------------------------------------------------------------

    def message(self, message: Mapping[str, Any]) -> None:
        """Show one transcript message (committed), unless it was shown already."""
        seq = message.get("seq")
        if isinstance(seq, int):
            if seq <= self.shown_seq:
                return
            self.shown_seq = seq
        role = message.get("role")
        content = str(message.get("content") or "")
        if role == "assistant":
            self._assistant(message, content)
        elif role == "tool":
            self._result(str(message.get("tool_name") or "tool"), content)
        elif by_runtime(message):
            self.screen.line(f"[bold magenta]\\[runtime][/] {escape(runtime_summary(content))}")
        elif self._typed_here(message, content):
            pass  # typed at this prompt: already on the screen
        elif message.get("origin") == Origin.AGENT.value:
            self.screen.line(f"[bold blue]\\[agent][/] {escape(fold(content, 400))}")
        else:
            self.screen.line(f"[bold green]{escape(self.person)}>[/] {escape(content)}")

    def _result(self, name: str, content: str) -> None:
        """A tool's result: its first lines (all of them with ``full``), and how to see the
        rest."""
        lines, left = result_lines(content, full=self.full)
        self.screen.line(f"  [dim]← {escape(name)}: {escape(lines[0])}[/]")
        for line in lines[1:]:
            self.screen.line(f"    [dim]{escape(line)}[/]")
        if left:
            more = f"{left} more line{'' if left == 1 else 's'}; " if left > 0 else ""
            self.screen.line(f"    [dim]… ({more}{WHOLE_HINT})[/]")

    def _typed_here(self, message: Mapping[str, Any], content: str) -> bool:
        input_id = message.get("input_id")
        if input_id in self.mine:
            return True
        if message.get("origin") == Origin.PERSON.value and content in self.posting:
            self.posting.remove(content)
            self.seen_inputs.add(str(input_id))
            return True
        return False

    def posted(self, line: str, input_id: str | None) -> None:
        """A line's post answered (``input_id``; None: it was refused)."""
        if input_id is None or input_id not in self.seen_inputs:
            with contextlib.suppress(ValueError):
                self.posting.remove(line)
        if input_id is not None:
            self.mine.add(input_id)

    def _assistant(self, message: Mapping[str, Any], content: str) -> None:
        run_id = message.get("run_id")
        step = message.get("step")
        # The draft of the step that wrote it (older feeds say no step: the run's oldest).
        key = next((k for k in self.drafts
                    if k[0] == run_id and (not isinstance(step, int) or k[1] == step)), None)
        draft = self.drafts.pop(key) if key is not None else None
        if key is not None and draft is not None and self.screen.streaming == key \
                and content.startswith(draft):
            if content != draft:
                self.screen.stream(key, AGENT, content[len(draft):])
            self.screen.end_stream()
        elif content:
            if draft and not content.startswith(draft):
                self.screen.line("[dim]\\[chat] the answer as committed:[/]")
            self.screen.line(AGENT + escape(content))  # whole, once more if it was cut into
        elif key is not None and self.screen.streaming == key:
            self.screen.end_stream()
        for call in message.get("tool_calls") or ():
            if isinstance(call, Mapping):
                self.screen.line(f"  [yellow]→ {escape(str(call.get('name')))}[/] "
                                 f"[dim]{escape(short(call.get('arguments', {})))}[/]")

    def transcript(self, messages: Sequence[Mapping[str, Any]], *, last: int | None = None
                   ) -> None:
        """Show a transcript (its ``last`` messages, saying how many came before)."""
        shown = list(messages) if last is None else list(messages)[-last:] if last else []
        if len(shown) < len(messages):
            self.screen.line(f"[dim]… {len(messages) - len(shown)} earlier messages[/]")
        for message in shown:
            self.message(message)
        if messages and isinstance(messages[-1].get("seq"), int):
            self.shown_seq = max(self.shown_seq, int(messages[-1]["seq"]))

    # -- feed events ----------------------------------------------------------------------

    def event(self, item: FeedItem) -> None:
        """Show one feed event; a type with nothing to show a person is skipped."""
        d = item.data
        run = str(d.get("run_id") or d.get("run_public_id") or item.run_id or "")
        if item.type == "message_delta":
            self._delta(run, d)
        elif item.type == "message_discarded":
            key = (run, int(d.get("step", 0)))
            self._discard(key, str(d.get("reason") or "discarded"))
        elif item.type == "message_committed":
            message = d.get("message")
            if isinstance(message, Mapping):
                self.message({**message, "by_runtime": d.get("by_runtime", False)})
        elif item.type == "turn_status":
            self._status(run, d)
        elif item.type == "approval_requested":
            self.screen.line(
                f"[bold magenta]\\[runtime][/] run {escape(run)} waits for a person's approval "
                f"of {escape(str(d.get('tool_name', '?')))} ({escape(str(d.get('approval_id')))})")
        elif item.type == "approval_decided":
            self.screen.line(
                f"[bold magenta]\\[runtime][/] approval {escape(str(d.get('approval_id')))} "
                f"{escape(decision_words(d))}")
        elif item.type == "question_asked":
            self.asked(d)
        elif item.type == "question_answered":
            self.screen.line(
                f"[bold magenta]\\[runtime][/] question {escape(str(d.get('question_id')))} "
                f"{escape(answer_words(d))}")
        elif item.type == "mcp_progress":
            self.screen.line(f"  [dim]… {escape(progress_words(d))}[/]")
        elif item.type == "chat.lost":
            self.screen.line(f"[bold yellow]\\[chat][/] lost the feed "
                             f"({escape(str(d.get('reason')))}); reconnecting after event "
                             f"{d.get('after')}…")
        elif item.type == "chat.resumed":
            self.screen.line(f"[bold yellow]\\[chat][/] the feed is back, after event "
                             f"{d.get('after')}")
        elif item.type == "mcp_server_status":
            server = escape(str(d.get("server", "?")))
            if d.get("status") == "connected":
                self.screen.line(f"[bold magenta]\\[runtime][/] MCP server {server} is back")
            else:
                self.screen.line(f"[bold magenta]\\[runtime][/] MCP server {server} died: "
                                 f"{escape(str(d.get('reason') or 'disconnected'))}; "
                                 "connecting again")
        elif item.type in ("restart_accepted", "restart_completed"):
            what = "accepted" if item.type == "restart_accepted" else "completed"
            self.screen.line(f"[bold magenta]\\[runtime][/] restart {what} "
                             f"({escape(str(d.get('operation_id', '?')))})")

    def asked(self, q: Mapping[str, Any]) -> None:
        """A question to the person: who asks what, its fields, and how to answer here."""
        head, fields = question_words(q)
        self.screen.line(f"[bold magenta]\\[runtime][/] [bold]question "
                         f"{escape(str(q.get('question_id')))}[/bold]: {escape(head)}")
        for field in fields:
            self.screen.line(f"    [cyan]{escape(field)}[/]")
        self.screen.line(f"    [dim]{escape(self.answer_hint(q))}[/]")

    def held(self, approval: Mapping[str, Any]) -> None:
        """A held call waiting for the person's decision, and how to decide it here."""
        self.screen.line(f"    [yellow]{escape(call_words(approval))}[/]")
        self.screen.line(f"    [dim]{escape(self.decide_hint(approval))}[/]")

    @staticmethod
    def decide_hint(approval: Mapping[str, Any]) -> str:
        """How the person decides a held call where this view is shown (the chat)."""
        return (f"approve it? y runs {approval.get('tool_name', 'it')}, n refuses it "
                "(or /approve, /deny)")

    def answer_hint(self, q: Mapping[str, Any]) -> str:
        """How the person answers ``q`` where this view is shown (the chat's commands)."""
        schema = q.get("requested_schema")
        fields = list(properties(schema)) if isinstance(schema, Mapping) else []
        accept = " ".join(f"{name}=…" for name in fields) or "{}"
        return f"answer with /answer {accept}, or /decline, /cancel"

    def _delta(self, run: str, d: Mapping[str, Any]) -> None:
        key = (run, int(d.get("step", 0)))
        text = str(d.get("text") or "")
        offset = int(d.get("offset", 0))
        have = self.drafts.get(key, "")
        # What this watcher has not seen yet; after a gap (the feed sends none), all of it:
        # the committed message will say what the answer is.
        new = text[len(have) - offset:] if offset <= len(have) else text
        if not new:
            return
        self.drafts[key] = have + new
        # A line printed meanwhile cut the answer: it starts again on a line of its own, whole.
        self.screen.stream(key, AGENT, new if self.screen.streaming == key else have + new)

    def _discard(self, key: tuple[str, int], reason: str) -> None:
        draft = self.drafts.pop(key, None)
        if draft is None:
            return
        self.screen.end_stream()
        self.screen.line(f"[bold magenta]\\[runtime][/] the answer above was discarded "
                         f"({escape(reason)})")

    def _status(self, run: str, d: Mapping[str, Any]) -> None:
        try:
            status = RunStatus(str(d.get("status")))
        except ValueError:
            return
        if not status.ended:
            if status is RunStatus.AWAITING_APPROVAL:
                self.screen.end_stream()
            return
        for key in [k for k in self.drafts if k[0] == run]:
            self._discard(key, f"the run {status.value}")  # ended without committing it
        if status is RunStatus.COMPLETED:
            return
        code = d.get("failure_code")
        code = None if code == status.value else code
        self.screen.line(f"[bold magenta]\\[runtime][/] run {escape(run)} {status.value}"
                         + (f" ({escape(str(code))})" if code else ""))


__all__ = ("FeedItem", "View")
