"""``tidings status`` and ``tidings dead-letters``: read a database directly, or ask a
service (``--url``, through :class:`tidings.Client`).

Over a database, read only: no instance is registered and nothing is reconciled. What is shown
comes through :mod:`tidings.runtime.inspection` (the store's read API and the outbox's
reads), never a
query of its own and never the store itself. Over a service, what its token may see: an
operator's every conversation, the instances and every dead letter; a principal's its own
conversations' signals, runs and tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from tidings.cli.app import console, main, redact
from tidings.cli.app import run as run_async
from tidings.cli.client import DEFAULT_URL
from tidings.clock import SystemClock
from tidings.types import DeadLetter, QueueStats, RunStatus

if TYPE_CHECKING:  # the service's schemas are imported when a service is asked, the
    # inspection's modules when a database is
    from tidings.runtime.inspection import PushDeadLetter
    from tidings.service.schemas import DeadLetterOut, PushDeadLetterOut, QueueStatsOut


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
    if not table.row_count and not table.caption:
        table.caption = "(none)"
    console.print(table)


def _stats_table(title: str, rows: list[QueueStats | QueueStatsOut]) -> Table:
    numbers = ("backlog", "ready", "leased", "oldest age", "retried", "max attempts",
               "dead letters")
    table = _table(title, "conversation", *numbers, right=numbers)
    for s in rows:
        age = "-" if s.oldest_age_us is None else f"{s.oldest_age_us / 1e6:.1f}s"
        table.add_row(s.conversation_id or "(all)", str(s.backlog), str(s.ready), str(s.leased),
                      age, str(s.retried), str(s.max_attempts), str(s.dead_letters))
    return table


@dataclass(frozen=True, slots=True)
class Seen:
    """What ``status`` shows, read from a database or from a service, as rows."""

    stats: QueueStats | QueueStatsOut
    instances: Sequence[tuple[str, str, int]]
    """Instance id, state, last heartbeat."""
    tasks: Sequence[tuple[str, str, str, int | None, str]]
    """Conversation, task, state, started at, command."""
    runs: Sequence[tuple[str, str, str, str, int | None]]
    """Conversation, run, status, trigger, started at."""
    note: str = ""
    """Why a table is empty although it need not be (a principal's token sees no instances)."""


def _run_label(status: RunStatus) -> str:
    return status.value + (" (see its approvals)" if status is RunStatus.AWAITING_APPROVAL
                           else "")


async def _seen_in(database: str, conversation: str | None) -> Seen:
    from tidings.runtime.inspection import Inspection, shown_status

    async with await Inspection.open(database, conversation) as inspection:
        seen = await inspection.status(conversation)
    report, now = seen.report, SystemClock().now_us()
    return Seen(
        seen.stats,
        [(i.instance_id, "stopped" if i.stopped_at_us is not None
          else "silent (gone?)" if now - i.heartbeat_at_us > seen.instance_timeout_us
          else "live", i.heartbeat_at_us) for i in report.instances],
        [(t.conversation_id, t.task_key, "running", t.started_at_us, t.command)
         for t in report.running_tasks]
        + [(o.conversation_id, o.task_key, "instance gone (lost at the next sweep)", None, "")
           for o in report.orphaned_tasks],
        [(r.conversation_id, r.run_id, _run_label(shown_status(r)), r.trigger.value,
          r.started_at_us) for r in report.open_runs])


async def _seen_at(url: str, token: str, conversation: str | None) -> Seen:
    """The same, from a service: its signal stats and instances (an operator's token), and
    each conversation's open runs and running tasks (every conversation the token sees)."""
    from tidings.client import Client, ServiceError

    async with Client(url, token) as client:
        try:
            stats: QueueStats | QueueStatsOut | None = await client.signals.stats(
                conversation)
        except ServiceError as exc:
            if exc.status != 403:
                raise
            stats = None  # every conversation's are an operator's: the token's own, summed
        note = ""
        try:
            instances = [(i.instance_id, "silent (gone?)" if i.state == "silent" else i.state,
                          i.heartbeat_at_us) for i in await client.instances()]
        except ServiceError as exc:
            if exc.status != 403:
                raise
            instances, note = [], "instances: an operator's token shows them"
        conversations = [conversation] if conversation is not None else []
        after: str | None = ""
        while conversation is None and after is not None:
            page = await client.conversations.list(after=after)
            conversations += [c.conversation_id for c in page.items]
            after = page.next_after
        tasks: list[tuple[str, str, str, int | None, str]] = []
        runs: list[tuple[str, str, str, str, int | None]] = []
        for conv in conversations:
            tasks += [(conv, t.task_key, t.state, t.started_at_us, t.command)
                      for t in (await client.tasks.list(conv)).items if t.state == "running"]
            runs += [(conv, r.run_id, _run_label(r.status), r.trigger, r.started_at_us)
                     for r in await client.runs.list(conv) if not r.status.ended]
        if stats is None:
            stats = _summed([await client.signals.stats(conv) for conv in conversations])
    return Seen(stats, instances, tasks, runs, note)


def _summed(each: Sequence[QueueStatsOut]) -> QueueStats:
    """Several conversations' signal stats as one row."""
    ages = [s.oldest_age_us for s in each if s.oldest_age_us is not None]
    return QueueStats(
        conversation_id=None, backlog=sum(s.backlog for s in each),
        ready=sum(s.ready for s in each), leased=sum(s.leased for s in each),
        oldest_age_us=max(ages) if ages else None, retried=sum(s.retried for s in each),
        max_attempts=max((s.max_attempts for s in each), default=0),
        dead_letters=sum(s.dead_letters for s in each))


def reach_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--database``, or ``--url`` and ``--token``: a database read directly, or a service."""
    for option in reversed((
        click.option("--database", default=None,
                     help="Read this database directly: a SQLite file path (or "
                          "sqlite:///path), or postgresql://…"),
        click.option("--url", envvar="TIDINGS_URL", default=None,
                     help=f"Or ask a service at this base URL (or $TIDINGS_URL; default "
                          f"{DEFAULT_URL})."),
        click.option("--token", envvar="TIDINGS_TOKEN", default=None,
                     help="A bearer token for --url (or $TIDINGS_TOKEN): an operator's sees "
                          "every conversation, a principal's its own."),
    )):
        command = option(command)
    return command


def _reach(database: str | None, url: str | None, token: str | None) -> tuple[str, str] | None:
    """None: the database (checked); else the service's URL and token."""
    if database is not None:
        if click.get_current_context().get_parameter_source("url") is \
                click.core.ParameterSource.COMMANDLINE:
            raise click.UsageError("give --url (a service) or --database, not both")
        _check_database(database)
        return None
    if not token:
        raise click.UsageError("give --database, or --url and --token (or $TIDINGS_TOKEN) to "
                               "ask a service")
    return url or DEFAULT_URL, token


@main.command()
@reach_options
@click.option("--conversation", default=None, help="One conversation (default: all).")
def status(database: str | None, url: str | None, token: str | None,
           conversation: str | None) -> None:
    """Show backlog, oldest age, retries, dead letters, open runs (running, or awaiting a
    person's approval), running tasks and instances -- of a database, or of a service."""
    service = _reach(database, url, token)

    async def run() -> Seen:
        if service is None:
            assert database is not None
            return await _seen_in(database, conversation)
        return await _seen_at(*service, conversation)

    seen = run_async(run)
    now = SystemClock().now_us()
    _print(_stats_table("signals", [seen.stats]))
    table = _table("instances (live, or gone and not yet reconciled)", "instance", "state",
                   "last heartbeat")
    for instance_id, state, heartbeat_us in seen.instances:
        table.add_row(instance_id, state, _age(heartbeat_us, now) + " ago")
    if seen.note and not seen.instances:
        table.caption = "(none shown)"
    _print(table)
    if seen.note:
        console.print(f"[dim]{seen.note}[/]", highlight=False, soft_wrap=True)

    table = _table("running tasks", "conversation", "task", "state", "age", "command")
    for conv, task_key, state, started_us, command in seen.tasks:
        table.add_row(conv, task_key, state, _age(started_us, now), command[:60])
    _print(table)

    table = _table("open runs", "conversation", "run", "status", "trigger", "age")
    for conv, run_id, label, trigger, started_us in seen.runs:
        table.add_row(conv, run_id, label, trigger, _age(started_us, now))
    _print(table)
    if seen.stats.dead_letters:
        where = f"--database {redact(database)}" if database is not None else (
            f"--url {url or DEFAULT_URL}")
        scope = f" --conversation {conversation}" if conversation else ""
        console.print(f"{seen.stats.dead_letters} dead letter(s): tidings dead-letters "
                      f"{where}{scope}", highlight=False)


def _push_table(letters: Sequence[PushDeadLetter | PushDeadLetterOut]) -> None:
    from tidings.runtime.inspection import PushDeadLetter

    table = _table(f"webhook dead letters ({len(letters)})", "delivery", "notification",
                   "context", "config", "attempts", "code", "dead since")
    now = SystemClock().now_us()
    for d in letters:
        context = d.conversation_id if isinstance(d, PushDeadLetter) else d.context_id
        table.add_row(str(d.delivery_id), f"{d.task_id}.{d.event_seq}", context,
                      d.config_id, str(d.attempts), d.failure_code,
                      _age(d.settled_at_us, now) + " ago")
    _print(table)


@main.command("dead-letters")
@reach_options
@click.option("--conversation", default=None, help="One conversation (default: all).")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@click.option("--webhooks", is_flag=True,
              help="A2A push notifications that failed for good, instead of signals.")
def dead_letters(database: str | None, url: str | None, token: str | None,
                 conversation: str | None, limit: int, webhooks: bool) -> None:
    """List dead letters: deliveries that failed for good (nothing replays them) -- of a
    database, or of a service (an operator's token)."""
    service = _reach(database, url, token)

    async def run() -> tuple[Sequence[DeadLetter | DeadLetterOut],
                             Sequence[PushDeadLetter | PushDeadLetterOut]]:
        """The signals' dead letters, or (``--webhooks``) the push notifications'."""
        if service is not None:
            from tidings.client import Client

            async with Client(*service) as client:
                if webhooks:
                    return [], await client.signals.push_dead_letters(limit=limit)
                return [d for d in await client.signals.dead_letters(limit=limit)
                        if conversation is None or d.conversation_id == conversation], []
        assert database is not None
        from tidings.runtime.inspection import Inspection

        async with await Inspection.open(database, conversation) as inspection:
            if webhooks:
                return [], await inspection.push_dead_letters(limit=limit)
            return await inspection.dead_letters(conversation, limit=limit), []

    letters, pushed = run_async(run)
    if webhooks:
        _push_table(pushed)
        return
    table = _table(f"dead letters ({len(letters)})", "delivery", "event", "conversation",
                   "type", "attempts", "code", "dead since")
    now = SystemClock().now_us()
    for d in letters:
        table.add_row(str(d.delivery_id), d.event_id, d.conversation_id, d.type,
                      str(d.attempts), d.failure_code, _age(d.settled_at_us, now) + " ago")
    _print(table)
