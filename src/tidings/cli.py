"""The command line (A3). The only place ``asyncio.run`` appears.

- ``tidings serve``: the HTTP service over a runtime (SQLite file by default).
- ``tidings post`` / ``tidings watch``: a client of a running service.
- ``tidings status`` / ``tidings dead-letters``: read a database directly (read only: no
  instance is registered, nothing is reconciled).
- ``tidings demo``: the whole mission, offline, as a timeline ending in checks.

Errors a user can act on are one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit, urlunsplit

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tidings import __version__
from tidings.clock import SystemClock
from tidings.conversations import Conversations
from tidings.errors import TidingsError
from tidings.logs import configure_logging, json_logs_requested
from tidings.models.base import Model
from tidings.models.scripted import ScriptedModel
from tidings.outbox import Outbox, OutboxConfig
from tidings.records import run_from_row
from tidings.store import Row, Store, Tx, open_store
from tidings.types import QueueStats, RunStatus

T = TypeVar("T")
console = Console()
log = logging.getLogger("tidings.cli")

TOKENS_ENV = "TIDINGS_TOKENS"
OPERATOR_TOKENS_ENV = "TIDINGS_OPERATOR_TOKENS"
DEFAULT_URL = "http://127.0.0.1:8080"


def _run(main: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine; a failure the user can act on becomes a one-line error."""
    try:
        return asyncio.run(main())  # type: ignore[arg-type]
    except TidingsError as exc:
        raise click.ClickException(f"{exc.code}: {exc.message}") from None
    except OSError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from None


@click.group()
@click.version_option(__version__, prog_name="tidings")
def main() -> None:
    """tidings: the durable kernel of an LLM-agent runtime."""


# -- serve ---------------------------------------------------------------------------------------


def _parse_tokens(values: tuple[str, ...], env: str | None) -> dict[str, str]:
    """``PRINCIPAL=TOKEN`` pairs (options, then ``TIDINGS_TOKENS``) as ``{token: principal}``."""
    pairs = list(values)
    if env:
        pairs += [p.strip() for p in env.split(",") if p.strip()]
    tokens: dict[str, str] = {}
    for pair in pairs:
        principal, sep, token = pair.partition("=")
        principal, token = principal.strip(), token.strip()
        if not sep or not principal or not token:
            raise click.BadParameter(f"expected PRINCIPAL=TOKEN, got {pair.split('=')[0]!r}=…"
                                     if sep else "expected PRINCIPAL=TOKEN",
                                     param_hint="'--token'")
        if tokens.get(token, principal) != principal:
            raise click.BadParameter("one token names two principals", param_hint="'--token'")
        tokens[token] = principal
    return tokens


def _models(specs: tuple[str, ...], base_url: str | None) -> list[Model]:
    """``scripted`` (echo), ``scripted:RULES.json``, ``openai:NAME`` or ``anthropic:NAME``."""
    models: list[Model] = []
    for spec in specs or ("scripted",):
        kind, _, name = spec.partition(":")
        if kind == "scripted":
            models.append(ScriptedModel.from_json(Path(name)) if name else ScriptedModel())
        elif kind in ("openai", "anthropic") and name:
            try:
                if kind == "openai":
                    from tidings.models.openai import OpenAIChatModel

                    models.append(OpenAIChatModel(name, base_url=base_url))
                else:
                    from tidings.models.anthropic import AnthropicModel

                    models.append(AnthropicModel(name, base_url=base_url))
            except ImportError:
                raise click.ClickException(
                    f"the {kind} adapter needs its SDK: pip install 'tidings[{kind}]'"
                ) from None
        else:
            raise click.BadParameter(
                f"unknown model {spec!r}: use scripted, scripted:RULES.json, openai:NAME or "
                "anthropic:NAME", param_hint="'--model'")
    return models


