"""The HTTP service (A2): a thin FastAPI layer over :class:`~tidings.runtime.Runtime` -- parse,
call the runtime, serialise -- with bearer-token principals, RFC 9457 problems and an event
feed over Server-Sent Events."""

from __future__ import annotations

from tidings.service.app import Server, create_app, serve

__all__ = ("Server", "create_app", "serve")
