"""Bearer-token principals (A2).

A token maps to a principal, the owner string every conversation route passes to the runtime
as ``owner=``: a principal sees only its own conversations, and another's answer exactly as an
unknown id does. Operator tokens read and act on every conversation, and read the
cross-conversation views (signal totals, every dead letter, instances, metrics); a token may be
both. Tokens are compared by their SHA-256 digest, so a lookup takes the same time whichever
token it is. Besides them, JWT bearer tokens of an identity provider may name principals
(:mod:`tidings.service.jwt_bearer`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Annotated

import anyio.to_thread
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from tidings.service.jwt_bearer import JWTBearer, JWTRefused, JWTVerifier
from tidings.service.problems import HTTPProblem

_bearer = HTTPBearer(auto_error=False, description="A principal's or an operator's token.")
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="tidings"'}

OPERATOR_ACTOR = "operator"
"""The name an operator's decisions and inputs are recorded under."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a token speaks for: a principal (owner of conversations), an operator, or both."""

    principal: str | None
    operator: bool


class Authenticator:
    """Resolves bearer tokens; unknown and missing tokens are refused alike (401)."""

    def __init__(self, tokens: Mapping[str, str], operator_tokens: Collection[str] = (),
                 jwt: JWTBearer | None = None) -> None:
        for token, principal in tokens.items():
            if not token or not principal:
                raise ValueError("tokens and principals must be non-empty strings")
        if any(not token for token in operator_tokens):
            raise ValueError("operator tokens must be non-empty strings")
        self._principals = {_digest(t): p for t, p in tokens.items()}
        self._operators = frozenset(_digest(t) for t in operator_tokens)
        self.jwt = jwt
        """The JWT bearer tokens accepted beside the static ones, if any."""
        self._verifier = None if jwt is None else JWTVerifier(jwt)

    def identify(self, token: str | None) -> Identity:
        """The identity of a static token, or of a JWT whose keys are at hand."""
        known = self._static(token)
        if known is not None:
            return known
        if token and self._verifier is not None and JWTVerifier.looks_like(token):
            return self._verified(token)
        raise _refused("A valid bearer token is required.")

    async def identify_async(self, token: str | None) -> Identity:
        """:meth:`identify`, fetching a remote JWKS off the event loop."""
        if self._verifier is None or not self._verifier.config.remote:
            return self.identify(token)
        known = self._static(token)
        if known is not None:
            return known
        if token and JWTVerifier.looks_like(token):
            return await anyio.to_thread.run_sync(self._verified, token)
        raise _refused("A valid bearer token is required.")

    def _static(self, token: str | None) -> Identity | None:
        if not token:
            return None
        digest = _digest(token)
        principal = self._principals.get(digest)
        operator = digest in self._operators
        return Identity(principal, operator) if principal is not None or operator else None

    def _verified(self, token: str) -> Identity:
        assert self._verifier is not None
        try:
            return Identity(self._verifier.principal(token), False)
        except JWTRefused as exc:
            raise _refused(f"A valid bearer token is required: {exc}.") from None


def _refused(detail: str) -> HTTPProblem:
    return HTTPProblem(401, "unauthorized", detail, headers=_CHALLENGE)


def _authenticator(request: Request) -> Authenticator:
    auth = request.app.state.authenticator
    assert isinstance(auth, Authenticator)
    return auth


async def identity(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Identity:
    return await _authenticator(request).identify_async(
        credentials.credentials if credentials is not None else None
    )


async def principal(who: Annotated[Identity, Depends(identity)]) -> str:
    """The owner a conversation route acts for."""
    if who.principal is None:
        raise HTTPProblem(403, "forbidden", "This route needs a principal's token.")
    return who.principal


async def scope(who: Annotated[Identity, Depends(identity)]) -> str | None:
    """Whose conversations a conversation route may reach: a principal's own, or -- for an
    operator's token -- every conversation (``None``: no owner to match)."""
    return None if who.operator else who.principal


async def actor(who: Annotated[Identity, Depends(identity)]) -> str:
    """Who acts, as a decision or an input records it: the principal, else ``operator``."""
    return who.principal if who.principal is not None else OPERATOR_ACTOR


async def operator(who: Annotated[Identity, Depends(identity)]) -> Identity:
    """An operator, for views across every conversation."""
    if not who.operator:
        raise HTTPProblem(403, "forbidden", "This route needs an operator token.")
    return who


Principal = Annotated[str, Depends(principal)]
Scope = Annotated[str | None, Depends(scope)]
"""The owner a conversation route passes on: a principal's name, or ``None`` for an operator."""
Actor = Annotated[str, Depends(actor)]
Operator = Annotated[Identity, Depends(operator)]

__all__ = ("OPERATOR_ACTOR", "Actor", "Authenticator", "Identity", "Operator", "Principal",
           "Scope", "identity")
