"""``tidings chat``: a conversation from a terminal.

It opens a new conversation (or resumes one, showing its recent transcript first), then reads
the person's lines: each is posted as their input, and the reply is shown as it is generated,
tool calls and results folded, until the turn is over; then the prompt comes back. What the
runtime says later on its own -- a background task's notice, a child's reply, the turn either
starts -- is shown as it arrives, also while the person sits at the prompt, marked
``[runtime]``.

A tool call held for the person's approval (``approval_requested``) is shown with its
arguments, and the prompt asks ``approve shell? [y/n]``: ``y`` lets it run, ``n`` refuses it
(``/approve``, ``/deny``, ``/approvals`` too; see :mod:`tidings.cli.decisions`). The decision is
the approval's own, never a message; the prompt comes back when the run it let go on is over.

A question an MCP server asks the person (``question_asked``) is shown with its form's
fields, and answered in the chat: ``/answer seats=2`` (or ``/answer {"seats": 2}``, or the value
alone for a form of one field), ``/decline``, ``/cancel``, naming the question first when several
wait (``/answer qst_… seats=2``); ``/questions`` shows the ones waiting. While one waits, a line
typed without a command is neither an answer nor a message: the chat says how to answer, and
sends nothing (an answer is never guessed from words meant for the model, nor the reverse). A
call's progress (``mcp_progress``) is a line as it comes.

Ctrl-C while a turn runs stops it (the stop-run API); a second Ctrl-C before it has stopped
quits. Ctrl-C or end of input (Ctrl-D) at the prompt quits, with status 0 -- unless background
tasks run in this process (``--database``): quitting would kill them, so the chat says so and
asks first (``y`` quits, ``n`` stays; Ctrl-C or Ctrl-D again quits).

The terminal stays in its ordinary line mode: lines are edited by the terminal, and a line
typed while a turn runs is posted once the turn is over (an answer to a question is given at
once: the turn waits on it). The person's lines are read in a
thread of their own (a blocking read cannot be interrupted, and the thread must never hold the
process at exit); everything else runs on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

import click

from tidings.cli.app import console, main
from tidings.cli.app import run as run_async
from tidings.cli.conversation import (
    Where,
    profile_body,
    profile_options,
    where_options,
)
from tidings.cli.decisions import YES, Decisions, said
from tidings.cli.render import FeedItem, Screen, View, escape
from tidings.cli.sessions import HttpSession, LocalSession, Session
from tidings.errors import TidingsError
from tidings.types import RunStatus

T = TypeVar("T")

QUIT_WORDS = ("it is killed, and the agent is told so at its conversation's next turn (in "
              "a chat or a service on this database).")
"""What becomes of this process's background tasks when a chat on the database quits."""


class Runs:
    """What the chat knows of the conversation's runs: their statuses, and which run read
    which input -- from the feed, after the runs that were open when it started."""

    def __init__(self, open_runs: Mapping[str, RunStatus] | None = None) -> None:
        self.status: dict[str, RunStatus] = dict(open_runs or {})
        self.run_of: dict[str, str] = {}

    def see(self, item: FeedItem) -> None:
        d = item.data
        run = str(d.get("run_public_id") or item.run_id or "")
        if item.type == "turn_status" and run:
            with contextlib.suppress(ValueError):
                self.status[run] = RunStatus(str(d.get("status")))
            for input_id in d.get("inputs") or ():
                self.run_of[str(input_id)] = run
        elif item.type == "input_materialized" and run and d.get("input_id"):
            self.run_of[str(d["input_id"])] = run

    def open(self) -> list[str]:
        """The runs not over yet (running, or holding on a person's approval)."""
        return [r for r, s in self.status.items() if not s.ended]

    def working(self) -> list[str]:
        """The runs working now (not waiting for anyone)."""
        return [r for r, s in self.status.items() if s is RunStatus.RUNNING]

    def answered(self, input_id: str) -> bool:
        """Whether the run that read ``input_id`` is over, or waits for a person."""
        status = self.status.get(self.run_of.get(input_id, ""))
        return status is not None and (status.ended or status is RunStatus.AWAITING_APPROVAL)


