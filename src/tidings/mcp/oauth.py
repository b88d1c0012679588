"""OAuth 2.1 for MCP servers over HTTP, through the ``mcp`` SDK's OAuth client.

A server declared with ``oauth`` (:class:`~tidings.mcp.declaration.MCPOAuth`) is spoken to with
the SDK's provider as the HTTP client's auth: on a 401 it discovers the server's authorization
server, registers (or uses the configured client), gets a token and sends the request again;
an expired token is refreshed first. What it keeps -- the tokens and the client registration --
goes through :class:`SealedTokens`: sealed under the master key (AES-GCM, a key derived for
this use alone) in the ``mcp_oauth`` table, never in the clear, and forgotten when the server's
URL changes. Without a master key they live in memory only, and a warning says so.

The authorization code grant needs a person once: ``tidings mcp login`` (:mod:`tidings.mcp.login`)
stores the tokens a runtime then uses and refreshes. A runtime that has none (or whose refresh
token was refused) cannot ask anyone: the connection is refused, said once in the log and the
feed with what to do (:class:`Guard`, and :func:`refusal` for the words).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import secrets
import time
import warnings
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from mcp.client.auth import OAuthClientProvider, OAuthFlowError
from mcp.client.auth.extensions.client_credentials import (
    ClientCredentialsOAuthProvider,
    PrivateKeyJWTOAuthProvider,
    SignedJWTParameters,
)
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from pydantic import AnyUrl, ValidationError

from tidings.clock import Clock, SystemClock
from tidings.mcp.declaration import MCPOAuth, MCPServer
from tidings.records.results import MasterKey
from tidings.store import Store

log = logging.getLogger("tidings.mcp")

SEAL_INFO = "tidings mcp oauth v1"
"""The HKDF info of the key that seals a server's OAuth state (its own, apart from results')."""
_SEALED = "v1:"



class _SaidByTidings(logging.Filter):
    """Drops the SDK's traceback of a failed authorization: tidings says it itself, once, with
    what to do (:class:`Guard`); the SDK would log it again at every attempt."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "OAuth flow error"


logging.getLogger("mcp.client.auth.oauth2").addFilter(_SaidByTidings())

Redirect = Callable[[str], Awaitable[None]]
Callback = Callable[[], Awaitable[AuthorizationCodeResult]]


class LoginRequiredError(OAuthFlowError):
    """The authorization code grant needs a person, and none is here: run the login command."""


