"""The process supervisor (T1, T9, T10) with real processes: no database, no sleeping to wait
for a deadline longer than the few hundred milliseconds a timeout test needs."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
import tracemalloc
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.waiting import eventually, wait_until
from tidings.clock import ManualClock
from tidings.errors import InvalidInputError
from tidings.tasks.capture import Capture
from tidings.tasks.supervisor import (
    DuplicateTaskKeyError,
    ProcessOutcome,
    ProcessSpec,
    ProcessState,
    Supervisor,
    SupervisorClosedError,
)

KIB = 1024
SHORT = timedelta(milliseconds=500)  # long enough for sh to set its traps on a busy machine


@pytest.fixture
async def supervisor() -> AsyncIterator[Supervisor]:
    sup = Supervisor()
    try:
        yield sup
    finally:
        await sup.close(grace=timedelta(0))


def sh(command: str, **kwargs: object) -> ProcessSpec:
    return ProcessSpec(command=command, shell=True, **kwargs)  # type: ignore[arg-type]


def is_gone(pid: int) -> bool:
    """True when no process has this pid, or only a zombie that is no longer ours to reap."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


async def wait_gone(pid: int, within: timedelta = timedelta(seconds=2)) -> None:
    # A killed grandchild is reaped by init, not by us: give that a moment.
    await wait_until(lambda: is_gone(pid), what=f"process {pid} gone",
                     within_s=within.total_seconds())


def our_children() -> set[int]:
    """The pids of this process's children, zombies included: what we have not reaped."""
    pids: set[int] = set()
    for children in Path("/proc/self/task").glob("*/children"):
        pids.update(int(pid) for pid in children.read_text().split())
    return pids


def written_line(path: Path) -> str | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return text if text.endswith("\n") else None


async def wait_for_file(path: Path, within: timedelta = timedelta(seconds=5)) -> str:
    """The file's content once the process wrote it (a readiness signal, not a deadline)."""

    async def line() -> str | None:
        return written_line(path)

    text = await eventually(line, lambda text: text is not None, what=f"{path} written",
                            within_s=within.total_seconds(), poll_s=0.01)
    assert text is not None
    return text


# -- T1: exit codes and the single outcome -----------------------------------------------------


async def test_t1_exit_code_zero_is_success(supervisor: Supervisor) -> None:
    outcome = await (await supervisor.start(ProcessSpec(argv=("true",)), task_key="t")).wait()
    assert outcome.state is ProcessState.EXITED
    assert outcome.exit_code == 0
    assert outcome.signal is None
    assert outcome.succeeded
    assert outcome.reason is None
    assert outcome.pid is not None
    assert outcome.ended_at_us >= outcome.started_at_us
    assert outcome.duration >= timedelta(0)


async def test_t1_nonzero_exit_is_exited_but_not_success(supervisor: Supervisor) -> None:
    outcome = await (
        await supervisor.start(sh("echo out; echo err >&2; exit 3"), task_key="t")
    ).wait()
    assert outcome.state is ProcessState.EXITED
    assert outcome.exit_code == 3
    assert not outcome.succeeded
    assert outcome.stdout.head == b"out\n"
    assert outcome.stderr.head == b"err\n"


async def test_t1_failure_to_start_is_an_outcome_not_an_exception(
    supervisor: Supervisor, tmp_path: Path
) -> None:
    seen: list[ProcessOutcome] = []
    missing = await supervisor.start(
        ProcessSpec(argv=("/nonexistent/program",)), task_key="a", on_exit=seen.append
    )
    no_cwd = await supervisor.start(
        ProcessSpec(argv=("true",), cwd=tmp_path / "nowhere"), task_key="b", on_exit=seen.append
    )
    for process in (missing, no_cwd):
        outcome = await process.wait()
        assert outcome.state is ProcessState.FAILED
        assert outcome.pid is None
        assert outcome.exit_code is None
        assert not outcome.succeeded
        assert outcome.reason is not None
        assert "could not start" in outcome.reason
    assert {o.task_key for o in seen} == {"a", "b"}  # on_exit once each, failures included
    assert len(seen) == 2
    assert missing.outcome is not None
    assert "/nonexistent/program" in (missing.outcome.reason or "")


