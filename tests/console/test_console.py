"""The operator console in headless Chromium, on both backends, over a database ``tidings demo``
filled: sign in; open a conversation and see its answer stream in piece by piece; see a
background task's notice arrive without a reload, marked as the runtime's; approve a held call
and see the run finish; retry a failed run and stop a running one; follow a child; read a task's
output; see another principal's conversation as "not found"; see an injection in a tool's output
rendered as text; see a remote A2A child as one (its agent, remote task and state); and, as an
operator, every conversation, the instances, the backlog and the dead letters -- inspected,
retried, discarded -- and a locked runtime unlocked."""

from __future__ import annotations

import itertools
from pathlib import Path

import httpx
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from tests.console.conftest import (
    ALICE,
    BOB,
    INJECTION_END,
    INJECTIONS,
    KEY,
    OPERATOR,
    STREAMED,
    WAIT_S,
    Page,
    Site,
    serve,
    stop,
)


def assistant_said(page: Page, text: str) -> bool:
    return any(text in str(m.get_attribute("textContent"))
               for m in page.all("#messages .msg.assistant .text"))


def run_status(page: Page) -> str:
    return str(page.find("#run-status").get_attribute("data-status"))


# -- O1: in the box --------------------------------------------------------------------------


def test_o1_the_console_is_served_by_tidings_serve_with_nothing_from_elsewhere(
    page: Page, site: Site,
) -> None:
    page.open(site)
    page.find("#signin")
    resources = page.js("return performance.getEntriesByType('resource').map(e => e.name)")
    assert resources, "the page loads its scripts and styles"
    assert all(str(r).startswith(site.url + "/console/") for r in resources), resources
    with httpx.Client(base_url=site.url) as client:
        answer = client.get("/console/")
        policy = answer.headers["content-security-policy"]
        assert "script-src 'self'" in policy
        assert "default-src 'none'" in policy
        assert "unsafe-inline" not in policy
        assert answer.headers["x-content-type-options"] == "nosniff"
        bare = client.get("/console")
        assert (bare.status_code, bare.headers["location"]) == (308, "console/")
        assert client.get("/console/app.js").headers["content-type"].startswith(
            "text/javascript")
        assert client.get("/console/nothing-here.js").status_code == 404


# -- O2: sign-in -----------------------------------------------------------------------------


def test_o2_a_token_signs_in_for_the_tab_only_and_never_travels_in_a_url(
    page: Page, site: Site,
) -> None:
    page.open(site)
    if page.all("#signout"):
        page.all("#signout")[0].click()
    page.find("#token").send_keys("not-a-token")
    page.find("#signin button[type=submit]").click()
    page.wait(lambda d: "not accepted" in page.text("#signin-error"), "a refused token")
    assert page.js("return sessionStorage.length") == 0
    page.find("#token").clear()
    page.find("#token").send_keys(ALICE)
    page.find("#signin button[type=submit]").click()
    assert page.text("#me") == "alice"
    page.find("#conversations")
    assert page.js("return document.cookie") == ""
    assert page.js("return sessionStorage.getItem('tidings.console.token')") == ALICE
    assert page.js("return localStorage.length") == 0
    # The token is sent as a header: no URL the page asked for holds it.
    urls = page.js("return performance.getEntriesByType('resource').map(e => e.name)")
    assert not [u for u in urls if ALICE in str(u)]
    assert ALICE not in page.driver.current_url


def test_o2_another_principals_conversation_reads_as_not_found(page: Page, site: Site) -> None:
    theirs = site.conversation(ALICE, title="alice only")
    page.sign_in(site, BOB, f"/c/{theirs}")
    foreign = page.text("#not-found")
    page.go("/c/conv_00000000000000000000000000000000")
    page.wait(lambda d: "conv_0000" in page.text("#not-found"), "the unknown id's page")
    unknown = page.text("#not-found")
    assert "Not found" in foreign
    assert foreign.replace(theirs, "ID") == unknown.replace(
        "conv_00000000000000000000000000000000", "ID")
    # Bob's list does not hold it either.
    page.go("/")
    page.find("#conversations table, #conversations .empty")
    assert not page.all(f"tr[data-conversation='{theirs}']")


# -- O3: live conversations ------------------------------------------------------------------


