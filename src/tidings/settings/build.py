"""From a validated file to the runtime's objects: models, tools, profiles, MCP declarations.

Every failure is a :class:`~tidings.errors.ConfigError` naming the key at fault (``fail``).
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn, Protocol

from tidings.errors import InvalidInputError
from tidings.mcp import MCPOAuth, MCPServer
from tidings.models.base import Model
from tidings.models.scripted import ScriptedModel
from tidings.settings.schema import MCPOAuthTable, MCPTable, ModelTable, ProfileTable
from tidings.tools.registry import Tool
from tidings.tools.typed import tool
from tidings.types import Profile


class Fail(Protocol):
    def __call__(self, key: tuple[str, ...], message: str) -> NoReturn: ...


@dataclass(frozen=True, slots=True)
class MCPServerSpec:
    """An MCP server the file declares: a subprocess (``command`` and ``args``) or a ``url``.

    ``env`` and ``headers`` hold the values read from the environment where the file wrote
    ``${NAME}``, as do ``oauth``'s client_id, client_secret and private_key. The MCP runtime
    builds its servers from these.
    """

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    sampling: str = "ask"
    roots: tuple[str, ...] = ()
    oauth: MCPOAuth | None = None

    def server(self) -> MCPServer:
        """The runtime's declaration of this server."""
        return MCPServer(self.name, command=self.command, args=self.args, env=dict(self.env),
                         cwd=self.cwd, url=self.url, headers=dict(self.headers),
                         sampling=self.sampling, roots=self.roots, oauth=self.oauth)


def _secret(environ: Mapping[str, str], name: str, alias: str, fail: Fail,
            key: tuple[str, ...]) -> str:
    value = environ.get(name)
    if not value:
        fail(key, f"the environment variable {name} (the API key of model {alias!r}) is not set")
    return value


def build_model(alias: str, table: ModelTable, *, base: Path, environ: Mapping[str, str],
                fail: Fail) -> Model:
    """The adapter ``table`` describes, registered under ``alias``."""
    key = ("models", alias)
    if table.provider == "scripted":
        return _scripted(alias, table, base=base, fail=fail)
    api_key = (None if table.api_key_env is None else
               _secret(environ, table.api_key_env, alias, fail, (*key, "api_key_env")))
    common: dict[str, Any] = {
        "base_url": table.base_url, "api_key": api_key, "context_chars": table.context_chars,
        "temperature": table.temperature, "max_output_tokens": table.max_output_tokens,
    }
    if table.timeout_seconds is not None:
        common["timeout"] = table.timeout_seconds
    assert table.model is not None  # the schema requires it for these providers
    try:
        if table.provider == "openai":
            from tidings.models.openai import OpenAIChatModel

            return OpenAIChatModel(table.model, token_limit_field=table.token_limit_field,
                                   **common)
        from tidings.models.anthropic import AnthropicModel

        return AnthropicModel(table.model, **common)
    except ImportError:
        fail((*key, "provider"), f"the {table.provider} adapter needs its SDK: "
             f"pip install 'tidings[{table.provider}]'")


def _scripted(alias: str, table: ModelTable, *, base: Path, fail: Fail) -> Model:
    key = ("models", alias, "rules")
    document: dict[str, Any] = {}
    if isinstance(table.rules, str):
        path = base / table.rules
        try:
            model = ScriptedModel.from_json(path)
        except OSError as exc:
            fail(key, f"cannot read the rules file {str(path)!r}: {exc.strerror or exc}")
        except InvalidInputError as exc:
            fail(key, f"the rules file {str(path)!r}: {exc.message}")
        document = {"rules": [{"when": r.when, "reply": r.reply} for r in model.rules],
                    "default": dict(model.default)}
    elif table.rules is not None:
        document["rules"] = [rule.model_dump() for rule in table.rules]
    if table.default is not None:
        document["default"] = table.default
    try:
        scripted = ScriptedModel.from_json({**document, "name": alias})
    except InvalidInputError as exc:
        fail(key, exc.message)
    scripted.context_chars = table.context_chars
    return scripted


