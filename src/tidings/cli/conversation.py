"""``tidings create`` and ``tidings transcript``; the options every conversation command shares.

A conversation command talks to a running service (``--url`` and ``--token``, or
``$TIDINGS_URL`` and ``$TIDINGS_TOKEN``) or to the database itself (``--database``). Over the
database, ``create`` and ``transcript`` start no runtime: they open the conversation, or read
it, and leave the turns to whichever runtime serves that database.
"""

from __future__ import annotations

import functools
import getpass
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from tidings.cli.app import console, main
from tidings.cli.app import run as run_async
from tidings.cli.client import DEFAULT_URL
from tidings.cli.render import View
from tidings.cli.screen import Screen
from tidings.cli.sessions import http_session, profile_of, transcript_pages


@dataclass(frozen=True, slots=True)
class Where:
    """Where a command reaches its conversations: a service (``url`` and ``token``) or a
    database."""

    url: str
    token: str
    database: str | None
    owner: str


def _default_owner() -> str:
    try:
        return getpass.getuser() or "local"
    except (KeyError, OSError):  # no name for this user id (a container)
        return "local"


def where_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--url``, ``--token``, ``--database`` and ``--owner``, made one ``where`` argument."""

    def resolve(ctx: click.Context, url: str | None, token: str | None, database: str | None,
                owner: str | None) -> Where:
        if database is not None:
            if ctx.get_parameter_source("url") is click.core.ParameterSource.COMMANDLINE:
                raise click.UsageError("give --url (a service) or --database, not both")
            return Where("", "", database, owner or _default_owner())
        if not token:
            raise click.UsageError("--token (or $TIDINGS_TOKEN) is needed to reach a service; "
                                   "or give --database to use the database itself")
        if owner is not None:
            raise click.UsageError("--owner is for --database: over --url, the token's "
                                   "principal owns what it creates")
        return Where(url or DEFAULT_URL, token, None, "")

    # wraps: the options given to ``command`` (click keeps them on the function) stay too.
    @functools.wraps(command)
    def wrapped(url: str | None, token: str | None, database: str | None, owner: str | None,
                **rest: Any) -> Any:
        return command(where=resolve(click.get_current_context(), url, token, database, owner),
                       **rest)

    for option in reversed((
        click.option("--url", envvar="TIDINGS_URL", default=None,
                     help=f"A service's base URL (or $TIDINGS_URL; default {DEFAULT_URL})."),
        click.option("--token", envvar="TIDINGS_TOKEN", default=None,
                     help="A principal's bearer token for --url (or $TIDINGS_TOKEN)."),
        click.option("--database", default=None,
                     help="Use this database directly instead of a service: a SQLite file "
                          "path (or sqlite:///path), or postgresql://…"),
        click.option("--owner", default=None,
                     help="With --database: the principal that owns what is created, and "
                          "whose words are posted (default: your user name)."),
    )):
        wrapped = option(wrapped)
    return wrapped


def profile_options(default: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--profile``, ``--tool`` and ``--title``: the new conversation's agent; ``default``
    says which model it has when no profile is given."""
    return functools.partial(_profile_options, default=default)


def _profile_options(command: Callable[..., Any], default: str) -> Callable[..., Any]:
    command = click.option("--title", default="", help="The new conversation's title.")(command)
    command = click.option("--tool", "tools", multiple=True, metavar="NAME",
                           help="A tool the agent may call (repeatable; added to the "
                                "profile's).")(command)
    return click.option(
        "--profile", "profile_text", default=None, metavar="NAME|JSON|@FILE",
        help="A profile of the service's config file by its name, or the agent's profile as "
             'JSON, as the HTTP API takes it: {"model": "…", "tools": […], "system": "…", …} '
             f"(default: {default}).")(command)


def profile_body(profile_text: str | None, tools: tuple[str, ...],
                 default_model: str) -> dict[str, Any] | str:
    """The profile's JSON (from the option, a file, or the default), checked here -- or the
    name of a profile the config file declares, as given."""
    body: Any = {"model": default_model}
    if profile_text is not None and PROFILE_NAME.fullmatch(profile_text):
        if tools:
            raise click.BadParameter("--tool adds to a profile written as JSON; a named "
                                     "profile brings its own tools", param_hint="'--tool'")
        return profile_text
    if profile_text is not None:
        text = profile_text
        if text.startswith("@"):
            try:
                text = Path(text[1:]).read_text("utf-8")
            except OSError as exc:
                raise click.BadParameter(str(exc), param_hint="'--profile'") from None
        try:
            body = json.loads(text)
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="'--profile'") from None
        if not isinstance(body, dict):
            raise click.BadParameter("a JSON object is needed", param_hint="'--profile'")
    if tools:
        body["tools"] = [*body.get("tools", []), *tools]
    from pydantic import ValidationError

    try:
        profile_of(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        at = ".".join(str(p) for p in first["loc"]) or "profile"
        raise click.BadParameter(f"{at}: {first['msg']}", param_hint="'--profile'") from None
    return dict(body)


PROFILE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,127}")
"""How a named profile is written (JSON starts with ``{``, a file with ``@``)."""


