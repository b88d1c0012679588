"""The one backend fixture: every behavioural test runs on SQLite and on PostgreSQL.

PostgreSQL is found through ``TIDINGS_TEST_POSTGRES_DSN`` (for example
``postgresql://postgres@127.0.0.1:5432/test``). Without it the ``postgres`` cases skip with
that reason; ``.ci/run`` sets it and fails the run if any PostgreSQL case skipped. Each test
gets a fresh database cloned from a migrated template, so tests are isolated and fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import os
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import pytest_asyncio

from tests.databases import Clones, create, drop, with_dbname
from tidings import Clock, ManualClock, Outbox
from tidings.models.base import Model
from tidings.records.results import MasterKey
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.store import Store, open_store
from tidings.tools.registry import Tool

POSTGRES_DSN_ENV = "TIDINGS_TEST_POSTGRES_DSN"
TEMPLATE = f"tidings_test_template_{os.getpid()}"  # one per session: sessions may overlap


def postgres_admin_dsn() -> str | None:
    return os.environ.get(POSTGRES_DSN_ENV) or None


def _to_url(dsn: str) -> str:
    """psycopg accepts key=value DSNs; tidings opens URLs. Build the URL form."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    user = info.get("user", "postgres")
    host = info.get("host", "127.0.0.1")
    port = info.get("port", "5432")
    return f"postgresql://{user}@{host}:{port}/{info['dbname']}"


@dataclass(frozen=True)
class Backend:
    """A fresh, migrated database for one test: ``url`` opens it with tidings."""

    name: str
    url: str


_clones: Clones | None = None
"""This process's test databases, once the template is migrated."""


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    global _clones
    admin = postgres_admin_dsn()
    if admin is None:
        pytest.skip(f"PostgreSQL tests need {POSTGRES_DSN_ENV} (e.g. "
                    "postgresql://postgres@127.0.0.1:5432/test)")
    drop(admin, TEMPLATE)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {TEMPLATE}")

    async def migrate() -> None:
        store = await open_store(_to_url(with_dbname(admin, TEMPLATE)))
        await store.close()

    asyncio.run(migrate())
    _clones = Clones(admin, TEMPLATE)
    yield admin
    clones, _clones = _clones, None
    clones.close()
    drop(admin, TEMPLATE)


def fresh_postgres_database(admin: str, *, template: str | None = TEMPLATE) -> str:
    """An empty (or template-cloned) database; its URL."""
    if template == TEMPLATE and _clones is not None:
        name = _clones.take()
    else:
        name = create(admin, template)
    return _to_url(with_dbname(admin, name))


def drop_postgres_database(admin: str, url: str) -> None:
    """Done with a test's database: emptied for another test, or dropped (tests/databases.py)."""
    name = url.rsplit("/", 1)[1]
    if _clones is not None:
        _clones.give_back(name)
    else:
        drop(admin, name)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A fresh database on each backend; ids ``sqlite`` and ``postgres``."""
    if request.param == "sqlite":
        yield Backend("sqlite", str(tmp_path / "tidings.db"))
        return
    admin: str = request.getfixturevalue("postgres_template")
    url = fresh_postgres_database(admin)
    try:
        yield Backend("postgres", url)
    finally:
        drop_postgres_database(admin, url)


@pytest.fixture
def clock() -> ManualClock:
    """A clock that moves only when a test advances it."""
    return ManualClock()


@pytest_asyncio.fixture
async def store(backend: Backend) -> AsyncIterator[Store]:
    """An opened store on a fresh database of each backend."""
    opened = await open_store(backend.url)
    try:
        yield opened
    finally:
        await opened.close()


@pytest_asyncio.fixture
async def outbox(backend: Backend, clock: ManualClock) -> AsyncIterator[Outbox]:
    """A started outbox on a fresh database of each backend, on the manual clock."""
    async with Outbox.open(backend.url, clock=clock) as opened:
        yield opened


class RuntimeFactory:
    """Opens runtimes on the test's database; every one is closed when the test ends."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._stack = contextlib.AsyncExitStack()

    async def __call__(
        self,
        *,
        models: Sequence[Model] | Mapping[str, Model],
        tools: Sequence[Tool] = (),
        clock: Clock | None = None,
        config: RuntimeConfig | None = None,
        master_key: MasterKey | None = None,
    ) -> Runtime:
        return await self._stack.enter_async_context(
            Runtime.open(self.backend.url, models=models, tools=tools, clock=clock,
                         config=config, master_key=master_key)
        )

    async def aclose(self) -> None:
        await self._stack.aclose()


