"""The most-made requests, answered without the framework's routing: a person's input posted
to a conversation (``POST /v1/conversations/{id}/inputs``, with or without ``?wait=``), and the
A2A agents' routes (:class:`QuickRoutes`).

:class:`QuickPost` sits inside the service's own layers (:class:`~tidings.service.app.Guard`,
:class:`~tidings.service.app.StrictTarget`, :class:`~tidings.service.app.BodyLimit`: the
body is read, bounded and not nested too deep by then) and takes such a post only when
everything about it is plainly right: a bearer token that names a principal or an operator, a
conversation id the route would accept, no query but a plain ``wait`` in ``(0, 300]``, a JSON
body that is a valid input. It then does what the route does -- the same runtime call, the
same response, the same problem document for a library error -- without walking the route
table, solving the route's dependencies and passing the framework's own layers (a few hundred
microseconds of the server's CPU per post). Anything else -- a missing or unknown token, a
bad id, a query it does not know, a body that is not a valid input -- goes to the route, which
refuses it exactly as before: nothing was done yet.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence

from fastapi import FastAPI
from pydantic import ValidationError
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tidings.errors import TidingsError
from tidings.runtime.root import Runtime
from tidings.service.auth import OPERATOR_ACTOR, Authenticator
from tidings.service.params import MAX_WAIT_S
from tidings.service.problems import HTTPProblem, error_response
from tidings.service.routes import posted
from tidings.service.schemas import InputCreate
from tidings.service.sse import Feeds
from tidings.support.policy import MAX_ID_LENGTH
from tidings.types import Answer

_PATH = re.compile(rf"/v1/conversations/([^/\x00-\x1f\x7f]{{1,{MAX_ID_LENGTH}}})/inputs")
_WAIT = re.compile(rb"wait=([0-9]{1,3}(?:\.[0-9]{1,9})?)")


class QuickPost:
    """Answers a plainly right post of an input itself; passes everything else on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["method"] != "POST" or scope.get("root_path")
                or not await self._answered(scope, receive, send)):
            await self.app(scope, receive, send)

    async def _answered(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """Whether the post was plainly right and is answered; False: nothing was done (and
        the body, when read, is replayed to the route)."""
        found = _PATH.fullmatch(scope["path"])
        if found is None:
            return False
        query: bytes = scope.get("query_string", b"")
        wait: float | None = None
        if query:
            given = _WAIT.fullmatch(query)
            if given is None or not 0 < float(given[1]) <= MAX_WAIT_S:
                return False
            wait = float(given[1])
        app: FastAPI = scope["app"]
        runtime = app.state.runtime
        token = _bearer_json(scope["headers"])
        if token is None or not isinstance(runtime, Runtime):
            return False
        authenticator: Authenticator = app.state.authenticator
        try:
            who = await authenticator.identify_async(token)
        except HTTPProblem:
            return False
        message = await receive()  # the whole body: the body limit has read it already
        body_bytes = message.get("body", b"")
        try:
            if message["type"] != "http.request" or message.get("more_body", False):
                raise ValueError("not the whole body at once")  # the route reads the rest
            body = InputCreate.model_validate(json.loads(body_bytes))
        except (ValueError, ValidationError):
            # Not JSON, or not a valid input: the route refuses it as it always has.
            await self.app(scope, _replaying(message, receive), send)
            return True
        feeds: Feeds = app.state.feeds
        watch = _Disconnect(receive)
        owner = None if who.operator else who.principal
        actor = who.principal if who.principal is not None else OPERATOR_ACTOR

        async def leaving(_answer: Answer) -> bool:
            """The server is shutting down, or the client left: answer as it stands."""
            return feeds.closing or watch.left()

        try:
            response = await posted(runtime, found[1], body, owner, actor, wait, leaving)
        except TidingsError as exc:
            response = error_response("POST", scope["path"], exc)
        finally:
            watch.stop()
        await response(scope, receive, send)
        return True


def _bearer_json(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The bearer token of a JSON request, or None when the request is not plainly that (no
    or another scheme, a content type that is not exactly JSON) -- the route then decides."""
    token: str | None = None
    json_body = False
    seen: set[bytes] = set()
    for name, value in headers:
        if name in seen:
            continue  # the first of a repeated header counts, as for the route
        seen.add(name)
        if name == b"authorization":
            scheme, _, credentials = value.partition(b" ")
            if scheme.lower() != b"bearer" or not credentials or b" " in credentials:
                return None
            token = credentials.decode("latin-1")
        elif name == b"content-type":
            json_body = value == b"application/json"
    return token if json_body else None


def _replaying(first: Message, receive: Receive) -> Receive:
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return first
        return await receive()

    return replay


class _Disconnect:
    """Whether the client left, learnt by one read of the connection kept waiting (instead of
    a cancelled read at every look)."""

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._reading: asyncio.Future[Message] | None = None

    def left(self) -> bool:
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._receive())
            return False
        if not self._reading.done():
            return False
        return not self._reading.cancelled() and self._reading.exception() is None and (
            self._reading.result().get("type") == "http.disconnect")

    def stop(self) -> None:
        if self._reading is not None and not self._reading.done():
            self._reading.cancel()


class QuickRoutes:
    """Plain routes under a few path prefixes (the A2A agents'), matched here rather than after
    the framework's route table, its dependency scope and its layers (a fifth of an A2A
    call's time in the server). What these routes would not take in full -- another path, a
    method they do not answer -- goes on to the route table, which holds them too, so a
    refusal is the one it always was. A route's errors meet the application's exception
    handlers, as behind the table."""

    def __init__(self, app: ASGIApp, *, routes: Sequence[BaseRoute],
                 prefixes: tuple[str, ...]) -> None:
        self.app = app
        self.routes = tuple(routes)
        self.prefixes = prefixes
        self._handled: list[ASGIApp] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("root_path") and scope["path"].startswith(
                self.prefixes):
            for n, route in enumerate(self.routes):
                match, child = route.matches(scope)
                if match is Match.FULL:
                    scope.update(child)
                    await self._with_handlers(scope)[n](scope, receive, send)
                    return
        await self.app(scope, receive, send)

    def _with_handlers(self, scope: Scope) -> list[ASGIApp]:
        """Each route behind the application's exception handlers (built at the first call:
        the handlers are the application's by then)."""
        if self._handled is None:
            handlers = dict(scope["app"].exception_handlers)
            handlers.pop(500, None)
            handlers.pop(Exception, None)  # the outer layers answer those, as for any route
            self._handled = [ExceptionMiddleware(route.handle, handlers=handlers)
                             for route in self.routes]
        return self._handled


__all__ = ("QuickPost", "QuickRoutes")
