"""One chat's loop over one conversation (:class:`Chat`): the prompt and the lines read at it,
each posted and waited for until the turn it started is over; the feed followed meanwhile and
shown as it comes; what waits on the person (:mod:`tidings.cli.decisions`) taken from the lines
typed; Ctrl-C and the end of input, and the question whether to quit.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections import deque
from collections.abc import Awaitable
from typing import TypeVar

from tidings.cli.app import console
from tidings.cli.chat.runs import Runs
from tidings.cli.chat.terminal import read_lines
from tidings.cli.decisions import YES, Decisions, said
from tidings.cli.render import View
from tidings.cli.sessions import Session
from tidings.cli.text import escape
from tidings.errors import TidingsError
from tidings.types import RunStatus

T = TypeVar("T")

QUIT_WORDS = ("it is killed, and the agent is told so at its conversation's next turn (in "
              "a chat or a service on this database).")
"""What becomes of this process's background tasks when a chat on the database quits."""


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
        threading.Thread(target=read_lines, args=(loop, self._lines), daemon=True,
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


__all__ = ("QUIT_WORDS", "Chat")
