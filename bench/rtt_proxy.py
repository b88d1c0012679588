"""A loopback TCP proxy that adds a fixed latency to each direction, for measuring what a round
trip to the database costs (``bench/rtt.py``).

    python bench/rtt_proxy.py [--delay-ms 0.5] [--target-port 5432]   # standalone, see below

It listens on 127.0.0.1 (a free port) and forwards every connection to the target
(127.0.0.1:5432). Every chunk read from either side is written to the other side at the time it
was read plus the delay: a latency, not a throughput limit. Each direction of each connection has
a queue and a forwarding task of its own, so a chunk that arrives while an earlier one waits is
not held behind it (only its order is kept), and connections do not wait for each other.

The proxy runs on an event loop of its own, in a thread (:class:`RttProxy`) or in a child process
(:class:`ProxyProcess`, which runs this file), never on the loop of the runtime it measures. The
loop uses ``select`` rather than ``epoll``: ``epoll_wait`` takes its timeout in whole
milliseconds, so a 0.5 ms wait would become 1 ms; ``select`` takes microseconds. The forwarding
task sleeps until :data:`SPIN_S` before the chunk is due and spins the rest (the kernel's timer
slack is about 50 µs). Every chunk's achieved delay -- sent minus read, by the proxy's own
clock -- is kept: :meth:`RttProxy.stats` gives its p50 and p99.

It also counts, per connection, the round trips the client waited for: each chunk from the
client that follows something from the server (a pipeline sent in several chunks counts once;
a notification the server sends unasked would count the next request too).

Standalone, the proxy prints ``{"port": N}`` on stdout once it listens, answers a ``counts``
line on stdin with the round trips per connection so far (one JSON line), runs until its stdin
is closed, then prints its stats as one JSON line and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import selectors
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

DELAY_S = 0.0005
"""The one-way delay: 0.5 ms each way, a 1 ms round trip."""

SPIN_S = 0.0002
"""The last part of a wait is spun, not slept (timer slack and the loop's own overhead)."""

TARGET = ("127.0.0.1", 5432)


class RttProxy:
    """The proxy on an event loop of its own, in a thread: :meth:`start` returns the port it
    listens on; :meth:`stop` closes every connection and ends the thread."""

    def __init__(self, delay_s: float = DELAY_S, target: tuple[str, int] = TARGET) -> None:
        self.delay_s = delay_s
        self.target = target
        self.port = 0
        self.delays: list[float] = []  # per chunk forwarded: sent minus read, seconds
        self.connections = 0
        # Per connection (numbered from 1): the client's requests that followed an answer, i.e.
        # the round trips it waited for (a pipeline sent in several chunks counts once).
        self.exchanges: dict[int, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._failure: BaseException | None = None

    def start(self) -> int:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="rtt-proxy",
                                        daemon=True)
        self._thread.start()
        ready.wait(10)
        if self._failure is not None:
            raise RuntimeError(f"the proxy did not start: {self._failure!r}")
        if not self.port:
            raise RuntimeError("the proxy did not start within 10 s")
        return self.port

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop ended meanwhile
                self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(10)

    def counts(self) -> dict[int, int]:
        """The round trips each connection has waited for so far (see ``exchanges``)."""
        return dict(self.exchanges)

    def reset(self) -> None:
        """Forget the delays seen so far (the list is swapped, not cleared under the loop)."""
        self.delays = []

    def stats(self) -> dict[str, Any]:
        """The achieved one-way delay per chunk: p50 and p99 in µs, and the chunks counted."""
        delays = sorted(self.delays)
        if not delays:
            return {"proxy_delay_p50_us": None, "proxy_delay_p99_us": None, "proxy_chunks": 0,
                    "proxy_connections": self.connections}
        return {"proxy_delay_p50_us": statistics.median(delays) * 1e6,
                "proxy_delay_p99_us": delays[min(len(delays) - 1, int(0.99 * len(delays)))] * 1e6,
                "proxy_delay_set_us": self.delay_s * 1e6,
                "proxy_chunks": len(delays), "proxy_connections": self.connections}

    # -- on the proxy's loop ---------------------------------------------------------------------

    def _run(self, ready: threading.Event) -> None:
        loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
        self._loop = loop
        try:
            loop.run_until_complete(self._main(ready))
        except BaseException as exc:
            self._failure = exc
        finally:
            ready.set()
            loop.close()

    async def _main(self, ready: threading.Event) -> None:
        loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        server = await loop.create_server(lambda: _Side(self, client=True), "127.0.0.1", 0)
        self.port = int(server.sockets[0].getsockname()[1])
        ready.set()
        try:
            await self._stopping.wait()
        finally:
            server.close()
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            await server.wait_closed()

    def _accepted(self, client: _Side) -> None:
        self.connections += 1
        client.number = self.connections
        self.exchanges[client.number] = 0
        task = asyncio.get_running_loop().create_task(self._connection(client))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connection(self, client: _Side) -> None:
        """Connect to the target, then forward each direction until both have ended."""
        loop = asyncio.get_running_loop()
        upstream: _Side | None = None
        try:
            _, upstream = await loop.create_connection(
                lambda: _Side(self, client=False), *self.target)
            upstream.peer = client
            await asyncio.gather(self._forward(client.queue, upstream),
                                 self._forward(upstream.queue, client))
        except OSError:
            pass  # the target refused, or a side went away: both are closed below
        finally:
            for side in (client, upstream):
                if side is not None and side.transport is not None:
                    side.transport.close()

    async def _forward(self, queue: asyncio.Queue[tuple[float, bytes | None]],
                       to: _Side) -> None:
        """Write each chunk at its due time, in order; ``b""`` is the end of the side's
        stream (half-closed), ``None`` its connection lost."""
        while True:
            due, data = await queue.get()
            wait = due - time.perf_counter() - SPIN_S
            if wait > 0:
                await asyncio.sleep(wait)
            while time.perf_counter() < due:
                pass
            transport = to.transport
            if data is None or transport is None or transport.is_closing():
                if transport is not None:
                    transport.close()
                return
            if not data:
                if transport.can_write_eof():
                    transport.write_eof()
                return
            transport.write(data)
            self.delays.append(time.perf_counter() - due + self.delay_s)


class _Side(asyncio.Protocol):
    """One socket of a proxied connection. What it reads is stamped at once (read + delay)
    and queued for the forwarder that writes it to the other socket."""

    def __init__(self, proxy: RttProxy, *, client: bool) -> None:
        self.proxy = proxy
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.queue: asyncio.Queue[tuple[float, bytes | None]] = asyncio.Queue()
        self.number = 0  # the connection's, on the client's side
        self.peer: _Side | None = None  # the client's side, on the server's side
        self.answered = True  # the server has sent something since the client's last chunk

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.client:
            self.proxy._accepted(self)

    def data_received(self, data: bytes) -> None:
        self.queue.put_nowait((time.perf_counter() + self.proxy.delay_s, data))
        if self.client:
            if self.answered:
                self.answered = False
                self.proxy.exchanges[self.number] += 1
        elif self.peer is not None:
            self.peer.answered = True

    def eof_received(self) -> bool:
        self.queue.put_nowait((time.perf_counter() + self.proxy.delay_s, b""))
        return True  # keep the other half open until the peer closes it

    def connection_lost(self, exc: Exception | None) -> None:
        self.queue.put_nowait((time.perf_counter() + self.proxy.delay_s, None))


class ProxyProcess:
    """The same proxy in a child process (this file run as a script): no interpreter lock
    shared with the measured process. :meth:`start` returns the port; :meth:`stop` ends it and
    keeps its stats."""

    def __init__(self, delay_s: float = DELAY_S, target: tuple[str, int] = TARGET) -> None:
        self.delay_s = delay_s
        self.target = target
        self.port = 0
        self._process: subprocess.Popen[str] | None = None
        self._stats: dict[str, Any] = {}

    def start(self) -> int:
        self._process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--delay-ms",
             str(self.delay_s * 1e3), "--target-host", self.target[0], "--target-port",
             str(self.target[1])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            self._process.wait(10)
            raise RuntimeError(f"the proxy process exited: {self._process.returncode}")
        self.port = int(json.loads(line)["port"])
        return self.port

    def stop(self) -> None:
        process = self._process
        if process is None:
            return
        self._process = None
        assert process.stdin is not None
        assert process.stdout is not None
        with contextlib.suppress(OSError):
            process.stdin.close()
        try:
            out = process.stdout.read()
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            return
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if lines:
            self._stats = json.loads(lines[-1])

    def stats(self) -> dict[str, Any]:
        return self._stats

    def counts(self) -> dict[int, int]:
        """The round trips each connection has waited for so far, asked of the child."""
        process = self._process
        assert process is not None
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write("counts\n")
        process.stdin.flush()
        return {int(k): int(v) for k, v in json.loads(process.stdout.readline()).items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--delay-ms", type=float, default=DELAY_S * 1e3, help="one way")
    parser.add_argument("--target-host", default=TARGET[0])
    parser.add_argument("--target-port", type=int, default=TARGET[1])
    args = parser.parse_args()
    proxy = RttProxy(args.delay_ms / 1e3, (args.target_host, args.target_port))
    print(json.dumps({"port": proxy.start()}), flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        for line in sys.stdin:  # until the parent closes it
            if line.strip() == "counts":
                print(json.dumps(proxy.counts()), flush=True)
    proxy.stop()
    print(json.dumps(proxy.stats()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
