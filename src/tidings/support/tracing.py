"""Spans over OpenTelemetry's API when it is installed (the ``otel`` extra), nothing otherwise.

tidings only *makes* spans, through a tracer named ``tidings``; where they go is the
application's choice, by the standard OpenTelemetry setup (a ``TracerProvider`` with an
exporter, set globally or given to the runtime). Without the API installed nothing of
OpenTelemetry is imported and every call here returns at once.

Guarantees:

- Tracing never changes what it traces: whatever the API or an SDK raises is logged and
  swallowed; an exception of the traced code is recorded on its span and goes on unchanged.
- A span's conversation and run ids (``tidings.conversation_id``, ``tidings.run_id``) are
  carried to the spans started with it as their explicit ``parent``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Protocol

from tidings.errors import ModelError

if TYPE_CHECKING:
    from opentelemetry import trace as otel_trace

log = logging.getLogger("tidings.tracing")

TRACER_NAME = "tidings"
CONVERSATION_ID = "tidings.conversation_id"
RUN_ID = "tidings.run_id"
_CARRIED = (CONVERSATION_ID, RUN_ID)
DESCRIPTION_LIMIT = 200
"""How much of a failure's text a span's status keeps."""

AttributeValue = str | bool | int | float | Sequence[str]
Attributes = Mapping[str, AttributeValue | None]
"""A span's attributes; ``None`` values are left out."""
SpanKind = Literal["INTERNAL", "CLIENT"]


class TracerSource(Protocol):
    """What a ``TracerProvider`` of OpenTelemetry offers tidings: a tracer by name."""

    def get_tracer(self, instrumenting_module_name: str, /) -> Any: ...


def _api() -> Any:
    """OpenTelemetry's trace API, or None when it is not installed (or not importable)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace


def _warn(what: str) -> None:
    log.warning("tracing failed while %s; the traced work goes on", what, exc_info=True)


def _clean(attributes: Attributes) -> dict[str, AttributeValue]:
    return {k: v for k, v in attributes.items() if v is not None}


def error_type(exc: BaseException) -> str:
    """A short, low-cardinality name for a failure: a model error's kind, else its class."""
    if isinstance(exc, ModelError):
        return exc.kind.value
    if isinstance(exc, TimeoutError):
        return "timeout"
    return type(exc).__qualname__


class Span:
    """One span of tidings, or nothing at all (:data:`NO_SPAN`); no method ever raises."""

    __slots__ = ("_carried", "_ended", "_span", "_token")

    def __init__(self, span: otel_trace.Span | None, carried: dict[str, AttributeValue]) -> None:
        self._span = span
        self._carried = carried
        self._token: Any = None
        self._ended = False

    @property
    def traced(self) -> bool:
        """False for :data:`NO_SPAN`: callers can skip building what they would record."""
        return self._span is not None

    def set(self, attributes: Attributes) -> None:
        """Set these attributes (``None`` values are skipped)."""
        if self._span is None:
            return
        try:
            self._span.set_attributes(_clean(attributes))
        except Exception:
            _warn("setting span attributes")

    def fail(self, description: str, *, error_type: str | None = None) -> None:
        """Mark the span failed (status ERROR) with a short description of why."""
        if self._span is None:
            return
        try:
            from opentelemetry.trace import Status, StatusCode

            if error_type is not None:
                self._span.set_attribute("error.type", error_type)
            self._span.set_status(Status(StatusCode.ERROR, description[:DESCRIPTION_LIMIT]))
        except Exception:
            _warn("marking a span failed")

    def record(self, exc: BaseException) -> None:
        """An exception escaped the traced work: recorded, and the span failed -- unless it is
        a cancellation, which is marked ``tidings.cancelled`` and is no failure of its own."""
        if self._span is None:
            return
        if isinstance(exc, asyncio.CancelledError):
            self.set({"tidings.cancelled": True})
            return
        try:
            self._span.record_exception(exc)
        except Exception:
            _warn("recording an exception on a span")
        self.fail(f"{type(exc).__qualname__}: {exc}", error_type=error_type(exc))

    def end(self) -> None:
        """End the span (once; later calls do nothing)."""
        if self._span is None or self._ended:
            return
        self._ended = True
        try:
            self._span.end()
        except Exception:
            _warn("ending a span")

    def _activate(self) -> None:
        if self._span is None:
            return
        try:
            from opentelemetry import context, trace

            self._token = context.attach(trace.set_span_in_context(self._span))
        except Exception:
            _warn("making a span current")

    def _deactivate(self) -> None:
        token, self._token = self._token, None
        if token is None:
            return
        try:
            from opentelemetry import context

            context.detach(token)
        except Exception:
            _warn("restoring the span context")


