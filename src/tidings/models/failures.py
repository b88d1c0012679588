"""How a failed model call is told: one classifier for every SDK adapter.

Both official SDKs (``openai`` and ``anthropic``) raise the same shapes of exception -- an
HTTP status error, a timeout, a connection error, a broken reply -- over the same HTTP client,
so one function classifies them all. A provider supplies only what differs: its exception
classes and how it reads an answered error (:class:`Sdk`).

An answered HTTP status is read by :func:`status_kind`, the same table for every provider.
For everything else the rule is (A4):

- **Never reached: unavailable.** No connection could be made -- refused, the name does not
  resolve, the network is unreachable, the connect timed out. Nothing was sent and nothing
  listens there now: asking the same model again after a pause would almost surely fail the
  same way, so the turn goes to the next model of the fallback list (and the model may be
  kept out of use for a while).
- **Reached, then broken: retryable.** The request went out and the exchange broke -- a read
  or write timed out, the connection was reset or closed mid-reply, a stream ended early or
  held something that does not parse. The server was there a moment ago; the same model is
  asked again after a backoff pause.
- **Cannot tell: retryable.** A connection failure that names no transport cause. A one-off
  failure must not put a healthy model out of use; retries are bounded, and once spent the
  turn moves on to the next model anyway.
- **Our own mistake: permanent.** Anything else the client raised (it never reached the
  wire in a form another attempt would change).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx2

from tidings.errors import ModelError, ModelErrorKind

MAX_DETAIL_CHARS = 300

Answered = tuple[ModelErrorKind, int | None, str]
"""An answered error, read: its kind, its HTTP status (``None`` when the error came inside a
200 stream) and what to show of it (the status or error type, then the server's words)."""


@dataclass(frozen=True, slots=True)
class Sdk:
    """What the classifier needs of one SDK: its exception classes, and how it reads an error
    the server answered (each provider has its own status table)."""

    provider: str
    api_error: type[Exception]  # the request was made; the reply was wrong or broken
    status_error: type[Exception]  # the server answered with an error
    connection_error: type[Exception]  # no usable answer came back
    timeout_error: type[Exception]  # a subclass of ``connection_error`` in both SDKs
    answered: Callable[[Any], Answered]  # called with an instance of ``status_error``


def classify(exc: Exception, *, sdk: Sdk, model: str) -> ModelError:
    """The :class:`ModelError` for what an adapter's call raised (the rule is the module's)."""
    provider = sdk.provider
    if isinstance(exc, sdk.status_error):
        kind, status, shown = sdk.answered(exc)
        return ModelError(
            kind, f"{provider} model {model!r} answered {shown}", model=model, status=status
        )
    if isinstance(exc, httpx2.TransportError):  # a failure inside a stream the SDK let through
        return transport_error(exc, provider=provider, model=model)
    if isinstance(exc, sdk.connection_error):
        cause = exc.__cause__
        if isinstance(cause, httpx2.TransportError):
            return transport_error(cause, provider=provider, model=model)
        if isinstance(exc, sdk.timeout_error):
            return _timed_out(provider, model)
        return ModelError(
            ModelErrorKind.RETRYABLE,
            f"{provider} model {model!r}: the connection failed ({detail(str(exc))})",
            model=model,
        )
    if isinstance(exc, sdk.api_error):
        # An error event inside a 200 stream without a status to read, or a body that does not
        # parse: the server broke off this reply; the next attempt may well succeed.
        return ModelError(
            ModelErrorKind.RETRYABLE,
            f"{provider} model {model!r} broke off its reply: {detail(str(exc))}",
            model=model,
        )
    return ModelError(
        ModelErrorKind.PERMANENT,
        f"{provider} client for model {model!r} failed: {detail(str(exc))}",
        model=model,
    )


def status_kind(status: int, *, exhausted: bool = False) -> ModelErrorKind:
    """How an error status a model server answered is handled, for every provider (A4).

    ``exhausted`` says the account's quota or credit is spent (OpenAI's ``insufficient_quota``
    429): that does not come back after a pause, another model may answer.
    """
    if status == 429:
        return ModelErrorKind.UNAVAILABLE if exhausted else ModelErrorKind.RETRYABLE
    if status in (408, 409):
        return ModelErrorKind.RETRYABLE  # a slow or conflicting request: ask again
    if status in (402, 404):
        return ModelErrorKind.UNAVAILABLE  # no credit on this account, or no such model here
    if status in (503, 529):
        return ModelErrorKind.UNAVAILABLE  # down or overloaded: the next model, not a wait
    if status >= 500:
        return ModelErrorKind.RETRYABLE
    return ModelErrorKind.PERMANENT  # 400, 401, 403, 413, 422: the request itself is refused


def transport_error(exc: httpx2.TransportError, *, provider: str, model: str) -> ModelError:
    """An HTTP transport failure: never reached is unavailable, reached then broken retryable."""
    if isinstance(exc, httpx2.ConnectError | httpx2.ConnectTimeout):
        # Nothing answers there (refused, unresolvable, unreachable, silent): the next model.
        return ModelError(
            ModelErrorKind.UNAVAILABLE,
            f"{provider} model {model!r}: cannot connect ({_said(exc)})",
            model=model,
        )
    if isinstance(exc, httpx2.TimeoutException):
        return _timed_out(provider, model)
    # The connection broke mid-exchange: the server was there a moment ago; try again.
    return ModelError(
        ModelErrorKind.RETRYABLE,
        f"{provider} model {model!r}: the connection broke ({_said(exc)})",
        model=model,
    )


def malformed(provider: str, model: str, what: str) -> ModelError:
    """A reply that does not hold what the protocol promises: retryable (asked again, the model
    may well write a good one)."""
    return ModelError(
        ModelErrorKind.RETRYABLE,
        f"{provider} model {model!r} sent a malformed reply: {what}",
        model=model,
    )


def detail(text: str) -> str:
    """The server's or client's words on one line, at most :data:`MAX_DETAIL_CHARS`."""
    text = " ".join(text.split())
    return text if len(text) <= MAX_DETAIL_CHARS else text[: MAX_DETAIL_CHARS - 1] + "…"


def _said(exc: Exception) -> str:
    # httpx often raises with no words at all (a reset is ``ReadError('')``): name the class then.
    return detail(str(exc)) or type(exc).__name__


def _timed_out(provider: str, model: str) -> ModelError:
    return ModelError(
        ModelErrorKind.RETRYABLE, f"{provider} model {model!r} timed out", model=model
    )
