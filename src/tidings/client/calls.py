""":class:`Calls`: the client's way to the service, shared by :class:`~tidings.Client` and its
groups -- the httpx client, the transport, the lean connections of the posts, and the requests
made on them, each answer read whole and each refusal raised as the library's error."""

from __future__ import annotations

import contextlib
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from tidings.client.lean import Lean, LeanError
from tidings.client.problems import ServiceUnreachableError, error_of, problem_of
from tidings.client.wire import Transport
from tidings.client.wire import transport as default_transport

M = TypeVar("M", bound=BaseModel)

ROOT = "/v1/conversations"


class Calls:
    """Requests to the service at ``url`` as the principal of ``token``."""

    def __init__(self, url: str, token: str, *, timeout_s: float,
                 transport: httpx.AsyncBaseTransport | None) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.transport = transport or default_transport()
        self.http = httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {token}"},
            timeout=timeout_s, transport=self.transport,
        )
        # A post's headers, merged once: the client's (its token, httpx's defaults) and JSON.
        self._post_headers = httpx.Headers(self.http.headers)
        self._post_headers["Content-Type"] = "application/json"
        # Posts go on connections of their own (see tidings.client.lean), unless the client was
        # given a transport or the environment names a proxy (httpx honours it).
        self._lean: Lean | None = None
        self._lean_headers = [("Authorization", f"Bearer {token}"),
                              ("Content-Type", "application/json"),
                              ("User-Agent", "tidings-client")]
        if transport is None and isinstance(self.transport, Transport):
            with contextlib.suppress(ValueError):
                self._lean = Lean(url, self.transport.ssl_context)
                self._lean.head("POST", "/", self._lean_headers, 0)  # a token a head can carry

    async def aclose(self) -> None:
        if self._lean is not None:
            self._lean.close()
        await self.http.aclose()

    @staticmethod
    def path(conversation: str, tail: str = "") -> str:
        return f"{ROOT}/{quote(conversation, safe='')}{tail}"

    def run(self, conversation: str, run_id: str, tail: str = "") -> str:
        return self.path(conversation, f"/runs/{quote(run_id, safe='')}{tail}")

    async def call(self, model: type[M], method: str, path: str, **options: Any) -> M:
        response = await self.request(method, path, **options)
        return model.model_validate_json(response.content)

    async def request(self, method: str, path: str, **options: Any) -> httpx.Response:
        return await self._sent(self.http.build_request(method, path, **options))

    async def post(self, target: str, payload: bytes, read_s: float) -> bytes:
        """POST the JSON ``payload`` to ``target``: the answer's body. The most-made request,
        built here in one step -- on the lean connections, or with the client's headers merged
        once (at construction) -- and read with ``read_s`` to wait for its answer."""
        if self._lean is not None:
            return await self._lean_post(target, payload, read_s)
        request = httpx.Request(
            "POST", f"{self.url}{target}", headers=self._post_headers, content=payload,
            extensions={"timeout": httpx.Timeout(self.timeout_s, read=read_s).as_dict()},
        )
        return (await self._sent(request, direct=True)).content

    async def _lean_post(self, target: str, payload: bytes, read_s: float) -> bytes:
        """POST ``payload`` to ``target`` on the lean connections: the answer's body, or the
        refusal's error."""
        assert self._lean is not None
        head = self._lean.head("POST", target, self._lean_headers, len(payload))
        try:
            status, headers, answer = await self._lean.exchange(
                head + payload, connect_s=self.timeout_s, answer_s=read_s)
        except LeanError as exc:
            raise ServiceUnreachableError(self.url, str(exc)) from None
        if status >= 400:
            raise error_of(problem_of(httpx.Response(status, headers=headers, content=answer)))
        return answer

    async def _sent(self, request: httpx.Request, *, direct: bool = False) -> httpx.Response:
        """The response to ``request``, read whole. ``direct``: a request built whole, through
        the client's transport itself -- httpx's client layer (auth, redirects, cookies, event
        hooks) has nothing to do for it, and skipping it is a fifth of a post's CPU."""
        try:
            if direct and self.transport is not None:
                response = await self.transport.handle_async_request(request)
                response.request = request
                try:
                    await response.aread()  # and closed: the connection goes back to the pool
                except BaseException:
                    await response.aclose()
                    raise
            else:
                response = await self.http.send(request)
        except httpx.TransportError as exc:
            raise ServiceUnreachableError(self.url, str(exc) or type(exc).__name__) from None
        if response.status_code >= 400:
            raise error_of(problem_of(response))
        return response


__all__ = ("ROOT", "Calls")
