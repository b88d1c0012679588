"""What every conversation route shares: the one router they are added to, the runtime and the
feeds as dependencies, and the problems a route may answer besides its success."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from tidings.errors import InstanceNotRunningError
from tidings.runtime.root import Runtime
from tidings.service import sse
from tidings.service.problems import documented


# The dependencies are coroutines: FastAPI runs a plain function in a worker thread, a hop
# (and a wait for the interpreter lock) per request for a lookup.
async def _runtime(request: Request) -> Runtime:
    runtime = request.app.state.runtime
    if runtime is None:  # an embedded app whose lifespan has not started, or has ended
        raise InstanceNotRunningError("the runtime is not running: the app has not started "
                                      "or has shut down")
    assert isinstance(runtime, Runtime)
    return runtime


async def _feeds(request: Request) -> sse.Feeds:
    feeds = request.app.state.feeds
    assert isinstance(feeds, sse.Feeds)
    return feeds


RuntimeDep = Annotated[Runtime, Depends(_runtime)]
FeedsDep = Annotated[sse.Feeds, Depends(_feeds)]

# What every conversation route may answer besides its success.
READ = documented(401, 403, 404, 422, 500, 503)
WRITE = documented(400, 401, 403, 404, 409, 413, 422, 429, 500, 503)

router = APIRouter(prefix="/v1/conversations", tags=["conversations"])

