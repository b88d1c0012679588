"""The console in a real browser: headless Chromium, driven by Selenium, against a real
``tidings serve`` process on a loopback port -- one server per backend and test module, on a
database that ``tidings demo`` filled (so the console is seen working on the demo's database),
and one browser per module. The demo runs once per backend and test session: each module's
server gets a copy of its database (a file copy on SQLite, a database cloned from it on
PostgreSQL), and a module's tests of one backend run together on one test worker, so that the
set-up is done once per module and backend.

The server answers with a scripted model whose replies stream in small pieces with short
pauses, run background and foreground commands, spawn a child, fail, and hold a call for
approval. Tests wait on DOM conditions (``WebDriverWait``), never on time; they save
screenshots under ``tests/artifacts/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from tests.conftest import drop_postgres_database, fresh_postgres_database
from tests.scenarios.test_injection_corpus import CORPUS
from tests.scenarios.test_locked import dead_letter
from tests.service.test_cli import free_port
from tests.service.test_http_operator import seed_conversation
from tests.waiting import wait_serving
from tidings.records.results import MasterKey

ALICE, BOB, OPERATOR = "alice-console-token", "bob-console-token", "operator-console-token"
KEY = MasterKey.generate()
WAIT_S = 30.0  # a bound on waiting for what a test arranged; never asserted on
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

STREAMED = " ".join(f"word{n:02d}" for n in range(1, 31))
"""The answer that streams: 30 words, a piece every 40 ms."""

# Markup that would run if the page ever parsed data as HTML, beside the kernel's corpus.
HTML_CORPUS = (
    '<img src=x onerror="window.__pwned=1">',
    "<script>window.__pwned=2</script>",
    '<svg onload="window.__pwned=3"><circle r="1"/></svg>',
    '"><iframe src="javascript:top.__pwned=4"></iframe>',
    '<a href="javascript:window.__pwned=5" id="click-me">click</a>',
    "<style>body{display:none}</style>",
    "&lt;b&gt;entity&lt;/b&gt; &#60;i&#62;",
)
INJECTIONS = (*HTML_CORPUS, *CORPUS)
INJECTION_END = "INJECTION-CORPUS-END"


def rules() -> dict[str, Any]:
    """The scripted model of the console tests."""
    printed = "; ".join(f"printf '%s\\n' {shlex.quote(p)}" for p in INJECTIONS)
    shell = "shell"
    return {
        "name": "scripted",
        "rules": [
            {"when": {"meta_kind": "task_notification"}, "reply": {"text": "The build finished."}},
            {"when": {"tool_result": shell, "text_contains": "deployed"},
             "reply": {"text": "Deployed."}},
            {"when": {"tool_result": shell, "text_contains": INJECTION_END},
             "reply": {"text": "Shown."}},
            {"when": {"tool_result": shell}, "reply": {"text": "Started; I will report back."}},
            {"when": {"tool_result": "spawn"}, "reply": {"text": "Delegated."}},
            {"when": {"text_contains": "<task_result"}, "reply": {"text": "Read the report."}},
            {"when": {"text_contains": "stream please"},
             "reply": {"text": STREAMED, "chunks": 30, "chunk_delay": 0.04}},
            {"when": {"text_contains": "slow please"},
             "reply": {"text": "slow " * 200, "chunks": 200, "chunk_delay": 0.1}},
            {"when": {"text_contains": "run in the background"},
             "reply": {"tool_calls": [{"name": shell, "arguments": {
                 "command": "sleep 0.3; echo built", "background": True}}]}},
            {"when": {"text_contains": "deploy it"},
             "reply": {"tool_calls": [{"name": shell, "arguments": {"command": "echo deployed"}}]}},
            {"when": {"text_contains": "inject the corpus"},
             "reply": {"tool_calls": [{"name": shell, "arguments": {
                 "command": f"{printed}; echo {INJECTION_END}"}}]}},
            {"when": {"text_contains": "delegate twice"},
             "reply": {"tool_calls": [{"name": "spawn", "arguments": {
                 "brief": "delegate please", "title": "middle"}}]}},
            {"when": {"text_contains": "delegate please"},
             "reply": {"tool_calls": [{"name": "spawn", "arguments": {
                 "brief": "count to three", "title": "counting"}}]}},
            {"when": {"text_contains": "count to three"}, "reply": {"text": "one two three"}},
            {"when": {"text_contains": "fail please"}, "reply": {"error": "permanent"}},
        ],
        "default": {"echo": True},
    }


WEBHOOK_DEAD_LETTER = """
INSERT INTO a2a_push_deliveries (task_id, owner, config_id, conversation_id, event_seq,
    event_type, run_id, data, state, attempts, claimable_at_us, failure_code, published_at_us,
    settled_at_us)
