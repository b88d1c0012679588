"""``tidings post`` and ``tidings watch``: a client of a running service, through
:class:`tidings.Client`.

``watch`` follows a conversation's event feed and reconnects by itself (the client's ``watch``:
``Last-Event-ID``, a backoff up to ten seconds). A refusal ends it with the problem's code and
detail; a server error or a lost connection is reconnected.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape

from tidings.cli.app import console, main
from tidings.cli.app import run as run_async
from tidings.cli.text import WHOLE_HINT
from tidings.cli.words import (
    answer_command,
    answer_words,
    approval_command,
    decision_words,
    progress_words,
    question_words,
)

if TYPE_CHECKING:  # the service's schemas are imported by the commands that use them
    from tidings.service.schemas import AnswerOut, EventOut

DEFAULT_URL = "http://127.0.0.1:8080"


def client_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--url`` and ``--token`` (or ``$TIDINGS_URL`` and ``$TIDINGS_TOKEN``): a service."""
    command = click.option("--token", envvar="TIDINGS_TOKEN", required=True,
                           help="A principal's bearer token (or $TIDINGS_TOKEN).")(command)
    return click.option("--url", envvar="TIDINGS_URL", default=DEFAULT_URL, show_default=True,
                        help="The service's base URL (or $TIDINGS_URL).")(command)