NO_SPAN = Span(None, {})
"""The span of untraced work: every method does nothing."""


class SpanScope(
    contextlib.AbstractContextManager[Span], contextlib.AbstractAsyncContextManager[Span]
):
    """A span current for a block (``with`` or ``async with``), ended when the block ends; an
    exception leaving the block is recorded on it and goes on."""

    __slots__ = ("_span",)

    def __init__(self, span: Span) -> None:
        self._span = span

    def __enter__(self) -> Span:
        self._span._activate()
        return self._span

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span = self._span
        if span._span is None:
            return
        span._deactivate()
        if exc is not None:
            span.record(exc)
        span.end()

    async def __aenter__(self) -> Span:
        return self.__enter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


NO_SCOPE = SpanScope(NO_SPAN)


class Tracing:
    """tidings' tracer: spans from ``provider`` (a ``TracerProvider``), or from the global
    provider when None; no spans at all when OpenTelemetry is not installed.

    A span's parent is, in this order: ``parent`` when given (:data:`NO_SPAN` as the parent
    makes a root), none when ``root``, else the span current in the caller's context (as
    OpenTelemetry decides by default).
    """

    def __init__(self, provider: TracerSource | None = None) -> None:
        self._tracer: otel_trace.Tracer | None = None
        self._api: Any = None  # set when the spans follow the global provider
        api = _api()
        if api is None:
            return
        if provider is None:
            self._api = api
        try:
            self._tracer = (
                api.get_tracer(TRACER_NAME) if provider is None
                else provider.get_tracer(TRACER_NAME)
            )
        except Exception:
            _warn("getting the tidings tracer")

    @property
    def enabled(self) -> bool:
        """Whether spans are made: OpenTelemetry's API is there, and a provider is given or
        set globally (until one is set, the global tracer's spans are dropped unseen, so
        none is made: a span costs several microseconds even then)."""
        if self._tracer is None:
            return False
        api = self._api
        return api is None or not isinstance(api.get_tracer_provider(), api.ProxyTracerProvider)

    def start(
        self, name: str, attributes: Attributes, *, parent: Span | None = None,
        root: bool = False, kind: SpanKind = "INTERNAL", start_time_us: int | None = None,
    ) -> Span:
        """Start a span (not made current); the caller ends it."""
        tracer = self._tracer
        if tracer is None or not self.enabled:
            return NO_SPAN
        try:
            from opentelemetry import context as otel_context
            from opentelemetry import trace

            if parent is not None and parent._span is not None:
                ctx: otel_context.Context | None = trace.set_span_in_context(parent._span)
            else:
                ctx = otel_context.Context() if root or parent is not None else None
            values = {**(parent._carried if parent is not None else {}), **_clean(attributes)}
            span = tracer.start_span(
                name, context=ctx, kind=trace.SpanKind[kind], attributes=values,
                start_time=None if start_time_us is None else start_time_us * 1000,
                record_exception=False, set_status_on_exception=False,
            )
        except Exception:
            _warn(f"starting span {name!r}")
            return NO_SPAN
        return Span(span, {k: values[k] for k in _CARRIED if k in values})

    def span(
        self, name: str, attributes: Attributes, *, parent: Span | None = None,
        root: bool = False, kind: SpanKind = "INTERNAL",
    ) -> SpanScope:
        """A span current for a ``with`` (or ``async with``) block; see :meth:`start`."""
        if not self.enabled:
            return NO_SCOPE
        return SpanScope(self.start(name, attributes, parent=parent, root=root, kind=kind))


__all__ = (
    "CONVERSATION_ID", "NO_SCOPE", "NO_SPAN", "RUN_ID", "TRACER_NAME", "Attributes", "Span",
    "SpanKind", "SpanScope", "TracerSource", "Tracing", "error_type",
)