def _redact(url: str) -> str:
    """A database URL without its password, for logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    user = quote(parts.username or "")
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


@main.command()
@click.option("--database", default="tidings.db", show_default=True, envvar="TIDINGS_DATABASE",
              help="A SQLite file path (or sqlite:///path), or postgresql://… to scale out.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--token", "tokens", multiple=True, metavar="PRINCIPAL=TOKEN",
              help=f"A principal's bearer token (repeatable; also ${TOKENS_ENV}=a=t1,b=t2).")
@click.option("--operator-token", "operator_tokens", multiple=True, metavar="TOKEN",
              help=f"An operator's bearer token (repeatable; also ${OPERATOR_TOKENS_ENV}).")
@click.option("--model", "model_specs", multiple=True, metavar="SPEC",
              help="scripted (default), scripted:RULES.json, openai:NAME or anthropic:NAME "
                   "(repeatable; the first is the default profile's model).")
@click.option("--model-base-url", default=None,
              help="Base URL for the openai/anthropic adapters (vLLM, Ollama, a proxy).")
@click.option("--json-logs", is_flag=True,
              help="Log JSON lines (also TIDINGS_LOG_FORMAT=json).")
@click.option("--locked", is_flag=True,
              help="Boot locked (L1): serve, but claim and deliver nothing until an operator "
                   "posts the master key to /v1/unlock.")
def serve(
    database: str, host: str, port: int, tokens: tuple[str, ...],
    operator_tokens: tuple[str, ...], model_specs: tuple[str, ...],
    model_base_url: str | None, json_logs: bool, locked: bool,
) -> None:
    """Run the HTTP service until SIGINT or SIGTERM, then shut down gracefully.

    A restart the runtime accepted (L2: the ``restart`` tool) stops this instance the same way
    and re-executes the process; the new instance completes the restart.
    """
    configure_logging(json_format=json_logs_requested(json_logs))
    by_token = _parse_tokens(tokens, os.environ.get(TOKENS_ENV))
    operators = [*operator_tokens, *(
        t.strip() for t in os.environ.get(OPERATOR_TOKENS_ENV, "").split(",") if t.strip())]
    models = _models(model_specs, model_base_url)
    if not by_token and not operators:
        log.warning("no tokens were given: every request but /health will be refused")

    async def run() -> bool:
        """Serve until a signal (False) or a requested restart (True)."""
        # Imported here: the command line's other commands need no web stack.
        from tidings.runtime import Runtime
        from tidings.service import Server, create_app

        loop = asyncio.get_running_loop()
        stop = asyncio.Event()

        def on_signal(signum: int) -> None:
            if not stop.is_set():
                log.info("shutting down", extra={"signal": signal.Signals(signum).name})
            stop.set()

        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal, signum)
        try:
            async with Runtime.open(database, models=models, locked=locked) as runtime:
                log.info("runtime started", extra={
                    "instance_id": runtime.instance_id, "database": _redact(database),
                    "models": list(runtime.models)})
                if stop.is_set():
                    return False
                # log_config=None: uvicorn's own loggers go through the root handler above.
                server = Server(create_app(runtime, tokens=by_token, operator_tokens=operators),
                                host=host, port=port, log_config=None)

                async def serve_http() -> None:
                    try:
                        await server.serve()
                    except SystemExit:
                        # uvicorn exits the process when it cannot bind: caught in the task,
                        # so that the runtime still closes.
                        raise click.ClickException(
                            f"the server could not start on {host}:{port} (see the log above)"
                        ) from None

                serving = asyncio.create_task(serve_http())
                stopping = asyncio.create_task(stop.wait())
                restart = asyncio.create_task(runtime.restart_requested.wait())
                await asyncio.wait({serving, stopping, restart},
                                   return_when=asyncio.FIRST_COMPLETED)
                restarting = restart.done() and not stop.is_set()
                if restarting:
                    log.info("a restart was requested: restarting",
                             extra={"instance_id": runtime.instance_id})
                stopping.cancel()
                restart.cancel()
                server.should_exit = True  # graceful: open requests finish, feeds end
                done, _ = await asyncio.wait({serving}, timeout=15)
                if not done:
                    serving.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await serving
            log.info("stopped", extra={"instance_id": runtime.instance_id})
            return restarting
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)

    if _run(run):
        # L2: the restart was committed as accepted and this instance has closed; a new
        # process (a new instance) completes it once it is fully up.
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, "-m", "tidings", *sys.argv[1:]])


# -- the client: post, watch ---------------------------------------------------------------------


def _client_options(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option("--token", envvar="TIDINGS_TOKEN", required=True,
                           help="A principal's bearer token (or $TIDINGS_TOKEN).")(command)
    return click.option("--url", envvar="TIDINGS_URL", default=DEFAULT_URL, show_default=True,
                        help="The service's base URL (or $TIDINGS_URL).")(command)


def _problem(response: Any) -> str:
    """A refusal as one line: the problem document's code and detail."""
    try:
        body = response.json()
        return f"{body['code']}: {body['detail']}"
    except (ValueError, KeyError, TypeError):
        text = response.text.strip()[:200] or response.reason_phrase
        return f"HTTP {response.status_code}: {text}"


