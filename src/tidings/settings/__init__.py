"""One config file (``tidings.toml``): models, profiles, Python tools, MCP servers, serving.

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
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError

from tidings.clock import Clock
from tidings.config import RuntimeConfig
from tidings.errors import ConfigError, InvalidInputError
from tidings.mcp import MCPServer
from tidings.models.base import Model
from tidings.results import MasterKey
from tidings.runtime import Runtime
from tidings.settings.build import (
    MCPServerSpec,
    build_mcp,
    build_model,
    build_profile,
    import_tool,
)
from tidings.settings.lines import key_lines, line_of, present_path
from tidings.settings.schema import ConfigFile
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
    models: Mapping[str, Model] = field(default_factory=dict)
    """The models by alias: the names profiles use."""
    profiles: Mapping[str, Profile] = field(default_factory=dict)
    tools: tuple[Tool, ...] = ()
    mcp_servers: tuple[MCPServerSpec, ...] = ()


def load_settings(path: str | os.PathLike[str], *,
                  environ: Mapping[str, str] | None = None) -> Settings:
    """Read, validate and build the file at ``path``; a :class:`ConfigError` if it is wrong."""
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
    for name, profile in parsed.profiles.items():
        for alias in profile.aliases:
            if alias not in parsed.models:
                fail(("profiles", name, "model" if profile.model else "models"),
                     f"no model is named {alias!r} (the [models.<alias>] tables name "
                     f"{', '.join(sorted(parsed.models)) or 'none'})")
    database = parsed.runtime.database
    if parsed.runtime.database_env is not None:
        database = environ.get(parsed.runtime.database_env) or fail(
            ("runtime", "database_env"),
            f"the environment variable {parsed.runtime.database_env} is not set")
    return Settings(
        path=where, database=database, host=parsed.serve.host, port=parsed.serve.port,
        tokens_env=parsed.serve.tokens_env, operator_tokens_env=parsed.serve.operator_tokens_env,
        access_log=parsed.serve.access_log,
        models={alias: build_model(alias, table, base=base, environ=environ, fail=fail)
                for alias, table in parsed.models.items()},
        profiles={name: build_profile(table) for name, table in parsed.profiles.items()},
        tools=tuple(import_tool(spec, base=base, fail=fail, key=("tools",))
                    for spec in parsed.tools),
        mcp_servers=tuple(build_mcp(name, table, base=base, environ=environ, fail=fail)
                          for name, table in parsed.mcp.items()),
    )


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
) -> AsyncIterator[Runtime]:
    """:meth:`Runtime.open`, and ``config`` may be a config file's path: its models, profiles
    and tools join those given here (which win on a shared name), and its database is used
    when ``database_url`` is None."""
    runtime_config = config if isinstance(config, RuntimeConfig) else None
    settings = (None if config is None or isinstance(config, RuntimeConfig)
                else load_settings(config))
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
                                             *mcp_servers]) as runtime:
            yield runtime
    finally:
        # The adapters made from the file are this open's own: their HTTP clients close
        # with it (the caller's own models stay the caller's to close).
        for model in (settings.models.values() if settings is not None else ()):
            aclose = getattr(model, "aclose", None)
            if aclose is not None:
                await aclose()


__all__ = ("ConfigError", "MCPServerSpec", "Settings", "load_settings", "open")