async def test_t1_spec_is_validated() -> None:
    with pytest.raises(InvalidInputError):
        ProcessSpec()
    with pytest.raises(InvalidInputError):
        ProcessSpec(argv=("ls",), command="ls", shell=True)
    with pytest.raises(InvalidInputError):
        ProcessSpec(command="ls")  # a command string needs shell=True
    with pytest.raises(InvalidInputError):
        ProcessSpec(argv=("ls",), timeout=timedelta(0))
    spec = ProcessSpec(argv=["echo", "a b"])  # type: ignore[arg-type]
    assert spec.argv == ("echo", "a b")
    assert spec.describe() == "echo 'a b'"


async def test_t1_stdin_is_written_and_closed(supervisor: Supervisor) -> None:
    small = await (
        await supervisor.start(ProcessSpec(argv=("cat",), stdin=b"hello"), task_key="a")
    ).wait()
    assert small.stdout.head == b"hello"
    # More than a pipe holds, while the process writes as much back: neither side may block.
    data = bytes(range(256)) * 4096  # 1 MiB
    big = await (
        await supervisor.start(ProcessSpec(argv=("cat",), stdin=data), task_key="b")
    ).wait()
    assert big.succeeded
    assert big.stdout.total_bytes == len(data)
    assert big.stdout.head + big.stdout.tail == data  # within the capture limit: kept whole
    assert not big.stdout.truncated
    # A process that reads nothing still ends cleanly; without stdin it reads /dev/null.
    ignored = await (
        await supervisor.start(ProcessSpec(argv=("true",), stdin=data), task_key="c")
    ).wait()
    assert ignored.succeeded
    empty = await (await supervisor.start(ProcessSpec(argv=("cat",)), task_key="d")).wait()
    assert empty.succeeded
    assert empty.stdout.total_bytes == 0


