"""``tidings serve``: the HTTP service over a runtime, until a signal or a requested restart.

A restart the runtime accepted (the ``restart`` tool) stops this instance like a signal does
and re-executes the process; the new instance completes the restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import socket
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tidings.cli.app import main, redact
from tidings.cli.app import run as run_async
from tidings.cli.masterkey import check_master_key
from tidings.errors import ConfigError
from tidings.logs import configure_logging, json_logs_requested
from tidings.models.base import Model
from tidings.models.scripted import ScriptedModel

if TYPE_CHECKING:
    from tidings.service.jwt_bearer import JWTBearer
    from tidings.settings import Settings
    from tidings.settings.schema import JWTTable

# The logger keeps the name it had when the command line was one module: log readers match it.
log = logging.getLogger("tidings.cli")

TOKENS_ENV = "TIDINGS_TOKENS"
OPERATOR_TOKENS_ENV = "TIDINGS_OPERATOR_TOKENS"


def _jwt_bearer(table: JWTTable | None, jwks: str | None, issuer: str | None,
                audience: str | None, claim: str | None) -> JWTBearer | None:
    """The JWT bearer tokens to accept: the options, over the config file's ``[serve.jwt]``;
    a JWKS that cannot be used stops the start, before anything is created."""
    if table is None and jwks is None and issuer is None:
        return None
    jwks = jwks or (table.jwks if table else None)
    issuer = issuer or (table.issuer if table else None)
    if not jwks or not issuer:
        raise click.UsageError("JWT bearer tokens need both --jwt-jwks and --jwt-issuer")
    from tidings.service.jwt_bearer import JWTBearer, JWTVerifier  # no web stack

    try:
        bearer = JWTBearer(jwks=jwks, issuer=issuer,
                           audience=audience or (table.audience if table else None),
                           principal_claim=claim or (table.principal_claim if table else "sub"))
        JWTVerifier(bearer)  # a JWKS file that cannot be read fails now
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    return bearer


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


def parse_models(specs: tuple[str, ...], base_url: str | None) -> list[Model]:
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


def _listen(host: str, port: int) -> socket.socket:
    """The server's socket, bound before anything else is made: a port in use stops the start
    with one line naming it, before a database is created or a runtime started. uvicorn
    listens on it once the runtime is up."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, as getaddrinfo names it for uvicorn's own bind: asyncio sets
    # TCP_NODELAY only on connections of such a socket, and without it each answer waited
    # ~40 ms for the client's delayed ACK (Nagle's algorithm).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise click.ClickException(
                f"port {port} is already in use on {host}: stop what listens there, or choose "
                "another with --port") from None
        raise click.ClickException(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def _load_settings(path: str | None) -> Settings | None:
    """The config file's settings; a malformed file is one line naming the line and key."""
    if path is None:
        return None
    from tidings.settings import load_settings

    try:
        settings = load_settings(path)
    except ConfigError as exc:
        raise click.ClickException(exc.message) from None
    return settings


@main.command()
@click.option("--config", "config_path", default=None, metavar="FILE",
              type=click.Path(dir_okay=False),
              help="A tidings.toml: models, profiles, tools, MCP servers, database, serving "
                   "(the options below win over it).")
@click.option("--database", default=None, envvar="TIDINGS_DATABASE",
              help="A SQLite file path (or sqlite:///path), or postgresql://… to scale out "
                   "[default: the config file's, else tidings.db].")
@click.option("--host", default=None, help="[default: the config file's, else 127.0.0.1]")
@click.option("--port", default=None, type=click.IntRange(0, 65535),
              help="[default: the config file's, else 8080]")
@click.option("--token", "tokens", multiple=True, metavar="PRINCIPAL=TOKEN",
              help=f"A principal's bearer token (repeatable; also ${TOKENS_ENV}=a=t1,b=t2).")
@click.option("--operator-token", "operator_tokens", multiple=True, metavar="TOKEN",
              help=f"An operator's bearer token (repeatable; also ${OPERATOR_TOKENS_ENV}).")
@click.option("--jwt-jwks", default=None, metavar="URL|FILE",
              help="Accept an identity provider's JWT bearer tokens too: its JWKS (keys).")
@click.option("--jwt-issuer", default=None, help="The JWTs' issuer (iss), with --jwt-jwks.")
@click.option("--jwt-audience", default=None, help="The JWTs' audience (aud), if they name one.")
@click.option("--jwt-claim", default=None,
              help="The claim naming the principal [default: sub].")
@click.option("--model", "model_specs", multiple=True, metavar="SPEC",
              help="scripted (default), scripted:RULES.json, openai:NAME or anthropic:NAME "
                   "(repeatable; the first is the default profile's model).")
@click.option("--model-base-url", default=None,
              help="Base URL for the openai/anthropic adapters (vLLM, Ollama, a proxy).")
@click.option("--access-log/--no-access-log", default=None,
              help="A log line per HTTP request [default: the config file's, else off].")
@click.option("--allow-private-webhooks", is_flag=True, default=None,
              help="Let A2A push notifications target loopback, private and link-local "
                   "addresses (refused otherwise).")
@click.option("--json-logs", is_flag=True,
              help="Log JSON lines (also TIDINGS_LOG_FORMAT=json).")
@click.option("--locked", is_flag=True,
              help="Start locked: serve, but run nothing until an operator posts the master "
                   "key to /v1/unlock.")
@click.option("--require-master-key", is_flag=True,
              help="Refuse to start without a master key (without one, results are not kept).")
def serve(
    config_path: str | None, database: str | None, host: str | None, port: int | None,
    tokens: tuple[str, ...], operator_tokens: tuple[str, ...], jwt_jwks: str | None,
    jwt_issuer: str | None, jwt_audience: str | None, jwt_claim: str | None,
    model_specs: tuple[str, ...],
    model_base_url: str | None, access_log: bool | None, allow_private_webhooks: bool | None,
    json_logs: bool, locked: bool,
    require_master_key: bool,
) -> None:
    """Run the HTTP service until SIGINT or SIGTERM, then shut down gracefully.

    A restart the agent asked for (its restart tool) stops the service the same way, then
    starts it again in the same process; the new start completes the restart.
    """
    configure_logging(json_format=json_logs_requested(json_logs))
    settings = _load_settings(config_path)
    tokens_env = settings.tokens_env if settings and settings.tokens_env else TOKENS_ENV
    operators_env = (settings.operator_tokens_env
                     if settings and settings.operator_tokens_env else OPERATOR_TOKENS_ENV)
    by_token = _parse_tokens(tokens, os.environ.get(tokens_env))
    operators = [*operator_tokens, *(
        t.strip() for t in os.environ.get(operators_env, "").split(",") if t.strip())]
    # A config file's models are its own; --model adds to them (the default echo only alone).
    models: dict[str, Model] = dict(settings.models) if settings else {}
    if model_specs or not models:
        models.update((m.name, m) for m in parse_models(model_specs, model_base_url))
    database = database or (settings.database if settings else None) or "tidings.db"
    host = host or (settings.host if settings else None) or "127.0.0.1"
    port = port if port is not None else (settings.port if settings else None)
    port = 8080 if port is None else port
    if access_log is None:
        access_log = bool(settings and settings.access_log)
    push = settings.push if settings else None
    jwt = _jwt_bearer(settings.jwt if settings else None, jwt_jwks, jwt_issuer, jwt_audience,
                      jwt_claim)
    listening = _listen(host, port)
    port = int(listening.getsockname()[1])  # the one the OS chose, for port 0
    check_master_key(required=require_master_key, locked=locked)
    if not by_token and not operators and jwt is None:
        log.warning("no tokens were given: every request but /health will be refused")

    async def run() -> bool:
        """Serve until a signal (False) or a requested restart (True)."""
        # Imported here: the command line's other commands need no web stack.
        from tidings import PushDeliveryConfig, RuntimeConfig
        from tidings.service import Server, create_app
        from tidings.settings import open as open_runtime

        loop = asyncio.get_running_loop()
        stop = asyncio.Event()

        def on_signal(signum: int) -> None:
            if not stop.is_set():
                log.info("shutting down", extra={"signal": signal.Signals(signum).name})
            stop.set()

        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal, signum)
        try:
            webhooks = push or PushDeliveryConfig()
            if allow_private_webhooks:
                webhooks = replace(webhooks, allow_private=True)
            async with open_runtime(database, models=models, locked=locked,
                                    config=RuntimeConfig(push=webhooks),
                                    tools=settings.tools if settings else (),
                                    profiles=settings.profiles if settings else None,
                                    mcp_servers=[s.server() for s in settings.mcp_servers]
                                    if settings else (),
                                    agents=settings.agents if settings else ()) as runtime:
                log.info("runtime started", extra={
                    "instance_id": runtime.instance_id, "database": redact(database),
                    "models": list(runtime.models)})
                if stop.is_set():
                    return False
                # log_config=None: uvicorn's own loggers go through the root handler above.
                server = Server(create_app(runtime, tokens=by_token, operator_tokens=operators,
                                           jwt=jwt),
                                host=host, port=port, log_config=None, freeze_heap=True,
                                access_log=access_log)

                async def serve_http() -> None:
                    try:
                        await server.serve(sockets=[listening])
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

    if run_async(run):
        # L2: the restart was committed as accepted and this instance has closed; a new
        # process (a new instance) completes it once it is fully up.
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, "-m", "tidings", *sys.argv[1:]])
