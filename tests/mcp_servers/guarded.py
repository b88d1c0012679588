"""A tool behind OAuth 2.1, all of it the ``mcp`` SDK's server side: its authorization server
(metadata, dynamic client registration, /authorize, /token with PKCE and refresh tokens,
revocation) and its protected resource (bearer tokens checked on /mcp, protected resource
metadata). Only the provider's in-memory records are written here, and its /authorize approves
at once (it redirects back with a code: no person, no page).

Access tokens live ``GUARDED_TTL`` seconds (default 3600). Each grant is a line in the file
named by ``GUARDED_LOG`` (``register``, ``authorize``, ``code``, ``refresh``) with the token it
issued. While the file named by ``GUARDED_REVOKED`` exists, every token and refresh token is
refused and /authorize answers ``access_denied``: the person took tidings' access away.

Run: ``guarded.py --http PORT``.
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from pathlib import Path

import uvicorn
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    IdentityAssertionParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl

SCOPE = "tools"


class Provider:
    """In-memory records of the SDK's ``OAuthAuthorizationServerProvider``."""

    def __init__(self, ttl_s: int, log: Path, revoked: Path) -> None:
        self.ttl_s, self.log, self.revoked = ttl_s, log, revoked
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}

    def note(self, *words: str) -> None:
        with self.log.open("a") as out:
            out.write(" ".join(words) + "\n")

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info
        self.note("register", client_info.client_id)

    async def authorize(self, client: OAuthClientInformationFull,
                        params: AuthorizationParams) -> str:
        if self.revoked.exists():
            raise AuthorizeError("access_denied", "the person took tidings' access away")
        code = secrets.token_urlsafe(24)
        assert client.client_id is not None
        self.codes[code] = AuthorizationCode(
            code=code, scopes=params.scopes or [SCOPE], expires_at=time.time() + 300,
            client_id=client.client_id, code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource)
        self.note("authorize", client.client_id)
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client: OAuthClientInformationFull,
                                      authorization_code: str) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access, refresh = f"at-{secrets.token_hex(16)}", f"rt-{secrets.token_hex(16)}"
        self.access[access] = AccessToken(token=access, client_id=client_id, scopes=scopes,
                                          expires_at=int(time.time()) + self.ttl_s,
                                          resource=resource)
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes,
                                             resource=resource)
        return OAuthToken(access_token=access, expires_in=self.ttl_s, scope=" ".join(scopes),
                          refresh_token=refresh)

    async def exchange_authorization_code(self, client: OAuthClientInformationFull,
                                          authorization_code: AuthorizationCode) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        assert client.client_id is not None
        token = self._issue(client.client_id, authorization_code.scopes,
                            authorization_code.resource)
        self.note("code", token.access_token, token.refresh_token or "")
        return token

    async def load_refresh_token(self, client: OAuthClientInformationFull,
                                 refresh_token: str) -> RefreshToken | None:
        if self.revoked.exists():
            return None
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(self, client: OAuthClientInformationFull,
                                     refresh_token: RefreshToken,
                                     scopes: list[str]) -> OAuthToken:
        if self.refresh.pop(refresh_token.token, None) is None:
            raise TokenError("invalid_grant", "refresh token already used")
        token = self._issue(refresh_token.client_id, scopes or refresh_token.scopes,
                            refresh_token.resource)
        self.note("refresh", token.access_token, token.refresh_token or "")
        return token

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or self.revoked.exists():
            return None
        if found.expires_at is not None and found.expires_at < time.time():
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    async def exchange_identity_assertion(self, client: OAuthClientInformationFull,
                                          params: IdentityAssertionParams) -> OAuthToken:
        raise TokenError("unsupported_grant_type", "no identity assertions here")


def build(port: int) -> MCPServer:
    base = f"http://127.0.0.1:{port}"
    provider = Provider(int(os.environ.get("GUARDED_TTL", "3600")),
                        Path(os.environ["GUARDED_LOG"]), Path(os.environ["GUARDED_REVOKED"]))
    server = MCPServer("guarded", auth_server_provider=provider, auth=AuthSettings(
        issuer_url=AnyHttpUrl(base), resource_server_url=AnyHttpUrl(f"{base}/mcp"),
        validate_token_resource=False,
        required_scopes=[SCOPE],
        client_registration_options=ClientRegistrationOptions(
            enabled=True, valid_scopes=[SCOPE], default_scopes=[SCOPE]),
        revocation_options=RevocationOptions(enabled=True)))

    @server.tool()
    def hello(name: str) -> str:
        """Greets ``name`` (once tidings holds a token)."""
        return f"hello {name}"

    return server


if __name__ == "__main__":
    port = int(sys.argv[2])
    uvicorn.run(build(port).streamable_http_app(), host="127.0.0.1", port=port,
                log_level="warning")
