"""JWT bearer tokens, beside the static ones: an identity provider's signed tokens name the
principal.

A token is accepted when it is signed by a key of the configured JWKS (a URL fetched and cached,
or a file), was issued by the configured issuer, is meant for the configured audience (when one
is set), has not expired, and carries the principal in the configured claim (``sub`` unless
said). Anything else is refused as any unknown token is (401), with what was wrong -- expired,
another issuer, another audience, a bad signature -- in the answer's detail. Verified with
PyJWT.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import jwt

PRINCIPAL_LIMIT = 200
"""The longest principal a claim may name (an owner string)."""


@dataclass(frozen=True, slots=True)
class JWTBearer:
    """Which JWT bearer tokens a service accepts: signed by a key of ``jwks`` (an http(s) URL
    or a JWKS file), issued by ``issuer``, for ``audience`` (none: any), with the principal in
    ``principal_claim``. ``leeway`` tolerates clocks that differ."""

    jwks: str
    issuer: str
    audience: str | None = None
    principal_claim: str = "sub"
    algorithms: tuple[str, ...] = ("RS256", "RS384", "RS512", "ES256", "ES384", "PS256",
                                   "EdDSA")
    leeway: timedelta = timedelta(seconds=30)

    def __post_init__(self) -> None:
        if not self.jwks or not self.issuer or not self.principal_claim:
            raise ValueError("a JWT bearer needs a JWKS, an issuer and a principal claim")
        if any(a.upper().startswith("HS") or a == "none" for a in self.algorithms):
            raise ValueError("JWT bearer tokens are verified with public keys only")

    @property
    def remote(self) -> bool:
        """Whether the keys are fetched over HTTP (a verification may wait on the network)."""
        return self.jwks.startswith(("http://", "https://"))


class JWTRefused(Exception):
    """A token that is not an acceptable JWT; the message says why (for the 401's detail)."""


class JWTVerifier:
    """Verifies tokens against one :class:`JWTBearer`; the principal each one names."""

    def __init__(self, config: JWTBearer) -> None:
        self.config = config
        self._client: jwt.PyJWKClient | None = None
        self._keys: jwt.PyJWKSet | None = None
        if config.remote:
            self._client = jwt.PyJWKClient(config.jwks, cache_keys=True, lifespan=300,
                                           timeout=10)
        else:
            try:
                self._keys = jwt.PyJWKSet.from_json(Path(config.jwks).read_text("utf-8"))
            except (OSError, ValueError, jwt.PyJWTError) as exc:
                raise ValueError(f"the JWKS file {config.jwks} cannot be read: {exc}") from None

    @staticmethod
    def looks_like(token: str) -> bool:
        """Whether ``token`` has a JWT's shape (three dot-separated parts)."""
        return token.count(".") == 2

    def principal(self, token: str) -> str:
        """The principal a valid token names; :class:`JWTRefused` saying why otherwise."""
        config = self.config
        try:
            key = self._signing_key(token)
            claims = jwt.decode(
                token, key, algorithms=list(config.algorithms), issuer=config.issuer,
                audience=config.audience, leeway=config.leeway,
                options={"require": ["exp", "iss"], "verify_aud": config.audience is not None})
        except jwt.ExpiredSignatureError:
            raise JWTRefused("the token has expired") from None
        except jwt.InvalidIssuerError:
            raise JWTRefused("the token was issued by another issuer") from None
        except jwt.InvalidAudienceError:
            raise JWTRefused("the token is meant for another audience") from None
        except jwt.PyJWTError as exc:
            raise JWTRefused(f"the token is not valid: {exc}") from None
        value = claims.get(config.principal_claim)
        if not isinstance(value, str) or not 0 < len(value) <= PRINCIPAL_LIMIT:
            raise JWTRefused(f"the token's {config.principal_claim!r} claim names no principal")
        return value

    def _signing_key(self, token: str) -> jwt.PyJWK:
        if self._client is not None:
            return self._client.get_signing_key_from_jwt(token)
        assert self._keys is not None
        kid = jwt.get_unverified_header(token).get("kid")
        keys = [k for k in self._keys.keys if kid is None or k.key_id == kid]
        if len(keys) != 1:
            raise jwt.InvalidTokenError("no key of the JWKS signs it" if not keys else
                                        "several keys match: the token names no kid")
        return keys[0]


__all__ = ("JWTBearer", "JWTRefused", "JWTVerifier")
