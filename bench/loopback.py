"""Servers the bench runs on a free loopback port, as subprocesses of its own.

(The tests have their own helper; the bench does not import the tests.)
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence

START_S = 30.0
"""How long a server may take to accept connections."""


def free_port() -> int:
    """A port no one listens on now (the OS's pick), on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def listening(argv: Sequence[str], port: int, *, env: Mapping[str, str] | None = None,
              what: str = "the server") -> Iterator[subprocess.Popen[bytes]]:
    """Run ``argv`` (a server told to listen on ``port``) for the block, from the moment it
    accepts connections; it is terminated at the end. A server that exits first, or is not
    listening within :data:`START_S`, is a ``RuntimeError``."""
    process = subprocess.Popen(list(argv), env={**os.environ, **(env or {})},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + START_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{what} exited: {process.returncode}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start within {START_S:.0f} s")
            time.sleep(0.05)
        yield process
    finally:
        process.terminate()
        process.wait(10)