def _read_lines(loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[str | None]) -> None:
    """The person's lines, then None at the end of input (the thread then ends). A terminal's
    end of input (Ctrl-D) is None too, but the terminal is read on: the chat may ask whether
    to quit.

    It reads the file descriptor itself, not ``sys.stdin``: a buffered reader's lock, held by a
    read that never returns, would stop the interpreter from finishing at exit.
    """
    pending = b""
    try:
        terminal = os.isatty(sys.stdin.fileno())
    except (OSError, ValueError):
        terminal = False
    while True:
        try:
            chunk = os.read(sys.stdin.fileno(), 4096)
            ended = not chunk and not terminal
        except (OSError, ValueError):  # no standard input (closed, or none at all)
            chunk, ended = b"", True
        pending += chunk
        *complete, pending = pending.split(b"\n") if chunk else [pending, b""]
        said: list[str | None] = [c.decode("utf-8", "replace").rstrip("\r")
                                  for c in complete if chunk or c]
        if not chunk:
            said.append(None)
        try:
            for line in said:
                loop.call_soon_threadsafe(lines.put_nowait, line)
        except RuntimeError:  # the loop is closed: the chat is over
            return
        if ended:
            return


class ScreenLog(logging.Handler):
    """The embedded runtime's warnings, printed as lines of the chat (never over its text)."""

    def __init__(self, screen: Screen, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(logging.WARNING)
        self.screen = screen
        self.loop = loop

    def emit(self, record: logging.LogRecord) -> None:
        line = f"[dim]\\[log] {escape(record.levelname.lower())}: {escape(record.getMessage())}[/]"
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.screen.line, line)


