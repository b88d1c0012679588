"""B15 and B14 in the console, in headless Chromium, against a real ``tidings serve`` whose MCP
servers are declared in its config file (the booking desk asks, bulky reports progress), on
both backends: the desk's question appears at the top of the conversation as a form built from
its schema (required marked); an answer off the schema shows the server's words under the form
and changes nothing; the right one answers it -- the form goes, the answered list says how it
ended, and the call's result is the answer; a running call shows its progress on the call.
The form builder is also checked on a schema of every kind a form can ask (enum, boolean,
number, array of an enum)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium.webdriver.support.ui import Select

from tests.conftest import drop_postgres_database, fresh_postgres_database
from tests.console.conftest import ALICE, Page, Site, serve, stop
from tests.service.asking import config

MODEL = "asking"
PROFILE = {"model": MODEL, "tools": ["desk.book", "bulky.steps"]}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
         ) -> Iterator[Site]:
    """``tidings serve`` on a fresh database of each backend, with the desk and bulky."""
    folder = tmp_path_factory.mktemp(f"questions-{request.param}")
    admin: str | None = None
    if request.param == "sqlite":
        database = str(folder / "questions.db")
    else:
        admin = request.getfixturevalue("postgres_template")
        database = fresh_postgres_database(admin)
    try:
        process, url, _ = serve(database, folder, *config(folder, MODEL))
        live = Site(request.param, database, url, process, 0, folder)
        try:
            yield live
        finally:
            stop(live.process)
    finally:
        if admin is not None:
            drop_postgres_database(admin, database)


def created(site: Site) -> str:
    """A new conversation of alice's that may call the desk and bulky."""
    with site.client(ALICE) as client:
        answer = client.post("/v1/conversations", json={"profile": PROFILE})
        assert answer.status_code == 201, answer.text
        return str(answer.json()["conversation_id"])


def asking(site: Site, text: str) -> str:
    """A new conversation of alice's that may call the desk and bulky; ``text`` posted."""
    conversation = created(site)
    site.post(ALICE, conversation, text)
    return conversation


def statuses(site: Site, conversation: str) -> list[str]:
    with site.client(ALICE) as client:
        body = client.get(f"/v1/conversations/{conversation}/questions").json()
    return [q["status"] for q in body["questions"]]


def test_b15_a_question_is_answered_in_the_console_and_an_invalid_answer_changes_nothing(
    page: Page, site: Site,
) -> None:
    conversation = asking(site, "book it")
    page.sign_in(site, ALICE, f"/c/{conversation}")
    form = page.find("#questions form.question")
    assert "How many seats on May 3?" in page.text("#questions form.question .message")
    assert "mcp:desk" in page.text("#questions form.question .asker")
    assert page.text("#questions h2") == "A question for you"
    label = page.text("#questions .field[data-field='seats'] label")
    assert label.startswith("seats")
    assert page.all("#questions .field[data-field='seats'] .required")
    seats = page.find("#questions .field[data-field='seats'] input")
    assert seats.get_attribute("type") == "number"
    assert "≥ 1" in page.text("#questions .field[data-field='seats'] .hint")

    seats.send_keys("0")
    page.find("#questions button.accept").click()
    page.wait(lambda d: "seats: 0 is less than the minimum of 1" in page.text(
        "#questions .question-error"), "the server's refusal under the form")
    page.shot("b15-question-refused")
    assert statuses(site, conversation) == ["pending"]
    assert page.all("#questions form.question") == [form]  # still there, as it was

    seats.clear()
    seats.send_keys("2")
    page.find("#questions button.accept").click()
    page.wait(lambda d: not page.all("#questions form.question"), "the form goes")
    page.find("#answered-questions li[data-status='accepted']")
    assert '"seats": 2' in page.text("#answered-questions li[data-status='accepted']")
    page.wait(lambda d: "booked 2 seats on May 3" in page.text(
        "#messages details.tool[data-call] .result"), "the call's result is the answer")
    assert statuses(site, conversation) == ["accepted"]
    page.shot("b15-question-answered")


