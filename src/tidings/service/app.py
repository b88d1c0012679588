"""The ASGI app (A2) and the server that runs it.

:func:`create_app` builds a FastAPI app over one started :class:`~tidings.runtime.root.Runtime`; the
runtime's lifetime is the caller's. Three small ASGI layers wrap the routes:

- :class:`BodyLimit` refuses a body larger than ``max_body_bytes`` with a 413 problem *before*
  anything parses it -- by its ``Content-Length`` and by counting the bytes as they stream in --
  so an oversize request never reaches the runtime and writes nothing; a body nesting deeper
  than ``MAX_JSON_DEPTH`` is refused (422) the same way, before a parser recurses into it;
- :class:`StrictTarget` refuses (422) a path or query string that is not UTF-8 once
  percent-decoded, instead of letting the server read it with replacement characters;
- :class:`Guard` turns any exception no handler knew into a 500 problem that names nothing
  internal (the exception is logged, not sent).

Inside them, :class:`~tidings.service.quick.QuickPost` answers a plainly right post of an
input without the framework's routing (the most-made request; anything else goes on to the
routes).

:class:`Server` is uvicorn's server that also ends the app's open event feeds when it shuts
down (a feed never ends by itself), and :func:`serve` runs one until it is stopped.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Collection, Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import unquote_to_bytes

import uvicorn
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tidings import __version__
from tidings.runtime.root import Runtime
from tidings.service import a2a, agui, console, observability, problems, routes
from tidings.service.auth import Authenticator
from tidings.service.jwt_bearer import JWTBearer
from tidings.service.quick import QuickPost, QuickRoutes
from tidings.service.sse import Feeds

log = logging.getLogger("tidings.service")

DEFAULT_MAX_BODY_BYTES = 64 * 1024


MAX_JSON_DEPTH = 64
"""Arrays and objects nested deeper than this are refused (422) before anything parses them."""


def _nests_deeper(body: bytes, limit: int) -> bool:
    """Whether the JSON text's arrays and objects nest deeper than ``limit`` (brackets inside
    strings do not count). Bodies with few brackets are not scanned at all."""
    if body.count(b"{") + body.count(b"[") <= limit:
        return False
    depth = 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x7B, 0x5B):  # { [
            depth += 1
            if depth > limit:
                return True
        elif byte in (0x7D, 0x5D):  # } ]
            depth -= 1
    return False


class BodyLimit:
    """Reads the request body up front, at most ``max_bytes`` of it, then replays it."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            if not declared.strip().isdigit():
                await self._refuse(scope, receive, send, problems.problem(
                    400, "malformed_body", "Content-Length is not a number."))
                return
            if int(declared) > self.max_bytes:
                await self._too_large(scope, receive, send, int(declared))
                return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left before it finished
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(scope, receive, send, size)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if _nests_deeper(body, MAX_JSON_DEPTH):
            # Deep nesting is refused before a parser or a validator recurses into it.
            await self._refuse(scope, receive, send, problems.problem(
                422, "invalid_input", f"the body nests deeper than {MAX_JSON_DEPTH} levels"))
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # afterwards: the client's disconnect

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send, size: int) -> None:
        detail = (f"the request body is {size} bytes or more; the limit is "
                  f"{self.max_bytes} bytes")
        await self._refuse(scope, receive, send,
                           problems.problem(413, "payload_too_large", detail))

    @staticmethod
    async def _refuse(scope: Scope, receive: Receive, send: Send, body: problems.Problem) -> None:
        # The unread rest of the body is the ASGI server's to discard (uvicorn reads it off
        # the connection after the answer, so the client is not reset mid-send).
        await problems.problem_response(body)(scope, receive, send)


def _not_utf8(encoded: bytes) -> bool:
    """Whether percent-decoding ``encoded`` gives bytes that are not UTF-8."""
    try:
        unquote_to_bytes(encoded).decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


class StrictTarget:
    """Refuses (422) a path or query string whose percent-decoding is not UTF-8.

    The server would replace such bytes with U+FFFD, and the route would read a value the
    client never sent; the client is told instead, before anything else reads the request.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for where, encoded in (("path", scope.get("raw_path") or b""),
                                   ("query", scope.get("query_string") or b"")):
                if _not_utf8(encoded):
                    body = problems.problem(
                        422, "invalid_input", f"the {where} is not UTF-8 once percent-decoded",
                        errors=[problems.FieldError(loc=[where], type="utf8_invalid",
                                                    msg="not valid UTF-8")])
                    await problems.problem_response(body)(scope, receive, send)
                    return
        await self.app(scope, receive, send)


class Guard:
    """The last resort: an unexpected exception becomes a 500 problem, logged, not disclosed."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception:
            log.exception("%s %s failed", scope.get("method"), scope.get("path"))
            if started:
                raise
            await problems.problem_response(problems.internal_error())(scope, receive, send)


class TidingsAPI(FastAPI):
    """FastAPI, with error responses documented as ``application/problem+json``."""

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is None:
            schema = get_openapi(title=self.title, version=self.version,
                                 description=self.description, routes=self.routes)
            for path in schema.get("paths", {}).values():
                for operation in path.values():
                    for code, response in operation.get("responses", {}).items():
                        content = response.get("content", {})
                        if code[:1] in ("4", "5") and content:
                            # FastAPI files an error model under the route's own media type
                            # (JSON, text, event stream); every error is a problem document.
                            response["content"] = {
                                problems.PROBLEM_MEDIA_TYPE: next(iter(content.values()))
                            }
            self.openapi_schema = schema
        return self.openapi_schema