class Chat:
    """One chat over one conversation; :meth:`run` returns the exit status."""

    def __init__(self, session: Session, conversation_id: str, view: View, runs: Runs, *,
                 echo: bool) -> None:
        self.session = session
        self.conversation_id = conversation_id
        self.view = view
        self.screen = view.screen
        self.runs = runs
        self.echo = echo
        self.typing = not echo
        """Whether the person types at a terminal (which echoes what they type)."""
        self.busy = False
        """From a line read until the turn that read it is over."""
        self.stopping = False
        self.status = 0
        self._lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._held: deque[str] = deque()
        """Lines typed while a turn ran, posted once it is over."""
        self.decisions = Decisions(session, conversation_id, view)
        """The held calls and questions waiting for the person."""
        self.asking = False
        """Whether the person is asked if they really want to quit."""
        self.deciding = False
        """From a line read until what it decided is done (no prompt meanwhile)."""
        self._changed = asyncio.Event()
        self._quit = asyncio.Event()
        self._follower: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self, after: int) -> int:
        loop = asyncio.get_running_loop()
        threading.Thread(target=_read_lines, args=(loop, self._lines), daemon=True,
                         name="tidings-chat-input").start()
        loop.add_signal_handler(signal.SIGINT, self.interrupt)
        self._follower = asyncio.create_task(self._follow(after))
        try:
            await self._converse()
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            follower = self._follower
            failed = follower.exception() if follower.done() and not follower.cancelled() \
                else None
            for task in (self._follower, *self._tasks):
                task.cancel()
            for task in (self._follower, *self._tasks):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            self.screen.end_stream()
            if self.screen.prompt_shown:
                self.screen.typed()
                console.print()
        if failed is not None:
            raise failed  # not a refusal nor the runtime's error: a defect, shown whole
        return self.status

    async def _first(self, awaitable: Awaitable[T]) -> T | None:
        """``awaitable``'s result, or None if the chat is quitting or its feed ended first."""
        task = asyncio.ensure_future(awaitable)
        quitting = asyncio.ensure_future(self._quit.wait())
        assert self._follower is not None
        done, _ = await asyncio.wait({task, quitting, self._follower},
                                     return_when=asyncio.FIRST_COMPLETED)
        quitting.cancel()
        if task in done:
            return task.result()
        task.cancel()
        return None

    async def _read(self) -> str | None:
        """The person's next line, shown as typed; None at the end (or when quitting)."""
        line = await self._first(self._lines.get())
        if line is not None:
            # Input that is not a terminal is not echoed by one: the chat shows the line.
            self.screen.typed(line if self.echo else None)
        return line

    def _prompt(self) -> None:
        """The prompt: the usual one, or what the chat asks now (approve a held call? quit?)."""
        if not self.screen.prompt_shown:
            self.screen.prompt_text = ("quit? [y/n] " if self.asking
                                       else self.decisions.prompt() or "you> ")
        self.screen.prompt()

    async def _converse(self) -> None:
        while True:
            self._prompt()
            line = self._held.popleft() if self._held else await self._read()
            if line is None:
                if await self._may_quit():
                    return
                continue
            if not line.strip():
                continue
            self.deciding = True  # the feed may tell the decision before its answer comes
            try:
                taken = await self.decisions.take(line)
            finally:
                self.deciding = False
            if taken:
                resumed, self.decisions.resumed = self.decisions.resumed, None
                if resumed is not None and not await self._resumed(resumed):
                    return
                continue
            self.busy = True
            self.view.posting.append(line)
            try:
                try:
                    input_id = await self.session.post(self.conversation_id, line)
                except TidingsError as exc:
                    self.view.posted(line, None)
                    self.screen.line(f"[bold red]\\[chat][/] not posted: {escape(said(exc))}")
                    continue
                self.view.posted(line, input_id)
                while not self.runs.answered(input_id):
                    self._changed.clear()
                    if not await self._while_busy():
                        return
                # A held call decided while the run was busy, before the feed said it held (the
                # feed behind the decision): the run's word that it holds is stale, and the run
                # works again. Wait for it as for any decided run, not at the prompt.
                resumed, self.decisions.resumed = self.decisions.resumed, None
                if resumed is not None and not await self._resumed(resumed):
                    return
            finally:
                self.busy = self.stopping = False

    async def _resumed(self, run: str) -> bool:
        """The person let ``run`` go on (decided its held calls): wait as for a posted line,
        until it is over or holds again. False: the chat ends."""
        if self.runs.status.get(run) is RunStatus.AWAITING_APPROVAL:  # the feed is behind
            self.runs.status[run] = RunStatus.RUNNING
        self.busy = True
        try:
            while self.runs.status.get(run) is RunStatus.RUNNING:
                self._changed.clear()
                if not await self._while_busy():
                    return False
            return True
        finally:
            self.busy = self.stopping = False

    async def _follow(self, after: int) -> None:
        try:
            async for item in self.session.watch(self.conversation_id, after):
                self.runs.see(item)
                self.view.event(item)
                await self.decisions.see(item)
                if self.stopping and not self.busy and not self.runs.working():
                    self.stopping = False
                self._changed.set()
                if self.screen.streaming is None and (self.decisions.waiting or not (
                        self.busy or self.deciding or self.runs.working())):
                    self._prompt()
            self.screen.line("[bold red]\\[chat][/] the feed ended: the conversation is gone, "
                             "or the runtime closed")
        except TidingsError as exc:
            self.screen.line(f"[bold red]\\[chat][/] the feed ended: {escape(said(exc))}")
        self.status = 1

    async def _while_busy(self) -> bool:
        """Wait for a change of the runs (or of what waits for the person). While a question or
        a held call waits, the lines typed are taken meanwhile: a decision at once, anything
        else held until the turn is over; otherwise they wait their turn. False: the chat
        ends."""
        if not self.decisions.waiting:
            return await self._first(self._changed.wait()) is not None
        changed = asyncio.ensure_future(self._changed.wait())
        try:
            while not changed.done() and self.decisions.waiting:
                line = asyncio.ensure_future(self._lines.get())
                done = await self._first(asyncio.wait({changed, line},
                                                      return_when=asyncio.FIRST_COMPLETED))
                if done is None:
                    line.cancel()
                    return False
                if not line.done():
                    line.cancel()
                    break
                typed = line.result()
                if typed is None:
                    self._quit.set()
                    return False
                self.screen.typed(typed if self.echo else None)
                if typed.strip() and not await self.decisions.take(typed):
                    self._held.append(typed)
                if self.decisions.waiting:
                    self._prompt()
            return True
        finally:
            changed.cancel()

    def interrupt(self) -> None:
        """Ctrl-C: stop the running turn, if any (a second Ctrl-C quits); else quit, as the
        end of input does (asking first while background tasks run in this process; Ctrl-C
        then quits).

        A run that holds on a person's approval is not running a turn now: at the prompt,
        Ctrl-C quits and leaves it for the person to decide.
        """
        if self.asking or self.stopping:
            self._quit.set()
            return
        if not (self.busy or self.runs.working()):
            self._lines.put_nowait(None)
            return
        self.stopping = True
        if self.typing:  # the terminal echoed ^C where the cursor was
            self.screen.broken()
        self.screen.line("[bold yellow]\\[chat][/] stopping the running turn "
                         "(Ctrl-C again quits)…")
        task = asyncio.create_task(self._stop())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _may_quit(self) -> bool:
        """Whether to quit now: yes, unless background tasks run in this process (a chat on
        the database itself) -- then the person is told what becomes of them, and asked."""
        running = self.session.running_here()
        if not running:
            return True
        one = len(running) == 1
        self.screen.line(f"[bold yellow]\\[chat][/] {len(running)} background "
                         f"task{'' if one else 's'} {'runs' if one else 'run'} in this chat: "
                         + "; ".join(escape(r) for r in running))
        self.screen.line(f"    [dim]quitting ends {'it' if one else 'each'} now: "
                         f"{QUIT_WORDS} y quits, n stays.[/]")
        self.asking = True
        try:
            self._prompt()
            line = await self._read()
        finally:
            self.asking = False
        if line is None or line.strip().lower() in YES:
            return True
        self.screen.line("[dim]\\[chat] not quitting[/]")
        return False

    async def _stop(self) -> None:
        try:
            runs = self.runs.working()
            for run_id in runs:
                await self.session.stop_run(self.conversation_id, run_id)
            if not runs:  # posted, and not read by a run yet: stop what comes of it
                await self.session.stop(self.conversation_id)
        except TidingsError as exc:
            self.screen.line(f"[bold red]\\[chat][/] could not stop: {escape(said(exc))}")