def sealing_key(master_key: MasterKey, server: str) -> AESGCM:
    """The AES-GCM key of one server's OAuth state, derived from the master key."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                info=f"{SEAL_INFO}\x00{server}".encode())
    return AESGCM(hkdf.derive(master_key.secret))


def seal(master_key: MasterKey, server: str, url: str, what: str,
         payload: Mapping[str, Any]) -> str:
    """``payload`` as JSON, sealed; bound to the server, its URL and ``what`` it is."""
    nonce = secrets.token_bytes(12)
    box = sealing_key(master_key, server).encrypt(
        nonce, json.dumps(payload).encode(), f"{server}\x00{url}\x00{what}".encode())
    return _SEALED + base64.b64encode(nonce + box).decode()


def unseal(master_key: MasterKey, server: str, url: str, what: str,
           text: str) -> dict[str, Any] | None:
    """What :func:`seal` sealed; ``None`` if another key (or another server, URL) sealed it."""
    if not text.startswith(_SEALED):
        return None
    try:
        raw = base64.b64decode(text[len(_SEALED):], validate=True)
        opened = sealing_key(master_key, server).decrypt(
            raw[:12], raw[12:], f"{server}\x00{url}\x00{what}".encode())
        payload = json.loads(opened)
    except (binascii.Error, InvalidTag, ValueError):
        return None
    return payload if isinstance(payload, dict) else None


class SealedTokens:
    """One server's OAuth state, as the SDK's ``TokenStorage``: sealed in the store under the
    master key, or in memory only while no key is known.

    ``master_key`` is asked at each use (a locked runtime learns its key later)."""

    def __init__(self, server: MCPServer, store: Store | None,
                 master_key: Callable[[], MasterKey | None], clock: Clock | None = None) -> None:
        assert server.oauth is not None
        assert server.url is not None
        self.server, self.oauth, self.url = server, server.oauth, server.url
        self._store = store
        self._master_key = master_key
        self._clock = clock or SystemClock()
        self._tokens: OAuthToken | None = None
        self._client: OAuthClientInformationFull | None = None
        self.expires_at: float | None = None
        """When the access token expires (seconds since the epoch), if the server said."""
        self._warned = False

    def _key(self) -> MasterKey | None:
        key = self._master_key() if self._store is not None else None
        if key is None and not self._warned:
            self._warned = True
            log.warning("MCP server %s: no master key is known, so its OAuth tokens are kept in "
                        "memory only: each start of tidings authorizes again (%s)",
                        self.server.name, "give a master key to keep them, sealed, in the "
                        "database")
        return key

    async def _read(self, key: MasterKey, what: str) -> dict[str, Any] | None:
        assert self._store is not None
        name = self.server.name
        row = await self._store.read(lambda tx: tx.one("mcp_oauth_get", server=name))
        if row is None:
            return None
        if row["url"] != self.url:  # kept for another URL: not this server's any more
            log.info("MCP server %s: its URL changed; its OAuth tokens are forgotten", name)
            await self.forget()
            return None
        text = row[what]
        if text is None:
            return None
        payload = unseal(key, name, self.url, what, text)
        if payload is None:
            log.warning("MCP server %s: its stored OAuth %s were sealed under another master "
                        "key and cannot be read; it authorizes again", name, what)
        return payload

    async def _write(self, key: MasterKey, what: str, payload: Mapping[str, Any] | None) -> None:
        assert self._store is not None
        sealed = None if payload is None else seal(key, self.server.name, self.url, what,
                                                   payload)
        params = {"server": self.server.name, "url": self.url, what: sealed,
                  "now_us": self._clock.now_us()}
        query = "mcp_oauth_put_tokens" if what == "tokens" else "mcp_oauth_put_client"
        await self._store.transact(lambda tx: tx.execute(query, **params))

    async def forget(self) -> None:
        """Forget the tokens and the registration (in memory, and in the store)."""
        self._tokens, self._client, self.expires_at = None, None, None
        if self._store is not None:
            name = self.server.name
            await self._store.transact(lambda tx: tx.execute("mcp_oauth_forget", server=name))

    async def get_tokens(self) -> OAuthToken | None:
        key = self._key()
        if key is None:
            return self._tokens
        payload = await self._read(key, "tokens")
        if payload is None:
            return None
        try:
            tokens = OAuthToken.model_validate(payload["token"])
        except (KeyError, ValidationError):
            return None
        expires_at = payload.get("expires_at")
        self._tokens = tokens
        self.expires_at = float(expires_at) if isinstance(expires_at, int | float) else None
        return tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self._tokens = tokens
        self.expires_at = (None if tokens.expires_in is None
                           else time.time() + tokens.expires_in)
        key = self._key()
        if key is not None:
            await self._write(key, "tokens", {"token": tokens.model_dump(mode="json"),
                                              "expires_at": self.expires_at})

    async def clear_tokens(self) -> None:
        """Drop the tokens, keeping the registration (a login starts from none)."""
        self._tokens, self.expires_at = None, None
        key = self._key()
        if key is not None:
            await self._write(key, "tokens", None)

    def configured_client(self) -> OAuthClientInformationFull | None:
        """The client the declaration names (registered beforehand), if it names one."""
        oauth = self.oauth
        if oauth.client_id is None or oauth.client_metadata_url is not None:
            return None
        return OAuthClientInformationFull(
            client_id=oauth.client_id, client_secret=oauth.client_secret,
            redirect_uris=[AnyUrl(oauth.redirect_uri)],
            grant_types=["authorization_code", "refresh_token"],
            token_endpoint_auth_method="client_secret_basic" if oauth.client_secret else "none",
            issuer=oauth.issuer)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        configured = self.configured_client()
        if configured is not None:
            return configured
        key = self._key()
        if key is None:
            return self._client
        payload = await self._read(key, "client_info")
        if payload is None:
            return None
        try:
            self._client = OAuthClientInformationFull.model_validate(payload["client"])
        except (KeyError, ValidationError):
            return None
        return self._client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        if self.configured_client() is not None:
            return
        self._client = client_info
        key = self._key()
        if key is not None:
            await self._write(key, "client_info",
                              {"client": client_info.model_dump(mode="json")})


def _restore_expiry(provider: OAuthClientProvider) -> None:
    """The stored token's expiry, which the SDK does not keep: an expired token is refreshed
    before it is sent (else it is sent, refused, and the whole authorization starts again)."""
    storage = provider.context.storage
    if isinstance(storage, SealedTokens) and provider.context.current_tokens is not None:
        provider.context.token_expiry_time = storage.expires_at


class _AuthorizationCode(OAuthClientProvider):
    async def _initialize(self) -> None:
        await super()._initialize()
        _restore_expiry(self)


class _ClientSecret(ClientCredentialsOAuthProvider):
    async def _initialize(self) -> None:
        await super()._initialize()
        _restore_expiry(self)


class _PrivateKey(PrivateKeyJWTOAuthProvider):
    async def _initialize(self) -> None:
        await super()._initialize()
        _restore_expiry(self)


def provider(storage: SealedTokens, *, redirect: Redirect | None = None,
             callback: Callback | None = None) -> OAuthClientProvider:
    """The SDK's OAuth client for the server ``storage`` keeps the state of.

    The authorization code grant sends the person to ``redirect`` and waits for ``callback``;
    without them, it follows the URL itself (``headless``) or asks for a login."""
    oauth, url = storage.oauth, storage.url
    scope = " ".join(oauth.scopes) or None
    with warnings.catch_warnings():
        # Without an issuer the SDK warns that a later version will want one; the declaration
        # says it is optional (the server's metadata names the authorization server).
        warnings.simplefilter("ignore")
        if oauth.grant == "client_credentials":
            assert oauth.client_id is not None
            if oauth.private_key is not None:
                signer = SignedJWTParameters(
                    issuer=oauth.client_id, subject=oauth.client_id,
                    signing_key=oauth.private_key, signing_algorithm=oauth.signing_algorithm)
                return _PrivateKey(url, storage, oauth.client_id,
                                   signer.create_assertion_provider(), scope=scope,
                                   issuer=oauth.issuer)
            assert oauth.client_secret is not None
            return _ClientSecret(url, storage, oauth.client_id, oauth.client_secret,
                                 scope=scope, issuer=oauth.issuer)
    if redirect is None or callback is None:
        handler = _Headless() if oauth.headless else _NoPerson(storage.server.name)
        redirect, callback = handler.redirect, handler.callback
    metadata = OAuthClientMetadata(
        redirect_uris=[AnyUrl(oauth.redirect_uri)], client_name="tidings",
        grant_types=["authorization_code", "refresh_token"], response_types=["code"],
        scope=scope,
        token_endpoint_auth_method="client_secret_basic" if oauth.client_secret else None)
    return _AuthorizationCode(url, metadata, storage, redirect, callback,
                              client_metadata_url=oauth.client_metadata_url)


class _NoPerson:
    """A runtime's authorization code grant with no one to send to the authorization page."""

    def __init__(self, server: str) -> None:
        self._server = server

    async def redirect(self, url: str) -> None:
        raise LoginRequiredError(f"tidings holds no usable token for MCP server {self._server} "
                                 f"and no person is here to authorize it")

    async def callback(self) -> AuthorizationCodeResult:  # never reached: redirect raised
        raise LoginRequiredError("no authorization code")


