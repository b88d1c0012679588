"""One config file (``tidings.toml``): models, profiles, Python tools, MCP servers, remote agents,
serving.

::

    async with tidings.open(config="tidings.toml") as runtime:
        conversation = await runtime.create_conversation("alice", "helper")

The file is read with :mod:`tomllib` and validated with pydantic; a malformed one is refused
before anything starts with a :class:`~tidings.errors.ConfigError` naming the file, the line
and the key at fault. It holds no secrets: keys and tokens come from environment variables it
names.
"""

from __future__ import annotations

import contextlib
import os
import re
import tomllib
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError

from tidings.agents import RemoteAgent
from tidings.clock import Clock
from tidings.errors import ConfigError, InvalidInputError
from tidings.mcp import MCPServer
from tidings.models.base import Model
from tidings.push import PushDeliveryConfig
from tidings.records.results import MasterKey
from tidings.runtime.config import RuntimeConfig
from tidings.runtime.root import Runtime
from tidings.settings.build import (
    MCPServerSpec,
    build_mcp,
    build_model,
    build_profile,
    import_tool,
)
from tidings.settings.lines import key_lines, line_of, present_path
from tidings.settings.profiles import check_profiles
from tidings.settings.schema import AgentTable, ConfigFile, JWTTable, PushTable
from tidings.tools.registry import Tool
from tidings.types import Profile

_AT = re.compile(r" \(at line (\d+), column (\d+)\)$")


@dataclass(frozen=True, slots=True)
class Settings:
    """A loaded config file: what it declares, built (models are adapters, ready to call)."""

    path: Path
    database: str | None = None
    host: str | None = None
    port: int | None = None
    tokens_env: str | None = None
    operator_tokens_env: str | None = None
    access_log: bool | None = None
    jwt: JWTTable | None = None
    """The JWT bearer tokens ``tidings serve`` accepts (its JWKS file made absolute)."""
    models: Mapping[str, Model] = field(default_factory=dict)
    """The models by alias: the names profiles use."""
    profiles: Mapping[str, Profile] = field(default_factory=dict)
    tools: tuple[Tool, ...] = ()
    mcp_servers: tuple[MCPServerSpec, ...] = ()
    agents: tuple[RemoteAgent, ...] = ()
    """The remote A2A agents a spawn may delegate to (their tokens read when used)."""
    push: PushDeliveryConfig = field(default_factory=PushDeliveryConfig)
    """``[push]``: how A2A push notifications are delivered."""


def load_settings(path: str | os.PathLike[str], *,
                  environ: Mapping[str, str] | None = None, tools: Iterable[str] = (),
                  mcp_servers: Iterable[str] = ()) -> Settings:
    """Read, validate and build the file at ``path``; a :class:`ConfigError` if it is wrong.

    Every profile is checked: the models it names are the file's, its tools the file's, the
    built-in ones, those of a declared MCP server (``<server>.<tool>``), or the host's own,
    given by name in ``tools`` (and ``mcp_servers``) when the host adds them.
    """
    where = Path(path)
    environ = os.environ if environ is None else environ
    try:
        text = where.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"cannot read the config file: {reason}", path=str(where)) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # The message ends "(at line L, column C)" (Python 3.14 also has the attributes).
        at = _AT.search(str(exc))
        reason = _AT.sub(f" (column {at[2]})", str(exc)) if at else str(exc)
        raise ConfigError(f"not valid TOML: {reason}", path=str(where),
                          line=int(at[1]) if at else None) from None
    lines = key_lines(text)

    def fail(key: tuple[str, ...], message: str) -> NoReturn:
        raise ConfigError(message, path=str(where), line=line_of(lines, key),
                          key=".".join(key) or None)

    try:
        parsed = ConfigFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = present_path(data, first["loc"])
        more = len(exc.errors()) - 1
        message = _message(first) + (f" (and {more} more)" if more else "")
        fail(key, message)
    base = where.resolve().parent
    own_tools = tuple(import_tool(spec, base=base, fail=fail, key=("tools",))
                      for spec in parsed.tools)

    def fail_at(line: int | None, message: str) -> NoReturn:
        raise ConfigError(message, path=str(where), line=line)

    check_profiles(parsed.profiles, models=parsed.models,
                   tools=[*(t.name for t in own_tools), *tools],
                   mcp_servers=[*parsed.mcp, *mcp_servers], text=text, lines=lines,
                   fail=fail_at)
    database = parsed.runtime.database
    if parsed.runtime.database_env is not None:
        database = environ.get(parsed.runtime.database_env) or fail(
            ("runtime", "database_env"),
            f"the environment variable {parsed.runtime.database_env} is not set")
    return Settings(
        path=where, database=database, host=parsed.serve.host, port=parsed.serve.port,
        tokens_env=parsed.serve.tokens_env, operator_tokens_env=parsed.serve.operator_tokens_env,
        access_log=parsed.serve.access_log, push=_push(parsed.push),
        jwt=_jwt(parsed.serve.jwt, base),
        models={alias: build_model(alias, table, base=base, environ=environ, fail=fail)
                for alias, table in parsed.models.items()},
        profiles={name: build_profile(table) for name, table in parsed.profiles.items()},
        tools=own_tools,
        mcp_servers=tuple(build_mcp(name, table, base=base, environ=environ, fail=fail)
                          for name, table in parsed.mcp.items()),
        agents=tuple(_agent(name, table, fail) for name, table in parsed.agents.items()),
    )


