"""The tools benchmark: what a typed tool (``@tidings.tool``) adds to a tool call.

    python bench/tools.py [--quick] [--seconds S]

Each call goes through ``tidings.turns.calls.execute``, the path a turn runs every tool call
on (the lookup by name, the span, the result's size bound), with no database involved -- so no
``--backend``. Measured, interleaved call by call so that the machine's noise falls on all:

1. handler -- a bare ``async (ctx, args)`` handler, awaited directly: it reads its arguments
              from the mapping and returns JSON text;
2. bare    -- that handler as a hand-written :class:`tidings.Tool`, through the turn's path;
3. typed   -- the same function decorated with ``@tidings.tool``, through the turn's path: its
              arguments validated by the pydantic model built from its signature, its dict
              result encoded as JSON;
4. typed_sync -- the same, as a sync function (it runs in a worker thread);
5. invalid -- the typed tool called with bad arguments (the typed error the model reads).

``tool_validation_overhead_us`` is p50(typed) - p50(handler): a decorated, validated call
through the turn's path against the bare handler (goal: at most 50 us); of that,
``tool_decorator_overhead_us`` = p50(typed) - p50(bare) is the decorator's own share.
``mcp_overhead_ratio`` -- a stdio MCP tool call through tidings against the ``mcp`` SDK's
client alone, p50 over p50 (goal <= 1.2) -- comes from ``bench/mcp_overhead.py``'s measurement.
From ``bench/mcp_figures.py`` (against bench/mcp_task_server.py, FastMCP with ``fastmcp-tasks``):
``mcp_task_overhead_ratio`` -- a background MCP task through a tidings turn, from the post to the
commit of the woken turn's notice message, over the same task called and polled to its end
(``tasks/get``, the same 50 ms interval) by the SDK's client alone, p50 over p50 (goal <= 1.3);
``mcp_large_result_mb_s`` -- a 2 MiB text result over streamable HTTP, called inside a turn (from
the model's call to its reading the result, kept whole as a result envelope), MB/s of the p50
(goal >= 20), with the SDK's client alone beside it (``mcp_large_result_sdk_mb_s``). The raw
SQLite commit p50 of the same run (``sqlite_raw_commit_p50_us``, before and after, averaged)
is beside them.

Progress goes to stderr; stdout gets a table and, last, one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any

from harness import err, fmt, log, pct_us, raw_sqlite_commit_us, run_main, source_revision
from mcp_figures import measure_large, measure_task
from mcp_overhead import measure as mcp_measure
from outbox import machine
from rich.table import Table

import tidings
from tidings import Profile, StartKind, Tool, ToolContext, ToolOutput
from tidings.models.base import ToolCall
from tidings.support.tracing import Tracing
from tidings.turns.calls import execute
from tidings.turns.plan import TurnPlan
from tidings.types import ConversationId, RunId

GOAL_US = 50.0
ARGUMENTS = {"city": "Delft", "days": 3, "unit": "celsius"}


def forecast(city: str, days: int, unit: str) -> dict[str, Any]:
    return {"city": city, "days": days, "unit": unit, "sky": ["clear"] * days}


async def bare_handler(context: ToolContext, arguments: Mapping[str, Any]) -> str:
    return json.dumps(forecast(arguments["city"], arguments["days"], arguments["unit"]))


BARE = Tool("forecast", "The weather ahead.", bare_handler, parameters={
    "type": "object", "required": ["city"],
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                   "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}})


@tidings.tool(name="forecast")
async def typed_forecast(city: Annotated[str, "The city"], days: int = 1,
                         unit: str = "celsius") -> dict[str, Any]:
    """The weather ahead."""
    return forecast(city, days, unit)


@tidings.tool(name="forecast")
def typed_sync_forecast(city: Annotated[str, "The city"], days: int = 1,
                        unit: str = "celsius") -> dict[str, Any]:
    """The weather ahead."""
    return forecast(city, days, unit)


def plan() -> TurnPlan:
    return TurnPlan(ConversationId("conv_bench"), RunId("run_bench"), StartKind.PERSON, "slot",
                    Profile(model="scripted", tools=("forecast",)), (), 0, 0, 0, None)


def calls(tool: Tool, arguments: Mapping[str, Any]) -> Callable[[], Awaitable[ToolOutput]]:
    """One tool call through the turn's path (no tracer installed: spans are no-ops)."""
    the_plan, tracing, offered = plan(), Tracing(), (tool,)
    call = ToolCall("call_1", "forecast", dict(arguments))
    return lambda: execute(the_plan, offered, call, tracing)


def text(output: str | ToolOutput) -> str:
    return output.content if isinstance(output, ToolOutput) else output


