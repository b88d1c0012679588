"""``tidings post`` and ``tidings watch``: a client of a running service, over HTTP.

``watch`` follows a conversation's event feed (Server-Sent Events, parsed by ``httpx-sse``) and
reconnects by itself from the last sequence it printed, with a backoff up to ten seconds.
A refusal (4xx) ends it with the problem's code and detail; a server error or a lost
connection is reconnected.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import click
from rich.markup import escape

from tidings.cli.app import console, main

DEFAULT_URL = "http://127.0.0.1:8080"


def _client_options(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option("--token", envvar="TIDINGS_TOKEN", required=True,
                           help="A principal's bearer token (or $TIDINGS_TOKEN).")(command)
    return click.option("--url", envvar="TIDINGS_URL", default=DEFAULT_URL, show_default=True,
                        help="The service's base URL (or $TIDINGS_URL).")(command)


def _problem(response: Any) -> str:
    """A refusal as one line: the problem document's code and detail."""
    try:
        body = response.json()
        return f"{body['code']}: {body['detail']}"
    except (ValueError, KeyError, TypeError):
        text = response.text.strip()[:200] or response.reason_phrase
        return f"HTTP {response.status_code}: {text}"


@main.command()
@_client_options
@click.option("--steer", is_flag=True, help="Join the running turn at its next safe point.")
@click.argument("conversation")
@click.argument("text")
def post(url: str, token: str, steer: bool, conversation: str, text: str) -> None:
    """Post TEXT to CONVERSATION as a person's input; print the accepted input's id."""
    import httpx

    try:
        response = httpx.post(
            f"{url.rstrip('/')}/v1/conversations/{quote(conversation, safe='')}/inputs",
            json={"content": text, "delivery_mode": "steer" if steer else "queue"},
            headers={"Authorization": f"Bearer {token}"}, timeout=30,
        )
    except httpx.HTTPError as exc:
        raise click.ClickException(f"cannot reach {url}: {exc}") from None
    if response.status_code >= 400:
        raise click.ClickException(_problem(response))
    click.echo(response.json()["input_id"])


def _describe(kind: str, data: Mapping[str, Any]) -> str:
    """One readable line for a journal event; an unknown type shows its data as JSON."""
    d = {k: v for k, v in data.items() if v is not None}
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
            words if len(words) <= 120 else words[:119] + "…")
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
@_client_options
@click.option("--after", type=click.IntRange(min=0), default=0, show_default=True,
              help="Start after this journal sequence.")
@click.argument("conversation")
def watch(url: str, token: str, after: int, conversation: str) -> None:
    """Follow CONVERSATION's event feed, one line per event; reconnects by itself (Ctrl-C ends
    it)."""
    import httpx
    from httpx_sse import ServerSentEvent, connect_sse

    def show(sse: ServerSentEvent, last: int) -> int:
        """Print one event; the sequence it brings the feed to."""
        try:
            event = json.loads(sse.data)
        except ValueError:
            event = {"data": sse.data}
        if isinstance(event, dict) and "seq" in event and event["seq"] is None:
            # A live event (an answer being written, no SSE id of its own): this command
            # follows the journal, where the answer commits.
            return last
        seq = int(sse.id) if sse.id.isdigit() else last
        at = event.get("at_us")
        clock = "" if not isinstance(at, int) else datetime.fromtimestamp(
            at / 1e6, UTC).astimezone().strftime("%H:%M:%S")
        console.print(
            f"[dim]{seq:>6}[/] {clock} [bold]{escape(sse.event)}[/] "
            f"{escape(_describe(sse.event, event.get('data', event)))}",
            highlight=False, soft_wrap=True)
        return max(last, seq)

    feed = f"{url.rstrip('/')}/v1/conversations/{quote(conversation, safe='')}/events"
    last = after
    delay = 0.5
    status = console.status(f"[dim]connecting to {escape(url)}…")
    status.start()
    try:
        with httpx.Client(timeout=httpx.Timeout(10, read=60)) as client:
            while True:
                headers = {"Authorization": f"Bearer {token}"}
                if last:
                    headers["Last-Event-ID"] = str(last)
                try:
                    with connect_sse(client, "GET", feed, headers=headers) as source:
                        response = source.response
                        if response.status_code >= 400:
                            response.read()
                            if response.status_code < 500:
                                raise click.ClickException(_problem(response))
                            raise httpx.HTTPStatusError(
                                _problem(response), request=response.request, response=response)
                        status.update(f"[dim]following {escape(conversation)} "
                                      f"(after seq {last})…")
                        delay = 0.5
                        for sse in source.iter_sse():
                            # A keep-alive comment ends in a blank line too, and the decoder
                            # then dispatches an event without data: only events carry data.
                            if not sse.data:
                                continue
                            last = show(sse, last)
                            status.update(f"[dim]following {escape(conversation)} "
                                          f"(after seq {last})…")
                    reason = "the server ended the feed"
                except httpx.HTTPError as exc:  # httpx-sse's SSEError is one too
                    reason = str(exc) or type(exc).__name__
                status.update(f"[dim]{escape(reason)}; reconnecting after seq {last} in "
                              f"{delay:.1f}s…")
                time.sleep(delay)
                delay = min(delay * 2, 10.0)
    except KeyboardInterrupt:
        pass
    finally:
        status.stop()