@main.command()
@_client_options
@click.option("--steer", is_flag=True, help="Join the running turn at its next safe point.")
@click.argument("conversation")
@click.argument("text")
def post(url: str, token: str, steer: bool, conversation: str, text: str) -> None:
    """Post TEXT to CONVERSATION as a person's input; print the accepted input's id."""
    import httpx

    try:
        response = httpx.post(
            f"{url.rstrip('/')}/v1/conversations/{quote(conversation, safe='')}/inputs",
            json={"content": text, "delivery_mode": "steer" if steer else "queue"},
            headers={"Authorization": f"Bearer {token}"}, timeout=30,
        )
    except httpx.HTTPError as exc:
        raise click.ClickException(f"cannot reach {url}: {exc}") from None
    if response.status_code >= 400:
        raise click.ClickException(_problem(response))
    click.echo(response.json()["input_id"])


def _describe(kind: str, data: Mapping[str, Any]) -> str:
    """One readable line for a journal event; an unknown type shows its data as JSON."""
    d = {k: v for k, v in data.items() if v is not None}
    run = d.get("run_public_id", "")
    if kind == "input_accepted":
        who = d.get("authored_by")
        handle = who.get("handle") if isinstance(who, Mapping) else None
        return " ".join(str(p) for p in (
            d.get("origin", "?"), "input", d.get("input_id", ""),
            f"from {handle}" if handle else "", f"task {d['task_key']}" if "task_key" in d else "",
            f"({d['delivery_mode']})" if "delivery_mode" in d else "") if p)
    if kind == "input_materialized":
        return f"input {d.get('input_id', '?')} read by run {run} (message {d.get('message_seq')})"
    if kind == "turn_status":
        extra = [f"{k} {d[k]}" for k in ("trigger", "failure_code", "approval_id") if k in d]
        if isinstance(d.get("approvals"), list):
            extra.append("approvals " + ", ".join(str(a) for a in d["approvals"]))
        return f"run {run} {d.get('status', '?')}" + (f" ({', '.join(extra)})" if extra else "")
    if kind == "tool_calls":
        names = ", ".join(str(c.get("name")) for c in d.get("calls", ()) if isinstance(c, Mapping))
        return f"run {run} calls {names}"
    if kind == "task_status":
        return f"task {d.get('task_key', '?')} {d.get('state', '?')}" + (
            f", notice at message {d['message_seq']}" if "message_seq" in d else "")
    if kind in ("restart_accepted", "restart_completed"):
        return f"operation {d.get('operation_id', '?')}" + (
            f" ({d['status']})" if "status" in d else "")
    text = json.dumps(d, ensure_ascii=False, separators=(",", ":"), default=str)
    return text if len(text) <= 160 else text[:159] + "…"


def _sse(lines: Iterator[str]) -> Iterator[tuple[str | None, str, str]]:
    """Server-Sent Events as (id, event, data); comments and pings are skipped."""
    event_id: str | None = None
    kind = "message"
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield event_id, kind, "\n".join(data)
            event_id, kind, data = None, "message", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "id":
            event_id = value
        elif field == "event":
            kind = value
        elif field == "data":
            data.append(value)


@main.command()
@_client_options
@click.option("--after", type=click.IntRange(min=0), default=0, show_default=True,
              help="Start after this journal sequence.")