async def test_t1_cwd_and_env(
    supervisor: Supervisor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDINGS_TEST_SECRET", "s3cret")
    script = 'pwd; printf "%s|%s\\n" "$GREETING" "$TIDINGS_TEST_SECRET"'
    inherited = await (
        await supervisor.start(sh(script, cwd=tmp_path, env={"GREETING": "hi"}), task_key="a")
    ).wait()
    assert inherited.stdout.head == f"{tmp_path}\nhi|s3cret\n".encode()
    safe = await (
        await supervisor.start(
            sh(script, cwd=tmp_path, env={"GREETING": "hi"}, inherit_env=False), task_key="b"
        )
    ).wait()
    assert safe.stdout.head == f"{tmp_path}\nhi|\n".encode()


async def test_t1_timestamps_come_from_the_clock() -> None:
    clock = ManualClock()
    async with Supervisor(clock=clock) as sup:
        outcome = await (await sup.start(ProcessSpec(argv=("true",)), task_key="t")).wait()
    assert outcome.started_at_us == outcome.ended_at_us == clock.now_us()


# -- T1: the process group is the task ---------------------------------------------------------


async def test_t1_timeout_is_timed_out_and_kills_the_group_with_its_grandchild(
    supervisor: Supervisor, tmp_path: Path
) -> None:
    pid_file = tmp_path / "grandchild.pid"
    process = await supervisor.start(
        sh(f"sleep 30 & echo $! > {pid_file}; echo started; sleep 30", timeout=SHORT),
        task_key="t",
    )
    grandchild = int(await wait_for_file(pid_file))
    outcome = await process.wait()
    assert outcome.state is ProcessState.TIMED_OUT
    assert not outcome.succeeded
    assert outcome.signal == signal.SIGTERM
    assert outcome.signal_name == "SIGTERM"
    assert outcome.reason is not None
    assert "timeout" in outcome.reason
    assert SHORT <= outcome.duration < timedelta(seconds=5)
    assert outcome.stdout.head == b"started\n"  # output up to the timeout is kept
    assert process.pid is not None
    await wait_gone(process.pid)
    await wait_gone(grandchild)


async def test_t1_timeout_escalates_to_sigkill_after_the_grace(
    supervisor: Supervisor, tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    grace = timedelta(milliseconds=200)
    process = await supervisor.start(
        sh(f"trap '' TERM; echo > {ready}; sleep 30", timeout=SHORT, kill_grace=grace),
        task_key="t",
    )
    outcome = await process.wait()
    assert ready.exists()
    assert outcome.state is ProcessState.TIMED_OUT
    assert outcome.signal == signal.SIGKILL
    assert outcome.duration >= SHORT + grace
    assert not outcome.succeeded


async def test_t9_timed_out_even_when_the_process_exits_zero_on_sigterm(
    supervisor: Supervisor, tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    process = await supervisor.start(
        sh(f"trap 'exit 0' TERM; echo > {ready}; sleep 30 & wait", timeout=timedelta(seconds=1)),
        task_key="t",
    )
    await wait_for_file(ready)
    outcome = await process.wait()
    assert outcome.state is ProcessState.TIMED_OUT
    assert outcome.exit_code == 0
    assert not outcome.succeeded


async def test_t1_kill_sigkills_the_group(supervisor: Supervisor, tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    process = await supervisor.start(sh(f"sleep 30 & echo $! > {pid_file}; sleep 30"), task_key="t")
    grandchild = int(await wait_for_file(pid_file))
    assert supervisor.running() == (process,)
    process.kill()
    outcome = await process.wait()
    assert outcome.state is ProcessState.KILLED
    assert outcome.signal == signal.SIGKILL
    assert outcome.exit_code is None
    assert not outcome.succeeded
    await wait_gone(grandchild)
    assert supervisor.running() == ()
    process.kill()  # after the end: nothing, and no stranger is signalled


async def test_t1_stop_lets_the_process_finish_gracefully(
    supervisor: Supervisor, tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    process = await supervisor.start(
        sh(f"trap 'echo bye; exit 0' TERM; echo > {ready}; sleep 30 & wait"), task_key="t"
    )
    await wait_for_file(ready)
    outcome = await process.stop(timedelta(seconds=5))
    assert outcome.state is ProcessState.KILLED  # we ended it: not a success, however it exited
    assert outcome.exit_code == 0
    assert outcome.signal is None
    assert outcome.stdout.head == b"bye\n"
    assert not outcome.succeeded
    assert outcome.duration < timedelta(seconds=5)


async def test_t1_stop_escalates_to_sigkill_after_the_grace(
    supervisor: Supervisor, tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    process = await supervisor.start(sh(f"trap '' TERM; echo > {ready}; sleep 30"), task_key="t")
    await wait_for_file(ready)
    outcome = await process.stop(timedelta(milliseconds=200))
    assert outcome.state is ProcessState.KILLED
    assert outcome.signal == signal.SIGKILL
    assert outcome.duration >= timedelta(milliseconds=200)


async def test_t1_cancelling_stop_does_not_cancel_the_sigkill(
    supervisor: Supervisor, tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    process = await supervisor.start(sh(f"trap '' TERM; echo > {ready}; sleep 30"), task_key="t")
    await wait_for_file(ready)
    stopping = asyncio.create_task(process.stop(timedelta(milliseconds=200)))
    await asyncio.sleep(0.05)
    stopping.cancel()
    outcome = await process.wait()
    assert outcome.state is ProcessState.KILLED
    assert outcome.signal == signal.SIGKILL
    assert stopping.cancelled()


async def test_t1_leftovers_of_a_finished_process_are_killed(
    supervisor: Supervisor, tmp_path: Path
) -> None:
    pid_file = tmp_path / "grandchild.pid"
    # The grandchild keeps stdout open: the outcome must not wait for it to end.
    started = time.monotonic()
    outcome = await (
        await supervisor.start(sh(f"sleep 30 & echo $! > {pid_file}; echo done"), task_key="t")
    ).wait()
    assert time.monotonic() - started < 5
    assert outcome.succeeded
    assert outcome.stdout.head == b"done\n"
    await wait_gone(int(pid_file.read_text()))


async def test_t1_a_process_that_left_the_group_cannot_hold_the_outcome_hostage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pid_file = tmp_path / "escaped.pid"
    # The leader waits until the escapee has its own session, or the end-of-task sweep of the
    # group would catch it first.
    escaped_spec = (
        f"setsid sh -c 'echo $$ > {pid_file}; exec sleep 30' & "
        f"until [ -s {pid_file} ]; do sleep 0.01; done; echo done"
    )
    async with Supervisor(drain_timeout=timedelta(milliseconds=200)) as sup:
        process = await sup.start(sh(escaped_spec), task_key="t")
        escaped = int(await wait_for_file(pid_file))
        try:
            outcome = await process.wait()
        finally:
            os.kill(escaped, signal.SIGKILL)  # outside the group: not ours to kill, but a test's
    assert outcome.succeeded
    assert outcome.stdout.head == b"done\n"
    assert any("still open" in r.getMessage() for r in caplog.records)


# -- T9: honest outcomes -----------------------------------------------------------------------


async def test_t9_external_sigkill_is_killed_with_signal_9_never_success(
    supervisor: Supervisor,
) -> None:
    process = await supervisor.start(ProcessSpec(argv=("sleep", "30")), task_key="t")
    assert process.pid is not None
    os.kill(process.pid, signal.SIGKILL)
    outcome = await process.wait()
    assert outcome.state is ProcessState.KILLED
    assert outcome.signal == 9
    assert outcome.signal_name == "SIGKILL"
    assert outcome.exit_code is None
    assert not outcome.succeeded
    assert outcome.reason is not None
    assert "from outside" in outcome.reason
    assert process.pid not in our_children()  # reaped: no zombie left behind


# -- T10: bounded output -----------------------------------------------------------------------


async def test_t1_output_capture_keeps_head_and_tail_and_counts_every_byte(
    supervisor: Supervisor,
) -> None:
    size = 20_000_000
    spec = sh(f"printf BEGIN; head -c {size} /dev/zero; printf END; printf oops >&2",
              capture_limit_bytes=128 * KIB)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        outcome = await (await supervisor.start(spec, task_key="t")).wait()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert outcome.succeeded
    out = outcome.stdout
    assert out.total_bytes == size + 8
    # One budget for both streams: stderr's 4 bytes are kept whole, stdout gets the rest, half
    # to its head and half to its tail.
    share = 128 * KIB - 4
    assert out.head == b"BEGIN" + bytes(share // 2 - 5)
    assert out.tail == bytes(share // 2 - 3) + b"END"
    assert out.dropped_bytes == size + 8 - share
    assert out.truncated
    assert outcome.stderr == Capture(head=b"oops", total_bytes=4)
    assert peak < 4 * 1024 * KIB  # 20 MB went through; a few hundred KiB were ever held


async def test_r1_capture_of_both_streams_stays_within_its_bound(
    supervisor: Supervisor,
) -> None:
    """The default bound (a result envelope's 2 MiB) is shared by stdout and stderr: 48 MB go
    through, the bound is what is kept, and little more is ever held."""
    spec = sh("head -c 40000000 /dev/zero; head -c 8000000 /dev/zero >&2")
    assert spec.capture_limit_bytes == 2 * 1024 * KIB
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        outcome = await (await supervisor.start(spec, task_key="t")).wait()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    out, err = outcome.stdout, outcome.stderr
    assert (out.total_bytes, err.total_bytes) == (40_000_000, 8_000_000)
    kept = [len(c.head) + len(c.tail) for c in (out, err)]
    assert kept == [1024 * KIB, 1024 * KIB]  # both over half: an even split
    assert out.dropped_bytes + err.dropped_bytes == 48_000_000 - 2 * 1024 * KIB
    assert peak < 6 * 1024 * KIB  # the bound, the chunk being read, and the final copy


async def test_t10_capture_limit_is_configurable(supervisor: Supervisor) -> None:
    spec = sh("printf 0123456789abcdefghij", capture_limit_bytes=8)
    out = (await (await supervisor.start(spec, task_key="t")).wait()).stdout
    assert (out.head, out.tail, out.total_bytes, out.dropped_bytes) == (b"0123", b"ghij", 20, 12)


def test_t10_excerpt_is_bounded_and_marks_what_was_left_out() -> None:
    whole = Capture(head=b"abc", tail=b"def", total_bytes=6)
    assert whole.excerpt(100) == b"abcdef"
    assert not whole.truncated
    cut = Capture(head=b"H" * 1000, tail=b"T" * 1000, total_bytes=10_000, dropped_bytes=8_000)
    for limit in (0, 5, 40, 100, 1999, 5000):
        excerpt = cut.excerpt(limit)
        assert len(excerpt) <= limit
    excerpt = cut.excerpt(100)
    assert excerpt.startswith(b"H")
    assert excerpt.endswith(b"T")
    shown = excerpt.count(b"H") + excerpt.count(b"T")
    assert f"[... {10_000 - shown} bytes omitted ...]".encode() in excerpt
    assert cut.excerpt(5000).count(b"H") == 1000  # room to spare: all of head and tail
    # Whole output that does not fit the limit is cut too, with the same marker.
    assert b"omitted" in Capture(head=b"x" * 200, total_bytes=200).excerpt(100)
    with pytest.raises(InvalidInputError):
        Capture(head=b"abc", total_bytes=2)


# -- on_exit -----------------------------------------------------------------------------------


async def test_t1_on_exit_is_called_once_after_the_end(supervisor: Supervisor) -> None:
    calls: list[ProcessOutcome] = []

    async def on_exit(outcome: ProcessOutcome) -> None:
        await asyncio.sleep(0)
        calls.append(outcome)
        assert await process.wait() is outcome  # waiting on itself does not deadlock

    process = await supervisor.start(sh("echo hi"), task_key="t", on_exit=on_exit)
    outcome = await process.wait()
    assert calls == [outcome]  # wait() returns after on_exit ran
    assert outcome.stdout.head == b"hi\n"  # the pipes were drained first
    await asyncio.sleep(0.05)
    assert len(calls) == 1


async def test_t1_on_exit_errors_are_logged_and_the_supervisor_goes_on(
    supervisor: Supervisor, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(outcome: ProcessOutcome) -> None:
        raise RuntimeError("journal unavailable")

    outcome = await (
        await supervisor.start(ProcessSpec(argv=("true",)), task_key="t", on_exit=broken)
    ).wait()
    assert outcome.succeeded
    assert any(
        r.levelno == logging.ERROR and r.exc_info and "journal unavailable" in str(r.exc_info[1])
        for r in caplog.records
    )
    again = await (await supervisor.start(ProcessSpec(argv=("true",)), task_key="t")).wait()
    assert again.succeeded  # same key is free again once the first ended


# -- close and the registry --------------------------------------------------------------------


async def test_t1_close_stops_everything_and_is_idempotent(tmp_path: Path) -> None:
    sup = Supervisor()
    pid_file = tmp_path / "grandchild.pid"
    ended: list[str] = []
    processes = [
        await sup.start(ProcessSpec(argv=("sleep", "30")), task_key="a"),
        await sup.start(sh(f"sleep 30 & echo $! > {pid_file}; sleep 30"), task_key="b"),
        await sup.start(
            sh("trap '' TERM; sleep 30"),
            task_key="c",
            on_exit=lambda o: ended.append(o.task_key),
        ),
    ]
    grandchild = int(await wait_for_file(pid_file))
    with pytest.raises(DuplicateTaskKeyError):
        await sup.start(ProcessSpec(argv=("true",)), task_key="a")
    assert set(sup.running()) == set(processes)
    assert sup.get("b") is processes[1]
    await asyncio.gather(sup.close(grace=timedelta(milliseconds=200)), sup.close())
    assert sup.running() == ()
    for process in processes:
        assert process.outcome is not None
        assert process.outcome.state is ProcessState.KILLED
        assert process.pid is not None
        await wait_gone(process.pid)
    await wait_gone(grandchild)
    assert not {p.pid for p in processes} & our_children()  # all reaped
    assert ended == ["c"]
    await sup.close()
    with pytest.raises(SupervisorClosedError):
        await sup.start(ProcessSpec(argv=("true",)), task_key="d")