async def converse(session: Session, conversation: str | None, *,
                   profile: dict[str, Any] | str,
                   title: str, history: int, screen: Screen) -> int:
    """Open or resume the conversation, then chat until the person quits."""
    view = View(screen)
    if conversation is None:
        conversation = await session.create(profile, title)
        screen.line(f"[dim]\\[chat] new conversation [bold]{escape(conversation)}[/bold] "
                    "(Ctrl-C stops a running turn; Ctrl-C or Ctrl-D at the prompt quits)[/]")
        after, running = 0, {}
    else:
        await session.check(conversation)
        after = await session.journal_end(conversation)
        messages = await session.transcript(conversation)
        screen.line(f"[dim]\\[chat] conversation [bold]{escape(conversation)}[/bold], "
                    f"{len(messages)} messages (Ctrl-C stops a running turn; Ctrl-C or "
                    "Ctrl-D at the prompt quits)[/]")
        view.transcript(messages, last=history)
        running = await session.open_runs(conversation)
    chat = Chat(session, conversation, view, Runs(running), echo=not sys.stdin.isatty())
    await chat.decisions.load()
    return await chat.run(after)


@main.command()
@where_options
@profile_options("the scripted model; with --database, the first --model")
@click.option("--model", "model_specs", multiple=True, metavar="SPEC",
              help="With --database: the runtime's models, as for serve: scripted (default), "
                   "scripted:RULES.json, openai:NAME or anthropic:NAME (repeatable; the first "
                   "is a new conversation's model unless --profile names one).")
@click.option("--model-base-url", default=None,
              help="With --database: the base URL for the openai/anthropic adapters.")
@click.option("--history", type=click.IntRange(min=0), default=20, show_default=True,
              help="How many recent messages of a resumed conversation to show first.")
@click.argument("conversation", required=False)
def chat(where: Where, profile_text: str | None, tools: tuple[str, ...], title: str,
         model_specs: tuple[str, ...], model_base_url: str | None, history: int,
         conversation: str | None) -> None:
    """Chat in a new conversation, or in CONVERSATION: each line is posted, the reply streams
    in as it is generated. Ctrl-C stops a running turn; Ctrl-C or Ctrl-D at the prompt quits.

    With --url it talks to a running service; with --database it runs the turns itself, in
    this process.
    """
    if conversation is not None and (profile_text is not None or tools or title):
        raise click.UsageError("--profile, --tool and --title are for a new conversation")
    if where.database is None and (model_specs or model_base_url):
        raise click.UsageError("--model and --model-base-url are for --database")
    screen = Screen(console)

    async def run() -> int:
        # Warnings (the embedded runtime's, asyncio's) are lines of the chat, not stray text.
        handler = ScreenLog(screen, asyncio.get_running_loop())
        root = logging.getLogger()
        root.addHandler(handler)
        try:
            if where.database is None:
                body = profile_body(profile_text, tools, "scripted")
                session = HttpSession(where.url, where.token)
                try:
                    return await converse(session, conversation, profile=body, title=title,
                                          history=history, screen=screen)
                finally:
                    await session.close()
            from tidings.cli.serve import parse_models
            from tidings.runtime.root import Runtime

            models = parse_models(model_specs, model_base_url)
            body = profile_body(profile_text, tools, models[0].name)
            async with Runtime.open(where.database, models=models) as runtime:
                try:
                    return await converse(LocalSession(runtime, owner=where.owner),
                                          conversation, profile=body, title=title,
                                          history=history, screen=screen)
                finally:
                    # The chat is over: what the runtime says as it closes goes to stderr.
                    root.removeHandler(handler)
        finally:
            root.removeHandler(handler)

    try:
        status = run_async(run)
    except KeyboardInterrupt:  # before the chat took Ctrl-C over
        sys.exit(130)
    sys.exit(status)


__all__ = ("Chat", "Runs", "chat", "converse")