class _Headless:
    """Follows the authorization URL without a browser and reads the code from where the
    server redirects: for a test authorization server that approves at once, nothing else."""

    def __init__(self) -> None:
        self._result: AuthorizationCodeResult | None = None

    async def redirect(self, url: str) -> None:
        async with httpx2.AsyncClient(follow_redirects=False, timeout=30) as http:
            response = await http.get(url)
        location = response.headers.get("location")
        if not response.is_redirect or not location:
            raise OAuthFlowError(f"the authorization server did not redirect back "
                                 f"(HTTP {response.status_code})")
        self._result = code_from(location)

    async def callback(self) -> AuthorizationCodeResult:
        result, self._result = self._result, None
        if result is None:
            raise OAuthFlowError("no authorization code")
        return result


def code_from(redirected: str) -> AuthorizationCodeResult:
    """The code (and state, issuer) of the redirect back; an error the server sent is raised."""
    query = {k: v[0] for k, v in parse_qs(urlsplit(redirected).query).items()}
    if "error" in query or "code" not in query:
        said = query.get("error_description") or query.get("error") or "no code"
        raise OAuthFlowError(f"the authorization server did not authorize tidings: {said}")
    return AuthorizationCodeResult(code=query["code"], state=query.get("state"),
                                   iss=query.get("iss"))


