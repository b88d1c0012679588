"""The operator console (O1): a web page served by the service itself, at ``/console/``.

Every asset is a file of this package (``static/``): plain HTML, CSS and JavaScript modules,
no build step, nothing fetched from another origin. The page signs in with a bearer token it
keeps for the browser tab only (``sessionStorage``) and sends as an ``Authorization`` header;
it reads and acts through the same HTTP API as any client, the event feed included (streamed
with ``fetch``, so no token ever travels in a URL).

The assets are read once, when the app is made, and served from memory under a strict
Content-Security-Policy: scripts, styles and connections from this origin only, no inline
script, no framing. The page renders everything the model, tools, processes and children wrote
as text (``textContent``), never as markup; the policy is the second wall.
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from tidings.service.problems import HTTPProblem

PREFIX = "/console"

CONTENT_SECURITY_POLICY = "; ".join((
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self'",
    "connect-src 'self'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
))
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cache-Control": "no-cache",
}
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}


def _files(folder: Traversable, prefix: str = "") -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for entry in folder.iterdir():
        name = f"{prefix}{entry.name}"
        if entry.is_dir():
            found.update(_files(entry, f"{name}/"))
        elif any(name.endswith(ext) for ext in MEDIA_TYPES):
            found[name] = entry.read_bytes()
    return found


def assets() -> dict[str, bytes]:
    """The console's files, by their path under ``/console/``."""
    return _files(resources.files(__name__).joinpath("static"))


def router() -> APIRouter:
    """The console's routes: the page at ``/console/``, its assets beside it. They are not part
    of the API (not in the OpenAPI schema) and need no token: the page holds no data."""
    files = assets()
    console = APIRouter(include_in_schema=False)

    def answer(name: str) -> Response:
        body = files.get(name)
        if body is None:
            raise HTTPProblem(404, "not_found", "No such route.")
        media = next(m for ext, m in MEDIA_TYPES.items() if name.endswith(ext))
        return Response(body, media_type=media, headers=HEADERS)

    @console.get("/")
    async def root() -> RedirectResponse:
        # The site's root leads to the console (the API is under /v1, its docs at /docs).
        return RedirectResponse("console/", status_code=307, headers=HEADERS)

    @console.get(PREFIX)
    async def bare() -> RedirectResponse:
        # The page's links are relative to /console/ (so it works under a mount prefix too).
        return RedirectResponse("console/", status_code=308, headers=HEADERS)

    @console.get(f"{PREFIX}/")
    async def page() -> Response:
        return answer("index.html")

    @console.get(f"{PREFIX}/{{name:path}}")
    async def asset(name: str) -> Response:
        return answer(name)

    return console


__all__ = ("CONTENT_SECURITY_POLICY", "PREFIX", "assets", "router")
