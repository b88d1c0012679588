"""The command line. The only place ``asyncio.run`` appears."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import click
from rich.console import Console
from rich.table import Table

from tidings import __version__
from tidings.demo import conversations_demo
from tidings.errors import StaleLeaseError, TidingsError
from tidings.outbox import Outbox, OutboxConfig
from tidings.store import Tx, open_store
from tidings.types import QueueStats

T = TypeVar("T")
console = Console()


def _run(main: Callable[[], Awaitable[T]]) -> T:
    try:
        return asyncio.run(main())  # type: ignore[arg-type]
    except TidingsError as exc:
        raise click.ClickException(f"{exc.code}: {exc.message}") from None


@click.group()
@click.version_option(__version__, prog_name="tidings")
def main() -> None:
    """tidings: the durable kernel of an LLM-agent runtime."""


def _stats_table(title: str, rows: list[QueueStats]) -> Table:
    table = Table(title=title)
    for column in ("conversation", "backlog", "ready", "leased", "oldest age", "retried",
                   "dead letters"):
        table.add_column(column, justify="left" if column == "conversation" else "right")
    for s in rows:
        age = "-" if s.oldest_age_us is None else f"{s.oldest_age_us / 1e6:.1f}s"
        table.add_row(s.conversation_id or "(all)", str(s.backlog), str(s.ready), str(s.leased),
                      age, str(s.retried), str(s.dead_letters))
    return table


@main.command()
@click.option("--database", default=None,
              help="Database URL (default: a new SQLite file in a temporary folder).")
def demo(database: str | None) -> None:
    """Run the durable-signal promise end to end, offline, on the embedded default."""

    async def run(url: str) -> None:
        config = OutboxConfig(max_attempts=3, backlog_limit=100, lease_ttl=timedelta(seconds=1),
                              backoff_base=timedelta(milliseconds=50),
                              backoff_cap=timedelta(milliseconds=200))
        conversations = ["conv-alpha", "conv-beta", "conv-gamma"]
        async with Outbox.open(url, config=config) as outbox:
            console.rule("[bold]1. background work finishes; its facts are published")
            console.print(f"instance {outbox.instance_id} on {url}")

            def finish_tasks(tx: Tx) -> list[str]:
                lines = []
                for number, conversation in enumerate(conversations):
                    op = outbox.accept(tx, "background_task", conversation,
                                       idempotency_key=f"task-{number}")
                    outbox.complete(tx, op.operation_id, {"exit_code": 0})
                    for step in range(3):
                        outbox.publish(tx, conversation, "task.exited",
                                       {"task_key": f"t{number}", "step": step},
                                       idempotency_key=f"task-{number}-exit-{step}",
                                       operation_id=op.operation_id)
                    lines.append(f"{conversation}: operation {op.operation_id} completed, "
                                 "3 signals published in the same transaction")
                return lines

            for line in await outbox.store.transact(finish_tasks):
                console.print("  " + line)
            again = await outbox.store.transact(
                lambda tx: outbox.publish(tx, "conv-alpha", "task.exited",
                                          {"task_key": "t0", "step": 0},
                                          idempotency_key="task-0-exit-0"))
            console.print(f"  publishing task-0-exit-0 again returns the first event "
                          f"(created={again.created})")
            console.print(_stats_table("backlog", [await outbox.stats(c) for c in conversations]))

            console.rule("[bold]2. a turn claims its conversation's signals under a lease")
            lease = await outbox.claim("conv-alpha", max_count=2, owner="run-1")
            console.print(f"  conv-alpha lease {lease.token[:8]}… holds "
                          f"{[d.payload['step'] for d in lease.deliveries]} in journal order")
            console.rule("[bold]3. the turn stalls past its lease; another claims and acks")
            await asyncio.sleep((config.lease_ttl + timedelta(milliseconds=100)).total_seconds())
            second = await outbox.claim("conv-alpha", max_count=16, owner="run-2")
            # The turn's own write (here an operation row) commits with the ack, or neither does.
            await outbox.consume(
                second, lambda tx: outbox.accept(tx, "turn", "conv-alpha"),
                failure_code="turn_failed",
            )
            console.print(f"  run-2 consumed {[d.payload['step'] for d in second.deliveries]} "
                          "with its transcript in one transaction")
            try:
                await outbox.store.transact(lambda tx: outbox.ack(tx, lease))
            except StaleLeaseError as exc:
                console.print(f"  run-1's late ack is refused: [yellow]{exc.code}[/] "
                              "(nothing changed)")

            console.rule("[bold]4. a model keeps failing: backoff, then a dead letter")
            for attempt in range(1, config.max_attempts + 1):
                failing = await outbox.claim("conv-beta", max_count=1, owner=f"run-b{attempt}")
                states = await outbox.release(failing, "model_unavailable")
                console.print(f"  attempt {attempt}: {states}")
                await asyncio.sleep(config.backoff_cap.total_seconds())
            letters = [(d.delivery_id, d.failure_code) for d in await outbox.dead_letters()]
            console.print(f"  dead letters: {letters}")

            console.rule("[bold]5. a crash: a process dies holding a lease and an operation")
            victim = await asyncio.create_subprocess_exec(
                sys.executable, "-c", _VICTIM, url, stdout=asyncio.subprocess.PIPE)
            assert victim.stdout is not None
            line = (await victim.stdout.readline()).decode().strip()
            console.print(f"  victim process {victim.pid}: {line}")
            victim.kill()  # SIGKILL: no shutdown code runs
            await victim.wait()
            report = await outbox.reconcile()
            console.print(f"  reconciled {len(report.gone_instances)} gone instance: "
                          f"{report.leases_invalidated} lease(s) voided, operations "
                          f"{list(report.operations_unknown)} now outcome_unknown "
                          "(never replayed)")
            again_lease = await outbox.claim("conv-gamma", owner="run-g2")
            console.print(f"  conv-gamma's {len(again_lease.deliveries)} signals are claimable "
                          f"again; attempt {again_lease.deliveries[0].attempts}")
            await outbox.consume(again_lease, lambda tx: None, failure_code="turn_failed")
            console.print(_stats_table("after", [await outbox.stats(c) for c in conversations]
                                       + [await outbox.stats()]))
        await conversations_demo(url, console)

    if database is None:
        with tempfile.TemporaryDirectory(prefix="tidings-demo-") as folder:
            _run(lambda: run(str(Path(folder) / "demo.db")))
    else:
        _run(lambda: run(database))


@main.command()
@click.option("--database", required=True, help="Database URL or SQLite file path.")
@click.option("--conversation", default=None, help="One conversation (default: all).")
def status(database: str, conversation: str | None) -> None:
    """Show backlog, oldest age, retries and dead letters."""

    async def run() -> None:
        # Read only: no instance is registered and nothing is reconciled.
        store = await open_store(database)
        try:
            outbox = Outbox(store)
            console.print(_stats_table("signals", [await outbox.stats(conversation)]))
            letters = await outbox.dead_letters(conversation)
            table = Table(title="dead letters")
            for column in ("delivery", "conversation", "type", "attempts", "code"):
                table.add_column(column)
            for d in letters:
                table.add_row(str(d.delivery_id), d.conversation_id, d.type, str(d.attempts),
                              d.failure_code)
            console.print(table)
        finally:
            await store.close()

    _run(run)


_VICTIM = """
import asyncio, sys
from tidings import Outbox

async def main() -> None:
    async with Outbox.open(sys.argv[1]) as outbox:
        lease = await outbox.claim("conv-gamma", owner="run-g")
        op = await outbox.store.transact(
            lambda tx: outbox.accept(tx, "shell_command", "conv-gamma"))
        print(f"holds {len(lease.deliveries)} signals and operation {op.operation_id}",
              flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""