class Guard(httpx2.Auth):
    """The HTTP client's auth: the OAuth provider (if the server has one) around each request,
    and the final refusal of tidings' credentials (401, 403, or an authorization that failed)
    told to ``refused`` with what went wrong."""

    def __init__(self, refused: Callable[[int, str], None],
                 inner: OAuthClientProvider | None = None) -> None:
        self._refused = refused
        self._inner = inner

    async def async_auth_flow(self, request: httpx2.Request
                              ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if self._inner is None:
            response = yield request
            if response.status_code in (401, 403):
                self._refused(response.status_code, "")
            return
        flow = self._inner.async_auth_flow(request)
        final: int | None = None
        try:
            outgoing = await flow.__anext__()
            while True:
                response = yield outgoing
                if outgoing is request:
                    final = response.status_code
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            pass
        except (OAuthFlowError, ValidationError, ValueError) as exc:
            self._refused(401, _describe(exc))
            raise
        finally:
            await flow.aclose()
        if final in (401, 403):
            self._refused(final, "")


def _describe(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "an answer of the authorization server is not valid OAuth"
    return (str(exc) or type(exc).__name__)[:300]


def refusal(server: MCPServer, status: int, detail: str = "") -> str:
    """What a refusal of tidings' credentials is, and what to do about it."""
    said = f" ({detail})" if detail else ""
    oauth: MCPOAuth | None = server.oauth
    if oauth is None:
        if status == 401:
            return ("HTTP 401: the server wants credentials tidings did not give or it did not "
                    "accept -- give the server's token in its headers (Authorization) and "
                    "restart")
        return ("HTTP 403: the server does not let these credentials in -- check the token's "
                "scopes or the account's rights on the server, then restart")
    if oauth.grant == "client_credentials":
        what = ("check its client_id and client_secret (or private_key) in its oauth "
                "declaration, then restart")
    else:
        what = (f"authorize tidings again with `tidings mcp login {server.name}` (it is tried "
                f"again at the reconnect cap)")
    if status == 401:
        return f"HTTP 401: OAuth authorization failed{said} -- {what}"
    return (f"HTTP 403: the server does not let tidings' token in{said} -- check the scopes "
            f"and the account's rights; {what}")


__all__ = ("SEAL_INFO", "Guard", "LoginRequiredError", "SealedTokens", "code_from", "provider",
           "refusal", "seal", "unseal")
