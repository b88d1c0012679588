"""How ``tidings chat`` and ``tidings transcript`` show a conversation: one rendering of
messages and of feed events, whichever way they were read (HTTP or an embedded runtime).

Who said what is never in doubt: the person's words are ``you>`` (or ``person>``), the agent's
``agent>``, a tool call is folded to one line and its result to its first lines (saying how to
see the whole: ``tidings transcript --full``), and everything the runtime
says on its own -- a background task's notice, a child conversation's reply, a run that failed
or was stopped -- starts with ``[runtime]``. What the chat client itself reports (a lost
connection) starts with ``[chat]``.

The agent's answer is printed piece by piece as ``message_delta`` events bring it; the
committed message is the truth: when it differs from what was streamed, the committed text is
printed again, and a draft that is discarded is said to be.
"""

from __future__ import annotations

import contextlib
import html
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.markup import escape as escape_markup

from tidings.cli.forms import form_words, properties
from tidings.types import Origin, RunStatus

FOLD_CHARS = 100
"""A folded line (a tool call's arguments, a tool's result, a notice) is cut here."""


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with every control character but line breaks and tabs written out (``\\x1b``):
    what a model or a process wrote can colour nothing, move no cursor, clear no screen."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text.replace("\r\n", "\n"))


def escape(text: str) -> str:
    """Text from the feed, safe inside rich markup and on a terminal."""
    return escape_markup(visible(text))


@dataclass(frozen=True, slots=True)
class FeedItem:
    """One event of a conversation's feed, as either transport reads it: ``seq`` is the
    journal sequence (None for a live event: a streamed piece, a discarded draft)."""

    seq: int | None
    type: str
    run_id: str | None
    data: Mapping[str, Any]


def fold(text: str, limit: int = FOLD_CHARS) -> str:
    """The first line of ``text``, at most ``limit`` characters, saying what was left out."""
    lines = text.strip().splitlines() or [""]
    first = lines[0]
    rest = len(lines) - 1
    if len(first) > limit:
        first = first[: limit - 1] + "…"
    elif rest:
        first += " …"
    return first + (f" (+{rest} lines)" if rest else "")


RESULT_LINES = 8
"""A tool's result shows its first lines, this many at most, each cut at ``RESULT_CHARS``;
``tidings transcript --full`` (and ``--json``) shows it whole."""

RESULT_CHARS = 200

WHOLE_HINT = "tidings transcript --full shows it whole"


def result_lines(text: str, *, full: bool = False) -> tuple[list[str], int]:
    """A tool's result as the lines to show, and how many lines were left out (``-1``: none
    left out, but a line was cut). ``full``: every line, whole."""
    lines = text.strip("\n").splitlines() or [""]
    if full:
        return lines, 0
    shown = [line if len(line) <= RESULT_CHARS else line[: RESULT_CHARS - 1] + "…"
             for line in lines[:RESULT_LINES]]
    left = len(lines) - len(shown)
    return shown, left or (-1 if shown != lines[:RESULT_LINES] else 0)


def _short(value: Any, limit: int = FOLD_CHARS) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


_FACTS = re.compile(r"<process_facts>(.*?)</process_facts>", re.S)
_OUTPUT = re.compile(r"<untrusted_process_output[^>]*>(.*?)</untrusted_process_output>", re.S)
_CHILD = re.compile(
    r'^<task_result task="([^"]*)" status="([^"]*)" conversation="([^"]*)">(.*)</task_result>$',
    re.S)


def runtime_summary(content: str) -> str:
    """One line for the runtime's own words: a task's notice, a child's reply, or else the
    first line of what it said."""
    facts = _FACTS.search(content)
    if facts is not None:
        try:
            observed = json.loads(facts.group(1))
        except ValueError:
            observed = None
        if isinstance(observed, dict):
            how = [f"exit {observed['exit_code']}" if observed.get("exit_code") is not None
                   else f"signal {observed['signal']}" if observed.get("signal") else "",
                   f"{observed['duration_ms'] / 1000:.1f} s"
                   if isinstance(observed.get("duration_ms"), int | float) else ""]
            line = f"task {observed.get('task_key', '?')} {observed.get('state', 'ended')}"
            if any(how):
                line += f" ({', '.join(h for h in how if h)})"
            output = _OUTPUT.search(content)
            if output is not None:
                try:
                    text = json.loads(output.group(1))
                except ValueError:
                    text = None
                if isinstance(text, str) and text.strip():
                    line += ": " + fold(text)
            return line
    child = _CHILD.match(content.strip())
    if child is not None:
        task, status, conversation, body = child.groups()
        line = f"child {html.unescape(conversation)} ({html.unescape(task)}) {status}"
        body = html.unescape(body)
        return line + (": " + fold(body) if body.strip() else "")
    return fold(content)


def by_runtime(message: Mapping[str, Any]) -> bool:
    """Whether a message is the runtime's own words; the feed says so (``by_runtime``), a
    transcript's message by its kernel origin."""
    if "by_runtime" in message:
        return bool(message["by_runtime"])
    try:
        return Origin(str(message.get("origin"))).is_kernel
    except ValueError:
        return False


