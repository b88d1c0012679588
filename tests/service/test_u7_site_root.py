"""U7: the site's root leads to the console, and /docs serves the API's docs (no token: they
hold no data)."""

from __future__ import annotations

from tests.service.conftest import Live


async def test_u7_the_root_leads_to_the_console_and_docs_serve_the_api(live: Live) -> None:
    async with live.client(None) as anonymous:
        root = await anonymous.get("/")
        assert root.status_code == 307
        assert root.headers["location"] == "console/"
        console = await anonymous.get("/", follow_redirects=True)
        assert console.status_code == 200
        assert str(console.url).endswith("/console/")
        docs = await anonymous.get("/docs")
        assert docs.status_code == 200
        assert "/openapi.json" in docs.text
        assert "swagger" in docs.text.lower()
