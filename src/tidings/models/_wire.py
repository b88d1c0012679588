"""What the SDK adapters share: how a transport failure, a malformed reply and an error's
detail are told (both official SDKs sit on the same HTTP client)."""

from __future__ import annotations

import httpx2

from tidings.models.base import ModelError, ModelErrorKind

MAX_DETAIL_CHARS = 300


def transport_error(exc: httpx2.TransportError, *, provider: str, model: str) -> ModelError:
    if isinstance(exc, httpx2.TimeoutException):
        return ModelError(
            ModelErrorKind.RETRYABLE, f"{provider} model {model!r} timed out", model=model
        )
    if isinstance(exc, httpx2.ConnectError):
        # Nothing listens there (refused, unresolvable, unreachable): try the next model.
        return ModelError(
            ModelErrorKind.UNAVAILABLE,
            f"{provider} model {model!r}: cannot connect ({detail(str(exc))})",
            model=model,
        )
    # The connection broke mid-reply: the server was there a moment ago; try again.
    return ModelError(
        ModelErrorKind.RETRYABLE,
        f"{provider} model {model!r}: the connection broke ({detail(str(exc))})",
        model=model,
    )


def malformed(provider: str, model: str, what: str) -> ModelError:
    return ModelError(
        ModelErrorKind.RETRYABLE,
        f"{provider} model {model!r} sent a malformed reply: {what}",
        model=model,
    )


def detail(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_DETAIL_CHARS else text[: MAX_DETAIL_CHARS - 1] + "…"
