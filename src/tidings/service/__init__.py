"""The HTTP service (A2): a thin FastAPI layer over :class:`~tidings.runtime.Runtime` -- parse,
call the runtime, serialise -- with bearer-token principals, RFC 9457 problems and an event
feed over Server-Sent Events. :class:`Embedding` mounts it in an app of your own, its runtime
opened by that app's lifespan."""

from __future__ import annotations

from tidings.service.app import Server, create_app, serve
from tidings.service.embedding import Embedding

__all__ = ("Embedding", "Server", "create_app", "serve")