def test_b15_declining_in_the_console_reaches_the_server(page: Page, site: Site) -> None:
    conversation = asking(site, "book it")
    page.sign_in(site, ALICE, f"/c/{conversation}")
    page.find("#questions form.question button.decline").click()
    page.find("#answered-questions li[data-status='declined']")
    page.wait(lambda d: "not done: the person chose decline" in page.text(
        "#messages details.tool[data-call] .result"), "the server heard the decline")
    assert statuses(site, conversation) == ["declined"]


def test_b14_a_running_mcp_call_shows_its_progress(page: Page, site: Site) -> None:
    # The call lasts 1.2 s: the page watches before the post, or a slow page load may first
    # show the call already answered.
    conversation = created(site)
    page.sign_in(site, ALICE, f"/c/{conversation}")
    page.find("#feed-state[data-state='live']")
    site.post(ALICE, conversation, "count it")
    state = "#messages details.tool[data-call] .tool-state"
    page.wait(lambda d: page.all(f"{state}[data-progress]") and "/1.2 — step" in page.text(
        state), "the call's progress")
    bar = page.find("#messages details.tool[data-call] progress.call-progress")
    assert bar.get_attribute("max") == "1.2"
    page.shot("b14-call-progress")
    page.wait(lambda d: "done after" in page.text("#messages details.tool[data-call] .result"),
              "the call's result")
    assert page.text(state).startswith("answered")


FORM = {
    "type": "object",
    "properties": {
        "size": {"type": "string", "enum": ["S", "M", "L"], "title": "Size"},
        "gift": {"type": "boolean"},
        "weight": {"type": "number", "maximum": 10},
        "colours": {"type": "array", "items": {"type": "string", "enum": ["red", "blue"]}},
        "note": {"type": "string", "description": "for the courier"},
    },
    "required": ["size"],
}


def test_b15_the_form_is_built_from_the_schema_input_by_type(page: Page, site: Site) -> None:
    """The builder alone, on a question the page is given (no server asks this one): what it
    would send for what was filled in."""
    page.sign_in(site, ALICE, "/")
    page.find("#conversations")
    page.driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        window.__sent = null;
        import('./questions.js').then(({ questionCard }) => {
          const question = { question_id: 'qst_form', asker: 'mcp:shop', kind: 'elicitation',
            message: 'What should we send?', requested_schema: arguments[0], run_id: null,
            task_key: null };
          const card = questionCard(question, '/v1/conversations/conv_x',
            { notify() {}, failed() {} }, () => {}, (body) => { window.__sent = body; });
          card.id = 'form-under-test';
          document.querySelector('main').prepend(card);
          done();
        });
    """, FORM)
    page.find("#form-under-test")
    size = Select(page.find("#form-under-test .field[data-field='size'] select"))
    assert [o.text for o in size.options] == ["S", "M", "L"]  # required: no empty choice
    assert page.all("#form-under-test .field[data-field='size'] .required")
    assert not page.all("#form-under-test .field[data-field='gift'] .required")
    assert page.find("#form-under-test .field[data-field='gift'] input").get_attribute(
        "type") == "checkbox"
    assert page.find("#form-under-test .field[data-field='weight'] input").get_attribute(
        "type") == "number"
    assert len(page.all("#form-under-test .field[data-field='colours'] input[type=checkbox]")) \
        == 2
    assert "for the courier" in page.text("#form-under-test .field[data-field='note']")
    size.select_by_visible_text("M")
    page.find("#form-under-test .field[data-field='gift'] input").click()
    page.find("#form-under-test .field[data-field='weight'] input").send_keys("2.5")
    page.find("#form-under-test .field[data-field='colours'] input[value='blue']").click()
    page.find("#form-under-test button.accept").click()
    sent = page.wait(lambda d: page.js("return window.__sent"), "the answer it sends")
    assert sent == {"action": "accept", "content": {
        "size": "M", "gift": True, "weight": 2.5, "colours": ["blue"]}}
    page.js("document.getElementById('form-under-test').remove()")