def _push(table: PushTable) -> PushDeliveryConfig:
    return PushDeliveryConfig(
        allow_private=table.allow_private, max_attempts=table.max_attempts,
        backoff_base=timedelta(seconds=table.backoff_seconds),
        backoff_cap=timedelta(seconds=table.backoff_cap_seconds),
        attempt_timeout=timedelta(seconds=table.timeout_seconds))


def _agent(name: str, table: AgentTable, fail: Callable[[tuple[str, ...], str], NoReturn]
           ) -> RemoteAgent:
    try:
        return RemoteAgent(name, table.url, token_env=table.token_env,
                           poll=timedelta(seconds=table.poll_seconds),
                           timeout=timedelta(seconds=table.timeout_seconds),
                           subscribe=table.subscribe, push_url=table.push_url)
    except InvalidInputError as exc:
        fail(("agents", name), exc.message)


def _message(error: Any) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown key"
    if error["type"] == "missing":
        return "this key is required"
    message = str(error["msg"])
    return message.removeprefix("Value error, ")


@contextlib.asynccontextmanager
async def open(
    database_url: str | None = None, *,
    config: RuntimeConfig | str | os.PathLike[str] | None = None,
    models: Mapping[str, Model] | Iterable[Model] = (), tools: Iterable[Tool] = (),
    profiles: Mapping[str, Profile] | None = None, clock: Clock | None = None,
    master_key: MasterKey | None = None, store_options: Mapping[str, Any] | None = None,
    locked: bool = False, mcp_servers: Iterable[MCPServer] = (),
    agents: Iterable[RemoteAgent] = (),
) -> AsyncIterator[Runtime]:
    """:meth:`Runtime.open`, and ``config`` may be a config file's path: its models, profiles
    and tools join those given here (which win on a shared name), and its database is used
    when ``database_url`` is None."""
    runtime_config = config if isinstance(config, RuntimeConfig) else None
    tools, mcp_servers = list(tools), list(mcp_servers)
    settings = (None if config is None or isinstance(config, RuntimeConfig)
                else load_settings(config, tools=[t.name for t in tools],
                                   mcp_servers=[s.name for s in mcp_servers]))
    if settings is not None and runtime_config is None:
        runtime_config = RuntimeConfig(push=settings.push)
    given = dict(models) if isinstance(models, Mapping) else {m.name: m for m in models}
    if settings is not None:
        database_url = database_url or settings.database
        given = {**settings.models, **given}
        tools = [*settings.tools, *tools]
        profiles = {**settings.profiles, **(profiles or {})}
    if database_url is None:
        raise InvalidInputError("no database: give its URL, or a config file with "
                                "[runtime] database")
    try:
        async with Runtime.open(database_url, models=given, tools=tools, clock=clock,
                                config=runtime_config, master_key=master_key,
                                store_options=store_options, locked=locked, profiles=profiles,
                                mcp_servers=[*(s.server() for s in (settings.mcp_servers
                                                                     if settings else ())),
                                             *mcp_servers],
                                agents=[*(settings.agents if settings else ()), *agents],
                                ) as runtime:
            yield runtime
    finally:
        # The adapters made from the file are this open's own: their HTTP clients close
        # with it (the caller's own models stay the caller's to close).
        for model in (settings.models.values() if settings is not None else ()):
            aclose = getattr(model, "aclose", None)
            if aclose is not None:
                await aclose()




def _jwt(table: JWTTable | None, base: Path) -> JWTTable | None:
    """The table, a JWKS file named relative to the config file made absolute."""
    if table is None or table.jwks.startswith(("http://", "https://")):
        return table
    return table.model_copy(update={"jwks": str(base / table.jwks)})

__all__ = ("ConfigError", "MCPServerSpec", "Settings", "load_settings", "open")