def check_database(database: str) -> None:
    """Reading a SQLite file that is not there is an error, not a new database."""
    if "://" in database and not database.startswith("sqlite://"):
        return
    path = database.removeprefix("sqlite:///") if database.startswith("sqlite://") else database
    if path and not Path(path).is_file():
        raise click.ClickException(f"invalid_input: no database at {path}")


@main.command()
@where_options
@profile_options("the scripted model")
def create(where: Where, profile_text: str | None, tools: tuple[str, ...], title: str) -> None:
    """Open a conversation; print its id (so scripts can keep it)."""
    body = profile_body(profile_text, tools, "scripted")

    async def run() -> str:
        if where.database is not None:
            from tidings.runtime.inspection import Inspection

            async with await Inspection.open(where.database) as inspection:
                if isinstance(body, str):
                    raise click.BadParameter(
                        "a profile by its name is the service's (--url): with --database, "
                        "write it as JSON", param_hint="'--profile'")
                created = await inspection.create_conversation(where.owner, profile_of(body),
                                                               title=title)
                return created.conversation_id
        async with http_session(where.url, where.token) as session:
            return await session.create(body, title)

    click.echo(run_async(run))


@main.command()
@where_options
@click.option("--json", "as_json", is_flag=True,
              help="Print the messages as JSON, as the HTTP API serves them.")
@click.option("--full", is_flag=True,
              help="Print each tool's result whole (otherwise its first lines).")
@click.argument("conversation")
def transcript(where: Where, as_json: bool, full: bool, conversation: str) -> None:
    """Print CONVERSATION's transcript: who said what, tool calls folded to a line and their
    results to their first lines (--full: whole), the runtime's own words marked [runtime]."""

    async def run() -> list[dict[str, Any]]:
        if where.database is not None:
            check_database(where.database)
            from tidings.runtime.inspection import Inspection

            async with await Inspection.open(where.database, conversation) as inspection:
                return await transcript_pages(inspection, conversation)
        async with http_session(where.url, where.token) as session:
            return await session.transcript(conversation)

    messages = run_async(run)
    if as_json:
        click.echo(json.dumps({"conversation_id": conversation, "items": messages},
                              ensure_ascii=False, indent=2))
        return
    if not messages:
        console.print("[dim](no messages)[/]")
    View(Screen(console), person="person", full=full).transcript(messages)


def _changed(where: Where, conversation: str, verb: str,
             profile: dict[str, Any] | str | None = None) -> None:
    """Archive, unarchive or change the profile of ``conversation``; print how it then
    stands: ``conv_… active (model scripted; tools shell)``."""
    from tidings.service.schemas import ConversationOut

    async def run() -> ConversationOut:
        if where.database is not None:
            check_database(where.database)
            from tidings.runtime.inspection import Inspection

            async with await Inspection.open(where.database) as inspection:
                if verb == "profile":
                    if isinstance(profile, str):
                        raise click.ClickException(
                            "invalid_input: a profile by its name is the service's (--url): "
                            "with --database, write it as JSON")
                    assert profile is not None
                    done = await inspection.set_profile(conversation, profile_of(profile))
                else:
                    done = await getattr(inspection, verb)(conversation)
                return ConversationOut.of(done)
        from tidings.client import Client

        async with Client(where.url, where.token) as client:
            if verb == "profile":
                assert profile is not None
                return await client.conversations.set_profile(conversation, profile)
            verbs = client.conversations
            return await (verbs.archive if verb == "archive" else verbs.unarchive)(
                conversation)

    done = run_async(run)
    tools = ", ".join(done.profile.tools) or "none"
    click.echo(f"{done.conversation_id} {done.status} (model {done.profile.model}; "
               f"tools {tools})")


@main.command()
@where_options
@click.argument("conversation")
def archive(where: Where, conversation: str) -> None:
    """Archive CONVERSATION: it takes no more input from people or other callers (the
    runtime's own mail -- task notices, children's replies -- still runs). `tidings
    unarchive` undoes it."""
    _changed(where, conversation, "archive")


@main.command()
@where_options
@click.argument("conversation")
def unarchive(where: Where, conversation: str) -> None:
    """Undo the archive of CONVERSATION: it takes input again."""
    _changed(where, conversation, "unarchive")


@main.command()
@where_options
@click.option("--tool", "tools", multiple=True, metavar="NAME",
              help="A tool the agent may call (repeatable; added to a JSON profile's).")
@click.argument("conversation")
@click.argument("profile_text", metavar="PROFILE")
def profile(where: Where, tools: tuple[str, ...], conversation: str, profile_text: str) -> None:
    """Change CONVERSATION's profile to PROFILE: a profile of the service's config file by its
    name, or JSON as --profile of create takes it ({"model": …}, or @FILE). It is checked as
    at create (an unknown profile, model or tool is refused, and nothing changes); the next
    turn uses it."""
    _changed(where, conversation, "profile", profile_body(profile_text, tools, "scripted"))


__all__ = ("Where", "archive", "check_database", "create", "profile", "profile_body",
           "profile_options", "transcript", "unarchive", "where_options")