def listing_options(kind: str, statuses: Sequence[str]
                    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A command listing a conversation's ``kind`` (questions, approvals): a service's
    ``--url`` and ``--token``, ``--status`` (one of ``statuses``), ``--json``, CONVERSATION."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        command = click.argument("conversation")(command)
        command = click.option("--json", "as_json", is_flag=True,
                               help=f"Print the {kind} as JSON, as the HTTP API serves them."
                               )(command)
        command = click.option("--status", type=click.Choice(list(statuses)), default=None,
                               help=f"Only the {kind} in this status.")(command)
        return client_options(command)

    return decorate


def print_found(kind: str, found: list[dict[str, Any]], *, as_json: bool, conversation: str,
                show: Callable[[str, dict[str, Any]], None]) -> None:
    """A listing command's answer: ``{kind: [...]}`` as the HTTP API serves it, or each item
    shown (``(no kind)`` when there is none)."""
    if as_json:
        click.echo(json.dumps({kind: found}, ensure_ascii=False, indent=2))
        return
    if not found:
        console.print(f"[dim](no {kind})[/]")
    for item in found:
        show(conversation, item)


WAIT_S = 60.0
"""How long ``post --wait`` waits for the answer when it is given no number."""


@main.command()
@client_options
@click.option("--steer", is_flag=True, help="Join the running turn at its next safe point.")
@click.option("--wait", type=click.FloatRange(0, 300, min_open=True), is_flag=False,
              flag_value=WAIT_S, default=None, metavar="[SECONDS]",
              help=f"Wait for the answer and print the reply (at most SECONDS: {WAIT_S:g} "
                   "when not given, 300 at most). Give it after the arguments, or as "
                   "--wait=SECONDS.")
@click.argument("conversation")
@click.argument("text")
def post(
    url: str, token: str, steer: bool, wait: float | None, conversation: str, text: str
) -> None:
    """Post TEXT to CONVERSATION as a person's input; print the accepted input's id -- or,
    with --wait, the reply of the run that read it.

    With --wait the exit status is 0 when the run completed. Otherwise a line on stderr says
    how things stand (the run failed, awaits approval, or the wait timed out: the input stays
    accepted and is answered later) and the exit status is 1.
    """
    from tidings.client import Client
    from tidings.service.schemas import InputOut

    async def send() -> InputOut | AnswerOut:
        async with Client(url, token) as client:
            if wait is None:
                return await client.post(conversation, text, steer=steer)
            return await client.post(conversation, text, wait=wait, steer=steer)

    sent = run_async(send)
    if isinstance(sent, InputOut):
        click.echo(sent.input_id)
        return
    if sent.reply is not None:
        click.echo(sent.reply)
    if sent.status != "completed" or sent.timed_out:
        assert wait is not None
        raise click.ClickException(_unanswered(sent, wait))


def _unanswered(answer: AnswerOut, wait: float) -> str:
    """How a waited post stands when its run did not complete: one line."""
    run_id = answer.run.run_id if answer.run is not None else ""
    item = answer.input.input_id
    status = answer.status
    if answer.timed_out:
        where = f"run {run_id} is {status}" if run_id else f"input {item} is {status}"
        return f"no answer within {wait:g}s: {where}; the input stays accepted"
    if status == "awaiting_approval":
        return (f"run {run_id} awaits a person's approval of a tool call: tidings approvals "
                f"{answer.input.conversation_id} shows it, tidings approve (or deny) decides")
    if status == "cancelled":
        return f"input {item} was cancelled before any run read it"
    code = answer.run.failure_code if answer.run is not None else None
    return f"run {run_id} {status}" + (f" ({code})" if code else "")


def _describe(kind: str, data: Mapping[str, Any], conversation: str = "CONV") -> str:
    """One readable line for a journal event; an unknown type shows its data as JSON."""
    d = {k: v for k, v in data.items() if v is not None}
    if kind == "question_asked":
        head, fields = question_words(d)
        form = f" [{'; '.join(fields)}]" if fields else ""
        return (f"question {d.get('question_id', '?')}: {head}{form} -- answer: "
                f"{answer_command(conversation, d)}")
    if kind == "question_answered":
        return f"question {d.get('question_id', '?')} {answer_words(d)}"
    if kind == "mcp_progress":
        return progress_words(d)
    if kind == "approval_requested":
        approval = str(d.get("approval_id", "?"))
        return (f"run {d.get('run_public_id', '')} holds {d.get('tool_name', '?')} for a "
                f"person's approval {approval} -- {approval_command(conversation, approval)}")
    if kind == "approval_decided":
        return f"approval {d.get('approval_id', '?')} {decision_words(d)}"
    run = d.get("run_public_id", "")
    if kind == "input_accepted":
        who = d.get("authored_by")
        handle = who.get("handle") if isinstance(who, Mapping) else None
        return " ".join(str(p) for p in (
            d.get("origin", "?"), "input", d.get("input_id", ""),
            f"from {handle}" if handle else "", f"task {d['task_key']}" if "task_key" in d else "",
            f"({d['delivery_mode']})" if "delivery_mode" in d else "") if p)
    if kind == "input_materialized":
        return f"input {d.get('input_id', '?')} read by run {run} (message {d.get('message_seq')})"
    if kind == "turn_status":
        extra = [f"{k} {d[k]}" for k in ("trigger", "failure_code", "approval_id") if k in d]
        if isinstance(d.get("approvals"), list):
            extra.append("approvals " + ", ".join(str(a) for a in d["approvals"]))
        return f"run {run} {d.get('status', '?')}" + (f" ({', '.join(extra)})" if extra else "")
    if kind == "message_committed" and isinstance(d.get("message"), Mapping):
        message = d["message"]
        words = " ".join(str(message.get("content", "")).split())
        who = f"{message.get('role', '?')}" + (" (runtime)" if d.get("by_runtime") else "")
        return f"{who} message {message.get('seq', '?')}: " + (
            words if len(words) <= 120 else f"{words[:119]}… ({WHOLE_HINT})")
    if kind == "tool_calls":
        names = ", ".join(str(c.get("name")) for c in d.get("calls", ()) if isinstance(c, Mapping))
        return f"run {run} calls {names}"
    if kind == "task_status":
        return f"task {d.get('task_key', '?')} {d.get('state', '?')}" + (
            f", notice at message {d['message_seq']}" if "message_seq" in d else "")
    if kind in ("restart_accepted", "restart_completed"):
        return f"operation {d.get('operation_id', '?')}" + (
            f" ({d['status']})" if "status" in d else "")
    text = json.dumps(d, ensure_ascii=False, separators=(",", ":"), default=str)
    return text if len(text) <= 160 else text[:159] + "…"


@main.command()
@client_options
@click.option("--after", type=click.IntRange(min=0), default=0, show_default=True,
              help="Start after this journal sequence.")
@click.argument("conversation")
def watch(url: str, token: str, after: int, conversation: str) -> None:
    """Follow CONVERSATION's event feed, one line per event; reconnects by itself (Ctrl-C ends
    it)."""
    from tidings.client import Client, FeedLost, FeedResumed
    from tidings.service.schemas import EventOut

    last = after
    status = console.status(f"[dim]following {escape(conversation)} (from event {last + 1})…")

    def show(event: EventOut) -> None:
        clock = datetime.fromtimestamp(event.at_us / 1e6, UTC).astimezone().strftime("%H:%M:%S")
        console.print(
            f"[dim]{event.seq:>6}[/] {clock} [bold]{escape(event.type)}[/] "
            f"{escape(_describe(event.type, event.data, conversation))}",
            highlight=False, soft_wrap=True)

    async def follow() -> None:
        # Ctrl-C ends it, as it ends `serve` and `chat`: a handler of its own, so that it holds
        # even when the shell started it with Ctrl-C ignored (a background job of a script).
        loop = asyncio.get_running_loop()
        following = asyncio.current_task()
        assert following is not None
        loop.add_signal_handler(signal.SIGINT, following.cancel)
        try:
            await follow_feed()
        except asyncio.CancelledError:
            return
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    async def follow_feed() -> None:
        nonlocal last
        async with Client(url, token) as client, contextlib.aclosing(
                client.watch(conversation, after, notices=True)) as feed:
            async for item in feed:
                if isinstance(item, FeedLost):
                    status.update(f"[dim]{escape(item.reason)}; reconnecting, from event "
                                  f"{item.after_seq + 1}…")
                    continue
                # A live event (an answer being written) has no sequence: this command
                # follows the journal, where the answer commits.
                if isinstance(item, EventOut) and item.seq is not None:
                    show(item)
                    last = item.seq
                elif not isinstance(item, FeedResumed):
                    continue
                status.update(f"[dim]following {escape(conversation)} "
                              f"(from event {last + 1})…")

    status.start()
    try:
        run_async(follow)
    except KeyboardInterrupt:
        pass
    finally:
        status.stop()
