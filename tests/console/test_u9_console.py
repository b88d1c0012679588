"""The console for a first hour, in headless Chromium against a real ``tidings serve`` on both
backends (the demo's database, as in test_console): nothing overflows sideways or is cut from
1024 px up; every id shown in short can be copied whole; conversations are searched and
filtered by status; a child's own children are nested under it; the instances are folded to the
running ones and a count of the gone; a stopped run reads "stopped" once; an operator's post is
marked as the operator's; and the page's own words are plain. The commands of docs/console.md
are run as written, and their tokens sign in."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from tests.console.conftest import ALICE, BOB, OPERATOR, Page, Site, stop
from tests.service.test_cli import free_port
from tests.waiting import eventually

DOC = Path(__file__).resolve().parents[2] / "docs" / "console.md"

WIDTHS = (1024, 1280, 1400, 1440)
TABS = ("runs", "tasks", "children", "signals")

# Every control on the page that is not fully visible: past the viewport's edges, past the
# edge of a box that clips or scrolls (the side panel), or with its own text cut.
CUT_CONTROLS = """
const width = document.documentElement.clientWidth;
const cut = [];
for (const el of document.querySelectorAll('button, select, input, textarea')) {
  if (el.offsetParent === null || el.classList.contains('copy-source')) continue;
  const box = el.getBoundingClientRect();
  if (!box.width) continue;
  let bad = box.left < -0.5 || box.right > width + 0.5 || el.scrollWidth > el.clientWidth + 1;
  for (let up = el.parentElement; up && !bad; up = up.parentElement) {
    const style = getComputedStyle(up);
    if (style.overflowX === 'visible') continue;
    const edge = up.getBoundingClientRect();
    bad = box.left < edge.left - 0.5 || box.right > edge.right + 0.5;
  }
  if (bad) cut.push((el.id || el.className || el.tagName) + ': ' + el.textContent.trim());
}
return [document.documentElement.scrollWidth, width, cut];
"""


def listed(site: Site, token: str) -> list[dict[str, Any]]:
    with site.client(token) as client:
        items: list[dict[str, Any]] = client.get(
            "/v1/conversations", params={"limit": 1000}).json()["items"]
    return items


def demo_conversation(site: Site, title: str) -> str:
    return next(str(c["conversation_id"]) for c in listed(site, ALICE) if c["title"] == title)


def fits(page: Page, where: str) -> None:
    scroll_width, width, cut = page.js(CUT_CONTROLS)
    assert scroll_width <= width, f"{where}: the page is {scroll_width} px wide in {width}"
    assert cut == [], f"{where}: controls cut"


def show_tab(page: Page, tab: str) -> None:
    page.find(f"#tab-{tab}").click()
    page.wait(lambda d: page.find("#panel-body").get_attribute("data-panel") == tab
              and "Loading" not in page.text("#panel-body"), f"the {tab} panel")


def run_status(page: Page) -> str:
    return str(page.find("#run-status").get_attribute("data-status"))


def stop_a_slow_answer(page: Page) -> None:
    """Ask for a slow answer in the conversation on screen, and stop it as it is written."""
    page.find("#composer-text").send_keys("slow please")
    page.find("#composer-send").click()
    page.find("#drafts .msg.draft")
    page.find("#stop-turn").click()
    page.wait(lambda d: run_status(page) == "stopped", "the stopped run")


def rows(page: Page) -> set[str]:
    """The conversations the list shows (read in one go: the list is redrawn as it changes)."""
    return set(page.js("return [...document.querySelectorAll('#conversations tbody "
                       "tr[data-conversation]')].map((r) => r.dataset.conversation)"))


def copy(page: Page, css: str) -> None:
    """Click the copy button ``css`` finds (found again if the panel was drawn anew)."""
    def click(driver: Any) -> bool:
        driver.find_element(By.CSS_SELECTOR, css).click()
        return True
    page.wait(click, css)


@pytest.fixture
def widths(page: Page) -> Iterator[tuple[int, ...]]:
    """The widths to check at; the window gets its own size back afterwards."""
    try:
        yield WIDTHS
    finally:
        page.driver.set_window_size(1440, 960)


@pytest.fixture
def clipboard(page: Page, site: Site) -> Page:
    """The page may read and write the clipboard (granted as a person would, through the
    browser's permissions)."""
    page.driver.execute_cdp_cmd("Browser.grantPermissions", {
        "origin": site.url, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
    return page


def clipboard_text(page: Page) -> str:
    return str(page.driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "navigator.clipboard.readText().then(done, (e) => done('refused: ' + e));"))


# -- fits from 1024 px up -------------------------------------------------------------------


def test_u9_nothing_overflows_or_is_cut_from_1024_px_up(
    page: Page, site: Site, widths: tuple[int, ...],
) -> None:
    # A failed run (its retry controls are the widest), the demo's busiest conversation (runs,
    # tasks) and its delegating one (children).
    failing = site.conversation(ALICE, title="failing, to fit")
    site.post(ALICE, failing, "fail please")
    conversations = [failing, demo_conversation(site, "demo"),
                     demo_conversation(site, "delegation")]
    page.sign_in(site, ALICE, f"/c/{failing}")
    page.wait(lambda d: run_status(page) in ("failed", "needs_attention"), "the failed run")
    for width in widths:
        page.driver.set_window_size(width, 900)
        assert page.js("return window.innerWidth") == width
        page.go("/")
        page.find("#conversations tbody tr")
        fits(page, f"the list at {width} px")
        for conversation in conversations:
            page.go(f"/c/{conversation}")
            page.find(f"#conversation[data-conversation='{conversation}']")
            for tab in TABS:
                show_tab(page, tab)
                fits(page, f"{conversation}, {tab}, at {width} px")
    page.sign_in(site, OPERATOR, "/ops")
    for width in widths:
        page.driver.set_window_size(width, 900)
        page.go("/")
        page.find("#conversations tbody tr")
        fits(page, f"the operator's list at {width} px")
        page.go("/ops")
        page.find("#dead-letters tr.letter, #dead-letters .empty")
        page.find("#instances tr[data-instance]")
        fits(page, f"the operator's page at {width} px")
        if width == 1280:
            page.shot("console-1280")


# -- ids copyable ---------------------------------------------------------------------------

# An id as the page shortens it: a prefix, an ellipsis, the id's last characters.
SHORTENED = re.compile(r"\b[a-z]+_[0-9a-z]+…[0-9a-z]+\b")

UNCOPYABLE = """
const found = [];
const walker = document.createTreeWalker(document.getElementById('main'), NodeFilter.SHOW_TEXT);
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  if (!/[a-z]+_[0-9a-z]+…[0-9a-z]+/.test(node.data)) continue;
  const holder = node.parentElement.closest('.id-copy');
  const copy = holder && holder.querySelector(':scope > button.copy');
  const [head, tail] = node.data.trim().split('…');
  if (!copy || !copy.dataset.copy.startsWith(head) || !copy.dataset.copy.endsWith(tail)) {
    found.push(node.data);
  }
}
return found;
"""


def test_u9_every_shortened_id_has_a_copy_control_that_copies_it_whole(
    clipboard: Page, site: Site,
) -> None:
    page = clipboard
    conversation = demo_conversation(site, "demo")
    with site.client(ALICE) as client:
        runs = client.get(f"/v1/conversations/{conversation}/runs").json()["items"]
    newest = runs[-1]["run_id"]
    page.sign_in(site, ALICE, f"/c/{conversation}")
    show_tab(page, "runs")
    shown = page.text(f"#panel-body .item[data-run='{newest}'] .short-id")
    assert "…" in shown, shown  # shown in short...
    page.driver.execute_async_script(
        "navigator.clipboard.writeText('nothing yet').then(arguments[arguments.length - 1])")
    copy(page, f"#panel-body .item[data-run='{newest}'] button.copy")
    page.wait(lambda d: clipboard_text(page) == newest, "the run's id copied whole")
    for tab in TABS:
        show_tab(page, tab)
        assert page.js(UNCOPYABLE) == [], tab
    # The list: a conversation's id, copied from its row.
    page.go("/")
    copy(page, f"#conversations tr[data-conversation='{conversation}'] td:first-child "
         "button.copy")
    page.wait(lambda d: clipboard_text(page) == conversation, "the conversation's id copied")
    assert page.js(UNCOPYABLE) == []
    # The operator's page: instances, dead letters, webhook dead letters.
    page.sign_in(site, OPERATOR, "/ops")
    page.find("#instances tr[data-instance]")
    page.find("#dead-letters tr.letter")
    assert SHORTENED.search(page.text("#operator"))
    assert page.js(UNCOPYABLE) == []


# -- search and filter ----------------------------------------------------------------------


def test_u9_conversations_are_searched_and_filtered_by_status(page: Page, site: Site) -> None:
    word = f"find{secrets.token_hex(3)}"
    kept = site.conversation(ALICE, title=f"{word} kept")
    shelved = site.conversation(ALICE, title=f"{word} shelved")
    theirs = site.conversation(BOB, title=f"{word} bob's")
    with site.client(ALICE) as client:
        assert client.post(f"/v1/conversations/{shelved}/archive").status_code == 200
    page.sign_in(site, ALICE)
    page.find("#conversations tbody tr")
    everything = rows(page)
    assert {kept, shelved} <= everything
    assert len(everything) > 2
    page.find("#search").send_keys(word)
    page.wait(lambda d: rows(page) == {kept, shelved}, "the two found by title")
    assert "2 of the" in page.text("#shown-count")
    status = Select(page.find("#status-filter"))
    status.select_by_value("archived")
    page.wait(lambda d: rows(page) == {shelved}, "only the archived one")
    status.select_by_value("idle")
    page.wait(lambda d: rows(page) == {kept}, "only the idle one")
    status.select_by_value("")
    page.find("#search").clear()
    page.find("#search").send_keys(kept[-10:])  # by its id
    page.wait(lambda d: rows(page) == {kept}, "found by id")
    page.find("#search").clear()
    page.find("#search").send_keys("nothing-is-called-this")
    page.wait(lambda d: rows(page) == set(), "nothing found")
    assert "matches" in page.text("#conversations .empty")
    # An operator finds by owner too: the word and "bob" find bob's one alone.
    page.sign_in(site, OPERATOR)
    page.find("#conversations tbody tr")
    page.find("#search").send_keys(word)
    page.wait(lambda d: rows(page) == {kept, shelved, theirs}, "every owner's")
    page.find("#search").send_keys(" bob")
    page.wait(lambda d: rows(page) == {theirs}, "bob's alone")


# -- children as a tree ---------------------------------------------------------------------


def test_u9_a_childs_own_children_are_nested_under_it(page: Page, site: Site) -> None:
    """In the conversation's Children panel, and in the list of conversations."""
    conversation = site.conversation(ALICE, tools=("spawn",), title="two levels")
    page.sign_in(site, ALICE, f"/c/{conversation}")
    site.post(ALICE, conversation, "delegate twice")
    page.find("#messages .msg.runtime.notice[data-origin='child']")
    show_tab(page, "children")

    def nested(driver: Any) -> tuple[Any, Any] | None:
        found = driver.find_elements(
            By.CSS_SELECTOR, "#panel-body ul.tree > li.child > ul.tree > li.child")
        if not found:
            return None
        grandchild = found[0]
        child = grandchild.find_element(By.XPATH, "../..")
        # Each reply where it went: the child's here, the grandchild's to the child.
        relays = [child.find_element(By.CSS_SELECTOR, ":scope > .request .relay").text,
                  grandchild.find_element(By.CSS_SELECTOR, ":scope > .request .relay").text]
        if not ("to this conversation" in relays[0] and "to its parent" in relays[1]):
            return None
        return child, grandchild
    child, grandchild = page.wait(nested, "the grandchild under its parent")
    assert "middle" in child.find_element(By.CSS_SELECTOR, ".request").text
    assert "counting" in grandchild.find_element(By.CSS_SELECTOR, ".request").text
    # Drawn nested: the grandchild's line starts further in than its parent's.
    assert (grandchild.rect["x"]
            > child.find_element(By.CSS_SELECTOR, ".request").rect["x"])
    assert len(page.all("#panel-body ul.tree[data-depth='0'] > li.child")) == 1
    family = [conversation, str(child.get_attribute("data-child")),
              str(grandchild.get_attribute("data-child"))]
    grandchild.find_element(By.CSS_SELECTOR, ".request a").click()
    page.wait(lambda d: any("one two three" in str(m.get_attribute("textContent"))
                            for m in page.all("#messages .msg.assistant .text")),
              "the grandchild's own transcript")
    # The list too: each under the one that opened it, set in one step further.

    def drawn(driver: Any) -> list[tuple[str, str, str]] | None:
        placed = [(str(r.get_attribute("data-conversation")), str(r.get_attribute("data-depth")),
                   str(r.get_attribute("data-parent"))) for r in page.all(
                       "#conversations tbody tr[data-conversation]")]
        ids = [p[0] for p in placed]
        if family[0] not in ids:
            return None
        start = ids.index(family[0])
        return placed[start:start + 3]
    page.go("/")
    page.wait(lambda d: drawn(d) == [(family[0], "0", "None"), (family[1], "1", family[0]),
                                     (family[2], "2", family[1])], "the family in the list")
    links = [page.find(f"#conversations tr[data-conversation='{c}'] td:first-child a")
             for c in family]
    assert links[0].rect["x"] < links[1].rect["x"] < links[2].rect["x"]


# -- instances folded -----------------------------------------------------------------------


def test_u9_instances_are_folded_to_the_running_ones_and_a_count_of_the_gone(
    page: Page, site: Site,
) -> None:
    with site.client(OPERATOR) as client:
        instances = client.get("/v1/instances", params={"limit": 1000}).json()["items"]
    gone = [i["instance_id"] for i in instances if i["state"] == "stopped"]
    running = [i["instance_id"] for i in instances if i["state"] != "stopped"]
    assert gone, "the demo's database holds instances that stopped (its restart among them)"
    page.sign_in(site, OPERATOR, "/ops")
    page.find("#instances tr[data-instance] .serving")
    # The page redraws its tables as the instances' heartbeats arrive: each is read in one step.
    assert set(page.attributes("#instances > table tr[data-instance]", "data-instance")) == set(
        running)
    assert page.attributes("#gone-instances", "open") == [None]  # folded
    assert page.text("#gone-instances summary") == f"{len(gone)} gone (stopped)"
    assert not any(page.shown("#gone-instances tr[data-instance]"))
    page.click("#gone-instances summary")
    page.wait(lambda d: all(page.shown("#gone-instances tr[data-instance]")),
              "the gone ones unfolded")
    assert set(page.attributes("#gone-instances tr[data-instance]", "data-instance")) == set(gone)


# -- labels ---------------------------------------------------------------------------------


def test_u9_a_stopped_run_reads_stopped_once(page: Page, site: Site) -> None:
    conversation = site.conversation(ALICE, title="stopped once")
    page.sign_in(site, ALICE, f"/c/{conversation}")
    stop_a_slow_answer(page)
    glance = page.text(".glance")
    assert glance.lower().count("stopped") == 1, glance
    assert "newest run" in glance
    show_tab(page, "runs")
    card = page.find("#panel-body .item[data-status='stopped']")
    said = card.find_element(By.CSS_SELECTOR, ".line").text
    assert said.lower().count("stopped") == 1, said


def test_u9_an_operators_post_is_marked_as_the_operators(page: Page, site: Site) -> None:
    conversation = site.conversation(ALICE, title="an operator steps in")
    site.post(ALICE, conversation, "from alice")
    site.post(OPERATOR, conversation, "from the operator")
    with site.client(OPERATOR) as client:
        inputs = client.get(f"/v1/conversations/{conversation}/inputs").json()["items"]
    assert {i["authored_by"]["handle"] for i in inputs} <= {"alice", "operator"}
    for token in (ALICE, OPERATOR):
        page.sign_in(site, token, f"/c/{conversation}")

        def said(driver: Any) -> dict[str, tuple[str, str]] | None:
            found = {}
            for message in driver.find_elements(By.CSS_SELECTOR, "#messages .msg.person"):
                text = message.find_element(By.CSS_SELECTOR, ".text").text
                header = message.find_element(By.CSS_SELECTOR, "header")
                found[text] = (header.find_element(By.CSS_SELECTOR, ".who").text.lower(),
                               header.text)
            return found if len(found) == 2 else None
        shown = page.wait(said, "both posts")
        assert shown["from the operator"][0] == "operator"
        assert "posted by an operator, not by the owner (alice)" in shown["from the operator"][1]
        assert shown["from alice"][0] == "person"
        assert "operator" not in shown["from alice"][1]


# -- plain words ----------------------------------------------------------------------------

# The page's own words (not what a person, the model or a tool wrote): its headings, labels,
# badges, panels and the operator's cards, as shown.
OWN_WORDS = """
const parts = [];
for (const el of document.querySelectorAll('.top, .heading, .filters, thead, aside.right, '
    + '#operator, .msg header, .event-line, .glance, #conversations tbody td:not(:first-child)')) {
  parts.push(el.innerText);
}
return parts.join('\\n');
"""
JARGON = (
    re.compile(r"\([A-Z]{1,2}\d{1,2}\)"),  # a requirement's id
    re.compile(r"materiali[sz]", re.I),
    re.compile(r"\bseq\b", re.I),
    re.compile(r"\b\w+=\d"),  # delivered=1
    re.compile(r"\bkernel\b", re.I),
    re.compile(r"\bleased\b", re.I),
    re.compile(r"\bconsumed\b", re.I),
    re.compile(r"\bits mail\b", re.I),
)


def test_u9_the_console_speaks_plain_words(page: Page, site: Site) -> None:
    seen: list[str] = []
    stopped = site.conversation(ALICE, tools=("shell",), title="plain words")
    page.sign_in(site, ALICE, f"/c/{stopped}")
    stop_a_slow_answer(page)
    site.post(ALICE, stopped, "please run in the background")
    page.find("#messages .msg.runtime.notice")
    for conversation in (stopped, demo_conversation(site, "demo"),
                         demo_conversation(site, "delegation")):
        page.go(f"/c/{conversation}")
        page.find(f"#conversation[data-conversation='{conversation}']")
        for tab in TABS:
            show_tab(page, tab)
            seen.append(page.js(OWN_WORDS))
    page.go("/")
    page.find("#conversations tbody tr")
    seen.append(page.js(OWN_WORDS))
    page.sign_in(site, OPERATOR, "/ops")
    page.find("#instances tr[data-instance]")
    page.find("#dead-letters tr.letter")
    seen.append(page.js(OWN_WORDS))
    words = "\n".join(seen)
    for jargon in JARGON:
        assert not jargon.search(words), (jargon.pattern, jargon.search(words))


# -- the docs' commands ---------------------------------------------------------------------


def doc_blocks() -> list[list[str]]:
    """The shell blocks of docs/console.md, each as its command lines (comments dropped)."""
    blocks = re.findall(r"```sh\n(.*?)```", DOC.read_text("utf-8"), re.S)
    return [[line for line in block.splitlines()
             if line.strip() and not line.lstrip().startswith("#")] for block in blocks]


def run_block(lines: list[str], folder: Path, port: int) -> subprocess.Popen[bytes]:
    """A block of the doc, run by bash as written in ``folder``; its last line, ``tidings
    serve``, listens on ``port`` (the one thing added) and is what the process becomes."""
    assert lines[-1].startswith("tidings serve "), lines
    script = [*lines[:-1], f"exec {lines[-1]} --port {port}"]
    bindir = str(Path(sys.executable).parent)
    with (folder / f"block-{port}.log").open("wb") as log:
        return subprocess.Popen(
            ["bash", "-e", "-c", "\n".join(script)], cwd=folder, stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PATH": bindir + os.pathsep + os.environ["PATH"]})


async def answering(url: str) -> int:
    async with httpx.AsyncClient(timeout=5) as client:
        try:
            return (await client.get(f"{url}/health")).status_code
        except httpx.HTTPError:
            return 0


def test_u9_the_docs_commands_open_the_console_and_their_tokens_sign_in(
    browser: Page, tmp_path: Path,
) -> None:
    opening, on_the_demo = doc_blocks()
    for lines, token, who, sees in ((opening, "ops", "operator", None),
                                    (on_the_demo, "secret-a", "alice", "demo")):
        port = free_port()
        process = run_block(lines, tmp_path, port)
        url = f"http://127.0.0.1:{port}"

        async def up(url: str = url) -> int:
            return await answering(url)

        def listed_titles(driver: Any) -> set[str]:
            return {r.text for r in browser.all("#conversations tbody td:first-child a")}

        def demo_listed(driver: Any, sees: str | None = sees) -> bool:
            return sees in listed_titles(driver)
        try:
            asyncio.run(eventually(up, lambda status: status == 200, what=f"{url} answering",
                                   within_s=120))
            browser.sign_in(Site("sqlite", str(tmp_path), url, process, 0, tmp_path), token)
            assert browser.text("#me") == who
            browser.find("#conversations")
            if sees is not None:  # the demo's conversations are alice's
                browser.wait(demo_listed, "the demo's conversations")
        finally:
            stop(process)
