"""``tidings approvals``, ``tidings approve`` and ``tidings deny``: the tool calls a
conversation holds for a person's approval, and a person's decision -- a client of a running
service, over HTTP.

A decision is the approval's own (``POST .../approvals/{id}/decision``), never a message to
the model. Deciding once more is not an error: the approval is shown as it stands (approved
or denied by whom, or expired).
"""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape

from tidings.cli.app import console, main
from tidings.cli.app import run as run_async
from tidings.cli.client import client_options, listing_options, print_found
from tidings.cli.sessions import http_session
from tidings.cli.words import approval_command, call_words, decision_words


def show(conversation_id: str, approval: dict[str, Any]) -> None:
    """An approval as a few lines: id and status, the held call; a pending one with the
    commands that decide it."""
    pending = approval.get("status") == "pending"
    status = "[bold yellow]pending[/]" if pending else escape(decision_words(approval))
    console.print(f"[bold]{escape(str(approval['approval_id']))}[/] {status} (run "
                  f"{escape(str(approval.get('run_id')))})", highlight=False, soft_wrap=True)
    console.print(f"  {escape(call_words(approval))}", highlight=False, soft_wrap=True)
    if pending:
        decide = approval_command(conversation_id, str(approval["approval_id"]))
        console.print(f"  [dim]{escape(decide)}[/]", highlight=False, soft_wrap=True)


@main.command()
@listing_options("approvals", ("pending", "approved", "denied", "expired", "applied"))
def approvals(url: str, token: str, status: str | None, as_json: bool,
              conversation: str) -> None:
    """List the tool calls CONVERSATION held for a person's approval, newest first: the call,
    how each stands, and how to decide a pending one."""

    async def run() -> list[dict[str, Any]]:
        async with http_session(url, token) as session:
            return await session.approvals(conversation, status or "")

    print_found("approvals", run_async(run), as_json=as_json, conversation=conversation, show=show)


def _decide(url: str, token: str, conversation: str, approval_id: str, approve: bool) -> None:
    async def run() -> dict[str, Any]:
        async with http_session(url, token) as session:
            return await session.decide(conversation, approval_id, approve=approve)

    show(conversation, run_async(run))


@main.command()
@client_options
@click.argument("conversation")
@click.argument("approval_id")
def approve(url: str, token: str, conversation: str, approval_id: str) -> None:
    """Approve APPROVAL_ID of CONVERSATION: the held call runs. Prints how it then stands."""
    _decide(url, token, conversation, approval_id, True)


@main.command()
@client_options
@click.argument("conversation")
@click.argument("approval_id")
def deny(url: str, token: str, conversation: str, approval_id: str) -> None:
    """Deny APPROVAL_ID of CONVERSATION: the held call does not run, and the agent is told
    so. Prints how it then stands."""
    _decide(url, token, conversation, approval_id, False)


__all__ = ("approvals", "approve", "deny", "show")
