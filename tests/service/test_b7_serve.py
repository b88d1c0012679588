"""B7 over HTTP and the command line: a profile naming an unknown model or tool is a 422
``unknown_model_or_tool`` that writes nothing; ``tidings serve`` without a master key says what
is not kept, ``--require-master-key`` refuses to start; a database path that cannot be opened
stops ``serve`` with one line naming the path and the reason (real subprocesses)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import Backend
from tests.service.conftest import Servers, assert_problem
from tests.service.test_cli import Served, assert_one_line_error, served, tidings

NO_KEY = {k: v for k, v in os.environ.items()
          if k not in ("TIDINGS_MASTER_KEY", "TIDINGS_MASTER_KEY_FILE")}


async def test_b7_http_unknown_model_or_tool_is_422_and_writes_nothing(servers: Servers) -> None:
    live = await servers()
    async with live.client() as alice:
        for profile, named in (
            ({"model": "gpt-typo"}, "unknown model(s) 'gpt-typo'"),
            ({"model": "scripted", "tools": ["shell", "nope"]}, "unknown tool(s) 'nope'"),
        ):
            refused = await alice.post("/v1/conversations", json={"profile": profile})
            body = assert_problem(refused, 422, "unknown_model_or_tool")
            assert named in body["detail"]
            assert "registered: " in body["detail"]
            assert "'scripted'" in body["detail"] or "'shell'" in body["detail"]
        assert (await alice.get("/v1/conversations")).json()["items"] == []


def _serve(database: str, *args: str) -> Served:
    return Served(database, "--token", "alice=tok-a", *args, env=NO_KEY)


def test_b7_serve_without_a_master_key_says_what_is_not_kept(backend: Backend) -> None:
    with served(backend.url, "--token", "alice=tok-a", env=NO_KEY) as server:
        said = server.logs.wait_for(r"no master key is set, so results are not kept")
        assert "background output is not stored" in said.string
        how = server.logs.wait_for(r"set TIDINGS_MASTER_KEY")
        assert "docs/cli.md#the-master-key" in how.string  # the docs say the rest
    with served(backend.url, "--token", "alice=tok-a",
                env={**NO_KEY, "TIDINGS_MASTER_KEY": "ab" * 32}) as keyed:
        keyed.logs.wait_for(r"runtime started")
        assert not [s for s in keyed.logs.seen if "no master key" in s]


def test_b7_serve_require_master_key_refuses_to_start_and_says_how(backend: Backend) -> None:
    server = _serve(backend.url, "--require-master-key")
    assert server.process.wait(60) != 0
    said = "\n".join(server.logs.rest())
    assert "refusing to start" in said
    assert "TIDINGS_MASTER_KEY" in said
    assert "runtime started" not in said


def test_b7_serve_on_a_missing_directory_is_one_line_naming_it(tmp_path: Path) -> None:
    database = tmp_path / "typo" / "tidings.db"
    result = tidings("serve", "--database", str(database), "--port", "0", "--token", "a=t",
                     "--require-master-key", env={"TIDINGS_MASTER_KEY": "ab" * 32})
    assert_one_line_error(result, f"database_path: cannot open the database '{database}'")
    assert "does not exist" in result.stderr
    assert not (tmp_path / "typo").exists()