@click.argument("conversation")
def watch(url: str, token: str, after: int, conversation: str) -> None:
    """Follow CONVERSATION's event feed, one line per event; reconnects by itself (Ctrl-C ends
    it)."""
    import httpx

    feed = f"{url.rstrip('/')}/v1/conversations/{quote(conversation, safe='')}/events"
    last = after
    delay = 0.5
    status = console.status(f"[dim]connecting to {escape(url)}…")
    status.start()
    try:
        while True:
            headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
            if last:
                headers["Last-Event-ID"] = str(last)
            try:
                with httpx.stream("GET", feed, headers=headers,
                                  timeout=httpx.Timeout(10, read=60)) as response:
                    if response.status_code >= 400:
                        response.read()
                        if response.status_code < 500:
                            raise click.ClickException(_problem(response))
                        raise httpx.HTTPStatusError(
                            _problem(response), request=response.request, response=response)
                    status.update(f"[dim]following {escape(conversation)} "
                                  f"(after seq {last})…")
                    delay = 0.5
                    for event_id, kind, data in _sse(response.iter_lines()):
                        try:
                            event = json.loads(data)
                        except ValueError:
                            event = {"data": data}
                        seq = int(event_id) if event_id and event_id.isdigit() else last
                        at = event.get("at_us")
                        clock = "" if not isinstance(at, int) else datetime.fromtimestamp(
                            at / 1e6, UTC).astimezone().strftime("%H:%M:%S")
                        console.print(
                            f"[dim]{seq:>6}[/] {clock} [bold]{escape(kind)}[/] "
                            f"{escape(_describe(kind, event.get('data', event)))}",
                            highlight=False, soft_wrap=True)
                        last = max(last, seq)
                        status.update(f"[dim]following {escape(conversation)} "
                                      f"(after seq {last})…")
                reason = "the server ended the feed"
            except httpx.HTTPError as exc:
                reason = str(exc) or type(exc).__name__
            status.update(f"[dim]{escape(reason)}; reconnecting after seq {last} in "
                          f"{delay:.1f}s…")
            time.sleep(delay)
            delay = min(delay * 2, 10.0)
    except KeyboardInterrupt:
        pass
    finally:
        status.stop()


# -- inspection: status, dead-letters ------------------------------------------------------------


def _check_database(database: str) -> None:
    """Inspection reads: a SQLite file that is not there is an error, not a new database."""
    if "://" in database and not database.startswith("sqlite://"):
        return
    path = database.removeprefix("sqlite:///") if database.startswith("sqlite://") else database
    if path and not Path(path).is_file():
        raise click.ClickException(f"invalid_input: no database at {path}")


async def _open_for_reading(database: str, conversation: str | None) -> Store:
    """Open the store (no instance is registered) and check that the conversation exists."""
    store = await open_store(database)
    if conversation is not None:
        try:
            await Conversations(store, SystemClock()).get(conversation)
        except BaseException:
            await store.close()
            raise
    return store


def _age(us: int | None, now_us: int) -> str:
    return "-" if us is None else f"{max(0, now_us - us) / 1e6:.1f}s"


def _table(title: str, *columns: str, right: tuple[str, ...] = ()) -> Table:
    """A table whose cells wrap rather than lose characters (ids must stay whole)."""
    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="right" if column in right else "left",
                         overflow="fold")
    return table


def _print(table: Table) -> None:
    if not table.row_count:
        table.caption = "(none)"
    console.print(table)


def _stats_table(title: str, rows: list[QueueStats]) -> Table:
    numbers = ("backlog", "ready", "leased", "oldest age", "retried", "max attempts",
               "dead letters")
    table = _table(title, "conversation", *numbers, right=numbers)
    for s in rows:
        age = "-" if s.oldest_age_us is None else f"{s.oldest_age_us / 1e6:.1f}s"
        table.add_row(s.conversation_id or "(all)", str(s.backlog), str(s.ready), str(s.leased),
                      age, str(s.retried), str(s.max_attempts), str(s.dead_letters))
    return table


