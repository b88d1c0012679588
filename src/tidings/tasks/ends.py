"""How background tasks end: a process's end, a remote task's report, and the tasks of a gone
instance, each journalled in one unit on the task's conversation.

The end is that one unit: the output sealed (R1), the terminal state recorded with its event id
(T2), and -- if the conversation's slot is free and the notification is due -- the notice
delivered through the door and read by the woken turn, whose start is in the same unit (T3, T4,
H1). When a turn holds the slot, that turn delivers at its next safe point instead. After the
commit, the coordinator is asked for a turn; the wake-up is a hint, and the sweep re-finds what
it misses.

A store fault while recording the end (a busy database, a lost connection) does not leave the
task running until the instance dies (H3): the unit is tried again with capped exponential
backoff until it commits. The unit is idempotent -- a task already terminal is left as it is,
with no second envelope, state or notice -- so a retry after a commit whose outcome was unknown
(and which did land) changes nothing.

A task whose instance is gone ends ``lost`` (T9), unless it is an MCP server's task that this
runtime can follow: then it is adopted (B5).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Protocol

from tidings.clock import Clock
from tidings.errors import CorruptDatabaseError, IntegrityViolationError, StoreError
from tidings.records.results import Results
from tidings.records.transcript import ConversationTx
from tidings.store import Store, Tx
from tidings.support.lifetime import Loop
from tidings.support.metrics import Metrics
from tidings.support.policy import backoff
from tidings.support.tracing import Span, Tracing
from tidings.tasks import capture, journal
from tidings.tasks.capture import Capture
from tidings.tasks.notify import EXCERPT_LIMIT_BYTES, TaskState
from tidings.tasks.spans import lost_span, task_span
from tidings.tasks.supervisor import HOST, ProcessOutcome, ProcessState, kill_left_behind
from tidings.types import ConversationId

log = logging.getLogger("tidings.tasks")

_STATES = {
    ProcessState.EXITED: TaskState.EXITED,
    ProcessState.FAILED: TaskState.FAILED,
    ProcessState.TIMED_OUT: TaskState.TIMED_OUT,
    ProcessState.KILLED: TaskState.KILLED,
}


StartWith = Callable[
    [ConversationId, Callable[[ConversationTx], bool], Callable[[Tx], None]], Awaitable[bool]
]
"""Runs a write on the locked conversation in the unit that starts its woken turn; the third
argument says, before the lock, what the write reads first (:meth:`Tx.read_ahead`)."""

END_RETRY_BASE = timedelta(milliseconds=50)
END_RETRY_CAP = timedelta(seconds=5)
CLOSING_ATTEMPTS = 3
"""How many more times an end is tried once the runtime is closing: a shutdown is not held up
by a database that stays down (the task is then ``lost`` when the instance is reconciled)."""


def _worth_retrying(exc: StoreError) -> bool:
    """A store fault that can pass (busy, connection lost, commit outcome unknown, disk full,
    a shared transaction rolled back); not a refusal that would repeat."""
    return not isinstance(exc, IntegrityViolationError | CorruptDatabaseError)


@dataclass(frozen=True, slots=True)
class TaskEnd:
    """How a task ended, as the runtime observed it: its process's exit, or what the MCP server
    that ran it reported. ``stdout`` and ``stderr`` are its output, already bounded.
    ``duration_ms`` None: from the task's start in the journal to the end's record."""

    state: TaskState
    exit_code: int | None = None
    signal: str | None = None
    stdout: Capture = field(default_factory=Capture)
    stderr: Capture = field(default_factory=Capture)
    duration_ms: int | None = None


class RemoteTasks(Protocol):
    """Who follows tasks whose work runs outside this runtime (an MCP server's tasks, B5)."""

    def follows(self, server: str) -> bool:
        """Whether this runtime can follow a task of ``server``."""
        ...

    def follow(self, task: journal.TaskRecord) -> None:
        """Follow ``task`` (adopted from a gone instance) to its end."""
        ...


class TaskEnds(Loop):
    """Journals how tasks end (see the module's docstring), and finds the tasks of gone
    instances. A component of the runtime with no work of its own to run: its shutdown cuts the
    retries of ends still failing short (:meth:`close`), before the supervisor stops the
    processes."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        instance_id: str,
        *,
        results: Callable[[], Results | None],
        limit_bytes: Callable[[], int],
        start_with: StartWith,
        metrics: Metrics | None,
        tracing: Tracing,
        end_retry_base: timedelta = END_RETRY_BASE,
        end_retry_cap: timedelta = END_RETRY_CAP,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__("tidings-task-ends")
        self.store = store
        self.clock = clock
        self.instance_id = instance_id
        self._results = results
        self._limit_bytes = limit_bytes
        """How many bytes of a task's output are kept: what its result envelope can hold."""
        self._start_with = start_with
        self.metrics = metrics
        self.tracing = tracing
        self._end_retry_base = end_retry_base
        self._end_retry_cap = end_retry_cap
        self._rng = rng or random.Random()
        self._closing = asyncio.Event()
        self.observers: list[Callable[[str, ProcessOutcome], None]] = []
        """Called with each task's key and outcome as its process ends (metrics, benchmarks)."""
        self.remote_spans: dict[str, Span] = {}
        """The spans of MCP servers' tasks, ended with their ends."""

    async def ended(
        self, conversation_id: ConversationId, task_key: str, outcome: ProcessOutcome
    ) -> None:
        """A process's end: told to the observers, then recorded."""
        for observe in self.observers:
            try:
                observe(task_key, outcome)
            except Exception:
                log.exception("a task observer failed")
        end = TaskEnd(
            _STATES[outcome.state], exit_code=outcome.exit_code, signal=outcome.signal_name,
            stdout=outcome.stdout, stderr=outcome.stderr,
            duration_ms=int(outcome.duration.total_seconds() * 1000),
        )
        if await self.record_end(conversation_id, task_key, end) and self.metrics is not None:
            self.metrics.observe(
                "tidings_task_end_recorded_seconds",
                "From a background process's exit to its end (and notification, when due) "
                "committed.",
                max(0, self.clock.now_us() - outcome.ended_at_us) / 1e6,
            )

    async def record_end(
        self, conversation_id: ConversationId, task_key: str, end: TaskEnd
    ) -> bool:
        """Record how a task ended -- its output sealed as a result envelope (R1), its terminal
        state with its event id (T2), and its notification when due, with the woken turn's
        start -- in one unit, tried again after store faults. Whether this call recorded it:
        a task already terminal is left as it is (the first end stands) and answers False,
        unless that end is this call's own, from an attempt whose commit outcome was unknown
        but which did land. Only an end this call recorded is counted."""
        results = self._results()
        output, dropped = capture.envelope(end.stdout, end.stderr, self._limit_bytes())
        excerpt, excerpt_truncated = capture.excerpt(end.stdout, end.stderr, EXCERPT_LIMIT_BYTES)
        attempted: set[str] = set()
        """The event ids this call's attempts gave the end: one found stored is its own."""

        def record(cx: ConversationTx) -> bool:
            task = journal.get(cx, task_key)
            if task is None:
                return False
            if task.state.terminal:
                # Recorded already -- by an attempt of this call whose commit did land, or by
                # someone else (a reconcile that lost it, a second report): the first terminal
                # state stands, nothing is sealed twice.
                return task.event_id in attempted
            ref = None if results is None else results.seal(
                cx.tx, conversation_id, output, task_key=task_key, run_id=task.run_id,
                dropped=dropped,
            )
            duration_ms = end.duration_ms
            if duration_ms is None:
                duration_ms = max(0, cx.now_us - task.started_at_us) // 1000
            after = journal.finish(
                cx, task, state=end.state, exit_code=end.exit_code, signal=end.signal,
                result_id=None if ref is None else ref.result_id,
                stdout_bytes=end.stdout.total_bytes, stderr_bytes=end.stderr.total_bytes,
                excerpt=excerpt, excerpt_truncated=excerpt_truncated, duration_ms=duration_ms,
            )
            if after.event_id is not None:
                attempted.add(after.event_id)
            return after.state.terminal

        # The end, its notification and the woken turn's start commit together.
        recorded = await self._record_end(conversation_id, task_key, record)
        span = self.remote_spans.pop(task_key, None)
        if span is not None:
            span.set({"tidings.task.state": end.state.value})
            if end.state is not TaskState.EXITED or end.exit_code != 0:
                span.fail(f"the task ended {end.state.value}", error_type=end.state.value)
            span.end()
        if recorded and self.metrics is not None:
            self.metrics.count(
                "tidings_tasks_ended_total", "Background tasks ended, by state.",
                labels={"state": end.state.value},
            )
        return recorded

    async def _record_end(
        self, conversation_id: ConversationId, task_key: str,
        record: Callable[[ConversationTx], bool],
    ) -> bool:
        """Commit ``record`` (idempotent), trying again after store faults with capped
        exponential backoff until it commits. What the committed ``record`` answered (whether
        it recorded the end); False when nothing committed.

        Only a refusal that would repeat, or a runtime that closes while the store stays
        down, gives up: the task then stays running in the journal and becomes ``lost`` when
        this instance is reconciled -- never a success.
        """
        attempt = 0
        left_when_closing = CLOSING_ATTEMPTS
        ahead = journal.get_ahead(conversation_id, task_key)
        while True:
            try:
                return await self._start_with(conversation_id, record, ahead)
            except StoreError as exc:
                attempt += 1
                if self._closing.is_set():
                    left_when_closing -= 1
                if not _worth_retrying(exc) or left_when_closing <= 0:
                    log.error("could not record the end of task %s: %s", task_key, exc)
                    return False
                delay = backoff(
                    attempt, self._rng, base=self._end_retry_base, cap=self._end_retry_cap
                ).total_seconds()
                log.warning("could not record the end of task %s (attempt %d): %s; trying "
                            "again in %.2f s", task_key, attempt, exc, delay)
                await self.clock.wait(self._closing, delay)
            except Exception:
                log.exception("could not record the end of task %s", task_key)
                return False

    def close(self) -> None:
        """The runtime is closing: ends still failing to commit are tried only a few more
        times, at once, so that the shutdown is not held up. Idempotent."""
        self._closing.set()

    async def stopping(self) -> None:
        self.close()

    async def reconcile_lost(
        self, *, remote: RemoteTasks | None = None, limit: int = 500
    ) -> int:
        """Tasks whose instance is gone are ``lost`` -- never a success, never re-run (T9).

        Their notification is delivered like any other (at a safe point), so the model learns
        that the outcome is unknown. Returns how many were marked.

        An MCP server's task is not lost with the runtime that started it: its work runs on the
        server. When this runtime declares that server, it adopts the task and follows it by its
        stored task id (B5); the server's answer then says how it ended -- and a task the server
        no longer knows is lost.
        """
        rows = await self.store.read(
            lambda tx: tx.all("orphaned_tasks", instance_id=self.instance_id, limit=limit)
        )
        marked = 0
        for row in rows:
            conversation_id = ConversationId(row["conversation_id"])
            task_key = str(row["task_key"])
            gone = str(row["instance_id"])
            if (row["mcp_task_id"] is not None and remote is not None
                    and remote.follows(str(row["mcp_server"]))):
                await self._adopt(conversation_id, task_key, gone, remote)
                continue
            # What the gone runtime left running is stopped, not adopted: its outcome cannot be
            # known any more, and nothing re-runs it.
            if (
                row["pid"] is not None and row["host"] == HOST
                and kill_left_behind(int(row["pid"]), row["process_started"])
            ):
                log.info("killed the process left behind by task %s", task_key)

            lost: list[journal.TaskRecord] = []

            def lose(
                cx: ConversationTx, task_key: str = task_key,
                lost: list[journal.TaskRecord] = lost, gone: str = gone,
            ) -> bool:
                task = journal.get(cx, task_key)
                if task is None or task.state is not TaskState.RUNNING or (
                    task.instance_id != gone
                ):
                    return False  # ended, or adopted by a live instance meanwhile
                lost.append(task)
                # A turn-lifetime task's turn is over: its notification goes to the
                # conversation.
                task = journal.hand_off(cx, task)
                journal.finish(cx, task, state=TaskState.LOST)
                return True

            if await self._start_with(
                conversation_id, lose,
                journal.get_ahead(conversation_id, task_key),
            ):
                marked += 1
                lost_span(self.tracing, lost[-1])
        return marked

    async def _adopt(
        self, conversation_id: ConversationId, task_key: str, gone: str, remote: RemoteTasks
    ) -> None:
        """Take over following a gone instance's MCP task (only one live instance does), and
        follow it once that is committed."""

        def adopt(tx: Tx) -> journal.TaskRecord | None:
            cx = ConversationTx.lock(tx, conversation_id, self.clock,
                                     ahead=journal.get_ahead(conversation_id, task_key))
            task = journal.get(cx, task_key)
            adopted = task is not None and journal.adopt(
                cx, task, gone_instance_id=gone, instance_id=self.instance_id)
            cx.save()
            return task if adopted else None

        task = await self.store.transact(adopt, route=conversation_id)
        if task is None:
            return  # another instance adopted it, or it ended meanwhile
        log.info("following MCP task %s of task %s again after its runtime was gone",
                 task.mcp_task_id, task_key)
        span = task_span(self.tracing, task.conversation_id, task.run_id, task_key,
                          call_id=task.call_id, lifetime=task.lifetime,
                          start_time_us=task.started_at_us)
        self.remote_spans[task_key] = span
        remote.follow(replace(task, instance_id=self.instance_id))


__all__ = (
    "CLOSING_ATTEMPTS", "END_RETRY_BASE", "END_RETRY_CAP", "RemoteTasks", "StartWith", "TaskEnd",
    "TaskEnds",
)