def test_o3_a_new_conversation_streams_its_answer_piece_by_piece(page: Page, site: Site) -> None:
    page.sign_in(site, ALICE)
    page.find("#new-title").send_keys("streaming")
    page.find("#create-submit").click()
    page.find("#composer-text")
    # Every state the answer in progress passes through, as the page shows it.
    page.js("""
        window.__seen = [];
        const drafts = document.getElementById('drafts');
        new MutationObserver(() => {
          const text = drafts.querySelector('.msg.draft .text');
          if (text) window.__seen.push(text.textContent);
        }).observe(drafts, {subtree: true, childList: true, characterData: true});
    """)
    page.find("#composer-text").send_keys("stream please")
    page.find("#composer-send").click()
    page.wait(lambda d: assistant_said(page, STREAMED), "the committed answer")
    seen = [s for s in page.js("return window.__seen") if s]
    growing = [s for n, s in enumerate(seen) if n == 0 or s != seen[n - 1]]
    assert len(growing) >= 5, growing  # piece by piece, not at once
    assert all(STREAMED.startswith(s) for s in growing)
    assert all(len(a) < len(b) for a, b in itertools.pairwise(growing))
    assert page.all("#drafts .msg") == []  # the draft gave way to the committed message
    person = page.all("#messages .msg.person")
    assert str(person[-1].get_attribute("textContent")).endswith("stream please")
    page.wait(lambda d: run_status(page) == "completed", "the run's status")
    # The run, its model and its tokens.
    page.find("#tab-runs").click()
    row = page.find("#panel-body .item[data-status='completed']")
    assert "scripted" in str(row.get_attribute("textContent"))
    assert " out" in str(row.get_attribute("textContent"))


def test_o3_a_background_tasks_notice_arrives_live_and_is_the_runtimes(
    page: Page, site: Site,
) -> None:
    conversation = site.conversation(ALICE, tools=("shell",), title="the build")
    page.sign_in(site, ALICE, f"/c/{conversation}")
    page.find("#feed-state[data-state='live']")
    page.js("window.__sameLoad = true")
    site.post(ALICE, conversation, "please run in the background")
    notice = page.find("#messages .msg.runtime.notice")
    assert "task" in str(notice.get_attribute("textContent"))
    page.wait(lambda d: assistant_said(page, "The build finished."), "the woken turn's answer")
    assert page.js("return window.__sameLoad") is True  # no reload
    summary = str(page.find("#messages .msg.runtime.notice .summary").get_attribute(
        "textContent"))
    assert "exited" in summary
    assert "built" in summary
    said = str(notice.find_element(By.CSS_SELECTOR, "header").get_attribute("textContent"))
    assert "runtime" in said.lower()
    assert "not by a person" in said
    assert not page.all("#messages .msg.person.notice, #messages .msg.person.runtime")
    # The shell call is folded with its result.
    tool = page.find("#messages details.tool.answered")
    assert "shell" in str(tool.get_attribute("textContent"))
    # O4: the task's state, duration, exit and output pages.
    page.find("#tab-tasks").click()
    row = page.find("#panel-body .item[data-state='exited']")
    assert "exit 0" in str(row.get_attribute("textContent"))
    page.find("#panel-body .show-output").click()
    page.wait(lambda d: "built" in page.text("#panel-body .output-page"), "the output page")
    page.shot("console-conversation")  # docs/console-conversation.png is SQLite's


def test_o6_a_held_call_is_approved_and_the_run_finishes(page: Page, site: Site) -> None:
    conversation = site.conversation(ALICE, tools=("shell",), approval_mode="always",
                                     title="deploy")
    page.sign_in(site, ALICE, f"/c/{conversation}")
    page.find("#composer-text").send_keys("deploy it")
    page.find("#composer-send").click()
    page.wait(lambda d: run_status(page) == "awaiting_approval", "the held call")
    approval = page.find("#approvals .approval")
    assert "shell" in str(approval.get_attribute("textContent"))
    approval.find_element(By.CSS_SELECTOR, "button.approve").click()
    page.wait(lambda d: run_status(page) == "completed", "the run's end")
    page.wait(lambda d: assistant_said(page, "Deployed."), "the answer after the call")
    # The waiting calls are read again when the feed says the decision was applied.
    page.wait(lambda d: page.all("#approvals .approval") == [], "no call waiting any more")
    result = page.find("#messages details.tool.answered .result")
    assert "deployed" in str(result.get_attribute("textContent"))


def test_o6_an_injection_in_a_tools_output_is_rendered_as_text(page: Page, site: Site) -> None:
    conversation = site.conversation(ALICE, tools=("shell",), title="injection")
    page.sign_in(site, ALICE, f"/c/{conversation}")
    title = page.driver.title
    site.post(ALICE, conversation, "inject the corpus")
    page.wait(lambda d: assistant_said(page, "Shown."), "the answer after the output")
    page.find("#messages details.tool summary").click()
    shown = page.text("#messages details.tool .result")
    assert INJECTION_END in shown
    for payload in INJECTIONS:
        assert payload.replace("\r", "") in shown.replace("\r", ""), payload
    assert page.js("return window.__pwned === undefined")
    markup = page.js("return document.querySelectorAll('#transcript img, #transcript script, "
                     "#transcript svg, #transcript iframe, #transcript style, #transcript a, "
                     "#click-me').length")
    assert markup == 0
    assert page.driver.title == title
    assert page.find("body").is_displayed()