VALUES ('in_dead', 'alice', 'hook', %s, 1, 'turn_status', NULL, '{"status": "completed"}',
        'dead_letter', 3, 0, 'http_503', 1700000000000000, 1700000000000000)
"""


def webhook_dead_letter(url: str, conversation_id: str) -> None:
    """An A2A push notification whose attempts were spent: a webhook dead letter (written
    behind the runtime's back: only its listing is under test here)."""
    if url.startswith(("postgresql://", "postgres://")):
        with psycopg.connect(url) as conn:
            conn.execute(WEBHOOK_DEAD_LETTER, (conversation_id,))
        return
    db = sqlite3.connect(url)
    try:
        with db:
            db.execute(WEBHOOK_DEAD_LETTER.replace("%s", "?"), (conversation_id,))
    finally:
        db.close()


@dataclass
class Site:
    """A ``tidings serve`` process over a database the demo filled."""

    backend: str
    database: str
    url: str
    process: subprocess.Popen[bytes]
    extra_dead_letter: int
    folder: Path

    def restart(self) -> None:
        """Stop the server (SIGTERM) and start another on the same database and port."""
        stop(self.process)
        port = int(self.url.rsplit(":", 1)[1])
        self.process, self.url, _ = serve(self.database, self.folder, port=port)

    def client(self, token: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"},
                            timeout=WAIT_S)

    def conversation(self, token: str, *, tools: tuple[str, ...] = (), title: str = "",
                     approval_mode: str = "never") -> str:
        with self.client(token) as client:
            created = client.post("/v1/conversations", json={"title": title, "profile": {
                "model": "scripted", "tools": list(tools), "approval_mode": approval_mode}})
            assert created.status_code == 201, created.text
            return str(created.json()["conversation_id"])

    def post(self, token: str, conversation_id: str, content: str) -> None:
        with self.client(token) as client:
            posted = client.post(f"/v1/conversations/{conversation_id}/inputs",
                                 json={"content": content})
            assert posted.status_code == 202, posted.text


README = Path(__file__).resolve().parents[2] / "README.md"


def readme_commands() -> tuple[list[str], list[str]]:
    """The README's two commands that serve the demo's database to the console, as argument
    lists (``tidings demo ...``, ``tidings serve ...``): the tests run them as written, with
    their own database, port, tokens and model added."""
    section = README.read_text("utf-8").split("## The console\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```sh\n(.*?)```", section, re.S)
    assert found is not None, "the README shows how to serve the demo's database"
    commands = [shlex.split(line.split("#", 1)[0]) for line in found.group(1).splitlines()
                if line.strip()]
    demo_line, serve_line = commands
    assert demo_line[:2] == [".venv/bin/tidings", "demo"], demo_line
    assert serve_line[:2] == [".venv/bin/tidings", "serve"], serve_line
    return demo_line[1:], serve_line[1:]


def as_written(arguments: list[str], database: str) -> list[str]:
    """A README command's arguments on this test's database."""
    return [database if a == "demo.db" else a for a in arguments]


def serve(database: str, folder: Path, *extra: str,
          port: int | None = None) -> tuple[subprocess.Popen[bytes], str, Path]:
    """Start ``tidings serve`` -- the README's command for the demo's database, on this one, a
    free port, with the tests' tokens and model -- and return it once it answers."""
    model = folder / "rules.json"
    model.write_text(json.dumps(rules()), "utf-8")
    port = port or free_port()
    log = folder / f"serve-{port}-{time.monotonic_ns()}.log"
    bindir = Path(sys.executable).parent
    _, written = readme_commands()
    with log.open("wb") as out:  # the child has its own copy of the file
        process = subprocess.Popen(
            [str(bindir / "tidings"), *as_written(written, database), "--port", str(port),
             "--model", f"scripted:{model}", "--token", f"alice={ALICE}", "--token",
             f"bob={BOB}", "--operator-token", OPERATOR, *extra],
            stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "TIDINGS_MASTER_KEY": KEY.secret.hex()},
        )
    url = f"http://127.0.0.1:{port}"
    wait_serving(url, process=process, statuses=(200, 503),
                 output=lambda: f"tidings serve did not start: {log.read_text('utf-8')}")
    return process, url, log


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def demo(database: str) -> None:
    """``tidings demo`` on the database, as the README runs it: conversations, tasks,
    children, a dead letter."""
    written, _ = readme_commands()
    done = subprocess.run([sys.executable, "-m", "tidings", *as_written(written, database)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


class DemoDatabases:
    """The demo's database on each backend, filled once per test session and shared by the
    session's workers (under a file lock in the session's shared temporary folder): what a
    module's server runs on is a copy of it. A worker drops at its end the PostgreSQL database
    it filled; a worker that finds it gone fills it again."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.built: list[tuple[str, str]] = []  # (admin, url) of what this worker filled

    @contextlib.contextmanager
    def locked(self, backend: str) -> Iterator[None]:
        with (self.folder / f"{backend}.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def sqlite(self, target: Path) -> str:
        """A copy of the demo's SQLite database at ``target``."""
        source = self.folder / "demo.db"
        with self.locked("sqlite"):
            if not source.exists():
                building = self.folder / "building.db"
                for stale in self.folder.glob("building.db*"):
                    stale.unlink()
                demo(str(building))
                db = sqlite3.connect(building)  # the whole log into the file, then one file
                try:
                    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                finally:
                    db.close()
                assert not Path(f"{building}-wal").exists(), "the demo's database is one file"
                building.rename(source)
            shutil.copyfile(source, target)
        return str(target)

    def postgres(self, admin: str) -> str:
        """A new database cloned from the demo's PostgreSQL database."""
        named = self.folder / "postgres.name"
        with self.locked("postgres"):
            name = named.read_text("utf-8") if named.exists() else ""
            with psycopg.connect(admin, autocommit=True) as conn:
                present = name and conn.execute(
                    "SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
            if not present:
                url = fresh_postgres_database(admin)
                name = url.rsplit("/", 1)[1]
                self.built.append((admin, url))
                demo(url)
                named.write_text(name, "utf-8")
            return fresh_postgres_database(admin, template=name)

    def close(self) -> None:
        with self.locked("postgres"):
            for admin, url in self.built:
                drop_postgres_database(admin, url)
                with contextlib.suppress(FileNotFoundError):
                    named = self.folder / "postgres.name"
                    if named.read_text("utf-8") == url.rsplit("/", 1)[1]:
                        named.unlink()


@pytest.fixture(scope="session")
def demo_databases(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                   ) -> Iterator[DemoDatabases]:
    """The session's demo databases (see ``DemoDatabases``)."""
    base = tmp_path_factory.getbasetemp()
    # A test worker's temporary folder is in the session's; run alone, the session's is its own.
    shared = base.parent if hasattr(request.config, "workerinput") else base
    databases = DemoDatabases(shared / "console-demo")
    try:
        yield databases
    finally:
        databases.close()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
         demo_databases: DemoDatabases) -> Iterator[Site]:
    """The console's server on each backend (ids ``sqlite`` and ``postgres``), on a copy of the
    demo's database."""
    folder = tmp_path_factory.mktemp(f"console-{request.param}")
    admin: str | None = None
    if request.param == "sqlite":
        database = demo_databases.sqlite(folder / "demo.db")
    else:
        admin = request.getfixturevalue("postgres_template")
        database = demo_databases.postgres(admin)
    try:
        conversation = asyncio.run(seed_conversation(database))
        extra = asyncio.run(dead_letter(database, conversation))
        webhook_dead_letter(database, conversation)
        process, url, _ = serve(database, folder)
        site = Site(request.param, database, url, process, extra, folder)
        try:
            yield site
        finally:
            stop(site.process)
    finally:
        if admin is not None:
            drop_postgres_database(admin, database)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A module's tests of one backend form one group (``--dist loadgroup``): they run on one
    worker, one after the other, around the one server the module's set-up starts for them."""
    here = Path(__file__).parent
    for item in items:
        params = getattr(item, "callspec", None)
        if params is None or "site" not in params.params or here not in item.path.parents:
            continue
        item.add_marker(pytest.mark.xdist_group(f"console-{item.path.stem}-{params.params['site']}"))


# -- the browser ---------------------------------------------------------------------------------


@dataclass
class Page:
    """The browser, as the tests use it."""

    driver: webdriver.Chrome
    site: Site | None = None
    shots: list[Path] = field(default_factory=list)
    server_away: bool = False
    """The test stops the server for a while: the page's requests meanwhile are refused."""

    def open(self, site: Site, route: str = "/") -> None:
        """The console of ``site`` at ``route`` (a hash route), loaded afresh."""
        self.site = site
        self.driver.get(f"{site.url}/console/#{route}")

    def go(self, route: str) -> None:
        """Another route of the page already loaded (no reload)."""
        self.driver.execute_script("location.hash = arguments[0]", route)

    def wait(self, condition: Callable[[WebDriver], Any], what: str = "") -> Any:
        def probe(driver: WebDriver) -> Any:
            try:
                return condition(driver)
            except StaleElementReferenceException:
                return False

        return WebDriverWait(self.driver, WAIT_S).until(probe, what)

    def find(self, css: str) -> WebElement:
        found: WebElement = self.wait(lambda d: d.find_element(By.CSS_SELECTOR, css)
                                      if d.find_elements(By.CSS_SELECTOR, css) else None, css)
        return found

    def all(self, css: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def text(self, css: str) -> str:
        return str(self.find(css).get_attribute("textContent"))

    def attributes(self, css: str, name: str) -> list[str | None]:
        """``name`` of every element ``css`` matches (None where it has none), read in one step
        of the page: a table the page redraws meanwhile cannot leave a row read half-way."""
        found = self.js("return [...document.querySelectorAll(arguments[0])]"
                        ".map(e => e.getAttribute(arguments[1]))", css, name)
        return [None if value is None else str(value) for value in found]

    def shown(self, css: str) -> list[bool]:
        """Whether each element ``css`` matches is visible (not inside a closed fold, not hidden),
        read in one step of the page."""
        return [bool(shown) for shown in self.js(
            "return [...document.querySelectorAll(arguments[0])]"
            ".map(e => e.checkVisibility())", css)]

    def click(self, css: str) -> None:
        """Click the element ``css`` matches, found again if the page redrew it meanwhile."""
        def clicked(driver: WebDriver) -> bool:
            driver.find_element(By.CSS_SELECTOR, css).click()
            return True

        self.wait(clicked, css)

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def sign_in(self, site: Site, token: str, route: str = "/") -> None:
        """Sign in with ``token`` (signing out whoever was signed in), then go to ``route``."""
        self.open(site, route)
        self.find("#signin, #signout")
        if self.all("#signout"):
            self.all("#signout")[0].click()
        self.find("#token").send_keys(token)
        self.find("#signin button[type=submit]").click()
        self.find("#me")
        self.go(route)

    def shot(self, name: str) -> Path:
        """A screenshot under tests/artifacts/, named after the test and the backend."""
        ARTIFACTS.mkdir(exist_ok=True)
        backend = self.site.backend if self.site is not None else "none"
        path = ARTIFACTS / f"{name}-{backend}.png"
        self.driver.save_screenshot(str(path))
        self.shots.append(path)
        return path


def chromium() -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1440,960", "--no-first-run",
                     "--disable-extensions", "--disable-background-networking"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


@pytest.fixture(scope="module")
def browser() -> Iterator[Page]:
    """One headless Chromium for the module's tests."""
    if not Path(CHROMIUM).exists() or not Path(CHROMEDRIVER).exists():
        pytest.skip("the browser tests need Chromium and its driver (Debian: chromium, "
                    "chromium-driver)")
    try:
        driver = chromium()
    except WebDriverException as exc:  # pragma: no cover - a broken installation
        pytest.fail(f"Chromium did not start: {exc.msg}")
    try:
        yield Page(driver)
    finally:
        driver.quit()


def console_log(driver: webdriver.Chrome) -> list[dict[str, Any]]:
    """What the page wrote to the browser's console since the last call."""
    entries: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
    return entries


@pytest.fixture
def page(browser: Page, site: Site) -> Iterator[Page]:
    """The browser on the backend's site; the page's script errors fail the test."""
    browser.site = site
    browser.server_away = False
    console_log(browser.driver)  # what earlier tests left
    yield browser
    errors = [entry["message"] for entry in console_log(browser.driver)
              if entry["level"] == "SEVERE" and "favicon" not in entry["message"]
              and "status of 4" not in entry["message"]  # a refused request the test made
              and not (browser.server_away and "ERR_CONNECTION_REFUSED" in entry["message"])
              # The page an earlier test left, refreshing from a site that is gone by now
              # (another backend's), before this test's first page replaced it.
              and not (entry["message"].startswith("http")
                       and not entry["message"].startswith(site.url))]
    assert errors == []