_IMPORT_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def import_tool(spec: str, *, base: Path, fail: Fail, key: tuple[str, ...]) -> Tool:
    """The tool at ``package.module:name``: a :class:`Tool`, or a function made into one."""
    if _IMPORT_PATH.fullmatch(spec) is None:
        fail(key, f"{spec!r} is not an import path: write package.module:function")
    module_name, _, attribute = spec.partition(":")
    # Tools next to the file import as they would from its directory.
    if str(base) not in sys.path:
        sys.path.insert(0, str(base))
    try:
        found: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        fail(key, f"cannot import {spec!r}: no module named {exc.name!r}")
    except Exception as exc:  # the module's own code failed: say how, not a traceback
        fail(key, f"importing {module_name!r} for {spec!r} failed: {type(exc).__name__}: {exc}")
    for part in attribute.split("."):
        if not hasattr(found, part):
            fail(key, f"cannot import {spec!r}: {module_name!r} has no attribute {part!r}")
        found = getattr(found, part)
    if isinstance(found, Tool):
        return found
    if callable(found):
        try:  # a plain function, through @tidings.tool (its signature and type hints)
            return tool(found)
        except (TypeError, ValueError) as exc:
            fail(key, f"{spec!r} cannot be a tool: {exc}")
    fail(key, f"{spec!r} is a {type(found).__name__}, not a tool or a function")


def build_profile(table: ProfileTable) -> Profile:
    aliases = table.aliases
    profile = Profile(model=aliases[0], fallbacks=tuple(aliases[1:]), tools=tuple(table.tools),
                      approval_mode=table.approval_mode, automatic_tools=table.automatic_tools,
                      background=tuple(table.background))
    return profile if table.system is None else replace(profile, system=table.system)


_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def build_mcp(name: str, table: MCPTable, *, base: Path, environ: Mapping[str, str],
              fail: Fail) -> MCPServerSpec:
    def expand(values: Mapping[str, str], section: str) -> dict[str, str]:
        def one(entry: str, match: re.Match[str]) -> str:
            if match[1] not in environ:
                fail(("mcp", name, section, entry),
                     f"the environment variable {match[1]} (MCP server {name!r}) is not set")
            return environ[match[1]]

        return {entry: _REFERENCE.sub(lambda m, e=entry: one(e, m), value)  # type: ignore[misc]
                for entry, value in values.items()}

    command, args = table.command, list(table.args)
    if isinstance(command, list):
        command, args = command[0], [*command[1:], *args]
    cwd = None if table.cwd is None else str(base / table.cwd)
    oauth = None if table.oauth is None else _oauth(
        table.oauth, expand({k: v for k in ("client_id", "client_secret", "private_key")
                             if (v := getattr(table.oauth, k)) is not None}, "oauth"),
        fail=fail, key=("mcp", name, "oauth"))
    return MCPServerSpec(name=name, command=command, args=tuple(args),
                         env=expand(table.env, "env"), cwd=cwd, url=table.url,
                         headers=expand(table.headers, "headers"), sampling=table.sampling,
                         roots=tuple(table.roots), oauth=oauth)


def _oauth(table: MCPOAuthTable, secrets: Mapping[str, str], *, fail: Fail,
           key: tuple[str, ...]) -> MCPOAuth:
    """The declaration's OAuth, its secrets read from the environment."""
    options: dict[str, Any] = {
        "grant": table.grant, "signing_algorithm": table.signing_algorithm,
        "scopes": tuple(table.scopes), "issuer": table.issuer,
        "client_metadata_url": table.client_metadata_url, **secrets}
    if table.redirect_uri is not None:
        options["redirect_uri"] = table.redirect_uri
    try:
        return MCPOAuth(**options)
    except InvalidInputError as exc:
        fail(key, exc.message)


__all__ = ("MCPServerSpec", "build_mcp", "build_model", "build_profile", "import_tool")
