"""``tidings questions`` and ``tidings answer``: what a conversation's MCP servers asked its
people, and a person's answer -- a client of a running service, over HTTP.

An answer is typed field by field (``--field seats=2``, each value read by its field's type),
or whole as JSON (``--accept '{"seats": 2}'``); or it is ``--decline`` or ``--cancel``. The
service checks it against the question's schema: what does not fit is its 422, shown as one
line that says where, and nothing is answered.
"""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape

from tidings.cli.app import console, main
from tidings.cli.app import run as run_async
from tidings.cli.client import client_options, listing_options, print_found
from tidings.cli.forms import FormError, parse_fields, parse_json
from tidings.cli.sessions import http_session
from tidings.cli.words import answer_command, answer_words, question_words


def show(conversation_id: str, question: dict[str, Any]) -> None:
    """A question as a few lines: id and status, who asks what, its fields; a pending one
    with the command that answers it."""
    head, fields = question_words(question)
    pending = question.get("status") == "pending"
    status = "[bold yellow]pending[/]" if pending else escape(answer_words(question))
    console.print(f"[bold]{escape(str(question['question_id']))}[/] {status}", highlight=False,
                  soft_wrap=True)
    console.print(f"  {escape(head)}", highlight=False, soft_wrap=True)
    for field in fields:
        console.print(f"    {escape(field)}", highlight=False, soft_wrap=True)
    if pending:
        console.print(f"  [dim]{escape(answer_command(conversation_id, question))}[/]",
                      highlight=False, soft_wrap=True)


@main.command()
@listing_options("questions", ("pending", "accepted", "declined", "cancelled", "expired"))
def questions(url: str, token: str, status: str | None, as_json: bool,
              conversation: str) -> None:
    """List the questions CONVERSATION's MCP servers asked its people, newest first: who
    asks, what, the fields the answer has, how each stands, and how to answer one."""

    async def run() -> list[dict[str, Any]]:
        async with http_session(url, token) as session:
            return await session.questions(conversation, status or "")

    print_found("questions", run_async(run), as_json=as_json, conversation=conversation, show=show)


@main.command()
@client_options
@click.option("--accept", "accept_json", default=None, metavar="JSON",
              help="Accept, with the answer as a JSON object.")
@click.option("--field", "fields", multiple=True, metavar="NAME=VALUE",
              help="Accept, with this field of the answer (repeatable; each value read by "
                   "the field's type).")
@click.option("--decline", is_flag=True, help="Decline: the server is told no.")
@click.option("--cancel", is_flag=True, help="Cancel: the question is dismissed.")
@click.argument("conversation")
@click.argument("question_id")
def answer(url: str, token: str, accept_json: str | None, fields: tuple[str, ...],
           decline: bool, cancel: bool, conversation: str, question_id: str) -> None:
    """Answer QUESTION_ID of CONVERSATION, once: accept (--accept JSON or --field NAME=VALUE
    ...), --decline or --cancel. Prints how the question then stands."""
    chosen = [name for name, given in (("--accept/--field", accept_json is not None or fields),
                                       ("--decline", decline), ("--cancel", cancel)) if given]
    if len(chosen) != 1:
        raise click.UsageError("give one of --accept JSON, --field NAME=VALUE, --decline, "
                               "--cancel")
    if accept_json is not None and fields:
        raise click.UsageError("give --accept JSON or --field NAME=VALUE, not both")

    async def run() -> dict[str, Any]:
        async with http_session(url, token) as session:
            if decline or cancel:
                return await session.answer(conversation, question_id,
                                            "decline" if decline else "cancel")
            try:
                if accept_json is not None:
                    content = parse_json(accept_json)
                else:
                    asked = {q["question_id"]: q for q in
                             await session.questions(conversation)}.get(question_id)
                    schema = asked["requested_schema"] if asked else {"properties": {}}
                    content = parse_fields(schema, fields) if asked else {
                        name: value for name, _, value in (f.partition("=") for f in fields)}
            except FormError as exc:
                raise click.BadParameter(str(exc), param_hint="the answer") from None
            return await session.answer(conversation, question_id, "accept", content)

    show(conversation, run_async(run))


__all__ = ("answer", "questions", "show")