# -- O4: background state --------------------------------------------------------------------


def test_o4_children_show_as_a_tree_with_their_relay_status(page: Page, site: Site) -> None:
    conversation = site.conversation(ALICE, tools=("spawn",), title="delegating")
    page.sign_in(site, ALICE, f"/c/{conversation}")
    page.find("#composer-text").send_keys("delegate please")
    page.find("#composer-send").click()
    mail = page.find("#messages .msg.runtime.notice[data-origin='child']")
    assert "child" in str(mail.get_attribute("textContent"))
    page.wait(lambda d: assistant_said(page, "Read the report."), "the reply to the child's mail")
    page.find("#tab-children").click()
    node = page.find("#panel-body ul.tree li.child")
    page.wait(lambda d: "relayed" in str(node.get_attribute("textContent")), "relayed")
    node.find_element(By.CSS_SELECTOR, "a").click()
    page.wait(lambda d: assistant_said(page, "one two three"), "the child's own transcript")


def test_p5_a_remote_child_shows_its_agent_remote_task_and_state(page: Page, site: Site) -> None:
    """The demo's editor conversation delegated to a remote A2A agent: its child is shown as a
    remote one (the agent, the remote task, its state), not as a local conversation."""
    with site.client(ALICE) as client:
        listed = client.get("/v1/conversations", params={"limit": 100}).json()["items"]
        [editor] = [c["conversation_id"] for c in listed if c["title"] == "editor"]
        [request] = client.get(f"/v1/conversations/{editor}/children").json()["items"]
    assert (request["agent"], request["remote_state"]) == ("editor", "completed")
    page.sign_in(site, ALICE, f"/c/{editor}")
    page.find("#tab-children").click()

    def remote_node(driver: WebDriver) -> tuple[str, str, str] | None:
        # read in one go: the panel is drawn again when the conversation's feed moves
        node = driver.find_element(By.CSS_SELECTOR,
                                   "#panel-body ul.tree li.child.remote[data-agent='editor']")
        shown = str(node.get_attribute("textContent"))
        task = node.find_element(By.CSS_SELECTOR, ".remote-task-id")
        state = node.find_element(By.CSS_SELECTOR, ".remote-state")
        return (shown, str(task.get_attribute("textContent")),
                str(state.get_attribute("data-state"))) if "relayed" in shown else None
    shown, task, state = page.wait(remote_node, "the remote child, relayed")
    assert "A2A agent editor" in shown
    assert (task, state) == (request["remote_task_id"], "completed")


# -- O5: act ---------------------------------------------------------------------------------


def test_o5_a_failed_run_is_retried_and_a_running_one_stopped(page: Page, site: Site) -> None:
    conversation = site.conversation(ALICE, title="failing")
    page.sign_in(site, ALICE, f"/c/{conversation}")
    page.find("#composer-text").send_keys("fail please")
    page.find("#composer-send").click()
    page.wait(lambda d: run_status(page) in ("failed", "needs_attention"), "the failed run")
    assert page.find("#run-note").text  # its failure code, in words beside the status
    page.find("#retry-run").click()
    page.find("#notices .toast")
    page.find("#tab-runs").click()
    page.wait(lambda d: len(page.all("#panel-body .item[data-run]")) == 2, "the retried run")

    page.find("#composer-text").send_keys("slow please")
    page.find("#composer-send").click()
    page.find("#drafts .msg.draft")
    # A steer while it writes: it waits, marked so, for the running turn's next safe point.
    Select(page.find("#composer-mode")).select_by_value("steer")
    page.find("#composer-text").send_keys("and also this")
    page.find("#composer-send").click()
    pending = page.find("#pending .msg.pending-input.person")
    assert "steering" in str(pending.get_attribute("textContent"))
    page.find("#stop-turn").click()
    page.wait(lambda d: page.all("#messages .msg.person") and str(page.all(
        "#messages .msg.person")[-1].get_attribute("textContent")).endswith("and also this"),
        "the steer read by a turn")
    assert page.all("#pending .msg") == []
    page.find("#tab-runs").click()
    page.find("#panel-body .item[data-status='stopped']")
    page.wait(lambda d: not page.all("#drafts .msg"), "no answer in progress")


