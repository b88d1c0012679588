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

Timeouts run on the event loop's monotonic clock: an OS process lives in real time, so a
:class:`~tidings.clock.ManualClock` only stamps ``started_at_us`` and ``ended_at_us``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
import os
import shlex
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Self

from tidings.clock import Clock, SystemClock

# The supervisor's errors live in tidings.errors; re-exported (``as``) for callers of this module.
from tidings.errors import DuplicateTaskKeyError as DuplicateTaskKeyError
from tidings.errors import InvalidInputError
from tidings.errors import SupervisorClosedError as SupervisorClosedError
from tidings.tasks.capture import Capture, CaptureBuffer

logger = logging.getLogger(__name__)

DEFAULT_CAPTURE_LIMIT_BYTES = 2 * 1024 * 1024  # as much as a result envelope holds
DEFAULT_KILL_GRACE = timedelta(seconds=2)
DEFAULT_DRAIN_TIMEOUT = timedelta(seconds=2)

# The variables a process keeps when it does not inherit the environment: enough to find
# programs, a home and a locale, and none of the server's secrets.
SAFE_ENV_KEYS = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")

OnExit = Callable[["ProcessOutcome"], Awaitable[None] | None]


class ProcessState(enum.StrEnum):
    """How a process ended. Every state is final."""

    EXITED = "exited"  # it ended by itself, with an exit code (zero or not)
    FAILED = "failed"  # it could not start
    TIMED_OUT = "timed_out"  # it ran past its timeout and was ended by us
    KILLED = "killed"  # ended by us on request, or by a signal from outside


@dataclass(frozen=True)
class ProcessSpec:
    """What to run: either ``argv`` (no shell) or ``command`` with ``shell=True``.

    ``env`` is merged over ``os.environ`` (``inherit_env=True``, the default) or over
    :data:`SAFE_ENV_KEYS` taken from ``os.environ`` (``inherit_env=False``), read at start.
    ``capture_limit_bytes`` bounds the bytes kept of stdout and stderr together; whatever does
    not fit is counted, never kept. ``stdin`` is written to the process and then closed; without it
    the process reads ``/dev/null``. With ``shell=True`` a missing program is the shell's exit
    code 127 (``exited``), not ``failed``: the shell itself did start.
    """

    argv: tuple[str, ...] = ()
    command: str | None = None
    shell: bool = False
    cwd: Path | None = None
    env: Mapping[str, str] | None = None
    inherit_env: bool = True
    timeout: timedelta | None = None
    kill_grace: timedelta = DEFAULT_KILL_GRACE
    capture_limit_bytes: int = DEFAULT_CAPTURE_LIMIT_BYTES
    stdin: bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # Coerce lists and dicts so a spec stays immutable once built.
        object.__setattr__(self, "argv", tuple(self.argv))
        if self.env is not None:
            object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        if self.shell:
            if self.command is None or self.argv:
                raise InvalidInputError("a shell spec takes a command and no argv")
        elif self.command is not None or not self.argv:
            raise InvalidInputError("a spec takes a non-empty argv, or a command with shell=True")
        if self.timeout is not None and self.timeout <= timedelta(0):
            raise InvalidInputError(f"timeout must be positive, not {self.timeout}")
        if self.kill_grace < timedelta(0):
            raise InvalidInputError(f"kill_grace must not be negative, not {self.kill_grace}")
        if self.capture_limit_bytes < 0:
            raise InvalidInputError("capture_limit_bytes must not be negative")

    def describe(self) -> str:
        """The command line, for logs and messages."""
        return self.command if self.command is not None else shlex.join(self.argv)

    def environment(self) -> dict[str, str] | None:
        """The environment the process gets; ``None`` means exactly ``os.environ``."""
        if self.inherit_env and self.env is None:
            return None
        if self.inherit_env:
            base = dict(os.environ)
        else:
            base = {key: os.environ[key] for key in SAFE_ENV_KEYS if key in os.environ}
            base.setdefault("PATH", os.defpath)
        return {**base, **(self.env or {})}


