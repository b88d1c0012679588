"""An MCP server a runtime connects to: a command it starts (stdio) or a URL (streamable HTTP)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from tidings.errors import InvalidInputError

_SERVER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
SAMPLING_POLICIES = ("refuse", "ask", "allow")
OAUTH_GRANTS = ("authorization_code", "client_credentials")
LOOPBACK_REDIRECT = "http://127.0.0.1:33418/callback"
"""Where ``tidings mcp login`` listens for the authorization server's redirect by default."""


@dataclass(frozen=True, slots=True)
class MCPOAuth:
    """How tidings gets an OAuth 2.1 token for an HTTP server (the ``mcp`` SDK's OAuth client).

    ``grant``: ``authorization_code`` (a person authorizes tidings once, with ``tidings mcp
    login``; the tokens are then refreshed as they expire) or ``client_credentials`` (a
    service account: ``client_id`` with ``client_secret``, or with ``private_key``, a PEM key
    that signs a JWT assertion with ``signing_algorithm``). Without ``client_id`` the
    authorization code client registers itself (dynamic client registration), or names
    itself by ``client_metadata_url`` (a client ID metadata document) where the server takes
    one. ``scopes``: the scopes a client_credentials token is asked for (the authorization
    code grant asks for those the server names). ``issuer``: the authorization server the
    credentials belong to (they are sent nowhere else). ``redirect_uri``: where the server
    sends the person back (a loopback URL that ``tidings mcp login`` listens on).

    ``headless`` follows the authorization URL without a browser and reads the code from the
    redirect: only for a test authorization server that approves at once (CI, the
    conformance suite); a real one shows a person a page.
    """

    grant: str = "authorization_code"
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    private_key: str | None = field(default=None, repr=False)
    signing_algorithm: str = "RS256"
    scopes: tuple[str, ...] = ()
    issuer: str | None = None
    redirect_uri: str = LOOPBACK_REDIRECT
    client_metadata_url: str | None = None
    headless: bool = False

    def __post_init__(self) -> None:
        if self.grant not in OAUTH_GRANTS:
            raise InvalidInputError(f"oauth grant must be one of {', '.join(OAUTH_GRANTS)}, "
                                    f"got {self.grant!r}")
        if self.grant == "client_credentials" and not (
                self.client_id and (self.client_secret or self.private_key)):
            raise InvalidInputError("the client_credentials grant needs client_id, and "
                                    "client_secret or private_key")
        for what in ("redirect_uri", "issuer", "client_metadata_url"):
            value = getattr(self, what)
            if value is not None and not value.startswith(("http://", "https://")):
                raise InvalidInputError(f"oauth {what} must be an http(s) URL, got {value!r}")
        object.__setattr__(self, "scopes", tuple(self.scopes))


@dataclass(frozen=True, slots=True, init=False)
class MCPServer:
    """An MCP server declared for a runtime; its tools are named ``<name>.<tool>``.

    Either ``command`` (a program and its arguments, started as a subprocess spoken to over
    stdin/stdout, with ``args`` appended, ``env`` merged over a minimal environment and
    ``cwd``), or ``url`` (a streamable HTTP endpoint, sent ``headers``). ``timeout`` bounds
    each tool call, ``connect_timeout`` each connection (start and listing); a lost
    connection is tried again after a capped, jittered backoff from ``reconnect_base`` to
    ``reconnect_cap``.

    ``sampling`` is what a server's request for a model completion gets: ``refuse`` (a clean
    MCP error), ``ask`` (a person of the calling conversation decides, then its model answers;
    the default) or ``allow`` (its model answers at once). ``roots`` are the directories the
    server is told it may work in (paths or ``file://`` URIs; none: it is told of none).
    """

    name: str
    command: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str | None
    url: str | None
    headers: Mapping[str, str]
    timeout: timedelta
    connect_timeout: timedelta
    reconnect_base: timedelta
    reconnect_cap: timedelta
    task_ttl: timedelta
    task_poll: timedelta
    sampling: str
    roots: tuple[str, ...]
    oauth: MCPOAuth | None

    def __init__(
        self, name: str, *, command: str | Sequence[str] | None = None,
        args: Sequence[str] = (), env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None, url: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: timedelta = timedelta(seconds=60),
        connect_timeout: timedelta = timedelta(seconds=30),
        reconnect_base: timedelta = timedelta(milliseconds=200),
        reconnect_cap: timedelta = timedelta(seconds=30),
        task_ttl: timedelta = timedelta(days=1),
        task_poll: timedelta = timedelta(seconds=5),
        sampling: str = "ask", roots: Sequence[str | Path] = (),
        oauth: MCPOAuth | None = None,
    ) -> None:
        if not isinstance(name, str) or _SERVER_NAME.fullmatch(name) is None:
            raise InvalidInputError(
                f"an MCP server's name must be 1-64 letters, digits, '_' or '-', starting with "
                f"a letter (its tools are named '<server>.<tool>'); got {name!r}")
        program = (command,) if isinstance(command, str) else tuple(command or ())
        program += tuple(args)
        if bool(program) == bool(url):
            raise InvalidInputError(
                f"MCP server {name!r} needs exactly one of command (stdio) or url (HTTP)")
        if url is not None and not url.startswith(("http://", "https://")):
            raise InvalidInputError(f"MCP server {name!r}: url must be http(s), got {url!r}")
        for what, value in (("timeout", timeout), ("connect_timeout", connect_timeout),
                            ("reconnect_base", reconnect_base), ("task_ttl", task_ttl),
                            ("task_poll", task_poll)):
            if value <= timedelta(0):
                raise InvalidInputError(f"MCP server {name!r}: {what} must be positive")
        if sampling not in SAMPLING_POLICIES:
            raise InvalidInputError(
                f"MCP server {name!r}: sampling must be one of {', '.join(SAMPLING_POLICIES)}, "
                f"got {sampling!r}")
        if oauth is not None and url is None:
            raise InvalidInputError(f"MCP server {name!r}: oauth is for a url server")
        if reconnect_cap < reconnect_base:
            raise InvalidInputError(
                f"MCP server {name!r}: reconnect_cap must be at least reconnect_base")
        set_ = object.__setattr__
        set_(self, "name", name)
        set_(self, "command", program)
        set_(self, "env", dict(env or {}))
        set_(self, "cwd", None if cwd is None else str(cwd))
        set_(self, "url", url)
        set_(self, "headers", dict(headers or {}))
        set_(self, "timeout", timeout)
        set_(self, "connect_timeout", connect_timeout)
        set_(self, "reconnect_base", reconnect_base)
        set_(self, "reconnect_cap", reconnect_cap)
        set_(self, "task_ttl", task_ttl)
        set_(self, "task_poll", task_poll)
        set_(self, "sampling", sampling)
        set_(self, "roots", tuple(_root_uri(name, root) for root in roots))
        set_(self, "oauth", oauth)

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "http" if self.url else "stdio"


def _root_uri(name: str, root: str | Path) -> str:
    """A root as the ``file://`` URI a server is told: a path (made absolute) or such a URI."""
    text = str(root)
    if text.startswith("file://"):
        return text
    if "://" in text:
        raise InvalidInputError(f"MCP server {name!r}: a root is a path or a file:// URI, "
                                f"got {text!r}")
    return Path(text).expanduser().absolute().as_uri()


__all__ = ("OAUTH_GRANTS", "SAMPLING_POLICIES", "MCPOAuth", "MCPServer")
