"""tidings inside an existing FastAPI (or any ASGI) app.

:class:`Embedding` is the HTTP service built before its runtime exists: mount its :attr:`app`
where you like, give your app its :meth:`lifespan`, and the runtime opens when your app starts
and closes when it shuts down::

    agent = Embedding(lambda: tidings.open("sqlite:///agent.db", models=[model]),
                      tokens={"alice": "secret-a"})
    app = FastAPI(lifespan=agent.lifespan)
    app.mount("/agent", agent.app)

    @app.get("/mine")
    async def mine(runtime: Annotated[Runtime, Depends(agent.runtime)]) -> ...: ...

The app is mounted, not included as a router: its refusals stay problem documents, its body
limit and its last-resort guard stay its own, and the host app's handlers and middleware stay
the host's. Until the lifespan has started (and after it ended) the mounted routes answer 503
``instance_not_running`` and :meth:`Embedding.runtime` refuses the same way. A runtime that
cannot open fails the app's start with the error that stopped it (uvicorn exits, ``TestClient``
raises it).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from contextlib import AbstractAsyncContextManager
from datetime import timedelta

from fastapi import FastAPI

from tidings.errors import InstanceNotRunningError
from tidings.runtime.root import Runtime
from tidings.service.app import DEFAULT_MAX_BODY_BYTES, build_app, feeds_of
from tidings.service.jwt_bearer import JWTBearer

RuntimeOpener = Callable[[], AbstractAsyncContextManager[Runtime]]
"""What opens the runtime and closes it on exit: ``lambda: tidings.open(url, ...)``."""


MIN_TOKEN_CHARS = 8
"""A bearer token shorter than this is refused: it is a guess away, and a mapping whose
"tokens" are this short is most likely a principal's name written in the token's place."""


def by_token(tokens: Mapping[str, str]) -> dict[str, str]:
    """``{principal: token}`` turned round for the service (``{token: principal}``); refuses
    a mapping written the other way round, naming how to write it."""
    found: dict[str, str] = {}
    for principal, token in tokens.items():
        if not principal or not token:
            raise ValueError("tokens maps principals to their bearer tokens: neither may be "
                             "empty")
        if len(token) < MIN_TOKEN_CHARS:
            raise ValueError(
                f"tokens maps each principal to its bearer token, as the command line's "
                f"--token alice=secret does; {principal!r}: {token!r} gives a token of "
                f"{len(token)} characters (at least {MIN_TOKEN_CHARS}). If {token!r} is the "
                f"principal, write it the other way round: tokens={{{token!r}: {principal!r}}}")
        if found.get(token, principal) != principal:
            raise ValueError(f"one token names two principals: {found[token]!r} and "
                             f"{principal!r}")
        found[token] = principal
    return found


class Embedding:
    """The tidings HTTP service to mount in another app, and the lifespan that runs it.

    ``open_runtime`` is called once per start of the lifespan; the runtime it yields is served
    until the lifespan ends, then closed by leaving its context (running turns commit as
    stopped, background processes end, MCP servers stop).

    ``tokens`` maps each principal to its bearer token, the way round the command line writes
    it (``--token alice=secret-a`` is ``tokens={"alice": "secret-a"}``); a token has at least
    :data:`MIN_TOKEN_CHARS` characters, so the reverse mapping is refused with how to write it.
    The rest are those of :func:`~tidings.service.create_app`.
    """

    def __init__(
        self,
        open_runtime: RuntimeOpener,
        *,
        tokens: Mapping[str, str],
        operator_tokens: Collection[str] = (),
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        feed_ping: timedelta = timedelta(seconds=15),
        jwt: JWTBearer | None = None,
    ) -> None:
        self._open_runtime = open_runtime
        self.app: FastAPI = build_app(None, tokens=by_token(tokens),
                                      operator_tokens=operator_tokens,
                                      max_body_bytes=max_body_bytes, feed_ping=feed_ping,
                                      jwt=jwt)
        """The tidings routes (``/v1/...``, ``/health``, ``/metrics``, ``/openapi.json``), to
        mount: ``app.mount("/agent", embedding.app)``."""
        self._runtime: Runtime | None = None

    @property
    def started(self) -> bool:
        """Whether the runtime is open and served."""
        return self._runtime is not None

    def runtime(self) -> Runtime:
        """The running runtime; a FastAPI dependency too: ``Depends(embedding.runtime)``.

        Raises :class:`~tidings.errors.InstanceNotRunningError` (503 under the mounted app's
        handlers, and under yours if you map it) outside the lifespan.
        """
        if self._runtime is None:
            raise InstanceNotRunningError("the runtime is not running: the app has not started "
                                          "or has shut down")
        return self._runtime

    @contextlib.asynccontextmanager
    async def lifespan(self, app: object = None) -> AsyncIterator[None]:
        """Open the runtime, serve it, and close it on exit: ``FastAPI(lifespan=...)``, or
        entered inside a lifespan of your own (``async with embedding.lifespan(app):``).

        The app is not needed (it is accepted so that this is a lifespan as Starlette calls
        it). Entering it while it is already entered is an error.
        """
        if self._runtime is not None:
            raise RuntimeError("this Embedding is already running; one lifespan at a time")
        async with self._open_runtime() as runtime:
            if not isinstance(runtime, Runtime):
                raise TypeError(f"open_runtime yielded {type(runtime).__name__}, not a Runtime")
            feeds = feeds_of(self.app)
            feeds.open()
            self._runtime = self.app.state.runtime = runtime
            try:
                yield
            finally:
                # The routes refuse from here on, and a feed still open ends before the
                # runtime closes (under uvicorn, sse-starlette has ended them already, when
                # the server began to stop: a server waits for its connections before it
                # ends the lifespan).
                self._runtime = self.app.state.runtime = None
                feeds.close()


__all__ = ("MIN_TOKEN_CHARS", "Embedding", "RuntimeOpener", "by_token")