@dataclass(frozen=True)
class ProcessOutcome:
    """How one process ended, with what it wrote. ``pid`` is ``None`` only when ``failed``.

    ``exit_code`` is set when the process exited (by itself, or after handling our SIGTERM);
    ``signal`` when it died by a signal. ``reason`` says why it ended when it did not end by
    itself, or why it could not start. ``duration`` is measured on the monotonic clock, from
    start to the end of the group leader.
    """

    task_key: str
    pid: int | None
    state: ProcessState
    exit_code: int | None
    signal: int | None
    started_at_us: int
    ended_at_us: int
    duration: timedelta
    stdout: Capture = field(default_factory=Capture)
    stderr: Capture = field(default_factory=Capture)
    reason: str | None = None

    @property
    def succeeded(self) -> bool:
        """True only for a process that ended by itself with exit code 0."""
        return self.state is ProcessState.EXITED and self.exit_code == 0

    @property
    def signal_name(self) -> str | None:
        if self.signal is None:
            return None
        try:
            return signal.Signals(self.signal).name
        except ValueError:
            return f"signal {self.signal}"


class _Reader(asyncio.Protocol):
    """Feeds one pipe into a capture as data arrives; ``closed`` resolves when it is closed."""

    def __init__(self, feed: Callable[[bytes], None], closed: asyncio.Future[None]) -> None:
        self._feed = feed
        self._closed = closed

    def data_received(self, data: bytes) -> None:
        self._feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._closed.done():
            self._closed.set_result(None)


class _Writer(asyncio.BaseProtocol):
    """Resolves ``closed`` when the stdin pipe is closed, flushed or broken."""

    def __init__(self, closed: asyncio.Future[None]) -> None:
        self._closed = closed

    def connection_lost(self, exc: Exception | None) -> None:
        # A process that exits without reading all of its stdin breaks the pipe: that is its
        # business, not an error of ours.
        if not self._closed.done():
            self._closed.set_result(None)


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
    ) -> None:
        self.spec = spec
        self.task_key = task_key
        self.pid = pid
        self.started_at_us = started_at_us
        self._supervisor = supervisor
        self._started_mono = started_mono
        self._proc: asyncio.subprocess.Process | None = None
        self._exit: asyncio.Task[int] | None = None
        # Each pipe's transport, with the future its protocol resolves once it is closed.
        self._pipes: list[tuple[asyncio.BaseTransport, asyncio.Future[None]]] = []
        self._capture = CaptureBuffer(spec.capture_limit_bytes)
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
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            # No such group. While the leader is not yet reaped its pid is still its own: it
            # may have moved itself to another group, so signal it alone. Once reaped, never.
            if self._alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, sig)
        except PermissionError:
            logger.warning(
                "task %r: not permitted to send %s to group %d", self.task_key, sig.name, self.pid
            )

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
        by_signal = f"signal {-returncode} ({_signal_name(-returncode)})"
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
                self._close_pipes()
                await asyncio.wait(late)
        self._close_pipes()

    def _close_pipes(self) -> None:
        for transport, closed in self._pipes:
            if closed.done():
                continue
            if isinstance(transport, asyncio.WriteTransport):
                transport.abort()
            else:
                transport.close()

    def _abandon(self) -> None:
        """Cancelled before the end: kill the group and let go of every resource."""
        if self.pid is not None:
            self._signal_group(signal.SIGKILL)
        for task in (self._escalation, self._exit):
            if task is not None:
                task.cancel()
        self._close_pipes()

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


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


async def _spawn(
    spec: ProcessSpec, stdin: int | None, stdout: int, stderr: int
) -> asyncio.subprocess.Process:
    # A session of its own makes the process the leader of a new group: the group is the task.
    if spec.shell:
        assert spec.command is not None
        return await asyncio.create_subprocess_shell(
            spec.command,
            stdin=asyncio.subprocess.DEVNULL if stdin is None else stdin,
            stdout=stdout,
            stderr=stderr,
            cwd=spec.cwd,
            env=spec.environment(),
            start_new_session=True,
        )
    return await asyncio.create_subprocess_exec(
        *spec.argv,
        stdin=asyncio.subprocess.DEVNULL if stdin is None else stdin,
        stdout=stdout,
        stderr=stderr,
        cwd=spec.cwd,
        env=spec.environment(),
        start_new_session=True,
    )


