"""Spawning a task's process: what to run, how it ended, and the pipes that carry its output.

Guarantees:

- A process is started in a session of its own, so it leads a new process group: the group is
  the task, and signalling the group reaches its grandchildren too (:func:`signal_group`).
- Its stdout and stderr are pipes of ours, not asyncio's, read as the process writes them into
  one :class:`~tidings.tasks.capture.CaptureBuffer`: the process's end is then known when the
  leader ends, even while a leftover grandchild still holds an output pipe.
- :func:`launch` either starts the process or raises :class:`OSError` with nothing left open;
  :func:`attach` either connects every pipe or kills the group, closes what it opened and
  raises. Neither swallows an error.
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import MappingProxyType

from tidings.errors import InvalidInputError
from tidings.tasks.capture import Capture, CaptureBuffer

# The supervisor's logger: what is logged about a task's process is found in one place.
logger = logging.getLogger("tidings.tasks.supervisor")

DEFAULT_CAPTURE_LIMIT_BYTES = 2 * 1024 * 1024  # as much as a result envelope holds
DEFAULT_KILL_GRACE = timedelta(seconds=2)
DEFAULT_DRAIN_TIMEOUT = timedelta(seconds=2)

# The variables a process keeps when it does not inherit the environment: enough to find
# programs, a home and a locale, and none of the server's secrets.
SAFE_ENV_KEYS = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")


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


def name_of_signal(number: int) -> str:
    """A signal's name (``SIGTERM``), or its number when it has none."""
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


Pipe = tuple[asyncio.BaseTransport, asyncio.Future[None]]
"""A connected pipe's transport, with the future its protocol resolves once it is closed."""


@dataclass(frozen=True)
class Launched:
    """A started process and our ends of its pipes, not yet connected to the event loop."""

    proc: asyncio.subprocess.Process
    stdout: int
    stderr: int
    stdin: int | None


async def launch(spec: ProcessSpec) -> Launched:
    """Start ``spec``'s process in a session of its own. Raises :class:`OSError` when it cannot
    start, with every descriptor it opened closed again."""
    fds: list[int] = []  # descriptors of ours that no transport owns yet
    try:
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
    except OSError:
        for fd in fds:
            os.close(fd)
        raise
    # The child has its own copies; ours would keep the pipes open forever.
    for child_end in (out_w, err_w, in_r):
        if child_end is not None:
            os.close(child_end)
    return Launched(proc, out_r, err_r, in_w)


async def attach(launched: Launched, spec: ProcessSpec, capture: CaptureBuffer) -> list[Pipe]:
    """Connect our pipe ends to the event loop: output feeds ``capture``, ``spec.stdin`` is
    written and then closed (the process sees EOF). On any failure, cancellation included, the
    group is killed and every pipe closed before the error goes on."""
    loop = asyncio.get_running_loop()
    fds = [fd for fd in (launched.stdout, launched.stderr, launched.stdin) if fd is not None]
    pipes: list[Pipe] = []
    try:
        for fd, feed in ((launched.stdout, capture.feed_stdout),
                         (launched.stderr, capture.feed_stderr)):
            closed: asyncio.Future[None] = loop.create_future()
            fds.remove(fd)
            transport, _ = await loop.connect_read_pipe(
                functools.partial(_Reader, feed, closed), os.fdopen(fd, "rb", buffering=0)
            )
            pipes.append((transport, closed))
        if launched.stdin is not None and spec.stdin is not None:
            closed = loop.create_future()
            fds.remove(launched.stdin)
            writer, _ = await loop.connect_write_pipe(
                functools.partial(_Writer, closed), os.fdopen(launched.stdin, "wb", buffering=0)
            )
            pipes.append((writer, closed))
            writer.write(spec.stdin)
            writer.close()  # flushes what is buffered, then closes: the process sees EOF
    except BaseException:
        for fd in fds:
            os.close(fd)
        proc = launched.proc
        signal_group(proc.pid, signal.SIGKILL, alive=lambda: proc.returncode is None)
        close_pipes(pipes)
        raise
    return pipes


def close_pipes(pipes: list[Pipe]) -> None:
    """Stop reading (and writing): close every pipe not closed yet."""
    for transport, closed in pipes:
        if closed.done():
            continue
        if isinstance(transport, asyncio.WriteTransport):
            transport.abort()
        else:
            transport.close()


def signal_group(
    pid: int, sig: signal.Signals, *, alive: Callable[[], bool], task_key: str | None = None
) -> None:
    """Send ``sig`` to the process group ``pid`` leads.

    With no such group, and only while the leader is not yet reaped (``alive``), its pid is
    still its own: it may have moved itself to another group, so it is signalled alone. Once
    reaped, never: the pid may be another process's by then.
    """
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        if alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    except PermissionError:
        logger.warning("task %r: not permitted to send %s to group %d", task_key, sig.name, pid)
