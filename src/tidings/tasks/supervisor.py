"""The OS-process half of background tasks (T1): start, capture, time out, kill, report.

Guarantees:

- Every process runs in its own session, so its process group is the task: a timeout, a
  :meth:`RunningProcess.kill`, a :meth:`RunningProcess.stop` and :meth:`Supervisor.close`
  signal the whole group, grandchildren included. When the first process (the group leader)
  ends, whatever it left behind in its group is killed too: a task never leaks processes.
- stdout and stderr are read concurrently as the process writes them, into one capture that
  keeps at most ``capture_limit_bytes`` of the two together (shared out as
  :func:`~tidings.tasks.capture.share` says; a stream over its share keeps its head and its
  tail) and counts every byte. However much the process writes, the capture never holds more
  than that limit plus the one chunk being read (at most 256 KiB, asyncio's pipe read size).
- Each process gets exactly one :class:`ProcessOutcome`, also when it could not start
  (``failed``; no exception escapes :meth:`Supervisor.start`). Timeouts and deaths by signal
  are never a success.
- ``on_exit`` is called exactly once, after the process ended and its pipes are drained;
  :meth:`RunningProcess.wait` returns after it did. What it raises is logged, never swallowed
  silently, and never stops the supervisor.

Where the pieces are: :mod:`tidings.tasks.spawn` starts a process and connects its pipes (and
defines what a spec and an outcome are); :mod:`tidings.tasks.leftover` finds and stops the
processes a gone runtime left behind. This module is the registry of running processes and
follows each one to its outcome.

Timeouts run on the event loop's monotonic clock: an OS process lives in real time, so a
:class:`~tidings.clock.ManualClock` only stamps ``started_at_us`` and ``ended_at_us``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from types import TracebackType
from typing import Self

from tidings.clock import Clock, SystemClock

# The supervisor's errors live in tidings.errors; re-exported (``as``) for callers of this module.
from tidings.errors import DuplicateTaskKeyError as DuplicateTaskKeyError
from tidings.errors import SupervisorClosedError as SupervisorClosedError
from tidings.support.lifetime import Loop
from tidings.tasks.capture import CaptureBuffer
from tidings.tasks.leftover import HOST, kill_left_behind, process_identity
from tidings.tasks.spawn import (
    DEFAULT_CAPTURE_LIMIT_BYTES,
    DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_KILL_GRACE,
    SAFE_ENV_KEYS,
    Pipe,
    ProcessOutcome,
    ProcessSpec,
    ProcessState,
    attach,
    close_pipes,
    launch,
    name_of_signal,
    signal_group,
)

logger = logging.getLogger(__name__)

# Imported from here by the task service, the shell tool and tests.
__all__ = (
    "DEFAULT_CAPTURE_LIMIT_BYTES", "DEFAULT_DRAIN_TIMEOUT", "DEFAULT_KILL_GRACE", "HOST",
    "SAFE_ENV_KEYS", "DuplicateTaskKeyError", "OnExit", "ProcessOutcome", "ProcessSpec",
    "ProcessState", "RunningProcess", "Supervisor", "SupervisorClosedError",
    "kill_left_behind", "process_identity",
)

OnExit = Callable[["ProcessOutcome"], Awaitable[None] | None]


class RunningProcess:
    """One supervised process, from start to its single outcome."""

    def __init__(
        self,
        supervisor: Supervisor,
        spec: ProcessSpec,
        task_key: str,
        pid: int | None,
        started_at_us: int,
        started_mono: float,
        *,
        proc: asyncio.subprocess.Process | None = None,
        pipes: list[Pipe] | None = None,
        capture: CaptureBuffer | None = None,
    ) -> None:
        self.spec = spec
        self.task_key = task_key
        self.pid = pid
        self.started_at_us = started_at_us
        self._supervisor = supervisor
        self._started_mono = started_mono
        self._proc = proc
        self._exit: asyncio.Task[int] | None = (
            None if proc is None else asyncio.create_task(proc.wait())
        )
        self._pipes: list[Pipe] = [] if pipes is None else pipes
        self._capture = CaptureBuffer(spec.capture_limit_bytes) if capture is None else capture
        self._reason: ProcessState | None = None  # set when we decided to end it
        self._sigterm_sent = False
        self._escalation: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._outcome: ProcessOutcome | None = None
        self._done: asyncio.Future[ProcessOutcome] = asyncio.get_running_loop().create_future()

    @property
    def outcome(self) -> ProcessOutcome | None:
        """The outcome, once the process ended and its pipes are drained."""
        return self._outcome

    def kill(self) -> None:
        """SIGKILL the whole process group now. Does nothing once the process has ended."""
        if not self._alive():
            return
        if self._reason is None:
            self._reason = ProcessState.KILLED
        self._signal_group(signal.SIGKILL)

    async def stop(self, grace: timedelta | None = None) -> ProcessOutcome:
        """SIGTERM the group, SIGKILL it after ``grace`` (default: the spec's ``kill_grace``).

        The escalation belongs to the supervisor, not to the caller: cancelling ``stop`` does
        not cancel the SIGKILL.
        """
        self._request_end(ProcessState.KILLED, self.spec.kill_grace if grace is None else grace)
        return await self.wait()

    async def wait(self) -> ProcessOutcome:
        """The outcome, after the process ended, its pipes are drained and ``on_exit`` ran."""
        if self._outcome is not None and asyncio.current_task() is self._watcher:
            return self._outcome  # on_exit waiting for its own process: no deadlock
        return await asyncio.shield(self._done)

    # -- inside the supervisor ---------------------------------------------------------------

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    def _request_end(self, reason: ProcessState, grace: timedelta) -> None:
        if not self._alive() or self._escalation is not None:
            return  # already ended, or already being ended
        if self._reason is None:
            self._reason = reason
        self._escalation = asyncio.create_task(self._terminate(grace))

    async def _terminate(self, grace: timedelta) -> None:
        assert self._exit is not None
        self._sigterm_sent = True
        self._signal_group(signal.SIGTERM)
        done, _ = await asyncio.wait({self._exit}, timeout=grace.total_seconds())
        if not done:
            self._signal_group(signal.SIGKILL)

    def _signal_group(self, sig: signal.Signals) -> None:
        assert self.pid is not None
        signal_group(self.pid, sig, alive=self._alive, task_key=self.task_key)

    async def _follow(self, drain_timeout: timedelta) -> ProcessOutcome:
        assert self._exit is not None
        timeout = None if self.spec.timeout is None else self.spec.timeout.total_seconds()
        done, _ = await asyncio.wait({self._exit}, timeout=timeout)
        if not done:
            if self._reason is None:
                self._reason = ProcessState.TIMED_OUT
            self._request_end(self._reason, self.spec.kill_grace)
        returncode = await self._exit
        ended_mono = time.monotonic()
        ended_at_us = self._supervisor.clock.now_us()
        if self._escalation is not None:
            self._escalation.cancel()
            await asyncio.wait({self._escalation})
        # The leader is gone; whatever it left in its group goes with it. Linux keeps a pid
        # number allocated while any process still has it as its group id, so while leftovers
        # live this reaches only them. An empty group answers ESRCH, unless in the microseconds
        # since the reap a new process took the number *and* made itself a group leader.
        self._signal_group(signal.SIGKILL)
        await self._drain(drain_timeout)
        state, reason = self._classify(returncode)
        return ProcessOutcome(
            task_key=self.task_key,
            pid=self.pid,
            state=state,
            exit_code=returncode if returncode >= 0 else None,
            signal=-returncode if returncode < 0 else None,
            started_at_us=self.started_at_us,
            ended_at_us=ended_at_us,
            duration=timedelta(seconds=ended_mono - self._started_mono),
            stdout=self._capture.stdout(),
            stderr=self._capture.stderr(),
            reason=reason,
        )

    def _classify(self, returncode: int) -> tuple[ProcessState, str | None]:
        by_signal = f"signal {-returncode} ({name_of_signal(-returncode)})"
        if self._reason is ProcessState.TIMED_OUT:
            return ProcessState.TIMED_OUT, f"ran past its timeout of {self.spec.timeout}"
        if self._reason is ProcessState.KILLED:
            if returncode < 0:
                return ProcessState.KILLED, f"ended on request by {by_signal}"
            if self._sigterm_sent:
                return ProcessState.KILLED, "exited on request after SIGTERM"
            # Only a SIGKILL was sent, which cannot be handled: the process ended by itself
            # before the signal landed.
        if returncode < 0:
            return ProcessState.KILLED, f"killed by {by_signal} from outside"
        return ProcessState.EXITED, None

    async def _drain(self, drain_timeout: timedelta) -> None:
        pending = [closed for _, closed in self._pipes if not closed.done()]
        if pending:
            _, late = await asyncio.wait(pending, timeout=drain_timeout.total_seconds())
            if late:
                # Only a process outside the group (it made its own session) can still hold a
                # pipe open: stop reading rather than wait for it.
                logger.warning(
                    "task %r: output pipes still open %s after exit; closing them",
                    self.task_key,
                    drain_timeout,
                )
                close_pipes(self._pipes)
                await asyncio.wait(late)
        close_pipes(self._pipes)

    def _abandon(self) -> None:
        """Cancelled before the end: kill the group and let go of every resource."""
        if self.pid is not None:
            self._signal_group(signal.SIGKILL)
        for task in (self._escalation, self._exit):
            if task is not None:
                task.cancel()
        close_pipes(self._pipes)

    async def _watch(self, on_exit: OnExit | None, drain_timeout: timedelta) -> None:
        try:
            try:
                if self._outcome is None:
                    self._outcome = await self._follow(drain_timeout)
            except asyncio.CancelledError:
                self._abandon()
                self._done.cancel()
                raise
            except Exception as exc:
                logger.exception("task %r: supervising the process failed", self.task_key)
                self._done.set_exception(exc)
                self._abandon()
                return
            try:
                if on_exit is not None:
                    result = on_exit(self._outcome)
                    if result is not None:
                        await result
            except Exception:
                logger.exception("task %r: on_exit raised", self.task_key)
            finally:
                self._done.set_result(self._outcome)
        finally:
            self._supervisor._forget(self)


class Supervisor(Loop):
    """Starts processes and watches them to their single outcome; see the module guarantees.

    ``drain_timeout`` bounds how long output is still read after the process group ended: only
    a process that left the group can hold a pipe that long.

    A component of the runtime with no work of its own to run: its shutdown is :meth:`close`.
    """

    def __init__(
        self, *, clock: Clock | None = None, drain_timeout: timedelta = DEFAULT_DRAIN_TIMEOUT
    ) -> None:
        super().__init__("tidings-supervisor")
        self.clock: Clock = clock or SystemClock()
        self._drain_timeout = drain_timeout
        self._processes: dict[str, RunningProcess] = {}
        self._closed = False
        self._closing: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def running(self) -> tuple[RunningProcess, ...]:
        """The processes started and not yet ended."""
        return tuple(p for p in self._processes.values() if p.outcome is None)

    def get(self, task_key: str) -> RunningProcess | None:
        """The process of a task, while it is supervised."""
        return self._processes.get(task_key)

    async def start(
        self, spec: ProcessSpec, *, task_key: str, on_exit: OnExit | None = None
    ) -> RunningProcess:
        """Start ``spec`` as the process of ``task_key``.

        A process that cannot start is not an exception: it gets a ``failed`` outcome (and
        ``on_exit``) like any other. Raises :class:`SupervisorClosedError` after
        :meth:`close` and :class:`DuplicateTaskKeyError` while the key's process still runs.
        """
        if self._closed:
            raise SupervisorClosedError()
        if task_key in self._processes:
            raise DuplicateTaskKeyError(task_key)
        started_at_us, started_mono = self.clock.now_us(), time.monotonic()
        try:
            launched = await launch(spec)
        except OSError as exc:
            process = RunningProcess(self, spec, task_key, None, started_at_us, started_mono)
            process._outcome = ProcessOutcome(
                task_key=task_key,
                pid=None,
                state=ProcessState.FAILED,
                exit_code=None,
                signal=None,
                started_at_us=started_at_us,
                ended_at_us=self.clock.now_us(),
                duration=timedelta(seconds=time.monotonic() - started_mono),
                reason=f"could not start {spec.describe()!r}: {exc}",
            )
            logger.info("task %r: %s", task_key, process._outcome.reason)
            self._begin(process, on_exit)
            return process
        capture = CaptureBuffer(spec.capture_limit_bytes)
        pipes = await attach(launched, spec, capture)  # on failure, the group is killed
        proc = launched.proc
        process = RunningProcess(
            self, spec, task_key, proc.pid, started_at_us, started_mono,
            proc=proc, pipes=pipes, capture=capture,
        )
        logger.debug("task %r: started pid %d: %s", task_key, proc.pid, spec.describe())
        self._begin(process, on_exit)
        if self._closed:
            process.kill()  # close() began while this process was starting
        return process

    def _begin(self, process: RunningProcess, on_exit: OnExit | None) -> None:
        self._processes[process.task_key] = process
        process._watcher = asyncio.create_task(
            process._watch(on_exit, self._drain_timeout), name=f"supervise {process.task_key}"
        )

    def _forget(self, process: RunningProcess) -> None:
        if self._processes.get(process.task_key) is process:
            del self._processes[process.task_key]

    async def stopping(self) -> None:
        await self.close()

    async def close(self, grace: timedelta | None = None) -> None:
        """Stop every process (SIGTERM, then SIGKILL after ``grace`` or each spec's
        ``kill_grace``) and wait for their outcomes and ``on_exit``. Idempotent; starts are
        refused from the first call on."""
        self._closed = True
        if self._closing is None:
            self._closing = asyncio.create_task(self._stop_all(grace))
        await asyncio.shield(self._closing)

    async def _stop_all(self, grace: timedelta | None) -> None:
        while self._processes:
            await asyncio.gather(
                *(process.stop(grace) for process in list(self._processes.values())),
                return_exceptions=True,
            )
