"""Background tasks end to end: a tool starts a process, the journal records it, its end is
sealed as a result envelope and recorded in the journal, and the conversation is woken.

The process's end is one unit on the task's conversation: the output sealed (R1), the terminal
state recorded with its event id (T2), and -- if the conversation's slot is free and the
notification is due -- the notice delivered through the door and read by the woken turn, whose
start is in the same unit (T3, T4, H1). When a turn holds the slot, that turn delivers at its
next safe point instead. After the commit, the coordinator is asked for a
turn; the wake-up is a hint, and the sweep re-finds what it misses.

A store fault while recording the end (a busy database, a lost connection) does not leave the
task running until the instance dies (H3): the unit is tried again with capped exponential
backoff until it commits. The unit is idempotent -- a task already terminal is left as it is,
with no second envelope, state or notice -- so a retry after a commit whose outcome was unknown
(and which did land) changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

from tidings.clock import Clock
from tidings.errors import (
    CorruptDatabaseError,
    IntegrityViolationError,
    InvalidInputError,
    StoreError,
    UnknownTaskError,
)
from tidings.metrics import Metrics
from tidings.policy import backoff
from tidings.results import Results, ResultsConfig
from tidings.store import Store, Tx
from tidings.tasks import capture, journal
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
from tidings.tracing import CONVERSATION_ID, RUN_ID, Span, Tracing
from tidings.transcript import ConversationTx
from tidings.types import ConversationId, ToolContext

log = logging.getLogger("tidings.tasks")

_STATES = {
    ProcessState.EXITED: TaskState.EXITED,
    ProcessState.FAILED: TaskState.FAILED,
    ProcessState.TIMED_OUT: TaskState.TIMED_OUT,
    ProcessState.KILLED: TaskState.KILLED,
}


StartWith = Callable[[ConversationId, Callable[[ConversationTx], bool]], Awaitable[bool]]
"""Runs a write on the locked conversation in the unit that starts its woken turn."""

END_RETRY_BASE = timedelta(milliseconds=50)
END_RETRY_CAP = timedelta(seconds=5)
CLOSING_ATTEMPTS = 3
"""How many more times an end is tried once the runtime is closing: a shutdown is not held up
by a database that stays down (the task is then ``lost`` when the instance is reconciled)."""


def _worth_retrying(exc: StoreError) -> bool:
    """A store fault that can pass (busy, connection lost, commit outcome unknown, disk full,
    a shared transaction rolled back); not a refusal that would repeat."""
    return not isinstance(exc, IntegrityViolationError | CorruptDatabaseError)


def _task_span(
    tracing: Tracing, conversation_id: str, run_id: str | None, task_key: str, *,
    call_id: str | None, lifetime: str, start_time_us: int | None = None,
) -> Span:
    """A background task's span. Started inside the tool call that starts the task, it is that
    call's child: in the trace of the turn, though it may end long after the turn did. The
    parent is held in memory only; a task found lost after a restart gets a root span."""
    return tracing.start("tidings.task", {
        CONVERSATION_ID: conversation_id,
        RUN_ID: run_id,
        "tidings.task_key": task_key,
        "tidings.task.lifetime": lifetime,
        "gen_ai.tool.call.id": call_id,
    }, root=start_time_us is not None, start_time_us=start_time_us)


def _task_ended(span: Span, outcome: ProcessOutcome) -> None:
    """How the process ended; anything but a zero exit is the task's failure. The command is
    not told (a task's reason for not starting names it)."""
    if not span.traced:
        return
    span.set({
        "tidings.task.state": _STATES[outcome.state].value,
        "process.pid": outcome.pid,
        "process.exit.code": outcome.exit_code,
        "tidings.task.signal": outcome.signal_name,
    })
    if outcome.state is ProcessState.FAILED:
        span.fail("the process could not start", error_type=outcome.state.value)
    elif not outcome.succeeded:
        span.fail(outcome.reason or f"exit code {outcome.exit_code}",
                  error_type=outcome.state.value)
    span.end()


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
        """A span per task, from its process's start to its end (see :func:`_task_span`)."""
        self._end_retry_base = end_retry_base
        self._end_retry_cap = end_retry_cap
        self._rng = rng or random.Random()
        self._closing = asyncio.Event()
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
        span = _task_span(self.tracing, context.conversation_id, context.run_id, task_key,
                          call_id=context.call_id, lifetime=lifetime)

        async def ended(outcome: ProcessOutcome) -> None:
            _task_ended(span, outcome)
            try:
                await self._ended(conversation_id, task_key, outcome)
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

    async def _ended(
        self, conversation_id: ConversationId, task_key: str, outcome: ProcessOutcome
    ) -> None:
        for observe in self.observers:
            try:
                observe(task_key, outcome)
            except Exception:
                log.exception("a task observer failed")
        results = self._results()
        output, dropped = capture.envelope(
            outcome.stdout, outcome.stderr, self.output_limit_bytes()
        )
        excerpt, excerpt_truncated = capture.excerpt(
            outcome.stdout, outcome.stderr, EXCERPT_LIMIT_BYTES
        )

        def record(cx: ConversationTx) -> bool:
            task = journal.get(cx, task_key)
            if task is None or task.state.terminal:
                # Recorded already (a retry after a commit that did land, or lost meanwhile by
                # a reconcile): the first terminal state stands, nothing is sealed twice.
                return False
            ref = None if results is None else results.seal(
                cx.tx, conversation_id, output, task_key=task_key, run_id=task.run_id,
                dropped=dropped,
            )
            after = journal.finish(
                cx, task, state=_STATES[outcome.state], exit_code=outcome.exit_code,
                signal=outcome.signal_name, result_id=None if ref is None else ref.result_id,
                stdout_bytes=outcome.stdout.total_bytes, stderr_bytes=outcome.stderr.total_bytes,
                excerpt=excerpt, excerpt_truncated=excerpt_truncated,
                duration_ms=int(outcome.duration.total_seconds() * 1000),
            )
            return after.state.terminal

        # The end, its notification and the woken turn's start commit together.
        if not await self._record_end(conversation_id, task_key, record):
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

    async def _record_end(
        self, conversation_id: ConversationId, task_key: str,
        record: Callable[[ConversationTx], bool],
    ) -> bool:
        """Commit ``record`` (idempotent), trying again after store faults with capped
        exponential backoff until it commits. Whether it did.

        Only a refusal that would repeat, or a runtime that closes while the store stays
        down, gives up: the task then stays running in the journal and becomes ``lost`` when
        this instance is reconciled -- never a success.
        """
        attempt = 0
        left_when_closing = CLOSING_ATTEMPTS
        while True:
            try:
                await self._start_with(conversation_id, record)
                return True
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
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), delay)
            except Exception:
                log.exception("could not record the end of task %s", task_key)
                return False

    def close(self) -> None:
        """The runtime is closing: ends still failing to commit are tried only a few more
        times, at once, so that the shutdown is not held up. Idempotent."""
        self._closing.set()

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

            lost: list[journal.TaskRecord] = []

            def lose(
                cx: ConversationTx, task_key: str = task_key,
                lost: list[journal.TaskRecord] = lost,
            ) -> bool:
                task = journal.get(cx, task_key)
                if task is None or task.state is not TaskState.RUNNING:
                    return False
                lost.append(task)
                # A turn-lifetime task's turn is over: its notification goes to the
                # conversation.
                task = journal.hand_off(cx, task)
                journal.finish(cx, task, state=TaskState.LOST)
                return True

            if await self._start_with(conversation_id, lose):
                marked += 1
                self._lost_span(lost[-1])
        return marked

    def _lost_span(self, task: journal.TaskRecord) -> None:
        """The span of a task found lost: the span its gone runtime started went with it, so
        this one is a root, from the task's start to now, with the same attributes."""
        span = _task_span(self.tracing, task.conversation_id, task.run_id, task.task_key,
                          call_id=task.call_id, lifetime=task.lifetime,
                          start_time_us=task.started_at_us)
        span.set({"tidings.task.state": TaskState.LOST.value})
        span.fail("the runtime that ran it is gone: its outcome is unknown", error_type="lost")
        span.end()
