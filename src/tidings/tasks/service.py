"""Background tasks end to end: a tool starts a process, the journal records it, its end is
sealed as a result envelope and recorded in the journal, and the conversation is woken.

The process's end is one unit on the task's conversation: the output sealed (R1), the terminal
state recorded with its event id (T2), and -- if the conversation's slot is free and the
notification is due -- the notice delivered (T3, T4). When a turn holds the slot, that turn
delivers at its next safe point instead. After the commit, the coordinator is asked for a
turn; the wake-up is a hint, and the sweep re-finds what it misses.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from tidings.clock import Clock
from tidings.errors import InvalidInputError, UnknownTaskError
from tidings.metrics import Metrics
from tidings.results import Results
from tidings.store import Store, Tx
from tidings.tasks import journal
from tidings.tasks.notify import EXCERPT_LIMIT_BYTES, Notify, TaskState
from tidings.tasks.supervisor import (
    HOST,
    ProcessOutcome,
    ProcessSpec,
    ProcessState,
    Supervisor,
    kill_left_behind,
    process_identity,
)
from tidings.tools.registry import ToolContext
from tidings.transcript import ConversationTx
from tidings.types import ConversationId

log = logging.getLogger("tidings.tasks")

_STATES = {
    ProcessState.EXITED: TaskState.EXITED,
    ProcessState.FAILED: TaskState.FAILED,
    ProcessState.TIMED_OUT: TaskState.TIMED_OUT,
    ProcessState.KILLED: TaskState.KILLED,
}


StartWith = Callable[[ConversationId, Callable[[ConversationTx], bool]], Awaitable[bool]]
"""Runs a write on the locked conversation in the unit that starts its woken turn."""


@dataclass(frozen=True, slots=True)
class StartedTask:
    task_key: str
    pid: int | None


class BackgroundTasks:
    """Starts background processes for tools and journals how they end."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        supervisor: Supervisor,
        instance_id: str,
        *,
        results: Callable[[], Results | None],
        start_with: StartWith,
        metrics: Metrics | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.supervisor = supervisor
        self.instance_id = instance_id
        self._results = results
        self.metrics = metrics
        self._start_with = start_with
        self.observers: list[Callable[[str, ProcessOutcome], None]] = []
        """Called with each task's key and outcome as its process ends (metrics, benchmarks)."""
        self._journalled: dict[str, asyncio.Future[None]] = {}

    async def start(
        self,
        context: ToolContext,
        spec: ProcessSpec,
        *,
        notify: Notify = Notify.ON_EXIT,
        lifetime: str = "conversation",
    ) -> StartedTask:
        """Journal the task, then start its process. The tool's result (which names the task
        key) is committed by the turn; that commit marks the task ``committed``.

        A ``conversation`` task's notification is handed off at once: it reaches the
        conversation whenever it ends. A ``turn`` task belongs to its turn until the turn hands
        it off -- in a synthesis round before its reply is final, or as the turn ends.
        """
        if lifetime not in ("turn", "conversation"):
            raise ValueError(f"unknown task lifetime {lifetime!r}")
        task_key = f"bg-{secrets.token_hex(4)}"
        conversation_id = context.conversation_id

        def record(tx: Tx) -> None:
            cx = ConversationTx.lock(tx, conversation_id, self.clock)
            journal.start(
                cx, task_key=task_key, command=spec.describe(), instance_id=self.instance_id,
                run_id=context.run_id, call_id=context.call_id, notify=notify,
                lifetime=lifetime, handed_off=lifetime == "conversation",
            )
            cx.save()

        await self.store.transact(record, route=conversation_id)
        self._journalled[task_key] = asyncio.get_running_loop().create_future()

        async def ended(outcome: ProcessOutcome) -> None:
            try:
                await self._ended(conversation_id, task_key, outcome)
            finally:
                done = self._journalled.pop(task_key, None)
                if done is not None and not done.done():
                    done.set_result(None)

        running = await self.supervisor.start(spec, task_key=task_key, on_exit=ended)
        if running.pid is not None and running.outcome is None:
            pid, identity = running.pid, process_identity(running.pid)

            def where(tx: Tx) -> None:
                cx = ConversationTx.lock(tx, conversation_id, self.clock)
                task = journal.get(cx, task_key)
                if task is not None:
                    journal.record_process(cx, task, pid=pid, host=HOST, identity=identity)
                cx.save()

            try:
                await self.store.transact(where, route=conversation_id)
            except asyncio.CancelledError:
                raise
            except Exception:
                # Only the clean-up of a crash depends on it: the task itself goes on.
                log.exception("could not record the process of task %s", task_key)
        return StartedTask(task_key, running.pid)

    async def wait_journalled(self, task_keys: Sequence[str], within: float) -> bool:
        """Wait until the ends of these tasks (those this runtime runs) are journalled, at
        most ``within`` seconds. Returns whether all were."""
        waiting = [self._journalled[k] for k in task_keys if k in self._journalled]
        if not waiting:
            return True
        done, _ = await asyncio.wait(waiting, timeout=within)
        return len(done) == len(waiting)

    async def list(
        self, conversation_id: str, *, before_us: int | None = None, limit: int = 100
    ) -> list[journal.TaskRecord]:
        """A conversation's tasks, newest first (page with the last one's ``started_at_us``)."""
        if not 1 <= limit <= 1_000:
            raise InvalidInputError("limit must be between 1 and 1000")
        rows = await self.store.read(lambda tx: tx.all(
            "conversation_tasks", conversation_id=conversation_id,
            before_us=2**62 if before_us is None else before_us, limit=limit,
        ))
        return [journal.task_from_row(r) for r in rows]

    async def get(self, conversation_id: str, task_key: str) -> journal.TaskRecord:
        row = await self.store.read(
            lambda tx: tx.one("get_task", conversation_id=conversation_id, task_key=task_key)
        )
        if row is None:
            raise UnknownTaskError(task_key)
        return journal.task_from_row(row)

    def kill(self, task_keys: Sequence[str]) -> None:
        """Kill the processes of these tasks (their ends are journalled as ``killed``)."""
        for task_key in task_keys:
            running = self.supervisor.get(task_key)
            if running is not None:
                running.kill()

    async def _ended(
        self, conversation_id: ConversationId, task_key: str, outcome: ProcessOutcome
    ) -> None:
        for observe in self.observers:
            try:
                observe(task_key, outcome)
            except Exception:
                log.exception("a task observer failed")
        results = self._results()
        output = outcome.stdout.head + outcome.stdout.tail
        excerpt = outcome.stdout.excerpt(EXCERPT_LIMIT_BYTES)
        if outcome.stderr.total_bytes:
            excerpt = (excerpt + b"\n[stderr]\n" + outcome.stderr.excerpt(EXCERPT_LIMIT_BYTES // 2))

        def record(cx: ConversationTx) -> bool:
            task = journal.get(cx, task_key)
            if task is None:
                return False
            ref = None if results is None else results.seal(
                cx.tx, conversation_id, output, task_key=task_key, run_id=task.run_id
            )
            after = journal.finish(
                cx, task, state=_STATES[outcome.state], exit_code=outcome.exit_code,
                signal=outcome.signal_name, result_id=None if ref is None else ref.result_id,
                stdout_bytes=outcome.stdout.total_bytes, stderr_bytes=outcome.stderr.total_bytes,
                excerpt=excerpt[:EXCERPT_LIMIT_BYTES * 2],
                excerpt_truncated=outcome.stdout.truncated or len(excerpt) > EXCERPT_LIMIT_BYTES,
                duration_ms=int(outcome.duration.total_seconds() * 1000),
                deliver=cx.slot_free(),
            )
            return after.delivered or not cx.slot_free()

        try:
            # The end, its notification and the woken turn's start commit together.
            await self._start_with(conversation_id, record)
        except Exception:
            # Nothing is lost: the task stays running in the journal and becomes ``lost`` when
            # this instance is reconciled.
            log.exception("could not record the end of task %s", task_key)
            return
        if self.metrics is not None:
            self.metrics.observe(
                "tidings_task_end_recorded_seconds",
                "From a background process's exit to its end (and notification, when due) "
                "committed.",
                max(0, self.clock.now_us() - outcome.ended_at_us) / 1e6,
            )
            self.metrics.count(
                "tidings_tasks_ended_total", "Background tasks ended, by state.",
                labels={"state": outcome.state.value},
            )

    async def reconcile_lost(self, *, limit: int = 500) -> int:
        """Tasks whose instance is gone are ``lost`` -- never a success, never re-run (T9).

        Their notification is delivered like any other (at a safe point), so the model learns
        that the outcome is unknown. Returns how many were marked.
        """
        rows = await self.store.read(
            lambda tx: tx.all("orphaned_tasks", instance_id=self.instance_id, limit=limit)
        )
        marked = 0
        for row in rows:
            conversation_id = ConversationId(row["conversation_id"])
            task_key = str(row["task_key"])
            # What the gone runtime left running is stopped, not adopted: its outcome cannot be
            # known any more, and nothing re-runs it.
            if (
                row["pid"] is not None and row["host"] == HOST
                and kill_left_behind(int(row["pid"]), row["process_started"])
            ):
                log.info("killed the process left behind by task %s", task_key)

            def lose(cx: ConversationTx, task_key: str = task_key) -> bool:
                task = journal.get(cx, task_key)
                if task is None or task.state is not TaskState.RUNNING:
                    return False
                # A turn-lifetime task's turn is over: its notification goes to the
                # conversation.
                task = journal.hand_off(cx, task, deliver=False)
                journal.finish(cx, task, state=TaskState.LOST, deliver=cx.slot_free())
                return True

            if await self._start_with(conversation_id, lose):
                marked += 1
        return marked
