"""The A2A (Agent2Agent) server: every served profile as an A2A agent, through the ``a2a-sdk``.

The SDK's JSON-RPC and HTTP+JSON routes parse, validate and serialise; the
:class:`~tidings.service.a2a.handler.TidingsRequestHandler` answers each method by calling the
runtime. In front of them, :func:`guarded` checks what the rest of the HTTP service checks:
the runtime is there (else 503), the bearer token names a principal (else 401, or 403 for an
operator's token alone), the agent exists (else 404), and the body is UTF-8. The service's own
layers (body limit, strict target, last-resort guard) wrap these routes too.

Routes: ``/.well-known/agent-card.json`` (the first agent's card), and for each agent NAME
``/a2a/NAME/.well-known/agent-card.json``, ``POST /a2a/NAME`` (JSON-RPC) and ``/a2a/NAME/rest/...``
(HTTP+JSON). The two streaming methods' events carry SSE ids (:mod:`.cursor`), the position a
``SubscribeToTask`` with ``Last-Event-ID`` resumes after. ``POST /a2a-hooks/children/ID``
takes the push notifications of the remote agents tidings delegates to: no bearer token (the
agent has none of this server's), the token the agent was given for that child request
(``X-A2A-Notification-Token``) instead; a push only has the task asked about at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import (
    DefaultServerCallContextBuilder,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from a2a.utils.errors import JSON_RPC_ERROR_CODE_MAP, JSONParseError
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from tidings.agents.declaration import HOOK_PATH
from tidings.push.notifications import TOKEN_HEADER
from tidings.runtime.root import Runtime
from tidings.service import problems
from tidings.service.a2a.agents import PREFIX, Agent, agents_of, card
from tidings.service.a2a.cursor import with_ids
from tidings.service.a2a.handler import TidingsRequestHandler
from tidings.service.a2a.stores import CALLER, Caller
from tidings.service.auth import Authenticator

Endpoint = Callable[[Request], Awaitable[Response]]
AGENT_PATH = PREFIX + "/{agent}"


class _Principal(User):
    """The SDK's view of the caller."""

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._name


class CallerContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's call context, with the caller :func:`guarded` found (in the request scope)."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        caller = request.scope.get(CALLER)
        if isinstance(caller, Caller):
            context.state[CALLER] = caller
            context.user = _Principal(caller.principal)
        return context


def _runtime(request: Request) -> Runtime | None:
    runtime = request.app.state.runtime
    return runtime if isinstance(runtime, Runtime) else None


def _refusal(status: int, code: str, detail: str, headers: dict[str, str] | None = None
             ) -> Response:
    return problems.problem_response(problems.problem(status, code, detail), headers)


def _agent(request: Request, runtime: Runtime) -> Agent | None:
    return agents_of(runtime).get(str(request.path_params.get("agent", "")))


def guarded(endpoint: Endpoint, *, jsonrpc: bool) -> Endpoint:
    """``endpoint`` behind the service's checks (see the module docstring)."""

    async def checked(request: Request) -> Response:
        runtime = _runtime(request)
        if runtime is None:
            return _refusal(503, "instance_not_running", "the runtime is not running")
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        authenticator = request.app.state.authenticator
        assert isinstance(authenticator, Authenticator)
        try:
            who = await authenticator.identify_async(
                token.strip() if scheme.lower() == "bearer" else None)
        except problems.HTTPProblem as refused:
            return _refusal(refused.status, refused.code, refused.detail, refused.headers)
        if who.principal is None:
            return _refusal(403, "forbidden", "A2A needs a principal's token.")
        agent = _agent(request, runtime)
        if agent is None:
            return _refusal(404, "unknown_agent",
                            f"no agent {request.path_params.get('agent')!r} is served here")
        try:
            (await request.body()).decode("utf-8")
        except UnicodeDecodeError:
            if jsonrpc:
                # Written here: the SDK's error builder maps a parse error to an internal one.
                return JSONResponse({"jsonrpc": "2.0", "id": None, "error": {
                    "code": JSON_RPC_ERROR_CODE_MAP[JSONParseError],
                    "message": "the body is not UTF-8"}})
            return _refusal(400, "malformed_body", "the body is not UTF-8")
        request.scope[CALLER] = Caller(runtime, who.principal, agent)
        return await endpoint(request)

    return checked


def _base_url(request: Request) -> str:
    return str(request.base_url).rstrip("/")


async def _card(request: Request) -> Response:
    """An agent's card: public, as A2A clients read it before they authenticate."""
    runtime = _runtime(request)
    if runtime is None:
        return _refusal(503, "instance_not_running", "the runtime is not running")
    agents = agents_of(runtime)
    name = request.path_params.get("agent")
    agent = next(iter(agents.values())) if name is None else agents.get(str(name))
    if agent is None:
        return _refusal(404, "unknown_agent", f"no agent {name!r} is served here")
    authenticator = request.app.state.authenticator
    jwt = authenticator.jwt if isinstance(authenticator, Authenticator) else None
    return JSONResponse(agent_card_to_dict(card(runtime, agent, _base_url(request), jwt)))


async def _hook(request: Request) -> Response:
    """A remote agent's push about a child request's task (see the module docstring)."""
    runtime = _runtime(request)
    if runtime is None:
        return _refusal(503, "instance_not_running", "the runtime is not running")
    request_id = str(request.path_params["request_id"])
    token = request.headers.get(TOKEN_HEADER, "")
    if not token or not await runtime.remote_children.hinted(request_id, token):
        return _refusal(404, "unknown_child_request",  # the same for a wrong token
                        f"no remote child request {request_id!r} takes this token")
    return Response(status_code=204)


def routes() -> list[BaseRoute]:
    """The A2A routes, to add to the service's app."""
    handler = TidingsRequestHandler()
    builder = CallerContextBuilder()
    found: list[BaseRoute] = [
        Route(AGENT_CARD_WELL_KNOWN_PATH, _card, methods=["GET"]),
        Route(AGENT_PATH + AGENT_CARD_WELL_KNOWN_PATH, _card, methods=["GET"]),
        Route(HOOK_PATH + "/{request_id}", _hook, methods=["POST"]),
    ]
    for route in create_jsonrpc_routes(handler, AGENT_PATH, context_builder=builder):
        assert isinstance(route, Route)
        found.append(Route(route.path, guarded(with_ids(route.endpoint), jsonrpc=True),
                           methods=sorted(route.methods or ())))
    # The SDK also mounts every REST route again under /{tenant}: that catch-all would answer
    # for the service's own paths, and tidings has no tenants.
    found.extend(
        Route(route.path, guarded(with_ids(route.endpoint), jsonrpc=False),
              methods=sorted(m for m in route.methods or () if m != "HEAD"))
        for route in create_rest_routes(handler, context_builder=builder,
                                        path_prefix=AGENT_PATH + "/rest")
        if isinstance(route, Route))
    return found


PREFIXES = (PREFIX + "/", AGENT_CARD_WELL_KNOWN_PATH, HOOK_PATH + "/")
"""Where the A2A routes are, and nothing else of the service is."""


def mount(app: FastAPI) -> list[BaseRoute]:
    """Add the A2A routes to the service's ``app`` (its runtime is ``app.state.runtime``); the
    routes added."""
    added = routes()
    app.router.routes.extend(added)
    return added


__all__ = ("PREFIXES", "CallerContextBuilder", "guarded", "mount", "routes")
