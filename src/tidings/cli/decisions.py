"""What waits for the person in ``tidings chat``: tool calls held for their approval, and
questions MCP servers ask them -- and the lines that decide them.

A held call is shown with its arguments, and the prompt asks ``approve shell? [y/n]``: ``y``
(or ``yes``, ``/approve``) lets it run, ``n`` (or ``no``, ``/deny``) refuses it; when several
wait, the prompt asks about the oldest, and ``/approve appr_…`` names another. A question is
answered with ``/answer``, ``/decline`` or ``/cancel`` (see :mod:`tidings.cli.chat`).

A line meant for one of them is a decision, never a message to the model; and while something
waits, a line typed without a command is neither: the chat says how to decide, and sends
nothing (a decision is never guessed from words meant for the model, nor the reverse).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from tidings.cli.forms import FormError, parse_answer
from tidings.cli.render import FeedItem, View
from tidings.cli.sessions import Session
from tidings.cli.text import escape
from tidings.errors import TidingsError
from tidings.types import RunStatus

YES = ("y", "yes")
NO = ("n", "no")


def said(exc: Exception) -> str:
    """An error as one line: the library's code and message."""
    if isinstance(exc, TidingsError):
        return f"{exc.code}: {exc.message}"
    return str(exc)


class Decisions:
    """The held calls and the questions waiting for the person, oldest first, as the feed
    and the service tell them; :meth:`take` decides them from typed lines."""

    def __init__(self, session: Session, conversation_id: str, view: View) -> None:
        self.session = session
        self.conversation_id = conversation_id
        self.view = view
        self.screen = view.screen
        self.questions: dict[str, Mapping[str, Any]] = {}
        self.approvals: dict[str, Mapping[str, Any]] = {}
        self.resumed: str | None = None
        """The run whose last held call the person just decided: it works again."""

    @property
    def waiting(self) -> bool:
        return bool(self.questions or self.approvals)

    def prompt(self) -> str | None:
        """The prompt while a held call waits (about the oldest); None: the usual one."""
        for approval in self.approvals.values():
            return f"approve {approval.get('tool_name', 'it')}? [y/n] "
        return None

    # -- what waits ---------------------------------------------------------------------------

    async def load(self) -> None:
        """What already waits when the chat starts, shown oldest first."""
        with contextlib.suppress(TidingsError):
            waiting = await self.session.questions(self.conversation_id, "pending")
            for question in reversed(waiting):
                question = {**question, "run_public_id": question.get("run_id")}
                self.questions[str(question["question_id"])] = question
                self.view.asked(question)
        await self._held()

    async def _held(self) -> None:
        """Fetch the pending approvals (the feed names a held call, not its arguments) and
        show the ones not shown yet."""
        with contextlib.suppress(TidingsError):
            pending = await self.session.approvals(self.conversation_id, "pending")
            for approval in reversed(pending):
                key = str(approval["approval_id"])
                if key not in self.approvals:
                    self.approvals[key] = approval
                    self.view.held(approval)

    async def see(self, item: FeedItem) -> None:
        d = item.data
        if item.type == "question_asked" and d.get("question_id"):
            self.questions[str(d["question_id"])] = d
        elif item.type == "question_answered":
            self.questions.pop(str(d.get("question_id")), None)
        elif item.type == "approval_requested":
            await self._held()
        elif item.type == "approval_decided":
            self.approvals.pop(str(d.get("approval_id")), None)
        elif item.type == "turn_status":
            run = str(d.get("run_public_id") or item.run_id or "")
            with contextlib.suppress(ValueError):
                if RunStatus(str(d.get("status"))).ended:  # what it held or asked expired
                    for key in [k for k, q in self.questions.items()
                                if q.get("run_public_id") == run]:
                        del self.questions[key]
                    for key in [k for k, a in self.approvals.items() if a.get("run_id") == run]:
                        del self.approvals[key]

    # -- the person's lines -------------------------------------------------------------------

    async def take(self, line: str) -> bool:
        """Whether ``line`` was for what waits (a decision, a command, or a line typed while
        something waits) rather than a message to post; decides it if so."""
        word, _, rest = line.strip().partition(" ")
        if self.approvals and word.lower() in (*YES, *NO) and not rest:
            await self._decide(next(iter(self.approvals)), approve=word.lower() in YES)
            return True
        if word in ("/approve", "/deny"):
            await self._decided_with(rest.strip(), approve=word == "/approve")
            return True
        if word in ("/approvals", "/questions"):
            self._list(word)
            return True
        actions = {"/answer": "accept", "/decline": "decline", "/cancel": "cancel"}
        if word not in actions:
            if not self.waiting or line.startswith("/"):
                return False
            for approval in self.approvals.values():
                self.screen.line(f"[bold yellow]\\[chat][/] not sent: a call waits for your "
                                 f"approval -- {escape(self.view.decide_hint(approval))}")
            for question in self.questions.values():
                self.screen.line(f"[bold yellow]\\[chat][/] not sent: a question waits -- "
                                 f"{escape(self.view.answer_hint(question))}")
            return True
        named, _, after = rest.strip().partition(" ")
        if named in self.questions:
            question_id, rest = named, after
        elif len(self.questions) == 1:
            (question_id,) = self.questions
        else:
            words = ("no question waits" if not self.questions else
                     "several questions wait: name one, as in "
                     f"{word} {next(iter(self.questions))} …")
            self.screen.line(f"[bold red]\\[chat][/] {escape(words)}")
            return True
        await self._answer(question_id, actions[word], rest)
        return True

    def _list(self, word: str) -> None:
        if word == "/approvals":
            if not self.approvals:
                self.screen.line("[dim]\\[chat] no call waits for your approval[/]")
            for approval in self.approvals.values():
                self.screen.line(f"[bold magenta]\\[runtime][/] approval "
                                 f"{escape(str(approval['approval_id']))}:")
                self.view.held(approval)
            return
        if not self.questions:
            self.screen.line("[dim]\\[chat] no question waits[/]")
        for question in self.questions.values():
            self.view.asked(question)

    async def _decided_with(self, named: str, *, approve: bool) -> None:
        if named:
            await self._decide(named, approve=approve)
        elif self.approvals:
            await self._decide(next(iter(self.approvals)), approve=approve)
        else:
            self.screen.line("[bold red]\\[chat][/] no call waits for your approval")

    async def _decide(self, approval_id: str, *, approve: bool) -> None:
        # Its run, read before the decision is sent: over a service the feed may tell of the
        # decision (and drop the held call) before the decision's own answer comes back.
        held = self.approvals.get(approval_id)
        run = str(held.get("run_id")) if held is not None else None
        try:
            await self.session.decide(self.conversation_id, approval_id, approve=approve)
        except TidingsError as exc:  # decided otherwise first, expired, or not this chat's
            self.screen.line(f"[bold red]\\[chat][/] not decided: {escape(said(exc))}")
            return
        self.approvals.pop(approval_id, None)
        if run and not any(a.get("run_id") == run for a in self.approvals.values()):
            self.resumed = run

    async def _answer(self, question_id: str, action: str, text: str) -> None:
        question = self.questions[question_id]
        try:
            content = None
            if action == "accept":
                schema = question.get("requested_schema")
                content = parse_answer(schema if isinstance(schema, Mapping) else {}, text)
            elif text.strip():
                raise FormError(f"/{action} takes no answer")
            await self.session.answer(self.conversation_id, question_id, action, content)
        except (FormError, TidingsError) as exc:
            self.screen.line(f"[bold red]\\[chat][/] not answered: {escape(said(exc))}")
            self.screen.line(f"    [dim]{escape(self.view.answer_hint(question))}[/]")
            return
        self.questions.pop(question_id, None)


__all__ = ("NO", "YES", "Decisions", "said")