def progress_words(d: Mapping[str, Any]) -> str:
    """An MCP call's progress as one line: ``desk.book: 3/10 -- message``."""

    def number(value: Any) -> str:
        return f"{round(value, 2):g}" if isinstance(value, int | float) else str(value)

    done = number(d.get("progress", "?"))
    if d.get("total") is not None:
        done += "/" + number(d["total"])
    message = d.get("message")
    return f"{d.get('tool', '?')}: {done}" + (f" — {message}" if message else "")


def answer_command(conversation_id: str, question: Mapping[str, Any]) -> str:
    """The command that answers a question, its fields left for the person to fill."""
    schema = question.get("requested_schema")
    fields = properties(schema) if isinstance(schema, Mapping) else {}
    accept = " ".join(f"--field {name}=…" for name in fields) or "--accept '{}'"
    return (f"tidings answer {conversation_id} {question.get('question_id', '?')} {accept} "
            "(or --decline, --cancel)")


def call_words(approval: Mapping[str, Any]) -> str:
    """A held tool call as one line: its tool and its arguments."""
    return f"{approval.get('tool_name', '?')} {_short(approval.get('arguments', {}))}"


def decision_words(approval: Mapping[str, Any]) -> str:
    """How an approval stands: ``approved by alice``, ``denied by bob``, ``expired``."""
    status = str(approval.get("status", "?"))
    return status + (f" by {approval['decided_by']}" if approval.get("decided_by") else "")


def approval_command(conversation_id: str, approval_id: str) -> str:
    """The commands that decide a held call from a shell."""
    return (f"tidings approve {conversation_id} {approval_id} (or tidings deny "
            f"{conversation_id} {approval_id})")


def question_words(q: Mapping[str, Any]) -> tuple[str, list[str]]:
    """A question as text: its first line (who asks what) and its form's fields."""
    kind = q.get("kind", "elicitation")
    what = "asks" if kind == "elicitation" else "asks to use the model"
    head = f"{q.get('asker', '?')} {what}: {q.get('message', '')}"
    schema = q.get("requested_schema")
    return head, form_words(schema) if isinstance(schema, Mapping) else []


def answer_words(q: Mapping[str, Any]) -> str:
    """How a question stands, after its first line: ``accepted by alice: {"seats": 2}``."""
    status = str(q.get("status", "?"))
    line = status + (f" by {q['decided_by']}" if q.get("decided_by") else "")
    if q.get("answer") is not None:
        line += ": " + _short(q["answer"])
    return line


class Screen:
    """The terminal as the chat uses it: whole lines, one streamed line, and the prompt.

    Whatever is printed while the prompt is shown first takes the prompt's line (and the
    prompt is shown again after it by the chat); a streamed answer stays on its line until it
    is committed, discarded, or something else must be printed.
    """

    def __init__(self, console: Console, *, prompt: str = "you> ") -> None:
        self.console = console
        self.prompt_text = prompt
        self.prompt_shown = False
        self.streaming: tuple[str, int] | None = None

    def _write(self, text: str) -> None:
        self.console.file.write(text)
        self.console.file.flush()

    def _take_line(self) -> None:
        if self.prompt_shown:
            self._write("\r\x1b[2K" if self.console.is_terminal else "\n")
            self.prompt_shown = False

    def end_stream(self) -> None:
        if self.streaming is not None:
            self._write("\n")
            self.streaming = None

    def line(self, markup: str) -> None:
        """Print one line of rich markup (its parts from elsewhere escaped by the caller)."""
        self._take_line()
        self.end_stream()
        self.console.print(markup, highlight=False, soft_wrap=True)

    def stream(self, key: tuple[str, int], header: str, text: str) -> None:
        """Append ``text`` to the streamed line of ``key`` (opened with ``header``)."""
        self._take_line()
        if self.streaming != key:
            self.end_stream()
            self.console.print(header, end="", highlight=False)
            self.streaming = key
        self.console.print(visible(text), end="", markup=False, highlight=False,
                           soft_wrap=True)

    def broken(self) -> None:
        """The terminal wrote on the current line itself (``^C``): end it."""
        if self.streaming is not None:
            self.end_stream()
        elif not self.prompt_shown:
            self._write("\n")

    def prompt(self) -> None:
        if not self.prompt_shown:
            self.end_stream()
            self.console.print(f"[bold green]{escape(self.prompt_text)}[/]", end="",
                               highlight=False)
            self.prompt_shown = True

    def typed(self, echo: str | None = None) -> None:
        """The person ended a line at the prompt: the cursor is on a new line. ``echo``: the
        line, when no terminal showed it as it was typed (input from a pipe)."""
        if echo is not None:
            if not self.prompt_shown:
                self.prompt()
            self.console.print(visible(echo), markup=False, highlight=False, soft_wrap=True)
        self.prompt_shown = False


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
                                 f"[dim]{escape(_short(call.get('arguments', {})))}[/]")

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


__all__ = ("RESULT_LINES", "WHOLE_HINT", "FeedItem", "Screen", "View", "answer_command",
           "answer_words", "approval_command", "by_runtime", "call_words", "decision_words",
           "escape", "fold", "progress_words", "question_words", "result_lines",
           "runtime_summary", "visible")
