"""Background tasks end to end: a tool starts a process, the journal records it, its end is
sealed as a result envelope and recorded in the journal, and the conversation is woken.

:class:`BackgroundTasks` starts the processes (and journals MCP servers' tasks) and answers
what is read of tasks; how they end -- one unit per end, retried after store faults, and the
tasks of gone instances -- is :mod:`tidings.tasks.ends`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

from tidings.clock import Clock
from tidings.errors import InvalidInputError, UnknownTaskError
from tidings.records.results import Results, ResultsConfig
from tidings.records.transcript import ConversationTx
from tidings.store import Store, Tx
from tidings.support.metrics import Metrics
from tidings.support.tracing import Tracing
from tidings.tasks import journal
from tidings.tasks.ends import (
    CLOSING_ATTEMPTS,
    END_RETRY_BASE,
    END_RETRY_CAP,
    RemoteTasks,
    StartWith,
    TaskEnd,
    TaskEnds,
)
from tidings.tasks.notify import Notify
from tidings.tasks.spans import task_ended, task_span
from tidings.tasks.supervisor import (
    HOST,
    ProcessOutcome,
    ProcessSpec,
    Supervisor,
    process_identity,
)
from tidings.types import ToolContext

log = logging.getLogger("tidings.tasks")


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
        end_retry_base: timedelta = END_RETRY_BASE,
        end_retry_cap: timedelta = END_RETRY_CAP,
        rng: random.Random | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.store = store
        self.tracing = tracing or Tracing()
        """A span per task, from its process's start to its end (see
        :func:`~tidings.tasks.spans.task_span`)."""
        self.clock = clock
        self.supervisor = supervisor
        self.instance_id = instance_id
        self._results = results
        self.metrics = metrics
        self.ends = TaskEnds(
            store, clock, instance_id, results=results, limit_bytes=self.output_limit_bytes,
            start_with=start_with, metrics=metrics, tracing=self.tracing,
            end_retry_base=end_retry_base, end_retry_cap=end_retry_cap, rng=rng,
        )
        self.observers: list[Callable[[str, ProcessOutcome], None]] = self.ends.observers
        """Called with each task's key and outcome as its process ends (metrics, benchmarks)."""
        self._journalled: dict[str, asyncio.Future[None]] = {}
        """The tasks this runtime runs whose ends are not journalled yet: each future is set
        once its end is (see :meth:`wait_journalled`)."""

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
        # Keep as much output as its result envelope can hold (R1): whole up to that bound,
        # head and tail beyond it, with every dropped byte counted and stated.
        spec = replace(spec, capture_limit_bytes=self.output_limit_bytes())
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
        span = task_span(self.tracing, context.conversation_id, context.run_id, task_key,
                          call_id=context.call_id, lifetime=lifetime)

        async def ended(outcome: ProcessOutcome) -> None:
            task_ended(span, outcome)
            try:
                await self.ends.ended(conversation_id, task_key, outcome)
            finally:
                done = self._journalled.pop(task_key, None)
                if done is not None and not done.done():
                    done.set_result(None)

        try:
            running = await self.supervisor.start(spec, task_key=task_key, on_exit=ended)
        except BaseException as exc:
            span.record(exc)
            span.end()
            raise
        if running.pid is not None and running.outcome is None:
            pid, identity = running.pid, process_identity(running.pid)

            def where(tx: Tx) -> None:
                cx = ConversationTx.lock(tx, conversation_id, self.clock,
                                         ahead=journal.get_ahead(conversation_id, task_key))
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

    async def start_remote(
        self, context: ToolContext, *, server: str, tool: str, mcp_task_id: str,
    ) -> str:
        """Journal a task whose work an MCP server runs under ``mcp_task_id`` (B5), with that
        id, in one unit; returns its task key. Like a process's task it is committed by the
        turn that commits the call's result, and notifies on its end (:meth:`record_end`)."""
        task_key = f"bg-{secrets.token_hex(4)}"
        conversation_id = context.conversation_id

        def record(tx: Tx) -> None:
            cx = ConversationTx.lock(tx, conversation_id, self.clock)
            task_id = journal.start(
                cx, task_key=task_key, command=f"{server}.{tool}", instance_id=self.instance_id,
                run_id=context.run_id, call_id=context.call_id,
            )
            journal.record_mcp_task(cx, task_id, server=server, tool=tool,
                                    mcp_task_id=mcp_task_id)
            cx.save()

        await self.store.transact(record, route=conversation_id)
        self.ends.remote_spans[task_key] = task_span(
            self.tracing, conversation_id, context.run_id, task_key, call_id=context.call_id,
            lifetime="conversation")
        return task_key

    def output_limit_bytes(self) -> int:
        """How many bytes of a task's output are kept: what its result envelope can hold."""
        results = self._results()
        return (results.config if results is not None else ResultsConfig()).limit_bytes

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


__all__ = (
    "CLOSING_ATTEMPTS", "END_RETRY_BASE", "END_RETRY_CAP", "BackgroundTasks", "RemoteTasks",
    "StartWith", "StartedTask", "TaskEnd",
)
