"""The bulky server's tools over streamable HTTP behind a gate: while the file named by
``GATED_REFUSE`` holds a status (``401`` or ``403``), every request is refused with it, as a
server behind OAuth refuses missing or insufficient credentials. Each request is counted: a
line in the file named by ``GATED_LOG`` (``<monotonic time> <method> <status>``).

Run: ``gated.py --http PORT``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import uvicorn

sys.path.insert(0, str(Path(__file__).parents[2]))

from tests.mcp_servers.bulky import server


class Gate:
    def __init__(self, app: Any, refuse: Path, log: Path) -> None:
        self.app = app
        self.refuse = refuse
        self.log = log

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = self.refuse.read_text().strip() if self.refuse.exists() else ""
        with self.log.open("a") as log:
            log.write(f"{time.monotonic()} {scope['method']} {status or 'passed'}\n")
        if not status:
            await self.app(scope, receive, send)
            return
        body = b'{"error": "invalid_token"}'
        await send({"type": "http.response.start", "status": int(status), "headers": [
            (b"content-type", b"application/json"),
            (b"www-authenticate", b'Bearer error="invalid_token"'),
            (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


if __name__ == "__main__":
    port = int(sys.argv[2])
    app = Gate(server.streamable_http_app(), Path(os.environ["GATED_REFUSE"]),
               Path(os.environ["GATED_LOG"]))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
