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
once: the turn waits on it).

This module is the command: it opens or resumes the conversation, over a service or an embedded
runtime. The chat itself is :mod:`~tidings.cli.chat.loop` (:class:`Chat`), what it knows of the
runs :mod:`~tidings.cli.chat.runs`, and the person's lines, read in a thread of their own,
:mod:`~tidings.cli.chat.terminal`.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

import click

from tidings.cli.app import console, main
from tidings.cli.app import run as run_async
from tidings.cli.chat.loop import Chat
from tidings.cli.chat.runs import Runs
from tidings.cli.chat.terminal import ScreenLog
from tidings.cli.conversation import (
    Where,
    profile_body,
    profile_options,
    where_options,
)
from tidings.cli.render import View
from tidings.cli.screen import Screen
from tidings.cli.sessions import HttpSession, LocalSession, Session
from tidings.cli.text import escape


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
