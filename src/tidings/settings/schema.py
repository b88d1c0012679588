"""The config file's shape, as pydantic models: every table forbids keys it does not know.

The file names secrets, it never holds them: an API key is read from the environment variable
``api_key_env`` names, a token list from ``tokens_env``; a literal ``api_key`` is refused.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Provider = Literal["openai", "anthropic", "scripted"]

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_name(value: str | None) -> str | None:
    """An environment variable's name; anything else (a key pasted in, say) is refused."""
    if value is not None and ENV_NAME.fullmatch(value) is None:
        raise ValueError(
            "this names an environment variable (like OPENAI_API_KEY), not its value: "
            "put the secret in the environment and its name here"
        )
    return value


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RuntimeTable(_Table):
    """``[runtime]``: where the runtime keeps its state."""

    database: str | None = Field(default=None, min_length=1)
    """A SQLite path (or ``sqlite:///path``) or a ``postgresql://`` URL without a password."""
    database_env: str | None = None
    """The environment variable that holds the database URL (one with a password, say)."""

    _env = field_validator("database_env")(env_name)

    @model_validator(mode="after")
    def _one_database(self) -> RuntimeTable:
        if self.database is not None and self.database_env is not None:
            raise ValueError("give database or database_env, not both")
        return self


class JWTTable(_Table):
    """``[serve.jwt]``: an identity provider's JWT bearer tokens, accepted beside the static
    ones: signed by a key of ``jwks`` (an http(s) URL, or a JWKS file beside this one), issued
    by ``issuer``, for ``audience``; the principal is the ``principal_claim``."""

    jwks: str = Field(min_length=1)
    issuer: str = Field(min_length=1)
    audience: str | None = Field(default=None, min_length=1)
    principal_claim: str = Field(default="sub", min_length=1)


class ServeTable(_Table):
    """``[serve]``: what ``tidings serve`` listens on and whom it lets in."""

    host: str | None = Field(default=None, min_length=1)
    port: int | None = Field(default=None, ge=0, le=65535)
    tokens_env: str | None = None
    """The environment variable holding ``principal=token`` pairs, comma-separated."""
    operator_tokens_env: str | None = None
    """The environment variable holding operator tokens, comma-separated."""
    access_log: bool | None = None
    """A log line per HTTP request (off unless asked for)."""
    jwt: JWTTable | None = None

    _env = field_validator("tokens_env", "operator_tokens_env")(env_name)


class PushTable(_Table):
    """``[push]``: A2A push notifications (webhooks) -- their attempts and their targets."""

    allow_private: bool = False
    """Whether webhooks may target loopback, private and link-local addresses (off unless
    asked for: a webhook is a request this server makes for a caller)."""
    max_attempts: int = Field(default=8, ge=1, le=100)
    backoff_seconds: float = Field(default=1.0, gt=0, le=3600)
    backoff_cap_seconds: float = Field(default=300.0, gt=0, le=86400)
    timeout_seconds: float = Field(default=10.0, gt=0, le=300)


class RuleTable(_Table):
    """One scripted rule: when the newest message matches, the reply."""

    when: dict[str, Any]
    reply: dict[str, Any]


_PROVIDER_ONLY: dict[str, tuple[str, ...]] = {
    "scripted": ("rules", "default"),
    "openai": ("model", "base_url", "api_key_env", "temperature", "max_output_tokens",
               "timeout_seconds", "token_limit_field"),
    "anthropic": ("model", "base_url", "api_key_env", "temperature", "max_output_tokens",
                  "timeout_seconds"),
}


class ModelTable(_Table):
    """``[models.<alias>]``: one model, registered under its alias (what profiles name)."""

    provider: Provider
    model: str | None = Field(default=None, min_length=1)
    """The provider's name for the model (``gpt-4o-mini``); distinct from the alias."""
    base_url: str | None = Field(default=None, min_length=1)
    api_key_env: str | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_output_tokens: int | None = Field(default=None, ge=1)
    context_chars: int | None = Field(default=None, ge=1)
    timeout_seconds: float | None = Field(default=None, gt=0)
    token_limit_field: Literal["max_tokens", "max_completion_tokens"] | None = None
    rules: str | list[RuleTable] | None = None
    """Scripted: a JSON rules file (relative to the config file), or the rules inline."""
    default: dict[str, Any] | None = None
    """Scripted: the reply when no rule matches (default: echo the input)."""

    api_key: None = Field(default=None, exclude=True)
    """Never allowed: declared only so that a literal key is refused at its own key and line
    (a check over the whole table would point at the table's header)."""

    _env = field_validator("api_key_env")(env_name)

    @field_validator("api_key", mode="before")
    @classmethod
    def _no_literal_key(cls, value: object) -> None:
        raise ValueError(
            "a literal API key is not allowed in the config file: put it in an environment "
            "variable and name that variable with api_key_env"
        )

    @model_validator(mode="after")
    def _fits_provider(self) -> ModelTable:
        allowed = _PROVIDER_ONLY[self.provider]
        foreign = [
            name for names in _PROVIDER_ONLY.values() for name in names
            if name not in allowed and getattr(self, name) is not None
        ]
        if foreign:
            raise ValueError(
                f"{', '.join(sorted(set(foreign)))} does not apply to a {self.provider} model")
        if self.provider != "scripted" and self.model is None:
            raise ValueError(f"a {self.provider} model needs model (the provider's model name)")
        return self