def test_o5_a_refusal_is_shown_in_plain_words(page: Page, site: Site) -> None:
    conversation = site.conversation(ALICE, title="archived")
    page.sign_in(site, ALICE, f"/c/{conversation}")
    page.find("#composer-text")
    with site.client(ALICE) as client:
        assert client.post(f"/v1/conversations/{conversation}/archive").status_code == 200
    page.find("#composer-text").send_keys("anyone there?")
    page.find("#composer-send").click()
    said = page.text("#notices .toast.error")
    assert "archived" in said
    assert "{" not in said  # words, not a JSON body


def test_o5_an_operator_sees_everything_and_settles_dead_letters(
    page: Page, site: Site,
) -> None:
    page.sign_in(site, OPERATOR)
    page.find("#conversations")
    assert page.text("#me") == "operator"
    # Every principal's conversations, the demo's among them, with their owners.
    page.find("#conversations tbody tr")
    # Read in one go, again if the list is drawn anew meanwhile (the page's wait retries).
    owners = page.wait(lambda d: {c.text for c in page.all(
        "#conversations tbody tr td:nth-child(2)")}, "the owners")
    assert "alice" in owners
    page.find("#nav-operator").click()
    page.find("#instances tr[data-instance] .serving")
    assert page.text("#stat-dead .value") == "2"  # the demo's and the one seeded
    webhook = page.find("#webhook-dead-letters tr.webhook-letter")  # the one seeded
    assert "in_dead.1" in webhook.text
    assert "http_503" in webhook.text
    letters = page.all("#dead-letters tr.letter")
    assert len(letters) == 2
    extra = page.find(f"#dead-letters tr[data-delivery='{site.extra_dead_letter}']")
    extra.find_element(By.CSS_SELECTOR, "button.inspect").click()
    payload = page.find("#dead-letters .letter-detail .payload")
    assert '"n": 1' in str(payload.get_attribute("textContent"))
    page.shot("console-dead-letters")  # docs/console-dead-letters.png is SQLite's

    other = page.wait(lambda d: next(str(row.get_attribute("data-delivery")) for row in page.all(
        "#dead-letters tr.letter") if row.get_attribute("data-delivery") != str(
        site.extra_dead_letter)), "the demo's dead letter")
    page.find(f"#dead-letters tr[data-delivery='{other}'] button.retry").click()
    page.wait(lambda d: not page.all(f"#dead-letters tr[data-delivery='{other}']"), "retried")
    discard = f"#dead-letters tr[data-delivery='{site.extra_dead_letter}'] button.discard"
    page.find(discard).click()
    page.wait(lambda d: "sure" in page.find(discard).text, "asked to confirm")
    page.find(discard).click()
    page.wait(lambda d: not page.all("#dead-letters tr.letter"), "no dead letters left")
    page.wait(lambda d: page.text("#stat-dead .value") == "0", "the count")


def test_o5_an_operator_unlocks_a_locked_runtime(
    page: Page, site: Site, tmp_path: Path,
) -> None:
    database = str(tmp_path / "locked.db") if site.backend == "sqlite" else site.database
    process, url, _ = serve(database, tmp_path, "--locked")
    try:
        locked = Site(site.backend, database, url, process, 0, tmp_path)
        page.sign_in(locked, OPERATOR, "/ops")
        page.find("#master-key").send_keys(KEY.secret.hex())
        page.find("#unlock-form button[type=submit]").click()
        page.wait(lambda d: not page.all("#unlock-form"), "the unlock card gone")
        with httpx.Client(base_url=url, timeout=WAIT_S) as client:
            assert client.get("/health").json()["status"] == "ok"
    finally:
        stop(process)


def test_o3_the_feed_resumes_after_a_server_restart_without_a_reload(
    page: Page, site: Site,
) -> None:
    conversation = site.conversation(ALICE, title="restarted")
    page.sign_in(site, ALICE, f"/c/{conversation}")
    site.post(ALICE, conversation, "before the restart")
    page.wait(lambda d: assistant_said(page, "before the restart"), "the first answer")
    page.js("window.__sameLoad = true")
    page.server_away = True
    site.restart()
    site.post(ALICE, conversation, "after the restart")
    page.wait(lambda d: assistant_said(page, "after the restart"), "the answer after it")
    page.find("#feed-state[data-state='live']")
    assert page.js("return window.__sameLoad") is True  # the page was not reloaded
    said = [str(m.get_attribute("textContent")) for m in page.all("#messages .msg .text")]
    # Resumed after the last event it had: nothing shown twice, nothing missed.
    assert said == ["before the restart"] * 2 + ["after the restart"] * 2
