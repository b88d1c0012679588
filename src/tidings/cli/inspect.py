"""``tidings status`` and ``tidings dead-letters``: read a database directly.

Read only: no instance is registered and nothing is reconciled. What is shown comes through
:mod:`tidings.inspection` (the store's read API and the outbox's reads), never a query of its
own and never the store itself.
"""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from tidings.cli.app import console, main, redact
from tidings.cli.app import run as run_async
from tidings.clock import SystemClock
from tidings.inspection import Inspection, shown_status
from tidings.types import QueueStats, RunStatus


def _check_database(database: str) -> None:
    """Inspection reads: a SQLite file that is not there is an error, not a new database."""
    if "://" in database and not database.startswith("sqlite://"):
        return
    path = database.removeprefix("sqlite:///") if database.startswith("sqlite://") else database
    if path and not Path(path).is_file():
        raise click.ClickException(f"invalid_input: no database at {path}")


def _age(us: int | None, now_us: int) -> str:
    return "-" if us is None else f"{max(0, now_us - us) / 1e6:.1f}s"


def _table(title: str, *columns: str, right: tuple[str, ...] = ()) -> Table:
    """A table whose cells wrap rather than lose characters (ids must stay whole)."""
    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="right" if column in right else "left",
                         overflow="fold")
    return table


def _print(table: Table) -> None:
    if not table.row_count:
        table.caption = "(none)"
    console.print(table)


def _stats_table(title: str, rows: list[QueueStats]) -> Table:
    numbers = ("backlog", "ready", "leased", "oldest age", "retried", "max attempts",
               "dead letters")
    table = _table(title, "conversation", *numbers, right=numbers)
    for s in rows:
        age = "-" if s.oldest_age_us is None else f"{s.oldest_age_us / 1e6:.1f}s"
        table.add_row(s.conversation_id or "(all)", str(s.backlog), str(s.ready), str(s.leased),
                      age, str(s.retried), str(s.max_attempts), str(s.dead_letters))
    return table


@main.command()
@click.option("--database", required=True, help="Database URL or SQLite file path.")
@click.option("--conversation", default=None, help="One conversation (default: all).")
def status(database: str, conversation: str | None) -> None:
    """Show backlog, oldest age, retries, dead letters, open runs (running, or awaiting a
    person's approval), running tasks and instances."""
    _check_database(database)

    async def run() -> None:
        async with await Inspection.open(database, conversation) as inspection:
            seen = await inspection.status(conversation)
        stats, report, timeout_us = seen.stats, seen.report, seen.instance_timeout_us
        now = SystemClock().now_us()
        _print(_stats_table("signals", [stats]))

        table = _table("instances (live, or gone and not yet reconciled)", "instance", "state",
                       "last heartbeat")
        for i in report.instances:
            silent = now - i.heartbeat_at_us > timeout_us
            state = ("stopped" if i.stopped_at_us is not None
                     else "silent (gone?)" if silent else "live")
            table.add_row(i.instance_id, state, _age(i.heartbeat_at_us, now) + " ago")
        _print(table)

        table = _table("running tasks", "conversation", "task", "state", "age", "command")
        for t in report.running_tasks:
            table.add_row(t.conversation_id, t.task_key, "running", _age(t.started_at_us, now),
                          t.command[:60])
        for o in report.orphaned_tasks:
            table.add_row(o.conversation_id, o.task_key, "instance gone (lost at the next sweep)",
                          "-", "")
        _print(table)

        table = _table("open runs", "conversation", "run", "status", "trigger", "age")
        for r in report.open_runs:
            shown = shown_status(r)
            label = shown.value + (" (see its approvals)"
                                   if shown is RunStatus.AWAITING_APPROVAL else "")
            table.add_row(r.conversation_id, r.run_id, label, r.trigger.value,
                          _age(r.started_at_us, now))
        _print(table)
        if stats.dead_letters:
            scope = f" --conversation {conversation}" if conversation else ""
            console.print(f"{stats.dead_letters} dead letter(s): tidings dead-letters "
                          f"--database {redact(database)}{scope}", highlight=False)

    run_async(run)


@main.command("dead-letters")
@click.option("--database", required=True, help="Database URL or SQLite file path.")
@click.option("--conversation", default=None, help="One conversation (default: all).")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
def dead_letters(database: str, conversation: str | None, limit: int) -> None:
    """List dead letters: deliveries that failed for good (nothing replays them)."""
    _check_database(database)

    async def run() -> None:
        async with await Inspection.open(database, conversation) as inspection:
            letters = await inspection.dead_letters(conversation, limit=limit)
        table = _table(f"dead letters ({len(letters)})", "delivery", "event", "conversation",
                       "type", "attempts", "code", "dead since")
        now = SystemClock().now_us()
        for d in letters:
            table.add_row(str(d.delivery_id), d.event_id, d.conversation_id, d.type,
                          str(d.attempts), d.failure_code, _age(d.settled_at_us, now) + " ago")
        _print(table)

    run_async(run)