class ProfileTable(_Table):
    """``[profiles.<name>]``: an agent a conversation can be opened with by name."""

    model: str | None = Field(default=None, min_length=1)
    models: list[str] | None = Field(default=None, min_length=1)
    """The model aliases in order: the first is asked first, the others are fallbacks."""
    tools: list[str] = Field(default_factory=list)
    system: str | None = None
    approval_mode: Literal["never", "writes", "always"] = "never"
    automatic_tools: Literal["read_only", "all"] = "read_only"
    background: list[str] = Field(default_factory=list)
    """Tools (of ``tools``) whose calls are made as background tasks where they can be."""

    @model_validator(mode="after")
    def _one_model_key(self) -> ProfileTable:
        if (self.model is None) == (self.models is None):
            raise ValueError("give model (one alias) or models (aliases in order), not both")
        return self

    @property
    def aliases(self) -> list[str]:
        return [self.model] if self.model is not None else list(self.models or ())


class MCPOAuthTable(_Table):
    """``[mcp.<name>.oauth]``: OAuth 2.1 for an HTTP server (see ``tidings.MCPOAuth``).

    ``client_id``, ``client_secret`` and ``private_key`` may be written ``${NAME}``: read from
    the environment.
    """

    grant: Literal["authorization_code", "client_credentials"] = "authorization_code"
    client_id: str | None = None
    client_secret: str | None = None
    private_key: str | None = None
    """A PEM private key that signs the client's JWT assertion (client_credentials)."""
    signing_algorithm: str = "RS256"
    scopes: list[str] = Field(default_factory=list)
    issuer: str | None = None
    redirect_uri: str | None = None
    """Where ``tidings mcp login`` listens for the code (default: the declaration's)."""
    client_metadata_url: str | None = None


class MCPTable(_Table):
    """``[mcp.<name>]``: an MCP server, a subprocess (``command``) or an HTTP ``url``.

    Values of ``env`` and ``headers`` may be written ``${NAME}``: read from the environment.
    """

    command: str | list[str] | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = Field(default=None, min_length=1)
    headers: dict[str, str] = Field(default_factory=dict)
    sampling: Literal["refuse", "ask", "allow"] = "ask"
    """A server's request for a model completion: refused, asked of a person, or allowed."""
    roots: list[str] = Field(default_factory=list)
    """The directories the server is told it may work in (paths or file:// URIs)."""
    oauth: MCPOAuthTable | None = None
    """OAuth 2.1 for a url server: its tokens are kept sealed under the master key."""

    @model_validator(mode="after")
    def _one_transport(self) -> MCPTable:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP server needs command (a subprocess) or url, not both")
        if self.command is not None and (self.headers or self.oauth is not None):
            raise ValueError("headers and oauth are for a url server")
        if self.url is not None and (self.args or self.env or self.cwd is not None):
            raise ValueError("args, env and cwd are for a command server")
        if self.command == [] or self.command == "":
            raise ValueError("command is empty")
        return self


class AgentTable(_Table):
    """``[agents.<name>]``: a remote A2A agent a ``spawn`` may delegate to (``agent: name``)."""

    url: str = Field(min_length=1)
    """Where it is: its Agent Card is read from ``<url>/.well-known/agent-card.json``."""
    token_env: str | None = None
    """The environment variable holding its bearer token (never the token itself)."""
    poll_seconds: float = Field(default=1.0, gt=0)
    """How often its task is asked about while it works."""
    timeout_seconds: float = Field(default=30.0, gt=0)
    subscribe: bool = True
    """Whether its tasks are also watched by ``SubscribeToTask`` where its card says it
    streams (the end seen at once); polling stays the rule either way."""
    push_url: str | None = Field(default=None, min_length=1)
    """Where the agent reaches this server (``https://tidings.example.com``): its tasks' news is
    pushed there, each push a hint that has the task asked about at once."""


class ConfigFile(_Table):
    """The whole file. ``tools`` sits at the top, before any table."""

    runtime: RuntimeTable = Field(default_factory=RuntimeTable)
    serve: ServeTable = Field(default_factory=ServeTable)
    push: PushTable = Field(default_factory=PushTable)
    tools: list[str] = Field(default_factory=list)
    """Python tools by import path, ``package.module:name``."""
    models: dict[str, ModelTable] = Field(default_factory=dict)
    profiles: dict[str, ProfileTable] = Field(default_factory=dict)
    mcp: dict[str, MCPTable] = Field(default_factory=dict)
    agents: dict[str, AgentTable] = Field(default_factory=dict)


__all__ = ("AgentTable", "ConfigFile", "JWTTable", "MCPTable", "ModelTable", "ProfileTable",
           "RuntimeTable", "ServeTable")