@main.command()
@click.option("--database", required=True, help="Database URL or SQLite file path.")
@click.option("--conversation", default=None, help="One conversation (default: all).")
def status(database: str, conversation: str | None) -> None:
    """Show backlog, oldest age, retries, dead letters, open runs (running, or awaiting a
    person's approval), running tasks and instances."""
    _check_database(database)

    async def run() -> None:
        store = await _open_for_reading(database, conversation)
        try:
            outbox = Outbox(store)  # never started: it registers nothing, reconciles nothing
            stats = await outbox.stats(conversation)
            timeout_us = int(OutboxConfig().instance_timeout.total_seconds() * 1e6)

            def read(tx: Tx) -> tuple[list[Row], list[Row], list[Row], list[Row]]:
                instances = tx.all("unreconciled_instances", instance_id="")
                running = [row for i in instances
                           for row in tx.all("running_tasks_of", instance_id=i["instance_id"])]
                orphaned = tx.all("orphaned_tasks", instance_id="", limit=100)
                runs = tx.all("open_runs", conversation_id=conversation or "", limit=100)
                return instances, running, orphaned, runs

            # The store's only instance listing locks what it returns (FOR UPDATE SKIP LOCKED
            # on PostgreSQL, for reconcilers), so it needs a transaction; it writes nothing.
            instances, running, orphaned, runs = await store.transact(read)
        finally:
            await store.close()
        now = SystemClock().now_us()
        _print(_stats_table("signals", [stats]))

        table = _table("instances (live, or gone and not yet reconciled)", "instance", "state",
                       "last heartbeat")
        for i in instances:
            silent = now - int(i["heartbeat_at_us"]) > timeout_us
            state = ("stopped" if i["stopped_at_us"] is not None
                     else "silent (gone?)" if silent else "live")
            table.add_row(i["instance_id"], state, _age(i["heartbeat_at_us"], now) + " ago")
        _print(table)

        table = _table("running tasks", "conversation", "task", "state", "age", "command")
        for t in running:
            if conversation is None or t["conversation_id"] == conversation:
                table.add_row(t["conversation_id"], t["task_key"], "running",
                              _age(t["started_at_us"], now), str(t["command"])[:60])
        for t in orphaned:
            if conversation is None or t["conversation_id"] == conversation:
                table.add_row(t["conversation_id"], t["task_key"],
                              "instance gone (lost at the next sweep)", "-", "")
        _print(table)

        table = _table("open runs", "conversation", "run", "status", "trigger", "age")
        for r in map(run_from_row, runs):
            status = r.status.value + (" (see its approvals)"
                                       if r.status is RunStatus.AWAITING_APPROVAL else "")
            table.add_row(r.conversation_id, r.run_id, status, r.trigger.value,
                          _age(r.started_at_us, now))
        _print(table)
        if stats.dead_letters:
            scope = f" --conversation {conversation}" if conversation else ""
            console.print(f"{stats.dead_letters} dead letter(s): tidings dead-letters "
                          f"--database {_redact(database)}{scope}", highlight=False)

    _run(run)


@main.command("dead-letters")
@click.option("--database", required=True, help="Database URL or SQLite file path.")
@click.option("--conversation", default=None, help="One conversation (default: all).")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
def dead_letters(database: str, conversation: str | None, limit: int) -> None:
    """List dead letters: deliveries that failed for good (nothing replays them)."""
    _check_database(database)

    async def run() -> None:
        store = await _open_for_reading(database, conversation)
        try:
            letters = await Outbox(store).dead_letters(conversation, limit=limit)
        finally:
            await store.close()
        table = _table(f"dead letters ({len(letters)})", "delivery", "event", "conversation",
                       "type", "attempts", "code", "dead since")
        now = SystemClock().now_us()
        for d in letters:
            table.add_row(str(d.delivery_id), d.event_id, d.conversation_id, d.type,
                          str(d.attempts), d.failure_code, _age(d.settled_at_us, now) + " ago")
        _print(table)

    _run(run)


# -- the demo ------------------------------------------------------------------------------------


@main.command()
@click.option("--database", default=None,
              help="Database URL (default: a new SQLite file in a temporary folder).")
def demo(database: str | None) -> None:
    """Run the whole mission end to end, offline, on the embedded default; end with checks."""
    from tidings.demo import run_demo

    if database is None:
        with tempfile.TemporaryDirectory(prefix="tidings-demo-") as folder:
            ok = _run(lambda: run_demo(str(Path(folder) / "demo.db"), console))
    else:
        ok = _run(lambda: run_demo(database, console))
    if not ok:
        sys.exit(1)


@main.command("demo-child", hidden=True)
@click.argument("database")
@click.argument("conversation")
@click.option("--crash", is_flag=True)
def demo_child(database: str, conversation: str, crash: bool) -> None:
    """The demo's restart phase, in a process of its own (started by ``tidings demo``)."""
    from tidings.demo import restart_child

    def report(facts: Mapping[str, Any]) -> None:
        click.echo(json.dumps(dict(facts)))
        sys.stdout.flush()

    _run(lambda: restart_child(database, conversation, crash=crash, report=report))


__all__ = ("main",)