@pytest_asyncio.fixture
async def runtimes(backend: Backend) -> AsyncIterator[RuntimeFactory]:
    """``await runtimes(models=[...], tools=[...])`` opens a started Runtime on the backend."""
    factory = RuntimeFactory(backend)
    try:
        yield factory
    finally:
        await factory.aclose()


_SLOW_FIRST = (
    "tests/crash/test_torture.py",
    "tests/properties/",
    "tests/service/test_http_schemathesis.py",
    "tests/service/test_demo.py",
    "tests/console/",
)
"""Modules whose tests take 15 to 90 s each on a two-core machine: they run first, so that the
two workers do not end with one of them alone on a long test and the other idle."""


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own (see _keep_groups)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not item.nodeid.startswith(_SLOW_FIRST))  # stable: order kept
    if getattr(config.option, "loadgroup", False):  # a test worker under --dist loadgroup
        _keep_groups(items)


def _keep_groups(items: list[pytest.Item]) -> None:
    """Give each test marked ``xdist_group`` the ``@group`` suffix on its id by which
    ``--dist loadgroup`` keeps a group on one worker. pytest-xdist 3.8 writes it to ``_nodeid``,
    which pytest 9.2 no longer reads (its ids are structured, in ``_id``): without this, the
    groups are silently spread over the workers as if unmarked (pytest-xdist issue 1386).
    Written the same way pytest-xdist writes it; a test that has its suffix is left alone."""
    for item in items:
        names = {str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                 for mark in item.iter_markers("xdist_group")}
        suffix = f"@{'_'.join(sorted(names))}"
        if names and not item.nodeid.endswith(suffix):
            from _pytest.nodeid import NodeId  # pytest 9.2 on; before, the suffix is there

            item._id = NodeId.parse(item.nodeid + suffix)


_skipped_postgres: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and "postgres" in report.nodeid:
        _skipped_postgres.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _skipped_postgres and os.environ.get("TIDINGS_REQUIRE_POSTGRES") == "1":
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                f"{len(_skipped_postgres)} PostgreSQL test(s) skipped, which "
                "TIDINGS_REQUIRE_POSTGRES=1 forbids:", red=True
            )
            for nodeid in _skipped_postgres:
                reporter.write_line(f"  {nodeid}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_STUCK_AFTER_S = 200.0
"""A test still running after this long (the timeout is 300 s) prints every asyncio task's
stack, so that a hang names the await it is stuck in (the timeout's own dump shows threads)."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    timer = threading.Timer(_STUCK_AFTER_S, _dump_asyncio_tasks, args=(item.nodeid,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _dump_asyncio_tasks(nodeid: str) -> None:
    loops = [o for o in gc.get_objects()
             if isinstance(o, asyncio.AbstractEventLoop) and o.is_running()]
    for loop in loops:  # one per test, on its own thread
        def dump(loop: asyncio.AbstractEventLoop = loop) -> None:
            out = io.StringIO()
            tasks = asyncio.all_tasks(loop)
            print(f"+++ {nodeid}: stuck; {len(tasks)} asyncio task(s)", file=out)
            for task in tasks:
                print(f"--- {task.get_name()}", file=out)
                for line in _awaits(task.get_coro()):
                    print(f"    {line}", file=out)
            sys.stdout.write(out.getvalue())  # captured: the failure's report shows it

        with contextlib.suppress(RuntimeError):  # closed meanwhile
            loop.call_soon_threadsafe(dump)


def _awaits(coro: object) -> Iterator[str]:
    """Where a suspended coroutine waits, down its chain of awaits."""
    for _ in range(64):
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
        if frame is not None:
            yield f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        inner = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
        if inner is None:
            if coro is not None and frame is None:
                yield repr(coro)
            return
        coro = inner
