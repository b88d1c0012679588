"""The HTTP service (A2): a thin FastAPI layer over :class:`~tidings.runtime.root.Runtime` -- parse,
call the runtime, serialise -- with bearer-token principals, RFC 9457 problems and an event
feed over Server-Sent Events. :class:`Embedding` mounts it in an app of your own, its runtime
opened by that app's lifespan."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # at run time, imported on first use (see __getattr__)
    from tidings.service.app import Server as Server
    from tidings.service.app import create_app as create_app
    from tidings.service.app import serve as serve
    from tidings.service.embedding import Embedding as Embedding
    from tidings.service.jwt_bearer import JWTBearer as JWTBearer

# The app (FastAPI, uvicorn, the A2A SDK) is imported when first named: a client that reads
# only the schemas (tidings.Client, the command line) does not pay for it.
_MODULES = {"Server": "app", "create_app": "app", "serve": "app", "Embedding": "embedding",
            "JWTBearer": "jwt_bearer"}


def __getattr__(name: str) -> object:
    if name in _MODULES:
        return getattr(importlib.import_module(f"tidings.service.{_MODULES[name]}"), name)
    raise AttributeError(f"module 'tidings.service' has no attribute {name!r}")


__all__ = ("Embedding", "JWTBearer", "Server", "create_app", "serve")
