"""The crash torture's worker processes, forked from one that has imported the runtime.

A torture restarts its worker a hundred times and more, and a new interpreter spends 0.35 s of
CPU importing the runtime before it can recover anything -- a third of a kill's cycle. So the
workers are forked from a server process that imported :mod:`tests.crash.torture_worker` once
(multiprocessing's ``forkserver``): each is still a process of its own, opens its own database
connections, and dies by SIGKILL at a random moment like any other. Its standard output and
error come back through pipes, read as the loop's streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
from multiprocessing.connection import Connection

WORKER = "tests.crash.torture_worker"

_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload([WORKER])


def _run(url: str, seed: int, mode: str, out: Connection, err: Connection) -> None:
    """In the forked process: stdout and stderr to the driver's pipes, then the worker."""
    from tests.crash import torture_worker

    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    out.close()
    err.close()
    torture_worker.run(url, seed, mode)


class Forked:
    """A worker process: ``stdout``, ``stderr``, :meth:`kill`, :meth:`wait`, :meth:`communicate`,
    as the loop's subprocesses have them."""

    def __init__(self, process: multiprocessing.process.BaseProcess,
                 stdout: asyncio.StreamReader, stderr: asyncio.StreamReader) -> None:
        self._process = process
        self.stdout = stdout
        self.stderr = stderr

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self._process.kill()

    async def wait(self) -> int:
        await asyncio.to_thread(self._process.join)
        code = self._process.exitcode
        assert code is not None
        return code

    async def communicate(self) -> tuple[bytes, bytes]:
        out, err = await asyncio.gather(self.stdout.read(), self.stderr.read())
        await self.wait()
        return out, err


async def _reader(fd: int) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0))
    return reader


async def fork_worker(url: str, seed: int, mode: str) -> Forked:
    """Start ``torture_worker.run(url, seed, mode)`` in a forked process."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    out, err = Connection(out_w, readable=False), Connection(err_w, readable=False)
    try:
        process = _CONTEXT.Process(target=_run, args=(url, seed, mode, out, err), daemon=True)
        process.start()
    finally:
        out.close()  # the worker holds its own copies: its exit is the streams' end
        err.close()
    return Forked(process, await _reader(out_r), await _reader(err_r))


__all__ = ("Forked", "fork_worker")
