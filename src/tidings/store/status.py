"""What ``tidings status`` shows, read from the store as typed records.

Read only: no instance is registered and nothing is reconciled. The one instance listing the
store has locks what it returns (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, for reconcilers), so
the report is read in one unit of work that writes nothing; an instance a reconciler holds at
that moment is left out of the report.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidings.store.base import Store, Tx
from tidings.types import ConversationId, InstanceId, RunId, RunStatus, StartKind

OPEN_RUNS_LIMIT = 100
ORPHANED_TASKS_LIMIT = 100


@dataclass(frozen=True)
class InstanceSeen:
    """An instance that is live, or gone and not yet reconciled."""

    instance_id: InstanceId
    heartbeat_at_us: int
    stopped_at_us: int | None


@dataclass(frozen=True)
class RunningTask:
    """A task whose process a live (or not yet reconciled) instance runs."""

    conversation_id: ConversationId
    task_key: str
    started_at_us: int
    command: str


@dataclass(frozen=True)
class OrphanedTask:
    """A task still running in the journal whose instance is gone (lost at the next sweep)."""

    conversation_id: ConversationId
    task_key: str


@dataclass(frozen=True)
class OpenRun:
    """A run that holds its conversation's slot. ``status`` is as stored (queued or running);
    ``awaiting_approval`` says a running run holds on a call a person has not decided."""

    conversation_id: ConversationId
    run_id: RunId
    status: RunStatus
    awaiting_approval: bool
    trigger: StartKind
    started_at_us: int | None


@dataclass(frozen=True)
class StatusReport:
    """Instances, running and orphaned tasks and open runs, of one conversation or of all."""

    instances: tuple[InstanceSeen, ...]
    running_tasks: tuple[RunningTask, ...]
    orphaned_tasks: tuple[OrphanedTask, ...]
    open_runs: tuple[OpenRun, ...]


async def read_status(store: Store, conversation_id: str | None = None) -> StatusReport:
    """The report, for ``conversation_id`` only when given (instances are never filtered)."""

    def mine(row_conversation: str) -> bool:
        return conversation_id is None or row_conversation == conversation_id

    def read(tx: Tx) -> StatusReport:
        instances = tx.all("unreconciled_instances", instance_id="")
        running = [row for i in instances
                   for row in tx.all("running_tasks_of", instance_id=i["instance_id"])]
        orphaned = tx.all("orphaned_tasks", instance_id="", limit=ORPHANED_TASKS_LIMIT)
        runs = tx.all("open_runs", conversation_id=conversation_id or "", limit=OPEN_RUNS_LIMIT)
        return StatusReport(
            instances=tuple(
                InstanceSeen(InstanceId(i["instance_id"]), int(i["heartbeat_at_us"]),
                             i["stopped_at_us"])
                for i in instances
            ),
            running_tasks=tuple(
                RunningTask(ConversationId(t["conversation_id"]), t["task_key"],
                            int(t["started_at_us"]), str(t["command"]))
                for t in running if mine(t["conversation_id"])
            ),
            orphaned_tasks=tuple(
                OrphanedTask(ConversationId(t["conversation_id"]), t["task_key"])
                for t in orphaned if mine(t["conversation_id"])
            ),
            open_runs=tuple(
                OpenRun(ConversationId(r["conversation_id"]), RunId(r["run_id"]),
                        RunStatus(r["status"]), bool(r["awaiting_approval"]),
                        StartKind(r["trigger"]), r["started_at_us"])
                for r in runs
            ),
        )

    return await store.transact(read)
