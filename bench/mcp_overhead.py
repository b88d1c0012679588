"""The overhead of an MCP tool call made through tidings, against the ``mcp`` SDK alone.

Both sides call the same ``echo`` tool of a stdio MCP server (bench/mcp_echo_server.py, a
subprocess of its own for each side): tidings through the tool a runtime would offer the
model (the registered ``bench.echo`` handler of its MCP connection component: the typed
errors, the broken-connection watch, the result mapping), the SDK through ``Client.call_tool``
on a session it holds. Rounds alternate between the two sides so drift on a shared machine
falls on both. ``mcp_overhead_ratio`` is p50(tidings) / p50(SDK); the goal is at most 1.2.

    .venv/bin/python bench/mcp_overhead.py --quick

Progress goes to stderr; the last line of stdout is one JSON object. ``measure()`` is what
bench/tools.py imports to put the ratio beside its own figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import harness  # noqa: F401  (first: it keeps bench/a2a.py from shadowing the a2a package)
from mcp import Client, StdioServerParameters

from tidings.mcp import MCPServer
from tidings.mcp.connection import MCPConnection
from tidings.support.metrics import Metrics
from tidings.tools.registry import ToolContext, ToolRegistry
from tidings.types import ConversationId, RunId

SERVER = Path(__file__).with_name("mcp_echo_server.py")
GOAL = 1.2


async def _sdk_side(stack: contextlib.AsyncExitStack) -> Any:
    client = await stack.enter_async_context(Client(
        StdioServerParameters(command=sys.executable, args=[str(SERVER)]), cache=None))

    async def call(text: str) -> None:
        result = await client.call_tool("echo", {"text": text})
        if result.is_error:
            raise RuntimeError(f"the echo call failed: {result!r}")
    return call


async def _tidings_side(stack: contextlib.AsyncExitStack) -> Any:
    registry = ToolRegistry()
    connection = MCPConnection(MCPServer("bench", command=[sys.executable, str(SERVER)]),
                               registry, Metrics())
    runner = asyncio.create_task(connection.run())
    stack.push_async_callback(connection.shutdown)
    stack.callback(runner.cancel)
    await connection.tried()
    tool = registry.get("bench.echo")
    if tool is None:
        raise RuntimeError("the bench server's echo tool was not registered")
    context = ToolContext(ConversationId("bench"), RunId("bench"), "call")

    async def call(text: str) -> None:
        output = await tool.handler(context, {"text": text})
        if isinstance(output, str) or output.is_error:
            raise RuntimeError(f"the echo call failed: {output!r}")
    return call


async def measure(*, rounds: int = 20, calls: int = 50, warmup: int = 50) -> dict[str, Any]:
    """p50 and p90 of one call on each side, and their ratio."""
    async with contextlib.AsyncExitStack() as stack:
        sides = {"sdk": await _sdk_side(stack), "tidings": await _tidings_side(stack)}
        for call in sides.values():
            for n in range(warmup):
                await call(f"warm {n}")
        samples: dict[str, list[float]] = {name: [] for name in sides}
        for r in range(rounds):
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for name in order:
                call = sides[name]
                for n in range(calls):
                    started = time.perf_counter()
                    await call(f"round {r} call {n}")
                    samples[name].append(time.perf_counter() - started)
            print(f"round {r + 1}/{rounds}", file=sys.stderr)
    figures: dict[str, Any] = {}
    for name, values in samples.items():
        ordered = sorted(values)
        figures[f"{name}_p50_us"] = round(statistics.median(ordered) * 1e6, 1)
        figures[f"{name}_p90_us"] = round(ordered[int(len(ordered) * 0.9)] * 1e6, 1)
    figures["calls_per_side"] = rounds * calls
    ratio = figures["tidings_p50_us"] / figures["sdk_p50_us"]
    return {"mcp_overhead_ratio": round(ratio, 3), "goal": GOAL, "figures": figures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (seconds)")
    args = parser.parse_args()
    report = asyncio.run(measure(rounds=10, calls=50) if args.quick else measure())
    figures = report["figures"]
    print(f"MCP stdio tool call p50: SDK {figures['sdk_p50_us']} us, "
          f"tidings {figures['tidings_p50_us']} us; ratio {report['mcp_overhead_ratio']} "
          f"(goal <= {GOAL})")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