async def measure(seconds: float) -> dict[str, list[float]]:
    context = ToolContext(ConversationId("conv_bench"), RunId("run_bench"), "call_1")
    arguments = dict(ARGUMENTS)
    kinds: dict[str, Callable[[], Awaitable[str | ToolOutput]]] = {
        "handler": lambda: bare_handler(context, arguments),
        "bare": calls(BARE, ARGUMENTS),
        "typed": calls(typed_forecast, ARGUMENTS),
        "typed_sync": calls(typed_sync_forecast, ARGUMENTS),
        "invalid": calls(typed_forecast, {"town": 42}),
    }
    # The same output from both: the comparison is of like with like.
    same = [text(await kinds[k]()) for k in ("handler", "bare", "typed", "typed_sync")]
    assert len({json.dumps(json.loads(t), sort_keys=True) for t in same}) == 1, same
    invalid = await kinds["invalid"]()
    assert isinstance(invalid, ToolOutput)
    assert invalid.is_error
    samples: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(200):  # warm up
        for step in kinds.values():
            await step()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for kind, step in kinds.items():
            t0 = time.perf_counter()
            await step()
            samples[kind].append(time.perf_counter() - t0)
    return samples


def table(figures: dict[str, dict[str, float]]) -> None:
    out = Table(title="a tool call through the turn's path")
    for column in ("kind", "calls", "p50 us", "p99 us"):
        out.add_column(column, justify="left" if column == "kind" else "right")
    for kind, f in figures.items():
        out.add_row(kind, fmt(f["calls"]), fmt(f["p50_us"], 1), fmt(f["p99_us"], 1))
    err.print(out)


async def main_async(args: argparse.Namespace) -> int:
    log(f"tools bench: {args.seconds:.0f} s of interleaved calls")
    samples = await measure(args.seconds)
    figures = {k: {"calls": len(s), "p50_us": pct_us(s, 0.5), "p99_us": pct_us(s, 0.99)}
               for k, s in samples.items()}
    table(figures)
    overhead = figures["typed"]["p50_us"] - figures["handler"]["p50_us"]
    decorator = figures["typed"]["p50_us"] - figures["bare"]["p50_us"]
    sync_overhead = figures["typed_sync"]["p50_us"] - figures["handler"]["p50_us"]
    log(f"tool_validation_overhead_us = {overhead:.1f} (goal <= {GOAL_US:.0f})")
    log("mcp: a stdio tool call through tidings vs the SDK's client alone")
    mcp = await mcp_measure(rounds=5 if args.quick else 20, calls=50)
    log(f"mcp_overhead_ratio = {mcp['mcp_overhead_ratio']:.2f} (goal <= 1.2)")
    load_before = os.getloadavg()
    raw = [raw_sqlite_commit_us(1.0 if args.quick else 3.0)]
    log("mcp: a background task, start to notice, through tidings vs the SDK polling it")
    task = await measure_task(rounds=10 if args.quick else 30)
    t = task["figures"]
    log(f"mcp_task_overhead_ratio = {task['mcp_task_overhead_ratio']:.3f} (goal <= 1.3): "
        f"tidings p50 {t['tidings_p50_ms']:.1f} ms, SDK p50 {t['sdk_p50_ms']:.1f} ms")
    log("mcp: a 2 MiB result over streamable HTTP")
    large = await measure_large(rounds=5 if args.quick else 15)
    g = large["figures"]
    log(f"mcp_large_result_mb_s = {large['mcp_large_result_mb_s']:.1f} (goal >= 20): in a turn "
        f"p50 {g['turn_call_p50_ms']:.1f} ms; SDK alone {large['mcp_large_result_sdk_mb_s']:.1f}"
        f" MB/s")
    raw.append(raw_sqlite_commit_us(1.0 if args.quick else 3.0))
    print(json.dumps({
        "bench": "tools", "revision": source_revision(), "seconds": args.seconds,
        "results": figures,
        "tool_validation_overhead_us": round(overhead, 2),
        "tool_decorator_overhead_us": round(decorator, 2),
        "tool_sync_overhead_us": round(sync_overhead, 2),
        "tool_validation_goal_us": GOAL_US,
        # -- MCP: a stdio MCP tool call through tidings / the mcp SDK's client alone. ------
        "mcp_overhead_ratio": round(float(mcp["mcp_overhead_ratio"]), 3),
        "mcp": mcp,
        # -- MCP: a background task, start to notice; a 2 MiB result over HTTP. -----------
        "mcp_task_overhead_ratio": task["mcp_task_overhead_ratio"],
        "mcp_task_tidings_p50_ms": t["tidings_p50_ms"],
        "mcp_task_tidings_p90_ms": t["tidings_p90_ms"],
        "mcp_task_sdk_p50_ms": t["sdk_p50_ms"],
        "mcp_task_sdk_p90_ms": t["sdk_p90_ms"],
        "mcp_large_result_mb_s": large["mcp_large_result_mb_s"],
        "mcp_large_result_sdk_mb_s": large["mcp_large_result_sdk_mb_s"],
        "mcp_large_result_connection_mb_s": large["mcp_large_result_connection_mb_s"],
        "mcp_task": task,
        "mcp_large_result": large,
        "sqlite_raw_commit_p50_us": round(statistics.mean(raw), 1),
        "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
        "quick": args.quick, "machine": machine(),
    }))
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="the small plan (under a minute)")
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="how long the interleaved calls run")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = min(args.seconds, 3.0)
    return args


def main() -> int:
    return run_main(main_async, parse_args())


if __name__ == "__main__":
    sys.exit(main())