HOST = socket.gethostname()
"""The host this runtime's processes run on (a process left behind is stopped only there)."""


def process_identity(pid: int) -> str | None:
    """When the kernel started ``pid`` (clock ticks since boot): with the pid, an identity
    that a later process reusing the pid does not share. None when there is no such process
    (or no ``/proc`` to ask)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except OSError:
        return None
    # The command name is in parentheses and may hold anything: fields resume after the last
    # ')'. Field 22 (starttime) is the 20th of those.
    fields = data[data.rindex(b")") + 2:].split()
    return fields[19].decode("ascii") if len(fields) > 19 else None


def kill_left_behind(pid: int, identity: str | None) -> bool:
    """Kill the process group a gone runtime left behind (T9), if it is still that group.

    The group's id is its leader's pid. While the leader lives, it must be the same process
    (same start time); once it is gone, Linux does not reuse its pid while the group still
    has members, so a signal to the group reaches only what the task left. Returns whether a
    signal was sent.
    """
    current = process_identity(pid)
    if current is not None and current != identity:
        return False  # the pid belongs to another process now
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


class Supervisor:
    """Starts processes and watches them to their single outcome; see the module guarantees.

    ``drain_timeout`` bounds how long output is still read after the process group ended: only
    a process that left the group can hold a pipe that long.
    """

    def __init__(
        self, *, clock: Clock | None = None, drain_timeout: timedelta = DEFAULT_DRAIN_TIMEOUT
    ) -> None:
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
        loop = asyncio.get_running_loop()
        started_at_us, started_mono = self.clock.now_us(), time.monotonic()
        fds: list[int] = []  # descriptors of ours that no transport owns yet
        try:
            # Pipes of our own rather than asyncio's: the process's end is then known when the
            # leader ends, even while a leftover grandchild still holds an output pipe.
            out_r, out_w = os.pipe()
            fds += (out_r, out_w)
            err_r, err_w = os.pipe()
            fds += (err_r, err_w)
            in_r: int | None = None
            in_w: int | None = None
            if spec.stdin is not None:
                in_r, in_w = os.pipe()
                fds += (in_r, in_w)
            proc = await _spawn(spec, in_r, out_w, err_w)
        except OSError as exc:
            for fd in fds:
                os.close(fd)
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
        # The child has its own copies; ours would keep the pipes open forever.
        for child_end in (out_w, err_w, in_r):
            if child_end is not None:
                os.close(child_end)
                fds.remove(child_end)
        process = RunningProcess(self, spec, task_key, proc.pid, started_at_us, started_mono)
        process._proc = proc
        process._exit = asyncio.create_task(proc.wait())
        try:
            capture = process._capture
            for fd, feed in ((out_r, capture.feed_stdout), (err_r, capture.feed_stderr)):
                closed: asyncio.Future[None] = loop.create_future()
                fds.remove(fd)
                transport, _ = await loop.connect_read_pipe(
                    functools.partial(_Reader, feed, closed), os.fdopen(fd, "rb", buffering=0)
                )
                process._pipes.append((transport, closed))
            if in_w is not None and spec.stdin is not None:
                closed = loop.create_future()
                fds.remove(in_w)
                writer, _ = await loop.connect_write_pipe(
                    functools.partial(_Writer, closed), os.fdopen(in_w, "wb", buffering=0)
                )
                process._pipes.append((writer, closed))
                writer.write(spec.stdin)
                writer.close()  # flushes what is buffered, then closes: the process sees EOF
        except BaseException:
            for fd in fds:
                os.close(fd)
            process._abandon()
            raise
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