def create_app(
    runtime: Runtime,
    *,
    tokens: Mapping[str, str],
    operator_tokens: Collection[str] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    feed_ping: timedelta = timedelta(seconds=15),
    with_console: bool = True,
    jwt: JWTBearer | None = None,
) -> FastAPI:
    """The HTTP service over a started ``runtime``.

    ``tokens`` maps each bearer token to its principal (the owner of the conversations it
    opens); ``operator_tokens`` reach every conversation, the views across them and the
    metrics. Every route but ``/health`` and ``/openapi.json`` needs a token. ``with_console``
    serves the operator console at ``/console/`` (a page that holds no data: it signs in with
    a token and uses these routes). ``jwt``: an identity provider's JWT bearer tokens are
    accepted too, each naming its principal (see :class:`~tidings.service.JWTBearer`).
    """
    return build_app(runtime, tokens=tokens, operator_tokens=operator_tokens,
                     max_body_bytes=max_body_bytes, feed_ping=feed_ping,
                     with_console=with_console, jwt=jwt)


def build_app(
    runtime: Runtime | None,
    *,
    tokens: Mapping[str, str],
    operator_tokens: Collection[str] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    feed_ping: timedelta = timedelta(seconds=15),
    with_console: bool = False,
    jwt: JWTBearer | None = None,
) -> FastAPI:
    """:func:`create_app`, its runtime possibly not there yet (``app.state.runtime`` is None
    until it is set): meanwhile every route answers 503 ``instance_not_running``. The console
    only when asked: its page reaches the routes at the root of the site, not under a mount."""
    if max_body_bytes < 1:
        raise ValueError("max_body_bytes must be positive")
    app = TidingsAPI(
        title="tidings",
        version=__version__,
        description=(
            "The durable kernel of an LLM-agent runtime over HTTP: conversations, inputs, "
            "transcript, runs, tasks, results, signals, and an event feed over Server-Sent "
            "Events. Errors are RFC 9457 problem documents with a stable `code`."
        ),
        docs_url="/docs",  # the API's interactive docs, from /openapi.json
        redoc_url=None,
    )
    app.state.runtime = runtime
    app.state.authenticator = Authenticator(tokens, operator_tokens, jwt)
    app.state.feeds = Feeds(ping=feed_ping)
    problems.install(app)
    app.include_router(routes.router)
    app.include_router(observability.router)
    agents = a2a.mount(app)  # the A2A agents: their cards, JSON-RPC and HTTP+JSON routes
    agui.mount(app)  # the AG-UI endpoint
    if with_console:
        app.include_router(console.router())
    # Matched before the route table (which holds them too); the innermost layers.
    app.add_middleware(QuickRoutes, routes=agents, prefixes=a2a.PREFIXES)
    app.add_middleware(QuickPost)  # the body is read and bounded by then
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    app.add_middleware(StrictTarget)  # before the body is read
    app.add_middleware(Guard)  # added last: the outermost layer
    return app


def feeds_of(app: FastAPI) -> Feeds:
    feeds = app.state.feeds
    assert isinstance(feeds, Feeds)
    return feeds


_THRESHOLDS = (50_000, 20, 10)
"""The collector's thresholds for a frozen server (Python's are 700, 10, 10): a collection
after 50,000 new objects instead of 700, so those that die young -- most of a request's -- are
gone before one looks at them and far fewer survivors reach the full collections, each of
which scans every open connection's objects (~100 ms with 500 open feeds)."""


class Server(uvicorn.Server):
    """uvicorn's server for a :func:`create_app` app; its open feeds end when it shuts down."""

    def __init__(self, app: FastAPI, *, host: str = "127.0.0.1", port: int = 8080,
                 freeze_heap: bool = False, **options: Any) -> None:
        """``freeze_heap``: once listening, move every object alive to the garbage
        collector's permanent generation (:func:`gc.freeze`), for a process that is the
        server and nothing else (``tidings serve``). Its long-lived objects -- modules, the
        app, the runtime -- are then no longer scanned by each full collection: with 500 open
        feeds, one such collection held the event loop for about 200 ms, and every streamed
        answer waited. The collector then runs less often too (:data:`_THRESHOLDS`)."""
        options.setdefault("ws", "none")
        options.setdefault("timeout_graceful_shutdown", 10)
        super().__init__(uvicorn.Config(app, host=host, port=port, **options))
        self.feeds = feeds_of(app)
        self.freeze_heap = freeze_heap

    async def startup(self, sockets: Any = None) -> None:
        self.feeds.open()
        await super().startup(sockets=sockets)
        if self.freeze_heap:
            gc.collect()
            gc.freeze()
            gc.set_threshold(*_THRESHOLDS)

    async def shutdown(self, sockets: Any = None) -> None:
        self.feeds.close()
        await super().shutdown(sockets=sockets)

    @property
    def port(self) -> int:
        """The port it listens on (the one the OS chose, when asked for port 0)."""
        for server in self.servers:
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        raise RuntimeError("the server is not listening")


async def serve(
    runtime: Runtime,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    tokens: Mapping[str, str],
    operator_tokens: Collection[str] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    log_level: str = "info",
    **uvicorn_options: Any,
) -> None:
    """Serve ``runtime`` over HTTP until the server is stopped (SIGINT or SIGTERM).

    The runtime is the caller's: it is neither started nor closed here.
    """
    app = create_app(runtime, tokens=tokens, operator_tokens=operator_tokens,
                     max_body_bytes=max_body_bytes)
    await Server(app, host=host, port=port, log_level=log_level, **uvicorn_options).serve()


__all__ = ("DEFAULT_MAX_BODY_BYTES", "BodyLimit", "Guard", "Server", "StrictTarget", "create_app",
           "serve")
