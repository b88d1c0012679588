"""The console benchmark: how soon the page shows what the model writes, and how soon it is
ready with many conversations in the database.

    python bench/console.py [--quick] [--backend sqlite|postgres|both] [--postgres-dsn DSN]
                            [--conversations 1000] [--chunks 100] [--chunk-ms 10]

A real server (the runtime and ``create_app``, as ``tidings serve`` runs them) serves the
console to headless Chromium driven by Selenium (Debian's ``chromium`` and
``chromium-driver``).

* **delta to DOM**: a model emits its answer as ``--chunks`` pieces, ``--chunk-ms`` apart,
  stamping the wall clock the moment it hands each piece to the runtime (the adapter
  "receiving" it). In the page a ``MutationObserver`` on the answer being written stamps, with
  the browser's wall clock (``performance.timeOrigin + performance.now()``), every change of
  its text. A piece's latency is the first stamp at which the text holds it, minus the piece's
  own stamp (one machine, one clock): the feed's fetch stream, the SSE parsing and the DOM
  update included.
* **load**: ``--conversations`` conversations are in the database (some with a finished run);
  the console is loaded afresh, signed in, and its list of conversations is on screen: the time
  from navigation start to the list rendered (``performance.mark('tidings-list-ready')``), the
  page's scripts, ``/v1/session`` and the newest page of ``/v1/conversations`` included.

Progress goes to stderr; stdout gets a table and, last, one JSON line: ``console_delta_p50_ms``,
``console_delta_p99_ms`` (goal <= 150), ``console_load_ms`` (the median load, goal <= 1,000)
and ``console_load_max_ms`` for SQLite, the same with ``pg_`` for PostgreSQL, the raw SQLite
commit p50 of the same run, and the settings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import httpx
from harness import (
    DEFAULT_DSN,
    Results,
    fmt,
    guarded,
    log,
    raw_sqlite_commit_us,
    run_main,
    scratch_url,
    source_revision,
)
from loopback import free_port
from rich.console import Console
from rich.table import Table
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from stream import StreamModel

from tidings.runtime.root import Runtime
from tidings.service.app import Server, create_app
from tidings.types import Profile

TOKEN, PRINCIPAL = "bench-console-token", "bench"
WAIT_S = 60.0


@dataclass(frozen=True)
class Plan:
    name: str
    answers: int  # streamed answers measured
    loads: int  # fresh page loads measured
    with_runs: int  # of the conversations, how many get a finished run


QUICK = Plan("quick", answers=3, loads=5, with_runs=20)
FULL = Plan("full", answers=10, loads=20, with_runs=100)

OBSERVE = """
window.__marks = [];
const drafts = document.getElementById('drafts');
new MutationObserver(() => {
  const text = drafts.querySelector('.msg.draft .text');
  if (text) window.__marks.push([performance.timeOrigin + performance.now(),
                                 text.textContent.length]);
}).observe(drafts, {subtree: true, childList: true, characterData: true});
"""


def chromium() -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1440,960", "--no-first-run",
                     "--disable-extensions", "--disable-background-networking"):
        options.add_argument(argument)
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    return webdriver.Chrome(options=options, service=Service(driver))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def sign_in(driver: webdriver.Chrome, base: str) -> None:
    driver.get(f"{base}/console/")
    wait = WebDriverWait(driver, WAIT_S)
    wait.until(lambda d: d.find_elements(By.ID, "token"))
    driver.find_element(By.ID, "token").send_keys(TOKEN)
    driver.find_element(By.CSS_SELECTOR, "#signin button[type=submit]").click()
    wait.until(lambda d: d.find_elements(By.ID, "me"))


def load_once(driver: webdriver.Chrome, base: str) -> float:
    """One fresh load of the console, signed in: ms from navigation start to the list."""
    driver.get("about:blank")
    driver.get(f"{base}/console/#/")
    WebDriverWait(driver, WAIT_S).until(lambda d: d.execute_script(
        "return performance.getEntriesByName('tidings-list-ready').length > 0"))
    rows = len(driver.find_elements(By.CSS_SELECTOR, "#conversations tbody tr"))
    if rows == 0:
        raise RuntimeError("the list rendered no conversation")
    return float(driver.execute_script(
        "return performance.getEntriesByName('tidings-list-ready')[0].startTime"))


def open_conversation(driver: webdriver.Chrome, base: str, conversation: str) -> None:
    driver.get(f"{base}/console/#/c/{conversation}")
    WebDriverWait(driver, WAIT_S).until(lambda d: d.find_elements(
        By.CSS_SELECTOR, "#feed-state[data-state='live']"))
    driver.execute_script(OBSERVE)


def committed(driver: webdriver.Chrome, answers: int) -> bool:
    return len(driver.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant")) >= answers


async def fill(rt: Runtime, count: int, with_runs: int) -> list[str]:
    """``count`` conversations of the principal; the newest ``with_runs`` answered once."""
    ids: list[str] = []
    for n in range(count):
        created = await rt.create_conversation(PRINCIPAL, Profile(model="bench"),
                                               title=f"conversation {n}")
        ids.append(created.conversation_id)
    model = rt.models["bench"]
    assert isinstance(model, StreamModel)
    chunks, delay = model.chunks, model.delay_s
    model.chunks, model.delay_s = 4, 0.0
    for conversation in ids[-with_runs:]:
        await rt.post(conversation, "hello", wait=True, timeout=WAIT_S)
    model.chunks, model.delay_s = chunks, delay
    return ids


async def measure(backend: str, args: argparse.Namespace, plan: Plan) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    async with scratch_url(backend, args.postgres_dsn, "console") as url:
        model = StreamModel()
        model.chunks, model.delay_s = args.chunks, args.chunk_ms / 1000
        async with Runtime.open(url, models=[model]) as rt:
            log(f"  {backend}: {args.conversations} conversations")
            t0 = time.perf_counter()
            await fill(rt, args.conversations, plan.with_runs)
            figures["fill_s"] = round(time.perf_counter() - t0, 1)
            server = Server(create_app(rt, tokens={TOKEN: PRINCIPAL}), port=free_port(),
                            log_level="warning")
            serving = asyncio.create_task(server.serve())
            driver: webdriver.Chrome | None = None
            try:
                for _ in range(3000):  # as bench/stream.py waits: the server sets a flag
                    if server.started:
                        break
                    await asyncio.sleep(0.01)
                base = f"http://127.0.0.1:{server.port}"
                driver = await asyncio.to_thread(chromium)
                await asyncio.to_thread(sign_in, driver, base)

                log(f"  {backend}: {plan.loads} fresh loads of the list")
                await asyncio.to_thread(load_once, driver, base)  # warm: the server's caches
                loads = [await asyncio.to_thread(load_once, driver, base)
                         for _ in range(plan.loads)]
                figures["load_ms"] = {"p50": statistics.median(loads), "max": max(loads),
                                      "samples": loads}

                log(f"  {backend}: {plan.answers} answers of {args.chunks} pieces")
                conversation = (await rt.create_conversation(
                    PRINCIPAL, Profile(model="bench"), title="streaming")).conversation_id
                await asyncio.to_thread(open_conversation, driver, base, conversation)
                latencies: list[float] = []
                missing = 0
                async with httpx.AsyncClient(base_url=base, timeout=WAIT_S, headers={
                        "Authorization": f"Bearer {TOKEN}"}) as client:
                    for n in range(plan.answers):
                        await asyncio.to_thread(driver.execute_script, "window.__marks = [];")
                        posted = await client.post(
                            f"/v1/conversations/{conversation}/inputs",
                            json={"content": f"answer {n}"})
                        posted.raise_for_status()
                        await asyncio.to_thread(WebDriverWait(driver, WAIT_S).until,
                                                lambda d, n=n: committed(d, n + 1))
                        stamps = list(model.stamps)
                        marks: list[list[float]] = await asyncio.to_thread(
                            driver.execute_script, "return window.__marks")
                        for offset, ns in stamps:
                            shown = next((at for at, length in marks if length > offset), None)
                            if shown is None:
                                missing += 1
                            else:
                                latencies.append(shown - ns / 1e6)
                figures["delta_ms"] = {
                    "p50": statistics.median(latencies), "p99": percentile(latencies, 0.99),
                    "max": max(latencies), "pieces": len(latencies), "missing": missing,
                }
            finally:
                if driver is not None:
                    await asyncio.to_thread(driver.quit)
                server.should_exit = True
                await serving
    return figures


async def main_async(args: argparse.Namespace) -> int:
    plan = QUICK if args.quick else FULL
    results = Results()
    started = time.monotonic()
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    for backend in backends:
        prefix = "sqlite" if backend == "sqlite" else "pg"

        async def step(backend: str = backend) -> dict[str, Any]:
            return await measure(backend, args, plan)

        figure = await guarded(results, f"{prefix}_console", step)
        if figure is not None:
            results.figures[f"{prefix}_console"] = figure

    def get(prefix: str, *path: str) -> Any:
        value: Any = results.figures.get(f"{prefix}_console", {})
        for p in path:
            value = value.get(p) if isinstance(value, dict) else None
        return value

    headline: dict[str, Any] = {}
    for prefix, key in (("sqlite", "console"), ("pg", "pg_console")):
        headline[f"{key}_delta_p50_ms"] = get(prefix, "delta_ms", "p50")
        headline[f"{key}_delta_p99_ms"] = get(prefix, "delta_ms", "p99")
        headline[f"{key}_load_ms"] = get(prefix, "load_ms", "p50")
        headline[f"{key}_load_max_ms"] = get(prefix, "load_ms", "max")
    raw_us = raw_sqlite_commit_us(1.0)
    print_table(results, raw_us)
    print(json.dumps({
        **headline,
        "raw_sqlite_commit_us": raw_us,
        "seconds": round(time.monotonic() - started, 1),
        "errors": results.errors,
        "figures": results.figures,
        "settings": {"plan": plan.name, "conversations": args.conversations,
                     "chunks": args.chunks, "chunk_ms": args.chunk_ms,
                     "command": "python bench/console.py" + (" --quick" if args.quick else ""),
                     "revision": source_revision()},
    }))
    return 1 if results.errors else 0


def print_table(results: Results, raw_us: float) -> None:
    table = Table(title="the console in headless Chromium")
    table.add_column("figure")
    for name in ("SQLite", "PostgreSQL"):
        table.add_column(name, justify="right")
    table.add_column("goal", justify="right")

    def cell(prefix: str, *path: str) -> str:
        value: Any = results.figures.get(f"{prefix}_console", {})
        for p in path:
            value = value.get(p, {}) if isinstance(value, dict) else None
        return fmt(value if not isinstance(value, dict) else None, 1)

    for key, goal in (("p50", ""), ("p99", "<= 150"), ("max", ""), ("missing", "0")):
        label = "pieces never shown" if key == "missing" else f"delta to DOM {key} (ms)"
        table.add_row(label, cell("sqlite", "delta_ms", key),
                      cell("pg", "delta_ms", key), goal)
    for key, goal in (("p50", "<= 1,000"), ("max", "")):
        table.add_row(f"load to list {key} (ms)", cell("sqlite", "load_ms", key),
                      cell("pg", "load_ms", key), goal)
    table.add_row("raw SQLite commit p50 (µs)", fmt(raw_us, 0), "", "")
    Console().print(table)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="the small plan (under two minutes)")
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN)
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--chunks", type=int, default=100)
    parser.add_argument("--chunk-ms", type=float, default=10.0)
    return parser.parse_args(argv)


def main() -> int:
    return run_main(main_async, parse_args())


if __name__ == "__main__":
    sys.exit(main())
